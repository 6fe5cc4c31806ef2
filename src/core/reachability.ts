/**
 * Who can talk to whom, computed from policy: for one destination (a pod's port, as its
 * `InboundServer`) and a list of sources (a client identity and address each), the decision the
 * proxy would take for every source on the port and on each of its routes: allow, audit or deny,
 * and by which authorization.
 *
 * The verdicts come from `authorizeRequest` / `authorizeConnection` on the compiled server, never
 * from a reading of the policy of our own: a route is evaluated with a sample request that the
 * route table itself selects for that route. Once a route is selected, the engine's decision
 * depends only on the client, so one sample per route stands for every request the route admits.
 *
 * Sources are grouped before evaluation: two sources with the same identity whose addresses fall
 * in the same networks of every authorization the port consults get the same decision, so each
 * group is evaluated once (pods of one workload, workloads sharing a ServiceAccount).
 */
import {
  authorizeConnection,
  authorizeRequest,
  type ClientInfo,
  type CompiledAuthz,
  type CompiledServer,
  compileAuthz,
  compileServer,
  type Decision,
  type RequestInfo,
  type TlsState,
} from './authorize.js';
import { type ParsedIp, parseIp } from './ip.js';
import type { Authorization, GrpcRoute, GrpcRouteMatch, HostMatch, HttpRoute, HttpRouteMatch, InboundServer, Meta, Network } from './model.js';
import type { NetworkSet } from './network-match.js';

/** A client of the graph: the identity it presents over mesh TLS (none: plaintext) and its address. */
export interface ReachSource {
  /** Mesh identity; undefined for a client without mesh TLS (an unmeshed pod, the host). */
  readonly identity: string | undefined;
  /** The client's IP address in text form. */
  readonly ip: string;
}

/** One destination: a pod port's policy and the authorization its proxy adds for loopback. */
export interface ReachTarget {
  readonly server: InboundServer;
  /** The proxy-added `default:localhost` authorization (default: 127.0.0.1 and ::1). */
  readonly localhost?: Authorization | undefined;
}

/** What one source gets. Verdicts are interned: equal verdicts are the same object. */
export interface Verdict {
  readonly decision: 'allow' | 'audit' | 'deny';
  /** The authorization that admitted the source; undefined for a denial. */
  readonly authz: Meta | undefined;
  /** The engine's reason for a denial (`unauthorized request on route`…); undefined for a permit. */
  readonly reason: string | undefined;
}

/** The request a route was evaluated with, as people read it (`GET /api/vote`). */
export interface SampleRequest {
  readonly method: string;
  readonly path: string;
  readonly host: string | undefined;
}

/** The verdicts on one route of the port (or on the connection, for ports without routes). */
export interface RouteReach {
  /** The route; undefined for a connection-level decision (opaque and TLS ports). */
  readonly route: Meta | undefined;
  /** The sample request that selected the route; undefined at connection level or when shadowed. */
  readonly sample: SampleRequest | undefined;
  /**
   * True when no sample request built from the route's matches selects it (every match is taken
   * by an earlier or more specific route, or only a regular expression describes it): no verdicts.
   */
  readonly shadowed: boolean;
  /** One verdict per source, in the order of the sources; empty when shadowed. */
  readonly verdicts: readonly Verdict[];
}

/** The reachability of one destination. */
export interface TargetReach {
  readonly routes: readonly RouteReach[];
  /** How many source groups were evaluated (≤ the number of sources). */
  readonly groups: number;
  /** How many engine calls were made. */
  readonly evaluations: number;
}

const verdicts = new Map<string, Verdict>();

/** The interned verdict of a decision. */
function verdictOf(d: Decision): Verdict {
  const decision = d.allowed ? (d.isAudit ? 'audit' : 'allow') : 'deny';
  const authz = d.allowed ? d.authz : undefined;
  const reason = d.allowed ? undefined : d.reason;
  const key = `${decision}\0${authz?.group ?? ''}\0${authz?.kind ?? ''}\0${authz?.name ?? ''}\0${reason ?? ''}`;
  let v = verdicts.get(key);
  if (v === undefined) {
    // Bounded by the policy objects in existence; cleared if a long-lived process sees churn.
    if (verdicts.size > 10_000) verdicts.clear();
    v = { decision, authz, reason };
    verdicts.set(key, v);
  }
  return v;
}

