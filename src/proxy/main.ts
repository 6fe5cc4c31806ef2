/**
 * The sidecar behind `ward proxy` (local mode, inbound side): wires the proxy's identity, its
 * policy watches, the inbound listeners and the admin server.
 *
 * - Identity (§7): `<sa>.<ns>.serviceaccount.identity.<cp-ns>.<td>`; a certificate from the
 *   controller's identity service (TLS, server name `linkerd-identity.<cp-ns>…`), with the
 *   ServiceAccount token read from its file for every request (projected tokens rotate); each
 *   renewal rotates the mesh TLS context for later handshakes.
 * - Policy (§5.1): one `WatchPort` stream per pod port and for the admin port 4191, to the
 *   controller's policy address (TLS, server name `linkerd-destination.<cp-ns>…`); a broken stream
 *   keeps the last policy and reconnects with backoff.
 * - Inbound: a listener per pod port (on its own local port in local mode) forwarding to the
 *   application, and the mesh port for transport-header connections (§4.2); ports without a policy
 *   fail closed. In transparent mode any port may be redirected: an undeclared one's policy is
 *   discovered on its first connection (a `WatchPort` stream opened then, bounded in number and
 *   dropped when idle; see inbound/policy-watch), and the connection waits for it.
 * - Admin (§4.1): `/live`, `/ready`, `/metrics`, `/debug/policies`, `/tap` (the inbound stacks'
 *   decisions, tap/tap-hub), each request authorized by the port-4191 policy (see
 *   admin-server), with the client's mesh identity when it has one: the
 *   admin port terminates mesh TLS to this proxy's name, and HTTP streams arriving on the mesh
 *   port with a transport header naming 4191 (how ward's outbound reaches any meshed port) are
 *   handed to the admin server with the identity verified there. Plaintext (probes, unmeshed
 *   scrapers) is served as before.
 * - Outbound (optional): the HTTP forward proxy for the application (outbound/proxy), resolving
 *   services through the controller's Destination API (TLS, server name `linkerd-destination.<cp-ns>…`)
 *   and originating mesh TLS with this proxy's certificate, from the pod's address.
 * - Transparent mode (optional, `transparent`): iptables redirects the pod's traffic; no listener
 *   per pod port — the mesh port serves redirected inbound connections as the port they were
 *   headed for, the outbound listener carries redirected outbound ones to their original
 *   destination (SO_ORIGINAL_DST through the native addon, see transport/original-dst).
 *
 * Everything listens at start, before the certificate and the policies arrive; `/ready` says when
 * the proxy can serve: a certificate that has not expired and a policy for every declared port
 * (pod ports and 4191; lazily discovered ports do not count). `/debug/policies` lists the
 * discovered ports after the declared ones.
 * A controller that is unreachable (at start or later) only delays readiness or updates: both
 * clients retry with backoff and log warnings, and what was received stays in force.
 */
import { readFile } from 'node:fs/promises';
import { DestinationClient, InboundPolicyClient } from '../api/index.js';
import { type CompileServerOptions, localhostAuthz, serviceAccountIdentity } from '../core/index.js';
import { Backoff, type BackoffOptions, errorMessage, type Logger, silentLogger } from '../shared/index.js';
import { ADMIN_POLICY_PORT, AdminServer } from './admin-server.js';
import { makeDebugPolicies } from './debug-policies.js';
import { InboundHttp } from './inbound/http.js';
import { PolicyWatcher } from './inbound/policy-watch.js';
import { type InboundHttpHandler, InboundProxy } from './inbound/proxy.js';
import { type MetricsRegistry, registerReadFamily } from './metrics/cells.js';
import { gcCounting } from './metrics/gc.js';
import { type IdentityMetrics, registerIdentityMetrics } from './metrics/identity.js';
import { InboundMetrics } from './metrics/inbound.js';
import { InboundStatsCounter } from './metrics/inbound-stats.js';
import { OutboundMetrics } from './metrics/outbound.js';
import { processMetricsRegistry } from './metrics/process.js';
import type { TransportMetrics } from './metrics/transport.js';
import { DEFAULT_MESH_PORT, OutboundConnector } from './outbound/connector.js';
import { OutboundProxy } from './outbound/proxy.js';
import { DestinationCache } from './outbound/resolver.js';
import { ProxyReadiness } from './readiness.js';
import { TapHub } from './tap/tap-hub.js';
import { type ProxyIdentity, startProxyIdentity } from './tls/identity-bootstrap.js';
import { RotatingMeshTls } from './tls/rotating-mesh-tls.js';
import { loadOriginalDst, type OriginalDstReader } from './transport/original-dst.js';
import type { ProxyBoundPorts, ProxyDebugPolicies, ProxyInboundPort, ProxyOptions, ProxyOutboundOptions, RunningProxy } from './types.js';

