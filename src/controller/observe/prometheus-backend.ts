/**
 * The Prometheus metrics backend: the {@link MetricsBackend} queries as PromQL instant queries
 * over Prometheus's HTTP API (`POST /api/v1/query`), scrape health from `/api/v1/targets`. The
 * series must carry the labels the embedded collector adds (`namespace`, `pod`, `workload_kind`,
 * `workload_name`): `ward prometheus-config` writes the scrape job that adds them, named
 * `linkerd-proxy` as linkerd-viz names its own, and every query is restricted to that job.
 *
 * Label values in matchers come from API callers (namespaces, resource names): they are written
 * as PromQL string literals with every quote, backslash and control character escaped, so no
 * value can end its literal early; label and metric names are checked against Prometheus's
 * grammar. A Prometheus that cannot be reached, answers slowly, answers an error, or answers
 * too much or garbage becomes a {@link PrometheusError} naming the server and what went wrong,
 * with the HTTP status (502/503) and code the admin API answers with.
 */
import { MeshError } from '../../shared/index.js';
import type { MetricsBackend, Sample, SeriesQuery, TargetHealth } from './metrics-backend.js';

/** The scrape job `ward prometheus-config` writes (linkerd-viz's name for the proxies' job). */
export const PROMETHEUS_JOB = 'linkerd-proxy';

/** Settings of {@link PrometheusBackend}. */
export interface PrometheusBackendOptions {
  /** Prometheus's base URL (`http://prometheus.linkerd-viz.svc:9090`, or with a path prefix); `user:password@` becomes basic auth. */
  readonly url: string;
  /** Per request, connecting included (default 10 s). */
  readonly timeoutMs?: number;
  /** Largest answer read; a larger one is an error (default 16 MiB). */
  readonly maxResponseBytes?: number;
  /** The scrape job the proxies' series come from (default {@link PROMETHEUS_JOB}); empty: any job. */
  readonly job?: string;
}

/** The stable codes of {@link PrometheusError}. */
export type PrometheusErrorCode =
  | 'ERR_PROMETHEUS_UNREACHABLE'
  | 'ERR_PROMETHEUS_TIMEOUT'
  | 'ERR_PROMETHEUS_STATUS'
  | 'ERR_PROMETHEUS_QUERY'
  | 'ERR_PROMETHEUS_RESPONSE';

/**
 * Prometheus did not answer a query usefully. `httpStatus` and `apiCode` are what the admin API
 * answers with: 503 `METRICS_UNAVAILABLE` when Prometheus cannot be reached, times out or says
 * it is unavailable (try again later), 502 `METRICS_BACKEND_ERROR` for any other bad answer.
 */
export class PrometheusError extends MeshError {
  readonly httpStatus: 502 | 503;
  readonly apiCode: 'METRICS_UNAVAILABLE' | 'METRICS_BACKEND_ERROR';

  constructor(code: PrometheusErrorCode, message: string, unavailable: boolean, options?: { cause?: unknown }) {
    super(code, message, options);
    this.name = 'PrometheusError';
    this.httpStatus = unavailable ? 503 : 502;
    this.apiCode = unavailable ? 'METRICS_UNAVAILABLE' : 'METRICS_BACKEND_ERROR';
  }
}

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024;
/** What of an error answer's body an error message quotes. */
const QUOTED_BODY_CHARS = 300;

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** In Unicode mode a surrogate pair reads as one code point: what matches stands alone (not UTF-8-encodable). */
const LONE_SURROGATE = /\p{Cs}/u;

// === PromQL text ===

/**
 * `value` as a PromQL double-quoted string literal. Backslash, double quote and every control
 * character are escaped, so the literal ends only at its closing quote whatever the value holds.
 * A value that is not well-formed UTF-16 (a lone surrogate) cannot be sent as UTF-8: rejected.
 */
