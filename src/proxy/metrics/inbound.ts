/**
 * The inbound proxy's Prometheus metrics (POLICY-SEMANTICS §4.11), fed by the
 * {@link InboundMetricsHooks} of `InboundProxy` (and of the admin server, which applies the
 * port-4191 policy itself):
 *
 * - `inbound_http_authz_allow_total` — target, server, route, authorization and TLS labels;
 * - `inbound_http_authz_deny_total` — target, server, route and TLS labels;
 * - `inbound_http_route_not_found_total` — target, server and TLS labels;
 * - `inbound_tcp_authz_allow_total` — target, server, authorization and TLS labels;
 * - `inbound_tcp_authz_deny_total`, `inbound_tcp_authz_terminate_total` — target, server and TLS labels;
 * - `inbound_tcp_errors_total{error}`, `inbound_http_errors_total{error}` — policy denials excluded;
 * - `request_total`, `response_total`, `response_latency_ms` (histogram, upstream buckets) with
 *   `direction="inbound"`, target, TLS, server, route and authorization labels — for permitted
 *   requests only, so that policy denials (counted by the authorization metrics) are told apart
 *   from application errors. `response_*` add `status_code` (absent when no response was
 *   relayed); `response_total` adds upstream's `classification="success"|"failure"`,
 *   `grpc_status` (empty unless gRPC) and `error` (empty unless the exchange failed without a
 *   complete response);
 * - the `tcp_*` transport metrics of inbound connections (see metrics/transport).
 *
 * Classification as upstream's default classifier, shared with the outbound side (metrics/http):
 * a gRPC request by its `grpc-status`, any other by its status (5xx fails). An exchange that
 * ended without a complete response (a reset, an application that cannot be reached) is a failure
 * with an `error` label: `h2(<REASON>)` for an HTTP/2 reset (upstream's spelling), else the
 * proxy's reason (`app unreachable`, `app response aborted`, `client disconnected`,
 * `upgrade not supported`, `invalid route filter`).
 *
 * Labels as upstream: `target_addr`, `target_ip`, `target_port`, `srv_group`, `srv_kind`, `srv_name`,
 * `srv_port`, `route_group/kind/name`, `authz_group/kind/name`, and the TLS labels
 * `tls="true",client_id` | `tls="no_identity",no_tls_reason` | `tls="opaque",sni` | `tls="disabled"`.
 *
 * Hot path: a decision finds its series through identity-keyed maps (port → server `Meta` →
 * route `Meta` → authz `Meta` → TLS state; see metrics/labels); the `Meta` objects are those of
 * the compiled policy, so after the first request of a kind nothing is allocated or hashed. A
 * permitted request resolves its series once: `onHttpAllow` and `onHttpRequest` share it, and the
 * series itself is the request's recorder, whose response cells are keyed by status and gRPC
 * status numbers. Series are shared by label values (a policy update that re-creates equal `Meta`
 * objects finds the same series), and the registry reads them at scrape time.
 *
 * Eviction (metrics/cells): a route series (allow, request, response and latency cells) is one
 * group, held by its requests in flight; a connection series is held by its open connections.
 * The identity-keyed indexes start over whenever the registry evicted something, so that a
 * decision after an eviction resolves a live series again (from zero if it was evicted) and the
 * keys of forgotten series (client identities) do not stay in memory.
 */
import type { ClientInfo, Deny, Meta, Permit } from '../../core/index.js';
import { CellCounter, type Labels, type MetricsRegistry, type ValueCell } from './cells.js';
import { type HttpFamilies, HttpSeries, registerHttpFamilies } from './http.js';
import type {
  InboundErrorReason,
  InboundHttpDecisionEvent,
  InboundHttpErrorReason,
  InboundMetricsHooks,
  InboundTcpDecisionEvent,
  InboundTcpOpenEvent,
} from './inbound-stats.js';
import { DecisionIndex, labelsOf, metaLabels, NO_META, serverLabels, targetLabels, tlsLabels } from './labels.js';
import { TransportMetrics, type TransportSeries } from './transport.js';

