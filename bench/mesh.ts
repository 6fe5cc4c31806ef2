/**
 * `npm run bench -- mesh`: what the proxy pair costs on loopback. The client (this process, the
 * load generator) reaches the server apps (a separate process, bench/mesh-apps.ts) three ways:
 *
 * - `direct`: straight to the apps;
 * - `ward`: through a real client proxy (its outbound forward proxy: absolute-form HTTP/1,
 *   CONNECT for gRPC and TCP), mesh mTLS, and a real server proxy, with a real controller
 *   (bench/mesh-ward.ts);
 * - `nginx`: through two Debian nginx processes originating and terminating mTLS with the same
 *   PKI (bench/mesh-nginx.ts), as the reference; installed with apt-get when missing, skipped
 *   with a warning when that fails.
 *
 * For each protocol (HTTP/1.1 keep-alive, gRPC on one HTTP/2 session, opaque TCP 64-byte
 * ping-pong) and path: {@link FIXED_ROUNDS} open-loop rounds at {@link RATE_PER_SEC} (latency
 * from the scheduled send time), interleaved across the paths, and a closed-loop saturation run
 * (bench/mesh-load.ts). Results are named
 * `<path>/<protocol>/<load>` (`ward/http1/1000rps`, `nginx/grpc/max`, ...) with `p50Ms`, `p99Ms`,
 * `rps`, and for proxied paths the latency added over `direct` at the same load (`addedP50Ms`,
 * `addedP99Ms`) and the pair's resources during the measured window: `rssMb` (sum of both
 * proxies' peak RSS), `cpuPct` (sum of both proxies' CPU time / wall time × 100), and each
 * proxy's own (`outbound*`, `inbound*`). For ward, `majorGcsRounds` and `majorGcPauseMsRounds`
 * give each round's mark-compacts in outbound/inbound and their pause (from the proxies'
 * `nodejs_gc_duration_seconds`, warm-up included): a round with one of 10-40 ms has its p99
 * there. `appCpuPct` and `loadCpuPct` show the apps' and the generator's share of the machine,
 * `otherCpuPct` what processes outside the bench used during the window, and `stealPct` what the
 * hypervisor took from this virtual machine's cores (the highest over the runs; more than a
 * little of either means a disturbed measurement, and the bench warns).
 * `<path>/idle/<outbound|inbound>` rows give each proxy's RSS once it has sat idle for
 * {@link IDLE_SETTLE_MS} after it was ready, before any load (ward's against the 60 MB target):
 * V8's memory reducer compacts the heap of a process that stopped allocating some 8–10 s after
 * its last major GC, so a proxy's RSS right after start still holds the start-up garbage; that
 * figure is reported beside it as `startRssMb` (1 s after ready). The idle RSS is split into
 * `privateMb` (`RssAnon + RssShmem`: what each more pod costs; ward's against a 20 MB target) and
 * `fileMb` (`RssFile`: mostly the node binary's pages, which every node process shares); where
 * each megabyte goes is in bench/MEMORY.md.
 *
 * Then, in the same run, the same rounds in network namespaces (bench/mesh-linkerd.ts): Linkerd's
 * own proxy (the real linkerd2-proxy) only proxies redirected connections, so its pair is
 * compared with ward's pair in transparent mode in the same topology (`linkerd/*` against
 * `ward-netns/*`, both over `netns-direct/*`, and `ward-vs-linkerd/*` ratios), never with the
 * loopback rows above; skipped with a warning where that lab cannot run.
 *
 * Targets (ward/*\/1000rps): added p50 ≤ 0.5 ms and added p99 ≤ 2 ms. Every process — generator,
 * apps, both proxies, the controller — shares this machine's cores, so saturation figures are a
 * bound of the whole box, not of a proxy alone. `WARD_BENCH_MESH_QUICK=1` shortens every run
 * (for working on the bench; the figures are then noisier). To measure less:
 * `WARD_BENCH_MESH_PROTOCOLS=tcp` (comma-separated protocols), `WARD_BENCH_MESH_PATHS=netns` (only
 * the comparison with Linkerd; `loopback`: only the loopback paths), `WARD_BENCH_MESH_ROUNDS=N`
 * (fixed-rate rounds per path).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { BenchResult } from './harness.js';
import { runLinkerdComparison } from './mesh-linkerd.js';
import {
  grpcClient,
  http1Client,
  type LoadClient,
  type LoadStats,
  type Protocol,
  quantile,
  type Route,
  runClosedLoop,
  runFixedRate,
  selectedProtocols,
  selectedRounds,
  tcpClient,
} from './mesh-load.js';
import { ensureNginx, type NginxMesh, startNginxMesh } from './mesh-nginx.js';
import { OtherProcesses, ProcessProbe, type ProcessUsage, type ResidentMb, residentMb } from './mesh-proc.js';
import { type AppPorts, type MajorGcs, majorGcsOf, SERVICE_AUTHORITY, startWardMesh, type WardMesh } from './mesh-ward.js';

const HOST = '127.0.0.1';
export const RATE_PER_SEC = 1000;
const QUICK = process.env.WARD_BENCH_MESH_QUICK === '1';
/**
 * Fixed-rate rounds per path and protocol, interleaved across the paths (see measureProtocol).
 * Nine short rounds rather than five long ones: on a shared 2-vCPU machine, disturbances of the
 * whole machine (the hypervisor's steal, the generator itself sending late) come in episodes of
 * seconds, and in some runs they touched every other round; the direct path's own p99 then
 * reaches 2–20 ms and a proxied round's up to 66 ms. The median of nine outlasts four disturbed
 * rounds (five outlasted two), and a 4 s round (4,000 requests, the p99 from the 40 slowest)
 * is less often touched by an episode than a 6 s one. A path's rounds take a third longer.
 */
