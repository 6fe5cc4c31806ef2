/**
 * Which pods, ports and routes a policy object applies to, and through what (`ward authz
 * server/NAME`, `authorizationpolicy/NAME`, …, and the controller's `/api/v1/authz`). A Server
 * selects pods and binds a port; an AuthorizationPolicy or ServerAuthorization reaches ports
 * through the Server, route or namespace it targets; an authentication reaches them through
 * the AuthorizationPolicies that require it. An SMI TrafficTarget governs its destination
 * ServiceAccount's pods and ports; an HTTPRouteGroup or TCPRoute reaches them through the
 * TrafficTargets naming it. The answer is read from the policy the index publishes (and the
 * TrafficTargets it compiled), so it is what the proxies enforce, not a second reading of the
 * manifests.
 */
import { deepEqual, type GrpcRoute, type HttpRoute, type InboundServer, type IpNet, type LabelSelector, selectorMatches } from '../core/index.js';
import { type Server, SMI_ACCESS_GROUP, SMI_SPECS_GROUP, type SmiHttpMatch, type TrafficTarget } from '../manifest/index.js';
import type { ApSpec, AuthnRef, SazSpec } from './convert.js';
import { sameName } from './convert.js';
import type { PodInfo } from './pod.js';
import type { IndexedResource } from './policy-index.js';
import { type PolicyView, QueryError } from './query-error.js';
import { governsPort, type SmiCompiledTarget, type SmiNamespace } from './smi.js';

/** The policy kinds `ward authz` explains. */
export type PolicyKind =
  | 'Server'
  | 'AuthorizationPolicy'
  | 'ServerAuthorization'
  | 'MeshTLSAuthentication'
  | 'NetworkAuthentication'
  | 'HTTPRoute'
  | 'GRPCRoute'
  | 'TrafficTarget'
  | 'HTTPRouteGroup'
  | 'TCPRoute'
  | 'UDPRoute';

/**
 * Resource words for policy kinds, as kubectl accepts them: singular, plural and the short
 * names the CRDs declare (Linkerd's `srv`, `saz`, its other policy CRDs none; SMI's `tt`,
 * `htr`, `tr`, `ur`).
 */
const POLICY_KIND_WORDS: Readonly<Record<string, PolicyKind>> = {
  server: 'Server',
  servers: 'Server',
  srv: 'Server',
  authorizationpolicy: 'AuthorizationPolicy',
  authorizationpolicies: 'AuthorizationPolicy',
  serverauthorization: 'ServerAuthorization',
  serverauthorizations: 'ServerAuthorization',
  saz: 'ServerAuthorization',
  meshtlsauthentication: 'MeshTLSAuthentication',
  meshtlsauthentications: 'MeshTLSAuthentication',
  networkauthentication: 'NetworkAuthentication',
  networkauthentications: 'NetworkAuthentication',
  httproute: 'HTTPRoute',
  httproutes: 'HTTPRoute',
  grpcroute: 'GRPCRoute',
  grpcroutes: 'GRPCRoute',
  traffictarget: 'TrafficTarget',
  traffictargets: 'TrafficTarget',
  tt: 'TrafficTarget',
  httproutegroup: 'HTTPRouteGroup',
  httproutegroups: 'HTTPRouteGroup',
  htr: 'HTTPRouteGroup',
  tcproute: 'TCPRoute',
  tcproutes: 'TCPRoute',
  tr: 'TCPRoute',
  udproute: 'UDPRoute',
  udproutes: 'UDPRoute',
  ur: 'UDPRoute',
};

/** The API group of each SMI kind: `tcproutes.gateway.networking.k8s.io` is another kind. */
const SMI_GROUPS: Partial<Record<PolicyKind, string>> = {
  TrafficTarget: SMI_ACCESS_GROUP,
  HTTPRouteGroup: SMI_SPECS_GROUP,
  TCPRoute: SMI_SPECS_GROUP,
  UDPRoute: SMI_SPECS_GROUP,
};

/** The policy kind a resource word names (`srv`, `servers`, `AuthorizationPolicy`, `tt`, …), if any. */
export function policyKindOf(word: string): PolicyKind | undefined {
  const w = word.toLowerCase();
  // kubectl also takes `kind.group` and `kind.version.group` (servers.policy.linkerd.io).
  const dot = w.indexOf('.');
  const kind = POLICY_KIND_WORDS[dot === -1 ? w : w.slice(0, dot)];
  const group = SMI_GROUPS[kind ?? 'Server'];
  if (dot === -1 || group === undefined) return kind;
  const rest = w.slice(dot + 1);
  return rest === group || (/^v1alpha\d+\./.test(rest) && rest.slice(rest.indexOf('.') + 1) === group) ? kind : undefined;
}

