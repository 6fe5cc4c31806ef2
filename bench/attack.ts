/**
 * `npm run bench -- attack`: what exhaustion attacks cost one inbound proxy, and whether a healthy
 * meshed client beside the attack notices (issue 22, items 7–9). Each attack runs on a fresh mesh
 * of bench/mesh-ward.ts (a real controller, the server pod's inbound `ward proxy` in front of the
 * bench apps, the client pod's outbound `ward proxy`), with one more policy: the gRPC and opaque
 * ports also admit unauthenticated clients from any network, so plaintext attack connections are
 * served and forwarded as far as the proxy goes (the worst case; a port admitting only meshed
 * clients refuses plaintext opaque connections outright).
 *
 * - `h2-unfinished-headers` (7): plaintext HTTP/2 to the gRPC port: the preface, SETTINGS, then
 *   HEADERS without END_HEADERS and CONTINUATION frames, {@link H2_BLOCK_BYTES} of header block
 *   in all (below twice the 64 KiB header list bound, where the proxy fails the connection), then
 *   silence.
 * - `tls-half-open/app`, `tls-half-open/mesh` (8): a real ClientHello (OpenSSL's, from node:tls)
 *   with the server proxy's identity as SNI, then silence, on the HTTP/1 app port and on the mesh
 *   port (with the mesh ALPN there).
 * - `opaque-held` (9): plaintext to the opaque port, one byte each, then silence.
 * - `none`: no attack, the baseline of the healthy client's latency on this machine.
 *
 * The attacker is its own process (bench/attack-client.ts), from its own loopback address, and
 * the attacked apps run in another process than the healthy client's (bench/mesh-apps.ts twice). During
 * the attack window (opening for at most {@link OPEN_MS}, holding until {@link HOLD_MS} after the
 * start, closing, {@link WINDOW_TAIL_MS} more) the healthy client sends HTTP/1 GETs at
 * {@link HEALTHY_RPS} through the outbound proxy and mesh TLS to the HTTP/1 port, open loop
 * (latency from the scheduled send, bench/mesh-load.ts). The inbound proxy's RSS (`VmRSS`) is
 * sampled every {@link SAMPLE_MS}: `idleRssMb` just before the window (after {@link IDLE_SETTLE_MS}
 * of quiet from start), `peakRssMb` over the window and the {@link AFTER_MS} after it, `afterRssMb`
 * {@link AFTER_MS} after the attack closed its connections (`rssEvery5sMb`: the samples every 5 s
 * from the attack's start). `idleBrkHeapMb`/`afterBrkHeapMb` are the resident part of its
 * `[heap]` mapping, glibc's main malloc arena (V8's heap is mapped elsewhere): what of the RSS
 * malloc holds. Also its peak open descriptors, its `inbound_tcp_errors_total` and
 * `inbound_http_errors_total` increments over the run (`shedUnfinished`, `shedOrRefusedAtLimit`:
 * the connection-limit reasons), the attacker's view (`opened`, `failed`, `closedByProxy`,
 * `openAtHoldEnd`), and `healthyMaxMsEvery5s`, the healthy client's slowest request (from its
 * actual send) in each 5 s of the attack, and its five slowest and failed requests with their send
 * time from the attack's start: where the p99 and the errors came from; `slowAtOutbound` and
 * `slowAtInbound`, the responses each proxy itself timed at over 200 ms, say in which leg. `kernelTcp` counts the
 * machine's TCP retransmissions, SYN retries and accept queue overflows over the window,
 * `machineBusyPct` the machine's busy CPU then and `otherCpuPct` the part of it outside the bench's
 * processes (percent of one core; kernel work on their behalf counts as other): on a small
 * shared machine the attack's own close (the attacker, the attacked apps and the kernel tearing
 * down thousands of loopback connections) can leave the healthy path no CPU for a moment.
 *
 * Targets per attack: `peakRssMb` < {@link TARGET_PEAK_RSS_MB}, `afterRssMb` within
 * {@link TARGET_AFTER_RATIO} of idle, 0 healthy errors, healthy p99 < {@link TARGET_P99_MS} ms.
 * About 100 s per attack: not in `all`. `WARD_BENCH_ATTACK=<name,...>` runs only those attacks,
 * `WARD_BENCH_ATTACK_CONNECTIONS=<n>` opens at most n connections per attack;
 * `WARD_BENCH_ATTACK_TRACE=1` logs the attack's start (epoch ms) and the healthy path's ports (the
 * outbound's, the inbound's mesh port, the application's), to line up a packet capture with it;
 * `WARD_BENCH_ATTACK_HEALTHY=direct` sends the healthy client straight to its application, past
 * both proxies (the machine's own share of the healthy p99 under each attack);
 * `WARD_BENCH_PROXY_NODE_ARGS` passes node options to the proxies (e.g. `--trace-gc`); the
 * proxies inherit the bench's environment (e.g. `MALLOC_ARENA_MAX`).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { connect as tlsConnect } from 'node:tls';
import type { AttackOptions, AttackReport } from './attack-client.js';
import type { BenchResult } from './harness.js';
import { log, round, startApps, stopApps } from './mesh.js';
import { http1Client, type LoadClient, quantile, runFixedRate } from './mesh-load.js';
import { cpuSeconds, rssMb } from './mesh-proc.js';
import { SERVER_ID, SERVICE_AUTHORITY, startWardMesh, type WardMesh } from './mesh-ward.js';

const HOST = '127.0.0.1';
const HEALTHY_RPS = 100;
const HEALTHY_CONNECTIONS = 8;
const HEALTHY_WARMUP_MS = 2000;
/** The attacker stops opening connections this long after it started. */
const OPEN_MS = 15_000;
/** The attacker closes every connection this long after it started. */
const HOLD_MS = 40_000;
/** The healthy client's window goes on this long after the attack closed. */
const WINDOW_TAIL_MS = 2000;
/** When the after-attack RSS is read, from the attack's close. */
const AFTER_MS = 30_000;
/** How long a fresh mesh sits before its idle RSS is read (V8's memory reducer and runtime/heap-settle run by then: see bench/mesh.ts). */
const IDLE_SETTLE_MS = 15_000;
const SAMPLE_MS = 250;
/** Clock ticks per second of `/proc/stat` (USER_HZ, 100 on Linux). */
const CLK_TCK = 100;
const FD_SAMPLE_MS = 1000;
const CONCURRENCY = 256;
const TARGET_PEAK_RSS_MB = 200;
const TARGET_AFTER_RATIO = 1.2;
const TARGET_P99_MS = 100;
/** A `response_latency_ms` bucket bound: responses slower than this are counted per proxy. */
const SLOW_MS = 200;
/** HTTP/2 header block bytes per connection (7 frames of 16 KiB = 112 KiB). */
const H2_BLOCK_BYTES = 7 * 16_384;
const MESH_ALPN = 'transport.l5d.io/v1';
/** The healthy client calls its application directly, past both proxies: what the attack costs the machine itself. */
const healthyDirect = process.env.WARD_BENCH_ATTACK_HEALTHY === 'direct';