const FIXED_ROUNDS = selectedRounds(QUICK ? 1 : 9);
const FIXED = QUICK ? { warmupMs: 1000, measureMs: 3000 } : { warmupMs: 3000, measureMs: 4000 };
/** The warm-up of the later rounds (the connections and code are warm by then). */
const FIXED_NEXT_WARMUP_MS = 1000;
const SATURATION = QUICK ? { concurrency: 32, warmupMs: 500, measureMs: 2000 } : { concurrency: 32, warmupMs: 1000, measureMs: 8000 };
/** HTTP/1 keep-alive connections and TCP connections per client (the fixed-rate runs use few of them). */
const CONNECTIONS = 32;
const TARGET_ADDED_P50_MS = 0.5;
const TARGET_ADDED_P99_MS = 2;
const TARGET_IDLE_RSS_MB = 60;
/** Of which private (anonymous + shared memory pages; see bench/MEMORY.md). */
const TARGET_IDLE_PRIVATE_MB = 20;
/** Closed-loop load on the direct path per protocol before the first measurement. */
const GENERATOR_WARMUP_MS = QUICK ? 300 : 1500;
/** How long the proxies sit after start before their idle RSS is read (see the module comment). */
const IDLE_SETTLE_MS = QUICK ? 12_000 : 15_000;
/** When the RSS right after start is read. */
const START_RSS_MS = 1000;
const PROTOCOLS: readonly Protocol[] = selectedProtocols();
/** Which parts run (`WARD_BENCH_MESH_PATHS`: `loopback`, `netns`; unset: both). */
const PARTS = ((value = process.env.WARD_BENCH_MESH_PATHS ?? '') => {
  if (value === '') return { loopback: true, netns: true };
  if (value !== 'loopback' && value !== 'netns') throw new Error(`WARD_BENCH_MESH_PATHS: ${value} is neither loopback nor netns`);
  return { loopback: value === 'loopback', netns: value === 'netns' };
})();
/** Above this much CPU used outside the bench during a run (percent of one core), the bench warns. */
const OTHER_CPU_WARN_PCT = 10;
/** Above this much CPU taken by the hypervisor during a run (percent of one core), the bench warns. */
const STEAL_WARN_PCT = 5;

type PathName = 'direct' | 'ward' | 'nginx';
type LoadName = `${typeof RATE_PER_SEC}rps` | 'max';