/** One pod port (and route) a policy object applies to. */
export interface PolicyTargetRow {
  readonly namespace: string;
  readonly pod: string;
  /** `Deployment/web` for a pod built from a workload, else null. */
  readonly workload: string | null;
  /** Null when the object selects the pod but binds no port there (a port name it does not declare). */
  readonly port: number | null;
  /** `server/NAME` (or `default/<policy>`) whose policy the port has. */
  readonly server: string | null;
  /** `httproute/NAME` or `grpcroute/NAME` when the object applies to one route only. */
  readonly route: string | null;
  /** The chain that connects the object to this port, e.g. `AuthorizationPolicy a → Server s`. */
  readonly via: string;
  /** False when the object would apply but does not (a Server that lost the port, a port name not declared). */
  readonly active: boolean;
  readonly note?: string;
}

/** One policy object and where it applies. */
export interface PolicyObjectView {
  readonly namespace: string;
  readonly kind: PolicyKind;
  readonly name: string;
  /** What the object says, in one line (its selector and port, its target and authentications, …). */
  readonly summary: string;
  /** For a Server or route: the authorizations attached to it (`authorizationpolicy/NAME`, …). */
  readonly authorizations: readonly string[];
  /**
   * For an authentication: the AuthorizationPolicies that require it; for an HTTPRouteGroup,
   * TCPRoute or UDPRoute: the TrafficTargets whose rules name it (`NS/NAME`).
   */
  readonly usedBy: readonly string[];
  readonly appliesTo: readonly PolicyTargetRow[];
  /** Why it applies to less than it seems to (ignored, dropped, not accepted, unused). */
  readonly notes: readonly string[];
}

/** `ward authz KIND[/NAME] -o json` for a policy kind. */
export interface PolicyTargetsResult {
  readonly policies: readonly PolicyObjectView[];
}

const KIND_PLURAL: Record<PolicyKind, string> = {
  Server: 'Servers',
  AuthorizationPolicy: 'AuthorizationPolicies',
  ServerAuthorization: 'ServerAuthorizations',
  MeshTLSAuthentication: 'MeshTLSAuthentications',
  NetworkAuthentication: 'NetworkAuthentications',
  HTTPRoute: 'HTTPRoutes',
  GRPCRoute: 'GRPCRoutes',
  TrafficTarget: 'TrafficTargets',
  HTTPRouteGroup: 'HTTPRouteGroups',
  TCPRoute: 'TCPRoutes',
  UDPRoute: 'UDPRoutes',
};

/** `app=web,tier in (a,b)`, or `every pod` for an empty selector. */
export function describeSelector(sel: LabelSelector | undefined): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(sel?.matchLabels ?? {})) parts.push(`${k}=${v}`);
  for (const e of sel?.matchExpressions ?? []) {
    const op = e.operator;
    if (op === 'Exists') parts.push(e.key);
    else if (op === 'DoesNotExist') parts.push(`!${e.key}`);
    else parts.push(`${e.key} ${op === 'NotIn' ? 'notin' : 'in'} (${(e.values ?? []).join(',')})`);
  }
  return parts.length === 0 ? 'every pod' : parts.join(',');
}

function routesOf(s: InboundServer): readonly (HttpRoute | GrpcRoute)[] {
  const p = s.protocol;
  if (p.kind === 'detect') return p.httpRoutes;
  if (p.kind === 'http1' || p.kind === 'http2' || p.kind === 'grpc') return p.routes;
  return [];
}

const refName = (m: { readonly kind: string; readonly name: string }) => `${m.kind.toLowerCase()}/${m.name}`;

interface PortPolicy {
  readonly namespace: string;
  readonly pod: string;
  readonly workload: string | null;
  readonly port: number;
  readonly value: InboundServer;
}

/** Every published pod port of a namespace with its policy. */
function portPolicies(view: PolicyView, namespace: string): PortPolicy[] {
  const out: PortPolicy[] = [];
  const pods = view.index
    .pods()
    .filter((p) => p.namespace === namespace)
    .sort((a, b) => (a.name < b.name ? -1 : 1));
  for (const p of pods) {
    for (const port of view.index.ports(namespace, p.name)) {
      const cell = view.index.peek(namespace, p.name, port);
      if (cell !== undefined) out.push({ namespace, pod: p.name, workload: p.pod.owner ?? null, port, value: cell.value });
    }
  }
  return out;
}

/** Rows of the ports and routes whose published policy carries authorization `kind/name`. */
function authzRows(view: PolicyView, namespace: string, kind: string, name: string, via: string): PolicyTargetRow[] {
  const rows: PolicyTargetRow[] = [];
  const is = (m: { readonly kind: string; readonly name: string }) => m.kind === kind && m.name === name;
  for (const pp of portPolicies(view, namespace)) {
    const base = { namespace, pod: pp.pod, workload: pp.workload, port: pp.port, server: refName(pp.value.meta), active: true };
    if (pp.value.authorizations.some((a) => is(a.meta))) rows.push({ ...base, route: null, via: `${via} → Server ${pp.value.meta.name}` });
    for (const r of routesOf(pp.value)) {
      if (r.authorizations.some((a) => is(a.meta))) rows.push({ ...base, route: refName(r.meta), via: `${via} → ${r.meta.kind} ${r.meta.name}` });
    }
  }
  return rows;
}

