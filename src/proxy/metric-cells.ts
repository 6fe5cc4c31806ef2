/**
 * The proxy's Prometheus metrics: families whose series are plain mutable cells, rendered in the
 * text exposition format by a registry of our own.
 *
 * A cell is created (and its label values built) once per label set, when a series is first
 * resolved; after that a request or a connection only does `cell.value++` or {@link observe} on a
 * cell it already holds — no label hashing, no map lookup. {@link MetricsRegistry} renders the
 * cells at scrape time. Label sets are free-form, so a family can carry labels that are only
 * known at run time (an endpoint's `dst_*` labels). Series are never removed.
 *
 * The proxy does not use prom-client (the controller does): a sidecar runs in every pod, and
 * prom-client with its dependencies costs about 8 MB of resident memory per process.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { MeshError } from '../shared/index.js';

/** Label values by name, in exposition order. */
export type Labels = Readonly<Record<string, string>>;

/** One series of a counter or a gauge. */
export interface ValueCell {
  readonly labels: Labels;
  value: number;
}

/** One series of a histogram: per-bucket (not cumulative) counts, sum and count. */
export interface HistogramCell {
  readonly labels: Labels;
  /** The family's bucket bounds (shared). */
  readonly bounds: readonly number[];
  /** Observations per bucket of `bounds`, the last entry being `+Inf`. */
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

/**
 * The upstream proxy's latency buckets in milliseconds (`response_latency_ms`,
 * `tcp_connection_duration_ms`).
 */
export const LATENCY_BUCKETS_MS: readonly number[] = Object.freeze([
  1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 100, 200, 300, 400, 500, 1000, 2000, 3000, 4000, 5000, 10_000, 20_000, 30_000, 40_000, 50_000,
]);

type MetricType = 'counter' | 'gauge' | 'histogram';

/** A family as the registry sees it: its header, and its sample lines rendered at scrape time. */
interface Family {
  readonly name: string;
  readonly help: string;
  readonly type: MetricType;
  /** Appends the family's sample lines (each ending in a newline) to `out`. */
  samples(out: string[]): void;
}

/** The Prometheus text exposition content type (version 0.0.4), as prom-client serves it. */
export const EXPOSITION_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/**
 * One process's metric families, rendered in registration order. Names are unique: registering
 * a second family of the same name throws `ERR_METRIC_DUPLICATE` (a programming error).
 */
export class MetricsRegistry {
  readonly contentType = EXPOSITION_CONTENT_TYPE;
  readonly #families = new Map<string, Family>();

  /** With `processMetrics`, also the upstream proxy's `process_*` families. */
  constructor(opts: { readonly processMetrics?: boolean } = {}) {
    if (opts.processMetrics === true) registerProcessMetrics(this);
  }

