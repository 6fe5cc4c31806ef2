/**
 * Where `ward edges`, `ward stat` and the dashboard read traffic from: the controller's embedded
 * collector (it scrapes every meshed pod's admin port and keeps a rolling window in memory), or
 * a Prometheus server holding the same series. Both answer the same few PromQL-shaped queries,
 * so the views are computed once, over either.
 *
 * Every series carries the labels the proxy exposes plus those of the pod it came from, as
 * linkerd-viz's Prometheus relabelling adds them: `namespace`, `pod`, and the owning workload as
 * `workload_kind` (`Deployment`, `StatefulSet`, … or `Pod`) and `workload_name`.
 */

/** One series of an answer: the kept labels and a value. */
export interface Sample {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Which series to read and how to group them. */
export interface SeriesQuery {
  /** The family name as the proxy exposes it (`request_total`, `tcp_open_connections`, …); for `quantile`, the histogram's base name (`response_latency_ms`). */
  readonly metric: string;
  /** Exact label matches. */
  readonly match?: Readonly<Record<string, string>>;
  /** The labels kept; the others are summed over (PromQL `sum by (…)`). */
  readonly by: readonly string[];
}

/** A scrape target's health. */
export interface TargetHealth {
  readonly namespace: string;
  readonly pod: string;
  /** `ip:port` of the admin server. */
  readonly address: string;
  readonly up: boolean;
  /** ISO time of the last scrape attempt; null before the first. */
  readonly lastScrape: string | null;
  readonly error?: string;
}

/** The queries the views need. */
export interface MetricsBackend {
  readonly kind: 'embedded' | 'prometheus';
  /** `sum by (by) (rate(metric{match}[window]))`: per-second increase of a counter. */
  rate(q: SeriesQuery, windowSeconds: number): Promise<readonly Sample[]>;
  /** `sum by (by) (metric{match})`: the latest value of a gauge. */
  latest(q: SeriesQuery): Promise<readonly Sample[]>;
  /** `histogram_quantile(quantile, sum by (le, by) (rate(metric_bucket{match}[window])))`. */
  quantile(quantile: number, q: SeriesQuery, windowSeconds: number): Promise<readonly Sample[]>;
  /** Scrape targets and whether each answered. */
  targets(): Promise<readonly TargetHealth[]>;
}