function serverView(view: PolicyView, s: Server): PolicyObjectView {
  const ns = s.metadata.namespace;
  const name = s.metadata.name;
  const selector = s.spec.podSelector;
  const portText = typeof s.spec.port === 'number' ? `port ${s.spec.port}` : `port name "${s.spec.port}"`;
  const selects = (sel: LabelSelector | undefined, what: string) => {
    const d = describeSelector(sel);
    return d === 'every pod' ? `every ${what}` : `${what}s ${d}`;
  };
  const summary =
    selector === undefined
      ? `selects ${selects(s.spec.externalWorkloadSelector, 'external workload')}, ${portText}, ${s.spec.proxyProtocol}`
      : `selects ${selects(selector, 'pod')}, ${portText}, ${s.spec.proxyProtocol}`;
  const via = `podSelector ${describeSelector(selector) === 'every pod' ? '{} (every pod)' : describeSelector(selector)}, ${portText}`;
  const rows: PolicyTargetRow[] = [];
  const authorizations = new Set<string>();
  const routes = new Set<string>();
  const notes: string[] = [];
  if (selector === undefined) notes.push('it selects external workloads, which ward does not run; it applies to no pod');
  for (const p of view.index
    .pods()
    .filter((q) => q.namespace === ns)
    .sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const base = { namespace: ns, pod: p.name, workload: p.pod.owner ?? null, route: null };
    let matched = false;
    for (const b of view.index.bindings(ns, p.name)) {
      if (b.server === name) {
        matched = true;
        rows.push({ ...base, port: b.port, server: `server/${name}`, via, active: true });
        const cell = view.index.peek(ns, p.name, b.port);
        for (const a of cell?.value.authorizations ?? []) authorizations.add(refName(a.meta));
        // The routes a Server without routes of its own gets (default, probe) match what they must.
        for (const r of cell === undefined ? [] : routesOf(cell.value)) if (r.meta.kind !== 'default') routes.add(refName(r.meta));
      } else if (b.losers.includes(name)) {
        matched = true;
        rows.push({ ...base, port: b.port, server: `server/${b.server}`, via, active: false, note: `Server ${b.server} binds this port instead` });
      }
    }
    if (!matched && selector !== undefined && selectorMatches(selector, p.labels) && typeof s.spec.port === 'string') {
      rows.push({
        ...base,
        port: null,
        server: null,
        via,
        active: false,
        note: `the pod declares no container port named "${s.spec.port}"`,
      });
    }
  }
  if (rows.length === 0 && selector !== undefined) notes.push(`it selects no pod in namespace ${ns}`);
  if (routes.size > 0) notes.push(`routes: ${[...routes].join(', ')} (requests matching no route are denied with 404)`);
  return { namespace: ns, kind: 'Server', name, summary, authorizations: [...authorizations], usedBy: [], appliesTo: rows, notes };
}

function describeTarget(ap: ApSpec, ns: string): string {
  const t = ap.target;
  if (t.kind === 'server') return `Server ${t.name}`;
  if (t.kind === 'namespace') return `Namespace ${ns} (every Server in it)`;
  return `${t.kind === 'httproute' ? 'HTTPRoute' : 'GRPCRoute'} ${t.name}`;
}

function apRequirements(ap: ApSpec, ns: string): string[] {
  const show = (kind: string, r: AuthnRef) => `${kind} ${r.namespace === ns ? r.name : `${r.namespace}/${r.name}`}`;
  const out: string[] = [];
  if (ap.meshTLS !== undefined) out.push(show('MeshTLSAuthentication', ap.meshTLS));
  if (ap.network !== undefined) out.push(show('NetworkAuthentication', ap.network));
  if (ap.serviceAccount !== undefined) out.push(show('ServiceAccount', ap.serviceAccount));
  return out;
}