/** One way to the apps: a route per protocol (undefined: not available) and the proxies to watch. */
interface Path {
  readonly name: PathName;
  readonly routes: Readonly<Record<Protocol, Route | undefined>>;
  /** [outbound, inbound] proxy pids; empty for direct. */
  readonly proxyPids: readonly number[];
  /** [outbound, inbound] admin ports of ward's proxies, whose `/metrics` count their GCs. */
  readonly adminPorts?: readonly number[];
}

/** One measured run of a path, protocol and load. */
interface Run {
  readonly stats: LoadStats;
  /** [outbound, inbound]; empty for direct. */
  readonly proxies: readonly ProcessUsage[];
  readonly app: ProcessUsage;
  /** This process: the load generator. */
  readonly generator: ProcessUsage;
  /** CPU that processes outside the bench used during the run, warm-up included (percent of one core). */
  readonly otherCpuPct: number;
  /** CPU the hypervisor took from the machine during the window (percent of one core). */
  readonly stealPct: number;
  /** ward's proxies' [outbound, inbound] mark-compacts during the run, warm-up included; empty otherwise. */
  readonly majorGcs: readonly MajorGcs[];
}

/** The runs of one path, protocol and load: {@link FIXED_ROUNDS} interleaved rounds at the fixed rate, one saturation run. */
interface Measured {
  readonly path: PathName;
  readonly protocol: Protocol;
  readonly load: LoadName;
  readonly runs: readonly Run[];
}

/** A progress line on stderr (stdout stays machine-readable). */
export const log = (line: string): void => {
  process.stderr.write(`${line}\n`);
};
export const round = (n: number, digits = 3): number => Math.round(n * 10 ** digits) / 10 ** digits;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length === 0 ? Number.NaN : sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

/** The apps process and its ports. */
export interface Apps {
  readonly child: ChildProcess;
  readonly ports: AppPorts;
}

/** Starts bench/mesh-apps.ts in its own process (stdin piped: it exits when this process dies). */
export async function startApps(): Promise<Apps> {
  const script = new URL('./mesh-apps.ts', import.meta.url).pathname;
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), script], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdout?.setEncoding('utf8');
  let out = '';
  const line = await Promise.race([
    new Promise<string>((resolve) => {
      child.stdout?.on('data', (c: string) => {
        out += c;
        if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')));
      });
    }),
    once(child, 'exit').then(([code]) => {
      throw new Error(`the bench apps exited (${String(code)}) before listening`);
    }),
  ]);
  child.stdout?.removeAllListeners('data');
  child.stdout?.resume();
  return { child, ports: JSON.parse(line) as AppPorts };
}

export async function stopApps(apps: Apps): Promise<void> {
  if (apps.child.exitCode !== null || apps.child.signalCode !== null) return;
  const exited = once(apps.child, 'exit');
  apps.child.kill('SIGTERM');
  await exited;
}

export function clientFor(protocol: Protocol, route: Route): Promise<LoadClient> {
  if (protocol === 'http1') return Promise.resolve(http1Client(route, CONNECTIONS));
  if (protocol === 'grpc') return grpcClient(route);
  return tcpClient(route, CONNECTIONS);
}

/**
 * Every path's runs for one protocol, each path on its own client (connected once, proven by a
 * first request). The fixed-rate rounds alternate between the paths (direct, ward, nginx,
 * direct, ...), so that a disturbance of the machine, or a slow drift, falls on every path
 * alike rather than on whichever ran then; the saturation runs follow. `benchPids` are all
 * processes the bench started (and itself).
 */
