/**
 * Where an application's outbound connection or request is going, as the outbound resolves it:
 * what the metrics label outbound series with, below both.
 */

/** A parsed outbound target: what the application asked for and the Destination path for it. */
export interface OutboundTarget {
  readonly kind: 'name' | 'ip';
  /** The host as resolved: the fully qualified service name, or the canonical IP. */
  readonly host: string;
  readonly port: number;
  /** The Destination path: `svc.ns.svc.<domain>:port`, `ip:port` or `[ip6]:port`. */
  readonly path: string;
}