type AttackName = 'none' | 'h2-unfinished-headers' | 'tls-half-open/app' | 'tls-half-open/mesh' | 'opaque-held';

interface Attack {
  readonly name: AttackName;
  readonly issueItem: number;
  readonly count: number;
  /** Which inbound port: a pod port, or the mesh port. */
  readonly target: 8080 | 8081 | 9000 | 'mesh';
  readonly payload: () => Promise<Buffer>;
  /** The attacker's source address (one per attack, so no attack meets another's TIME_WAIT). */
  readonly localAddress: string;
}

const ATTACKS: readonly Attack[] = [
  // The same run without an attack: what the healthy client sees on this machine anyway.
  { name: 'none', issueItem: 0, count: 0, target: 9000, payload: () => Promise.resolve(Buffer.alloc(0)), localAddress: '127.0.1.6' },
  { name: 'h2-unfinished-headers', issueItem: 7, count: 2000, target: 8081, payload: () => Promise.resolve(h2UnfinishedHeaders()), localAddress: '127.0.1.7' },
  { name: 'tls-half-open/app', issueItem: 8, count: 6000, target: 8080, payload: () => clientHello(undefined), localAddress: '127.0.1.8' },
  { name: 'tls-half-open/mesh', issueItem: 8, count: 6000, target: 'mesh', payload: () => clientHello(MESH_ALPN), localAddress: '127.0.1.9' },
  { name: 'opaque-held', issueItem: 9, count: 10_000, target: 9000, payload: () => Promise.resolve(Buffer.from('x')), localAddress: '127.0.1.10' },
];

