/**
 * Shared benchmark plumbing: the result shape every suite reports, a tinybench wrapper that
 * batches sub-microsecond operations, and a median timer for one-shot measurements.
 */
import { performance } from 'node:perf_hooks';
import { Bench, type FnReturnedObject } from 'tinybench';

/** Extra fields a result may carry (targets, counts, scenario facts). JSON-serialisable values only. */
export type Extra = Readonly<Record<string, string | number | boolean | null>>;

/**
 * One reported measurement. `nsPerOp`/`opsPerSec` are null only where an operation time makes no
 * sense (memory). Results with a target carry `targetNs`/`targetMs`/`targetMb` and `meetsTarget`.
 */
export interface BenchResult {
  readonly name: string;
  readonly nsPerOp: number | null;
  readonly opsPerSec: number | null;
  readonly [extra: string]: string | number | boolean | null;
}

/** A suite: a name on the command line and a function producing its results. */
export interface Suite {
  readonly name: string;
  run(): Promise<BenchResult[]>;
  /** Left out of `all` (a suite that needs its own settings to mean anything). */
  readonly notInAll?: boolean;
}

/** A micro-benchmark task: `op` is one operation; its return value feeds the dead-code guard. */
export interface MicroTask {
  readonly name: string;
  readonly op: () => number;
  /** Operations per timed call; sub-microsecond operations need batches to beat timer resolution. */
  readonly batch: number;
  readonly targetNs?: number;
  readonly extra?: Extra;
}

/** Keeps results observable so V8 cannot eliminate the measured work. */
let sink = 0;

/** Returns the dead-code guard's accumulator (printed nowhere; read to keep it live). */
export function sinkValue(): number {
  return sink;
}

/** Rounds to 3 significant decimals for output. */
function round(n: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/**
 * Runs tasks with tinybench (warmup on, ~`timeMs` of measurement each). Each sample is one batch
 * timed with `performance.now()` and reported per operation through `overriddenDuration`, so the
 * timer's own cost (~30-60 ns) is amortised over the batch.
 */
export async function runMicro(tasks: readonly MicroTask[], timeMs = 1000): Promise<BenchResult[]> {
  const bench = new Bench({ time: timeMs, warmup: true, warmupTime: 250, iterations: 64 });
  for (const t of tasks) {
    const { op, batch } = t;
    bench.add(t.name, (): FnReturnedObject => {
      let acc = 0;
      const t0 = performance.now();
      for (let i = 0; i < batch; i++) acc += op();
      const elapsed = performance.now() - t0;
      sink = (sink + acc) | 0;
      return { overriddenDuration: elapsed / batch, overriddenIterationCost: elapsed };
    });
  }
  await bench.run();
  return tasks.map((t) => {
    const task = bench.getTask(t.name);
    const r = task?.result;
    if (r === undefined || (r.state !== 'completed' && r.state !== 'aborted-with-statistics')) {
      const why = r?.state === 'errored' ? r.error.message : (r?.state ?? 'missing');
      throw new Error(`benchmark ${t.name} did not complete: ${why}`);
    }
    const nsPerOp = r.latency.mean * 1e6;
    const out: Record<string, string | number | boolean | null> = {
      name: t.name,
      nsPerOp: round(nsPerOp, 1),
      opsPerSec: Math.round(1e9 / nsPerOp),
      p50Ns: round(r.latency.p50 * 1e6, 1),
      p99Ns: round(r.latency.p99 * 1e6, 1),
      rmePct: round(r.latency.rme, 2),
      samples: r.latency.samplesCount,
      batch: t.batch,
    };
    if (t.targetNs !== undefined) {
      out.targetNs = t.targetNs;
      out.meetsTarget = nsPerOp < t.targetNs;
    }
    Object.assign(out, t.extra);
    return out as BenchResult;
  });
}

/** Median of a non-empty list. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** Result of a one-shot measurement expressed in the common shape. */
export function oneShotResult(name: string, samplesMs: readonly number[], targetMs: number | undefined, extra: Extra): BenchResult {
  const ms = median(samplesMs);
  const out: Record<string, string | number | boolean | null> = {
    name,
    nsPerOp: Math.round(ms * 1e6),
    opsPerSec: round(1000 / ms, 3),
    ms: round(ms, 3),
    minMs: round(Math.min(...samplesMs), 3),
    maxMs: round(Math.max(...samplesMs), 3),
    reps: samplesMs.length,
  };
  if (targetMs !== undefined) {
    out.targetMs = targetMs;
    out.meetsTarget = ms < targetMs;
  }
  Object.assign(out, extra);
  return out as BenchResult;
}

/** Wall-clock milliseconds of `fn`. */
export function timeMs(fn: () => void): number {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}