export type {
  ProxyBoundInbound,
  ProxyBoundPorts,
  ProxyCertificateInfo,
  ProxyDebugPolicies,
  ProxyDebugPort,
  ProxyInboundPort,
  ProxyListenAddress,
  ProxyOptions,
  ProxyOutboundOptions,
  RunningProxy,
} from './types.js';

const DEFAULT_POLICY_BACKOFF: BackoffOptions = { minMs: 100, maxMs: 5_000 };
const DEFAULT_IDENTITY_BACKOFF: BackoffOptions = { minMs: 500, maxMs: 10_000 };

/** Throws RangeError for inbound ports that cannot work. */
function checkInbound(inbound: readonly ProxyInboundPort[]): void {
  const seen = new Set<number>();
  for (const p of inbound) {
    if (!Number.isInteger(p.podPort) || p.podPort < 1 || p.podPort > 65_535) throw new RangeError(`bad pod port ${p.podPort}`);
    if (p.podPort === ADMIN_POLICY_PORT) throw new RangeError(`pod port ${ADMIN_POLICY_PORT} is the admin port`);
    if (seen.has(p.podPort)) throw new RangeError(`pod port ${p.podPort} given twice`);
    seen.add(p.podPort);
    if (!Number.isInteger(p.appPort) || p.appPort < 1 || p.appPort > 65_535) throw new RangeError(`bad application port ${p.appPort}`);
  }
}

/**
 * Starts the proxy: begins obtaining the certificate and watching the policies, and binds the
 * inbound listeners, the mesh port and the admin server. Resolves once everything listens (not
 * once ready; see {@link RunningProxy.ready}). Rejects with `MeshError` `ERR_IDENTITY_ANCHORS`
 * for trust anchors that do not parse, `ERR_INBOUND_LISTEN` / `ERR_ADMIN_LISTEN` when a port
 * cannot be bound (nothing is left running then), `ERR_ORIGINAL_DST_ADDON` (an
 * `OriginalDstAddonError` with a hint) in transparent mode without the native addon; throws
 * RangeError for bad ports.
 */
export async function startProxy(opts: ProxyOptions): Promise<RunningProxy> {
  checkInbound(opts.inbound);
  // First: without the addon transparent mode cannot work, and nothing has been started yet.
  const originalDst = opts.transparent === true ? (opts.originalDstReader ?? loadOriginalDst()) : undefined;
  const ctx = proxyContext(opts, originalDst);
  const { log, tls } = ctx;
  const identity = startIdentity(ctx);
  const identityMetrics = registerIdentityMetrics(ctx.registry);
  const readiness = new ProxyReadiness(
    () => hasLiveCertificate(tls) && policies.watcher.isReady(),
    () => log.info({ identity: ctx.identityName, ports: policies.watcher.ports, gcPauses: gcCounting() }, 'proxy ready'),
  );
  const policies = watchPolicies(ctx, () => readiness.check());
  useRotatedCertificates(ctx, identity, identityMetrics, () => readiness.check());

  let bound: ProxyBoundPorts | undefined;
  const inbound = makeInbound(ctx, policies.watcher, { adminHttp: (conn) => admin.handleHttp(conn), bound: () => bound });
  const debugPolicies = makeDebugPolicies({
    opts,
    identity: ctx.identityName,
    transparent: originalDst !== undefined,
    watcher: policies.watcher,
    tls,
    isReady: () => readiness.isReady(),
    bound: () => bound,
  });
  const admin = makeAdmin(ctx, { watcher: policies.watcher, metrics: inbound.metrics, readiness, debugPolicies });
  const outbound =
    opts.outbound === undefined
      ? undefined
      : makeOutbound(
          opts.outbound,
          opts,
          tls,
          log,
          originalDst,
          inbound.metrics.transport,
          new OutboundMetrics({ registry: ctx.registry, http: inbound.metrics.http }),
        );

  const close = async (): Promise<void> => {
    if (!readiness.close()) return;
    policies.watcher.stop();
    identity.stop();
    await Promise.all([admin.close(), inbound.proxy.close(), outbound?.close()]);
    inbound.http.close();
    policies.client.close();
  };

  try {
    bound = await bindListeners(opts, originalDst !== undefined, { inbound: inbound.proxy, admin, outbound: outbound?.proxy });
  } catch (e) {
    await close();
    throw e;
  }
  const ports = bound;
  // A certificate or the policies may have arrived while the listeners were bound.
  readiness.check();

  return {
    identity: ctx.identityName,
    ports,
    inbound: inbound.proxy,
    outbound: outbound?.proxy,
    registry: ctx.registry,
    isReady: () => readiness.isReady(),
    ready: () => readiness.wait(),
    debugPolicies,
    close,
  };
}

