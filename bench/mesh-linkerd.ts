/**
 * The netns part of `npm run bench -- mesh`: ward's proxies against Linkerd's own
 * (the real linkerd2-proxy at `../shared/interop/linkerd2-proxy/linkerd2-proxy`).
 *
 * linkerd2-proxy's outbound side only proxies connections redirected to it (SO_ORIGINAL_DST), so
 * its pair cannot sit on loopback like ward's forward-proxy pair in bench/mesh.ts; and a figure
 * measured in network namespaces is not comparable with one measured on loopback (veth, a
 * bridge, iptables nat, a generator in another process). So the comparison is made entirely in
 * one topology, built with the e2e lab (test/e2e/linkerd-lab.ts) on 10.244.81.0/24: ward's
 * controller on the node `.1`, and three client/server pod pairs on the same bridge, each client
 * pod running a load generator (bench/mesh-netns-load.ts: the same rounds as the loopback paths)
 * and each server pod the same apps (bench/mesh-apps.ts on 0.0.0.0):
 *
 * - `netns-direct`: pods `.6` → `.7` without proxies or nat rules (the baseline);
 * - `ward-netns`: pods `.4` → `.5` with proxy-init's rules and `ward proxy --transparent`, run
 *   with `PROXY_NODE_OPTIONS` as `ward up` runs its sidecars;
 * - `linkerd`: pods `.2` → `.3` with proxy-init's rules and the real linkerd2-proxy, configured
 *   as Linkerd's injector configures it (`LINKERD2_PROXY_CORES=1`), on ward's control plane.
 *
 * Both meshed pairs get the same policy from the same controller (each server port admits only
 * the client's mesh identity, the TCP port opaque), so both do mTLS, discovery and authorization.
 * Rounds interleave across the three paths exactly like the loopback paths; added latency is
 * over `netns-direct` in the same round. Results: `<path>/<protocol>/<load>` as in bench/mesh.ts
 * (with `cpuUsPerRequest`: both proxies' CPU time per completed request, and each side's as
 * `outboundCpuUsPerRequest`/`inboundCpuUsPerRequest`), `<path>/idle/<role>`,
 * and `ward-vs-linkerd/<protocol>/<load>` rows with the ratios ward/Linkerd (below 1: ward does
 * better) of added p50/p99 and CPU per request at the fixed rate, and of saturation rps (above
 * 1: ward does better) and RSS under load; `ward-vs-linkerd/idle/<role>` for the idle RSS.
 *
 * Skipped with a warning when the lab cannot run here (not root, no iptables, openssl or the
 * binary). Every namespace is deleted at the end, also on failure (the lab's stop).
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { PROXY_NODE_OPTIONS } from '../src/proxy/index.js';
import { identityOf, LinkerdLab, type LinkerdLabPod, linkerdLabMissing } from '../test/e2e/linkerd-lab.js';
import type { BenchResult } from './harness.js';
import { type Protocol, selectedProtocols, selectedRounds } from './mesh-load.js';
import type { NetnsLoadCommand, NetnsLoadStats } from './mesh-netns-load.js';
import { ProcessProbe, type ProcessUsage, type ResidentMb, residentMb } from './mesh-proc.js';
import { splitNodeArgs } from './mesh-ward.js';

const SUBNET = '10.244.81';
const QUICK = process.env.WARD_BENCH_MESH_QUICK === '1';
const RATE_PER_SEC = 1000;
/** As bench/mesh.ts: interleaved rounds, the median of each path's rounds. */
const FIXED_ROUNDS = selectedRounds(QUICK ? 1 : 9);
const FIXED = QUICK ? { warmupMs: 1000, measureMs: 3000 } : { warmupMs: 3000, measureMs: 4000 };
const FIXED_NEXT_WARMUP_MS = 1000;
const SATURATION = QUICK ? { concurrency: 32, warmupMs: 500, measureMs: 2000 } : { concurrency: 32, warmupMs: 1000, measureMs: 8000 };
const CONNECTIONS = 32;
/** Closed-loop load per path and protocol before its first round (as bench/mesh.ts on loopback). */
const GENERATOR_WARMUP_MS = QUICK ? 300 : 1500;
/** As bench/mesh.ts: V8's memory reducer has run by then. */
const IDLE_SETTLE_MS = QUICK ? 12_000 : 15_000;
/** The apps' ports in every server pod. */
const PORTS: Readonly<Record<Protocol, number>> = { http1: 8080, grpc: 9090, tcp: 9000 };
const PROTOCOLS: readonly Protocol[] = selectedProtocols();
/** How long one command of a generator may take (a round plus its drain, generously). */
const COMMAND_TIMEOUT_MS = 120_000;