async function measureProtocol(protocol: Protocol, paths: readonly Path[], appsPid: number, benchPids: readonly number[]): Promise<Measured[]> {
  const clients: { path: Path; client: LoadClient }[] = [];
  const gcsNow = (path: Path): Promise<MajorGcs[]> => Promise.all((path.adminPorts ?? []).map(majorGcsOf));
  const gcsSince = async (path: Path, before: readonly MajorGcs[]): Promise<MajorGcs[]> =>
    (await gcsNow(path)).map((g, i) => ({ count: g.count - (before[i] as MajorGcs).count, pauseMs: g.pauseMs - (before[i] as MajorGcs).pauseMs }));
  /** One run of `load` on `path`: the probe inside the measured window; GC counts and other processes' CPU read around it. */
  const measure = async (path: Path, load: (probe: ProcessProbe) => Promise<LoadStats>): Promise<Run> => {
    const probe = new ProcessProbe(benchPids);
    const gcs = await gcsNow(path);
    const others = OtherProcesses.take(benchPids);
    const stats = await load(probe);
    const otherCpuPct = others.since();
    return {
      stats,
      proxies: path.proxyPids.map((pid) => probe.usage(pid)),
      app: probe.usage(appsPid),
      generator: probe.usage(process.pid),
      otherCpuPct,
      stealPct: probe.stealPct(),
      majorGcs: await gcsSince(path, gcs),
    };
  };
  try {
    for (const path of paths) {
      const route = path.routes[protocol];
      if (route === undefined) continue;
      const client = await clientFor(protocol, route);
      clients.push({ path, client });
      await client.request();
    }
    const fixed = new Map<Path, Run[]>(clients.map(({ path }) => [path, []]));
    for (let r = 0; r < FIXED_ROUNDS; r++) {
      const timing = r === 0 ? FIXED : { ...FIXED, warmupMs: FIXED_NEXT_WARMUP_MS };
      for (const { path, client } of clients) {
        log(
          `mesh: ${path.name}/${protocol}/${RATE_PER_SEC}rps round ${r + 1}/${FIXED_ROUNDS} (${timing.warmupMs / 1000} s warm-up + ${timing.measureMs / 1000} s) ...`,
        );
        const fixedRun = await measure(path, (probe) => runFixedRate(client, { ratePerSec: RATE_PER_SEC, ...timing, hooks: probe }));
        fixed.get(path)?.push(fixedRun);
      }
    }
    const measured: Measured[] = [];
    for (const { path, client } of clients) {
      log(`mesh: ${path.name}/${protocol}/max (closed loop, ${SATURATION.concurrency} in flight, ${SATURATION.measureMs / 1000} s) ...`);
      const max = await measure(path, (probe) => runClosedLoop(client, { ...SATURATION, hooks: probe }));
      measured.push(
        { path: path.name, protocol, load: `${RATE_PER_SEC}rps`, runs: fixed.get(path) ?? [] },
        { path: path.name, protocol, load: 'max', runs: [max] },
      );
    }
    return measured;
  } finally {
    for (const { client } of clients) client.close();
  }
}

/**
 * The result row of one measurement; `direct` is the same protocol and load on the direct path.
 * With several rounds, `p50Ms`/`p99Ms` are the medians of the rounds' quantiles and the added
 * latencies the medians of each round's difference to the direct path's same round (listed in
 * `addedP99MsRounds`); resources are the peak RSS and the mean CPU over the rounds.
 */
