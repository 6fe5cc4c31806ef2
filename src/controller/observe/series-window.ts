/**
 * The embedded collector's memory: for each scrape target, the values of its series at its last
 * scrapes (a ring of `capacity` scrapes, enough for the retention), and the PromQL-shaped queries
 * of {@link MetricsBackend} over them.
 *
 * Layout: a target keeps one ring of scrape times and, per series, a `Float64Array` ring of values
 * at the same positions (NaN = absent from that scrape), so a series costs 8 bytes a scrape and
 * a scrape writes each series once. A series absent from a whole ring is forgotten.
 *
 * Counters (and histogram buckets, counts, sums):
 * - a series that appears after the target's first scrape starts from zero at the previous scrape
 *   (the proxy creates a series on its first event), so a burst between two scrapes is counted;
 *   the first scrape of a target has no such base, as it is unknown when its counts were made;
 * - a drop is a reset (a restarted proxy, an evicted series): the increase is then the new value,
 *   as Prometheus counts it;
 * - `rate` is the increase over the points inside the window divided by the time between the first
 *   and the last of them; a series with fewer than two points in the window has no rate.
 * Gauges (`latest`): the value at the target's last successful scrape, if it is not older than
 * `staleMs` and the series was in it (a series that disappeared is stale at once).
 */
import type { Sample, SeriesQuery } from './metrics-backend.js';

/** Labels the collector sets on every series, from the pod the series came from. */
export const TARGET_LABELS = ['namespace', 'pod', 'workload_kind', 'workload_name'] as const;

/** One series as a scrape gives it, with the target's labels already set. */
export interface ScrapedSeries {
  readonly name: string;
  /** Read only for a series the window does not hold yet (may be a getter that builds them). */
  readonly labels: Readonly<Record<string, string>>;
  /** Identifies the series within its target from scrape to scrape (default: name and sorted labels). */
  readonly key?: string;
  readonly value: number;
  /** Only grows; a drop is a reset. */
  readonly cumulative: boolean;
}

interface SeriesRecord {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly cumulative: boolean;
  readonly values: Float64Array;
  /** Sequence number of the last scrape that had it. */
  lastSeq: number;
}

/** What a target's window holds after a scrape. */
export interface WindowUpdate {
  readonly series: number;
  /** New series refused because the total limit was reached. */
  readonly dropped: number;
}

/** The scrapes of one target. */
export class TargetWindow {
  readonly #capacity: number;
  readonly #times: Float64Array;
  /** Sequence number of the latest scrape (-1 before the first); its slot is `seq % capacity`. */
  #seq = -1;
  readonly #series = new Map<string, SeriesRecord>();
  readonly #byName = new Map<string, Set<SeriesRecord>>();

  constructor(capacity: number) {
    if (!(Number.isInteger(capacity) && capacity >= 2)) throw new RangeError(`bad window capacity ${capacity}`);
    this.#capacity = capacity;
    this.#times = new Float64Array(capacity);
  }

  /** Series held. */
  get size(): number {
    return this.#series.size;
  }

  /** Time of the last successful scrape, or undefined. */
  get lastScrapeMs(): number | undefined {
    return this.#seq < 0 ? undefined : this.#times[this.#seq % this.#capacity];
  }