export function promqlString(value: string): string {
  if (LONE_SURROGATE.test(value)) throw new MeshError('ERR_METRICS_QUERY', `label value ${JSON.stringify(value)} is not valid Unicode`);
  let out = '"';
  for (const ch of value) {
    const c = ch.codePointAt(0) as number;
    if (ch === '\\') out += '\\\\';
    else if (ch === '"') out += '\\"';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (c < 0x20 || (c >= 0x7f && c <= 0x9f) || c === 0x2028 || c === 0x2029) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}

function checkMetric(name: string): void {
  if (!METRIC_NAME.test(name)) throw new MeshError('ERR_METRICS_QUERY', `${JSON.stringify(name)} is not a Prometheus metric name`);
}

function checkLabel(name: string): void {
  if (!LABEL_NAME.test(name) || name.startsWith('__')) throw new MeshError('ERR_METRICS_QUERY', `${JSON.stringify(name)} is not a label name a query may use`);
}

/** The range of a window in seconds, in milliseconds so that fractions survive (`[60000ms]`). */
function range(windowSeconds: number): string {
  if (!Number.isFinite(windowSeconds) || windowSeconds <= 0 || windowSeconds > 366 * 86_400)
    throw new MeshError('ERR_METRICS_QUERY', `window ${windowSeconds} s is not between 0 and a year`);
  return `[${Math.max(1, Math.round(windowSeconds * 1000))}ms]`;
}

/** `metric{job="…",k="v",…}` with every value escaped. */
function selector(metric: string, match: Readonly<Record<string, string>> | undefined, job: string): string {
  checkMetric(metric);
  const parts: string[] = job === '' ? [] : [`job=${promqlString(job)}`];
  for (const [k, v] of Object.entries(match ?? {})) {
    checkLabel(k);
    parts.push(`${k}=${promqlString(v)}`);
  }
  return `${metric}{${parts.join(',')}}`;
}

function grouping(by: readonly string[]): string {
  for (const l of by) checkLabel(l);
  return `by (${by.join(', ')})`;
}

/** The PromQL of {@link MetricsBackend.rate}. */
export function rateQuery(q: SeriesQuery, windowSeconds: number, job = PROMETHEUS_JOB): string {
  return `sum ${grouping(q.by)} (rate(${selector(q.metric, q.match, job)}${range(windowSeconds)}))`;
}

/** The PromQL of {@link MetricsBackend.latest}. */
export function latestQuery(q: SeriesQuery, job = PROMETHEUS_JOB): string {
  return `sum ${grouping(q.by)} (${selector(q.metric, q.match, job)})`;
}

/** The PromQL of {@link MetricsBackend.quantile}. */
export function quantileQuery(quantile: number, q: SeriesQuery, windowSeconds: number, job = PROMETHEUS_JOB): string {
  if (!Number.isFinite(quantile) || quantile < 0 || quantile > 1) throw new MeshError('ERR_METRICS_QUERY', `quantile ${quantile} is not between 0 and 1`);
  if (q.by.includes('le')) throw new MeshError('ERR_METRICS_QUERY', 'a quantile cannot be grouped by "le"');
  return `histogram_quantile(${quantile}, sum ${grouping(['le', ...q.by])} (rate(${selector(`${q.metric}_bucket`, q.match, job)}${range(windowSeconds)})))`;
}

// === answers ===

/** A sample value as Prometheus writes it (`"1.5"`, `"NaN"`, `"+Inf"`, `"-Inf"`); undefined when it is none. */
export function parseSampleValue(text: unknown): number | undefined {
  if (typeof text !== 'string') return undefined;
  if (text === '+Inf' || text === 'Inf') return Number.POSITIVE_INFINITY;
  if (text === '-Inf') return Number.NEGATIVE_INFINITY;
  if (text === 'NaN') return Number.NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) return undefined;
  return Number(text);
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The samples of an instant query's answer (a `vector`), each with exactly the `by` labels (a
 * label the series lacks is ""). NaN samples (a quantile of no requests, 0/0) are left out: they
 * mean "no data", as a series the embedded collector does not have; ±Inf stay. Returns a message
 * for an answer that is not a vector of well-formed samples.
 */
export function parseVectorAnswer(body: unknown, by: readonly string[]): Sample[] | string {
  if (!isRecord(body)) return 'the answer is not a JSON object';
  if (body.status !== 'success') return `the answer's status is ${JSON.stringify(body.status)}`;
  const data = body.data;
  if (!isRecord(data)) return 'the answer has no data';
  if (data.resultType !== 'vector') return `the answer is a ${JSON.stringify(data.resultType)}, not a vector`;
  if (!Array.isArray(data.result)) return 'the answer has no result list';
  const out: Sample[] = [];
  for (const r of data.result as unknown[]) {
    if (!isRecord(r) || !isRecord(r.metric) || !Array.isArray(r.value) || r.value.length !== 2) return 'a result is not a sample';
    const value = parseSampleValue(r.value[1]);
    if (value === undefined) return `a sample value ${JSON.stringify(r.value[1])} is not a number`;
    if (Number.isNaN(value)) continue;
    const metric = r.metric;
    const labels: Record<string, string> = {};
    for (const l of by) {
      const v = metric[l];
      if (v !== undefined && typeof v !== 'string') return `label ${l} of a sample is not a string`;
      labels[l] = v ?? '';
    }
    out.push({ labels, value });
  }
  return out;
}

