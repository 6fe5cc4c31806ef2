/**
 * One memory-reducing garbage collection once a sidecar has started and gone quiet, so that an
 * idle proxy's footprint does not depend on when V8's memory reducer happens to look.
 *
 * A proxy's start (modules, TLS contexts, the first policies) leaves ~5 MB of garbage and grown
 * heap pages. V8's memory reducer gives them back, but only once it finds the process idle when
 * its timer fires, 8 s after the last collection; when something ran just then (a policy update,
 * a certificate, another process starting on a busy machine), it looks again 8 s later. Measured
 * in the mesh bench, the inbound proxy's RSS 15 s after start was 57.7–58.2 MB in most runs and
 * 63.3–63.6 MB in two, with nothing else different: the reducer had not run yet.
 *
 * Here the process's own CPU time decides: once it has used less than {@link QUIET_CPU_FRACTION}
 * of each of {@link QUIET_TICKS} consecutive ticks, one collection runs: V8's low-memory
 * collection, as the memory reducer's (the young generation and the page pool shrunk; a plain
 * full collection, `gc()`, frees the objects but gave nothing back to the system here): V8's
 * last-resort `gc()` when the process runs with `--expose-gc` (as PROXY_NODE_OPTIONS has it),
 * otherwise asked for through the inspector in-process (`node:inspector`, no port opened), whose
 * code then stays resident. Quiet is not proof that nothing is in flight (a low-rate or streaming request may be),
 * but the pause (~20 ms) then falls on little. After the first, it runs again only when the
 * process is quiet with its memory well above what the first left (see {@link settleHeapWhenQuiet}).
 *
 * Measured (mesh bench proxies, 6 s after start): 62.3–63.4 MB RSS without, 58.3–58.5 MB with.
 */

/** How often the process's CPU time is read. */
export const SETTLE_TICK_MS = 1000;
/** Consecutive quiet ticks before the collection. */
export const QUIET_TICKS = 2;
/** A tick is quiet when the process used less than this fraction of it (1 %: ~10 ms a second). */
export const QUIET_CPU_FRACTION = 0.01;

/** V8's `gc` extension, which `--expose-gc` installs on the global object. */
type ExposedGc = (options: { readonly type: 'major'; readonly flavor: 'last-resort' }) => void;

/**
 * Collects every unreachable object and gives memory back (V8's low-memory collection: the young
 * generation and the page pool shrunk, as the memory reducer does). With `--expose-gc`, by the
 * `gc` it exposes (`flavor: 'last-resort'`, the same collection); otherwise by the inspector's
 * `HeapProfiler.collectGarbage`, in-process: no port is opened.
 */
export async function collectAllGarbage(): Promise<void> {
  const gc = (globalThis as { gc?: ExposedGc }).gc;
  if (typeof gc === 'function') {
    gc({ type: 'major', flavor: 'last-resort' });
    return;
  }
  // Loaded here: a node built without the inspector must still run the proxy (this then fails).
  const { Session } = await import('node:inspector');
  const session = new Session();
  session.connect();
  return new Promise<void>((resolve, reject) => {
    session.post('HeapProfiler.collectGarbage', (err) => {
      // Not from inside the callback: disconnecting there left the process stalled.
      setImmediate(() => session.disconnect());
      if (err === null) resolve();
      else reject(err);
    });
  });
}

/** Settings of {@link settleHeapWhenQuiet}; defaults are the process's own. */
export interface HeapSettleOptions {
  readonly tickMs?: number;
  readonly quietTicks?: number;
  /** The process's CPU time so far in microseconds (default `process.cpuUsage`, user + system). */
  readonly cpuMicros?: () => number;
  /** Resident memory in bytes (default `process.memoryUsage.rss`). */
  readonly rssBytes?: () => number;
  readonly collect?: () => Promise<void>;
  /** Gives the C heap's free memory back after a collection (default: none; the proxy passes runtime/malloc-trim's). */
  readonly trim?: () => unknown;
  /** Called once each settle ran (or failed: with its error), with the resident memory before and after. */
  readonly done?: (err?: unknown, rss?: { readonly before: number; readonly after: number }) => void;
  /** Default {@link TRIM_DELAY_MS}. */
  readonly trimDelayMs?: number;
  /** Default {@link MIN_RETRY_MS}. */
  readonly minRetryMs?: number;
  /** Default {@link MAX_RETRY_MS}. */
  readonly maxRetryMs?: number;
}

