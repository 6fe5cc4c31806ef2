/**
 * `ward edges`, `ward stat` and `ward stat authz`, computed over any {@link MetricsBackend} (the
 * embedded collector or Prometheus) and the pods the controller knows. The JSON shapes are the
 * admin API's (/api/v1/edges, /api/v1/stat, /api/v1/stat/authz).
 *
 * What the proxy counts (POLICY-SEMANTICS §4.11) and how it is read, as linkerd viz reads
 * Linkerd's metrics:
 * - Edges come from the destination's inbound series, which carry the client's TLS state:
 *   `tls="true",client_id` (mesh TLS; the client's identity was verified by the destination's
 *   proxy) or `tls="no_identity",no_tls_reason` (not secured, and why) — never from what a client
 *   says of itself. Requests (`request_total`), denials (`inbound_http_authz_deny_total`,
 *   `inbound_tcp_authz_deny_total`), connections opened in the window (`tcp_open_total`) and open
 *   now (`tcp_open_connections`), by destination workload, pod port and client. The client's
 *   workload is found from its identity: the ServiceAccount's pods in the controller's index. When
 *   several workloads share that ServiceAccount the edge does not guess: `src` is null and
 *   `srcCandidates` lists them. An unmeshed client has no identity and its address is not in the
 *   metrics, so its `src` is null. Edges to destinations without a proxy (no inbound series) come
 *   from the clients' outbound series that name the destination (`dst_namespace` and the owner's
 *   `dst_<kind>` label), with `tls="no_identity"`.
 * - Stat: `request_total` rates are permitted requests only (the proxy counts denials apart), so
 *   the success rate (`response_total{classification="success"}` over all responses) is the
 *   application's, and `deniedRps` adds HTTP requests and TCP connections refused by policy.
 *   Latency quantiles come from `response_latency_ms`. The admin port (4191: the collector's own
 *   scrapes, probes) is left out of stat rows; edges and stat authz show it.
 * - Stat authz: `inbound_http_authz_allow_total` / `inbound_tcp_authz_allow_total` by server,
 *   route and authorization; denials (`inbound_http_authz_deny_total`, `inbound_tcp_authz_deny_total`,
 *   `inbound_http_route_not_found_total`) by server and route, with `authz` null.
 */
import type { MetricsBackend, Sample } from './metrics-backend.js';

/** Kind and name of a workload (`Deployment/web`, or `Pod/<name>` for a bare pod). */
export interface WorkloadRef {
  readonly namespace: string;
  readonly kind: string;
  readonly name: string;
}

/** A pod as the views need it. */
export interface InventoryPod {
  readonly namespace: string;
  readonly name: string;
  readonly serviceAccount: string;
  readonly workload: { readonly kind: string; readonly name: string };
  readonly meshed: boolean;
  /** The pod's mesh identity when meshed. */
  readonly identity: string | null;
}

/** One edge of `ward edges`. */
export interface Edge {
  readonly src: WorkloadRef | null;
  readonly srcIdentity: string | null;
  /** Workloads sharing the client's identity, when there are several (then `src` is null). */
  readonly srcCandidates?: readonly WorkloadRef[];
  readonly dst: WorkloadRef;
  readonly dstIdentity: string | null;
  readonly port: number | null;
  readonly secured: boolean;
  readonly reason: string | null;
  readonly connections: number;
  readonly rps: number;
  readonly deniedRps: number;
}

/** `GET /api/v1/edges`. */
export interface EdgesView {
  readonly window: number;
  readonly backend: 'embedded' | 'prometheus';
  readonly edges: readonly Edge[];
}

/** One row of `ward stat`. */
export interface StatRow {
  readonly namespace: string;
  readonly kind: string;
  readonly name: string;
  /** null = all ports. */
  readonly port: number | null;
  readonly meshed: boolean;
  readonly pods: number;
  /** Pods with a proxy. */
  readonly meshedPods: number;
  readonly rps: number;
  readonly successRate: number | null;
  readonly deniedRps: number;
  readonly p50Ms: number | null;
  readonly p95Ms: number | null;
  readonly p99Ms: number | null;
  readonly tcpConnections: number;
}

