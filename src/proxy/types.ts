/** What a proxy is started with and what it hands back: the types startProxy's builders share. */
import type { Network } from '../core/index.js';
import type { BackoffOptions, Logger } from '../shared/index.js';
import type { PolicyDiscoveryOptions } from './inbound/policy-watch.js';
import type { InboundProxy } from './inbound/proxy.js';
import type { MetricsRegistry } from './metrics/cells.js';
import type { OutboundProxy } from './outbound/proxy.js';
import type { OriginalDstReader } from './transport/original-dst.js';

/** A host and port to listen on (port 0 = any free port). */
export interface ProxyListenAddress {
  readonly host: string;
  readonly port: number;
}

/** One inbound pod port served by the proxy. */
export interface ProxyInboundPort {
  /** The pod's port: its policy applies (`PortSpec.port`), and transport headers name it. 1-65535. */
  readonly podPort: number;
  /** Where the proxy listens for it on the listen host (0 = any free port). */
  readonly listenPort: number;
  /** The application's port on the application host. */
  readonly appPort: number;
}

/** The outbound forward proxy of {@link startProxy}. */
export interface ProxyOutboundOptions {
  /** Where the application reaches it (upstream `127.0.0.1:4140`; port 0 = any free port). */
  readonly listen: ProxyListenAddress;
  /** `host:port` of the controller's Destination service. */
  readonly destinationAddress: string;
  /** The cluster domain of service names (default `cluster.local`). */
  readonly clusterDomain?: string;
  /**
   * The mesh port of the proxy at a pod address, for pods whose proxy does not listen on 4143
   * (local mode with several proxies on one address; tests). Others: the endpoint's opaque
   * transport port, else 4143.
   */
  readonly meshPorts?: ReadonlyMap<string, number>;
}

/** Options of {@link startProxy}. */
export interface ProxyOptions {
  readonly namespace: string;
  readonly pod: string;
  readonly serviceAccount: string;
  readonly trustDomain: string;
  readonly controlPlaneNamespace: string;
  /** Trust anchors (PEM bundle): for the controller's certificates and the mesh. */
  readonly trustAnchorsPem: string;
  /** The ServiceAccount token file, read again for every certificate request. */
  readonly tokenFile: string;
  /** `host:port` of the controller's identity service. */
  readonly identityAddress: string;
  /** `host:port` of the controller's inbound policy service. */
  readonly policyAddress: string;
  /** The pod's address: where the inbound listeners bind. */
  readonly listenHost: string;
  /** Where the application listens (one host for every port: the pod's private address). */
  readonly appHost: string;
  readonly inbound: readonly ProxyInboundPort[];
  /** The mesh port for transport-header connections (upstream 4143). */
  readonly mesh: ProxyListenAddress;
  /** The admin server (upstream 4191). */
  readonly admin: ProxyListenAddress;
  /**
   * The only mesh identity the admin server's `/tap` answers (upstream's `LINKERD2_PROXY_TAP_SVC_NAME`;
   * ward's controller); without it tap is disabled.
   */
  readonly tapIdentity?: string;
  /** The outbound forward proxy; none when undefined. */
  readonly outbound?: ProxyOutboundOptions;
  /**
   * Transparent mode (Linux; iptables in the pod's network namespace redirects inbound traffic to
   * the mesh port and outbound traffic to the outbound listener): no listener per pod port; a
   * connection redirected to the mesh port is served as the pod port it was headed for
   * (SO_ORIGINAL_DST), and one redirected to the outbound listener is carried to its original
   * destination. Needs the native addon: {@link startProxy} rejects with `ERR_ORIGINAL_DST_ADDON`
   * when it is not built. Default false (explicit ports).
   */
  readonly transparent?: boolean;
  /** Transparent mode: reads original destinations in place of the native addon (tests script them). */
  readonly originalDstReader?: OriginalDstReader;
  /**
   * Who the proxy-added `default:localhost` authorization admits (default 127.0.0.1 and ::1).
   * Local mode sets the pod's own address: every pod shares the host's loopback there.
   */
  readonly localhostNetworks?: readonly Network[];
  readonly logger?: Logger;
  /** Where metrics are registered (default: a fresh registry with the process metrics). */
  readonly registry?: MetricsRegistry;
  /** Delays between reconnects of a policy stream (default 100 ms doubling to 5 s). */
  readonly policyBackoff?: BackoffOptions;
  /** Bounds of the lazy policy discovery of undeclared ports in transparent mode (defaults: see inbound/policy-watch). */
  readonly policyDiscovery?: PolicyDiscoveryOptions;
  /** Delays between failed certificate requests (default 500 ms doubling to 10 s). */
  readonly identityBackoff?: BackoffOptions;
  /** Bounds of the certificate renewal delay (defaults 10 s, 24 h). */
  readonly minRefreshMs?: number;
  readonly maxRefreshMs?: number;
}

/** One served pod port, as bound. */
export interface ProxyBoundInbound {
  readonly podPort: number;
  /** The port actually bound on the listen host (transparent mode: the mesh port, where it is redirected). */
  readonly listenPort: number;
  readonly appHost: string;
  readonly appPort: number;
}

/** The ports a started proxy listens on. */
export interface ProxyBoundPorts {
  readonly mesh: number;
  readonly admin: number;
  /** In the order given. */
  readonly inbound: readonly ProxyBoundInbound[];
  /** The outbound forward proxy's port, when it runs. */
  readonly outbound?: number;
}

/** The certificate in use, as `/debug/policies` shows it. */
export interface ProxyCertificateInfo {
  readonly identity: string;
  /** ISO 8601. */
  readonly notAfter: string;
  /** Hex, as openssl prints it. */
  readonly serial: string;
}

/** A running proxy. */
export interface RunningProxy {
  /** This proxy's mesh identity. */
  readonly identity: string;
  readonly ports: ProxyBoundPorts;
  readonly inbound: InboundProxy;
  /** The outbound forward proxy, when it runs. */
  readonly outbound: OutboundProxy | undefined;
  readonly registry: MetricsRegistry;
  /** True when a valid certificate and a policy for every declared port are present (`/ready`). */
  isReady(): boolean;
  /** Resolves once ready (rejects with `ERR_PROXY_CLOSED` if closed first). Callers bound the wait. */
  ready(): Promise<void>;
  /** The `/debug/policies` document. */
  debugPolicies(): ProxyDebugPolicies;
  /** Closes the listeners and every connection, stops the watches and renewals. Idempotent. */
  close(): Promise<void>;
}

/** One port in `/debug/policies`. */
export interface ProxyDebugPort {
  readonly port: number;
  /** `host:port` the proxy listens on for it. */
  readonly listen: string;
  /** `host:port` of the application, null for the admin port. */
  readonly app: string | null;
  /** The policy enforced now, as the `io.linkerd.proxy.inbound.Server` proto3 JSON; null before the first one. */
  readonly policy: unknown;
  /** Set when the policy is unusable and the port fails closed. */
  readonly invalid?: string;
  /** True for the admin port while the proxy's fallback applies (no answer from the controller yet). */
  readonly fallback?: boolean;
  /** True for an undeclared port whose policy was discovered on its first connection (transparent mode). */
  readonly discovered?: boolean;
}

/** The `/debug/policies` document. */
export interface ProxyDebugPolicies {
  readonly workload: { readonly namespace: string; readonly pod: string };
  readonly identity: string;
  readonly ready: boolean;
  readonly certificate: ProxyCertificateInfo | null;
  readonly ports: readonly ProxyDebugPort[];
}
