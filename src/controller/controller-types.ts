/** What the controller is started with and what it hands back: the types startController's builders share. */
import type { ClusterConfig, EndpointsIndex, PolicyIndex } from '../index/index.js';
import type { Logger, Registry } from '../shared/index.js';
import type { KubeClient } from '../sources/index.js';

/** A listen address. */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/** The controller's listeners. */
export interface ControllerListen {
  readonly policy: ListenAddress;
  readonly identity: ListenAddress;
  readonly destination: ListenAddress;
  readonly admin: ListenAddress;
}

/** Upstream's ports, on loopback. */
export const DEFAULT_LISTEN: ControllerListen = {
  policy: { host: '127.0.0.1', port: 8090 },
  identity: { host: '127.0.0.1', port: 8080 },
  destination: { host: '127.0.0.1', port: 8086 },
  admin: { host: '127.0.0.1', port: 9990 },
};

/**
 * Kubernetes mode: the API server is the source (list+watch), tokens are authenticated with
 * TokenReview, the admission webhooks are served, and the replica that holds the Lease writes status.
 */
export interface KubernetesControllerOptions {
  readonly client: KubeClient;
  /** The control plane's namespace: the Lease and the controller's Service live there. */
  readonly namespace: string;
  /** This replica's name, the Lease's holder identity (the pod name). */
  readonly podName: string;
  /** The admission webhooks' listener and serving certificate; none: no webhooks. */
  readonly webhook?: { readonly listen: ListenAddress; readonly certFile: string; readonly keyFile: string } | undefined;
  /** The image injected pods run their proxy and proxy-init from. */
  readonly proxyImage: string;
  readonly proxyImagePullPolicy?: string | undefined;
  /** The Service whose ClusterIP injected proxies dial (default `ward-controller`). */
  readonly controllerService?: string | undefined;
  /** Where injected proxies reach the controller, instead of that Service's ClusterIP. */
  readonly controllerHost?: string | undefined;
  /** Lease timing (client-go's defaults: 15 s, 10 s, 2 s). */
  readonly leaseDurationMs?: number | undefined;
  readonly renewDeadlineMs?: number | undefined;
  readonly retryPeriodMs?: number | undefined;
}

/** Where the traffic views (edges, stat, the dashboard) read metrics from. */
export interface MetricsSettings {
  /** `embedded`: the controller scrapes every meshed pod itself (the default); `prometheus`: a Prometheus server. */
  readonly backend: 'embedded' | 'prometheus';
  /** The Prometheus server's base URL (backend `prometheus`). */
  readonly prometheusUrl?: string | undefined;
  /** Scrape period of the embedded collector (default 10 s, or `WARD_SCRAPE_INTERVAL`). */
  readonly scrapeIntervalMs?: number | undefined;
}

/** Settings of `startController`. */
export interface ControllerOptions {
  /** The directory source's manifests (local mode); exactly one of this and `kubernetes`. */
  readonly manifestsDir?: string | undefined;
  /** Kubernetes mode (`ward controller --kubernetes`). */
  readonly kubernetes?: KubernetesControllerOptions | undefined;
  /** Trust anchors and issuer (in Kubernetes, mounted from the issuer Secret and the trust-roots ConfigMap). */
  readonly identityDir: string;
  readonly cluster: ClusterConfig;
  /** DNS suffix of Service names (default `cluster.local`). */
  readonly clusterDomain?: string;
  readonly listen?: Partial<ControllerListen>;
  readonly logger?: Logger;
  /**
   * Quiet time after a file event before the batch is applied (default 20 ms: long enough to
   * coalesce an editor's write, short enough for the propagation target; a half-written file
   * only ever costs one rejected batch, since the last good version stays in force).
   */
  readonly debounceMs?: number;
  /** Period of the directory rescan that heals missed file events (default 2000 ms). */
  readonly rescanIntervalMs?: number;
  /** Lifetime of workload certificates (default 24 h). */
  readonly issuanceLifetimeMs?: number;
  /** Serve gRPC in plaintext (tests and debugging only; default false = TLS). */
  readonly grpcPlaintext?: boolean;
  /**
   * The address of a pod that has no `status.podIP` (local mode allocates one per pod). Called
   * when such a pod is applied, for the pods of one batch in `namespace/name` order; the pod
   * reaches the indexes with `status.podIP` set to the answer (left without one on undefined).
   */
  readonly podAddress?: (namespace: string, name: string) => string | undefined;
  /**
   * Ask `podAddress` for every pod, replacing a manifest's `status.podIP` (local mode: an exported
   * Pod carries its cluster address, which means nothing on this machine). Default false: only
   * pods without one are asked.
   */
  readonly replacePodAddresses?: boolean;
  /**
   * How workloads' pods are named (the directory source's `podNames`; default `ordinal`). Local
   * mode uses `template-hash`: a template edit makes new pods, as in a cluster.
   */
  readonly podNames?: 'ordinal' | 'template-hash';
  /** The traffic views' metrics backend (default: embedded, every 10 s). */
  readonly metrics?: MetricsSettings | undefined;
  /**
   * Who the admin port's JSON API, tap and dashboard answer (default `loopback`; /live, /ready and
   * /metrics answer anyone). `any` exposes tap to every peer that reaches the port.
   */
  readonly adminApiFrom?: 'loopback' | 'any' | undefined;
}

/** A running controller. */
export interface RunningController {
  /** Bound ports (useful with port 0). */
  readonly ports: { readonly policy: number; readonly identity: number; readonly destination: number; readonly admin: number };
  /** The trust anchors (PEM) clients verify the controller against. */
  readonly trustAnchorsPem: string;
  /** The TLS server name of the policy and destination APIs. */
  readonly destinationServerName: string;
  /** The TLS server name of the identity API. */
  readonly identityServerName: string;
  readonly index: PolicyIndex;
  readonly endpoints: EndpointsIndex;
  readonly registry: Registry;
  /** Kubernetes mode: whether this replica holds the Lease, where its webhooks listen, where proxies dial. */
  readonly kubernetes?: { isLeader(): boolean; readonly webhookPort: number | undefined; readonly controllerHost: string } | undefined;
  /**
   * Creates the pod again from its definition, as deleting a pod does in a cluster: the
   * namespace's `config.linkerd.io/*` annotations are copied anew (the pod-creation rule), and
   * the result is applied. False when the directory defines no such pod.
   */
  recreatePod(namespace: string, name: string): boolean;
  /** Stops serving: ends watch streams cleanly, closes listeners and watchers. Idempotent. */
  close(): Promise<void>;
}