/** What every part of a proxy is built from. */
interface ProxyContext {
  readonly opts: ProxyOptions;
  readonly log: Logger;
  readonly registry: MetricsRegistry;
  /** This proxy's mesh identity. */
  readonly identityName: string;
  readonly domain: { readonly controlPlaneNamespace: string; readonly trustDomain: string };
  /** Rejects trust anchors that do not parse (`ERR_IDENTITY_ANCHORS`). */
  readonly tls: RotatingMeshTls;
  /** Set in transparent mode. */
  readonly originalDst: OriginalDstReader | undefined;
  /** How policies are compiled (the `default:localhost` networks), for the pod ports and the admin port alike. */
  readonly compile: CompileServerOptions | undefined;
  /** The inbound stacks publish decisions to it; the admin server's `/tap` streams them. */
  readonly tap: TapHub;
}

function proxyContext(opts: ProxyOptions, originalDst: OriginalDstReader | undefined): ProxyContext {
  const log = opts.logger ?? silentLogger();
  const registry = opts.registry ?? processMetricsRegistry();
  const domain = { controlPlaneNamespace: opts.controlPlaneNamespace, trustDomain: opts.trustDomain };
  const identityName = serviceAccountIdentity(domain, opts.namespace, opts.serviceAccount);
  const tls = new RotatingMeshTls(opts.trustAnchorsPem);
  const compile: CompileServerOptions | undefined = opts.localhostNetworks !== undefined ? { localhost: localhostAuthz(opts.localhostNetworks) } : undefined;
  return { opts, log, registry, identityName, domain, tls, originalDst, compile, tap: new TapHub() };
}

function hasLiveCertificate(tls: RotatingMeshTls): boolean {
  const cert = tls.certificate;
  return cert !== undefined && cert.notAfterMs > Date.now();
}

/** Begins obtaining this proxy's certificate from the identity service (and renewing it). */
function startIdentity({ opts, log, identityName, domain }: ProxyContext): ProxyIdentity {
  const tokenFile = opts.tokenFile;
  return startProxyIdentity({
    identity: identityName,
    identityAddress: opts.identityAddress,
    identityServerName: serviceAccountIdentity(domain, opts.controlPlaneNamespace, 'linkerd-identity'),
    trustAnchorsPem: opts.trustAnchorsPem,
    // Projected tokens rotate, so the file is read for every request; a trailing newline is not part of it.
    tokenSource: async () => new TextEncoder().encode((await readFile(tokenFile, 'utf8')).trim()),
    logger: log,
    backoff: new Backoff(opts.identityBackoff ?? DEFAULT_IDENTITY_BACKOFF),
    ...(opts.minRefreshMs !== undefined ? { minRefreshMs: opts.minRefreshMs } : {}),
    ...(opts.maxRefreshMs !== undefined ? { maxRefreshMs: opts.maxRefreshMs } : {}),
  });
}

/** Puts each renewed certificate in use for later handshakes; a certificate that does not load leaves the previous one. */
function useRotatedCertificates({ log, tls, identityName }: ProxyContext, identity: ProxyIdentity, metrics: IdentityMetrics, onRotated: () => void): void {
  identity.onRotated((cert) => {
    try {
      tls.use(cert);
    } catch (e) {
      metrics.onRefreshFailed();
      log.error({ identity: identityName, err: errorMessage(e) }, 'certificate does not load; keeping the previous one');
      return;
    }
    metrics.onRotated(cert);
    onRotated();
  });
}