/** A client as the engine takes it: mesh TLS with the identity, or plaintext. */
function clientOf(s: ReachSource, ip: ParsedIp): ClientInfo {
  const tls: TlsState = s.identity !== undefined ? { kind: 'established', clientId: s.identity } : { kind: 'none', reason: 'no_tls_from_remote' };
  return { ip, tls };
}

/** A host name a host match accepts. */
function hostOf(hosts: readonly HostMatch[]): string | undefined {
  const h = hosts[0];
  if (h === undefined) return undefined;
  return h.kind === 'exact' ? h.value : ['sample', ...[...h.reverseLabels].reverse()].join('.');
}

/** A literal string a whole-value regular expression surely matches, or undefined. */
function literalOfRegex(re: string): string | undefined {
  const body = re
    .replace(/^\^/, '')
    .replace(/\$$/, '')
    .replace(/\.\*|\.\+/g, 'x');
  const unescaped = body.replace(/\\([./\-_])/g, '$1');
  if (/[\\^$.|?*+()[\]{}]/.test(unescaped)) return undefined;
  try {
    return new RegExp(`^(?:${re})$`).test(unescaped) ? unescaped : undefined;
  } catch {
    return undefined;
  }
}

/** Candidate requests for an HTTP route: one per match of each rule (a rule without matches matches all). */
function httpSamples(route: HttpRoute): RequestInfo[] {
  const host = hostOf(route.hosts);
  const out: RequestInfo[] = [];
  const push = (m: HttpRouteMatch | undefined) => {
    let path = '/';
    if (m?.path !== undefined) {
      const p = m.path.kind === 'regex' ? literalOfRegex(m.path.value) : m.path.value;
      if (p === undefined) return;
      path = p;
    }
    const headers: Record<string, string> = {};
    for (const h of m?.headers ?? []) {
      const v = h.kind === 'exact' ? h.value : literalOfRegex(h.value);
      if (v === undefined) return;
      headers[h.name.toLowerCase()] = v;
    }
    const query: string[] = [];
    for (const q of m?.queryParams ?? []) {
      const v = q.kind === 'exact' ? q.value : literalOfRegex(q.value);
      if (v === undefined) return;
      query.push(`${encodeURIComponent(q.name)}=${encodeURIComponent(v)}`);
    }
    if (host !== undefined) headers.host = host;
    out.push({ method: m?.method ?? 'GET', path: query.length > 0 ? `${path}?${query.join('&')}` : path, headers });
  };
  for (const rule of route.rules) {
    if (rule.matches.length === 0) push(undefined);
    for (const m of rule.matches) push(m);
  }
  return out;
}

/** Candidate calls for a gRPC route. */
function grpcSamples(route: GrpcRoute): RequestInfo[] {
  const host = hostOf(route.hosts);
  const out: RequestInfo[] = [];
  const push = (m: GrpcRouteMatch | undefined) => {
    const headers: Record<string, string> = { 'content-type': 'application/grpc' };
    for (const h of m?.headers ?? []) {
      const v = h.kind === 'exact' ? h.value : literalOfRegex(h.value);
      if (v === undefined) return;
      headers[h.name.toLowerCase()] = v;
    }
    if (host !== undefined) headers.host = host;
    out.push({ method: 'POST', path: `/${m?.rpc?.service ?? 'sample.Service'}/${m?.rpc?.method ?? 'Sample'}`, headers });
  };
  for (const rule of route.rules) {
    if (rule.matches.length === 0) push(undefined);
    for (const m of rule.matches) push(m);
  }
  return out;
}

/** The routes a server consults for requests, or undefined when it authorizes connections only. */
function routesOf(s: InboundServer): readonly (HttpRoute | GrpcRoute)[] | undefined {
  const p = s.protocol;
  if (p.kind === 'detect') return p.httpRoutes;
  if (p.kind === 'http1' || p.kind === 'http2' || p.kind === 'grpc') return p.routes;
  return undefined;
}

/** The first candidate request the engine routes to `route` (compared by identity), with its decision for `probe`. */
function selectingSample(cs: CompiledServer, route: HttpRoute | GrpcRoute, probe: ClientInfo): RequestInfo | undefined {
  const candidates = cs.server.protocol.kind === 'grpc' ? grpcSamples(route as GrpcRoute) : httpSamples(route as HttpRoute);
  for (const req of candidates) {
    if (authorizeRequest(cs, probe, req).route === route.meta) return req;
  }
  return undefined;
}

/**
 * Groups sources that no authorization of the port can tell apart: same identity, and an address
 * inside exactly the same networks. Returns each source's group and one representative per group.
 */
