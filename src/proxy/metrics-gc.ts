/**
 * `nodejs_gc_duration_seconds{kind}`: the garbage collector's pauses of this process, as
 * prom-client names them (`kind` = `minor` | `major` | `incremental` | `weakcb`), with buckets
 * for a proxy's scale (0.5 ms to 250 ms rather than prom-client's 1 ms to 5 s). Every request on
 * every connection waits while V8 pauses, so this is where a proxy's latency tail is explained:
 * a mark-compact (`major`) of an HTTP/2 relay pauses it for 5-30 ms, a scavenge (`minor`) for
 * well under one.
 *
 * One `PerformanceObserver` per process, started by the first registry that registers the
 * family (a process is one proxy; tests make several registries, which all read the same
 * counts). It costs one entry per GC, some tens per second under load, and node dresses each
 * entry in deprecated accessors built in the old generation: at 1,000 gRPC requests/s (~20
 * scavenges/s) the inbound proxy's sampling heap profile puts ~70 B per request there, against
 * ~1.1 KiB per request of node:http2's own, so mark-compacts come some 5 % more often. That is
 * the price of seeing them.
 */
import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';

/** Upper bounds of the buckets, in seconds. */
export const GC_PAUSE_BUCKETS_S: readonly number[] = Object.freeze([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25]);

/** The `kind` label of each `detail.kind` node reports. */
const KINDS: ReadonlyMap<number, string> = new Map([
  [constants.NODE_PERFORMANCE_GC_MINOR, 'minor'],
  [constants.NODE_PERFORMANCE_GC_MAJOR, 'major'],
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL, 'incremental'],
  [constants.NODE_PERFORMANCE_GC_WEAKCB, 'weakcb'],
]);

interface KindCounts {
  readonly kind: string;
  /** Per bucket (not cumulative), the last one for everything above the largest bound. */
  readonly counts: number[];
  sum: number;
  count: number;
}

/** The process's counts, in the order of {@link KINDS}; created with the observer. */
let state: readonly KindCounts[] | undefined;

/** What node puts in a `gc` entry's `detail` (its typings leave `PerformanceEntry.detail` out). */
interface GcEntry extends PerformanceEntry {
  readonly detail?: { readonly kind?: number };
}

function record(kinds: ReadonlyMap<number, KindCounts>, entry: GcEntry): void {
  const k = kinds.get(entry.detail?.kind ?? -1);
  if (k === undefined) return;
  const seconds = entry.duration / 1000;
  let i = 0;
  while (i < GC_PAUSE_BUCKETS_S.length && seconds > (GC_PAUSE_BUCKETS_S[i] as number)) i++;
  k.counts[i] = (k.counts[i] as number) + 1;
  k.sum += seconds;
  k.count++;
}

/** The process-wide counts, observing GCs from the first call on. */
function gcCounts(): readonly KindCounts[] {
  if (state !== undefined) return state;
  const all = [...KINDS.values()].map((kind): KindCounts => ({ kind, counts: new Array<number>(GC_PAUSE_BUCKETS_S.length + 1).fill(0), sum: 0, count: 0 }));
  const byCode = new Map([...KINDS.keys()].map((code, i) => [code, all[i] as KindCounts]));
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) record(byCode, e);
  }).observe({ type: 'gc' });
  state = all;
  return all;
}

/** What {@link registerGcFamily} needs of a registry (metric-cells.ts's `MetricsRegistry`). */
export interface GcFamilyRegistry {
  register(family: { name: string; help: string; type: 'histogram'; samples(out: string[]): void }): void;
}

/** Registers `nodejs_gc_duration_seconds` in `registry` and starts observing GCs if nothing did yet. */
export function registerGcFamily(registry: GcFamilyRegistry, renderValue: (v: number) => string): void {
  const counts = gcCounts();
  const name = 'nodejs_gc_duration_seconds';
  const les = [...GC_PAUSE_BUCKETS_S.map(renderValue), '+Inf'];
  registry.register({
    name,
    help: 'Garbage collection duration by kind, one of major, minor, incremental or weakcb.',
    type: 'histogram',
    samples(out) {
      for (const k of counts) {
        let acc = 0;
        for (let i = 0; i < les.length; i++) {
          acc += k.counts[i] as number;
          out.push(`${name}_bucket{kind="${k.kind}",le="${les[i] as string}"} ${acc}\n`);
        }
        out.push(`${name}_sum{kind="${k.kind}"} ${renderValue(k.sum)}\n`, `${name}_count{kind="${k.kind}"} ${k.count}\n`);
      }
    },
  });
}
