/**
 * Counters of the inbound proxy's enforcement (POLICY-SEMANTICS §4.7, §4.8, §4.11), per
 * connection (TCP) and per request (HTTP): plain numbers kept per proxy, read with
 * `InboundProxy.stats()`. The Prometheus exposition (with the server / authz / TLS labels of
 * §4.11) is built later on top of the {@link InboundMetricsHooks}, which carry the full decision
 * and client facts.
 */
import type { Socket } from 'node:net';
import type { ClientInfo, Deny, Meta, Permit, RequestInfo } from '../../core/index.js';

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
  /** Transparent mode: the target port's policy did not arrive within the discovery timeout (the controller did not answer). */
  | 'policy discovery timeout'
  /** Transparent mode: the target port is undeclared and the proxy already watches as many undeclared ports as it may. */
  | 'policy discovery limit'
  /** Transparent mode: the target port is one of the proxy's own (the mesh or outbound listener): never discovered, never forwarded. */
  | 'proxy port'
  /** A connection to the mesh port that is not mTLS with a client identity to our name (§4.2). */
  | 'direct connection not mutually authenticated'
  /** A direct connection that did not negotiate ALPN `transport.l5d.io/v1`. */
  | 'direct connection without transport header'
  /** The transport header did not arrive within the detect timeout. */
  | 'transport header timeout'
  | 'invalid transport header'
  /** A transport header naming a gateway target (multicluster): not supported. */
  | 'gateway not supported'
  /** The application refused or dropped the forwarded connection before it was established. */
  | 'app connect failed'
  /** Transparent mode: the original destination of a redirected connection could not be read (SO_ORIGINAL_DST). */
  | 'original destination unknown'
  /** An unfinished connection (detection, TLS handshake, transport header) shed: too many were unfinished at once. */
  | 'unfinished connection limit'
  /** A connection shed, or a new one refused, because the proxy holds as many connections as it may. */
  | 'connection limit'
  /** A forwarded TCP connection closed after carrying no byte either way for the idle timeout. */
  | 'tcp idle timeout'
  /**
   * A stream silent until the HTTP detect deadline (forwarded as TCP: the server may speak first)
   * whose first bytes were HTTP after all: closed, since they would reach the application unchecked.
   */
  | 'http after detect timeout';

/**
 * Why the HTTP stack answered a request itself without a policy decision, or gave up on one — the
 * `error` label of `inbound_http_errors_total`. Policy denials are not errors.
 */
export type InboundHttpErrorReason =
  /** The port has no policy (any more): 500, fail closed. */
  | 'no policy'
  /** The port's policy is invalid (§4.5): 500. */
  | 'invalid policy'
  /** The application could not be reached or failed before responding: 502 / grpc-status 14. */
  | 'app unreachable'
  /** The application failed in the middle of a response: the client's response is reset. */
  | 'app response aborted'
  /**
   * The HTTP/1 parser refused the request (malformed, CL+TE, duplicate Content-Length…), or it
   * cannot be forwarded as sent (an asterisk-form target, two Host headers): 400, closed.
   */
  | 'bad request'
  /** The request headers exceed the size limit: 431, closed. */
  | 'request headers too large'
  /** The request headers (HTTP/2: the connection preface) did not arrive within the headers timeout: 408 (HTTP/2: none), closed. */
  | 'request headers timeout'
  /** A protocol upgrade (WebSocket…) or CONNECT: 501, not forwarded. */
  | 'upgrade not supported'
  /** The matched route's filters cannot be applied (a redirect without a usable location, an invalid status…): 500. */
  | 'invalid route filter';

