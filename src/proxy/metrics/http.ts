/**
 * The HTTP request metrics both directions share (upstream's `request_total`, `response_total`,
 * `response_latency_ms`): the families, the series of one label set with its response
 * classification, and the {@link HttpExchange} that collects what one request's exchange did.
 *
 * Classification as upstream's default classifier (linkerd2-proxy `app/core/src/classify.rs`,
 * without a ServiceProfile): a gRPC request (`content-type: application/grpc…`) is classified by
 * its `grpc-status`, from the response headers (trailers-only) or else the trailers, `2` (UNKNOWN)
 * when neither has one, and fails for DATA_LOSS, DEADLINE_EXCEEDED, INTERNAL, PERMISSION_DENIED,
 * UNAVAILABLE and UNKNOWN, whatever the HTTP status; any other request fails on a 5xx status. An
 * exchange that ended without a complete response (a reset, an upstream that cannot be reached, a
 * response the proxy answered itself) is a failure with an `error` label: `h2(<REASON>)` for an
 * HTTP/2 reset (upstream's spelling), else the proxy's reason; `status_code` is then present only
 * when a response head had been relayed.
 *
 * Labels: the series' own (direction, target, TLS…), then `status_code` for `response_*`, then for
 * `response_total` upstream's three, always present: `classification`, `grpc_status` (the code
 * for a gRPC request, else empty) and `error` (empty unless the exchange failed).
 *
 * Hot path: a request counts on a series it already holds (`begin`), and its end finds the response
 * cell through small maps keyed by status and gRPC status numbers; labels are built only for the
 * first response of a kind. A series is a {@link SeriesGroup}: a request holds it from `begin` to
 * `end`, so it is never evicted with a request in flight.
 */
import { performance } from 'node:perf_hooks';
import {
  CellCounter,
  CellHistogram,
  type HistogramCell,
  LATENCY_BUCKETS_MS,
  type Labels,
  type MetricsRegistry,
  observe,
  SeriesGroup,
  type ValueCell,
} from './cells.js';
import { labelsOf } from './labels.js';

/** The request/response families of a registry (registered once, shared by both directions). */
export interface HttpFamilies {
  readonly registry: MetricsRegistry;
  readonly requests: CellCounter;
  readonly responses: CellCounter;
  readonly latency: CellHistogram;
}

/** Registers `request_total`, `response_total` and `response_latency_ms` (upstream's latency buckets). */
export function registerHttpFamilies(registry: MetricsRegistry): HttpFamilies {
  return {
    registry,
    requests: new CellCounter(registry, 'request_total', 'Total count of HTTP requests'),
    responses: new CellCounter(registry, 'response_total', 'Total count of HTTP responses'),
    latency: new CellHistogram(registry, 'response_latency_ms', 'Elapsed times between a request and its response headers', LATENCY_BUCKETS_MS),
  };
}

/** Where one request's outcome is reported, once, when its exchange is over. */
export interface HttpRecorder {
  /**
   * @param status the response status relayed to the client; 0 when no response was relayed.
   * @param headerGrpcStatus `grpc-status` in the response headers (trailers-only), -1 when absent.
   * @param trailerGrpcStatus `grpc-status` in the response trailers, -1 when absent.
   * @param error why the exchange failed without a complete response; undefined when it completed.
   * @param latencyMs from the request to its response headers; NaN without a response.
   * @param grpc the request was gRPC (its `content-type`): classified by its gRPC status.
   */
  end(status: number, headerGrpcStatus: number, trailerGrpcStatus: number, error: string | undefined, latencyMs: number, grpc?: boolean): void;
}

/** gRPC UNKNOWN: the status of a gRPC response that carries none. */
const GRPC_UNKNOWN = 2;
/** gRPC codes upstream's default classifier counts as failures. */
const GRPC_FAILURES: ReadonlySet<number> = new Set([15, 4, 13, 7, 14, GRPC_UNKNOWN]);

/**
 * The request and response series of one label set. `begin` counts a request and holds the
 * series; `end` (the request's {@link HttpRecorder}) counts its response and releases it.
 */
export class HttpSeries extends SeriesGroup implements HttpRecorder {
  /** The series' labels (without `status_code` and the classification). */
  readonly labels: Labels;
  readonly #families: HttpFamilies;
  #request: ValueCell | undefined;
  /** Completed responses by status, then by gRPC status label (-1: none). */
  readonly #responses = new Map<number, Map<number, ValueCell>>();
  /** Failed exchanges by error, then by status (0: no response). */
  readonly #errors = new Map<string, Map<number, ValueCell>>();
  readonly #latency = new Map<number, HistogramCell>();

  /** `onEvict`: see {@link SeriesGroup}. */
  constructor(families: HttpFamilies, labels: Labels, onEvict?: () => void) {
    super(onEvict);
    this.#families = families;
    this.labels = labels;
  }

  /** `request_total`. */
  get request(): ValueCell {
    this.#request ??= this.#families.requests.cell(this.labels, this);
    return this.#request;
  }

  /** Counts a request and holds the series until the request's {@link end}. */
  begin(): this {
    this.request.value++;
    this.hold();
    return this;
  }

