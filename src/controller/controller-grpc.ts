/**
 * The controller's gRPC servers, each on its own listener: inbound and outbound policy (8090)
 * from the policy and endpoints indexes, identity (8080) from the CA, destination and profiles
 * (8086) from the endpoints index. They serve the controller's own certificate (unless
 * plaintext) and pick up its renewals.
 */
import {
  type DestinationEndpoint,
  type DestinationEvent,
  type DestinationResolver,
  destinationService,
  type GrpcServerHandle,
  identityService,
  inboundPolicyService,
  type OutboundResolver,
  outboundPolicyService,
  type ProfileResolver,
  startGrpcServer,
} from '../api/index.js';
import { type Endpoint, type EndpointEvent, type EndpointsIndex, OutboundLookups, parseEndpointsPath } from '../index/index.js';
import { type Logger, MeshError } from '../shared/index.js';
import type { ControllerIdentity } from './controller-identity.js';
import type { ControllerIndexes } from './controller-indexes.js';
import type { ControllerMetrics } from './controller-metrics.js';
import type { ControllerListen, ControllerOptions, ListenAddress } from './controller-types.js';
import type { ShutdownStack } from './shutdown-stack.js';

/** The started gRPC servers. */
export interface ControllerGrpcServers {
  readonly policy: GrpcServerHandle;
  readonly identity: GrpcServerHandle;
  readonly destination: GrpcServerHandle;
}

/**
 * Starts the policy, identity and destination servers in this order (each stopped by `cleanups`).
 * Throws `MeshError` `ERR_LISTEN` naming the API whose address cannot be served.
 */
export async function startGrpcServers(
  opts: ControllerOptions,
  listen: ControllerListen,
  { ca, serverCert }: ControllerIdentity,
  { index, endpoints, metrics, changeStartedAt }: ControllerIndexes,
  log: Logger,
  cleanups: ShutdownStack,
): Promise<ControllerGrpcServers> {
  const cert = serverCert.current;
  const tls = opts.grpcPlaintext === true ? undefined : { certPem: cert.certPem + cert.chainPem, keyPem: cert.keyPem };
  const startOne = async (name: string, at: ListenAddress, services: Parameters<typeof startGrpcServer>[0]['services']) => {
    try {
      const s = await startGrpcServer({ host: at.host, port: at.port, ...(tls !== undefined ? { tls } : {}), services });
      serverCert.serve(s);
      cleanups.push(() => s.close(2000));
      return s;
    } catch (e) {
      throw new MeshError('ERR_LISTEN', `cannot serve the ${name} API on ${at.host}:${at.port}: ${(e as Error).message}`, { cause: e });
    }
  };
  const outbound = new OutboundLookups(endpoints, { clusterDomain: opts.clusterDomain ?? 'cluster.local' });
  const policy = await startOne('policy', listen.policy, [
    inboundPolicyService(index, {
      onStreamOpen: () => metrics.watchStreams.inc(),
      onStreamClose: () => metrics.watchStreams.dec(),
      onUpdateSent: (_v, initial) => {
        if (initial) return;
        metrics.updatesSent.inc();
        metrics.updateLatency.observe(Math.max(0, Date.now() - changeStartedAt()) / 1000);
      },
    }),
    outboundPolicyService(outboundResolver(outbound)),
  ]);
  const identity = await startOne('identity', listen.identity, [
    identityService(async (req) => {
      const r = await ca.certify({ identity: req.identity, token: req.token, csrDer: req.csrDer });
      if (r.ok) return { ok: true, leafDer: r.leafDer, chainDer: [...r.chainDer], validUntilMs: r.validUntilMs };
      log.info({ identity: req.identity, code: r.code, reason: r.reason }, `certificate refused: ${r.message}`);
      return { ok: false, code: r.code, message: r.message };
    }),
  ]);
  const resolve = destinationResolver(endpoints, opts.clusterDomain ?? 'cluster.local', metrics);
  const destination = await startOne('destination', listen.destination, [destinationService(resolve, profileResolver(outbound))]);
  return { policy, identity, destination };
}

/** Destination/Get: a watch of the endpoints index per stream, labelled with the service. */
function destinationResolver(endpoints: EndpointsIndex, clusterDomain: string, metrics: ControllerMetrics): DestinationResolver {
  return (req) => {
    const target = parseEndpointsPath(req.path, clusterDomain);
    if ('ok' in target) return target;
    const setLabels: Record<string, string> = target.kind === 'service' ? { namespace: target.namespace, service: target.name } : {};
    return {
      ok: true,
      subscribe(listener) {
        const w = endpoints.watch(req.path, (events) => {
          for (const e of events) listener(toDestinationEvent(e, setLabels));
        });
        // The path parsed above, so the watch cannot fail; stay defensive all the same.
        if (!w.ok) {
          listener({ kind: 'noEndpoints', exists: false });
          return () => {};
        }
        metrics.destinationStreams.inc();
        for (const e of w.initial) listener(toDestinationEvent(e, setLabels));
        let done = false;
        return () => {
          if (done) return;
          done = true;
          metrics.destinationStreams.dec();
          w.unsubscribe();
        };
      },
    };
  };
}

/** OutboundPolicies Get/Watch: the lookups' watched policy of the target. */
function outboundResolver(outbound: OutboundLookups): OutboundResolver {
  return (req) => outbound.watchPolicy(req.target);
}

/** Destination/GetProfile: the lookups' watched profile of the path, its endpoint as Destination/Get announces it. */
function profileResolver(outbound: OutboundLookups): ProfileResolver {
  return (req) => {
    const w = outbound.watchProfile(req.path);
    if (!w.ok) return w;
    return {
      ok: true,
      subscribe: (listener) =>
        w.subscribe((p) =>
          listener(p.kind === 'endpoint' ? { kind: 'endpoint', endpoint: toDestinationEndpoint(p.endpoint), opaqueProtocol: p.opaqueProtocol } : p),
        ),
    };
  };
}

function toDestinationEndpoint(e: Endpoint): DestinationEndpoint {
  return {
    ip: e.ip,
    port: e.port,
    weight: e.weight,
    labels: { ...e.labels },
    ...(e.identity !== undefined ? { identity: e.identity, serverName: e.identity } : {}),
    ...(e.opaqueTransportPort !== undefined ? { opaqueTransportPort: e.opaqueTransportPort } : {}),
    ...(e.protocolHint !== undefined ? { protocolHint: e.protocolHint } : {}),
  };
}

function toDestinationEvent(e: EndpointEvent, setLabels: Readonly<Record<string, string>>): DestinationEvent {
  switch (e.kind) {
    case 'add':
      return { kind: 'add', endpoints: e.endpoints.map(toDestinationEndpoint), setLabels };
    case 'remove':
      return { kind: 'remove', addrs: e.addrs.map((a) => ({ ip: a.ip, port: a.port })) };
    case 'noEndpoints':
      return { kind: 'noEndpoints', exists: e.exists };
  }
}
