/**
 * A parser of the Prometheus text exposition format 0.0.4, as prom-client and linkerd2-proxy write
 * it: `# HELP` / `# TYPE` lines, other comments, blank lines, and samples
 * `name{label="value",…} value [timestamp]` with the escapes `\\`, `\"` and `\n` in label values,
 * `NaN`, `+Inf`, `-Inf` as values and integer millisecond timestamps.
 *
 * The input is a pod's answer, so it is untrusted: every limit is checked before the work it
 * bounds (body length, line length, series count, labels per series, name and value lengths), no
 * regular expression runs on a whole line, and the first limit exceeded stops the parse. Problems
 * are data (`{ ok: false, problems }`, at most {@link MAX_PROBLEMS} of them, each with its line),
 * never exceptions. As Prometheus does, one bad line fails the whole body: a partial scrape would
 * read as counters going to zero.
 */

/** Metric types of `# TYPE`. */
export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

/** One sample. `labels` has no prototype (a label named `__proto__` is just a label). */
export interface ParsedSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  /** The name and label text as written: the same series gives the same key in every scrape of a pod. */
  readonly key: string;
  readonly value: number;
  /** Milliseconds since the epoch, when the line has one. */
  readonly timestampMs?: number;
}

/** Bounds of one parse. */
export interface PrometheusTextLimits {
  /** Largest body, in UTF-16 code units (default 8 MiB). */
  readonly maxBodyLength: number;
  /** Longest line (default 16 KiB). */
  readonly maxLineLength: number;
  /** Most samples (default 20 000). */
  readonly maxSeries: number;
  /** Most labels on one sample (default 40). */
  readonly maxLabels: number;
  /** Longest metric or label name (default 200). */
  readonly maxNameLength: number;
  /** Longest label value (default 2048). */
  readonly maxLabelValueLength: number;
}

/** The defaults: a proxy serving hundreds of ports and clients stays well below them. */
export const DEFAULT_PROMETHEUS_TEXT_LIMITS: PrometheusTextLimits = {
  maxBodyLength: 8 * 1024 * 1024,
  maxLineLength: 16 * 1024,
  maxSeries: 20_000,
  maxLabels: 40,
  maxNameLength: 200,
  maxLabelValueLength: 2048,
};

/** Stable codes of parse problems. */
export type PrometheusTextProblemCode =
  | 'PROM_BODY_TOO_LARGE'
  | 'PROM_LINE_TOO_LONG'
  | 'PROM_TOO_MANY_SERIES'
  | 'PROM_TOO_MANY_LABELS'
  | 'PROM_NAME_TOO_LONG'
  | 'PROM_LABEL_VALUE_TOO_LONG'
  | 'PROM_BAD_NAME'
  | 'PROM_BAD_LABELS'
  | 'PROM_DUPLICATE_LABEL'
  | 'PROM_BAD_VALUE'
  | 'PROM_BAD_TIMESTAMP'
  | 'PROM_BAD_TYPE'
  | 'PROM_DUPLICATE_TYPE';

/** One problem, on a 1-based line. */
export interface PrometheusTextProblem {
  readonly code: PrometheusTextProblemCode;
  readonly line: number;
  readonly message: string;
}

/** What a parse gives. */
export type PrometheusTextResult =
  | { readonly ok: true; readonly samples: readonly ParsedSample[]; readonly types: ReadonlyMap<string, MetricType> }
  | { readonly ok: false; readonly problems: readonly PrometheusTextProblem[] };

/** Problems collected before giving up on a body. */
export const MAX_PROBLEMS = 10;

