/**
 * The who-can-talk graph of the index: workloads as nodes, and for every destination workload's
 * ports and routes, which source workloads the policy admits (allow), admits only by audit, or
 * denies. The verdicts come from `reachTarget` in core (the proxy's decision engine); this file
 * only says who the sources and destinations are.
 *
 * - A destination workload is represented by its first pod (by name): its ports and their
 *   published policy (what the proxies of that workload enforce). `podsDiffer` flags a workload
 *   whose pods do not all carry the same policy (a rollout, a pod annotated by hand).
 * - A source is a workload's identity (its ServiceAccount's) over mesh TLS, from its first pod's
 *   address; unmeshed pods are plaintext sources. Two pseudo-sources stand for clients without a
 *   workload: `External/unmeshed` (a plaintext client inside the first cluster network) and, in
 *   local mode, `Host/localhost` (a browser or a curl on the host, 127.0.0.1).
 * - Only permits are listed (allow and audit); every (source, destination, port, route) not
 *   listed is denied. A permit most sources share (a default policy, a wildcard) is listed once,
 *   as a `bulk` entry with the sources it leaves out, rather than as an edge per source. The proxy-added `default:localhost` authorization is a pod's own
 *   loopback, not an edge between workloads, and is left out.
 */
import {
  type GraphBulk,
  type GraphEdge,
  type GraphNode,
  type GraphTarget,
  type InboundServer,
  type Meta,
  type PolicyGraph,
  type ReachSource,
  reachTarget,
  serviceAccountIdentity,
  type TargetReach,
  type Verdict,
} from '../core/index.js';
import { ANNOTATIONS, type Pod, PROXY_CONTAINER_NAME } from '../manifest/index.js';
import { PROTOCOL_LABELS } from './authz-view.js';
import { defaultClientIp } from './explain-probe.js';
import type { PodInfo } from './pod.js';
import { localhostAuthzOf } from './policy-index.js';
import type { PolicyView } from './query-error.js';

export type { DefaultPolicyInfo, GraphBulk, GraphEdge, GraphNode, GraphRoute, GraphTarget, PolicyGraph } from '../core/index.js';

/** The proxy's admin port: every meshed pod has it; the graph marks it so views can set it apart. */
export const GRAPH_PROXY_ADMIN_PORT = 4191;

/** Options of {@link policyGraph}. */
export interface GraphOptions {
  /** Destinations in this namespace only (sources from everywhere); undefined = all namespaces. */
  readonly namespace?: string | undefined;
  /** A namespace's current annotations (for stale defaults); undefined when unknown. */
  readonly namespaceAnnotations?: ((namespace: string) => Readonly<Record<string, string>> | undefined) | undefined;
}

function ref(m: Meta): string {
  return `${m.kind}/${m.name}`;
}

/** `Kind/name` of the workload a pod belongs to (the pod itself when it has no owner). */
function workloadOf(pod: Pod): { kind: string; name: string } {
  const owner = pod.owner;
  const slash = owner?.indexOf('/') ?? -1;
  if (owner !== undefined && slash > 0) return { kind: owner.slice(0, slash), name: owner.slice(slash + 1) };
  return { kind: 'Pod', name: pod.metadata.name };
}

