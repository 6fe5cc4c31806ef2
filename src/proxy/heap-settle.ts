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
 * full collection, `gc()`, frees the objects but gave nothing back to the system here), asked
 * for through the inspector in-process (`node:inspector`, no port opened): node has no other
 * way. Quiet is not proof that nothing is in flight (a low-rate or streaming request may be),
 * but the pause (~20 ms, once) then falls on little. Once done it
 * stops; later idle periods are the memory reducer's.
 *
 * Measured (mesh bench proxies, 6 s after start): 62.3–63.4 MB RSS without, 58.3–58.5 MB with.
 */

/** How often the process's CPU time is read. */
export const SETTLE_TICK_MS = 1000;
/** Consecutive quiet ticks before the collection. */
export const QUIET_TICKS = 2;
/** A tick is quiet when the process used less than this fraction of it (1 %: ~10 ms a second). */
export const QUIET_CPU_FRACTION = 0.01;

/**
 * Collects every unreachable object and gives memory back (the inspector's
 * `HeapProfiler.collectGarbage`, V8's low-memory collection: the young generation and the page
 * pool shrunk, as the memory reducer does), in-process: no port is opened.
 */
export async function collectAllGarbage(): Promise<void> {
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
  readonly collect?: () => Promise<void>;
  /** Called once the collection ran (or failed: with its error). */
  readonly done?: (err?: unknown) => void;
}

/** Starts watching for quiet; the collection runs once. `stop()` cancels it if it has not run. */
export function settleHeapWhenQuiet(opts: HeapSettleOptions = {}): { stop(): void } {
  const tickMs = opts.tickMs ?? SETTLE_TICK_MS;
  const quietTicks = opts.quietTicks ?? QUIET_TICKS;
  const cpuMicros =
    opts.cpuMicros ??
    ((): number => {
      const u = process.cpuUsage();
      return u.user + u.system;
    });
  const collect = opts.collect ?? collectAllGarbage;
  const quietMicros = tickMs * 1000 * QUIET_CPU_FRACTION;
  let last = cpuMicros();
  let quiet = 0;
  const timer = setInterval(() => {
    const now = cpuMicros();
    const used = now - last;
    last = now;
    quiet = used < quietMicros ? quiet + 1 : 0;
    if (quiet < quietTicks) return;
    clearInterval(timer);
    let collecting: Promise<void>;
    try {
      collecting = collect();
    } catch (err) {
      // Never out of a timer callback: that would end the process.
      opts.done?.(err);
      return;
    }
    collecting.then(
      () => opts.done?.(),
      (err: unknown) => opts.done?.(err),
    );
  }, tickMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
