/**
 * SMI access policy compiled into the `InboundServer` values the proxy already enforces
 * (README "SMI access policy", docs/smi.md). One `SmiNamespace` holds a namespace's
 * TrafficTargets and the route objects they name (rules reference routes of the TrafficTarget's
 * own namespace; sources may be ServiceAccounts of any namespace).
 *
 * The mapping, per (pod, port):
 * - A TrafficTarget governs a pod port when its destination is the pod's ServiceAccount (in the
 *   TrafficTarget's namespace), the port is its `destination.port` (v1alpha1/v1alpha2; absent =
 *   every port) and, when it has TCPRoute rules, one of their ports (none listed = every port).
 *   A TrafficTarget whose rules are all UDPRoutes governs no TCP port.
 * - A governed port is deny-by-default: its value lists only what the governing TrafficTargets
 *   admit (additively), plus kubelet probes (the probe route, as default servers have it).
 * - A TrafficTarget with HTTPRouteGroup rules admits its sources on the HTTP routes of the
 *   matches it names (all of the group's when `matches` is omitted or empty); its TCPRoutes then
 *   only choose the ports (the SMI text's L7 example). Without HTTPRouteGroup rules its TCPRoutes
 *   admit its sources on the whole port (a server-level authorization).
 * - Each distinct match becomes one HTTP route whose authorizations are those of every
 *   TrafficTarget naming a match of the same content (OSM merges them the same way), so a
 *   request picks one route and sees every source admitted for it.
 * - pathRegex must match the whole path (as OSM and Envoy match it), header values their whole
 *   value; `*` or no methods = every method.
 * - A request no match covers falls to the catch-all default route, where only whole-port
 *   (TCPRoute) sources are admitted: 403 rather than 404, as for a Linkerd Server.
 * - An opaque port has no HTTP routes: HTTP-only TrafficTargets admit nothing there (SMI008).
 * A Linkerd Server on the same port wins over all of this (the index consults SMI only for ports
 * no Server binds; SMI007).
 */
import {
  ALL_NETWORKS,
  type Authorization,
  DEFAULT_HTTP_ROUTE,
  DETECT_TIMEOUT_MS,
  deepEqual,
  type HttpRoute,
  type HttpRouteMatch,
  type IdentityDomain,
  type InboundServer,
  type Network,
  probeRoute,
  serviceAccountIdentity,
} from '../core/index.js';
import {
  type HTTPRouteGroup,
  SMI_ACCESS_GROUP,
  SMI_SPECS_GROUP,
  type SmiHttpMatch,
  type SmiResource,
  type TCPRoute,
  type TrafficTarget,
  type UDPRoute,
} from '../manifest/index.js';
import type { PodInfo } from './pod.js';

/** One HTTPRouteGroup match a TrafficTarget admits, compiled. */
export interface SmiCompiledMatch {
  readonly group: string;
  readonly match: string;
  /** One engine match per method (`*` or none = one match without a method). */
  readonly matches: readonly HttpRouteMatch[];
  /** Content key: matches of equal content share one route. */
  readonly key: string;
}

/** A TrafficTarget as the index uses it. */
export interface SmiCompiledTarget {
  readonly name: string;
  /** The destination ServiceAccount; undefined when the TrafficTarget is ignored (kind or namespace). */
  readonly serviceAccount: string | undefined;
  readonly port: number | string | undefined;
  /** undefined: no TCPRoute rule; 'all' or a set of ports otherwise (a missing TCPRoute counts as every port). */
  readonly governedPorts: 'all' | ReadonlySet<number> | undefined;
  /** Ports its resolved TCPRoutes admit whole (only without HTTPRouteGroup rules). */
  readonly tcpPorts: 'all' | ReadonlySet<number> | undefined;
  readonly hasHttpRules: boolean;
  readonly onlyUdp: boolean;
  readonly httpMatches: readonly SmiCompiledMatch[];
  /** Its sources as one authorization (no identities when no source is a ServiceAccount). */
  readonly authz: Authorization;
}