/**
 * One authorization counter whose series are keyed by a decision: (port, server, route?, authz?,
 * client TLS). Labels: target, server, TLS, then route and authz when the counter has them.
 */
class DecisionCounter {
  readonly #index: DecisionIndex<ValueCell>;

  constructor(registry: MetricsRegistry, name: string, help: string, targetIp: string, withRoute: boolean, withAuthz: boolean) {
    const family = new CellCounter(registry, name, help);
    this.#index = new DecisionIndex(
      (port, server, route, authz, tls) =>
        family.cell(
          labelsOf(
            targetLabels(targetIp, port),
            serverLabels(server, port),
            tlsLabels(tls),
            withRoute && route !== NO_META ? metaLabels('route', route) : {},
            withAuthz && authz !== NO_META ? metaLabels('authz', authz) : {},
          ),
        ),
      registry,
    );
  }

  /** Counts one decision. */
  inc(port: number, server: Meta, route: Meta | undefined, authz: Meta | undefined, client: ClientInfo): void {
    this.#index.get(port, server, route ?? NO_META, authz ?? NO_META, client.tls).value++;
  }
}

/** A counter labelled only by `error` (errors are rare: the cell is looked up at each one). */
class ErrorCounter {
  readonly #family: CellCounter;

  constructor(registry: MetricsRegistry, name: string, help: string) {
    this.#family = new CellCounter(registry, name, help);
  }

  inc(error: string): void {
    this.#family.cell({ error }).value++;
  }
}

/**
 * The series of one (port, server, route, authz, client TLS) label set: its authorization-allow
 * cell and its request/response cells, one eviction group. It is the recorder of its requests.
 */
class HttpRouteSeries extends HttpSeries {
  /** `inbound_http_authz_allow_total`. */
  readonly allow: ValueCell;

  constructor(allowFamily: CellCounter, allowLabels: Labels, families: HttpFamilies, labels: Labels, onEvict: () => void) {
    super(families, labels, onEvict);
    this.allow = allowFamily.cell(allowLabels, this);
  }
}

/** Options of {@link InboundMetrics}. */
export interface InboundMetricsOptions {
  /** Where the metrics are registered (one registry per proxy process). */
  readonly registry: MetricsRegistry;
  /** The pod's address: `target_ip`, and the host of `target_addr` (`<ip>:<port>`). */
  readonly targetIp: string;
  /** The `tcp_*` families (default: new ones in `registry`); the outbound side shares them. */
  readonly transport?: TransportMetrics;
  /** The request/response families (default: new ones in `registry`); the outbound side shares them. */
  readonly http?: HttpFamilies;
}

/**
 * The labelled inbound metrics of one proxy, registered in `registry`. Pass {@link hooks} to
 * `InboundProxy` (and to the admin server) as `metrics`.
 */
export class InboundMetrics {
  /** The hooks that feed the metrics; cheap, never throw. */
  readonly hooks: InboundMetricsHooks;
  /** The `tcp_*` families (shared with the outbound side). */
  readonly transport: TransportMetrics;
  /** `request_total`, `response_total`, `response_latency_ms` (shared with the outbound side). */
  readonly http: HttpFamilies;
  /** The series `onHttpAllow` resolved last, for the `onHttpRequest` of the same decision. */
  #lastDecision: Permit | undefined;
  #lastSeries: HttpRouteSeries | undefined;

