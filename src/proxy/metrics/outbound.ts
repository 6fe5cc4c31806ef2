/**
 * The outbound proxy's HTTP request metrics, as upstream's outbound endpoint metrics, so that
 * `linkerd viz`-style queries over `direction="outbound"` work: `request_total`, `response_total`
 * (`status_code`, `classification`, `grpc_status`, `error`; the classifier is the inbound
 * side's, metrics/http) and `response_latency_ms` (upstream buckets, by `status_code`), for HTTP/1
 * absolute-form requests, HTTP/2 streams and the requests of redirected (transparent) connections
 * to a meshed endpoint whose session is HTTP (outbound/http1-tap, outbound/http2-tap). CONNECT
 * tunnels and other redirected connections (opaque, unmeshed destinations) are transport metrics
 * only (metrics/transport).
 *
 * Labels of a request sent to an endpoint: the outbound transport series' labels without
 * `peer` — `direction="outbound"`, `authority` (the service name and port, for a name),
 * `target_addr`/`target_ip`/`target_port` of the endpoint, `tls="true",server_id="<identity>"`
 * for a meshed endpoint or `tls="no_identity",no_tls_reason="not_provided_by_service_discovery"`,
 * then `dst_service`/`dst_namespace` of the name and the endpoint's `dst_*` labels. A request is
 * counted on the endpoint it is sent to; an attempt that failed to connect and was retried on
 * another endpoint is not counted (the client sees one response).
 *
 * Requests the proxy answers itself are failures with an `error` label — the proxy's reason:
 * `no endpoints`, `unknown service`, `destination unavailable`, `connect failed`,
 * `connect timeout`, `identity mismatch`, `tls handshake failed`, `no certificate`,
 * `endpoint failed`, `bad request`, `upgrade not supported` — and, like the inbound side's own
 * answers, no `status_code` (none was relayed). Such a request is counted (request and response)
 * on the series of the endpoint it last tried, or, when none was tried, on the target's series:
 * `direction="outbound"`, then `authority`, `dst_service`, `dst_namespace` for a name or the
 * target labels for an IP address; a request without a usable target (not absolute-form, not a
 * cluster name) has `direction="outbound"` alone, so a client cannot mint series with made-up
 * names. A response aborted midway is `error="response aborted"` (HTTP/1) or `h2(<REASON>)`
 * (HTTP/2 reset), with its `status_code`; a client that went away, `client disconnected` or
 * `h2(CANCEL)`. Latency runs from the request's arrival at the proxy to the relayed response
 * headers.
 *
 * Hot path: a request's series is found through a `WeakMap` keyed by the endpoint object (one
 * per endpoint announced by the Destination API), built only for its first request; endpoints
 * made up per request for an IP address the controller does not know are found by the target's
 * path, as are target series. Eviction (metrics/cells): a series is held by its requests in
 * flight; one evicted after being idle is resolved again (from zero) by the next request — every
 * cache checks `evicted`, and the path-keyed maps drop evicted series after each eviction.
 */
import type { DestinationEndpoint } from '../../api/index.js';
import type { OutboundTarget } from '../transport/outbound-target.js';
import type { Labels, MetricsRegistry } from './cells.js';
import { HttpExchange, type HttpFamilies, type HttpRecorder, HttpSeries, registerHttpFamilies } from './http.js';
import { outboundLabels, outboundTargetLabels } from './transport.js';

/** The leading label of every outbound request series. */
const OUTBOUND: Labels = Object.freeze({ direction: 'outbound' });

/** Options of {@link OutboundMetrics}. */
export interface OutboundMetricsOptions {
  /** Where the metrics are registered (one registry per proxy process). */
  readonly registry: MetricsRegistry;
  /** The request/response families (default: new ones in `registry`); the proxy passes the inbound side's. */
  readonly http?: HttpFamilies;
}

/** Whether an endpoint's labels are those of its IP target alone: no identity, no metric labels, the target's address. */
function isPlainTarget(endpoint: DestinationEndpoint, target: OutboundTarget | undefined): target is OutboundTarget {
  if (target?.kind !== 'ip' || endpoint.ip !== target.host || endpoint.port !== target.port) return false;
  if (endpoint.identity !== undefined && endpoint.identity !== '') return false;
  for (const k in endpoint.labels) if (Object.hasOwn(endpoint.labels, k)) return false;
  return true;
}