/** Why an AuthorizationPolicy applies nowhere, when the index can tell. */
function apNotes(view: PolicyView, ns: string, ap: ApSpec): string[] {
  const notes: string[] = [];
  const missing = (kind: 'MeshTLSAuthentication' | 'NetworkAuthentication', r: AuthnRef | undefined) => {
    if (r !== undefined && !view.index.resolvesAuthn(kind, r.namespace, r.name)) {
      notes.push(`it requires ${kind} ${r.namespace}/${r.name}, which does not exist (or is invalid): the policy is dropped and grants nothing`);
    }
  };
  missing('MeshTLSAuthentication', ap.meshTLS);
  missing('NetworkAuthentication', ap.network);
  const t = ap.target;
  if (t.kind === 'server' && !view.index.servers(ns).some((s) => sameName(s.metadata.name, t.name))) {
    notes.push(`its target Server ${t.name} does not exist in namespace ${ns}`);
  }
  if (t.kind === 'httproute' || t.kind === 'grpcroute') {
    const objs = view.index.policyObjects(ns);
    const list = t.kind === 'httproute' ? objs.httpRoutes : objs.grpcRoutes;
    if (!list.some((e) => sameName(e.resource.metadata.name, t.name))) notes.push(`its target ${describeTarget(ap, ns)} does not exist in namespace ${ns}`);
  }
  return notes;
}

function apView(view: PolicyView, ns: string, entry: IndexedResource<ApSpec>, prefix = ''): PolicyObjectView {
  const name = entry.resource.metadata.name;
  const base = { namespace: ns, kind: 'AuthorizationPolicy' as const, name, authorizations: [], usedBy: [] };
  if (!entry.converted.ok) {
    return { ...base, summary: 'invalid', appliesTo: [], notes: [`the index ignores it: ${entry.converted.reason}`] };
  }
  const ap = entry.converted.value;
  const reqs = apRequirements(ap, ns);
  const summary = `targets ${describeTarget(ap, ns)}; requires ${reqs.length === 0 ? 'nothing (any client)' : reqs.join(' and ')}`;
  const rows = authzRows(view, ns, 'authorizationpolicy', name, `${prefix}AuthorizationPolicy ${name}`);
  const notes = rows.length === 0 ? apNotes(view, ns, ap) : [];
  if (rows.length === 0 && notes.length === 0) notes.push('no pod port has a Server (or route) it targets');
  if (entry.rejected !== undefined) notes.push(`an update was rejected (${entry.rejected.reason}); the previous version stays in force`);
  return { ...base, summary, appliesTo: rows, notes };
}

function sazView(view: PolicyView, ns: string, entry: IndexedResource<SazSpec>): PolicyObjectView {
  const name = entry.resource.metadata.name;
  const base = { namespace: ns, kind: 'ServerAuthorization' as const, name, authorizations: [], usedBy: [] };
  if (!entry.converted.ok) return { ...base, summary: 'invalid', appliesTo: [], notes: [`the index ignores it: ${entry.converted.reason}`] };
  const saz = entry.converted.value;
  const target = 'name' in saz.server ? `Server ${saz.server.name}` : `Servers ${describeSelector(saz.server.selector)}`;
  const clients =
    saz.authn.kind === 'unauthenticated'
      ? 'any client'
      : saz.authn.kind === 'tlsUnauthenticated'
        ? 'any TLS client'
        : `${saz.authn.matches.map((m) => (m.kind === 'exact' ? m.name : m.parts.length === 0 ? '*' : `*.${m.parts.join('.')}`)).join(', ')}`;
  const rows = authzRows(view, ns, 'serverauthorization', name, `ServerAuthorization ${name}`);
  const notes = rows.length === 0 ? [`${target} selects no pod port in namespace ${ns}`] : [];
  return { ...base, summary: `authorizes ${clients} on ${target}`, appliesTo: rows, notes };
}

function authnView(view: PolicyView, kind: 'MeshTLSAuthentication' | 'NetworkAuthentication', ns: string, name: string, summary: string): PolicyObjectView {
  const rows: PolicyTargetRow[] = [];
  const usedBy: string[] = [];
  for (const apNs of view.index.namespaces()) {
    for (const entry of view.index.policyObjects(apNs).authorizationPolicies) {
      if (!entry.converted.ok) continue;
      const ref = kind === 'MeshTLSAuthentication' ? entry.converted.value.meshTLS : entry.converted.value.network;
      if (ref === undefined || ref.namespace !== ns || !sameName(ref.name, name)) continue;
      usedBy.push(`${apNs}/${entry.resource.metadata.name}`);
      rows.push(...apView(view, apNs, entry, `${kind} ${name} → `).appliesTo);
    }
  }
  const notes = usedBy.length === 0 ? ['no AuthorizationPolicy requires it, so it admits nobody anywhere'] : [];
  return { namespace: ns, kind, name, summary, authorizations: [], usedBy, appliesTo: rows, notes };
}

