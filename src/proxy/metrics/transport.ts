/**
 * The proxy's transport metrics, with the upstream proxy's names and labels
 * (`linkerd_transport_metrics`):
 *
 * - `tcp_open_total`, `tcp_open_connections` (gauge), `tcp_read_bytes_total`, `tcp_write_bytes_total`;
 * - `tcp_close_total{errno}` and `tcp_connection_duration_ms{errno}` (histogram, upstream latency
 *   buckets) — `errno` is the socket's OS error code (`ECONNRESET`…), empty for a clean close.
 *
 * Inbound series (one per pod port, server and client TLS state): `direction="inbound",peer="src"`,
 * the target labels, the TLS labels and the server labels, like upstream's server transport
 * labels. A connection is counted from the moment its server and TLS state are known — denied
 * TCP connections included; one that fails before (a detection timeout, a failed handshake, no
 * policy) is only in `inbound_tcp_errors_total`. Outbound series (one per endpoint connection pool): `direction="outbound",peer="dst"`,
 * `authority` (the service name and port asked for, when it was a name), the target labels of the
 * endpoint, `tls="true",server_id="<identity>"` for meshed endpoints or
 * `tls="no_identity",no_tls_reason="not_provided_by_service_discovery"`, then the endpoint's
 * Destination metric labels as `dst_*` (`dst_namespace`, `dst_pod`, `dst_serviceaccount`, the
 * owner such as `dst_deployment`) and `dst_service` for a service name.
 *
 * Cost: a connection resolves its series once and adds two listeners ('error', 'close'). Bytes are
 * not counted per chunk: a closed connection adds its socket's `bytesRead`/`bytesWritten`, and a
 * scrape adds those of the live sockets. Inbound sockets are the accepted TCP sockets (mesh TLS
 * bytes included, as upstream counts them); outbound meshed sockets are TLS sockets, whose counts
 * are the bytes inside TLS.
 *
 * Eviction (metrics/cells): a label set's series is one {@link SeriesGroup}, kept by its
 * `tcp_open_connections` gauge while a connection is open, so it is evicted only once all of them
 * closed and it stayed idle for the idle period; it then starts again from zero (bytes included)
 * if the label set comes back.
 */

import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { DestinationEndpoint } from '../../api/index.js';
import type { OutboundTarget } from '../transport/outbound-target.js';
import {
  CellCounter,
  CellGauge,
  CellHistogram,
  type HistogramCell,
  LATENCY_BUCKETS_MS,
  type Labels,
  type MetricsRegistry,
  observe,
  SeriesGroup,
  type ValueCell,
} from './cells.js';
import { labelsOf, targetLabels } from './labels.js';

/** The series of one label set: what its connections update (one eviction group). */
export class TransportSeries extends SeriesGroup {
  readonly labels: Labels;
  readonly opened: ValueCell;
  readonly openNow: ValueCell;
  readonly read: ValueCell;
  readonly written: ValueCell;
  /** Bytes of the connections already closed. */
  closedRead = 0;
  closedWritten = 0;
  /** Connections open now. */
  readonly live = new Set<Socket>();
  readonly #metrics: TransportMetrics;
  readonly #closes = new Map<string, ValueCell>();
  readonly #durations = new Map<string, HistogramCell>();

  /** Use {@link TransportMetrics.series}. */
  constructor(metrics: TransportMetrics, labels: Labels, cells: TransportCells, onEvict: () => void) {
    super(onEvict);
    this.#metrics = metrics;
    this.labels = labels;
    this.opened = cells.opened.cell(labels, this);
    this.openNow = cells.open.cell(labels, this);
    this.read = cells.read.cell(labels, this);
    this.written = cells.written.cell(labels, this);
  }

  /** Counts a close with `errno` ('' = clean) after `durationMs`. */
  closed(errno: string, durationMs: number): void {
    let close = this.#closes.get(errno);
    let duration = this.#durations.get(errno);
    if (close === undefined || duration === undefined) {
      const labels = labelsOf(this.labels, { errno });
      close = this.#metrics.closeCell(labels, this);
      duration = this.#metrics.durationCell(labels, this);
      this.#closes.set(errno, close);
      this.#durations.set(errno, duration);
    }
    close.value++;
    observe(duration, durationMs);
  }
}

/** The families whose cells a series resolves when it is created. */
interface TransportCells {
  readonly opened: CellCounter;
  readonly open: CellGauge;
  readonly read: CellCounter;
  readonly written: CellCounter;
}

/** The `tcp_*` families of one proxy (both directions share them). */
export class TransportMetrics {
  readonly #opened: CellCounter;
  readonly #closed: CellCounter;
  readonly #open: CellGauge;
  readonly #read: CellCounter;
  readonly #written: CellCounter;
  readonly #duration: CellHistogram;
  /** Every series by its label values (an evicted one leaves). */
  readonly #series = new Map<string, TransportSeries>();
  readonly #outbound = new WeakMap<DestinationEndpoint, TransportSeries>();
  readonly #cells: TransportCells;

  /** Registers the families in `registry`; throws if it already has metrics of these names. */
  constructor(registry: MetricsRegistry) {
    this.#opened = new CellCounter(registry, 'tcp_open_total', 'Total count of opened connections');
    this.#closed = new CellCounter(registry, 'tcp_close_total', 'Total count of closed connections');
    this.#open = new CellGauge(registry, 'tcp_open_connections', 'Number of currently-open connections');
    this.#read = new CellCounter(registry, 'tcp_read_bytes_total', 'Total count of bytes read from peers', () => this.#refresh());
    this.#written = new CellCounter(registry, 'tcp_write_bytes_total', 'Total count of bytes written to peers', () => this.#refresh());
    this.#duration = new CellHistogram(registry, 'tcp_connection_duration_ms', 'Connection lifetimes', LATENCY_BUCKETS_MS);
    this.#cells = { opened: this.#opened, open: this.#open, read: this.#read, written: this.#written };
  }

