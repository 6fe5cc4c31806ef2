/**
 * Prometheus metric families whose series are plain mutable cells, for the proxy's hot paths.
 *
 * A cell is created (and its label values built) once per label set, when a series is first
 * resolved; after that a request or a connection only does `cell.value++` or {@link observe} on a
 * cell it already holds — no label hashing, no map lookup in prom-client. The families are
 * prom-client metrics registered in the proxy's `Registry` (so `/metrics` renders them with
 * everything else) whose `get()` reports the cells at scrape time. Label sets are free-form, so
 * a family can carry labels that are only known at run time (an endpoint's `dst_*` labels).
 * Series are never removed.
 */
import { Counter, Gauge, Histogram, type Registry } from '../shared/index.js';

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

function keyOf(labels: Labels): string {
  return JSON.stringify(labels);
}

// Label names are free-form here, so prom-client's own label validation is bypassed: each family
// is registered with one placeholder label name and reports its cells itself.
const PLACEHOLDER_LABELS = ['direction'];

class CellCounterMetric extends Counter<string> {
  readonly #cells: Map<string, ValueCell>;
  readonly #refresh: (() => void) | undefined;

  constructor(registry: Registry, name: string, help: string, cells: Map<string, ValueCell>, refresh: (() => void) | undefined) {
    super({ name, help, labelNames: PLACEHOLDER_LABELS, registers: [registry] });
    this.#cells = cells;
    this.#refresh = refresh;
  }

  override async get(): ReturnType<Counter<string>['get']> {
    this.#refresh?.();
    const base = await super.get();
    return { ...base, values: [...this.#cells.values()].map((c) => ({ labels: c.labels, value: c.value })) };
  }
}

class CellGaugeMetric extends Gauge<string> {
  readonly #cells: Map<string, ValueCell>;

  constructor(registry: Registry, name: string, help: string, cells: Map<string, ValueCell>) {
    super({ name, help, labelNames: PLACEHOLDER_LABELS, registers: [registry] });
    this.#cells = cells;
  }

  override async get(): ReturnType<Gauge<string>['get']> {
    const base = await super.get();
    return { ...base, values: [...this.#cells.values()].map((c) => ({ labels: c.labels, value: c.value })) };
  }
}

type HistogramSnapshot = Awaited<ReturnType<Histogram<string>['get']>>;

class CellHistogramMetric extends Histogram<string> {
  readonly #name: string;
  readonly #help: string;
  readonly #cells: Map<string, HistogramCell>;
  readonly #bounds: readonly number[];

  constructor(registry: Registry, name: string, help: string, bounds: readonly number[], cells: Map<string, HistogramCell>) {
    super({ name, help, labelNames: PLACEHOLDER_LABELS, buckets: [...bounds], registers: [registry] });
    this.#name = name;
    this.#help = help;
    this.#cells = cells;
    this.#bounds = bounds;
  }

  override async get(): Promise<HistogramSnapshot> {
    return this.getForPromString();
  }

  /** What the registry renders (prom-client prefers it to `get()` for histograms). */
  getForPromString(): Promise<HistogramSnapshot> {
    const bucketName = `${this.#name}_bucket`;
    const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = [];
    for (const c of this.#cells.values()) {
      let acc = 0;
      for (let i = 0; i < this.#bounds.length; i++) {
        acc += c.counts[i] as number;
        values.push({ labels: { ...c.labels, le: this.#bounds[i] as number }, value: acc, metricName: bucketName });
      }
      values.push({ labels: { ...c.labels, le: '+Inf' }, value: c.count, metricName: bucketName });
      values.push({ labels: c.labels, value: c.sum, metricName: `${this.#name}_sum` });
      values.push({ labels: c.labels, value: c.count, metricName: `${this.#name}_count` });
    }
    // Histogram's own get() goes through getForPromString, so the envelope is built here; the
    // typings declare `type` as a numeric enum while prom-client uses the string at run time.
    return Promise.resolve({ name: this.#name, help: this.#help, type: 'histogram', aggregator: 'sum', values } as unknown as HistogramSnapshot);
  }
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
  constructor(registry: Registry, name: string, help: string, refresh?: () => void) {
    new CellCounterMetric(registry, name, help, this.#cells, refresh);
  }

  /** The cell of these label values, created at 0 on first use. */
  cell(labels: Labels): ValueCell {
    return valueCell(this.#cells, labels);
  }
}

/** A gauge of cells. */
export class CellGauge {
  readonly #cells = new Map<string, ValueCell>();

  /** Registers the gauge. */
  constructor(registry: Registry, name: string, help: string) {
    new CellGaugeMetric(registry, name, help, this.#cells);
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
  constructor(registry: Registry, name: string, help: string, bounds: readonly number[]) {
    this.#bounds = Object.freeze([...bounds]);
    new CellHistogramMetric(registry, name, help, this.#bounds, this.#cells);
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