function routeView(view: PolicyView, kind: 'HTTPRoute' | 'GRPCRoute', ns: string, name: string): PolicyObjectView {
  const rows: PolicyTargetRow[] = [];
  const authorizations = new Set<string>();
  for (const pp of portPolicies(view, ns)) {
    for (const r of routesOf(pp.value)) {
      if (r.meta.kind !== kind || r.meta.name !== name) continue;
      for (const a of r.authorizations) authorizations.add(refName(a.meta));
      rows.push({
        namespace: ns,
        pod: pp.pod,
        workload: pp.workload,
        port: pp.port,
        server: refName(pp.value.meta),
        route: refName(r.meta),
        via: `${kind} ${name} → parentRef Server ${pp.value.meta.name}`,
        active: true,
      });
    }
  }
  const notes: string[] = [];
  const parents: string[] = [];
  for (const [key, statuses] of view.index.routeStatus(ns)) {
    if (!key.startsWith(`${kind}/`) || key.slice(key.lastIndexOf('/') + 1) !== name) continue;
    for (const st of statuses) {
      parents.push(st.server);
      if (!st.accepted) {
        notes.push(
          st.reason === 'NoMatchingParent'
            ? `parent Server ${st.server} does not exist in namespace ${ns}`
            : `parent Server ${st.server} also has a GRPCRoute, which wins: this route is not used there`,
        );
      }
    }
  }
  if (authorizations.size === 0 && rows.length > 0) notes.push("no AuthorizationPolicy targets it: only the Server's authorizations admit its requests");
  const summary = parents.length === 0 ? 'no Server parent' : `parents: ${parents.map((p) => `Server ${p}`).join(', ')}`;
  return { namespace: ns, kind, name, summary, authorizations: [...authorizations], usedBy: [], appliesTo: rows, notes };
}

function describeIdentities(entry: IndexedResource<unknown>): string {
  const r = entry.resource;
  if (r.kind === 'MeshTLSAuthentication') {
    const ids = [...(r.spec.identities ?? []), ...(r.spec.identityRefs ?? []).map((x) => `${x.kind} ${x.namespace ? `${x.namespace}/` : ''}${x.name ?? '*'}`)];
    return `identities ${ids.join(', ')}`;
  }
  if (r.kind === 'NetworkAuthentication') {
    const cidr = (n: IpNet) => `${n.ip}/${n.prefixLen}`;
    return `networks ${r.spec.networks.map((n) => cidr(n.net) + (n.except.length > 0 ? ` except ${n.except.map(cidr).join(',')}` : '')).join(', ')}`;
  }
  return '';
}

// === SMI: TrafficTargets govern pod ports; HTTPRouteGroups and TCPRoutes reach them through TrafficTargets ===

/** A TrafficTarget and what it compiled to (the index's compilation, not a second one). */
interface SmiEntry {
  readonly tt: TrafficTarget;
  readonly compiled: SmiCompiledTarget;
}

function smiEntries(view: PolicyView, ns: string): { smi: SmiNamespace | undefined; entries: SmiEntry[] } {
  const smi = view.index.smi(ns);
  if (smi === undefined) return { smi, entries: [] };
  const entries = smi.compiled(view.index.identityDomain).flatMap((compiled) => {
    const tt = smi.targets.get(compiled.name);
    return tt === undefined ? [] : [{ tt, compiled }];
  });
  return { smi, entries };
}

/** Which of a TrafficTarget's admissions a row set shows. */
type SmiScope =
  | { readonly kind: 'all' }
  | { readonly kind: 'group'; readonly group: string }
  | { readonly kind: 'ports'; readonly ports: 'all' | ReadonlySet<number> };

/** The pod ports a TrafficTarget governs, with their published value. */
function governedPorts(view: PolicyView, ns: string, t: SmiCompiledTarget): { pod: PodInfo; port: number; value: InboundServer }[] {
  const out: { pod: PodInfo; port: number; value: InboundServer }[] = [];
  const pods = view.index
    .pods()
    .filter((p) => p.namespace === ns && t.serviceAccount !== undefined && p.serviceAccount === t.serviceAccount)
    .sort((a, b) => (a.name < b.name ? -1 : 1));
  for (const pod of pods) {
    // A governed port need not be published yet (no container declares it): it is governed when traffic comes.
    const candidates = new Set(view.index.ports(ns, pod.name));
    if (typeof t.port === 'number') candidates.add(t.port);
    if (t.governedPorts !== undefined && t.governedPorts !== 'all') for (const p of t.governedPorts) candidates.add(p);
    for (const port of [...candidates].sort((a, b) => a - b)) {
      if (!governsPort(t, pod, port)) continue;
      const value = view.index.peek(ns, pod.name, port)?.value;
      if (value !== undefined) out.push({ pod, port, value });
    }
  }
  return out;
}

/**
 * Rows of the pod ports (and routes) where TrafficTarget `t` admits its sources, within
 * `scope`; a governed port where it admits nothing is an inactive row saying why.
 */