/** The policy client and one watch per pod port and the admin port; `onUpdate` hears of every policy put in force. */
function watchPolicies(
  { opts, log, domain, compile }: ProxyContext,
  onUpdate: () => void,
): { readonly client: InboundPolicyClient; readonly watcher: PolicyWatcher } {
  const client = new InboundPolicyClient({
    address: opts.policyAddress,
    tls: { caPem: opts.trustAnchorsPem, serverName: serviceAccountIdentity(domain, opts.controlPlaneNamespace, 'linkerd-destination') },
  });
  const watcher = new PolicyWatcher({
    client,
    workload: JSON.stringify({ ns: opts.namespace, pod: opts.pod }),
    ports: [...opts.inbound.map((p) => p.podPort), ADMIN_POLICY_PORT],
    backoff: opts.policyBackoff ?? DEFAULT_POLICY_BACKOFF,
    ...opts.policyDiscovery,
    logger: log,
    ...(compile !== undefined ? { compile } : {}),
    onUpdate: (port, next) => {
      const m = next.server.meta;
      log.info({ port, server: `${m.kind}:${m.name}`, authorizations: next.server.authorizations.length, invalid: next.invalid }, 'inbound policy in force');
      onUpdate();
    },
  });
  return { client, watcher };
}

/** What the inbound side is wired to besides the context. */
interface InboundLinks {
  /** Serves HTTP streams for the admin port that arrive on the mesh port. */
  readonly adminHttp: InboundHttpHandler;
  /** The bound ports, once the listeners are bound. */
  readonly bound: () => ProxyBoundPorts | undefined;
}

/** The inbound side: its metrics (shared with the admin and outbound sides), the HTTP stack, and the listeners (not yet bound). */
function makeInbound(
  { opts, log, registry, identityName, tls, originalDst, tap }: ProxyContext,
  watcher: PolicyWatcher,
  links: InboundLinks,
): { readonly metrics: InboundMetrics; readonly http: InboundHttp; readonly proxy: InboundProxy } {
  const metrics = new InboundMetrics({ registry, targetIp: opts.listenHost });
  const appPorts = new Map(opts.inbound.map((p) => [p.podPort, p.appPort]));
  const appPortOf = (port: number): number => appPorts.get(port) ?? port;
  // The HTTP stack of the pod ports. A meshed client reaches the admin port through the mesh port
  // (a transport header naming 4191, as ward's outbound sends for every meshed endpoint): the
  // admin server serves that stream itself, with the identity the inbound proxy verified.
  const counter = new InboundStatsCounter();
  const http = new InboundHttp({ policies: watcher, appHost: opts.appHost, appPortOf, logger: log, metrics: metrics.hooks, counter, tap });
  const proxy = new InboundProxy({
    identity: identityName,
    tls,
    policies: watcher,
    appHost: opts.appHost,
    // The mesh port may name any watched port; one without an application mapping has no policy either.
    appPortOf,
    // Transparent mode: an undeclared port's application is at the pod address the connection
    // arrived on (never the original destination's address, which the client chooses: the proxy
    // would relay to any host), never the declared ports' host, which may be loopback: a service
    // bound to loopback only must stay out of reach.
    ...(originalDst !== undefined
      ? { appHostOf: (port: number, podIp: string | undefined) => (appPorts.has(port) || podIp === undefined ? opts.appHost : podIp) }
      : {}),
    listen: {
      host: opts.listenHost,
      meshHost: opts.mesh.host,
      meshPort: opts.mesh.port,
      // Transparent mode: iptables brings the pod ports' connections to the mesh port.
      appPorts: originalDst !== undefined ? [] : opts.inbound.map((p) => p.listenPort),
      policyPorts: originalDst !== undefined ? [] : opts.inbound.map((p) => p.podPort),
    },
    logger: log,
    metrics: metrics.hooks,
    counter,
    tap,
    handleHttp: (conn) => (conn.port === ADMIN_POLICY_PORT ? links.adminHttp(conn) : http.handle(conn)),
    ...(originalDst !== undefined ? { originalDst } : {}),
    // Transparent mode: the proxy's own listeners are never a discovered port (inbound/proxy).
    isProxyPort: (port) => {
      const bound = links.bound();
      return (
        port === bound?.admin || port === opts.admin.port || (opts.outbound !== undefined && (port === bound?.outbound || port === opts.outbound.listen.port))
      );
    },
  });
  if (originalDst !== undefined) registerDiscoveryMetrics(registry, watcher, proxy);
  return { metrics, http, proxy };
}

/**
 * Lazy discovery at a glance: how many undeclared ports are watched (against
 * --inbound-discovery-max-ports) and how many connections wait for a port's first policy.
 */
function registerDiscoveryMetrics(registry: MetricsRegistry, watcher: PolicyWatcher, inbound: InboundProxy): void {
  registerReadFamily(
    registry,
    'inbound_policy_discovered_ports',
    'Undeclared inbound ports whose policy is watched, discovered on their first connection.',
    () => watcher.discoveredCount,
  );
  registerReadFamily(
    registry,
    'inbound_policy_discovery_waiting_connections',
    'Connections waiting for the policy of an undeclared inbound port.',
    () => inbound.discovering,
  );
}

