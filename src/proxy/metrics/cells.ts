/**
 * The proxy's Prometheus metrics: families whose series are plain mutable cells, rendered in the
 * text exposition format by a registry of our own.
 *
 * A cell is created (and its label values built) once per label set, when a series is first
 * resolved; after that a request or a connection only does `cell.value++` or {@link observe} on a
 * cell it already holds — no label hashing, no map lookup, no clock read. {@link MetricsRegistry}
 * renders the cells at scrape time. Label sets are free-form, so a family can carry labels that
 * are only known at run time (an endpoint's `dst_*` labels).
 *
 * Idle series are evicted, as upstream's proxy does, so that label values that come and go —
 * client identities, authorities, endpoint addresses, `dst_pod` — do not accumulate (a leak under
 * churn, and a way for clients to mint series). The hot path pays nothing for it: a sweep
 * compares each cell's reading (a counter's or gauge's value, a histogram's count) with the one
 * the previous sweep saw, so a cell that changed is known to be active without ever being stamped.
 * A cell whose reading has not changed for the registry's idle period (default 10 minutes) is
 * dropped from the exposition and from memory. A change counts from the sweep that notices it, so
 * a series goes between the idle period and the idle period plus the gap between two sweeps after
 * its last update — never earlier. Exceptions:
 * - a gauge whose value is not 0 (an open connection is never forgotten);
 * - an unlabelled series (a process-wide singleton cannot accumulate);
 * - a cell of a {@link SeriesGroup} — the cells that one owner caches together, such as a
 *   connection pool's `tcp_*` series or a route's request and response series — is evicted only
 *   with its whole group: when every cell of the group is idle and nothing holds the group
 *   (`holds`: live connections, requests in flight). A group's cached cells therefore stay valid
 *   for as long as the group is not `evicted`.
 *
 * Whoever caches a cell or a group must resolve it anew once it was evicted, or its updates would
 * go to a detached cell: a group reports `evicted`, and {@link MetricsRegistry.generation} changes
 * whenever a sweep evicted anything (caches keyed by object identity clear themselves on it). A
 * series resolved again after its eviction starts from zero, which Prometheus treats as a counter
 * reset (`rate()` and `increase()` handle it; the series was idle for the whole idle period
 * before, so nothing is lost).
 *
 * Sweeps run at scrape time and, while new series are being created, at most every
 * `min(idle / 4, 1 min)` (deferred with an unref'd `setImmediate`, so no sweep ever runs in the
 * middle of a caller's synchronous resolve-and-update); there is no timer, so a proxy that is
 * neither scraped nor minting series keeps a set that does not grow.
 *
 * The proxy does not use prom-client (the controller does): a sidecar runs in every pod, and
 * prom-client with its dependencies costs about 8 MB of resident memory per process.
 */
import { performance } from 'node:perf_hooks';
import { MeshError } from '../../shared/index.js';

/** Label values by name, in exposition order. */
export type Labels = Readonly<Record<string, string>>;

/** One series of a counter or a gauge. */
export interface ValueCell {
  readonly labels: Labels;
  value: number;
  /** Set once the registry evicted the series: updates no longer reach the exposition. */
  readonly evicted: boolean;
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
  /** Set once the registry evicted the series. */
  readonly evicted: boolean;
}

/**
 * Cells that one owner caches together and that are evicted together (see the module comment):
 * resolve a cell with its group (`family.cell(labels, group)`) and the registry evicts it only
 * when every cell of the group is idle and `holds` is 0. Owners may extend the class. A label set
 * belongs to one group: resolving a group's labels with another group (or none) returns the same
 * cell, still governed by its first group.
 */
export class SeriesGroup {
  /** Holders that will still update the cells (live connections, requests in flight). */
  holds = 0;
  /** @internal The id of the last sweep that found one of the group's cells live. */
  liveSweep = 0;
  #evicted = false;
  readonly #onEvict: (() => void) | undefined;

  /** `onEvict` runs once, when the registry evicts the group (e.g. to drop it from the owner's maps); it must not throw. */
  constructor(onEvict?: () => void) {
    this.#onEvict = onEvict;
  }

  /** True once the registry evicted the group: its cells are detached, resolve the series anew. */
  get evicted(): boolean {
    return this.#evicted;
  }