const TYPES = new Set<string>(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

const isNameStart = (c: number): boolean => (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95;
const isDigit = (c: number): boolean => c >= 48 && c <= 57;
const isBlank = (c: number): boolean => c === 32 || c === 9;

/** A number as Go's ParseFloat takes it in the text format (decimal, exponent, NaN, ±Inf). */
const FLOAT = /^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|inf(?:inity)?|nan)$/i;
const INT = /^-?\d{1,19}$/;

function parseFloatToken(t: string): number | undefined {
  if (t.length > 64 || !FLOAT.test(t)) return undefined;
  // Go's ParseFloat, which Prometheus uses, takes NaN and Inf in any case (prom-client writes `Nan`).
  const body = t.replace(/^[+-]/, '').toLowerCase();
  if (body === 'inf' || body === 'infinity') return t.startsWith('-') ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  if (body === 'nan') return Number.NaN;
  return Number(t);
}

/** Why a line is refused, with its code (caught per line, never escapes the parser). */
class LineError extends Error {
  constructor(
    readonly code: PrometheusTextProblemCode,
    message: string,
  ) {
    super(message);
  }
}

/** A scanner over one line. */
class Line {
  pos = 0;
  constructor(
    readonly text: string,
    readonly limits: PrometheusTextLimits,
  ) {}

  skipBlanks(): void {
    while (this.pos < this.text.length && isBlank(this.text.charCodeAt(this.pos))) this.pos++;
  }

  /** A metric name (colons allowed) or a label name. */
  name(metric: boolean, what: string): string {
    const start = this.pos;
    const t = this.text;
    if (this.pos >= t.length || !(isNameStart(t.charCodeAt(this.pos)) || (metric && t.charCodeAt(this.pos) === 58))) {
      throw new LineError('PROM_BAD_NAME', `expected a ${what} at column ${this.pos + 1}`);
    }
    this.pos++;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if (isNameStart(c) || isDigit(c) || (metric && c === 58)) this.pos++;
      else break;
      if (this.pos - start > this.limits.maxNameLength)
        throw new LineError('PROM_NAME_TOO_LONG', `${what} longer than ${this.limits.maxNameLength} characters`);
    }
    return t.slice(start, this.pos);
  }

  /** A quoted label value, unescaped. */
  labelValue(): string {
    const t = this.text;
    if (t.charCodeAt(this.pos) !== 34) throw new LineError('PROM_BAD_LABELS', `expected '"' at column ${this.pos + 1}`);
    this.pos++;
    let out = '';
    let runStart = this.pos;
    for (;;) {
      if (this.pos >= t.length) throw new LineError('PROM_BAD_LABELS', 'unterminated label value');
      const c = t.charCodeAt(this.pos);
      if (c === 34) {
        out += t.slice(runStart, this.pos);
        this.pos++;
        break;
      }
      if (c === 92) {
        out += t.slice(runStart, this.pos);
        const n = t.charCodeAt(this.pos + 1);
        if (n === 92) out += '\\';
        else if (n === 34) out += '"';
        else if (n === 110) out += '\n';
        else if (Number.isNaN(n)) throw new LineError('PROM_BAD_LABELS', 'unterminated label value');
        // Any other escape is kept as written, as Prometheus does.
        else out += `\\${t[this.pos + 1]}`;
        this.pos += 2;
        runStart = this.pos;
      } else this.pos++;
      if (out.length + (this.pos - runStart) > this.limits.maxLabelValueLength) {
        throw new LineError('PROM_LABEL_VALUE_TOO_LONG', `label value longer than ${this.limits.maxLabelValueLength} characters`);
      }
    }
    return out;
  }

  /** The next blank-separated token (possibly empty). */
  token(): string {
    const start = this.pos;
    while (this.pos < this.text.length && !isBlank(this.text.charCodeAt(this.pos))) this.pos++;
    return this.text.slice(start, this.pos);
  }
}

function parseLabels(l: Line): Record<string, string> {
  const labels = Object.create(null) as Record<string, string>;
  let count = 0;
  l.pos++; // '{'
  for (;;) {
    l.skipBlanks();
    if (l.text.charCodeAt(l.pos) === 125) {
      l.pos++;
      return labels;
    }
    const name = l.name(false, 'label name');
    l.skipBlanks();
    if (l.text.charCodeAt(l.pos) !== 61) throw new LineError('PROM_BAD_LABELS', `expected '=' after label ${name}`);
    l.pos++;
    l.skipBlanks();
    const value = l.labelValue();
    if (Object.hasOwn(labels, name)) throw new LineError('PROM_DUPLICATE_LABEL', `label ${name} given twice`);
    if (++count > l.limits.maxLabels) throw new LineError('PROM_TOO_MANY_LABELS', `more than ${l.limits.maxLabels} labels`);
    labels[name] = value;
    l.skipBlanks();
    const c = l.text.charCodeAt(l.pos);
    if (c === 44) l.pos++;
    else if (c !== 125) throw new LineError('PROM_BAD_LABELS', `expected ',' or '}' at column ${l.pos + 1}`);
  }
}

function parseSample(l: Line): ParsedSample {
  const start = l.pos;
  const name = l.name(true, 'metric name');
  const labels = l.text.charCodeAt(l.pos) === 123 ? parseLabels(l) : (Object.create(null) as Record<string, string>);
  const before = l.pos;
  const key = l.text.slice(start, before);
  l.skipBlanks();
  if (l.pos === before && l.pos < l.text.length) throw new LineError('PROM_BAD_VALUE', `expected a blank before the value at column ${l.pos + 1}`);
  const valueText = l.token();
  const value = parseFloatToken(valueText);
  if (value === undefined) throw new LineError('PROM_BAD_VALUE', `bad value ${JSON.stringify(valueText.slice(0, 40))}`);
  l.skipBlanks();
  if (l.pos >= l.text.length) return { name, labels, key, value };
  const tsText = l.token();
  l.skipBlanks();
  if (!INT.test(tsText) || l.pos < l.text.length) throw new LineError('PROM_BAD_TIMESTAMP', `bad timestamp ${JSON.stringify(tsText.slice(0, 40))}`);
  const timestampMs = Number(tsText);
  if (!Number.isSafeInteger(timestampMs)) throw new LineError('PROM_BAD_TIMESTAMP', `timestamp ${tsText.slice(0, 40)} out of range`);
  return { name, labels, key, value, timestampMs };
}

