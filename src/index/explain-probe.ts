/**
 * Evaluates one connection or request against a workspace with the proxy's engine and builds
 * the explain result (CLI.md `ward explain` JSON) with a chain a newcomer can follow.
 */
import {
  type ClientInfo,
  compileAuthz,
  compileServer,
  firstHost,
  formatIp,
  type InboundServer,
  type Meta,
  normalizeRequestTarget,
  parseIp,
  type RequestInfo,
  serviceAccountIdentity,
  type TlsState,
  type Trace,
  traceConnection,
  traceRequest,
} from '../core/index.js';
import { ANNOTATIONS } from '../manifest/index.js';
import { localhostAuthzOf } from './policy-index.js';
import { type PolicyView, QueryError } from './query-error.js';
import { explainSmiServer } from './smi-explain.js';

/** Who is calling. */
export interface ProbeClient {
  readonly ip?: string | undefined;
  readonly identity?: string | null | undefined;
  readonly tls?: 'none' | 'mesh' | 'no-client-cert' | 'passthrough' | undefined;
  readonly sni?: string | undefined;
}

/** What the client sends: an HTTP request, a gRPC call, or opaque TCP. */
export type ProbeTraffic =
  | {
      readonly kind: 'http';
      readonly method: string;
      readonly path: string;
      readonly headers: Readonly<Record<string, string>>;
      readonly host?: string | undefined;
    }
  | { readonly kind: 'grpc'; readonly service: string; readonly method: string; readonly headers?: Readonly<Record<string, string>> | undefined }
  | { readonly kind: 'tcp' };

/** One thing to evaluate. */
export interface Probe {
  readonly namespace: string;
  readonly pod: string;
  readonly port: number;
  readonly client: ProbeClient;
  readonly traffic: ProbeTraffic;
}

/** The explain JSON (CLI.md). */
export interface ExplainResult {
  readonly decision: 'allow' | 'audit-allow' | 'deny';
  /** `http400`: the proxy refuses the request target before any route (core/request-target). */
  readonly denyKind: 'http400' | 'http403' | 'http404' | 'grpc7' | 'grpc5' | 'tcp-refuse' | 'http500' | null;
  readonly level: 'http' | 'tcp';
  readonly server: { readonly kind: 'server' | 'default' | 'traffictarget'; readonly name: string };
  readonly route: { readonly kind: string; readonly name: string } | null;
  readonly authz: { readonly group: string; readonly kind: string; readonly name: string } | null;
  readonly chain: readonly { readonly step: string; readonly detail: string }[];
}

const PROTOCOL_NAMES: Record<InboundServer['protocol']['kind'], string> = {
  detect: 'detect (HTTP detected per connection, else opaque TCP)',
  http1: 'HTTP/1',
  http2: 'HTTP/2',
  grpc: 'gRPC',
  opaque: 'opaque TCP',
  tls: 'TLS',
};

/**
 * The proxy's admin port (the proxy's `ADMIN_POLICY_PORT`): the proxy serves it itself, HTTP only,
 * so a stream that is not HTTP is never forwarded there, whatever the port's policy says.
 */
const PROXY_ADMIN_PORT = 4191;

/** The first usable address of the first cluster network: a client "inside the cluster". */
export function defaultClientIp(ws: PolicyView): string {
  const net = ws.config.clusterNetworks[0];
  return net === undefined ? '10.0.0.1' : firstHost(net.net);
}

function tlsState(c: ProbeClient, server: InboundServer): TlsState {
  const identity = c.identity ?? undefined;
  const tls = c.tls ?? (identity !== undefined ? 'mesh' : 'none');
  const opaque = server.protocol.kind === 'opaque';
  switch (tls) {
    case 'mesh':
      // Meshed clients reach opaque ports through the transport header, identity intact.
      return { kind: 'established', clientId: identity };
    case 'no-client-cert':
      return opaque ? { kind: 'none', reason: 'port_skipped' } : { kind: 'established' };
    case 'passthrough':
      return opaque ? { kind: 'none', reason: 'port_skipped' } : { kind: 'passthrough', sni: c.sni ?? 'unknown.invalid' };
    case 'none':
      return { kind: 'none', reason: opaque ? 'port_skipped' : 'no_tls_from_remote' };
  }
}

