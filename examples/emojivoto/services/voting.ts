/**
 * The voting service: `emojivoto.v1.VotingService` (one `Vote<Name>` method per emoji, and
 * Results) over plaintext gRPC on `WARD_APP_HOST:GRPC_PORT` (all addresses without it), and the vote counts for Prometheus
 * on `PROM_PORT` (optional). Counts live in memory.
 */
import { type handleUnaryCall, Server } from '@grpc/grpc-js';
import { CATALOG, type VoteMethod } from './catalog.js';
import { type ResultsResponse, type VoteRequest, type VoteResponse, type VotingServiceServer, VotingServiceService } from './gen/voting.js';
import { serveMetrics } from './metrics.js';
import { listenGrpc, serviceProcess } from './service-process.js';

const svc = serviceProcess('voting');
// ward up gives each pod its own address; in a cluster the pod's network is its own: all addresses.
const host = svc.optionalEnv('WARD_APP_HOST') ?? '0.0.0.0';
const port = svc.port('GRPC_PORT');

/** Shortcode -> votes, in catalogue order (so ties keep that order in the results). */
const votes = new Map(CATALOG.map((e) => [e.shortcode, 0]));

function results(): ResultsResponse {
  const counted = [...votes].filter(([, n]) => n > 0).map(([shortcode, n]) => ({ shortcode, votes: n }));
  return { results: counted.sort((a, b) => b.votes - a.votes) };
}

function vote(shortcode: string): handleUnaryCall<VoteRequest, VoteResponse> {
  return (_call, callback) => {
    const n = (votes.get(shortcode) ?? 0) + 1;
    votes.set(shortcode, n);
    svc.log(`vote ${shortcode} (${n})`);
    callback(null, {});
  };
}

// CATALOG has exactly one entry per vote method (see catalog.ts), so this covers them all.
const voteHandlers = Object.fromEntries(CATALOG.map((e) => [e.vote, vote(e.shortcode)])) as Record<VoteMethod, handleUnaryCall<VoteRequest, VoteResponse>>;
const votingService: VotingServiceServer = {
  ...voteHandlers,
  results: (_call, callback) => callback(null, results()),
};

const server = new Server();
server.addService(VotingServiceService, votingService);
await listenGrpc(svc, server, host, port, 'GRPC_PORT');
svc.log(`serving emojivoto.v1.VotingService on ${host}:${port}`);
await serveMetrics(svc, host, [{ name: 'emojivoto_votes_total', help: 'Votes counted, by emoji.', label: 'shortcode', values: () => votes }]);