function smiTargetRows(
  view: PolicyView,
  ns: string,
  t: SmiCompiledTarget,
  scope: SmiScope,
  via: (match: { group: string; match: string } | undefined) => string,
): PolicyTargetRow[] {
  const rows: PolicyTargetRow[] = [];
  const isMine = (a: { readonly meta: { readonly kind: string; readonly name: string } }) => a.meta.kind === 'traffictarget' && a.meta.name === t.name;
  for (const { pod, port, value } of governedPorts(view, ns, t)) {
    if (scope.kind === 'ports' && scope.ports !== 'all' && !scope.ports.has(port)) continue;
    const base = { namespace: ns, pod: pod.name, workload: pod.pod.owner ?? null, port, server: refName(value.meta) };
    if (value.meta.kind !== 'traffictarget') {
      const note = `Server ${value.meta.name} binds this port and wins over SMI: the TrafficTarget has no effect here (SMI007)`;
      rows.push({ ...base, route: null, via: via(undefined), active: false, note });
      continue;
    }
    const before = rows.length;
    if (scope.kind !== 'group' && value.authorizations.some(isMine)) rows.push({ ...base, route: null, via: via(undefined), active: true });
    const seen = new Set<string>();
    for (const m of t.httpMatches) {
      if (scope.kind === 'group' && m.group !== scope.group) continue;
      // Matches of equal content share one route, named after the first of them (smiServer).
      const r = routesOf(value).find((x) => x.meta.kind === 'httproutegroup' && x.authorizations.some(isMine) && deepEqual(x.rules[0]?.matches, m.matches));
      if (r === undefined || seen.has(r.meta.name)) continue;
      seen.add(r.meta.name);
      const own = `${m.group}:${m.match}`;
      const row = { ...base, route: refName(r.meta), via: via(m), active: true };
      rows.push(r.meta.name === own ? row : { ...row, note: `match ${own} equals ${r.meta.name}: one route carries both` });
    }
    if (rows.length > before) continue;
    const opaque = pod.opaquePorts.has(port);
    const note = opaque
      ? 'the port is opaque, so HTTP rules admit nothing here (SMI008)'
      : t.hasHttpRules && t.httpMatches.length === 0
        ? 'its HTTPRouteGroup rules resolve to no match: it admits nothing here (SMI002, SMI003)'
        : 'it admits nothing here';
    rows.push({ ...base, route: null, via: via(undefined), active: false, note });
  }
  return rows;
}

const subjectText = (s: { readonly kind: string; readonly name: string; readonly namespace?: string | undefined }, ns: string) =>
  `${s.kind} ${s.namespace !== undefined && s.namespace !== ns ? `${s.namespace}/` : ''}${s.name}`;

/** Why a TrafficTarget applies to less than it says, from what the index holds. */
function trafficTargetNotes(view: PolicyView, ns: string, smi: SmiNamespace, e: SmiEntry, rows: readonly PolicyTargetRow[]): string[] {
  const notes: string[] = [];
  const d = e.tt.spec.destination;
  if (d.kind !== 'ServiceAccount') notes.push(`its destination is a ${d.kind}, not a ServiceAccount: it is ignored (SMI004)`);
  else if (d.namespace !== undefined && d.namespace !== ns) {
    notes.push(`its destination is in namespace ${d.namespace}, not ${ns}: it is ignored, as OSM ignores it (SMI005)`);
  }
  for (const r of e.tt.spec.rules) {
    if (r.kind === 'UDPRoute') continue;
    const group = r.kind === 'HTTPRouteGroup' ? smi.httpRouteGroups.get(r.name) : undefined;
    if (r.kind === 'HTTPRouteGroup' ? group === undefined : !smi.tcpRoutes.has(r.name)) {
      const consequence = r.kind === 'TCPRoute' ? 'it counts as every port and admits nothing' : 'its matches admit nothing';
      notes.push(`its rule names ${r.kind} ${r.name}, which does not exist in namespace ${ns}: ${consequence} (SMI002)`);
    }
    for (const m of r.matches ?? []) {
      if (group !== undefined && !group.spec.matches.some((x) => x.name === m)) notes.push(`HTTPRouteGroup ${r.name} defines no match "${m}" (SMI003)`);
    }
  }
  if (e.compiled.onlyUdp) notes.push("its rules are all UDPRoutes and ward's proxy carries TCP only: it governs no port (SMI009)");
  else if (e.tt.spec.rules.some((r) => r.kind === 'UDPRoute')) notes.push("its UDPRoute rules admit nothing: ward's proxy carries TCP only (SMI009)");
  if (e.tt.spec.sources.every((s) => s.kind !== 'ServiceAccount')) notes.push('it names no ServiceAccount source: it admits nobody (SMI011)');
  if (e.compiled.serviceAccount !== undefined && !e.compiled.onlyUdp && rows.length === 0) {
    const sa = e.compiled.serviceAccount;
    const hasPods = view.index.pods().some((p) => p.namespace === ns && p.serviceAccount === sa);
    notes.push(
      hasPods
        ? `no port of ServiceAccount ${sa}'s pods is one it governs`
        : `ServiceAccount ${sa} has no meshed pod in namespace ${ns}: it applies to no pod (SMI006)`,
    );
  }
  return notes;
}