type PathName = 'netns-direct' | 'ward-netns' | 'linkerd';
const log = (line: string): void => {
  process.stderr.write(`${line}\n`);
};
const round = (n: number, digits = 3): number => Math.round(n * 10 ** digits) / 10 ** digits;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length === 0 ? Number.NaN : sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

const pod = (name: string, ip: string, app: string, sa: string) => `---
apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: demo
  labels: {app: ${app}}
  annotations: {config.linkerd.io/opaque-ports: "${PORTS.tcp}"}
spec:
  serviceAccountName: ${sa}
  containers:
  - name: app
    image: demo/${app}
    ports: [{containerPort: ${PORTS.http1}}, {containerPort: ${PORTS.grpc}}, {containerPort: ${PORTS.tcp}}]
status: {podIP: ${ip}}
`;

const server = (name: string, port: number, protocol: string) => `---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: ${name}, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: ${port}
  proxyProtocol: ${protocol}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: ${name}, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: ${name}}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: client}
`;

/** Both meshed pairs: clients with SA `client`, servers with SA `server` admitting only the client identity. */
const MANIFESTS = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
  annotations: {linkerd.io/inject: enabled}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: server, namespace: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: demo}
${pod('client-l', `${SUBNET}.2`, 'client', 'client')}${pod('server-l', `${SUBNET}.3`, 'server', 'server')}${pod('client-w', `${SUBNET}.4`, 'client', 'client')}${pod(
  'server-w',
  `${SUBNET}.5`,
  'server',
  'server',
)}---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: client, namespace: demo}
spec:
  identities: ["${identityOf('demo', 'client')}"]
${server('http1', PORTS.http1, 'HTTP/1')}${server('grpc', PORTS.grpc, 'HTTP/2')}${server('tcp', PORTS.tcp, 'opaque')}`;

/** A child process in a pod's namespace speaking JSON lines. */
class NetnsChild {
  readonly child: ChildProcessWithoutNullStreams;
  readonly #lines: string[] = [];
  #wake: (() => void) | undefined;
  #stderr = '';

  constructor(ns: string, script: string, args: readonly string[]) {
    const path = new URL(script, import.meta.url).pathname;
    this.child = spawn('ip', ['netns', 'exec', ns, process.execPath, '--import', import.meta.resolve('tsx'), path, ...args]);
    createInterface({ input: this.child.stdout }).on('line', (l) => {
      this.#lines.push(l);
      this.#wake?.();
    });
    this.child.stderr.on('data', (c: Buffer) => {
      this.#stderr = (this.#stderr + c.toString()).slice(-4000);
    });
    this.child.once('exit', () => this.#wake?.());
  }

  /** The next stdout line (JSON), within `timeoutMs`. */
  async next(what: string, timeoutMs: number): Promise<Record<string, unknown>> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const line = this.#lines.shift();
      if (line !== undefined) return JSON.parse(line) as Record<string, unknown>;
      if (this.child.exitCode !== null || this.child.signalCode !== null) throw new Error(`${what}: the child exited (${this.#stderr})`);
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`${what}: no answer within ${timeoutMs} ms (${this.#stderr})`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.#wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.#wake = undefined;
    }
  }

  send(v: unknown): void {
    this.child.stdin.write(`${JSON.stringify(v)}\n`);
  }

  stop(): void {
    this.child.stdin.end();
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGTERM');
  }
}

/** A generator in a client pod. */
class Generator extends NetnsChild {
  constructor(ns: string) {
    super(ns, './mesh-netns-load.ts', []);
  }