/** `GET /api/v1/stat`. */
export interface StatView {
  readonly window: number;
  readonly backend: 'embedded' | 'prometheus';
  readonly rows: readonly StatRow[];
}

/** One row of `ward stat authz`. */
export interface AuthzStatRow {
  readonly namespace: string;
  readonly kind: string;
  readonly name: string;
  readonly port: number;
  readonly server: string;
  readonly route: string | null;
  /** null = denied (no authorization admitted the traffic). */
  readonly authz: string | null;
  readonly allowedRps: number;
  readonly deniedRps: number;
}

/** `GET /api/v1/stat/authz`. */
export interface AuthzStatView {
  readonly window: number;
  readonly backend: 'embedded' | 'prometheus';
  readonly rows: readonly AuthzStatRow[];
}

/** What a view is asked for: a namespace (undefined = all), a kind and optionally a name. */
export interface ViewSelector {
  readonly namespace: string | undefined;
  /** Canonical kind (`Deployment`, `Pod`, `Namespace`, …); undefined = every workload kind. */
  readonly kind?: string | undefined;
  readonly name?: string | undefined;
}

/** The admin port: the collector's scrapes and probes, not application traffic. */
export const ADMIN_PORT = 4191;

const WORKLOAD_BY = ['namespace', 'workload_kind', 'workload_name'] as const;

const get = (s: Sample, k: string): string => s.labels[k] ?? '';

function portOf(s: Sample): number | null {
  const text = s.labels.target_port ?? s.labels.srv_port;
  if (text === undefined || !/^\d{1,5}$/.test(text)) return null;
  return Number(text);
}

/** Why an inbound series was not secured, in words (`reason` of an edge). */
export function insecureReason(tls: string, noTlsReason: string, clientId: string): string | null {
  switch (tls) {
    case 'true':
      return clientId === '' ? 'no client identity' : null;
    case 'no_identity':
      switch (noTlsReason) {
        case 'no_tls_from_remote':
          return 'not meshed';
        case 'loopback':
          return 'loopback';
        case 'port_skipped':
          return 'port skipped';
        case 'not_provided_by_service_discovery':
          return 'destination not meshed';
        case '':
          return 'no identity';
        default:
          return noTlsReason.replace(/_/g, ' ');
      }
    case 'opaque':
      return 'TLS passthrough';
    case 'disabled':
      return 'identity disabled';
    default:
      return tls === '' ? 'unknown' : tls;
  }
}

/** Pods by identity and by workload, for mapping identities back to workloads. */
export class Inventory {
  readonly pods: readonly InventoryPod[];
  readonly #byIdentity = new Map<string, Map<string, WorkloadRef>>();
  readonly #workloads = new Map<string, { ref: WorkloadRef; pods: number; meshedPods: number; identity: string | null; podNames: string[] }>();

  constructor(pods: readonly InventoryPod[]) {
    this.pods = pods;
    for (const p of pods) {
      const ref: WorkloadRef = { namespace: p.namespace, kind: p.workload.kind, name: p.workload.name };
      const key = refKey(ref);
      let w = this.#workloads.get(key);
      if (w === undefined) {
        w = { ref, pods: 0, meshedPods: 0, identity: null, podNames: [] };
        this.#workloads.set(key, w);
      }
      w.pods++;
      w.podNames.push(p.name);
      if (p.meshed) w.meshedPods++;
      if (p.identity !== null) {
        w.identity ??= p.identity;
        let m = this.#byIdentity.get(p.identity);
        if (m === undefined) {
          m = new Map();
          this.#byIdentity.set(p.identity, m);
        }
        m.set(key, ref);
      }
    }
  }