function groupSources(
  sources: readonly ReachSource[],
  ips: readonly (ParsedIp | undefined)[],
  nets: readonly NetworkSet[],
): { groupOf: Int32Array; reps: number[] } {
  const groupOf = new Int32Array(sources.length);
  const reps: number[] = [];
  const byKey = new Map<string, number>();
  for (let i = 0; i < sources.length; i++) {
    const ip = ips[i];
    if (ip === undefined) {
      groupOf[i] = -1;
      continue;
    }
    let bits = '';
    for (const n of nets) bits += n.has(ip) ? '1' : '0';
    const key = `${sources[i]?.identity ?? ''}\0${bits}`;
    let g = byKey.get(key);
    if (g === undefined) {
      g = reps.length;
      reps.push(i);
      byKey.set(key, g);
    }
    groupOf[i] = g;
  }
  return { groupOf, reps };
}

const BAD_ADDRESS: Verdict = { decision: 'deny', authz: undefined, reason: 'the source has no valid IP address' };

/**
 * The verdicts of every source on one destination: per route (with its sample request) for ports
 * that authorize requests, else once for the connection. Pure; never throws for odd policy (an
 * invalid server denies everyone, as the proxy does).
 */
export function reachTarget(target: ReachTarget, sources: readonly ReachSource[]): TargetReach {
  const cs = compileServer(target.server, target.localhost !== undefined ? { localhost: compileAuthz(target.localhost) } : undefined);
  const ips = sources.map((s) => parseIp(s.ip));
  const routes = routesOf(target.server);
  const anyClient: ClientInfo = { ip: parseIp('0.0.0.0') as ParsedIp, tls: { kind: 'none', reason: 'no_tls_from_remote' } };

  // The lists the engine will consult: the server's, and each selected route's.
  const lists: { route: HttpRoute | GrpcRoute | undefined; req: RequestInfo | undefined; authzs: readonly CompiledAuthz[] }[] = [];
  if (routes === undefined || cs.invalid !== undefined) {
    lists.push({ route: undefined, req: undefined, authzs: cs.authzs });
  } else {
    for (const r of routes) {
      const req = selectingSample(cs, r, anyClient);
      lists.push({ route: r, req, authzs: req === undefined ? [] : [...r.authorizations.map(compileAuthz), ...cs.authzs] });
    }
  }
  // Route-level authorizations were recompiled above only to learn their networks; the engine
  // uses its own compiled copies, so networks are told apart by content rather than by object.
  const nets = new Map<string, NetworkSet>();
  for (const l of lists) for (const a of l.authzs) nets.set(networksKey(a.authz.networks), a.networks);
  const { groupOf, reps } = groupSources(sources, ips, [...nets.values()]);

  let evaluations = 0;
  const out: RouteReach[] = [];
  for (const l of lists) {
    if (l.route !== undefined && l.req === undefined) {
      out.push({ route: l.route.meta, sample: undefined, shadowed: true, verdicts: [] });
      continue;
    }
    const perGroup: Verdict[] = reps.map((i) => {
      evaluations++;
      const s = sources[i] as ReachSource;
      const client = clientOf(s, ips[i] as ParsedIp);
      return verdictOf(l.req === undefined ? authorizeConnection(cs, client) : authorizeRequest(cs, client, l.req));
    });
    const vs: Verdict[] = new Array(sources.length);
    for (let i = 0; i < sources.length; i++) {
      const g = groupOf[i] as number;
      vs[i] = g === -1 ? BAD_ADDRESS : (perGroup[g] as Verdict);
    }
    const req = l.req;
    out.push({
      route: l.route?.meta,
      sample: req === undefined ? undefined : { method: req.method, path: req.path, host: typeof req.headers.host === 'string' ? req.headers.host : undefined },
      shadowed: false,
      verdicts: vs,
    });
  }
  return { routes: out, groups: reps.length, evaluations };
}

const networkKeys = new WeakMap<readonly Network[], string>();

/** A text key of a network list's contents (cached per list: policy values are immutable). */
function networksKey(networks: readonly Network[]): string {
  let k = networkKeys.get(networks);
  if (k === undefined) {
    k = networks.map((n) => `${n.net.ip}/${n.net.prefixLen}${n.except.map((e) => `-${e.ip}/${e.prefixLen}`).join('')}`).join(',');
    networkKeys.set(networks, k);
  }
  return k;
}
