/**
 * What the graph view draws: one edge per (source, destination) workload pair, merging what
 * policy allows (/api/v1/graph) with what traffic did (/api/v1/edges), so that the pairs an SRE
 * must look at stand out:
 * - `allowed-used`: policy allows it and traffic flows;
 * - `allowed-unused`: policy allows it but nothing was seen in the window (a candidate to tighten);
 * - `used-denied`: traffic was denied (a client the policy does not admit, or a missing policy);
 * - `audit`: only the audit default admits it (it would be denied without audit mode).
 * `policy` says whether every counted port and route is allowed (`allow`) or only some (`partial`).
 */
import type { Graph, GraphBulk, GraphEdge, GraphNode, TrafficEdge } from './api.js';

/** Which permits count: the proxy's own ports and probe routes admit nearly everyone by design. */
export interface GraphFilter {
  readonly showAdmin: boolean;
  readonly showProbes: boolean;
  /** Namespaces shown ('' = all). */
  readonly namespace: string;
  /** Show the pseudo-sources (the host, unmeshed clients). */
  readonly showExternal: boolean;
}

/** One drawn edge. */
export interface PairEdge {
  readonly id: string;
  readonly src: string;
  readonly dst: string;
  readonly policy: 'allow' | 'partial' | 'audit' | 'deny';
  readonly state: 'allowed-used' | 'allowed-unused' | 'used-denied' | 'audit';
  /** Permits per (port, route), for the side panel. */
  readonly permits: readonly GraphEdge[];
  /** Routes of the destination counted for this pair (allowed or not). */
  readonly routesCounted: number;
  readonly rps: number;
  readonly deniedRps: number;
  /** null: no traffic seen. */
  readonly secured: boolean | null;
  readonly reason: string | null;
}

/** `namespace/Kind/name` of a workload reference, as the graph's node ids. */
export function nodeIdOf(ref: { namespace: string; kind: string; name: string }): string {
  const kind = ref.kind.length > 0 ? ref.kind[0]?.toUpperCase() + ref.kind.slice(1) : ref.kind;
  // The traffic routes may write kinds in lower case (`deployment`); the graph uses Kubernetes spelling.
  const known: Record<string, string> = {
    Deployment: 'Deployment',
    Statefulset: 'StatefulSet',
    Daemonset: 'DaemonSet',
    Replicaset: 'ReplicaSet',
    Cronjob: 'CronJob',
  };
  return `${ref.namespace}/${known[kind] ?? kind}/${ref.name}`;
}

/** True for a route or port the filter counts. */
function counts(g: Graph, target: number, route: number, f: GraphFilter): boolean {
  const t = g.targets[target];
  const r = t?.routes[route];
  if (t === undefined || r === undefined || r.shadowed) return false;
  if (t.proxyPort && !f.showAdmin) return false;
  if (r.probe && !f.showProbes) return false;
  return true;
}

/** The nodes shown: those in the namespace, plus any that has an edge into or out of it. */
export function visibleNodes(g: Graph, edges: readonly PairEdge[], f: GraphFilter): GraphNode[] {
  const linked = new Set<string>();
  for (const e of edges) {
    linked.add(e.src);
    linked.add(e.dst);
  }
  return g.nodes.filter((n) => {
    if (n.namespace === '') return f.showExternal && linked.has(n.id);
    return f.namespace === '' || n.namespace === f.namespace || linked.has(n.id);
  });
}

