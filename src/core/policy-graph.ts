/**
 * The JSON of the who-can-talk graph (`/api/v1/graph`), as `policyGraph` in src/index computes
 * it and the dashboard reads it: declared here, where both may import it, so the two cannot drift.
 */

/** Where a workload's default inbound policy comes from, and whether its running pods still agree. */
export interface DefaultPolicyInfo {
  /** The default policy the first pod's unbound ports get. */
  readonly name: string;
  /** `pod-annotation`: the pod's own annotation (set at creation, often copied from its namespace); `cluster`: the cluster default. */
  readonly source: 'pod-annotation' | 'cluster';
  /** The namespace's annotation now, or null when it has none (or the namespace is unknown). */
  readonly namespaceValue: string | null;
  /**
   * True when a running pod's annotation differs from its namespace's current one: the namespace
   * changed after the pod was created, and the pod keeps the old default until it is recreated.
   */
  readonly stale: boolean;
}

/** A node: a workload (or a pod without one), an unmeshed workload, or a pseudo-source. */
export interface GraphNode {
  /** `namespace/Kind/name`; pseudo-sources have an empty namespace (`/Host/localhost`). */
  readonly id: string;
  readonly namespace: string;
  readonly kind: string;
  readonly name: string;
  readonly meshed: boolean;
  readonly pods: number;
  /** The names of its pods, sorted. */
  readonly podNames: readonly string[];
  /** Pods whose `Ready` condition is true; null when no pod reports conditions (manifests, `ward up`). */
  readonly readyPods: number | null;
  readonly serviceAccount: string | null;
  /** Mesh identity as a source; null for plaintext sources. */
  readonly identity: string | null;
  /** The address it is evaluated from: its first pod's, else (`ipAssumed`) the cluster's first address. */
  readonly ip: string;
  /** The pods have no address (manifests read offline): the source is evaluated from a cluster address. */
  readonly ipAssumed: boolean;
  /** Meshed workloads only. */
  readonly defaultPolicy: DefaultPolicyInfo | null;
  /** Meshed workloads only: true when its pods do not all enforce the same policy. */
  readonly podsDiffer: boolean;
}

/** One route of a destination port (or the connection, for ports without routes). */
export interface GraphRoute {
  /** `kind/name` of the route, or null at connection level. */
  readonly route: string | null;
  /** The request the route was evaluated with (`GET /ready`), or null. */
  readonly sample: string | null;
  /** True for the probe route and for routes that only match the pod's own probe paths (GET, exact). */
  readonly probe: boolean;
  /** No request built from its matches selects it (see core's reachTarget): no verdicts. */
  readonly shadowed: boolean;
}

/** One port of a destination workload. */
export interface GraphTarget {
  readonly node: string;
  readonly port: number;
  /** `server/NAME` or `default/POLICY`. */
  readonly server: string;
  readonly protocol: string;
  readonly proxyAdmin: boolean;
  /** A port of the proxy itself (its inbound and admin ports, declared by the proxy container), not of the application. */
  readonly proxyPort: boolean;
  readonly routes: readonly GraphRoute[];
}

/** A permit: `src` may reach `targets[target]`, route `routes[route]`, by `authz`. */
export interface GraphEdge {
  readonly src: string;
  readonly dst: string;
  readonly port: number;
  readonly target: number;
  readonly route: number;
  readonly decision: 'allow' | 'audit';
  /** `kind/name` of the authorization. */
  readonly authz: string;
}

/**
 * A permit most sources share (a default policy, a wildcard): `dst`'s route admits every source
 * node but those in `except`, by `authz`. Listed once instead of as an edge per source.
 */
export interface GraphBulk {
  readonly dst: string;
  readonly port: number;
  readonly target: number;
  readonly route: number;
  readonly decision: 'allow' | 'audit';
  readonly authz: string;
  /** Source nodes this permit does not cover (each is denied or has an edge of its own). */
  readonly except: readonly string[];
}

/** The graph (the JSON of `/api/v1/graph`). */
export interface PolicyGraph {
  readonly nodes: readonly GraphNode[];
  readonly targets: readonly GraphTarget[];
  /** Permits; with `bulk`, whatever is not listed is denied. */
  readonly edges: readonly GraphEdge[];
  readonly bulk: readonly GraphBulk[];
  readonly stats: { readonly sources: number; readonly groups: number; readonly evaluations: number };
}
