/**
 * Counters of the inbound proxy's connection-level enforcement (POLICY-SEMANTICS §4.7, §4.8,
 * §4.11): plain numbers kept per proxy, read with `InboundProxy.stats()`. The Prometheus
 * exposition (with the server / authz / TLS labels of §4.11) is built later on top of the
 * {@link InboundMetricsHooks}, which carry the full decision and client facts.
 */
import type { ClientInfo, Deny, Permit } from '../core/index.js';

/**
 * Why the proxy gave up on a connection without a policy decision — the `error` label of
 * `inbound_tcp_errors_total`. Policy denials are not errors (they are counted as denials).
 */
export type InboundErrorReason =
  /** No (complete) ClientHello within the detect timeout (§4.3). */
  | 'tls detection timeout'
  /** The mesh TLS handshake failed: no client certificate, a foreign CA, an expired one, a timeout… */
  | 'tls handshake failed'
  /** The target port has no policy (yet): the proxy fails closed. */
  | 'no policy'
  /** A connection to the mesh port that is not mTLS with a client identity to our name (§4.2). */
  | 'direct connection not mutually authenticated'
  /** A direct connection that did not negotiate ALPN `transport.l5d.io/v1`. */
  | 'direct connection without transport header'
  /** The transport header did not arrive within the detect timeout. */
  | 'transport header timeout'
  | 'invalid transport header'
  /** A transport header naming a gateway target (multicluster): not supported. */
  | 'gateway not supported'
  /** An HTTP stream reached the HTTP stack, which the default `handleHttp` does not have yet. */
  | 'http not supported'
  /** The application refused or dropped the forwarded connection before it was established. */
  | 'app connect failed';

/** A snapshot of the counters of one {@link InboundStatsCounter}. */
export interface InboundStats {
  /** Connections accepted on every listener since start. */
  readonly accepted: number;
  /** Connections accepted and not yet closed (detecting, handshaking, forwarding or in the HTTP stack). */
  readonly open: number;
  /** Authorized TCP connections being forwarded now (each one re-checked on policy changes). */
  readonly forwarding: number;
  /** Ports with a policy subscription (one per port with forwarded connections). */
  readonly policySubscriptions: number;
  /** `inbound_tcp_authz_allow_total`. */
  readonly tcpAuthzAllow: number;
  /** `inbound_tcp_authz_deny_total`. */
  readonly tcpAuthzDeny: number;
  /** `inbound_tcp_authz_terminate_total`. */
  readonly tcpAuthzTerminate: number;
  /** `inbound_tcp_errors_total` by `error`; reasons never seen are absent. */
  readonly tcpErrors: Readonly<Partial<Record<InboundErrorReason, number>>>;
}

/** One connection-level decision, as handed to the metrics hooks. */
export interface InboundTcpDecisionEvent<D extends Permit | Deny> {
  /** The port whose policy applied (for direct connections, the transport header's port). */
  readonly port: number;
  readonly client: ClientInfo;
  readonly decision: D;
}

/**
 * Optional callbacks for labelled metrics, called synchronously on the connection's path after
 * the counters are updated. They must not throw and should be cheap (cache metric children).
 */
export interface InboundMetricsHooks {
  /** A TCP connection was authorized and is being forwarded. */
  readonly onTcpAllow?: (event: InboundTcpDecisionEvent<Permit>) => void;
  /** A TCP connection was refused by policy. */
  readonly onTcpDeny?: (event: InboundTcpDecisionEvent<Deny>) => void;
  /** A forwarded TCP connection was torn down because a policy update revoked it. */
  readonly onTcpTerminate?: (event: InboundTcpDecisionEvent<Deny>) => void;
  /** A connection failed before (or without) a policy decision. */
  readonly onTcpError?: (reason: InboundErrorReason, port: number) => void;
}

/** The mutable counters behind {@link InboundStats}; the gauges are supplied at snapshot time. */
export class InboundStatsCounter {
  accepted = 0;
  tcpAuthzAllow = 0;
  tcpAuthzDeny = 0;
  tcpAuthzTerminate = 0;
  readonly #errors = new Map<InboundErrorReason, number>();

  /** Counts one error. */
  error(reason: InboundErrorReason): void {
    this.#errors.set(reason, (this.#errors.get(reason) ?? 0) + 1);
  }

  /** A snapshot with the given gauges. */
  snapshot(gauges: { readonly open: number; readonly forwarding: number; readonly policySubscriptions: number }): InboundStats {
    return {
      accepted: this.accepted,
      ...gauges,
      tcpAuthzAllow: this.tcpAuthzAllow,
      tcpAuthzDeny: this.tcpAuthzDeny,
      tcpAuthzTerminate: this.tcpAuthzTerminate,
      tcpErrors: Object.fromEntries(this.#errors),
    };
  }
}