  /** Registers the metrics; throws if `registry` already has metrics of these names. */
  constructor(opts: InboundMetricsOptions) {
    const { registry, targetIp } = opts;
    const httpDeny = new DecisionCounter(registry, 'inbound_http_authz_deny_total', 'HTTP requests denied by policy', targetIp, true, false);
    const httpNotFound = new DecisionCounter(registry, 'inbound_http_route_not_found_total', 'HTTP requests that matched no route', targetIp, false, false);
    const tcpAllow = new DecisionCounter(registry, 'inbound_tcp_authz_allow_total', 'TCP connections authorized by policy', targetIp, false, true);
    const tcpDeny = new DecisionCounter(registry, 'inbound_tcp_authz_deny_total', 'TCP connections denied by policy', targetIp, false, false);
    const tcpTerminate = new DecisionCounter(
      registry,
      'inbound_tcp_authz_terminate_total',
      'TCP connections terminated because a policy change revoked them',
      targetIp,
      false,
      false,
    );
    const tcpErrors = new ErrorCounter(registry, 'inbound_tcp_errors_total', 'inbound TCP connections that failed without a policy decision');
    const httpErrors = new ErrorCounter(registry, 'inbound_http_errors_total', 'inbound HTTP requests answered or dropped without a policy decision');

    const httpAllow = new CellCounter(registry, 'inbound_http_authz_allow_total', 'HTTP requests authorized by policy');
    this.http = opts.http ?? registerHttpFamilies(registry);
    const families = this.http;
    /** Route series by label values (an evicted one leaves). */
    const byLabels = new Map<string, HttpRouteSeries>();
    const routes = new DecisionIndex<HttpRouteSeries>((port, server, route, authz, tls) => {
      const target = targetLabels(targetIp, port);
      const srv = serverLabels(server, port);
      const tlsL = tlsLabels(tls);
      const r = route === NO_META ? {} : metaLabels('route', route);
      const a = metaLabels('authz', authz);
      const labels = labelsOf({ direction: 'inbound' }, target, tlsL, srv, r, a);
      const key = JSON.stringify(labels);
      let s = byLabels.get(key);
      if (s === undefined) {
        const created: HttpRouteSeries = new HttpRouteSeries(httpAllow, labelsOf(target, srv, tlsL, r, a), families, labels, () => {
          if (byLabels.get(key) === created) byLabels.delete(key);
        });
        s = created;
        byLabels.set(key, s);
      }
      return s;
    }, registry);

    this.transport = opts.transport ?? new TransportMetrics(registry);
    const transport = this.transport;
    const connections = new DecisionIndex<TransportSeries>(
      (port, server, _route, _authz, tls) =>
        transport.series(labelsOf({ direction: 'inbound', peer: 'src' }, targetLabels(targetIp, port), tlsLabels(tls), serverLabels(server, port))),
      registry,
    );

    const routeSeries = (e: InboundHttpDecisionEvent<Permit>): HttpRouteSeries => {
      const d = e.decision;
      if (d === this.#lastDecision && this.#lastSeries !== undefined && !this.#lastSeries.evicted) return this.#lastSeries;
      const s = routes.get(e.port, d.server, d.route ?? NO_META, d.authz, e.client.tls);
      this.#lastDecision = d;
      this.#lastSeries = s;
      return s;
    };

    this.hooks = {
      onTcpOpen: (e: InboundTcpOpenEvent) => transport.track(connections.get(e.port, e.server, NO_META, NO_META, e.client.tls), e.socket),
      onTcpAllow: (e: InboundTcpDecisionEvent<Permit>) => tcpAllow.inc(e.port, e.decision.server, undefined, e.decision.authz, e.client),
      onTcpDeny: (e: InboundTcpDecisionEvent<Deny>) => tcpDeny.inc(e.port, e.decision.server, undefined, undefined, e.client),
      onTcpTerminate: (e: InboundTcpDecisionEvent<Deny>) => tcpTerminate.inc(e.port, e.decision.server, undefined, undefined, e.client),
      onTcpError: (reason: InboundErrorReason) => tcpErrors.inc(reason),
      onHttpAllow: (e: InboundHttpDecisionEvent<Permit>) => {
        routeSeries(e).allow.value++;
      },
      onHttpRequest: (e: InboundHttpDecisionEvent<Permit>) => routeSeries(e).begin(),
      onHttpDeny: (e: InboundHttpDecisionEvent<Deny>) => httpDeny.inc(e.port, e.decision.server, e.decision.route, undefined, e.client),
      onHttpRouteNotFound: (e: InboundHttpDecisionEvent<Deny>) => httpNotFound.inc(e.port, e.decision.server, undefined, undefined, e.client),
      onHttpError: (reason: InboundHttpErrorReason) => httpErrors.inc(reason),
    };
  }
}