  /** Takes a hold: the group is not evicted until the matching {@link release}. */
  hold(): void {
    this.holds++;
  }

  /** Releases a hold. */
  release(): void {
    if (this.holds > 0) this.holds--;
  }

  /** @internal Marks the group evicted (the registry's sweep). */
  evict(): void {
    if (this.#evicted) return;
    this.#evicted = true;
    this.#onEvict?.();
  }
}

/**
 * The upstream proxy's latency buckets in milliseconds (`response_latency_ms`,
 * `tcp_connection_duration_ms`).
 */
export const LATENCY_BUCKETS_MS: readonly number[] = Object.freeze([
  1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 100, 200, 300, 400, 500, 1000, 2000, 3000, 4000, 5000, 10_000, 20_000, 30_000, 40_000, 50_000,
]);

export type MetricType = 'counter' | 'gauge' | 'histogram';

/** A family as the registry sees it: its header, and its sample lines rendered at scrape time. */
interface Family {
  readonly name: string;
  readonly help: string;
  readonly type: MetricType;
  /** Appends the family's sample lines (each ending in a newline) to `out`. */
  samples(out: string[]): void;
  /** Sweep, first pass: notes which cells changed since the last sweep and which groups are live. */
  mark?(now: number, cutoff: number, sweep: number): void;
  /** Sweep, second pass: drops the idle cells; returns how many. */
  evict?(cutoff: number, sweep: number): number;
}

/** The Prometheus text exposition content type (version 0.0.4), as prom-client serves it. */
export const EXPOSITION_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** Default of {@link MetricsRegistryOptions.idleTimeoutMs}: 10 minutes. */
export const METRICS_IDLE_TIMEOUT_MS = 10 * 60_000;

/** Options of {@link MetricsRegistry}. */
export interface MetricsRegistryOptions {
  /** A series not updated for this long is evicted (default 10 min; `Infinity`: never). */
  readonly idleTimeoutMs?: number;
  /** Clock in ms (tests inject their own). Default `performance.now`. */
  readonly now?: () => number;
}

/**
 * One process's metric families, rendered in registration order. Names are unique: registering
 * a second family of the same name throws `ERR_METRIC_DUPLICATE` (a programming error).
 */
export class MetricsRegistry {
  readonly contentType = EXPOSITION_CONTENT_TYPE;
  readonly #families = new Map<string, Family>();
  readonly #idleTimeoutMs: number;
  readonly #sweepIntervalMs: number;
  readonly #now: () => number;
  #lastSweepMs: number;
  #sweepQueued = false;
  #sweeps = 0;
  #generation = 0;

  /** Throws RangeError for an idle timeout that is not positive. */
  constructor(opts: MetricsRegistryOptions = {}) {
    const idle = opts.idleTimeoutMs ?? METRICS_IDLE_TIMEOUT_MS;
    if (!(idle > 0)) throw new RangeError(`bad idleTimeoutMs ${idle}`);
    this.#idleTimeoutMs = idle;
    this.#sweepIntervalMs = Math.min(idle / 4, 60_000);
    this.#now = opts.now ?? (() => performance.now());
    this.#lastSweepMs = this.#now();
  }