  /**
   * Records a successful scrape at `timeMs`. New series beyond `room` (the total limit's
   * remainder) are dropped and counted.
   */
  record(timeMs: number, series: readonly ScrapedSeries[], room: number): WindowUpdate {
    const hadPrevious = this.#seq >= 0;
    const prevSlot = hadPrevious ? this.#seq % this.#capacity : -1;
    this.#seq++;
    const seq = this.#seq;
    const slot = seq % this.#capacity;
    this.#times[slot] = timeMs;
    for (const r of this.#series.values()) r.values[slot] = Number.NaN;
    let dropped = 0;
    for (const s of series) {
      const key = s.key ?? seriesKey(s.name, s.labels);
      let r = this.#series.get(key);
      if (r === undefined) {
        if (room <= 0) {
          dropped++;
          continue;
        }
        room--;
        r = { name: s.name, labels: s.labels, cumulative: s.cumulative, values: new Float64Array(this.#capacity).fill(Number.NaN), lastSeq: seq };
        if (s.cumulative && hadPrevious) r.values[prevSlot] = 0;
        this.#series.set(detachString(key), r);
        let set = this.#byName.get(s.name);
        if (set === undefined) {
          set = new Set();
          this.#byName.set(s.name, set);
        }
        set.add(r);
      }
      r.values[slot] = s.value;
      r.lastSeq = seq;
    }
    // Forget series absent from every scrape the ring still holds.
    for (const [key, r] of this.#series) {
      if (seq - r.lastSeq >= this.#capacity - 1) {
        this.#series.delete(key);
        this.#byName.get(r.name)?.delete(r);
      }
    }
    return { series: this.#series.size, dropped };
  }

  /** Series of `name` whose labels hold `match` (an absent label matches ""). */
  *matching(name: string, match: Readonly<Record<string, string>> | undefined): Generator<SeriesRecord> {
    const set = this.#byName.get(name);
    if (set === undefined) return;
    outer: for (const r of set) {
      if (match !== undefined) for (const k in match) if ((r.labels[k] ?? '') !== match[k]) continue outer;
      yield r;
    }
  }

  /** Per-second increase of a cumulative series over the scrapes in `[fromMs, toMs]`; undefined with fewer than two points. */
  rateOf(r: SeriesRecord, fromMs: number, toMs: number): number | undefined {
    let firstT: number | undefined;
    let lastT = 0;
    let prev = Number.NaN;
    let increase = 0;
    const n = Math.min(this.#seq + 1, this.#capacity);
    for (let i = n - 1; i >= 0; i--) {
      const seq = this.#seq - i;
      const slot = seq % this.#capacity;
      const t = this.#times[slot] as number;
      if (t < fromMs || t > toMs) continue;
      const v = r.values[slot] as number;
      if (Number.isNaN(v)) continue;
      if (firstT === undefined) firstT = t;
      else increase += v >= prev ? v - prev : v;
      prev = v;
      lastT = t;
    }
    if (firstT === undefined || lastT <= firstT) return undefined;
    return (increase * 1000) / (lastT - firstT);
  }

  /** The value at the last scrape, if the series was in it and the scrape is not older than `sinceMs`. */
  latestOf(r: SeriesRecord, sinceMs: number): number | undefined {
    if (this.#seq < 0 || r.lastSeq !== this.#seq) return undefined;
    const slot = this.#seq % this.#capacity;
    if ((this.#times[slot] as number) < sinceMs) return undefined;
    const v = r.values[slot] as number;
    return Number.isNaN(v) ? undefined : v;
  }
}

/**
 * A copy of `s` that does not keep a larger string alive: V8 slices share their parent's memory,
 * and a kept series key or label sliced from a scrape body would hold the whole body.
 */
export function detachString(s: string): string {
  return s.length < 16 ? s : Buffer.from(s, 'utf8').toString('utf8');
}

/** A stable key of a series: its name and its labels in name order. */
export function seriesKey(name: string, labels: Readonly<Record<string, string>>): string {
  const keys = Object.keys(labels).sort();
  let out = name;
  for (const k of keys) out += `\u0000${k}\u0001${labels[k]}`;
  return out;
}

/** Sums values into groups of the `by` labels (empty labels are left out of a group's labels, as PromQL does). */
export class GroupSum {
  readonly #by: readonly string[];
  readonly #groups = new Map<string, { labels: Record<string, string>; value: number }>();

  constructor(by: readonly string[]) {
    this.#by = by;
  }

  add(labels: Readonly<Record<string, string>>, value: number, extra?: readonly [string, string]): void {
    let key = '';
    for (const b of this.#by) key += `${labels[b] ?? ''}\u0000`;
    if (extra !== undefined) key += extra[1];
    let g = this.#groups.get(key);
    if (g === undefined) {
      const out = Object.create(null) as Record<string, string>;
      for (const b of this.#by) {
        const v = labels[b];
        if (v !== undefined && v !== '') out[b] = v;
      }
      if (extra !== undefined) out[extra[0]] = extra[1];
      g = { labels: out, value: 0 };
      this.#groups.set(key, g);
    }
    g.value += value;
  }

  samples(): Sample[] {
    return [...this.#groups.values()].map((g) => ({ labels: g.labels, value: g.value }));
  }
}

/** `sum by (by) (rate(metric{match}[window]))` over targets. */
export function rateOver(targets: Iterable<TargetWindow>, q: SeriesQuery, fromMs: number, toMs: number, metric = q.metric, keepLe = false): Sample[] {
  const sum = new GroupSum(q.by);
  for (const t of targets) {
    for (const r of t.matching(metric, q.match)) {
      if (!r.cumulative) continue;
      const v = t.rateOf(r, fromMs, toMs);
      if (v === undefined) continue;
      sum.add(r.labels, v, keepLe ? ['le', r.labels.le ?? ''] : undefined);
    }
  }
  return sum.samples();
}

/** `sum by (by) (metric{match})` over targets' last scrapes. */
export function latestOver(targets: Iterable<TargetWindow>, q: SeriesQuery, sinceMs: number): Sample[] {
  const sum = new GroupSum(q.by);
  for (const t of targets) {
    for (const r of t.matching(q.metric, q.match)) {
      const v = t.latestOf(r, sinceMs);
      if (v !== undefined) sum.add(r.labels, v);
    }
  }
  return sum.samples();
}

/**
 * `histogram_quantile(quantile, …)` over bucket rates grouped by `by` (each sample's labels carry
 * `le`): Prometheus's interpolation — linear inside the bucket holding the rank, the lower bound
 * of the first bucket 0, a rank in the `+Inf` bucket answers the highest finite bound. Groups
 * with no observations in the window are left out.
 */
export function histogramQuantile(quantile: number, bucketRates: readonly Sample[], by: readonly string[]): Sample[] {
  const groups = new Map<string, { labels: Record<string, string>; buckets: { le: number; count: number }[] }>();
  for (const s of bucketRates) {
    const le = parseLe(s.labels.le);
    if (le === undefined) continue;
    let key = '';
    for (const b of by) key += `${s.labels[b] ?? ''}\u0000`;
    let g = groups.get(key);
    if (g === undefined) {
      const labels = Object.create(null) as Record<string, string>;
      for (const b of by) {
        const v = s.labels[b];
        if (v !== undefined && v !== '') labels[b] = v;
      }
      g = { labels, buckets: [] };
      groups.set(key, g);
    }
    g.buckets.push({ le, count: s.value });
  }
  const out: Sample[] = [];
  for (const g of groups.values()) {
    const v = bucketQuantile(quantile, g.buckets);
    if (v !== undefined) out.push({ labels: g.labels, value: v });
  }
  return out;
}

function parseLe(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (text === '+Inf' || text === 'Inf' || text === 'inf' || text === '+inf') return Number.POSITIVE_INFINITY;
  const n = Number(text);
  return text.trim() === '' || Number.isNaN(n) ? undefined : n;
}

/** The quantile of cumulative bucket counts (upper bound `le`); undefined without observations. */
export function bucketQuantile(q: number, input: readonly { le: number; count: number }[]): number | undefined {
  if (Number.isNaN(q)) return undefined;
  const buckets = [...input].sort((a, b) => a.le - b.le);
  const last = buckets[buckets.length - 1];
  if (last === undefined || last.le !== Number.POSITIVE_INFINITY || buckets.length < 2) return undefined;
  // Counts from separate series may be out of order by rounding: make them monotonic.
  for (let i = 1; i < buckets.length; i++) {
    const b = buckets[i] as { le: number; count: number };
    const p = buckets[i - 1] as { le: number; count: number };
    if (b.count < p.count) b.count = p.count;
  }
  const total = last.count;
  if (!(total > 0)) return undefined;
  if (q < 0) return Number.NEGATIVE_INFINITY;
  if (q > 1) return Number.POSITIVE_INFINITY;
  const rank = q * total;
  let i = buckets.findIndex((b) => b.count >= rank);
  if (i === -1) i = buckets.length - 1;
  if (i === buckets.length - 1) return (buckets[buckets.length - 2] as { le: number }).le;
  const b = buckets[i] as { le: number; count: number };
  if (i === 0 && b.le <= 0) return b.le;
  const lowerBound = i === 0 ? 0 : (buckets[i - 1] as { le: number }).le;
  const lowerCount = i === 0 ? 0 : (buckets[i - 1] as { count: number }).count;
  const inBucket = b.count - lowerCount;
  if (inBucket <= 0) return b.le;
  return lowerBound + (b.le - lowerBound) * ((rank - lowerCount) / inBucket);
}