/** The outbound request metrics of one proxy; pass it to `OutboundProxy` as `metrics`. */
export class OutboundMetrics {
  readonly #families: HttpFamilies;
  /** Every series by its label values (an evicted one leaves). */
  readonly #series = new Map<string, HttpSeries>();
  readonly #byEndpoint = new WeakMap<DestinationEndpoint, HttpSeries>();
  /** Series of endpoints whose labels are their IP target's (see {@link isPlainTarget}), by target path. */
  readonly #plain = new Map<string, HttpSeries>();
  /** Series of targets (requests answered before an endpoint was tried), by target path. */
  readonly #byTarget = new Map<string, HttpSeries>();
  #noTarget: HttpSeries | undefined;
  #generation: number;

  /** Registers the families unless `http` is given; throws if `registry` already has metrics of these names. */
  constructor(opts: OutboundMetricsOptions) {
    this.#families = opts.http ?? registerHttpFamilies(opts.registry);
    this.#generation = this.#families.registry.generation;
  }

  /** The metrics of a request that just arrived (its latency runs from now). */
  exchange(): OutboundExchange {
    return new OutboundExchange(this);
  }

  /** The series of requests to `endpoint`, resolved for `target`. */
  endpointSeries(endpoint: DestinationEndpoint, target: OutboundTarget | undefined): HttpSeries {
    const cached = this.#byEndpoint.get(endpoint);
    if (cached !== undefined && !cached.evicted) return cached;
    if (isPlainTarget(endpoint, target)) return this.#byPath(this.#plain, target.path, () => outboundLabels(endpoint, target, OUTBOUND));
    const s = this.#resolve(outboundLabels(endpoint, target, OUTBOUND));
    this.#byEndpoint.set(endpoint, s);
    return s;
  }

  /** The series of requests to `target` answered before any endpoint was tried (no target: not parsable). */
  targetSeries(target: OutboundTarget | undefined): HttpSeries {
    if (target !== undefined) return this.#byPath(this.#byTarget, target.path, () => outboundTargetLabels(target, OUTBOUND));
    if (this.#noTarget === undefined || this.#noTarget.evicted) this.#noTarget = this.#resolve(OUTBOUND);
    return this.#noTarget;
  }

  #byPath(map: Map<string, HttpSeries>, path: string, labels: () => Labels): HttpSeries {
    const generation = this.#families.registry.generation;
    if (generation !== this.#generation) {
      // Something was evicted: forget evicted series, so that paths do not accumulate.
      this.#generation = generation;
      for (const m of [this.#plain, this.#byTarget]) for (const [k, s] of m) if (s.evicted) m.delete(k);
    }
    let s = map.get(path);
    if (s === undefined || s.evicted) {
      s = this.#resolve(labels());
      map.set(path, s);
    }
    return s;
  }

  /** The series of a label set, created on first use. */
  #resolve(labels: Labels): HttpSeries {
    const key = JSON.stringify(labels);
    let s = this.#series.get(key);
    if (s === undefined) {
      const created: HttpSeries = new HttpSeries(this.#families, labels, () => {
        if (this.#series.get(key) === created) this.#series.delete(key);
      });
      s = created;
      this.#series.set(key, s);
    }
    return s;
  }
}

/**
 * One outbound request's metrics: the proxy reports its target, the endpoints it tries, when the
 * request is sent, and what came back (see {@link HttpExchange}); `end` counts it.
 */
export class OutboundExchange extends HttpExchange {
  readonly #metrics: OutboundMetrics;
  #target: OutboundTarget | undefined;
  #endpoint: DestinationEndpoint | undefined;

  constructor(metrics: OutboundMetrics) {
    super();
    this.#metrics = metrics;
  }

  /** The request's target, once parsed. */
  to(target: OutboundTarget): void {
    this.#target = target;
  }

  /** An endpoint is tried (a retry after a connect failure replaces the one that failed). */
  attempt(endpoint: DestinationEndpoint): void {
    if (!this.hasRecorder) this.#endpoint = endpoint;
  }

  /** The request went to the endpoint tried last: `request_total` counts it there from now on. */
  sent(): void {
    if (this.ended || this.hasRecorder || this.#endpoint === undefined) return;
    this.setRecorder(this.#metrics.endpointSeries(this.#endpoint, this.#target).begin());
  }

  /** Never sent: counted (request and response) on the endpoint last tried, or on the target. */
  protected override lateRecorder(): HttpRecorder {
    const e = this.#endpoint;
    return (e !== undefined ? this.#metrics.endpointSeries(e, this.#target) : this.#metrics.targetSeries(this.#target)).begin();
  }
}
