/**
 * Suite `outbound-tap`: what counting a redirected HTTP/1 connection's requests costs the
 * outbound proxy in transparent mode (src/proxy/outbound/http1-tap.ts). The tunnel's bytes are
 * piped untouched either way; the tap reads a copy of each direction with node's parser and
 * makes one exchange per request. One operation = one request chunk from the client side and its
 * response chunk from the upstream side, on stand-in sockets (the `data` events the pipe also
 * gets), with keep-alive: the parsers are reused as on a live connection. The exchange's recorder
 * is a counter here, so the figure is the tap's own work, not the metric series' update (which
 * the forward proxy pays as well).
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { HttpExchange, type HttpRecorder } from '../src/proxy/metrics/http.js';
import { tapHttp1 } from '../src/proxy/outbound/http1-tap.js';
import { type BenchResult, type MicroTask, runMicro } from './harness.js';

function tapped(): { client: EventEmitter; upstream: EventEmitter; ended: () => number } {
  const client = new EventEmitter();
  const upstream = new EventEmitter();
  let ended = 0;
  const recorder: HttpRecorder = {
    end: () => {
      ended++;
    },
  };
  tapHttp1(client as unknown as Socket, upstream as unknown as Socket, () => new HttpExchange(recorder));
  return { client, upstream, ended: () => ended };
}

/** Runs the suite. */
export async function runOutboundTapSuite(): Promise<BenchResult[]> {
  const request = Buffer.from(
    'GET /api/vote?choice=%F0%9F%8D%A9 HTTP/1.1\r\nhost: web-svc.emojivoto.svc.cluster.local\r\nuser-agent: node\r\naccept: */*\r\nconnection: keep-alive\r\n\r\n',
  );
  const response = Buffer.from(
    'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 13\r\ndate: Sat, 28 Nov 2026 08:00:00 GMT\r\n\r\n{"ok":"vote"}',
  );
  const grpcRequest = Buffer.from(
    'POST /emojivoto.v1.VotingService/VoteDoughnut HTTP/1.1\r\nhost: voting-svc:8080\r\ncontent-type: application/grpc\r\ncontent-length: 5\r\n\r\n\0\0\0\0\0',
  );
  const grpcResponse = Buffer.from(
    'HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ntransfer-encoding: chunked\r\n\r\n5\r\n\0\0\0\0\0\r\n0\r\ngrpc-status: 0\r\n\r\n',
  );
  const plain = tapped();
  const grpc = tapped();
  const exchange = (t: ReturnType<typeof tapped>, req: Buffer, res: Buffer) => () => {
    t.client.emit('data', req);
    t.upstream.emit('data', res);
    return t.ended();
  };
  const tasks: MicroTask[] = [
    { name: 'tap/http1/keep-alive exchange', op: exchange(plain, request, response), batch: 64 },
    { name: 'tap/http1/grpc-shaped exchange (chunked, trailers)', op: exchange(grpc, grpcRequest, grpcResponse), batch: 64 },
  ];
  const results = await runMicro(tasks);
  if (plain.ended() === 0 || grpc.ended() === 0) throw new Error('outbound-tap: the tap counted no exchange');
  return results;
}