  /** Adds a family (used by the cell families' constructors). */
  register(family: Family): void {
    if (this.#families.has(family.name)) throw new MeshError('ERR_METRIC_DUPLICATE', `metric ${family.name} is already registered`);
    this.#families.set(family.name, family);
  }

  /** The exposition text of every family (a promise, as prom-client's registry answers). */
  metrics(): Promise<string> {
    return Promise.resolve(this.render());
  }

  /** {@link metrics}, synchronously. */
  render(): string {
    const out: string[] = [];
    for (const f of this.#families.values()) {
      out.push(`# HELP ${f.name} ${escapeHelp(f.help)}\n# TYPE ${f.name} ${f.type}\n`);
      f.samples(out);
    }
    return out.join('');
  }
}

function escapeHelp(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function escapeLabelValue(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/** `{a="x",b="y"}`, or the empty string without labels; `extra` is appended last (a bucket's `le`). */
function renderLabels(labels: Labels, extra?: string): string {
  const parts: string[] = [];
  for (const [name, value] of Object.entries(labels)) parts.push(`${name}="${escapeLabelValue(value)}"`);
  if (extra !== undefined) parts.push(extra);
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}

function renderValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Number.POSITIVE_INFINITY) return '+Inf';
  if (v === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(v);
}

function keyOf(labels: Labels): string {
  return JSON.stringify(labels);
}

/** A counter or gauge family over a map of cells; `refresh` runs before each scrape. */
function valueFamily(name: string, help: string, type: MetricType, cells: Map<string, ValueCell>, refresh: (() => void) | undefined): Family {
  return {
    name,
    help,
    type,
    samples(out) {
      refresh?.();
      for (const c of cells.values()) out.push(`${name}${renderLabels(c.labels)} ${renderValue(c.value)}\n`);
    },
  };
}

/** The cell of `labels` in `cells`, created at 0 on first use. */
function valueCell(cells: Map<string, ValueCell>, labels: Labels): ValueCell {
  const key = keyOf(labels);
  let c = cells.get(key);
  if (c === undefined) {
    c = { labels, value: 0 };
    cells.set(key, c);
  }
  return c;
}

/** A counter of cells; {@link cell} is for series resolution, not for every event. */
export class CellCounter {
  readonly #cells = new Map<string, ValueCell>();

  /** Registers the counter; `refresh` runs before every scrape (to fold live values into cells). */
  constructor(registry: MetricsRegistry, name: string, help: string, refresh?: () => void) {
    registry.register(valueFamily(name, help, 'counter', this.#cells, refresh));
  }

  /** The cell of these label values, created at 0 on first use. */
  cell(labels: Labels): ValueCell {
    return valueCell(this.#cells, labels);
  }
}

/** A gauge of cells. */
export class CellGauge {
  readonly #cells = new Map<string, ValueCell>();

  /** Registers the gauge; `refresh` runs before every scrape. */
  constructor(registry: MetricsRegistry, name: string, help: string, refresh?: () => void) {
    registry.register(valueFamily(name, help, 'gauge', this.#cells, refresh));
  }

  /** Removes every series (a gauge whose value is absent, e.g. no certificate yet). */
  clear(): void {
    this.#cells.clear();
  }

  /** The cell of these label values, created at 0 on first use. */
  cell(labels: Labels): ValueCell {
    return valueCell(this.#cells, labels);
  }
}

/** A histogram of cells with fixed bucket bounds (ascending). */
export class CellHistogram {
  readonly #cells = new Map<string, HistogramCell>();
  readonly #bounds: readonly number[];

  /** Registers the histogram. */
  constructor(registry: MetricsRegistry, name: string, help: string, bounds: readonly number[]) {
    const frozen = Object.freeze([...bounds]);
    this.#bounds = frozen;
    const cells = this.#cells;
    const les = frozen.map((b) => `le="${renderValue(b)}"`);
    registry.register({
      name,
      help,
      type: 'histogram',
      samples(out) {
        for (const c of cells.values()) {
          let acc = 0;
          for (let i = 0; i < frozen.length; i++) {
            acc += c.counts[i] as number;
            out.push(`${name}_bucket${renderLabels(c.labels, les[i])} ${acc}\n`);
          }
          out.push(`${name}_bucket${renderLabels(c.labels, 'le="+Inf"')} ${c.count}\n`);
          out.push(`${name}_sum${renderLabels(c.labels)} ${renderValue(c.sum)}\n`);
          out.push(`${name}_count${renderLabels(c.labels)} ${c.count}\n`);
        }
      },
    });
  }

  /** The cell of these label values, created empty on first use. */
  cell(labels: Labels): HistogramCell {
    const key = keyOf(labels);
    let c = this.#cells.get(key);
    if (c === undefined) {
      c = { labels, bounds: this.#bounds, counts: new Float64Array(this.#bounds.length + 1), sum: 0, count: 0 };
      this.#cells.set(key, c);
    }
    return c;
  }
}

/** Records one observation in a histogram cell. */
export function observe(cell: HistogramCell, value: number): void {
  const bounds = cell.bounds;
  let i = 0;
  // Few buckets and most observations small: a linear scan from the bottom is the fastest.
  while (i < bounds.length && value > (bounds[i] as number)) i++;
  cell.counts[i] = (cell.counts[i] as number) + 1;
  cell.sum += value;
  cell.count++;
}

/** The upstream proxy's `process_*` families (Linux reads /proc; elsewhere CPU, memory and start time only). */
function registerProcessMetrics(registry: MetricsRegistry): void {
  const startSeconds = Math.round((Date.now() - process.uptime() * 1000) / 1000);
  const gauge = (name: string, help: string, read: () => number | undefined, type: MetricType = 'gauge') =>
    registry.register({
      name,
      help,
      type,
      samples(out) {
        const v = read();
        if (v !== undefined) out.push(`${name} ${renderValue(v)}\n`);
      },
    });
  gauge(
    'process_cpu_seconds_total',
    'Total user and system CPU time spent in seconds.',
    () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1e6;
    },
    'counter',
  );
  gauge('process_start_time_seconds', 'Start time of the process since unix epoch in seconds.', () => startSeconds);
  gauge('process_resident_memory_bytes', 'Resident memory size in bytes.', () => process.memoryUsage.rss());
  if (process.platform !== 'linux') return;
  gauge('process_virtual_memory_bytes', 'Virtual memory size in bytes.', () => procStatusKb('VmSize'));
  gauge('process_threads', 'Number of OS threads in the process.', () => procStatusKb('Threads', 1));
  gauge('process_open_fds', 'Number of open file descriptors.', () => tryRead(() => readdirSync('/proc/self/fd').length));
  gauge('process_max_fds', 'Maximum number of open file descriptors.', () =>
    tryRead(() => {
      const m = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
      return m === null ? undefined : Number(m[1]);
    }),
  );
}

/** A `/proc/self/status` field, in bytes for `kB` fields (`unit` 1024) or as is. */
function procStatusKb(field: string, unit = 1024): number | undefined {
  return tryRead(() => {
    const m = new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
    return m === null ? undefined : Number(m[1]) * unit;
  });
}

function tryRead(read: () => number | undefined): number | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}