function resultOf(m: Measured, direct: Measured | undefined): BenchResult {
  const q = (run: Run, p: number) => quantile(run.stats.sortedMs, p);
  const p50 = median(m.runs.map((r) => q(r, 0.5)));
  const p99 = median(m.runs.map((r) => q(r, 0.99)));
  const rps = median(m.runs.map((r) => r.stats.rps));
  const mean = (f: (r: Run) => number) => m.runs.reduce((a, r) => a + f(r), 0) / m.runs.length;
  const out: Record<string, string | number | boolean | null> = {
    name: `${m.path}/${m.protocol}/${m.load}`,
    nsPerOp: null,
    opsPerSec: Math.round(rps),
    p50Ms: round(p50),
    p99Ms: round(p99),
    rps: Math.round(rps),
  };
  const first = m.runs[0];
  if (first !== undefined && first.proxies.length === 2) {
    const added = (p: number) => m.runs.map((r, i) => (direct?.runs[i] === undefined ? Number.NaN : q(r, p) - q(direct.runs[i] as Run, p)));
    const addedP99 = added(0.99);
    const dP50 = median(added(0.5));
    const dP99 = median(addedP99);
    const peak = (i: number) => Math.max(...m.runs.map((r) => (r.proxies[i] as ProcessUsage).peakRssMb));
    const cpu = (i: number) => mean((r) => (r.proxies[i] as ProcessUsage).cpuPct);
    Object.assign(out, {
      addedP50Ms: round(dP50),
      addedP99Ms: round(dP99),
      rssMb: round(peak(0) + peak(1), 1),
      cpuPct: round(cpu(0) + cpu(1), 1),
      outboundRssMb: round(peak(0), 1),
      inboundRssMb: round(peak(1), 1),
      outboundCpuPct: round(cpu(0), 1),
      inboundCpuPct: round(cpu(1), 1),
    });
    if (m.runs.length > 1) out.addedP99MsRounds = addedP99.map((v) => round(v)).join(' ');
    if (first.majorGcs.length === 2) {
      // Per round, outbound/inbound: a mark-compact pauses every request in flight for its duration.
      out.majorGcsRounds = m.runs.map((r) => r.majorGcs.map((g) => g.count).join('/')).join(' ');
      out.majorGcPauseMsRounds = m.runs.map((r) => r.majorGcs.map((g) => round(g.pauseMs, 1)).join('/')).join(' ');
    }
    if (m.path === 'ward' && m.load !== 'max') {
      out.targetMs = TARGET_ADDED_P50_MS;
      out.targetP99Ms = TARGET_ADDED_P99_MS;
      out.meetsTarget = dP50 <= TARGET_ADDED_P50_MS && dP99 <= TARGET_ADDED_P99_MS;
    }
  }
  Object.assign(out, {
    appCpuPct: round(
      mean((r) => r.app.cpuPct),
      1,
    ),
    loadCpuPct: round(
      mean((r) => r.generator.cpuPct),
      1,
    ),
    otherCpuPct: round(Math.max(0, ...m.runs.map((r) => r.otherCpuPct)), 1),
    stealPct: round(Math.max(0, ...m.runs.map((r) => r.stealPct)), 1),
    samples: m.runs.reduce((a, r) => a + r.stats.sortedMs.length, 0),
    errors: m.runs.reduce((a, r) => a + r.stats.errors, 0),
  });
  if (m.load !== 'max') out.lagP99Ms = round(Math.max(...m.runs.map((r) => r.stats.lagP99Ms)));
  return out as BenchResult;
}

/** A proxy pair's resident memory ([outbound, inbound]), read now. */
const pairRss = (outboundPid: number, inboundPid: number): [ResidentMb, ResidentMb] => [residentMb(outboundPid), residentMb(inboundPid)];

/** Idle memory rows of a proxy pair: `idle` read now, `start` read {@link START_RSS_MS} after ready. */
function idleRows(path: 'ward' | 'nginx', idle: readonly [ResidentMb, ResidentMb], start: readonly [ResidentMb, ResidentMb]): BenchResult[] {
  return (['outbound', 'inbound'] as const).map((role, i) => {
    const mb = idle[i] as ResidentMb;
    const row: Record<string, string | number | boolean | null> = {
      name: `${path}/idle/${role}`,
      nsPerOp: null,
      opsPerSec: null,
      rssMb: round(mb.rss, 1),
      privateMb: round(mb.private, 1),
      fileMb: round(mb.file, 1),
      startRssMb: round((start[i] as ResidentMb).rss, 1),
    };
    if (path === 'ward') {
      row.targetMb = TARGET_IDLE_RSS_MB;
      row.meetsTarget = mb.rss < TARGET_IDLE_RSS_MB;
      row.targetPrivateMb = TARGET_IDLE_PRIVATE_MB;
      row.meetsPrivateTarget = mb.private < TARGET_IDLE_PRIVATE_MB;
    }
    return row as BenchResult;
  });
}