/** The gRPC and opaque ports also admit anyone (see the module comment). */
const OPEN_PORTS_MANIFEST = `apiVersion: policy.linkerd.io/v1alpha1
kind: NetworkAuthentication
metadata: {name: anywhere, namespace: demo}
spec:
  networks: [{cidr: 0.0.0.0/0}]
${['grpc', 'tcp']
  .map(
    (p) => `---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: server-${p}-anywhere, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: server-${p}}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: NetworkAuthentication, name: anywhere}
`,
  )
  .join('')}`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// === payloads ===

function h2Frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId, 5);
  return Buffer.concat([head, payload]);
}

/**
 * The preface, an empty SETTINGS, then a request's header block that never ends: HEADERS
 * (END_STREAM, no END_HEADERS) and CONTINUATION frames without END_HEADERS, of 16 KiB each. The
 * block is HPACK literals (`x-pad: aaa…`), valid as far as it goes.
 */
function h2UnfinishedHeaders(): Buffer {
  const entry = Buffer.concat([Buffer.from([0x00, 0x05]), Buffer.from('x-pad'), Buffer.from([0x7f, 0xe9, 0x06]), Buffer.alloc(1000, 0x61)]);
  const block = Buffer.alloc(H2_BLOCK_BYTES);
  for (let off = 0; off < block.length; off += entry.length) entry.copy(block, off);
  const frames = [Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), h2Frame(0x4, 0, 0, Buffer.alloc(0))];
  for (let off = 0; off < block.length; off += 16_384) {
    frames.push(h2Frame(off === 0 ? 0x1 : 0x9, off === 0 ? 0x1 : 0, 1, block.subarray(off, off + 16_384)));
  }
  return Buffer.concat(frames);
}

/** The first flight of a node:tls (OpenSSL) client to the server proxy's identity: a real ClientHello. */
async function clientHello(alpn: string | undefined): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const server = createServer((s) => {
    s.on('data', (c: Buffer) => {
      chunks.push(c);
      s.destroy();
    });
  });
  server.listen(0, HOST);
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  const client = tlsConnect({ host: HOST, port, servername: SERVER_ID, ...(alpn === undefined ? {} : { ALPNProtocols: [alpn] }) });
  // Not events.once: it rejects on the 'error' the capture's reset causes.
  await new Promise<void>((resolve) => {
    client.on('error', () => {});
    client.once('close', () => resolve());
  });
  server.close();
  const hello = Buffer.concat(chunks);
  if (hello[0] !== 0x16) throw new Error('no ClientHello captured');
  return hello;
}

// === the proxy's side ===

/** The inbound proxy's listen ports: each pod port's and the mesh port (from its ready line). */
function inboundPorts(mesh: WardMesh): { readonly pod: ReadonlyMap<number, number>; readonly mesh: number } {
  const line = /ward proxy ready: .*$/m.exec(mesh.inbound.log())?.[0] ?? '';
  const meshPort = /mesh :(\d+)/.exec(line)?.[1];
  if (meshPort === undefined) throw new Error(`no ready line in ${mesh.inbound.logFile}`);
  const pod = new Map<number, number>();
  for (const m of line.matchAll(/(\d+)@(\d+)->/g)) pod.set(Number(m[1]), Number(m[2]));
  return { pod, mesh: Number(meshPort) };
}