function readyOf(pods: readonly Pod[]): number | null {
  if (pods.every((p) => p.status?.conditions === undefined)) return null;
  return pods.filter((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true).length;
}

function byName<T extends { readonly metadata: { readonly name: string } }>(a: T, b: T): number {
  return a.metadata.name < b.metadata.name ? -1 : a.metadata.name > b.metadata.name ? 1 : 0;
}

/** The routes a server consults, for probe detection. */
function isProbeRoute(route: Meta, server: InboundServer, probePaths: readonly string[]): boolean {
  if (route.kind === 'default' && route.name === 'probe') return true;
  if (probePaths.length === 0) return false;
  const p = server.protocol;
  const routes = p.kind === 'detect' ? p.httpRoutes : p.kind === 'http1' || p.kind === 'http2' ? p.routes : [];
  const r = routes.find((x) => x.meta === route);
  if (r === undefined || r.rules.length === 0) return false;
  return r.rules.every(
    (rule) =>
      rule.matches.length > 0 &&
      rule.matches.every((m) => m.method === 'GET' && m.path?.kind === 'exact' && probePaths.includes(m.path.value) && m.headers.length === 0),
  );
}

/** Below this many sources every permit is listed as an edge. */
const BULK_MIN_SOURCES = 32;

/** The permit more than half of at least {@link BULK_MIN_SOURCES} sources share (verdicts are interned), or undefined. */
function commonPermit(verdicts: readonly Verdict[]): Verdict | undefined {
  if (verdicts.length < BULK_MIN_SOURCES) return undefined;
  const counts = new Map<Verdict, number>();
  for (const v of verdicts) counts.set(v, (counts.get(v) ?? 0) + 1);
  for (const [v, n] of counts) {
    if (n * 2 > verdicts.length && v.decision !== 'deny' && v.authz !== undefined && !(v.authz.kind === 'default' && v.authz.name === 'localhost')) return v;
  }
  return undefined;
}

/** Builds the graph. Pure over the index: no I/O, no clock. */
export function policyGraph(view: PolicyView, opts: GraphOptions = {}): PolicyGraph {
  const { index, config } = view;
  const domain = { controlPlaneNamespace: config.controlPlaneNamespace, trustDomain: config.trustDomain };

  // Meshed workloads, each with its pods sorted by name.
  const meshed = new Map<string, { namespace: string; kind: string; name: string; pods: PodInfo[] }>();
  for (const p of index.pods()) {
    const w = workloadOf(p.pod);
    const id = `${p.namespace}/${w.kind}/${w.name}`;
    let e = meshed.get(id);
    if (e === undefined) {
      e = { namespace: p.namespace, ...w, pods: [] };
      meshed.set(id, e);
    }
    e.pods.push(p);
  }
  const unmeshed = new Map<string, { namespace: string; kind: string; name: string; pods: Pod[] }>();
  for (const pod of index.unmeshedPods()) {
    const w = workloadOf(pod);
    const id = `${pod.metadata.namespace}/${w.kind}/${w.name}`;
    let e = unmeshed.get(id);
    if (e === undefined) {
      e = { namespace: pod.metadata.namespace, ...w, pods: [] };
      unmeshed.set(id, e);
    }
    e.pods.push(pod);
  }

  const assumedIp = defaultClientIp(view);
  const nodes: GraphNode[] = [];
  const sources: ReachSource[] = [];
  const sourceNode: string[] = [];
  for (const [id, w] of [...meshed].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    w.pods.sort((a, b) => byName(a.pod, b.pod));
    const first = w.pods[0] as PodInfo;
    const identity = serviceAccountIdentity(domain, w.namespace, first.serviceAccount);
    const podIp = first.pod.status?.podIP;
    const ip = podIp ?? assumedIp;
    const nsAnn = opts.namespaceAnnotations?.(w.namespace);
    const nsValue = nsAnn?.[ANNOTATIONS.defaultInboundPolicy] ?? null;
    const stale = nsValue !== null && w.pods.some((p) => p.pod.metadata.annotations[ANNOTATIONS.defaultInboundPolicy] !== nsValue);
    nodes.push({
      id,
      namespace: w.namespace,
      kind: w.kind,
      name: w.name,
      meshed: true,
      pods: w.pods.length,
      podNames: w.pods.map((p) => p.name),
      readyPods: readyOf(w.pods.map((p) => p.pod)),
      serviceAccount: first.serviceAccount,
      identity,
      ip,
      ipAssumed: podIp === undefined,
      defaultPolicy: {
        name: first.defaultPolicy ?? config.defaultPolicy,
        source: first.defaultPolicy !== undefined ? 'pod-annotation' : 'cluster',
        namespaceValue: nsValue,
        stale,
      },
      podsDiffer: w.pods.some((p) => {
        const ports = index.ports(p.namespace, p.name);
        const firstPorts = index.ports(first.namespace, first.name);
        return (
          ports.length !== firstPorts.length ||
          ports.some(
            (port, i) => port !== firstPorts[i] || index.peek(p.namespace, p.name, port)?.value !== index.peek(first.namespace, first.name, port)?.value,
          )
        );
      }),
    });
    sources.push({ identity, ip });
    sourceNode.push(id);
  }
  for (const [id, w] of [...unmeshed].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    w.pods.sort(byName);
    const podIp = w.pods[0]?.status?.podIP;
    const ip = podIp ?? assumedIp;
    nodes.push({
      id,
      namespace: w.namespace,
      kind: w.kind,
      name: w.name,
      meshed: false,
      pods: w.pods.length,
      podNames: w.pods.map((p) => p.metadata.name),
      readyPods: readyOf(w.pods),
      serviceAccount: w.pods[0]?.spec.serviceAccountName ?? 'default',
      identity: null,
      ip,
      ipAssumed: podIp === undefined,
      defaultPolicy: null,
      podsDiffer: false,
    });
    sources.push({ identity: undefined, ip });
    sourceNode.push(id);
  }
  const pseudo = (name: string, kind: string, ip: string) => {
    const id = `/${kind}/${name}`;
    nodes.push({
      id,
      namespace: '',
      kind,
      name,
      meshed: false,
      pods: 0,
      podNames: [],
      readyPods: null,
      serviceAccount: null,
      identity: null,
      ip,
      ipAssumed: false,
      defaultPolicy: null,
      podsDiffer: false,
    });
    sources.push({ identity: undefined, ip });
    sourceNode.push(id);
  };
  pseudo('unmeshed', 'External', assumedIp);
  if (config.localhostIsPodAddress === true) pseudo('localhost', 'Host', '127.0.0.1');

  const targets: GraphTarget[] = [];
  const edges: GraphEdge[] = [];
  const bulk: GraphBulk[] = [];
  const reachCache = new Map<InboundServer, Map<string, TargetReach>>();
  let groups = 0;
  let evaluations = 0;
  for (const [id, w] of meshed) {
    if (opts.namespace !== undefined && w.namespace !== opts.namespace) continue;
    const first = w.pods[0] as PodInfo;
    const localhost = localhostAuthzOf(config, first);
    const proxyPorts = new Set((first.pod.spec.containers.find((c) => c.name === PROXY_CONTAINER_NAME)?.ports ?? []).map((p) => p.containerPort));
    proxyPorts.add(GRAPH_PROXY_ADMIN_PORT);
    for (const port of index.ports(first.namespace, first.name)) {
      const server = index.peek(first.namespace, first.name, port)?.value;
      if (server === undefined) continue;
      // Default servers are shared values: pods with the same default and the same loopback
      // authorization get the same verdicts, computed once.
      const cacheKey = `${localhost.networks.map((n) => `${n.net.ip}/${n.net.prefixLen}`).join(',')}`;
      let perServer = reachCache.get(server);
      if (perServer === undefined) {
        perServer = new Map();
        reachCache.set(server, perServer);
      }
      let reach = perServer.get(cacheKey);
      if (reach === undefined) {
        reach = reachTarget({ server, localhost }, sources);
        perServer.set(cacheKey, reach);
        groups += reach.groups;
        evaluations += reach.evaluations;
      }
      const t = targets.length;
      const probePaths = first.probePaths.get(port) ?? [];
      targets.push({
        node: id,
        port,
        server: ref(server.meta),
        protocol: PROTOCOL_LABELS[server.protocol.kind],
        proxyAdmin: port === GRAPH_PROXY_ADMIN_PORT,
        proxyPort: proxyPorts.has(port),
        routes: reach.routes.map((r) => ({
          route: r.route === undefined ? null : ref(r.route),
          sample: r.sample === undefined ? null : `${r.sample.method} ${r.sample.path}`,
          probe: r.route !== undefined && isProbeRoute(r.route, server, probePaths),
          shadowed: r.shadowed,
        })),
      });
      reach.routes.forEach((r, ri) => {
        const common = commonPermit(r.verdicts);
        if (common !== undefined) {
          const except = r.verdicts.flatMap((v, si) => (v === common ? [] : [sourceNode[si] as string]));
          bulk.push({ dst: id, port, target: t, route: ri, decision: common.decision as 'allow' | 'audit', authz: ref(common.authz as Meta), except });
        }
        r.verdicts.forEach((v, si) => {
          if (v === common || v.decision === 'deny' || v.authz === undefined) return;
          if (v.authz.kind === 'default' && v.authz.name === 'localhost') return;
          edges.push({ src: sourceNode[si] as string, dst: id, port, target: t, route: ri, decision: v.decision, authz: ref(v.authz) });
        });
      });
    }
  }
  return { nodes, targets, edges, bulk, stats: { sources: sources.length, groups, evaluations } };
}