  /** The workloads whose pods run as `identity`. */
  workloadsOf(identity: string): WorkloadRef[] {
    return [...(this.#byIdentity.get(identity)?.values() ?? [])].sort(compareRefs);
  }

  /** A workload's identity (its first meshed pod's), or null. */
  identityOf(ref: WorkloadRef): string | null {
    return this.#workloads.get(refKey(ref))?.identity ?? null;
  }

  workload(ref: WorkloadRef): { pods: number; meshedPods: number } | undefined {
    return this.#workloads.get(refKey(ref));
  }

  /** Every workload, sorted. */
  workloads(): WorkloadRef[] {
    return [...this.#workloads.values()].map((w) => w.ref).sort(compareRefs);
  }

  /** The workload of a pod. */
  workloadOfPod(namespace: string, pod: string): WorkloadRef | undefined {
    const p = this.pods.find((x) => x.namespace === namespace && x.name === pod);
    return p === undefined ? undefined : { namespace, kind: p.workload.kind, name: p.workload.name };
  }
}

function refKey(r: WorkloadRef): string {
  return `${r.namespace}\u0000${r.kind}\u0000${r.name}`;
}

function compareRefs(a: WorkloadRef, b: WorkloadRef): number {
  return a.namespace !== b.namespace
    ? a.namespace < b.namespace
      ? -1
      : 1
    : a.kind !== b.kind
      ? a.kind < b.kind
        ? -1
        : 1
      : a.name < b.name
        ? -1
        : a.name > b.name
          ? 1
          : 0;
}

function inSelector(ref: WorkloadRef, sel: ViewSelector): boolean {
  if (sel.namespace !== undefined && ref.namespace !== sel.namespace) return false;
  if (sel.kind === undefined || sel.kind === 'Namespace') return sel.kind !== 'Namespace' || sel.name === undefined || ref.namespace === sel.name;
  return ref.kind === sel.kind && (sel.name === undefined || ref.name === sel.name);
}

const EDGE_BY = [...WORKLOAD_BY, 'target_port', 'tls', 'client_id', 'no_tls_reason'] as const;

interface EdgeAcc {
  dst: WorkloadRef;
  port: number | null;
  tls: string;
  clientId: string;
  noTlsReason: string;
  rps: number;
  deniedRps: number;
  opened: number;
  connections: number;
}

/**
 * The edges of a namespace (undefined = all): an edge is listed when it had requests, denials or
 * new connections in the window, or holds connections now. `sel.kind` keeps the edges with either
 * end of that kind.
 */
export async function computeEdges(backend: MetricsBackend, inventory: Inventory, sel: ViewSelector, windowSeconds: number): Promise<EdgesView> {
  const inbound = { direction: 'inbound' };
  const [requests, httpDenied, tcpDenied, opened, open, outReq, outOpen, outConns] = await Promise.all([
    backend.rate({ metric: 'request_total', match: inbound, by: EDGE_BY }, windowSeconds),
    backend.rate({ metric: 'inbound_http_authz_deny_total', by: EDGE_BY }, windowSeconds),
    backend.rate({ metric: 'inbound_tcp_authz_deny_total', by: EDGE_BY }, windowSeconds),
    backend.rate({ metric: 'tcp_open_total', match: inbound, by: EDGE_BY }, windowSeconds),
    backend.latest({ metric: 'tcp_open_connections', match: inbound, by: EDGE_BY }),
    backend.rate({ metric: 'request_total', match: { direction: 'outbound', tls: 'no_identity' }, by: OUT_BY }, windowSeconds),
    backend.rate({ metric: 'tcp_open_total', match: { direction: 'outbound', tls: 'no_identity' }, by: OUT_BY }, windowSeconds),
    backend.latest({ metric: 'tcp_open_connections', match: { direction: 'outbound', tls: 'no_identity' }, by: OUT_BY }),
  ]);
  const acc = new Map<string, EdgeAcc>();
  const add = (samples: readonly Sample[], field: 'rps' | 'deniedRps' | 'opened' | 'connections') => {
    for (const s of samples) {
      const dst: WorkloadRef = { namespace: get(s, 'namespace'), kind: get(s, 'workload_kind'), name: get(s, 'workload_name') };
      if (dst.name === '') continue;
      const port = portOf(s);
      const key = `${refKey(dst)}\u0000${port}\u0000${get(s, 'tls')}\u0000${get(s, 'client_id')}\u0000${get(s, 'no_tls_reason')}`;
      let e = acc.get(key);
      if (e === undefined) {
        e = {
          dst,
          port,
          tls: get(s, 'tls'),
          clientId: get(s, 'client_id'),
          noTlsReason: get(s, 'no_tls_reason'),
          rps: 0,
          deniedRps: 0,
          opened: 0,
          connections: 0,
        };
        acc.set(key, e);
      }
      e[field] += s.value;
    }
  };
  add(requests, 'rps');
  add(httpDenied, 'deniedRps');
  add(tcpDenied, 'deniedRps');
  add(opened, 'opened');
  add(open, 'connections');
  const edges: Edge[] = [];
  for (const e of acc.values()) {
    if (!(e.rps > 0 || e.deniedRps > 0 || e.opened > 0 || e.connections > 0)) continue;
    const reason = insecureReason(e.tls, e.noTlsReason, e.clientId);
    const srcIdentity = e.tls === 'true' && e.clientId !== '' ? e.clientId : null;
    const candidates = srcIdentity === null ? [] : inventory.workloadsOf(srcIdentity);
    const edge: Edge = {
      src: candidates.length === 1 ? (candidates[0] as WorkloadRef) : null,
      srcIdentity,
      ...(candidates.length > 1 ? { srcCandidates: candidates } : {}),
      dst: e.dst,
      dstIdentity: inventory.identityOf(e.dst),
      port: e.port,
      secured: reason === null,
      reason,
      connections: e.connections,
      rps: e.rps,
      deniedRps: e.deniedRps,
    };
    edges.push(edge);
  }
  edges.push(...outboundEdges(inventory, outReq, outOpen, outConns));
  const selected = edges.filter((e) => {
    const ends = [e.dst, ...(e.src !== null ? [e.src] : []), ...(e.srcCandidates ?? [])];
    return ends.some((r) => inSelector(r, sel));
  });
  selected.sort((a, b) => compareRefs(a.dst, b.dst) || (a.port ?? 0) - (b.port ?? 0) || compareSrc(a, b));
  return { window: windowSeconds, backend: backend.kind, edges: selected };
}

function compareSrc(a: Edge, b: Edge): number {
  const ka = a.src !== null ? refKey(a.src) : `\uffff${a.srcIdentity ?? ''}${a.reason ?? ''}`;
  const kb = b.src !== null ? refKey(b.src) : `\uffff${b.srcIdentity ?? ''}${b.reason ?? ''}`;
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

/** The owner labels the Destination API puts on outbound series (`dst_deployment`…), by kind. */
const DST_OWNER_LABELS: readonly (readonly [string, string])[] = [
  ['dst_deployment', 'Deployment'],
  ['dst_statefulset', 'StatefulSet'],
  ['dst_daemonset', 'DaemonSet'],
  ['dst_replicaset', 'ReplicaSet'],
  ['dst_job', 'Job'],
  ['dst_cronjob', 'CronJob'],
];
const OUT_BY = [...WORKLOAD_BY, 'target_port', 'dst_namespace', 'dst_pod', ...DST_OWNER_LABELS.map(([l]) => l)];

/** Edges to destinations without a proxy, from the clients' outbound series. */
function outboundEdges(inventory: Inventory, requests: readonly Sample[], opened: readonly Sample[], open: readonly Sample[]): Edge[] {
  const acc = new Map<string, { src: WorkloadRef; dst: WorkloadRef; port: number | null; rps: number; opened: number; connections: number }>();
  const add = (samples: readonly Sample[], field: 'rps' | 'opened' | 'connections') => {
    for (const s of samples) {
      const src: WorkloadRef = { namespace: get(s, 'namespace'), kind: get(s, 'workload_kind'), name: get(s, 'workload_name') };
      const dstNs = get(s, 'dst_namespace');
      if (src.name === '' || dstNs === '') continue;
      let dst: WorkloadRef | undefined;
      for (const [label, kind] of DST_OWNER_LABELS) {
        const name = get(s, label);
        if (name !== '') {
          dst = { namespace: dstNs, kind, name };
          break;
        }
      }
      const pod = get(s, 'dst_pod');
      if (dst === undefined && pod !== '') dst = inventory.workloadOfPod(dstNs, pod) ?? { namespace: dstNs, kind: 'Pod', name: pod };
      if (dst === undefined) continue;
      const port = portOf(s);
      const key = `${refKey(src)}\u0000${refKey(dst)}\u0000${port}`;
      let e = acc.get(key);
      if (e === undefined) {
        e = { src, dst, port, rps: 0, opened: 0, connections: 0 };
        acc.set(key, e);
      }
      e[field] += s.value;
    }
  };
  add(requests, 'rps');
  add(opened, 'opened');
  add(open, 'connections');
  const out: Edge[] = [];
  for (const e of acc.values()) {
    if (!(e.rps > 0 || e.opened > 0 || e.connections > 0)) continue;
    out.push({
      src: e.src,
      srcIdentity: inventory.identityOf(e.src),
      dst: e.dst,
      dstIdentity: null,
      port: e.port,
      secured: false,
      reason: 'destination not meshed',
      connections: e.connections,
      rps: e.rps,
      deniedRps: 0,
    });
  }
  return out;
}

/** Grouping labels of a stat resource kind: workloads, pods or namespaces. */
function statBy(kind: string | undefined): readonly string[] {
  if (kind === 'Pod') return ['namespace', 'pod', 'workload_kind', 'workload_name'];
  if (kind === 'Namespace') return ['namespace'];
  return WORKLOAD_BY;
}

function rowKeyOf(kind: string | undefined, s: Sample): WorkloadRef | undefined {
  const ns = get(s, 'namespace');
  if (ns === '') return undefined;
  if (kind === 'Namespace') return { namespace: ns, kind: 'Namespace', name: ns };
  if (kind === 'Pod') return get(s, 'pod') === '' ? undefined : { namespace: ns, kind: 'Pod', name: get(s, 'pod') };
  const k = get(s, 'workload_kind');
  const n = get(s, 'workload_name');
  return n === '' ? undefined : { namespace: ns, kind: k, name: n };
}

interface StatAcc {
  rps: number;
  success: number;
  responses: number;
  deniedRps: number;
  p50: number | null;
  p95: number | null;
  p99: number | null;
  tcp: number;
}

const emptyAcc = (): StatAcc => ({ rps: 0, success: 0, responses: 0, deniedRps: 0, p50: null, p95: null, p99: null, tcp: 0 });

/**
 * Stat rows: one per resource of `sel` (port null), each followed by one per pod port with
 * traffic in the window. Resources the controller knows are listed even without traffic, like
 * `linkerd viz stat`; resources only seen in metrics are listed too.
 */
export async function computeStat(backend: MetricsBackend, inventory: Inventory, sel: ViewSelector, windowSeconds: number): Promise<StatView> {
  const by = statBy(sel.kind);
  const byPort = [...by, 'target_port'];
  const inbound = { direction: 'inbound' };
  const [requests, responses, httpDenied, tcpDenied, p50, p95, p99, open] = await Promise.all([
    backend.rate({ metric: 'request_total', match: inbound, by: byPort }, windowSeconds),
    backend.rate({ metric: 'response_total', match: inbound, by: [...byPort, 'classification'] }, windowSeconds),
    backend.rate({ metric: 'inbound_http_authz_deny_total', by: byPort }, windowSeconds),
    backend.rate({ metric: 'inbound_tcp_authz_deny_total', by: byPort }, windowSeconds),
    backend.quantile(0.5, { metric: 'response_latency_ms', match: inbound, by }, windowSeconds),
    backend.quantile(0.95, { metric: 'response_latency_ms', match: inbound, by }, windowSeconds),
    backend.quantile(0.99, { metric: 'response_latency_ms', match: inbound, by }, windowSeconds),
    backend.latest({ metric: 'tcp_open_connections', match: inbound, by: byPort }),
  ]);
  const perPortQuantiles = await Promise.all(
    [0.5, 0.95, 0.99].map((q) => backend.quantile(q, { metric: 'response_latency_ms', match: inbound, by: byPort }, windowSeconds)),
  );
  const rows = new Map<string, { ref: WorkloadRef; all: StatAcc; ports: Map<number, StatAcc> }>();
  const rowOf = (ref: WorkloadRef) => {
    const key = refKey(ref);
    let r = rows.get(key);
    if (r === undefined) {
      r = { ref, all: emptyAcc(), ports: new Map() };
      rows.set(key, r);
    }
    return r;
  };
  // Known resources first, so that they are listed without traffic.
  const known = knownResources(inventory, sel);
  for (const ref of known) rowOf(ref);
  const each = (samples: readonly Sample[], apply: (a: StatAcc, s: Sample) => void, perPort = true) => {
    for (const s of samples) {
      const ref = rowKeyOf(sel.kind, s);
      if (ref === undefined || !matchesRow(ref, sel)) continue;
      const port = portOf(s);
      if (port === ADMIN_PORT) continue;
      const r = rowOf(ref);
      apply(r.all, s);
      if (perPort && port !== null) {
        let p = r.ports.get(port);
        if (p === undefined) {
          p = emptyAcc();
          r.ports.set(port, p);
        }
        apply(p, s);
      }
    }
  };
  each(requests, (a, s) => {
    a.rps += s.value;
  });
  each(responses, (a, s) => {
    a.responses += s.value;
    if (get(s, 'classification') === 'success') a.success += s.value;
  });
  each(httpDenied, (a, s) => {
    a.deniedRps += s.value;
  });
  each(tcpDenied, (a, s) => {
    a.deniedRps += s.value;
  });
  each(open, (a, s) => {
    a.tcp += s.value;
  });
  const setQ = (samples: readonly Sample[], field: 'p50' | 'p95' | 'p99', perPort: boolean) => {
    for (const s of samples) {
      const ref = rowKeyOf(sel.kind, s);
      if (ref === undefined) continue;
      const r = rows.get(refKey(ref));
      if (r === undefined) continue;
      if (!perPort) r.all[field] = s.value;
      else {
        const port = portOf(s);
        const p = port === null ? undefined : r.ports.get(port);
        if (p !== undefined) p[field] = s.value;
      }
    }
  };
  setQ(p50, 'p50', false);
  setQ(p95, 'p95', false);
  setQ(p99, 'p99', false);
  setQ(perPortQuantiles[0] ?? [], 'p50', true);
  setQ(perPortQuantiles[1] ?? [], 'p95', true);
  setQ(perPortQuantiles[2] ?? [], 'p99', true);
  const out: StatRow[] = [];
  const sorted = [...rows.values()].sort((a, b) => compareRefs(a.ref, b.ref));
  for (const r of sorted) {
    const counts = podCounts(inventory, r.ref);
    const row = (port: number | null, a: StatAcc): StatRow => ({
      namespace: r.ref.namespace,
      kind: r.ref.kind,
      name: r.ref.name,
      port,
      meshed: counts.meshedPods > 0,
      pods: counts.pods,
      meshedPods: counts.meshedPods,
      rps: a.rps,
      successRate: a.responses > 0 ? a.success / a.responses : null,
      deniedRps: a.deniedRps,
      p50Ms: a.p50,
      p95Ms: a.p95,
      p99Ms: a.p99,
      tcpConnections: a.tcp,
    });
    out.push(row(null, r.all));
    for (const port of [...r.ports.keys()].sort((a, b) => a - b)) out.push(row(port, r.ports.get(port) as StatAcc));
  }
  return { window: windowSeconds, backend: backend.kind, rows: out };
}

function matchesRow(ref: WorkloadRef, sel: ViewSelector): boolean {
  if (sel.namespace !== undefined && ref.namespace !== sel.namespace) return false;
  if (sel.kind === undefined) return true;
  if (sel.kind === 'Namespace' || sel.kind === 'Pod') return sel.name === undefined || ref.name === sel.name;
  return ref.kind === sel.kind && (sel.name === undefined || ref.name === sel.name);
}

function knownResources(inventory: Inventory, sel: ViewSelector): WorkloadRef[] {
  const out = new Map<string, WorkloadRef>();
  for (const p of inventory.pods) {
    let ref: WorkloadRef;
    if (sel.kind === 'Pod') ref = { namespace: p.namespace, kind: 'Pod', name: p.name };
    else if (sel.kind === 'Namespace') ref = { namespace: p.namespace, kind: 'Namespace', name: p.namespace };
    else ref = { namespace: p.namespace, kind: p.workload.kind, name: p.workload.name };
    if (matchesRow(ref, sel)) out.set(refKey(ref), ref);
  }
  return [...out.values()];
}

function podCounts(inventory: Inventory, ref: WorkloadRef): { pods: number; meshedPods: number } {
  if (ref.kind === 'Namespace' || ref.kind === 'Pod') {
    const pods = inventory.pods.filter((p) => p.namespace === ref.namespace && (ref.kind === 'Namespace' || p.name === ref.name));
    return { pods: pods.length, meshedPods: pods.filter((p) => p.meshed).length };
  }
  return inventory.workload(ref) ?? { pods: 0, meshedPods: 0 };
}

const AUTHZ_BY = [...WORKLOAD_BY, 'srv_port', 'srv_kind', 'srv_name', 'route_kind', 'route_name', 'authz_kind', 'authz_name'] as const;

/** `kind/name` of a label pair, or null when both are empty. */
function kindName(s: Sample, prefix: 'srv' | 'route' | 'authz'): string | null {
  const kind = get(s, `${prefix}_kind`);
  const name = get(s, `${prefix}_name`);
  return kind === '' && name === '' ? null : `${kind}/${name}`;
}

/** Allowed and denied rates per server, route and authorization of the selected resources' pods. */
export async function computeAuthzStat(backend: MetricsBackend, sel: ViewSelector, windowSeconds: number): Promise<AuthzStatView> {
  const [httpAllow, tcpAllow, httpDeny, tcpDeny, notFound] = await Promise.all([
    backend.rate({ metric: 'inbound_http_authz_allow_total', by: AUTHZ_BY }, windowSeconds),
    backend.rate({ metric: 'inbound_tcp_authz_allow_total', by: AUTHZ_BY }, windowSeconds),
    backend.rate({ metric: 'inbound_http_authz_deny_total', by: AUTHZ_BY }, windowSeconds),
    backend.rate({ metric: 'inbound_tcp_authz_deny_total', by: AUTHZ_BY }, windowSeconds),
    backend.rate({ metric: 'inbound_http_route_not_found_total', by: AUTHZ_BY }, windowSeconds),
  ]);
  const rows = new Map<
    string,
    { ns: string; kind: string; name: string; port: number; server: string; route: string | null; authz: string | null; allowed: number; denied: number }
  >();
  const add = (samples: readonly Sample[], allowed: boolean) => {
    for (const s of samples) {
      const ref: WorkloadRef = { namespace: get(s, 'namespace'), kind: get(s, 'workload_kind'), name: get(s, 'workload_name') };
      if (ref.name === '' || !inSelector(ref, sel)) continue;
      const port = portOf(s);
      const server = kindName(s, 'srv');
      if (port === null || server === null) continue;
      const route = kindName(s, 'route');
      const authz = allowed ? kindName(s, 'authz') : null;
      const key = `${refKey(ref)}\u0000${port}\u0000${server}\u0000${route}\u0000${authz}`;
      let r = rows.get(key);
      if (r === undefined) {
        r = { ns: ref.namespace, kind: ref.kind, name: ref.name, port, server, route, authz, allowed: 0, denied: 0 };
        rows.set(key, r);
      }
      if (allowed) r.allowed += s.value;
      else r.denied += s.value;
    }
  };
  add(httpAllow, true);
  add(tcpAllow, true);
  add(httpDeny, false);
  add(tcpDeny, false);
  add(notFound, false);
  const out: AuthzStatRow[] = [...rows.values()]
    .sort(
      (a, b) =>
        compareRefs({ namespace: a.ns, kind: a.kind, name: a.name }, { namespace: b.ns, kind: b.kind, name: b.name }) ||
        a.port - b.port ||
        (a.server < b.server ? -1 : a.server > b.server ? 1 : 0) ||
        ((a.route ?? '') < (b.route ?? '') ? -1 : (a.route ?? '') > (b.route ?? '') ? 1 : 0) ||
        (a.authz === null ? 1 : 0) - (b.authz === null ? 1 : 0) ||
        ((a.authz ?? '') < (b.authz ?? '') ? -1 : 1),
    )
    .map((r) => ({
      namespace: r.ns,
      kind: r.kind,
      name: r.name,
      port: r.port,
      server: r.server,
      route: r.route,
      authz: r.authz,
      allowedRps: r.allowed,
      deniedRps: r.denied,
    }));
  return { window: windowSeconds, backend: backend.kind, rows: out };
}