/** The admin server (not yet bound), authorizing by the port-4191 policy. */
function makeAdmin(
  { opts, log, registry, identityName, tls, compile, tap }: ProxyContext,
  parts: {
    readonly watcher: PolicyWatcher;
    readonly metrics: InboundMetrics;
    readonly readiness: ProxyReadiness;
    readonly debugPolicies: () => ProxyDebugPolicies;
  },
): AdminServer {
  return new AdminServer({
    host: opts.admin.host,
    port: opts.admin.port,
    policies: parts.watcher,
    isReady: () => parts.readiness.isReady(),
    registry,
    debugPolicies: parts.debugPolicies,
    tap,
    ...(opts.tapIdentity !== undefined ? { tapIdentity: opts.tapIdentity } : {}),
    // Mesh TLS to this proxy's name is terminated on the admin port too (a meshed scraper
    // connecting to it directly): its requests are authorized with the client's identity.
    identity: identityName,
    tls,
    metrics: parts.metrics.hooks,
    logger: log,
    ...(compile !== undefined ? { compile } : {}),
  });
}

/** Binds the inbound listeners, then the admin server, then the outbound proxy; resolves with the ports bound. */
async function bindListeners(
  opts: ProxyOptions,
  transparent: boolean,
  servers: { readonly inbound: InboundProxy; readonly admin: AdminServer; readonly outbound: OutboundProxy | undefined },
): Promise<ProxyBoundPorts> {
  const inboundPorts = await servers.inbound.start();
  const adminPort = await servers.admin.start();
  const outboundPort = await servers.outbound?.start();
  return {
    mesh: inboundPorts.meshPort,
    admin: adminPort,
    ...(outboundPort === undefined ? {} : { outbound: outboundPort }),
    inbound: opts.inbound.map((p, i) => ({
      podPort: p.podPort,
      listenPort: transparent ? inboundPorts.meshPort : (inboundPorts.appPorts[i] ?? p.listenPort),
      appHost: opts.appHost,
      appPort: p.appPort,
    })),
  };
}

/** The outbound proxy with its resolver and connector; `close` stops all three. */
function makeOutbound(
  o: ProxyOutboundOptions,
  opts: ProxyOptions,
  tls: RotatingMeshTls,
  log: Logger,
  originalDst: OriginalDstReader | undefined,
  transport: TransportMetrics,
  requests: OutboundMetrics,
): { readonly proxy: OutboundProxy; close(): Promise<void> } {
  const domain = { controlPlaneNamespace: opts.controlPlaneNamespace, trustDomain: opts.trustDomain };
  const client = new DestinationClient({
    address: o.destinationAddress,
    tls: { caPem: opts.trustAnchorsPem, serverName: serviceAccountIdentity(domain, opts.controlPlaneNamespace, 'linkerd-destination') },
  });
  const cache = new DestinationCache({
    source: client,
    namespace: opts.namespace,
    ...(o.clusterDomain !== undefined ? { clusterDomain: o.clusterDomain } : {}),
    logger: log,
  });
  const meshPorts = o.meshPorts;
  const connector = new OutboundConnector({
    tls,
    // Connections leave from the pod's address: the far side authorizes by it. In transparent
    // mode the pod has a network namespace of its own and the OS picks that address.
    ...(originalDst === undefined ? { localAddress: opts.listenHost } : {}),
    ...(meshPorts !== undefined && meshPorts.size > 0 ? { meshPortOf: (e) => meshPorts.get(e.ip) ?? e.opaqueTransportPort ?? DEFAULT_MESH_PORT } : {}),
    // `tcp_*{direction="outbound"}`, labelled with the service each endpoint was resolved for.
    onConnection: (socket, endpoint) => transport.trackOutbound(socket, endpoint, cache.targetOf(endpoint)),
    logger: log,
  });
  const proxy = new OutboundProxy({
    listen: o.listen,
    resolver: cache,
    connector,
    // `request_total`… `{direction="outbound"}` on the families the inbound side registered.
    metrics: requests,
    logger: log,
    ...(originalDst !== undefined ? { originalDst } : {}),
  });
  return {
    proxy,
    close: async () => {
      await proxy.close();
      connector.close();
      cache.close();
      client.close();
    },
  };
}