function describeTls(t: TlsState): string {
  switch (t.kind) {
    case 'established':
      return t.clientId !== undefined ? `mesh TLS as ${t.clientId}` : 'mesh TLS without a client certificate';
    case 'passthrough':
      return `TLS passthrough (SNI ${t.sni})`;
    case 'none':
      return t.reason === 'port_skipped' ? 'plaintext (TLS detection is skipped on opaque ports)' : 'plaintext';
  }
}

function requestOf(t: ProbeTraffic): RequestInfo | undefined {
  if (t.kind === 'tcp') return undefined;
  if (t.kind === 'grpc') {
    return { method: 'POST', path: `/${t.service}/${t.method}`, headers: { ...t.headers, 'content-type': 'application/grpc' } };
  }
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(t.headers)) headers[k.toLowerCase()] = v;
  if (t.host !== undefined) headers.host = t.host;
  return { method: t.method.toUpperCase(), path: t.path, headers };
}

/** The kind explain reports: a Server, a default policy, or (SMI) the TrafficTargets governing the port. */
function serverKind(kind: string): 'server' | 'default' | 'traffictarget' {
  return kind === 'default' || kind === 'traffictarget' ? kind : 'server';
}

function metaRef(m: Meta): string {
  return `${m.kind}/${m.name}`;
}

function serverStep(ws: PolicyView, p: Probe, server: InboundServer): string {
  const binding = ws.index.bindings(p.namespace, p.pod).find((b) => b.port === p.port);
  if (server.meta.kind === 'server' && binding !== undefined) {
    const srv = ws.index.servers(p.namespace).find((s) => s.metadata.name === binding.server);
    const how = typeof srv?.spec.port === 'string' ? `port "${srv.spec.port}" (the container port name, here ${p.port})` : `port ${p.port}`;
    const lost = binding.losers.length > 0 ? `; it wins over ${binding.losers.join(', ')} (oldest first, then name)` : '';
    return `Server ${binding.server} selects this pod and binds ${how}${lost}. Only authorizations that reference it apply (the default policy no longer does).`;
  }
  if (server.meta.kind === 'traffictarget') return explainSmiServer(ws.index, p.namespace, p.pod, p.port);
  const info = ws.index.pod(p.namespace, p.pod);
  const ann = info?.pod.metadata.annotations[ANNOTATIONS.defaultInboundPolicy];
  const from =
    ann !== undefined && info?.defaultPolicy !== undefined
      ? `the pod annotation ${ANNOTATIONS.defaultInboundPolicy}=${ann} (set at pod creation, possibly copied from its namespace)`
      : ann !== undefined
        ? `the cluster default ${ws.config.defaultPolicy} (the pod annotation "${ann}" is not a valid policy and is ignored)`
        : `the cluster default (--default-policy ${ws.config.defaultPolicy})`;
  const reqId = info?.requireIdentityPorts.has(p.port) ? `; port ${p.port} requires identity, so unauthenticated defaults become authenticated` : '';
  return `No Server binds port ${p.port}, so the default policy ${server.meta.name} applies, from ${from}${reqId}.`;
}