/** One labelled HTTP authorization counter (§4.11): which server, route and authorization, by port. */
export interface InboundHttpAuthzCount {
  /** `inbound_http_authz_allow_total`, `inbound_http_authz_deny_total` or `inbound_http_route_not_found_total`. */
  readonly metric: 'allow' | 'deny' | 'route_not_found';
  readonly port: number;
  /** `kind:name` of the server. */
  readonly server: string;
  /** `kind:name` of the route (undefined for route-not-found). */
  readonly route: string | undefined;
  /** `kind:name` of the authorization (allow only). */
  readonly authz: string | undefined;
  readonly count: number;
}

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
  /** Connections waiting for the policy of a port nobody declared (transparent mode's lazy discovery). */
  readonly discovering: number;
  /** `inbound_tcp_authz_allow_total`. */
  readonly tcpAuthzAllow: number;
  /** `inbound_tcp_authz_deny_total`. */
  readonly tcpAuthzDeny: number;
  /** `inbound_tcp_authz_terminate_total`. */
  readonly tcpAuthzTerminate: number;
  /** `inbound_tcp_errors_total` by `error`; reasons never seen are absent. */
  readonly tcpErrors: Readonly<Partial<Record<InboundErrorReason, number>>>;
  /** `inbound_http_authz_allow_total`, all labels summed. */
  readonly httpAuthzAllow: number;
  /** `inbound_http_authz_deny_total`, all labels summed. */
  readonly httpAuthzDeny: number;
  /** `inbound_http_route_not_found_total`, all labels summed. */
  readonly httpRouteNotFound: number;
  /** The three HTTP authorization counters by port, server, route and authorization. */
  readonly httpAuthz: readonly InboundHttpAuthzCount[];
  /** `inbound_http_errors_total` by `error`; reasons never seen are absent. */
  readonly httpErrors: Readonly<Partial<Record<InboundHttpErrorReason, number>>>;
}

/** One connection-level decision, as handed to the metrics hooks. */
export interface InboundTcpDecisionEvent<D extends Permit | Deny> {
  /** The port whose policy applied (for direct connections, the transport header's port). */
  readonly port: number;
  readonly client: ClientInfo;
  readonly decision: D;
}

/** One request-level decision, as handed to the metrics hooks. */
export interface InboundHttpDecisionEvent<D extends Permit | Deny> extends InboundTcpDecisionEvent<D> {
  /** The request as the policy saw it (`l5d-*` and hop-by-hop headers already removed). */
  readonly request: RequestInfo;
}

/** A connection whose labels are known (port, server, client TLS state), as handed to the metrics hooks. */
export interface InboundTcpOpenEvent {
  /** The port whose policy applies. */
  readonly port: number;
  /** The server of the policy the connection was classified with. */
  readonly server: Meta;
  readonly client: ClientInfo;
  /** The accepted TCP socket: its byte counts, errors and close are the connection's. */
  readonly socket: Socket;
}

/**
 * Where the HTTP stack reports how a permitted request's exchange ended (`response_total`,
 * `response_latency_ms`). Called once per request.
 */
export interface InboundHttpRecorder {
  /**
   * @param status the response status relayed to the client (the application's, or a route
   *   filter's); 0 when no response was relayed.
   * @param headerGrpcStatus `grpc-status` in the response headers (trailers-only), -1 when absent.
   * @param trailerGrpcStatus `grpc-status` in the response trailers, -1 when absent.
   * @param error why the exchange failed without a complete response (`h2(CANCEL)`,
   *   `app unreachable`…); undefined when it completed.
   * @param latencyMs from the request to its response headers; NaN without a response.
   * @param grpc the request was gRPC (its `content-type`).
   */
  end(status: number, headerGrpcStatus: number, trailerGrpcStatus: number, error: string | undefined, latencyMs: number, grpc?: boolean): void;
}

/**
 * Optional callbacks for labelled metrics, called synchronously on the connection's path after
 * the counters are updated. They must not throw and should be cheap (cache metric children).
 */