  /** Runs `cmd`; `probe` (if any) is opened and closed at the measured window's edges. */
  async run(cmd: NetnsLoadCommand, probe?: ProcessProbe): Promise<NetnsLoadStats> {
    this.send(cmd);
    for (let i = 0; i < 3; i++) {
      const m = await this.next(`generator ${cmd.op} ${cmd.protocol}`, COMMAND_TIMEOUT_MS);
      if (m.window === 'start') probe?.start();
      else if (m.window === 'stop') probe?.stop();
      else if (m.error !== undefined) throw new Error(`generator ${cmd.op} ${cmd.protocol}: ${String(m.error)}`);
      else return m.result as NetnsLoadStats;
    }
    throw new Error(`generator ${cmd.op} ${cmd.protocol}: more lines than a window's edges before the result`);
  }
}

interface NetnsPath {
  readonly name: PathName;
  readonly gen: Generator;
  /** The server pod's address. */
  readonly target: string;
  /** [outbound, inbound]; empty for direct. */
  readonly proxyPids: readonly number[];
}

interface Run {
  readonly stats: NetnsLoadStats;
  readonly proxies: readonly ProcessUsage[];
  readonly stealPct: number;
}

interface Measured {
  readonly path: PathName;
  readonly protocol: Protocol;
  readonly load: `${typeof RATE_PER_SEC}rps` | 'max';
  readonly runs: readonly Run[];
}

async function measureProtocol(protocol: Protocol, paths: readonly NetnsPath[]): Promise<Measured[]> {
  const measure = async (path: NetnsPath, cmd: NetnsLoadCommand): Promise<Run> => {
    const probe = new ProcessProbe(path.proxyPids);
    const stats = await path.gen.run(cmd, probe);
    return { stats, proxies: path.proxyPids.map((pid) => probe.usage(pid)), stealPct: probe.stealPct() };
  };
  for (const path of paths) {
    await path.gen.run({ op: 'connect', protocol, host: path.target, port: PORTS[protocol], connections: CONNECTIONS });
    // Each generator is a fresh process: its code gets optimised here, not in its path's first round.
    await path.gen.run({ op: 'max', protocol, concurrency: SATURATION.concurrency, warmupMs: GENERATOR_WARMUP_MS, measureMs: 0 });
  }
  try {
    const fixed = new Map<NetnsPath, Run[]>(paths.map((p) => [p, []]));
    for (let r = 0; r < FIXED_ROUNDS; r++) {
      const timing = r === 0 ? FIXED : { ...FIXED, warmupMs: FIXED_NEXT_WARMUP_MS };
      for (const path of paths) {
        log(`mesh: ${path.name}/${protocol}/${RATE_PER_SEC}rps round ${r + 1}/${FIXED_ROUNDS} ...`);
        fixed.get(path)?.push(await measure(path, { op: 'fixed', protocol, ratePerSec: RATE_PER_SEC, ...timing }));
      }
    }
    const measured: Measured[] = [];
    for (const path of paths) {
      log(`mesh: ${path.name}/${protocol}/max (closed loop, ${SATURATION.concurrency} in flight) ...`);
      const max = await measure(path, { op: 'max', protocol, ...SATURATION });
      measured.push(
        { path: path.name, protocol, load: `${RATE_PER_SEC}rps`, runs: fixed.get(path) ?? [] },
        { path: path.name, protocol, load: 'max', runs: [max] },
      );
    }
    return measured;
  } finally {
    for (const path of paths) await path.gen.run({ op: 'close', protocol }).catch(() => undefined);
  }
}