/** What the compilation needs from the cluster. */
export interface SmiContext {
  readonly domain: IdentityDomain;
  readonly probeNetworks: readonly Network[];
}

/** Compiles one match into engine matches. */
export function compileSmiMatch(group: string, m: SmiHttpMatch): SmiCompiledMatch {
  const base: HttpRouteMatch = {
    // No pathRegex is OSM's `.*`: a path condition, so the match outranks the catch-all route.
    path: { kind: 'regex' as const, value: m.pathRegex !== undefined && m.pathRegex !== '' ? m.pathRegex : '.*' },
    headers: (m.headers ?? [])
      .map((h) => ({ name: h.name.toLowerCase(), kind: 'regex' as const, value: h.value }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    queryParams: [],
  };
  const methods = m.methods ?? [];
  const all = methods.length === 0 || methods.includes('*');
  const matches = all ? [base] : [...new Set(methods.map((x) => x.toUpperCase()))].sort().map((method) => ({ ...base, method }));
  return { group, match: m.name, matches, key: JSON.stringify(matches) };
}

const portsOf = (r: TCPRoute | undefined): 'all' | ReadonlySet<number> => (r?.spec.ports === undefined ? 'all' : new Set(r.spec.ports));

function union(a: 'all' | ReadonlySet<number> | undefined, b: 'all' | ReadonlySet<number>): 'all' | ReadonlySet<number> {
  if (a === 'all' || b === 'all') return 'all';
  return a === undefined ? b : new Set([...a, ...b]);
}

/** Compiles one TrafficTarget against the route objects of its namespace. */
export function compileTrafficTarget(
  tt: TrafficTarget,
  lookup: { httpRouteGroup(name: string): HTTPRouteGroup | undefined; tcpRoute(name: string): TCPRoute | undefined },
  domain: IdentityDomain,
): SmiCompiledTarget {
  const ns = tt.metadata.namespace;
  const d = tt.spec.destination;
  const valid = d.kind === 'ServiceAccount' && (d.namespace === undefined || d.namespace === ns);
  let governedPorts: 'all' | ReadonlySet<number> | undefined;
  let tcpPorts: 'all' | ReadonlySet<number> | undefined;
  const httpMatches: SmiCompiledMatch[] = [];
  let hasHttpRules = false;
  for (const rule of tt.spec.rules) {
    if (rule.kind === 'TCPRoute') {
      const route = lookup.tcpRoute(rule.name);
      governedPorts = union(governedPorts, portsOf(route));
      if (route !== undefined) tcpPorts = union(tcpPorts, portsOf(route));
    } else if (rule.kind === 'HTTPRouteGroup') {
      hasHttpRules = true;
      const group = lookup.httpRouteGroup(rule.name);
      if (group === undefined) continue;
      const wanted = rule.matches === undefined || rule.matches.length === 0 ? undefined : new Set(rule.matches);
      for (const m of group.spec.matches) if (wanted === undefined || wanted.has(m.name)) httpMatches.push(compileSmiMatch(group.metadata.name, m));
    }
  }
  const identities = tt.spec.sources
    .filter((s) => s.kind === 'ServiceAccount')
    .map((s) => serviceAccountIdentity(domain, s.namespace ?? ns, s.name))
    .filter((id, i, all) => all.indexOf(id) === i);
  return {
    name: tt.metadata.name,
    serviceAccount: valid ? d.name : undefined,
    port: d.port,
    governedPorts,
    tcpPorts: hasHttpRules ? undefined : tcpPorts,
    hasHttpRules,
    onlyUdp: tt.spec.rules.length > 0 && tt.spec.rules.every((r) => r.kind === 'UDPRoute'),
    httpMatches,
    authz: {
      meta: { group: SMI_ACCESS_GROUP, kind: 'traffictarget', name: tt.metadata.name },
      networks: ALL_NETWORKS,
      authentication: { kind: 'tlsAuthenticated', identities, suffixes: [] },
    },
  };
}

const inPorts = (ports: 'all' | ReadonlySet<number> | undefined, port: number) => ports === 'all' || (ports?.has(port) ?? false);

/** True when `t` governs `port` of `pod` (see the module comment). */
export function governsPort(t: SmiCompiledTarget, pod: PodInfo, port: number): boolean {
  if (t.serviceAccount !== pod.serviceAccount || t.onlyUdp) return false;
  if (t.port !== undefined) {
    const p = typeof t.port === 'number' ? t.port : /^\d+$/.test(t.port) ? Number(t.port) : undefined;
    const ok = p !== undefined ? p === port : (pod.namedPorts.get(t.port as string)?.includes(port) ?? false);
    if (!ok) return false;
  }
  return t.governedPorts === undefined || inPorts(t.governedPorts, port);
}

/** The SMI objects of one namespace and the values they compile to. */
export class SmiNamespace {
  readonly namespace: string;
  readonly targets = new Map<string, TrafficTarget>();
  readonly httpRouteGroups = new Map<string, HTTPRouteGroup>();
  readonly tcpRoutes = new Map<string, TCPRoute>();
  readonly udpRoutes = new Map<string, UDPRoute>();
  #compiled: SmiCompiledTarget[] | undefined;
  /** Values by (service account, port, opaque, probes, targets), kept across changes while equal. */
  #values = new Map<string, InboundServer>();
  #fresh = new Map<string, InboundServer>();

  constructor(namespace: string) {
    this.namespace = namespace;
  }

  #mapOf(kind: SmiResource['kind']): Map<string, SmiResource> {
    switch (kind) {
      case 'TrafficTarget':
        return this.targets as Map<string, SmiResource>;
      case 'HTTPRouteGroup':
        return this.httpRouteGroups as Map<string, SmiResource>;
      case 'TCPRoute':
        return this.tcpRoutes as Map<string, SmiResource>;
      case 'UDPRoute':
        return this.udpRoutes as Map<string, SmiResource>;
    }
  }

  #changed(): void {
    this.#compiled = undefined;
    // The last generation's values stay available for identity reuse; older ones are dropped.
    if (this.#fresh.size > 0) this.#values = this.#fresh;
    this.#fresh = new Map();
  }

  /**
   * The ServiceAccounts whose pods a change of (kind, name) can affect: a TrafficTarget's
   * destination, or the destinations of the TrafficTargets whose rules name the route object.
   */
  #affected(kind: SmiResource['kind'], name: string, into: Set<string>): void {
    if (kind === 'TrafficTarget') {
      const tt = this.targets.get(name);
      if (tt !== undefined) into.add(tt.spec.destination.name);
      return;
    }
    for (const tt of this.targets.values()) {
      if (tt.spec.rules.some((r) => r.kind === kind && r.name === name)) into.add(tt.spec.destination.name);
    }
  }

  /** Adds or replaces an SMI object; returns the ServiceAccounts whose pods may change (before and after). */
  apply(r: SmiResource): Set<string> {
    const affected = new Set<string>();
    this.#affected(r.kind, r.metadata.name, affected);
    this.#mapOf(r.kind).set(r.metadata.name, r);
    this.#affected(r.kind, r.metadata.name, affected);
    this.#changed();
    return affected;
  }

  /** Removes an SMI object; returns the ServiceAccounts whose pods may change (empty when it was not held). */
  delete(kind: string, name: string): Set<string> {
    const affected = new Set<string>();
    if (kind !== 'TrafficTarget' && kind !== 'HTTPRouteGroup' && kind !== 'TCPRoute' && kind !== 'UDPRoute') return affected;
    this.#affected(kind, name, affected);
    if (this.#mapOf(kind).delete(name)) this.#changed();
    return affected;
  }

  /** Every held object as (kind, name). */
  *keys(): Iterable<{ kind: SmiResource['kind']; name: string }> {
    for (const name of this.targets.keys()) yield { kind: 'TrafficTarget', name };
    for (const name of this.httpRouteGroups.keys()) yield { kind: 'HTTPRouteGroup', name };
    for (const name of this.tcpRoutes.keys()) yield { kind: 'TCPRoute', name };
    for (const name of this.udpRoutes.keys()) yield { kind: 'UDPRoute', name };
  }

  /** The TrafficTargets compiled, sorted by name. */
  compiled(domain: IdentityDomain): readonly SmiCompiledTarget[] {
    if (this.#compiled === undefined) {
      const lookup = { httpRouteGroup: (n: string) => this.httpRouteGroups.get(n), tcpRoute: (n: string) => this.tcpRoutes.get(n) };
      this.#compiled = [...this.targets.values()]
        .map((tt) => compileTrafficTarget(tt, lookup, domain))
        .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    }
    return this.#compiled;
  }

  /** The TrafficTargets governing a pod port (empty: SMI does not apply there). */
  governing(pod: PodInfo, port: number, domain: IdentityDomain): SmiCompiledTarget[] {
    if (this.targets.size === 0) return [];
    return this.compiled(domain).filter((t) => governsPort(t, pod, port));
  }

  /** The SMI value of a pod port, or undefined when no TrafficTarget governs it. */
  serverFor(pod: PodInfo, port: number, ctx: SmiContext): InboundServer | undefined {
    const targets = this.governing(pod, port, ctx.domain);
    if (targets.length === 0) return undefined;
    const opaque = pod.opaquePorts.has(port);
    const probes = opaque || ctx.probeNetworks.length === 0 ? [] : (pod.probePaths.get(port) ?? []);
    const key = `${pod.serviceAccount}|${port}|${opaque ? 'o' : 'd'}|${probes.join('\n')}|${targets.map((t) => t.name).join(',')}`;
    const hit = this.#fresh.get(key);
    if (hit !== undefined) return hit;
    let value = smiServer(targets, port, opaque, probes.length > 0 ? probeRoute(probes, ctx.probeNetworks) : undefined);
    const prev = this.#values.get(key);
    if (prev !== undefined && deepEqual(prev, value)) value = prev;
    this.#fresh.set(key, value);
    return value;
  }
}

/** Builds the value of a governed port from its TrafficTargets (sorted by name). */
export function smiServer(targets: readonly SmiCompiledTarget[], port: number, opaque: boolean, probes: HttpRoute | undefined): InboundServer {
  const meta = { group: SMI_ACCESS_GROUP, kind: 'traffictarget', name: targets.map((t) => t.name).join(',') };
  const authorizations = targets.filter((t) => inPorts(t.tcpPorts, port)).map((t) => t.authz);
  if (opaque) return { meta, protocol: { kind: 'opaque' }, authorizations };
  const byKey = new Map<string, { m: SmiCompiledMatch; authzs: Authorization[] }>();
  for (const t of targets) {
    for (const m of t.httpMatches) {
      const entry = byKey.get(m.key) ?? { m, authzs: [] };
      if (!entry.authzs.includes(t.authz)) entry.authzs.push(t.authz);
      byKey.set(m.key, entry);
    }
  }
  const routes: HttpRoute[] = [...byKey.values()]
    .map(({ m, authzs }) => ({
      meta: { group: SMI_SPECS_GROUP, kind: 'httproutegroup', name: `${m.group}:${m.match}` },
      hosts: [],
      authorizations: authzs,
      rules: [{ matches: m.matches, filters: [] }],
    }))
    .sort((a, b) => (a.meta.name < b.meta.name ? -1 : a.meta.name > b.meta.name ? 1 : 0));
  // Probes first and the catch-all last: equal-score ties go to the earlier route.
  const httpRoutes = [...(probes !== undefined ? [probes] : []), ...routes, DEFAULT_HTTP_ROUTE];
  return { meta, protocol: { kind: 'detect', timeoutMs: DETECT_TIMEOUT_MS, httpRoutes }, authorizations };
}