  /**
   * The series of a label set (built by the caller in exposition order), created on first use.
   * Use it at once (`track`): a series kept aside may be evicted (see `evicted`).
   */
  series(labels: Labels): TransportSeries {
    const key = JSON.stringify(labels);
    let s = this.#series.get(key);
    if (s === undefined) {
      const created: TransportSeries = new TransportSeries(this, labels, this.#cells, () => {
        if (this.#series.get(key) === created) this.#series.delete(key);
      });
      s = created;
      this.#series.set(key, s);
    }
    return s;
  }

  /**
   * Counts `socket` as a connection of `series` from now until its close. While it is open the
   * series' `tcp_open_connections` is not 0, which keeps the whole series from eviction.
   */
  track(series: TransportSeries, socket: Socket): void {
    const openedAt = performance.now();
    series.opened.value++;
    let errno = '';
    const onError = (err: NodeJS.ErrnoException): void => {
      if (errno === '' && typeof err.code === 'string' && /^E[A-Z0-9]+$/.test(err.code)) errno = err.code;
    };
    const onClose = (): void => {
      series.live.delete(socket);
      series.openNow.value--;
      series.closedRead += socket.bytesRead;
      series.closedWritten += socket.bytesWritten;
      series.closed(errno, performance.now() - openedAt);
    };
    series.openNow.value++;
    if (socket.closed) {
      onClose();
      return;
    }
    series.live.add(socket);
    socket.on('error', onError);
    socket.once('close', onClose);
  }

  /**
   * Counts an outbound connection to `endpoint` (see the module comment for its labels);
   * `target` is what the endpoint was resolved for, when known.
   */
  trackOutbound(socket: Socket, endpoint: DestinationEndpoint, target: OutboundTarget | undefined): void {
    let s = this.#outbound.get(endpoint);
    if (s === undefined || s.evicted) {
      s = this.series(outboundLabels(endpoint, target));
      this.#outbound.set(endpoint, s);
    }
    this.track(s, socket);
  }

  /** @internal `tcp_close_total` cell of a label set (with `errno`). */
  closeCell(labels: Labels, series: TransportSeries): ValueCell {
    return this.#closed.cell(labels, series);
  }

  /** @internal `tcp_connection_duration_ms` cell of a label set (with `errno`). */
  durationCell(labels: Labels, series: TransportSeries): HistogramCell {
    return this.#duration.cell(labels, series);
  }

  #refresh(): void {
    for (const s of this.#series.values()) {
      let read = s.closedRead;
      let written = s.closedWritten;
      for (const socket of s.live) {
        read += socket.bytesRead;
        written += socket.bytesWritten;
      }
      s.read.value = read;
      s.written.value = written;
    }
  }
}

/** The leading labels of the outbound transport series. */
const OUTBOUND_TRANSPORT: Labels = Object.freeze({ direction: 'outbound', peer: 'dst' });

/**
 * The outbound labels of traffic to `endpoint` (see the module comment): `lead` (by default the
 * transport series' `direction="outbound",peer="dst"`; the request series pass
 * `direction="outbound"`), `authority`, the endpoint's target labels, its TLS labels, `dst_*`.
 */
export function outboundLabels(endpoint: DestinationEndpoint, target: OutboundTarget | undefined, lead: Labels = OUTBOUND_TRANSPORT): Labels {
  const out: Record<string, string> = { ...lead };
  if (target?.kind === 'name') out.authority = target.path;
  Object.assign(out, targetLabels(endpoint.ip, endpoint.port));
  const identity = endpoint.identity === undefined || endpoint.identity === '' ? undefined : endpoint.identity;
  if (identity !== undefined) {
    out.tls = 'true';
    out.server_id = identity;
  } else {
    out.tls = 'no_identity';
    out.no_tls_reason = 'not_provided_by_service_discovery';
  }
  serviceLabels(out, target);
  for (const [k, v] of Object.entries(endpoint.labels)) {
    // Prometheus label names only; upstream prefixes every endpoint label the same way.
    if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(k)) continue;
    out[`dst_${k}`] = v;
  }
  return Object.freeze(out);
}

/**
 * The outbound labels of traffic to `target` before (or without) an endpoint: `lead`, then
 * `authority` for a service name or the target labels of an IP address, then `dst_service` and
 * `dst_namespace` for a service name. Without a target, `lead` alone.
 */
export function outboundTargetLabels(target: OutboundTarget | undefined, lead: Labels): Labels {
  const out: Record<string, string> = { ...lead };
  if (target?.kind === 'name') out.authority = target.path;
  else if (target?.kind === 'ip') Object.assign(out, targetLabels(target.host, target.port));
  serviceLabels(out, target);
  return Object.freeze(out);
}

/** `dst_service` and `dst_namespace` of a service name target. */
function serviceLabels(out: Record<string, string>, target: OutboundTarget | undefined): void {
  if (target?.kind !== 'name') return;
  // `svc.ns.svc.<domain>`: what upstream gets as the Destination's `service`/`namespace` set labels.
  const [service, namespace] = target.host.split('.');
  if (service !== undefined) out.dst_service = service;
  if (namespace !== undefined) out.dst_namespace = namespace;
}