/**
 * How long after a collection the C heap is trimmed: V8 frees the backing memory of collected
 * buffers on a background thread, after the collection (trimming at once gave back 26 of 100 MB of
 * freed 4 KiB buffers here, 250 ms later all of it; a trim took 3-9 ms).
 */
export const TRIM_DELAY_MS = 250;
/** A settle runs again, once quiet, when resident memory is this much above the first settle's (20 %). */
export const REGROWTH = 1.2;
/** How soon a settle that left memory above that may run again; doubled after each such one, up to {@link MAX_RETRY_MS}. */
export const MIN_RETRY_MS = 5000;
/**
 * The longest wait between two settles while memory stays up (a burst's connections still held):
 * the first quiet settle after they close comes at most this much later.
 */
export const MAX_RETRY_MS = 20_000;

/**
 * Starts watching for quiet. The first quiet period settles the start's garbage; after that the
 * footprint it left is the yardstick: whenever the process is quiet and its resident memory is
 * {@link REGROWTH} times that (an attack's or a burst's connections came and went: their buffers
 * are garbage V8 has no reason to collect yet, their TLS and socket memory free but resident in
 * the C heap), it settles again: a collection, then `trim`. While memory stays up (the
 * connections are still held), settles are spaced out from {@link MIN_RETRY_MS} to
 * {@link MAX_RETRY_MS}. A busy process is never interrupted. `stop()` ends the watch.
 */
export function settleHeapWhenQuiet(opts: HeapSettleOptions = {}): { stop(): void } {
  const tickMs = opts.tickMs ?? SETTLE_TICK_MS;
  const quietTicks = opts.quietTicks ?? QUIET_TICKS;
  const cpuMicros =
    opts.cpuMicros ??
    ((): number => {
      const u = process.cpuUsage();
      return u.user + u.system;
    });
  const rssBytes = opts.rssBytes ?? ((): number => process.memoryUsage.rss());
  const collect = opts.collect ?? collectAllGarbage;
  const quietMicros = tickMs * 1000 * QUIET_CPU_FRACTION;
  let last = cpuMicros();
  let quiet = 0;
  let footprint: number | undefined;
  const trimDelayMs = opts.trimDelayMs ?? TRIM_DELAY_MS;
  const minRetryMs = opts.minRetryMs ?? MIN_RETRY_MS;
  const maxRetryMs = opts.maxRetryMs ?? MAX_RETRY_MS;
  let retryMs = minRetryMs;
  let notBefore = 0;
  let settling = false;
  let stopped = false;
  const settle = (): void => {
    settling = true;
    const before = rssBytes();
    const finish = (err?: unknown): void => {
      if (err === undefined && opts.trim !== undefined) {
        // After V8 has freed the collected buffers' memory, which it does on a background thread.
        const t = setTimeout(() => trimmed(), trimDelayMs);
        t.unref();
      } else trimmed(err);
    };
    const trimmed = (err?: unknown): void => {
      settling = false;
      if (stopped) return;
      if (err === undefined) {
        try {
          opts.trim?.();
        } catch (e) {
          err = e;
        }
      }
      const after = rssBytes();
      if (footprint === undefined) footprint = after;
      else if (after > footprint * REGROWTH) retryMs = Math.min(maxRetryMs, retryMs * 2);
      else retryMs = minRetryMs;
      notBefore = Date.now() + retryMs;
      // The collection's own CPU is not a sign of activity.
      last = cpuMicros();
      quiet = 0;
      opts.done?.(err, { before, after });
    };
    let collecting: Promise<void>;
    try {
      collecting = collect();
    } catch (err) {
      // Never out of a timer callback: that would end the process.
      finish(err);
      return;
    }
    collecting.then(
      () => finish(),
      (err: unknown) => finish(err),
    );
  };
  const timer = setInterval(() => {
    const now = cpuMicros();
    const used = now - last;
    last = now;
    quiet = used < quietMicros ? quiet + 1 : 0;
    if (quiet < quietTicks || settling) return;
    if (footprint !== undefined && (Date.now() < notBefore || rssBytes() <= footprint * REGROWTH)) return;
    settle();
  }, tickMs);
  timer.unref();
  return {
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}
