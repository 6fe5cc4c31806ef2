/**
 * `nodejs_gc_duration_seconds{kind}`: the garbage collector's pauses of this process, as
 * prom-client names them (`kind` = `minor` | `major` | `incremental` | `weakcb`), with buckets
 * for a proxy's scale (0.5 ms to 250 ms rather than prom-client's 1 ms to 5 s). Every request on
 * every connection waits while V8 pauses, so this is where a proxy's latency tail is explained:
 * a mark-compact (`major`) of an HTTP/2 relay pauses it for 5-30 ms, a scavenge (`minor`) for
 * well under one.
 *
 * Counted once per process, started by the first registry that registers the family (a process
 * is one proxy; tests make several registries, which all read the same counts), in one of two
 * ways:
 *
 * - The native addon `native/gc_pauses.cc` (built by `npm run build:native`, beside the
 *   SO_ORIGINAL_DST one): V8 GC callbacks fill the histograms in C++, and a scrape copies them.
 *   Nothing runs in JavaScript per GC.
 * - Without it (not built, or another platform): a `PerformanceObserver` of `gc` entries, and a
 *   proxy's `proxy ready` log line says which and why (`gcPauses`). node dresses each entry in deprecated accessors (DEP0152) made of
 *   `util.deprecate` wrappers, which V8 answers with hidden classes built in the old
 *   generation. Measured in the mesh bench's proxies at 1,000 HTTP/1 requests/s (heap space
 *   statistics over 1.5 s windows): the old generation grew 78–127 B per request in the outbound
 *   and 50–220 B in the inbound with the observer, 19–56 B and 19–165 B with the addon; the sampling
 *   heap profile put ~35–45 B per request of it in `observerCallback`. Mark-compacts come about
 *   twice as often with the observer.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';
import { nativeAddonPath } from '../../shared/index.js';

/** Upper bounds of the buckets, in seconds. */
export const GC_PAUSE_BUCKETS_S: readonly number[] = Object.freeze([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25]);

/** The `kind` label of each `detail.kind` node reports. */
const KINDS: ReadonlyMap<number, string> = new Map([
  [constants.NODE_PERFORMANCE_GC_MINOR, 'minor'],
  [constants.NODE_PERFORMANCE_GC_MAJOR, 'major'],
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL, 'incremental'],
  [constants.NODE_PERFORMANCE_GC_WEAKCB, 'weakcb'],
]);

export interface KindCounts {
  readonly kind: string;
  /** Per bucket (not cumulative), the last one for everything above the largest bound. */
  readonly counts: number[];
  sum: number;
  count: number;
}

/** The process's counter, started by the first registry that registers the family. */
let state: GcCounter | undefined;

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

/** The native counter's interface (native/gc_pauses.cc). */
export interface GcPausesAddon {
  /** Starts counting with these bucket bounds (seconds); once per process: later calls with the same bounds are no-ops, other bounds throw. */
  start(bounds: Float64Array): void;
  /** Per kind (minor, major, incremental, weakcb): the bucket counts (bounds + 1), the sum, the count. */
  read(out: Float64Array): void;
}

/** Where `npm run build:native` puts the addon for this Node's ABI. */
export const GC_PAUSES_ADDON_PATH = nativeAddonPath('gc_pauses', import.meta.url);

/** The addon, or why it cannot be used (not built, or it does not load: built for another Node). */
export function loadGcPausesAddon(): GcPausesAddon | string {
  if (!existsSync(GC_PAUSES_ADDON_PATH)) return `${GC_PAUSES_ADDON_PATH} is not built (npm run build:native)`;
  try {
    return createRequire(import.meta.url)(GC_PAUSES_ADDON_PATH) as GcPausesAddon;
  } catch (e) {
    return `${GC_PAUSES_ADDON_PATH} does not load: ${e instanceof Error ? e.message : String(e)}`;
  }
}

/** How a process counts its GCs: `native` (the addon) or `observer` (node's `gc` performance entries). */
export type GcCounting = 'native' | 'observer';

/** A set of GC counts and how to bring them up to date. */
export interface GcCounter {
  readonly counting: GcCounting;
  /** In the order of {@link KINDS}. */
  readonly kinds: readonly KindCounts[];
  /** Brings {@link kinds} up to date (with the observer they are kept up to date as entries arrive). */
  refresh(): void;
}

/** Starts counting GCs from now on, with `addon` when given, else with a `PerformanceObserver`. */
export function startGcCounter(addon: GcPausesAddon | undefined): GcCounter {
  const kinds = [...KINDS.values()].map((kind): KindCounts => ({ kind, counts: new Array<number>(GC_PAUSE_BUCKETS_S.length + 1).fill(0), sum: 0, count: 0 }));
  if (addon === undefined) {
    const byCode = new Map([...KINDS.keys()].map((code, i) => [code, kinds[i] as KindCounts]));
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) record(byCode, e);
    }).observe({ type: 'gc' });
    return { counting: 'observer', kinds, refresh: () => undefined };
  }
  addon.start(Float64Array.from(GC_PAUSE_BUCKETS_S));
  const per = GC_PAUSE_BUCKETS_S.length + 3;
  const raw = new Float64Array(per * kinds.length);
  const refresh = (): void => {
    addon.read(raw);
    for (let i = 0; i < kinds.length; i++) {
      const k = kinds[i] as KindCounts;
      const row = i * per;
      for (let b = 0; b <= GC_PAUSE_BUCKETS_S.length; b++) k.counts[b] = raw[row + b] as number;
      k.sum = raw[row + per - 2] as number;
      k.count = raw[row + per - 1] as number;
    }
  };
  return { counting: 'native', kinds, refresh };
}

/** Why this process counts with the observer, if it does. */
let fallbackReason: string | undefined;

/** How GCs are counted in this process, once {@link registerGcFamily} has started counting; with the observer, why. */
export function gcCounting(): { readonly counting: GcCounting; readonly reason?: string } | undefined {
  if (state === undefined) return undefined;
  return fallbackReason === undefined ? { counting: state.counting } : { counting: state.counting, reason: fallbackReason };
}

/** The process-wide counter, started by the first call. */
function gcCounter(): GcCounter {
  if (state === undefined) {
    const addon = loadGcPausesAddon();
    if (typeof addon === 'string') fallbackReason = addon;
    state = startGcCounter(typeof addon === 'string' ? undefined : addon);
  }
  return state;
}

/** What {@link registerGcFamily} needs of a registry (metrics/cells.ts's `MetricsRegistry`). */
export interface GcFamilyRegistry {
  register(family: { name: string; help: string; type: 'histogram'; samples(out: string[]): void }): void;
}

/** Registers `nodejs_gc_duration_seconds` in `registry` and starts observing GCs if nothing did yet. */
export function registerGcFamily(registry: GcFamilyRegistry, renderValue: (v: number) => string): void {
  const counter = gcCounter();
  const name = 'nodejs_gc_duration_seconds';
  const les = [...GC_PAUSE_BUCKETS_S.map(renderValue), '+Inf'];
  registry.register({
    name,
    help: 'Garbage collection duration by kind, one of major, minor, incremental or weakcb.',
    type: 'histogram',
    samples(out) {
      counter.refresh();
      for (const k of counter.kinds) {
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