/** Prometheus writes the zero time for a target it has not scraped yet. */
const NEVER = /^0001-01-01T/;

/** The active targets of `job` in a `/api/v1/targets` answer ("" for any job); a message for a malformed answer. */
export function parseTargetsAnswer(body: unknown, job: string): TargetHealth[] | string {
  if (!isRecord(body)) return 'the answer is not a JSON object';
  if (body.status !== 'success') return `the answer's status is ${JSON.stringify(body.status)}`;
  if (!isRecord(body.data) || !Array.isArray(body.data.activeTargets)) return 'the answer has no active targets list';
  const out: TargetHealth[] = [];
  for (const t of body.data.activeTargets as unknown[]) {
    if (!isRecord(t) || !isRecord(t.labels)) return 'a target has no labels';
    const labels = t.labels;
    const str = (v: unknown) => (typeof v === 'string' ? v : '');
    if (job !== '' && labels.job !== job) continue;
    let address = str(labels.instance);
    try {
      if (typeof t.scrapeUrl === 'string') address = new URL(t.scrapeUrl).host;
    } catch {
      // keep the instance label
    }
    const lastScrape = typeof t.lastScrape === 'string' && t.lastScrape !== '' && !NEVER.test(t.lastScrape) ? t.lastScrape : null;
    const error = str(t.lastError);
    out.push({
      namespace: str(labels.namespace),
      pod: str(labels.pod),
      address,
      up: t.health === 'up',
      lastScrape,
      ...(error !== '' ? { error } : {}),
    });
  }
  out.sort((a, b) => a.namespace.localeCompare(b.namespace) || a.pod.localeCompare(b.pod) || a.address.localeCompare(b.address));
  return out;
}

// === the backend ===

