/**
 * `npm run bench -- mesh-ab`: an interleaved A/B of the proxies' node options, for deciding
 * whether a V8 or node setting helps the mesh's latency. On a small shared machine one run's
 * p99 moves by milliseconds from round to round (the mesh suite's nginx rounds too), far more
 * than most settings change it, so two full `mesh` runs compare noise. Here two ward meshes
 * (controller and proxy pair each) run at once against the same apps, and fixed-rate rounds
 * alternate between them (A B, B A, ...): a disturbance falls on both alike, and each round pair
 * gives one difference.
 *
 * - `WARD_BENCH_AB_A`, `WARD_BENCH_AB_B`: node options added to mesh A's and mesh B's proxies
 *   (space-separated; after the ones `ward up` uses), e.g. `WARD_BENCH_AB_B=--single-threaded-gc`.
 * - `WARD_BENCH_AB_A_BIN`, `WARD_BENCH_AB_B_BIN`: the `bin/ward.js` mesh A's and mesh B's proxies
 *   run (default this checkout's), to compare two builds: another checkout's (a `git worktree` of
 *   the commit before a change, with its `node_modules` and `dist/bundle` built).
 * - `WARD_BENCH_AB_PROTOCOLS`: comma-separated, default `http1,grpc`.
 * - `WARD_BENCH_AB_ROUNDS`: round pairs per protocol, default 16; each round 0.5 s warm-up and
 *   3 s measured at {@link RATE_PER_SEC} requests/s.
 *
 * Rows: `ab/<protocol>/<rate>rps/a` and `/b` (medians over the rounds of p50 and p99, and of the
 * pair's CPU per request), and `ab/<protocol>/<rate>rps/b-a`: the median of the paired
 * differences and how many rounds B had the lower p99 (a sign count; 12 of 16 or more is
 * unlikely by chance, p < 0.05).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BenchResult } from './harness.js';
import { median } from './harness.js';
import { type Apps, clientFor, log, RATE_PER_SEC, round, startApps, stopApps } from './mesh.js';
import { type LoadClient, type Protocol, quantile, runClosedLoop, runFixedRate } from './mesh-load.js';
import { cpuSeconds } from './mesh-proc.js';
import { SERVICE_AUTHORITY, splitNodeArgs, startWardMesh, type WardMesh } from './mesh-ward.js';

const PROTOCOLS: readonly Protocol[] = ['http1', 'grpc', 'tcp'];
const ROUND = { warmupMs: 500, measureMs: 3000 };

/** The options this run compares, read from the environment; throws on a bad value. */
function options(): { a: string[]; b: string[]; aBin?: string; bBin?: string; protocols: Protocol[]; rounds: number } {
  const protocols = (process.env.WARD_BENCH_AB_PROTOCOLS ?? 'http1,grpc').split(',').map((p) => p.trim());
  for (const p of protocols) {
    if (!PROTOCOLS.includes(p as Protocol)) throw new Error(`WARD_BENCH_AB_PROTOCOLS: unknown protocol ${JSON.stringify(p)} (one of ${PROTOCOLS.join(', ')})`);
  }
  const rounds = Number(process.env.WARD_BENCH_AB_ROUNDS ?? 16);
  if (!Number.isInteger(rounds) || rounds < 2 || rounds > 200)
    throw new Error(`WARD_BENCH_AB_ROUNDS: ${JSON.stringify(process.env.WARD_BENCH_AB_ROUNDS)} is not a whole number from 2 to 200`);
  const bins = { aBin: process.env.WARD_BENCH_AB_A_BIN, bBin: process.env.WARD_BENCH_AB_B_BIN };
  for (const [k, v] of Object.entries(bins))
    if (v !== undefined && !existsSync(v)) throw new Error(`${k === 'aBin' ? 'WARD_BENCH_AB_A_BIN' : 'WARD_BENCH_AB_B_BIN'}: ${v} does not exist`);
  return {
    a: splitNodeArgs(process.env.WARD_BENCH_AB_A),
    b: splitNodeArgs(process.env.WARD_BENCH_AB_B),
    ...(bins.aBin === undefined ? {} : { aBin: bins.aBin }),
    ...(bins.bBin === undefined ? {} : { bBin: bins.bBin }),
    protocols: protocols as Protocol[],
    rounds,
  };
}

interface Side {
  readonly name: 'a' | 'b';
  readonly args: readonly string[];
  readonly bin: string | undefined;
  readonly mesh: WardMesh;
}

/** One measured round of a side. */
interface Round {
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Outbound plus inbound CPU per request, microseconds (warm-up included in both). */
  readonly cpuUs: number;
}