  /**
   * Changes whenever a sweep evicted something: a cache of cells or groups keyed by object
   * identity compares it and starts over when it changed.
   */
  get generation(): number {
    return this.#generation;
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

  /** {@link metrics}, synchronously; sweeps first. */
  render(): string {
    this.sweep();
    const out: string[] = [];
    for (const f of this.#families.values()) {
      out.push(`# HELP ${f.name} ${escapeHelp(f.help)}\n# TYPE ${f.name} ${f.type}\n`);
      f.samples(out);
    }
    return out.join('');
  }

  /** Evicts the series idle for the idle period (see the module comment); returns how many cells went. */
  sweep(): number {
    const now = this.#now();
    this.#lastSweepMs = now;
    if (this.#idleTimeoutMs === Number.POSITIVE_INFINITY) return 0;
    const sweep = ++this.#sweeps;
    const cutoff = now - this.#idleTimeoutMs;
    for (const f of this.#families.values()) f.mark?.(now, cutoff, sweep);
    let evicted = 0;
    for (const f of this.#families.values()) evicted += f.evict?.(cutoff, sweep) ?? 0;
    if (evicted > 0) this.#generation++;
    return evicted;
  }

  /** @internal The clock for a new cell; queues a sweep when one is due. */
  cellCreated(): number {
    const now = this.#now();
    if (!this.#sweepQueued && now - this.#lastSweepMs >= this.#sweepIntervalMs && this.#idleTimeoutMs !== Number.POSITIVE_INFINITY) {
      this.#sweepQueued = true;
      setImmediate(() => {
        this.#sweepQueued = false;
        this.sweep();
      }).unref();
    }
    return now;
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

/** A sample value as the text exposition format writes it. */
export function renderValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Number.POSITIVE_INFINITY) return '+Inf';
  if (v === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(v);
}

function keyOf(labels: Labels): string {
  return JSON.stringify(labels);
}

/** What the sweeps keep on every cell. */
interface Tracked {
  readonly labels: Labels;
  readonly group: SeriesGroup | undefined;
  /** Never evicted: an unlabelled series. */
  readonly pinned: boolean;
  /** The reading (value or count) the last sweep saw. */
  seen: number;
  /** When the reading last changed, by the registry's clock. */
  activeAt: number;
  evicted: boolean;
}

class Value implements ValueCell, Tracked {
  value = 0;
  seen = 0;
  evicted = false;
  readonly labels: Labels;
  readonly group: SeriesGroup | undefined;
  readonly pinned: boolean;
  activeAt: number;

  constructor(labels: Labels, group: SeriesGroup | undefined, pinned: boolean, now: number) {
    this.labels = labels;
    this.group = group;
    this.pinned = pinned;
    this.activeAt = now;
  }
}

class Histogram implements HistogramCell, Tracked {
  sum = 0;
  count = 0;
  seen = 0;
  evicted = false;
  readonly labels: Labels;
  readonly bounds: readonly number[];
  readonly counts: Float64Array;
  readonly group: SeriesGroup | undefined;
  readonly pinned: boolean;
  activeAt: number;

  constructor(labels: Labels, bounds: readonly number[], group: SeriesGroup | undefined, pinned: boolean, now: number) {
    this.labels = labels;
    this.bounds = bounds;
    this.counts = new Float64Array(bounds.length + 1);
    this.group = group;
    this.pinned = pinned;
    this.activeAt = now;
  }
}

/** The cells of one family by label values, and the family's part of a sweep. */
class CellStore<C extends Tracked> {
  readonly cells = new Map<string, C>();
  readonly #registry: MetricsRegistry;
  readonly #make: (labels: Labels, group: SeriesGroup | undefined, pinned: boolean, now: number) => C;
  readonly #reading: (cell: C) => number;
  /** A gauge's cell with a value other than 0 is live. */
  readonly #gauge: boolean;

  constructor(
    registry: MetricsRegistry,
    make: (labels: Labels, group: SeriesGroup | undefined, pinned: boolean, now: number) => C,
    reading: (cell: C) => number,
    gauge: boolean,
  ) {
    this.#registry = registry;
    this.#make = make;
    this.#reading = reading;
    this.#gauge = gauge;
  }

  /** The cell of `labels`, created on first use (in `group`, if any). */
  get(labels: Labels, group: SeriesGroup | undefined): C {
    const key = keyOf(labels);
    let c = this.cells.get(key);
    if (c === undefined) {
      c = this.#make(labels, group, key === '{}', this.#registry.cellCreated());
      this.cells.set(key, c);
    }
    return c;
  }

  /** Drops every cell. */
  clear(): void {
    for (const c of this.cells.values()) c.evicted = true;
    this.cells.clear();
  }

  mark(now: number, cutoff: number, sweep: number): void {
    for (const c of this.cells.values()) {
      const reading = this.#reading(c);
      if (reading !== c.seen) {
        c.seen = reading;
        c.activeAt = now;
      }
      if (c.group !== undefined && this.#isLive(c, cutoff)) c.group.liveSweep = sweep;
    }
  }

  evict(cutoff: number, sweep: number): number {
    let evicted = 0;
    for (const [key, c] of this.cells) {
      if (this.#isLive(c, cutoff)) continue;
      const g = c.group;
      if (g !== undefined && (g.liveSweep === sweep || g.holds > 0)) continue;
      this.cells.delete(key);
      c.evicted = true;
      g?.evict();
      evicted++;
    }
    return evicted;
  }

  #isLive(c: C, cutoff: number): boolean {
    return c.pinned || c.activeAt > cutoff || (this.#gauge && this.#reading(c) !== 0);
  }
}

const makeValue = (labels: Labels, group: SeriesGroup | undefined, pinned: boolean, now: number): Value => new Value(labels, group, pinned, now);
const valueReading = (c: Value): number => c.value;

/** Registers a counter or gauge family over `store`; `refresh` runs before each scrape. */
function registerValueFamily(
  registry: MetricsRegistry,
  name: string,
  help: string,
  type: MetricType,
  store: CellStore<Value>,
  refresh: (() => void) | undefined,
): void {
  registry.register({
    name,
    help,
    type,
    samples(out) {
      refresh?.();
      for (const c of store.cells.values()) out.push(`${name}${renderLabels(c.labels)} ${renderValue(c.value)}\n`);
    },
    mark: (now, cutoff, sweep) => store.mark(now, cutoff, sweep),
    evict: (cutoff, sweep) => store.evict(cutoff, sweep),
  });
}

/** A counter of cells; {@link cell} is for series resolution, not for every event. */
export class CellCounter {
  readonly #store: CellStore<Value>;

  /** Registers the counter; `refresh` runs before every scrape (to fold live values into cells). */
  constructor(registry: MetricsRegistry, name: string, help: string, refresh?: () => void) {
    this.#store = new CellStore(registry, makeValue, valueReading, false);
    registerValueFamily(registry, name, help, 'counter', this.#store, refresh);
  }

  /** The cell of these label values, created at 0 on first use (in `group`, if any). */
  cell(labels: Labels, group?: SeriesGroup): ValueCell {
    return this.#store.get(labels, group);
  }
}

/** A gauge of cells; a series whose value is not 0 is never evicted. */
export class CellGauge {
  readonly #store: CellStore<Value>;

  /** Registers the gauge; `refresh` runs before every scrape. */
  constructor(registry: MetricsRegistry, name: string, help: string, refresh?: () => void) {
    this.#store = new CellStore(registry, makeValue, valueReading, true);
    registerValueFamily(registry, name, help, 'gauge', this.#store, refresh);
  }

  /** Removes every series (a gauge whose value is absent, e.g. no certificate yet). */
  clear(): void {
    this.#store.clear();
  }

  /** The cell of these label values, created at 0 on first use (in `group`, if any). */
  cell(labels: Labels, group?: SeriesGroup): ValueCell {
    return this.#store.get(labels, group);
  }
}

/** A histogram of cells with fixed bucket bounds (ascending). */
export class CellHistogram {
  readonly #store: CellStore<Histogram>;

  /** Registers the histogram. */
  constructor(registry: MetricsRegistry, name: string, help: string, bounds: readonly number[]) {
    const frozen = Object.freeze([...bounds]);
    const store = new CellStore<Histogram>(
      registry,
      (labels, group, pinned, now) => new Histogram(labels, frozen, group, pinned, now),
      (c) => c.count,
      false,
    );
    this.#store = store;
    const les = frozen.map((b) => `le="${renderValue(b)}"`);
    registry.register({
      name,
      help,
      type: 'histogram',
      samples(out) {
        for (const c of store.cells.values()) {
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
      mark: (now, cutoff, sweep) => store.mark(now, cutoff, sweep),
      evict: (cutoff, sweep) => store.evict(cutoff, sweep),
    });
  }

  /** The cell of these label values, created empty on first use (in `group`, if any). */
  cell(labels: Labels, group?: SeriesGroup): HistogramCell {
    return this.#store.get(labels, group);
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

/**
 * Registers a family of one unlabelled sample, read at scrape time (`undefined`: no sample), for
 * values another component keeps anyway: nothing is done per event.
 */
export function registerReadFamily(registry: MetricsRegistry, name: string, help: string, read: () => number | undefined, type: MetricType = 'gauge'): void {
  registry.register({
    name,
    help,
    type,
    samples(out) {
      const v = read();
      if (v !== undefined) out.push(`${name} ${renderValue(v)}\n`);
    },
  });
}