/** Parses a whole body. */
export function parsePrometheusText(body: string, limits: PrometheusTextLimits = DEFAULT_PROMETHEUS_TEXT_LIMITS): PrometheusTextResult {
  if (body.length > limits.maxBodyLength) {
    return {
      ok: false,
      problems: [{ code: 'PROM_BODY_TOO_LARGE', line: 0, message: `body of ${body.length} characters is larger than ${limits.maxBodyLength}` }],
    };
  }
  const samples: ParsedSample[] = [];
  const types = new Map<string, MetricType>();
  const problems: PrometheusTextProblem[] = [];
  let start = 0;
  let lineNo = 0;
  while (start < body.length && problems.length < MAX_PROBLEMS) {
    let end = body.indexOf('\n', start);
    if (end === -1) end = body.length;
    lineNo++;
    const length = end - start;
    if (length > limits.maxLineLength) {
      // A limit ends the parse: the rest of a hostile body is not worth reading.
      problems.push({ code: 'PROM_LINE_TOO_LONG', line: lineNo, message: `line of ${length} characters is longer than ${limits.maxLineLength}` });
      break;
    }
    const text = body.slice(start, end);
    start = end + 1;
    const l = new Line(text, limits);
    l.skipBlanks();
    if (l.pos >= text.length) continue;
    try {
      if (text.charCodeAt(l.pos) === 35) {
        parseComment(l, types);
        continue;
      }
      if (samples.length >= limits.maxSeries) {
        problems.push({ code: 'PROM_TOO_MANY_SERIES', line: lineNo, message: `more than ${limits.maxSeries} series` });
        break;
      }
      samples.push(parseSample(l));
    } catch (e) {
      if (!(e instanceof LineError)) throw e;
      problems.push({ code: e.code, line: lineNo, message: e.message });
      if (e.code === 'PROM_NAME_TOO_LONG' || e.code === 'PROM_LABEL_VALUE_TOO_LONG' || e.code === 'PROM_TOO_MANY_LABELS') break;
    }
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, samples, types };
}

/** `# HELP` is skipped, `# TYPE` recorded, any other comment ignored. */
function parseComment(l: Line, types: Map<string, MetricType>): void {
  l.pos++;
  l.skipBlanks();
  const keyword = l.token();
  if (keyword !== 'TYPE') return;
  l.skipBlanks();
  const name = l.name(true, 'metric name');
  l.skipBlanks();
  const type = l.token();
  l.skipBlanks();
  if (!TYPES.has(type) || l.pos < l.text.length) throw new LineError('PROM_BAD_TYPE', `bad type ${JSON.stringify(type.slice(0, 40))} for ${name}`);
  if (types.has(name)) throw new LineError('PROM_DUPLICATE_TYPE', `second TYPE line for ${name}`);
  types.set(name, type as MetricType);
}

/** The family a sample belongs to, by its name and the TYPE lines (`x_bucket` of histogram `x` → `x`). */
export function familyOf(name: string, types: ReadonlyMap<string, MetricType>): { readonly family: string; readonly type: MetricType } {
  const direct = types.get(name);
  if (direct !== undefined) return { family: name, type: direct };
  for (const suffix of ['_bucket', '_count', '_sum', '_total']) {
    if (!name.endsWith(suffix)) continue;
    const base = name.slice(0, -suffix.length);
    const t = types.get(base);
    // linkerd2-proxy's OpenMetrics-style families name a counter without its `_total`.
    if (t !== undefined && (suffix === '_total' ? t === 'counter' : t === 'histogram' || (t === 'summary' && suffix !== '_bucket')))
      return { family: base, type: t };
  }
  return { family: name, type: 'untyped' };
}

/** Whether a sample only grows (counters, histogram buckets, counts and sums): rates apply and a drop is a reset. */
export function isCumulative(name: string, types: ReadonlyMap<string, MetricType>): boolean {
  const { type } = familyOf(name, types);
  if (type === 'counter' || type === 'histogram' || type === 'summary') return type !== 'summary' || name.endsWith('_count') || name.endsWith('_sum');
  return type === 'untyped' && name.endsWith('_total');
}