/** The base URL without credentials, the basic-auth header its credentials make, and the URL as shown in messages. */
function parseBaseUrl(text: string): { base: URL; authorization: string | undefined; shown: string } {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new MeshError('ERR_PROMETHEUS_URL', `--prometheus-url ${JSON.stringify(text)} is not a URL (hint: http://prometheus.linkerd-viz.svc:9090)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new MeshError('ERR_PROMETHEUS_URL', `--prometheus-url ${JSON.stringify(text)} is not http(s) (hint: http://prometheus.linkerd-viz.svc:9090)`);
  if (url.search !== '' || url.hash !== '')
    throw new MeshError('ERR_PROMETHEUS_URL', `--prometheus-url ${JSON.stringify(text)} has a query or fragment: give the base URL only`);
  const authorization =
    url.username !== '' || url.password !== ''
      ? `Basic ${Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString('base64')}`
      : undefined;
  url.username = '';
  url.password = '';
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return { base: url, authorization, shown: url.href.replace(/\/$/, '') };
}

/** The low-level reason of a failed fetch (`ECONNREFUSED`, `ENOTFOUND`, a TLS error…). */
function causeOf(e: unknown): string {
  let c: unknown = e;
  for (let i = 0; i < 4 && isRecord(c) && c.cause !== undefined; i++) c = c.cause;
  if (isRecord(c) || c instanceof Error) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    const message = (c as { message?: unknown }).message;
    if (typeof message === 'string') return message;
  }
  return String(c);
}

/** {@link MetricsBackend} over a Prometheus server. Stateless: every call is one HTTP request. */
export class PrometheusBackend implements MetricsBackend {
  readonly kind = 'prometheus' as const;
  readonly #base: URL;
  readonly #authorization: string | undefined;
  /** The URL without credentials, as messages name it. */
  readonly url: string;
  readonly #timeoutMs: number;
  readonly #maxBytes: number;
  readonly #job: string;

  /** Checks the URL (a {@link MeshError} `ERR_PROMETHEUS_URL` when it is not one); connects on the first query. */
  constructor(opts: PrometheusBackendOptions) {
    const { base, authorization, shown } = parseBaseUrl(opts.url);
    this.#base = base;
    this.#authorization = authorization;
    this.url = shown;
    this.#timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#maxBytes = opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    this.#job = opts.job ?? PROMETHEUS_JOB;
    if (this.#job !== '') promqlString(this.#job);
  }

  async rate(q: SeriesQuery, windowSeconds: number): Promise<readonly Sample[]> {
    return await this.#vector(rateQuery(q, windowSeconds, this.#job), q.by);
  }

  async latest(q: SeriesQuery): Promise<readonly Sample[]> {
    return await this.#vector(latestQuery(q, this.#job), q.by);
  }

  async quantile(quantile: number, q: SeriesQuery, windowSeconds: number): Promise<readonly Sample[]> {
    return await this.#vector(quantileQuery(quantile, q, windowSeconds, this.#job), q.by);
  }

  async targets(): Promise<readonly TargetHealth[]> {
    const body = await this.#request('api/v1/targets?state=active', undefined);
    const parsed = parseTargetsAnswer(body, this.#job);
    if (typeof parsed === 'string') throw new PrometheusError('ERR_PROMETHEUS_RESPONSE', `Prometheus at ${this.url} answered targets oddly: ${parsed}`, false);
    return parsed;
  }

  /** Runs an instant query (its text is in the message of any error, for whoever debugs it). */
  async #vector(query: string, by: readonly string[]): Promise<readonly Sample[]> {
    const body = await this.#request('api/v1/query', new URLSearchParams({ query }));
    const parsed = parseVectorAnswer(body, by);
    if (typeof parsed === 'string') throw new PrometheusError('ERR_PROMETHEUS_RESPONSE', `Prometheus at ${this.url} answered ${query} oddly: ${parsed}`, false);
    return parsed;
  }

  /** GET `path` (or POST the form), bounded in time and size; the parsed JSON of a 2xx answer. */
  async #request(path: string, form: URLSearchParams | undefined): Promise<unknown> {
    const url = new URL(path, this.#base);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.#authorization !== undefined) headers.authorization = this.#authorization;
    if (form !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
    const signal = AbortSignal.timeout(this.#timeoutMs);
    let res: Response;
    let text: string;
    try {
      res = await fetch(url, {
        method: form === undefined ? 'GET' : 'POST',
        headers,
        redirect: 'manual',
        signal,
        ...(form !== undefined ? { body: form.toString() } : {}),
      });
      text = await this.#readBounded(res);
    } catch (e) {
      if (e instanceof PrometheusError) throw e;
      if (signal.aborted)
        throw new PrometheusError('ERR_PROMETHEUS_TIMEOUT', `Prometheus at ${this.url} did not answer within ${this.#timeoutMs} ms`, true, { cause: e });
      throw new PrometheusError('ERR_PROMETHEUS_UNREACHABLE', `cannot reach Prometheus at ${this.url}: ${causeOf(e)}`, true, { cause: e });
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    if (res.status < 200 || res.status > 299) {
      // Prometheus says why in {"status":"error","errorType","error"}; a proxy in front may not.
      const why = isRecord(body) && typeof body.error === 'string' ? body.error : text.slice(0, QUOTED_BODY_CHARS).trim() || res.statusText;
      const query = form?.get('query');
      const what = query !== undefined && query !== null ? ` to ${query}` : '';
      if (res.status === 400 || res.status === 422)
        throw new PrometheusError('ERR_PROMETHEUS_QUERY', `Prometheus at ${this.url} answered ${res.status}${what}: ${why}`, false);
      throw new PrometheusError('ERR_PROMETHEUS_STATUS', `Prometheus at ${this.url} answered ${res.status}: ${why}`, res.status === 503 || res.status === 429);
    }
    if (body === undefined)
      throw new PrometheusError(
        'ERR_PROMETHEUS_RESPONSE',
        `Prometheus at ${this.url} answered something that is not JSON: ${JSON.stringify(text.slice(0, 80))}`,
        false,
      );
    return body;
  }

  /** The answer's body as text, failing once it exceeds the bound (without reading the rest). */
  async #readBounded(res: Response): Promise<string> {
    const declared = Number(res.headers.get('content-length') ?? Number.NaN);
    if (declared > this.#maxBytes) {
      await res.body?.cancel();
      throw this.#tooLarge();
    }
    if (res.body === null) return '';
    const reader = res.body.getReader();
    const chunks: Uint8Array[] = [];
    let size = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > this.#maxBytes) {
        await reader.cancel();
        throw this.#tooLarge();
      }
      chunks.push(value);
    }
    return Buffer.concat(chunks, size).toString('utf8');
  }

  #tooLarge(): PrometheusError {
    return new PrometheusError('ERR_PROMETHEUS_RESPONSE', `Prometheus at ${this.url} answered more than ${this.#maxBytes} bytes`, false);
  }
}