/** Evaluates a probe. Throws `QueryError` when the pod does not exist or the input is malformed. */
export function evaluate(ws: PolicyView, p: Probe): ExplainResult {
  // Checked before the lookup, which would otherwise keep a cell for the invalid port.
  if (!Number.isInteger(p.port) || p.port < 1 || p.port > 65535) throw new QueryError(`port ${p.port} is out of range 1-65535`);
  const cell = ws.index.peek(p.namespace, p.pod, p.port);
  if (cell === undefined) {
    const unmeshed = ws.index.unmeshedPods().some((x) => x.metadata.namespace === p.namespace && x.metadata.name === p.pod);
    throw new QueryError(
      unmeshed
        ? `pod ${p.namespace}/${p.pod} is not meshed (no linkerd.io/control-plane-ns label and no linkerd.io/inject annotation), so no inbound policy applies`
        : `pod ${p.namespace}/${p.pod} not found in the manifests`,
      { notFound: true },
    );
  }
  const server = cell.value;
  const ipText = p.client.ip ?? defaultClientIp(ws);
  const ip = parseIp(ipText);
  if (ip === undefined) throw new QueryError(`client IP "${ipText}" is not an IP address`);
  const tls = tlsState(p.client, server);
  const client: ClientInfo = { ip, tls };
  const info = ws.index.pod(p.namespace, p.pod);
  const cs = compileServer(server, { localhost: compileAuthz(localhostAuthzOf(ws.config, info)) });
  const req = requestOf(p.traffic);
  const chain: { step: string; detail: string }[] = [];
  chain.push({
    step: 'target',
    detail: `pod ${p.namespace}/${p.pod} port ${p.port}${info !== undefined ? ` (ServiceAccount ${info.serviceAccount})` : ''}`,
  });
  chain.push({ step: 'client', detail: `${formatIp(ip)}, ${describeTls(tls)}` });
  chain.push({ step: 'server', detail: serverStep(ws, p, server) });

  const k = server.protocol.kind;
  let trace: Trace;
  const httpPort = k === 'http1' || k === 'http2' || k === 'grpc';
  if (req === undefined && (httpPort || p.port === PROXY_ADMIN_PORT)) {
    // Raw bytes on a port that only speaks HTTP fail at the protocol level.
    chain.push({
      step: 'protocol',
      detail: httpPort
        ? `${PROTOCOL_NAMES[k]}: the proxy expects HTTP here, so a non-HTTP stream is a protocol error and the connection is closed`
        : `the proxy's admin port: the proxy serves it itself, HTTP only (give --http to explain a request), so a non-HTTP stream is a protocol error and the connection is closed`,
    });
    const sm = server.meta;
    const result: ExplainResult = {
      decision: 'deny',
      denyKind: 'tcp-refuse',
      level: 'tcp',
      server: { kind: serverKind(sm.kind), name: sm.name },
      route: null,
      authz: null,
      chain: [...chain, { step: 'verdict', detail: 'deny: connection closed (not HTTP)' }],
    };
    return result;
  }
  if (req === undefined || k === 'opaque' || k === 'tls') {
    const why =
      req !== undefined
        ? `${PROTOCOL_NAMES[k]}: HTTP is not inspected on this port; the connection is authorized once with the server authorizations`
        : k === 'detect'
          ? `${PROTOCOL_NAMES[k]}: the bytes are not HTTP, so the connection is authorized once with the server authorizations (routes never apply to TCP)`
          : `${PROTOCOL_NAMES[k]}: the connection is authorized once with the server authorizations`;
    chain.push({ step: 'protocol', detail: why });
    trace = traceConnection(cs, client);
  } else {
    const per = k === 'grpc' ? 'gRPC routes' : 'HTTP routes';
    chain.push({
      step: 'protocol',
      detail: `${PROTOCOL_NAMES[k]}: every request is authorized on its own, by route (${per}); a denied request never closes the connection`,
    });
    // The proxy decides on the normalized target and sends the application that one.
    const normalized = normalizeRequestTarget(req.path);
    const host = req.headers.host !== undefined ? ` (host ${req.headers.host})` : '';
    if (!normalized.ok) {
      chain.push({ step: 'request', detail: `${req.method} ${req.path}${host}: refused before any route: ${normalized.reason}` });
      const sm = server.meta;
      return {
        decision: 'deny',
        denyKind: 'http400',
        level: 'http',
        server: { kind: serverKind(sm.kind), name: sm.name },
        route: null,
        authz: null,
        chain: [
          ...chain,
          {
            step: 'verdict',
            detail: k === 'grpc' ? 'deny: gRPC status 13 INTERNAL (HTTP 400: bad request target)' : 'deny: HTTP 400 Bad Request (bad request target)',
          },
        ],
      };
    }
    const changed = normalized.target !== req.path;
    const request: RequestInfo = changed ? { ...req, path: normalized.target } : req;
    trace = traceRequest(cs, client, request);
    chain.push({
      step: 'request',
      detail: `${req.method} ${req.path}${host}${changed ? `, normalized to ${normalized.target} (what policy matches and the application receives)` : ''}`,
    });
    for (const r of trace.routes) {
      const outcome = r.outcome === 'selected' ? 'selected' : r.outcome === 'matches' ? 'matches, but a more specific or older route wins' : `no: ${r.outcome}`;
      chain.push({ step: 'route', detail: `${metaRef(r.meta)}: ${outcome}` });
    }
  }
  const d = trace.decision;
  for (const a of trace.authzs) {
    const scope = a.scope === 'route' ? 'route-level' : a.scope === 'proxy' ? 'added by the proxy' : 'server-level';
    const result = a.failure === undefined ? 'admits the client' : `no: ${a.failure}`;
    chain.push({ step: 'authz', detail: `${metaRef(a.meta)} (${scope}; admits ${a.admits}): ${result}` });
  }
  if (d.allowed) {
    chain.push({
      step: 'verdict',
      detail: d.isAudit
        ? `audit-allow: only the audit authorization admits this; it is logged and would be denied without audit mode`
        : `allow: admitted by ${metaRef(d.authz)} (the first authorization that matches)`,
    });
  } else {
    const text: Record<string, string> = {
      http403: 'HTTP 403 Forbidden',
      grpc7: 'gRPC status 7 PERMISSION_DENIED',
      http404: 'HTTP 404: no route matches the request',
      grpc5: 'gRPC status 5 NOT_FOUND: no route matches the call',
      'tcp-refuse': 'the connection is closed before any byte reaches the application',
      http500: 'HTTP 500: the policy is invalid',
    };
    let closest = '';
    const candidates = trace.authzs.filter((a) => a.scope !== 'proxy');
    const nearMiss = candidates.find((a) => a.failure !== undefined && !a.failure.startsWith('client IP')) ?? candidates[0];
    if (nearMiss !== undefined) closest = `; closest miss: ${metaRef(nearMiss.meta)}, which admits ${nearMiss.admits}`;
    else if (d.kind === 'http403' || d.kind === 'grpc7' || d.kind === 'tcp-refuse')
      closest = '; nothing authorizes this port (deny): add an AuthorizationPolicy or ServerAuthorization';
    chain.push({ step: 'verdict', detail: `deny: ${text[d.kind]}${closest}` });
  }
  const sm = d.server;
  return {
    decision: d.allowed ? (d.isAudit ? 'audit-allow' : 'allow') : 'deny',
    denyKind: d.allowed ? null : d.kind,
    level: d.level,
    server: { kind: serverKind(sm.kind), name: sm.name },
    route: d.route === undefined ? null : { kind: d.route.kind === 'default' ? 'default' : d.route.kind, name: d.route.name },
    authz: d.allowed ? { group: d.authz.group, kind: d.authz.kind, name: d.authz.name } : null,
    chain,
  };
}

/** Builds the mesh identity of a ServiceAccount `NS/NAME`. */
export function identityOfServiceAccount(ws: PolicyView, nsName: string): string {
  const slash = nsName.indexOf('/');
  if (slash <= 0 || slash === nsName.length - 1) throw new QueryError(`--from-sa wants NAMESPACE/NAME, got "${nsName}"`);
  return serviceAccountIdentity(
    { controlPlaneNamespace: ws.config.controlPlaneNamespace, trustDomain: ws.config.trustDomain },
    nsName.slice(0, slash),
    nsName.slice(slash + 1),
  );
}