function trafficTargetView(view: PolicyView, ns: string, smi: SmiNamespace, e: SmiEntry): PolicyObjectView {
  const { tt, compiled: t } = e;
  const d = tt.spec.destination;
  const rules = tt.spec.rules.map((r) =>
    r.kind === 'HTTPRouteGroup'
      ? `${r.kind} ${r.name} (${r.matches === undefined || r.matches.length === 0 ? 'every match' : r.matches.join(', ')})`
      : `${r.kind} ${r.name}`,
  );
  const summary = [
    `destination ${subjectText(d, ns)}${d.port === undefined ? '' : `, port ${d.port}`}`,
    `sources ${tt.spec.sources.map((s) => subjectText(s, ns)).join(', ') || 'none'}`,
    `rules ${rules.join(', ') || 'none'}`,
  ].join('; ');
  const head = `TrafficTarget ${t.name} → ServiceAccount ${t.serviceAccount ?? d.name}`;
  const rows = smiTargetRows(view, ns, t, { kind: 'all' }, (m) => (m === undefined ? head : `${head} → HTTPRouteGroup ${m.group} match ${m.match}`));
  const notes = trafficTargetNotes(view, ns, smi, e, rows);
  return { namespace: ns, kind: 'TrafficTarget', name: t.name, summary, authorizations: [], usedBy: [], appliesTo: rows, notes };
}

function describeSmiMatch(m: SmiHttpMatch): string {
  const methods = m.methods === undefined || m.methods.length === 0 || m.methods.includes('*') ? 'any method' : m.methods.join(',');
  const headers = (m.headers ?? []).length === 0 ? '' : `, headers ${(m.headers ?? []).map((h) => h.name).join(',')}`;
  return `${m.name} (${methods} ${m.pathRegex !== undefined && m.pathRegex !== '' ? m.pathRegex : '.*'}${headers})`;
}

/** An HTTPRouteGroup, TCPRoute or UDPRoute: where it applies through the TrafficTargets naming it. */
function smiRouteView(view: PolicyView, ns: string, kind: 'HTTPRouteGroup' | 'TCPRoute' | 'UDPRoute', name: string): PolicyObjectView {
  const { smi, entries } = smiEntries(view, ns);
  const rows: PolicyTargetRow[] = [];
  const usedBy: string[] = [];
  const notes: string[] = [];
  const picksOnly: string[] = [];
  const group = smi?.httpRouteGroups.get(name);
  const ports = kind === 'TCPRoute' ? smi?.tcpRoutes.get(name)?.spec.ports : smi?.udpRoutes.get(name)?.spec.ports;
  const summary =
    kind === 'HTTPRouteGroup'
      ? `matches ${(group?.spec.matches ?? []).map(describeSmiMatch).join(', ') || 'none'}`
      : `${ports === undefined || ports.length === 0 ? 'every port' : `port${ports.length > 1 ? 's' : ''} ${ports.join(', ')}`}`;
  if (kind === 'UDPRoute')
    notes.push("ward's proxy intercepts and authorizes TCP only; UDP does not pass through it, so a UDPRoute admits nothing and governs no port (SMI009)");
  for (const e of entries) {
    const rule = e.tt.spec.rules.find((r) => r.kind === kind && r.name === name);
    if (rule === undefined) continue;
    usedBy.push(`${ns}/${e.compiled.name}`);
    if (kind === 'UDPRoute') continue;
    if (e.compiled.serviceAccount === undefined) {
      notes.push(`TrafficTarget ${e.compiled.name} names it but is ignored (its destination is not a ServiceAccount of namespace ${ns}: SMI004, SMI005)`);
      continue;
    }
    const head = `${kind} ${name} → TrafficTarget ${e.compiled.name} → ServiceAccount ${e.compiled.serviceAccount}`;
    if (kind === 'HTTPRouteGroup') {
      for (const m of rule.matches ?? []) {
        if (group !== undefined && !group.spec.matches.some((x) => x.name === m))
          notes.push(`TrafficTarget ${e.compiled.name} names match "${m}", which it does not define (SMI003)`);
      }
      rows.push(
        ...smiTargetRows(view, ns, e.compiled, { kind: 'group', group: name }, (m) =>
          m === undefined ? head : `${kind} ${name} match ${m.match} → TrafficTarget ${e.compiled.name} → ServiceAccount ${e.compiled.serviceAccount}`,
        ),
      );
    } else {
      if (e.compiled.hasHttpRules) picksOnly.push(e.compiled.name);
      const scope = { kind: 'ports' as const, ports: ports === undefined || ports.length === 0 ? ('all' as const) : new Set(ports) };
      rows.push(...smiTargetRows(view, ns, e.compiled, scope, (m) => (m === undefined ? head : `${head} → HTTPRouteGroup ${m.group} match ${m.match}`)));
    }
  }
  if (picksOnly.length > 0) {
    const who = picksOnly.length === 1 ? `TrafficTarget ${picksOnly[0]} also has` : `TrafficTargets ${picksOnly.join(', ')} also have`;
    notes.push(`${who} HTTPRouteGroup rules: this TCPRoute only picks the ports, those rules' routes admit the sources`);
  }
  if (usedBy.length === 0) notes.push('no TrafficTarget names it, so it admits nobody anywhere');
  else if (rows.length === 0 && kind !== 'UDPRoute') notes.push('the TrafficTargets naming it govern no pod port');
  return { namespace: ns, kind, name, summary, authorizations: [], usedBy, appliesTo: rows, notes };
}