/** One stderr line per protocol and load: ward against nginx (ratios only where both figures are positive). */
function logComparison(results: readonly BenchResult[]): void {
  const byName = new Map(results.map((r) => [r.name, r]));
  const vs = (field: string, w: BenchResult, n: BenchResult, unit = '') => {
    const [a, b] = [w[field], n[field]];
    if (typeof a !== 'number' || typeof b !== 'number') return `${field} n/a`;
    return `${field} ${a}${unit} vs ${b}${unit}${a > 0 && b > 0 ? ` (${(a / b).toFixed(2)}x)` : ''}`;
  };
  for (const protocol of PROTOCOLS) {
    for (const load of [`${RATE_PER_SEC}rps`, 'max']) {
      const w = byName.get(`ward/${protocol}/${load}`);
      const n = byName.get(`nginx/${protocol}/${load}`);
      if (w === undefined || n === undefined) continue;
      const parts = [vs('addedP50Ms', w, n, ' ms'), vs('addedP99Ms', w, n, ' ms'), vs('rps', w, n), vs('rssMb', w, n, ' MB'), vs('cpuPct', w, n, ' %')];
      log(`mesh: ward vs nginx ${protocol}/${load}: ${parts.join(', ')}`);
    }
  }
}

/** Runs the mesh suite: the loopback paths, then (their processes stopped) the netns comparison with Linkerd's proxy. */
export async function runMeshSuite(): Promise<BenchResult[]> {
  const results = PARTS.loopback ? await runLoopbackPaths() : [];
  if (PARTS.netns) results.push(...(await runLinkerdComparison()));
  return results;
}