function resultOf(m: Measured, direct: Measured | undefined): BenchResult {
  const p50 = median(m.runs.map((r) => r.stats.p50Ms));
  const p99 = median(m.runs.map((r) => r.stats.p99Ms));
  const rps = median(m.runs.map((r) => r.stats.rps));
  const out: Record<string, string | number | boolean | null> = {
    name: `${m.path}/${m.protocol}/${m.load}`,
    nsPerOp: null,
    opsPerSec: Math.round(rps),
    p50Ms: round(p50),
    p99Ms: round(p99),
    rps: Math.round(rps),
  };
  if (m.runs[0]?.proxies.length === 2) {
    const added = (f: (s: NetnsLoadStats) => number) =>
      median(m.runs.map((r, i) => (direct?.runs[i] === undefined ? Number.NaN : f(r.stats) - f((direct.runs[i] as Run).stats))));
    const peak = (i: number) => Math.max(...m.runs.map((r) => (r.proxies[i] as ProcessUsage).peakRssMb));
    const cpu = (i: number) => m.runs.reduce((a, r) => a + (r.proxies[i] as ProcessUsage).cpuPct, 0) / m.runs.length;
    // CPU seconds per second over requests per second: each request's share of the proxies' CPU.
    const cpuUs = (sides: readonly number[]) =>
      median(m.runs.map((r) => (sides.reduce((a, i) => a + (r.proxies[i] as ProcessUsage).cpuPct, 0) / 100 / r.stats.rps) * 1e6));
    Object.assign(out, {
      addedP50Ms: round(added((s) => s.p50Ms)),
      addedP99Ms: round(added((s) => s.p99Ms)),
      cpuUsPerRequest: round(cpuUs([0, 1]), 1),
      outboundCpuUsPerRequest: round(cpuUs([0]), 1),
      inboundCpuUsPerRequest: round(cpuUs([1]), 1),
      rssMb: round(peak(0) + peak(1), 1),
      cpuPct: round(cpu(0) + cpu(1), 1),
      outboundRssMb: round(peak(0), 1),
      inboundRssMb: round(peak(1), 1),
      outboundCpuPct: round(cpu(0), 1),
      inboundCpuPct: round(cpu(1), 1),
    });
  }
  Object.assign(out, {
    stealPct: round(Math.max(0, ...m.runs.map((r) => r.stealPct)), 1),
    samples: m.runs.reduce((a, r) => a + r.stats.samples, 0),
    errors: m.runs.reduce((a, r) => a + r.stats.errors, 0),
  });
  if (m.load !== 'max') out.lagP99Ms = round(Math.max(...m.runs.map((r) => r.stats.lagP99Ms)));
  return out as BenchResult;
}

/** ward / Linkerd of each shared figure (NaN-free: null when either side is missing or not positive). */
function ratioRow(name: string, w: BenchResult | undefined, l: BenchResult | undefined, fields: readonly string[]): BenchResult {
  const out: Record<string, string | number | boolean | null> = { name, nsPerOp: null, opsPerSec: null };
  for (const f of fields) {
    const [a, b] = [w?.[f], l?.[f]];
    out[f] = typeof a === 'number' && typeof b === 'number' && a > 0 && b > 0 ? round(a / b, 2) : null;
  }
  return out as BenchResult;
}

function idleRows(path: PathName, pids: readonly number[]): BenchResult[] {
  return (['outbound', 'inbound'] as const).map((role, i) => {
    const mb: ResidentMb = residentMb(pids[i] as number);
    return {
      name: `${path}/idle/${role}`,
      nsPerOp: null,
      opsPerSec: null,
      rssMb: round(mb.rss, 1),
      privateMb: round(mb.private, 1),
      fileMb: round(mb.file, 1),
    };
  });
}

/**
 * Runs the netns paths; returns no rows (after a warning) when the lab cannot run here, so that
 * the loopback figures of bench/mesh.ts are still reported.
 */