export interface InboundMetricsHooks {
  /**
   * A connection reached the point where its labels are known: a TCP stream about to be authorized
   * (allowed or not), or an HTTP connection handed to the HTTP stack. Called once per connection.
   */
  readonly onTcpOpen?: (event: InboundTcpOpenEvent) => void;
  /** A TCP connection was authorized and is being forwarded. */
  readonly onTcpAllow?: (event: InboundTcpDecisionEvent<Permit>) => void;
  /** A TCP connection was refused by policy. */
  readonly onTcpDeny?: (event: InboundTcpDecisionEvent<Deny>) => void;
  /** A forwarded TCP connection was torn down because a policy update revoked it. */
  readonly onTcpTerminate?: (event: InboundTcpDecisionEvent<Deny>) => void;
  /** A connection failed before (or without) a policy decision. */
  readonly onTcpError?: (reason: InboundErrorReason, port: number) => void;
  /** An HTTP request was authorized (and is being forwarded). */
  readonly onHttpAllow?: (event: InboundHttpDecisionEvent<Permit>) => void;
  /**
   * A permitted request is handled by the HTTP stack (forwarded, or answered by a route filter),
   * right after {@link onHttpAllow} with the same event: `request_total`. Returns where to report
   * its end, if anywhere.
   */
  readonly onHttpRequest?: (event: InboundHttpDecisionEvent<Permit>) => InboundHttpRecorder | undefined;
  /** An HTTP request was denied by an authorization decision (403 / grpc-status 7). */
  readonly onHttpDeny?: (event: InboundHttpDecisionEvent<Deny>) => void;
  /** An HTTP request matched no route (404 / grpc-status 5). */
  readonly onHttpRouteNotFound?: (event: InboundHttpDecisionEvent<Deny>) => void;
  /** The HTTP stack answered or dropped a request without a policy decision. */
  readonly onHttpError?: (reason: InboundHttpErrorReason, port: number) => void;
}

/** The mutable counters behind {@link InboundStats}; the gauges are supplied at snapshot time. */
export class InboundStatsCounter {
  accepted = 0;
  tcpAuthzAllow = 0;
  tcpAuthzDeny = 0;
  tcpAuthzTerminate = 0;
  httpAuthzAllow = 0;
  httpAuthzDeny = 0;
  httpRouteNotFound = 0;
  readonly #errors = new Map<InboundErrorReason, number>();
  readonly #httpErrors = new Map<InboundHttpErrorReason, number>();
  /** Labelled HTTP counters by `metric|port|server|route|authz`. */
  readonly #httpAuthz = new Map<string, { -readonly [K in keyof InboundHttpAuthzCount]: InboundHttpAuthzCount[K] }>();

  /** Counts one error. */
  error(reason: InboundErrorReason): void {
    this.#errors.set(reason, (this.#errors.get(reason) ?? 0) + 1);
  }

  /** Counts one HTTP error. */
  httpError(reason: InboundHttpErrorReason): void {
    this.#httpErrors.set(reason, (this.#httpErrors.get(reason) ?? 0) + 1);
  }

  /** Counts one HTTP authorization outcome under its labels (`route`/`authz` as present on the decision). */
  httpAuthz(metric: InboundHttpAuthzCount['metric'], port: number, d: Permit | Deny): void {
    if (metric === 'allow') this.httpAuthzAllow++;
    else if (metric === 'deny') this.httpAuthzDeny++;
    else this.httpRouteNotFound++;
    const server = `${d.server.kind}:${d.server.name}`;
    const route = d.route === undefined ? undefined : `${d.route.kind}:${d.route.name}`;
    const authz = d.allowed ? `${d.authz.kind}:${d.authz.name}` : undefined;
    const key = `${metric}|${port}|${server}|${route ?? ''}|${authz ?? ''}`;
    const cell = this.#httpAuthz.get(key);
    if (cell !== undefined) cell.count++;
    else this.#httpAuthz.set(key, { metric, port, server, route, authz, count: 1 });
  }

  /** A snapshot with the given gauges. */
  snapshot(gauges: { readonly open: number; readonly forwarding: number; readonly policySubscriptions: number; readonly discovering: number }): InboundStats {
    return {
      accepted: this.accepted,
      ...gauges,
      tcpAuthzAllow: this.tcpAuthzAllow,
      tcpAuthzDeny: this.tcpAuthzDeny,
      tcpAuthzTerminate: this.tcpAuthzTerminate,
      tcpErrors: Object.fromEntries(this.#errors),
      httpAuthzAllow: this.httpAuthzAllow,
      httpAuthzDeny: this.httpAuthzDeny,
      httpRouteNotFound: this.httpRouteNotFound,
      httpAuthz: [...this.#httpAuthz.values()].map((c) => ({ ...c })),
      httpErrors: Object.fromEntries(this.#httpErrors),
    };
  }
}