  end(status: number, headerGrpcStatus: number, trailerGrpcStatus: number, error: string | undefined, latencyMs: number, grpc = false): void {
    if (status > 0 && latencyMs >= 0) observe(this.#latencyCell(status), latencyMs);
    if (error !== undefined || status <= 0) this.#errorCell(error ?? 'unclassified', status).value++;
    else {
      const code = !grpc ? -1 : headerGrpcStatus >= 0 ? headerGrpcStatus : trailerGrpcStatus >= 0 ? trailerGrpcStatus : GRPC_UNKNOWN;
      this.#responseCell(status, code).value++;
    }
    this.release();
  }

  /** `grpc`: the gRPC status of a gRPC request, -1 for any other request. */
  #responseCell(status: number, grpc: number): ValueCell {
    let byGrpc = this.#responses.get(status);
    if (byGrpc === undefined) {
      byGrpc = new Map();
      this.#responses.set(status, byGrpc);
    }
    let cell = byGrpc.get(grpc);
    if (cell === undefined) {
      const failure = grpc >= 0 ? GRPC_FAILURES.has(grpc) : status >= 500;
      const extra = { status_code: String(status), classification: failure ? 'failure' : 'success', grpc_status: grpc >= 0 ? String(grpc) : '', error: '' };
      cell = this.#families.responses.cell(labelsOf(this.labels, extra), this);
      byGrpc.set(grpc, cell);
    }
    return cell;
  }

  #errorCell(error: string, status: number): ValueCell {
    let byStatus = this.#errors.get(error);
    if (byStatus === undefined) {
      byStatus = new Map();
      this.#errors.set(error, byStatus);
    }
    let cell = byStatus.get(status);
    if (cell === undefined) {
      const extra: Record<string, string> = status > 0 ? { status_code: String(status) } : {};
      cell = this.#families.responses.cell(labelsOf(this.labels, extra, { classification: 'failure', grpc_status: '', error }), this);
      byStatus.set(status, cell);
    }
    return cell;
  }

  #latencyCell(status: number): HistogramCell {
    let cell = this.#latency.get(status);
    if (cell === undefined) {
      cell = this.#families.latency.cell(labelsOf(this.labels, { status_code: String(status) }), this);
      this.#latency.set(status, cell);
    }
    return cell;
  }
}

/** HTTP/2 error code names by value (RFC 9113 §7), for `h2(<REASON>)` error labels. */
const H2_REASONS: readonly string[] = [
  'NO_ERROR',
  'PROTOCOL_ERROR',
  'INTERNAL_ERROR',
  'FLOW_CONTROL_ERROR',
  'SETTINGS_TIMEOUT',
  'STREAM_CLOSED',
  'FRAME_SIZE_ERROR',
  'REFUSED_STREAM',
  'CANCEL',
  'COMPRESSION_ERROR',
  'CONNECT_ERROR',
  'ENHANCE_YOUR_CALM',
  'INADEQUATE_SECURITY',
  'HTTP_1_1_REQUIRED',
];

/** The error label of an HTTP/2 reset, spelled as upstream's (`h2(CANCEL)`). */
export function h2Error(code: number | undefined): string {
  return code === undefined ? 'unclassified' : `h2(${H2_REASONS[code] ?? `UNKNOWN_${code}`})`;
}

/** Whether a `content-type` value is gRPC's (upstream's test: it starts with `application/grpc`). */
export function isGrpcContentType(v: string | readonly string[] | undefined): boolean {
  const s = Array.isArray(v) ? v[0] : v;
  return s?.startsWith('application/grpc') === true;
}

/** A `grpc-status` header or trailer as a number; -1 when absent or not a number. */
export function grpcStatusValue(v: string | string[] | number | undefined): number {
  const s = Array.isArray(v) ? v[0] : v;
  if (s === undefined) return -1;
  const n = typeof s === 'number' ? s : Number(s);
  return Number.isInteger(n) && n >= 0 ? n : -1;
}

/**
 * How one request's exchange went, reported once to its recorder when it is over. The recorder
 * may be set late (the outbound proxy knows it once the request is sent to an endpoint); an
 * exchange that ends without one asks {@link lateRecorder}.
 */
export class HttpExchange {
  readonly #startMs = performance.now();
  #recorder: HttpRecorder | undefined;
  #status = 0;
  #headerGrpc = -1;
  #trailerGrpc = -1;
  #latencyMs = Number.NaN;
  #error: string | undefined;
  #ended = false;
  /** The request is gRPC (its `content-type`): set by the proxy before the exchange ends. */
  isGrpc = false;

  constructor(recorder?: HttpRecorder) {
    this.#recorder = recorder;
  }

  /** Whether the exchange was reported. */
  get ended(): boolean {
    return this.#ended;
  }

  /** The response headers went to the client (`grpcStatus`: a trailers-only `grpc-status`, -1 without). */
  head(status: number, grpcStatus: number): void {
    if (this.#status !== 0) return;
    this.#status = status;
    this.#headerGrpc = grpcStatus;
    this.#latencyMs = performance.now() - this.#startMs;
  }

  trailers(grpcStatus: number): void {
    this.#trailerGrpc = grpcStatus;
  }

  /** The exchange failed; the first reason counts. */
  fail(error: string): void {
    this.#error ??= error;
  }

  /** Reports the exchange (once). */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    const r = this.#recorder ?? this.lateRecorder();
    r?.end(this.#status, this.#headerGrpc, this.#trailerGrpc, this.#error, this.#latencyMs, this.isGrpc);
  }

  /** Sets the recorder, unless one is set already. */
  protected setRecorder(recorder: HttpRecorder): void {
    this.#recorder ??= recorder;
  }

  /** Whether a recorder is set. */
  protected get hasRecorder(): boolean {
    return this.#recorder !== undefined;
  }

  /** The recorder of an exchange that ends without one (none by default). */
  protected lateRecorder(): HttpRecorder | undefined {
    return undefined;
  }
}