/** The `direct`, `ward` and `nginx` paths on loopback. */
async function runLoopbackPaths(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'ward-bench-mesh-'));
  let apps: Apps | undefined;
  let ward: WardMesh | undefined;
  let nginx: NginxMesh | undefined;
  let ok = false;
  try {
    log(`mesh: ${QUICK ? 'QUICK mode (WARD_BENCH_MESH_QUICK=1), ' : ''}work directory ${dir}`);
    apps = await startApps();
    log(`mesh: apps up (pid ${apps.child.pid ?? '?'}): http1 :${apps.ports.http1}, grpc :${apps.ports.grpc}, tcp :${apps.ports.tcp}`);
    ward = await startWardMesh(dir, apps.ports);
    const wardReadyAt = performance.now();
    log(`mesh: ward controller and proxies up (outbound pid ${ward.outbound.pid}, inbound pid ${ward.inbound.pid}, forward proxy :${ward.outboundPort})`);
    await sleep(START_RSS_MS);
    const wardStartRss = pairRss(ward.outbound.pid, ward.inbound.pid);
    let nginxIdle: (() => Promise<BenchResult[]>) | undefined;

    const install = ensureNginx(log);
    if ('unavailable' in install) {
      log(`mesh: WARNING: nginx is unavailable (${install.unavailable}); the nginx reference rows are SKIPPED`);
    } else {
      if (install.streamModule === undefined) log('mesh: WARNING: nginx has no stream module; nginx/tcp rows are SKIPPED');
      try {
        nginx = await startNginxMesh(install, join(dir, 'nginx'), ward.identityDir, apps.ports);
        log(`mesh: nginx ${install.version} up (outbound pid ${nginx.outbound.pid}, inbound pid ${nginx.inbound.pid})`);
        const [nOut, nIn] = [nginx.outbound.pid, nginx.inbound.pid];
        const nginxReadyAt = performance.now();
        await sleep(START_RSS_MS);
        const nginxStartRss = pairRss(nOut, nIn);
        nginxIdle = async () => {
          await sleep(IDLE_SETTLE_MS - (performance.now() - nginxReadyAt));
          return idleRows('nginx', pairRss(nOut, nIn), nginxStartRss);
        };
      } catch (e) {
        log(`mesh: WARNING: nginx did not start (${e instanceof Error ? e.message : String(e)}); the nginx reference rows are SKIPPED`);
      }
    }

    log(`mesh: letting the proxies sit idle for ${IDLE_SETTLE_MS / 1000} s before reading their idle RSS ...`);
    await sleep(IDLE_SETTLE_MS - (performance.now() - wardReadyAt));
    const results: BenchResult[] = idleRows('ward', pairRss(ward.outbound.pid, ward.inbound.pid), wardStartRss);
    if (nginxIdle !== undefined) results.push(...(await nginxIdle()));

    const forwardProxyPort = ward.outboundPort;
    const forward = (protocol: Protocol): Route => ({
      kind: 'forward-proxy',
      proxyHost: HOST,
      proxyPort: forwardProxyPort,
      authority: SERVICE_AUTHORITY[protocol],
    });
    const directRoutes: Record<Protocol, Route> = {
      http1: { kind: 'direct', host: HOST, port: apps.ports.http1 },
      grpc: { kind: 'direct', host: HOST, port: apps.ports.grpc },
      tcp: { kind: 'direct', host: HOST, port: apps.ports.tcp },
    };
    const paths: Path[] = [
      { name: 'direct', routes: directRoutes, proxyPids: [] },
      {
        name: 'ward',
        routes: { http1: forward('http1'), grpc: forward('grpc'), tcp: forward('tcp') },
        proxyPids: [ward.outbound.pid, ward.inbound.pid],
        adminPorts: ward.adminPorts,
      },
    ];
    if (nginx !== undefined) {
      const p = nginx.ports;
      paths.push({
        name: 'nginx',
        routes: {
          http1: { kind: 'direct', host: HOST, port: p.http1 },
          grpc: { kind: 'direct', host: HOST, port: p.grpc },
          tcp: p.tcp === undefined ? undefined : { kind: 'direct', host: HOST, port: p.tcp },
        },
        proxyPids: [nginx.outbound.pid, nginx.inbound.pid],
      });
    }

    // The generator's own code gets optimised and its heap settles here, not in the first measured run.
    log(`mesh: load generator warm-up (direct, ${GENERATOR_WARMUP_MS} ms per protocol) ...`);
    for (const protocol of PROTOCOLS) {
      const client = await clientFor(protocol, directRoutes[protocol]);
      try {
        await runClosedLoop(client, { concurrency: SATURATION.concurrency, warmupMs: GENERATOR_WARMUP_MS, measureMs: 0 });
      } finally {
        client.close();
      }
    }
    const appsPid = apps.child.pid as number;
    const benchPids = [process.pid, appsPid, ward.controller.pid, ...paths.flatMap((p) => p.proxyPids)];
    const measured: Measured[] = [];
    for (const protocol of PROTOCOLS) measured.push(...(await measureProtocol(protocol, paths, appsPid, benchPids)));
    const runs = measured.flatMap((m) => m.runs);
    const busy = runs.filter((r) => r.otherCpuPct > OTHER_CPU_WARN_PCT);
    if (busy.length > 0) {
      log(
        `mesh: WARNING: processes outside the bench used > ${OTHER_CPU_WARN_PCT} % CPU during ${busy.length} of ${runs.length} runs ` +
          `(up to ${Math.round(Math.max(...busy.map((r) => r.otherCpuPct)))} %, see otherCpuPct): those figures are disturbed`,
      );
    }
    const stolen = runs.filter((r) => r.stealPct > STEAL_WARN_PCT);
    if (stolen.length > 0) {
      log(
        `mesh: WARNING: the hypervisor took > ${STEAL_WARN_PCT} % CPU from this machine during ${stolen.length} of ${runs.length} runs ` +
          `(up to ${Math.round(Math.max(...stolen.map((r) => r.stealPct)))} %, see stealPct): those figures are disturbed`,
      );
    }
    const direct = (m: Measured) => measured.find((d) => d.path === 'direct' && d.protocol === m.protocol && d.load === m.load);
    for (const path of ['direct', 'ward', 'nginx'] as const) {
      for (const m of measured) if (m.path === path) results.push(resultOf(m, direct(m)));
    }
    logComparison(results);
    ok = true;
    return results;
  } finally {
    await nginx?.stop();
    await ward?.stop();
    if (apps !== undefined) await stopApps(apps);
    if (ok) rmSync(dir, { recursive: true, force: true });
    else log(`mesh: logs kept in ${dir}`);
  }
}