async function measureRound(side: Side, client: LoadClient): Promise<Round> {
  const pids = [side.mesh.outbound.pid, side.mesh.inbound.pid] as number[];
  const before = pids.map(cpuSeconds);
  const stats = await runFixedRate(client, { ratePerSec: RATE_PER_SEC, ...ROUND });
  const cpu = pids.reduce((sum, pid, i) => sum + cpuSeconds(pid) - (before[i] as number), 0);
  const requests = (RATE_PER_SEC * (ROUND.warmupMs + ROUND.measureMs)) / 1000;
  if (stats.errors > 0) throw new Error(`mesh ${side.name}: ${stats.errors} requests failed`);
  return { p50Ms: quantile(stats.sortedMs, 0.5), p99Ms: quantile(stats.sortedMs, 0.99), cpuUs: (cpu / requests) * 1e6 };
}

function rows(protocol: Protocol, sides: readonly Side[], runs: Record<'a' | 'b', Round[]>): BenchResult[] {
  const name = `ab/${protocol}/${RATE_PER_SEC}rps`;
  const out: BenchResult[] = sides.map((s) => {
    const rs = runs[s.name];
    return {
      name: `${name}/${s.name}`,
      nsPerOp: null,
      opsPerSec: RATE_PER_SEC,
      p50Ms: round(median(rs.map((r) => r.p50Ms))),
      p99Ms: round(median(rs.map((r) => r.p99Ms))),
      cpuUsPerRequest: Math.round(median(rs.map((r) => r.cpuUs))),
      p99MsRounds: rs.map((r) => r.p99Ms.toFixed(2)).join(' '),
      nodeArgs: s.args.join(' '),
      ...(s.bin === undefined ? {} : { wardBin: s.bin }),
    };
  });
  const diff = (f: (r: Round) => number) => runs.b.map((b, i) => f(b) - f(runs.a[i] as Round));
  const p99 = diff((r) => r.p99Ms);
  out.push({
    name: `${name}/b-a`,
    nsPerOp: null,
    opsPerSec: null,
    medianDiffP50Ms: round(median(diff((r) => r.p50Ms))),
    medianDiffP99Ms: round(median(p99)),
    medianDiffCpuUsPerRequest: Math.round(median(diff((r) => r.cpuUs))),
    bLowerP99Rounds: `${p99.filter((d) => d < 0).length}/${p99.length}`,
  });
  return out;
}

/** Runs the A/B suite. */
export async function runMeshAbSuite(): Promise<BenchResult[]> {
  const opts = options();
  const dir = mkdtempSync(join(tmpdir(), 'ward-bench-mesh-ab-'));
  let apps: Apps | undefined;
  const sides: Side[] = [];
  let ok = false;
  try {
    const bin = (b: string | undefined): string => (b === undefined ? '' : ` ${b}`);
    log(
      `mesh-ab: A = [${opts.a.join(' ')}]${bin(opts.aBin)}, B = [${opts.b.join(' ')}]${bin(opts.bBin)}, ${opts.rounds} round pairs per protocol, work directory ${dir}`,
    );
    apps = await startApps();
    for (const [name, args, wardBin] of [
      ['a', opts.a, opts.aBin],
      ['b', opts.b, opts.bBin],
    ] as const) {
      const mesh = await startWardMesh(join(dir, name), apps.ports, args, wardBin);
      sides.push({ name, args, bin: wardBin, mesh });
    }
    const results: BenchResult[] = [];
    for (const protocol of opts.protocols) {
      const clients = await Promise.all(
        sides.map((s) =>
          clientFor(protocol, { kind: 'forward-proxy', proxyHost: '127.0.0.1', proxyPort: s.mesh.outboundPort, authority: SERVICE_AUTHORITY[protocol] }),
        ),
      );
      try {
        for (const c of clients) await runClosedLoop(c, { concurrency: 32, warmupMs: 1500, measureMs: 0 });
        const runs: Record<'a' | 'b', Round[]> = { a: [], b: [] };
        for (let r = 0; r < opts.rounds; r++) {
          const order = r % 2 === 0 ? [0, 1] : [1, 0];
          for (const i of order) {
            const side = sides[i] as Side;
            runs[side.name].push(await measureRound(side, clients[i] as LoadClient));
          }
          const a = runs.a[r] as Round;
          const b = runs.b[r] as Round;
          log(
            `mesh-ab: ${protocol} round ${r + 1}/${opts.rounds}: p99 A ${a.p99Ms.toFixed(2)} B ${b.p99Ms.toFixed(2)} ms, CPU/request A ${a.cpuUs.toFixed(0)} B ${b.cpuUs.toFixed(0)} µs`,
          );
        }
        results.push(...rows(protocol, sides, runs));
      } finally {
        for (const c of clients) c.close();
      }
    }
    ok = true;
    return results;
  } finally {
    for (const s of sides) await s.mesh.stop();
    if (apps !== undefined) await stopApps(apps);
    if (ok) rmSync(dir, { recursive: true, force: true });
    else log(`mesh-ab: logs kept in ${dir}`);
  }
}