/** `inbound_tcp_errors_total` and `inbound_http_errors_total` by `family/error`, from the proxy's `/metrics`. */
async function errorCounts(adminPort: number): Promise<Map<string, number>> {
  const text = await (await fetch(`http://${HOST}:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^inbound_(tcp|http)_errors_total\{error="([^"]*)"[^}]*\} (\S+)$/gm)) {
    const key = `${m[1]}/${m[2]}`;
    out.set(key, (out.get(key) ?? 0) + Number(m[3]));
  }
  return out;
}

/**
 * Responses the proxy measured at over {@link SLOW_MS} ms (`response_latency_ms`, every series):
 * set beside the healthy client's own latency, where a slow request spent its time — the
 * outbound's includes the inbound's and the application's, the inbound's only the application's.
 */
async function slowResponses(adminPort: number): Promise<number> {
  const text = await (await fetch(`http://${HOST}:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  let total = 0;
  let fast = 0;
  for (const m of text.matchAll(/^response_latency_ms_bucket\{[^}]*le="([^"]+)"[^}]*\} (\S+)$/gm)) {
    if (m[1] === '+Inf') total += Number(m[2]);
    else if (Number(m[1]) === SLOW_MS) fast += Number(m[2]);
  }
  return total - fast;
}

/**
 * Resident MB of the process's `[heap]` mapping (glibc's main malloc arena, grown with brk; V8's
 * heap pages are mmapped elsewhere), NaN when unknown: what of the RSS is malloc's.
 */
function brkHeapMb(pid: number): number {
  try {
    const m = /\[heap\]\n(?:[A-Za-z_]+:.*\n)*?Rss:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/smaps`, 'utf8'));
    return m === null ? 0 : Number(m[1]) / 1024;
  } catch {
    return Number.NaN;
  }
}

/** Machine-wide TCP counters (`/proc/net/snmp`, `/proc/net/netstat`): retransmissions, SYN retries, accept queue overflows. */
const KERNEL_TCP_COUNTERS = ['RetransSegs', 'TCPSynRetrans', 'TCPTimeouts', 'ListenOverflows', 'ListenDrops'] as const;

function kernelTcpCounters(): Map<string, number> {
  const out = new Map<string, number>();
  for (const file of ['/proc/net/snmp', '/proc/net/netstat']) {
    let lines: string[];
    try {
      lines = readFileSync(file, 'utf8').split('\n');
    } catch {
      continue;
    }
    for (let i = 0; i + 1 < lines.length; i += 2) {
      const names = (lines[i] as string).split(' ');
      const values = (lines[i + 1] as string).split(' ');
      names.forEach((n, j) => {
        if ((KERNEL_TCP_COUNTERS as readonly string[]).includes(n)) out.set(n, Number(values[j]));
      });
    }
  }
  return out;
}

/** The machine's [busy, total] CPU ticks so far (`/proc/stat`; busy: all but idle and iowait). */
function machineTicks(): [number, number] {
  try {
    const f = (readFileSync('/proc/stat', 'utf8').split('\n', 1)[0] ?? '').trim().split(/\s+/).slice(1, 9).map(Number);
    const total = f.reduce((a, b) => a + b, 0);
    return [total - (f[3] ?? 0) - (f[4] ?? 0), total];
  } catch {
    return [Number.NaN, Number.NaN];
  }
}

function openFds(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return Number.NaN;
  }
}

/** Samples a process's RSS every {@link SAMPLE_MS} (and descriptors every {@link FD_SAMPLE_MS}) until stopped. */
function sampleProcess(pid: number): { stop(): { peakRssMb: number; peakFds: number; timeline: readonly number[] } } {
  const timeline: number[] = [];
  let peakRssMb = rssMb(pid);
  let peakFds = openFds(pid);
  const rss = setInterval(() => {
    const v = rssMb(pid);
    timeline.push(v);
    if (v > peakRssMb) peakRssMb = v;
  }, SAMPLE_MS).unref();
  const fds = setInterval(() => {
    peakFds = Math.max(peakFds, openFds(pid));
  }, FD_SAMPLE_MS).unref();
  return {
    stop: () => {
      clearInterval(rss);
      clearInterval(fds);
      return { peakRssMb, peakFds, timeline };
    },
  };
}

// === the attacker ===

interface Attacker {
  readonly pid: number;
  go(): void;
  readonly report: Promise<AttackReport>;
  kill(): void;
}

async function startAttacker(opts: AttackOptions): Promise<Attacker> {
  const script = new URL('./attack-client.ts', import.meta.url).pathname;
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), script, JSON.stringify(opts)], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdout.setEncoding('utf8');
  let out = '';
  const lines: string[] = [];
  const waiters: ((line: string) => void)[] = [];
  child.stdout.on('data', (c: string) => {
    out += c;
    for (let i = out.indexOf('\n'); i !== -1; i = out.indexOf('\n')) {
      const line = out.slice(0, i);
      out = out.slice(i + 1);
      const w = waiters.shift();
      if (w !== undefined) w(line);
      else lines.push(line);
    }
  });
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`the attacker exited (${String(code)}) without a report`);
  });
  exited.catch(() => {});
  const nextLine = () =>
    Promise.race([new Promise<string>((resolve) => (lines.length > 0 ? resolve(lines.shift() as string) : waiters.push(resolve))), exited]);
  if ((await nextLine()) !== 'ready') throw new Error('the attacker did not start');
  const report = nextLine().then((l) => JSON.parse(l) as AttackReport);
  report.catch(() => {});
  return {
    pid: child.pid ?? 0,
    go: () => child.stdin.write('go\n'),
    report,
    kill: () => {
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}

// === one attack ===

/**
 * `client` noting each request's latency from its actual send into the 5 s bucket of the attack
 * (from `startedAt()`) it ended in: where in the attack the slow ones were.
 */
function bucketed(client: LoadClient, startedAt: () => number): { client: LoadClient; maxMsEvery5s(): number[]; slowest(): string; errors(): string } {
  const max: number[] = [];
  const errors = new Map<string, number>();
  /** [latency, send offset from the attack's start] of the slowest requests, slowest first. */
  const slow: [number, number][] = [];
  const note = (t0: number): void => {
    const now = performance.now();
    const from = startedAt();
    if (from === 0 || now < from) return;
    const i = Math.floor((now - from) / 5000);
    for (let j = max.length; j <= i; j++) max.push(0);
    max[i] = Math.max(max[i] as number, now - t0);
    slow.push([now - t0, t0 - from]);
    slow.sort((a, b) => b[0] - a[0]);
    slow.length = Math.min(slow.length, 5);
  };
  return {
    client: {
      request: () => {
        const t0 = performance.now();
        return client
          .request()
          .catch((e: unknown) => {
            const key = `${(e as NodeJS.ErrnoException).code ?? (e instanceof Error ? e.message : String(e))}@${((t0 - startedAt()) / 1000).toFixed(1)}s`;
            errors.set(key, (errors.get(key) ?? 0) + 1);
            throw e;
          })
          .finally(() => note(t0));
      },
      close: () => client.close(),
    },
    maxMsEvery5s: () => max.map((v) => Math.round(v)),
    slowest: () => slow.map(([ms, at]) => `${Math.round(ms)}@${(at / 1000).toFixed(2)}s`).join(' '),
    errors: () => [...errors].map(([k, n]) => `${n}x${k}`).join(' '),
  };
}

async function runAttack(attack: Attack, dir: string): Promise<BenchResult> {
  // Two app processes: the healthy client's HTTP/1 app apart from the attacked gRPC and TCP
  // apps, so the attacked app's own work (accepting and closing thousands of connections) does
  // not stall the healthy requests and count against the proxy.
  const apps = await startApps();
  const attackedApps = await startApps().catch(async (e: unknown) => {
    await stopApps(attackedApps);
    await stopApps(apps);
    throw e;
  });
  let mesh: WardMesh | undefined;
  let attacker: Attacker | undefined;
  const client = { current: undefined as ReturnType<typeof http1Client> | undefined };
  try {
    mkdirSync(join(dir, 'manifests'), { recursive: true });
    writeFileSync(join(dir, 'manifests', 'attack.yaml'), OPEN_PORTS_MANIFEST);
    mesh = await startWardMesh(dir, { http1: apps.ports.http1, grpc: attackedApps.ports.grpc, tcp: attackedApps.ports.tcp });
    const readyAt = performance.now();
    const ports = inboundPorts(mesh);
    const port = attack.target === 'mesh' ? ports.mesh : ports.pod.get(attack.target);
    if (port === undefined) throw new Error(`the inbound proxy serves no port ${attack.target}`);
    const pid = mesh.inbound.pid;
    const adminPort = mesh.adminPorts[1];
    const healthyPorts = `${mesh.outboundPort} ${ports.mesh} ${apps.ports.http1}`;
    log(`attack ${attack.name}: mesh up (inbound pid ${pid}, attacked port :${port}); ${attack.count} connections`);
    const healthy = http1Client(
      healthyDirect
        ? { kind: 'direct', host: HOST, port: apps.ports.http1 }
        : { kind: 'forward-proxy', proxyHost: HOST, proxyPort: mesh.outboundPort, authority: SERVICE_AUTHORITY.http1 },
      HEALTHY_CONNECTIONS,
    );
    client.current = healthy;
    await healthy.request();
    const payloadFile = join(dir, 'attack-payload.bin');
    writeFileSync(payloadFile, await attack.payload());
    attacker = await startAttacker({
      host: HOST,
      port,
      localAddress: attack.localAddress,
      count: attack.count,
      concurrency: CONCURRENCY,
      payloadFile,
      openMs: OPEN_MS,
      holdMs: HOLD_MS,
    });
    await sleep(IDLE_SETTLE_MS - (performance.now() - readyAt));
    const idleRssMb = rssMb(pid);
    const idleBrkHeapMb = brkHeapMb(pid);
    const idleFds = openFds(pid);
    const errorsBefore = await errorCounts(adminPort);
    const slowBefore = await Promise.all(mesh.adminPorts.map(slowResponses));
    let sampler: ReturnType<typeof sampleProcess> | undefined;
    let attackStartedAt = 0;
    let kernelBefore = new Map<string, number>();
    let machine0: [number, number] = [0, 0];
    let benchCpu0: number[] = [];
    // The last CPU time read of each: the attacker exits before the window ends.
    let benchCpuLast: number[] = [];
    let benchCpuTimer: NodeJS.Timeout | undefined;
    const noteBenchCpu = (): void => {
      benchPids.forEach((p, i) => {
        const v = cpuSeconds(p);
        if (Number.isFinite(v)) benchCpuLast[i] = v;
      });
    };
    let window0 = 0;
    let machineBusyPct = Number.NaN;
    let benchCpuPct = Number.NaN;
    const benchPids = [process.pid, mesh.controller.pid, mesh.outbound.pid, pid, attacker.pid, apps.child.pid ?? 0, attackedApps.child.pid ?? 0];
    let kernelAfter = new Map<string, number>();
    const a = attacker;
    const timed = bucketed(healthy, () => attackStartedAt);
    const stats = await runFixedRate(timed.client, {
      ratePerSec: HEALTHY_RPS,
      warmupMs: HEALTHY_WARMUP_MS,
      measureMs: HOLD_MS + WINDOW_TAIL_MS,
      hooks: {
        start: () => {
          machine0 = machineTicks();
          benchCpu0 = benchPids.map(cpuSeconds);
          benchCpuLast = [...benchCpu0];
          benchCpuTimer = setInterval(noteBenchCpu, FD_SAMPLE_MS).unref();
          window0 = performance.now();
          kernelBefore = kernelTcpCounters();
          sampler = sampleProcess(pid);
          attackStartedAt = performance.now();
          a.go();
          if (process.env.WARD_BENCH_ATTACK_TRACE === '1')
            log(`attack ${attack.name}: started at ${Date.now()} ms (epoch); healthy path ports ${healthyPorts}`);
        },
        stop: () => {
          kernelAfter = kernelTcpCounters();
          const [busy, total] = machineTicks();
          const cores = (total - machine0[1]) / ((CLK_TCK * (performance.now() - window0)) / 1000);
          machineBusyPct = ((busy - machine0[0]) / (total - machine0[1])) * cores * 100;
          clearInterval(benchCpuTimer);
          noteBenchCpu();
          benchCpuPct =
            (benchPids.reduce((sum, _, i) => sum + (benchCpuLast[i] as number) - (benchCpu0[i] as number), 0) / ((performance.now() - window0) / 1000)) * 100;
        },
      },
    });
    const report = await a.report;
    const closedAt = attackStartedAt + HOLD_MS;
    await sleep(AFTER_MS - (performance.now() - closedAt));
    const afterRssMb = rssMb(pid);
    const afterBrkHeapMb = brkHeapMb(pid);
    const sampled = sampler?.stop() ?? { peakRssMb: Number.NaN, peakFds: Number.NaN, timeline: [] };
    const errorsAfter = await errorCounts(adminPort);
    const slowAfter = await Promise.all(mesh.adminPorts.map(slowResponses));
    const proxyErrors = [...errorsAfter]
      .map(([k, v]) => [k, v - (errorsBefore.get(k) ?? 0)] as const)
      .filter(([, v]) => v > 0)
      .map(([k, v]) => `${k}:${v}`)
      .join(',');
    const shed = (errorsAfter.get('tcp/unfinished connection limit') ?? 0) - (errorsBefore.get('tcp/unfinished connection limit') ?? 0);
    const limited = (errorsAfter.get('tcp/connection limit') ?? 0) - (errorsBefore.get('tcp/connection limit') ?? 0);
    const p99 = quantile(stats.sortedMs, 0.99);
    const afterRatio = afterRssMb / idleRssMb;
    const meetsTarget = sampled.peakRssMb < TARGET_PEAK_RSS_MB && afterRatio <= TARGET_AFTER_RATIO && stats.errors === 0 && p99 < TARGET_P99_MS;
    // The RSS every 5 s from the attack's start (the peak's shape and what came back when).
    const every5s = sampled.timeline.filter((_, i) => i % (5000 / SAMPLE_MS) === 0).map((v) => Math.round(v));
    const failures = Object.entries(report.failures)
      .map(([k, v]) => `${k}:${v}`)
      .join(',');
    const row: BenchResult = {
      name: attack.name,
      nsPerOp: null,
      opsPerSec: null,
      issueItem: attack.issueItem,
      connections: attack.count,
      idleRssMb: round(idleRssMb, 1),
      peakRssMb: round(sampled.peakRssMb, 1),
      afterRssMb: round(afterRssMb, 1),
      afterVsIdle: round(afterRatio, 2),
      idleBrkHeapMb: round(idleBrkHeapMb, 1),
      afterBrkHeapMb: round(afterBrkHeapMb, 1),
      healthyRps: HEALTHY_RPS,
      healthyP50Ms: round(quantile(stats.sortedMs, 0.5), 2),
      healthyP99Ms: round(p99, 2),
      healthyErrors: stats.errors,
      healthyLagP99Ms: round(stats.lagP99Ms, 2),
      healthyMaxMsEvery5s: timed.maxMsEvery5s().join(' '),
      healthySlowest: timed.slowest(),
      healthyErrorKinds: timed.errors(),
      slowAtOutbound: (slowAfter[0] as number) - (slowBefore[0] as number),
      slowAtInbound: (slowAfter[1] as number) - (slowBefore[1] as number),
      machineBusyPct: round(machineBusyPct, 0),
      otherCpuPct: round(machineBusyPct - benchCpuPct, 0),
      kernelTcp: KERNEL_TCP_COUNTERS.map((k) => `${k}:${(kernelAfter.get(k) ?? 0) - (kernelBefore.get(k) ?? 0)}`).join(','),
      shedUnfinished: shed,
      shedOrRefusedAtLimit: limited,
      proxyErrors,
      idleFds,
      peakFds: sampled.peakFds,
      opened: report.opened,
      failed: report.failed,
      attackerFailures: failures,
      closedByProxy: report.closedByPeer,
      openAtHoldEnd: report.openAtEnd,
      peakOpen: report.peakOpen,
      openedInMs: report.openedInMs,
      rssEvery5sMb: every5s.join(' '),
      targetMb: TARGET_PEAK_RSS_MB,
      targetMs: TARGET_P99_MS,
      meetsTarget,
    };
    log(`attack ${attack.name}: ${JSON.stringify(row)}`);
    return row;
  } finally {
    attacker?.kill();
    client.current?.close();
    await mesh?.stop();
    await stopApps(attackedApps);
    await stopApps(apps);
  }
}

/** Runs the attack suite: one row per attack. */
export async function runAttackSuite(): Promise<BenchResult[]> {
  const only = process.env.WARD_BENCH_ATTACK?.split(',').filter((s) => s !== '');
  const count = Number(process.env.WARD_BENCH_ATTACK_CONNECTIONS ?? 'NaN');
  const attacks = (only === undefined ? ATTACKS : ATTACKS.filter((a) => only.includes(a.name))).map((a) =>
    Number.isInteger(count) && count > 0 ? { ...a, count: Math.min(count, a.count) } : a,
  );
  if (attacks.length === 0) throw new Error(`WARD_BENCH_ATTACK names no attack (${ATTACKS.map((a) => a.name).join(', ')})`);
  const results: BenchResult[] = [];
  for (const attack of attacks) {
    const dir = mkdtempSync(join(tmpdir(), 'ward-bench-attack-'));
    try {
      results.push(await runAttack(attack, dir));
    } finally {
      if (process.env.WARD_BENCH_KEEP !== '1') rmSync(dir, { recursive: true, force: true });
      else log(`attack: kept ${dir}`);
    }
  }
  return results;
}