export async function runLinkerdComparison(): Promise<BenchResult[]> {
  const missing = linkerdLabMissing();
  if (missing !== undefined) {
    log(`mesh: WARNING: the netns comparison with linkerd2-proxy needs ${missing}; the ward-netns and linkerd rows are SKIPPED`);
    return [];
  }
  const children: NetnsChild[] = [];
  let lab: LinkerdLab | undefined;
  try {
    log(`mesh: netns lab on ${SUBNET}.0/24 (ward's controller on the node, three pod pairs) ...`);
    const l = await LinkerdLab.start({ subnet: SUBNET, manifests: { 'demo.yaml': MANIFESTS }, name: 'bench-mesh' });
    lab = l;
    const add = (host: number, name: string, sa: string, proxyInit: boolean): LinkerdLabPod => l.addPod(host, { namespace: 'demo', name, sa, proxyInit });
    const pods = {
      clientL: add(2, 'client-l', 'client', true),
      serverL: add(3, 'server-l', 'server', true),
      clientW: add(4, 'client-w', 'client', true),
      serverW: add(5, 'server-w', 'server', true),
      clientD: add(6, 'client-d', 'client', false),
      serverD: add(7, 'server-d', 'server', false),
    };
    for (const p of [pods.serverL, pods.serverW, pods.serverD]) {
      const apps = new NetnsChild(p.ns, './mesh-apps.ts', ['0.0.0.0', String(PORTS.http1), String(PORTS.grpc), String(PORTS.tcp)]);
      children.push(apps);
      await apps.next(`the apps in ${p.name}`, 30_000);
    }
    const ports = [PORTS.http1, PORTS.grpc, PORTS.tcp];
    // As `ward up` and the loopback paths run them; WARD_BENCH_PROXY_NODE_ARGS adds e.g. --cpu-prof.
    const nodeArgs = [...PROXY_NODE_OPTIONS, ...splitNodeArgs(process.env.WARD_BENCH_PROXY_NODE_ARGS)];
    const wOut = l.startWardProxy(pods.clientW, { nodeArgs });
    const wIn = l.startWardProxy(pods.serverW, { inboundPorts: ports, nodeArgs });
    const lOut = l.startLinkerdProxy(pods.clientL);
    const lIn = l.startLinkerdProxy(pods.serverL, { inboundPorts: ports, opaquePorts: [PORTS.tcp] });
    await Promise.all([l.waitWardReady(wOut), l.waitWardReady(wIn), l.waitLinkerdReady(lOut), l.waitLinkerdReady(lIn)]);
    const readyAt = performance.now();
    const pidOf = (c: { pid?: number | undefined }): number => {
      if (c.pid === undefined) throw new Error('a proxy has no pid');
      return c.pid;
    };
    const wardPids = [pidOf(wOut.child), pidOf(wIn.child)];
    const linkerdPids = [pidOf(lOut.process.child), pidOf(lIn.process.child)];
    log(`mesh: proxies ready (ward ${wardPids.join('/')}, linkerd ${linkerdPids.join('/')}); idle for ${IDLE_SETTLE_MS / 1000} s ...`);
    const gen = (p: LinkerdLabPod): Generator => {
      const g = new Generator(p.ns);
      children.push(g);
      return g;
    };
    const paths: NetnsPath[] = [
      { name: 'netns-direct', gen: gen(pods.clientD), target: pods.serverD.ip, proxyPids: [] },
      { name: 'ward-netns', gen: gen(pods.clientW), target: pods.serverW.ip, proxyPids: wardPids },
      { name: 'linkerd', gen: gen(pods.clientL), target: pods.serverL.ip, proxyPids: linkerdPids },
    ];
    for (const p of paths) await p.gen.next(`the generator of ${p.name}`, 30_000);
    await sleep(IDLE_SETTLE_MS - (performance.now() - readyAt));
    const results: BenchResult[] = [...idleRows('ward-netns', wardPids), ...idleRows('linkerd', linkerdPids)];
    const measured: Measured[] = [];
    for (const protocol of PROTOCOLS) measured.push(...(await measureProtocol(protocol, paths)));
    const direct = (m: Measured) => measured.find((d) => d.path === 'netns-direct' && d.protocol === m.protocol && d.load === m.load);
    for (const path of ['netns-direct', 'ward-netns', 'linkerd'] as const) for (const m of measured) if (m.path === path) results.push(resultOf(m, direct(m)));
    const byName = new Map(results.map((r) => [r.name, r]));
    const ratios: BenchResult[] = [];
    for (const role of ['outbound', 'inbound']) {
      ratios.push(ratioRow(`ward-vs-linkerd/idle/${role}`, byName.get(`ward-netns/idle/${role}`), byName.get(`linkerd/idle/${role}`), ['rssMb', 'privateMb']));
    }
    for (const protocol of PROTOCOLS) {
      for (const load of [`${RATE_PER_SEC}rps`, 'max']) {
        const cpu = ['cpuUsPerRequest', 'outboundCpuUsPerRequest', 'inboundCpuUsPerRequest'];
        const fields = load === 'max' ? ['rps', ...cpu, 'rssMb'] : ['addedP50Ms', 'addedP99Ms', ...cpu, 'rssMb'];
        const row = ratioRow(
          `ward-vs-linkerd/${protocol}/${load}`,
          byName.get(`ward-netns/${protocol}/${load}`),
          byName.get(`linkerd/${protocol}/${load}`),
          fields,
        );
        ratios.push(row);
        log(`mesh: ward/linkerd ${protocol}/${load}: ${fields.map((f) => `${f} ${String(row[f])}`).join(', ')}`);
      }
    }
    return [...results, ...ratios];
  } finally {
    for (const c of children) c.stop();
    await lab?.stop();
  }
}