/** Names of the objects of `kind` in a namespace. */
function objectsOf(view: PolicyView, kind: PolicyKind, ns: string): { name: string; build: () => PolicyObjectView }[] {
  const objs = view.index.policyObjects(ns);
  switch (kind) {
    case 'Server':
      return view.index.servers(ns).map((s) => ({ name: s.metadata.name, build: () => serverView(view, s) }));
    case 'AuthorizationPolicy':
      return objs.authorizationPolicies.map((e) => ({ name: e.resource.metadata.name, build: () => apView(view, ns, e) }));
    case 'ServerAuthorization':
      return objs.serverAuthorizations.map((e) => ({ name: e.resource.metadata.name, build: () => sazView(view, ns, e) }));
    case 'MeshTLSAuthentication':
    case 'NetworkAuthentication': {
      const list = kind === 'MeshTLSAuthentication' ? objs.meshTLSAuthentications : objs.networkAuthentications;
      return list.map((e) => ({
        name: e.resource.metadata.name,
        build: () => {
          const v = authnView(view, kind, ns, e.resource.metadata.name, describeIdentities(e));
          return e.converted.ok ? v : { ...v, notes: [`the index ignores it: ${e.converted.reason}`, ...v.notes] };
        },
      }));
    }
    case 'HTTPRoute':
    case 'GRPCRoute': {
      const list = kind === 'HTTPRoute' ? objs.httpRoutes : objs.grpcRoutes;
      const names = [...new Set(list.map((e) => e.resource.metadata.name))];
      return names.map((name) => ({
        name,
        build: () => {
          const v = routeView(view, kind, ns, name);
          const bad = list.find((e) => e.resource.metadata.name === name && !e.converted.ok);
          return bad !== undefined && !bad.converted.ok ? { ...v, notes: [`the index ignores it: ${bad.converted.reason}`, ...v.notes] } : v;
        },
      }));
    }
    case 'TrafficTarget': {
      const { smi, entries } = smiEntries(view, ns);
      return smi === undefined ? [] : entries.map((e) => ({ name: e.compiled.name, build: () => trafficTargetView(view, ns, smi, e) }));
    }
    case 'HTTPRouteGroup':
    case 'TCPRoute':
    case 'UDPRoute': {
      const smi = view.index.smi(ns);
      const map = kind === 'HTTPRouteGroup' ? smi?.httpRouteGroups : kind === 'TCPRoute' ? smi?.tcpRoutes : smi?.udpRoutes;
      return [...(map?.keys() ?? [])].map((name) => ({ name, build: () => smiRouteView(view, ns, kind, name) }));
    }
  }
}

/**
 * Where the policy objects `kind[/name]` apply; `namespace` undefined = all namespaces. Throws
 * a not-found QueryError when nothing matches.
 */
export function policyTargetsView(view: PolicyView, kind: PolicyKind, name: string | undefined, namespace: string | undefined): PolicyTargetsResult {
  const namespaces = namespace === undefined ? view.index.namespaces() : [namespace];
  const policies: PolicyObjectView[] = [];
  for (const ns of namespaces) {
    const objs = objectsOf(view, kind, ns).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const o of objs) if (name === undefined || o.name === name) policies.push(o.build());
  }
  if (policies.length === 0) {
    const where = namespace === undefined ? 'in any namespace' : `in namespace ${namespace}`;
    if (name === undefined) throw new QueryError(`no ${KIND_PLURAL[kind]} ${where}`, { notFound: true });
    const others = namespace === undefined ? [] : objectsOf(view, kind, namespace).map((o) => o.name);
    const hint =
      others.length > 0 ? ` (${KIND_PLURAL[kind]} there: ${others.sort().join(', ')})` : namespace !== undefined ? '; -A searches every namespace' : '';
    throw new QueryError(`${kind} ${name} not found ${where}${hint}`, { notFound: true });
  }
  return { policies };
}