/** Merges policy permits and observed traffic into pair edges. */
export function pairEdges(g: Graph, traffic: readonly TrafficEdge[], f: GraphFilter): PairEdge[] {
  const countedRoutes = new Map<string, number>();
  g.targets.forEach((t, ti) => {
    const n = t.routes.filter((_, ri) => counts(g, ti, ri, f)).length;
    countedRoutes.set(t.node, (countedRoutes.get(t.node) ?? 0) + n);
  });
  const inScope = (id: string) => f.namespace === '' || id.startsWith(`${f.namespace}/`);
  const isExternal = (id: string) => id.startsWith('/');
  const pairs = new Map<
    string,
    { src: string; dst: string; permits: GraphEdge[]; rps: number; deniedRps: number; secured: boolean | null; reason: string | null }
  >();
  const pair = (src: string, dst: string) => {
    const id = `${src}->${dst}`;
    let p = pairs.get(id);
    if (p === undefined) {
      p = { src, dst, permits: [], rps: 0, deniedRps: 0, secured: null, reason: null };
      pairs.set(id, p);
    }
    return p;
  };
  for (const e of g.edges) {
    if (!counts(g, e.target, e.route, f)) continue;
    if (!f.showExternal && isExternal(e.src)) continue;
    if (!inScope(e.src) && !inScope(e.dst)) continue;
    pair(e.src, e.dst).permits.push(e);
  }
  for (const t of traffic) {
    const src = t.src === null ? '/External/unmeshed' : nodeIdOf(t.src);
    const dst = nodeIdOf(t.dst);
    if (!f.showExternal && isExternal(src)) continue;
    if (!inScope(src) && !inScope(dst)) continue;
    if (t.port === 4191 && !f.showAdmin) continue;
    const p = pair(src, dst);
    p.rps += t.rps;
    p.deniedRps += t.deniedRps;
    if (t.rps > 0 || t.connections > 0 || t.deniedRps > 0) {
      p.secured = (p.secured ?? true) && t.secured;
      if (!t.secured && t.reason !== null) p.reason = t.reason;
    }
  }
  // Routes open to (nearly) every source count as allowed for the pairs drawn, but draw no edge
  // of their own: the destination is marked instead (see openRoutes).
  const open = new Map<string, GraphBulk[]>();
  for (const b of g.bulk) {
    if (!counts(g, b.target, b.route, f)) continue;
    open.set(b.dst, [...(open.get(b.dst) ?? []), b]);
  }
  const out: PairEdge[] = [];
  for (const [id, p] of pairs) {
    const counted = countedRoutes.get(p.dst) ?? 0;
    const viaBulk = (open.get(p.dst) ?? []).filter((b) => !b.except.includes(p.src)).map((b) => `${b.target}/${b.route}`);
    const allowedRoutes = new Set([...p.permits.map((e) => `${e.target}/${e.route}`), ...viaBulk]).size;
    const audit = p.permits.some((e) => e.decision === 'audit') || (open.get(p.dst) ?? []).some((b) => b.decision === 'audit' && !b.except.includes(p.src));
    const policy = allowedRoutes === 0 ? 'deny' : audit ? 'audit' : allowedRoutes >= counted ? 'allow' : 'partial';
    const used = p.rps > 0;
    let state: PairEdge['state'];
    if (p.deniedRps > 0) state = 'used-denied';
    // Policy admits none of the routes counted here and nothing was denied: traffic seen went to
    // routes the filter leaves out (probes, the proxy's ports).
    else if (policy === 'deny') continue;
    else if (policy === 'audit') state = 'audit';
    else state = used ? 'allowed-used' : 'allowed-unused';
    out.push({
      id,
      src: p.src,
      dst: p.dst,
      policy,
      state,
      permits: p.permits,
      routesCounted: counted,
      rps: p.rps,
      deniedRps: p.deniedRps,
      secured: p.secured,
      reason: p.reason,
    });
  }
  return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** Human rate: `0`, `0.4/s`, `12/s`. */
export function rate(n: number): string {
  if (n === 0) return '0';
  return n < 1 ? `${n.toFixed(2)}/s` : n < 10 ? `${n.toFixed(1)}/s` : `${Math.round(n)}/s`;
}

/** Per destination node, the counted routes open to (nearly) every source. */
export function openRoutes(g: Graph, f: GraphFilter): Map<string, GraphBulk[]> {
  const open = new Map<string, GraphBulk[]>();
  for (const b of g.bulk) {
    if (!counts(g, b.target, b.route, f)) continue;
    open.set(b.dst, [...(open.get(b.dst) ?? []), b]);
  }
  return open;
}

/** Above this many workloads shown at once, the graph shows namespaces (drill down by selecting one). */
export const COLLAPSE_AT = 120;

const STATE_RANK: Record<PairEdge['state'], number> = { 'used-denied': 3, 'allowed-used': 2, audit: 1, 'allowed-unused': 0 };

/**
 * The graph one level up: a node per namespace (pseudo-sources stay as they are) and an edge per
 * pair of namespaces, whose state is the most urgent of its workload edges (used-denied first),
 * rates summed, secured only if all are. Edges within a namespace are left out.
 */
export function collapseToNamespaces(nodes: readonly GraphNode[], edges: readonly PairEdge[]): { nodes: GraphNode[]; edges: PairEdge[] } {
  const nsOf = (id: string) => (id.startsWith('/') ? id : `ns:${id.slice(0, id.indexOf('/'))}`);
  const groups = new Map<string, GraphNode>();
  for (const n of nodes) {
    const id = nsOf(n.id);
    if (n.namespace === '') {
      groups.set(id, n);
      continue;
    }
    const g = groups.get(id);
    groups.set(id, {
      id,
      namespace: n.namespace,
      kind: 'Namespace',
      name: n.namespace,
      meshed: (g?.meshed ?? true) && n.meshed,
      pods: (g?.pods ?? 0) + 1,
      podNames: [],
      readyPods: null,
      serviceAccount: null,
      identity: null,
      ip: '',
      ipAssumed: true,
      defaultPolicy: null,
      podsDiffer: false,
    });
  }
  const merged = new Map<string, PairEdge>();
  for (const e of edges) {
    const src = nsOf(e.src);
    const dst = nsOf(e.dst);
    if (src === dst) continue;
    const id = `${src}->${dst}`;
    const m = merged.get(id);
    if (m === undefined) {
      merged.set(id, { ...e, id, src, dst });
      continue;
    }
    merged.set(id, {
      ...m,
      state: STATE_RANK[e.state] > STATE_RANK[m.state] ? e.state : m.state,
      policy: m.policy === e.policy ? m.policy : 'partial',
      permits: [...m.permits, ...e.permits],
      rps: m.rps + e.rps,
      deniedRps: m.deniedRps + e.deniedRps,
      secured: m.secured === null ? e.secured : e.secured === null ? m.secured : m.secured && e.secured,
      reason: m.reason ?? e.reason,
    });
  }
  return { nodes: [...groups.values()], edges: [...merged.values()] };
}
