/**
 * `npm run bench -- revocation`: how long a deny written to a manifest file takes to reach a
 * client that is sending requests. A real `ward controller` on a manifests directory, a real
 * server proxy (inbound) in front of the bench's HTTP/1 app and a real client proxy (outbound,
 * the client's mesh identity), all on loopback, as in the mesh bench (bench/mesh-ward.ts). This
 * process sends {@link RATE_PER_SEC} GETs per second through the client proxy, and
 * {@link ROUNDS} times writes a `MeshTLSAuthentication` that no longer lists the client (the
 * deny), measures the time from the write to the first 403 the client receives, then writes the
 * allow back and waits until requests succeed again (the restore, also measured). Writes alternate
 * between an in-place write (truncate + write, as `echo >` or most programs) and a rename over
 * the file (a new file renamed over the old one, as editors and atomic writers save); rounds are
 * spaced by varying pauses so they do not keep one phase against the controller's periodic rescan.
 *
 * Results: `revoke/<style>` and `revoke/all` rows with `p50Ms`/`p95Ms`/`p99Ms`/`maxMs` (target
 * p99 < {@link TARGET_P99_MS} ms on `revoke/all`), and `restore/all` for the allow coming back.
 * `otherCpuPct` is what processes outside the bench used meanwhile (percent of one core): every
 * process here shares the machine, and a busy one delays the controller or a proxy by tens of
 * milliseconds at a time. With `WARD_BENCH_REVOCATION_TRACE=1` the controller logs at debug
 * level and the rows also give where the time went, from the processes' logs (millisecond
 * timestamps): write → the controller's indexes updated (`indexP99Ms`), write → the server
 * proxy's new policy in force (`proxyP99Ms`), and both for the slowest round
 * (`slowestIndexMs`, `slowestProxyMs`). `WARD_BENCH_KEEP=1` keeps the directory with the logs.
 */
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { IDENTITY_FILES, initIdentity, mintToken } from '../src/identity/index.js';
import { PROXY_NODE_OPTIONS } from '../src/proxy/index.js';
import type { BenchResult } from './harness.js';
import { log, round, startApps, stopApps } from './mesh.js';
import { type LoggedChild, OtherProcesses, spawnLogged, waitFor, waitForLog } from './mesh-proc.js';
import { CLIENT_ID } from './mesh-ward.js';

const HOST = '127.0.0.1';
const SERVER_POD_IP = '127.0.0.1';
const CLIENT_POD_IP = '127.0.0.2';
const RATE_PER_SEC = 1000;
const ROUNDS = 20;
const TARGET_P99_MS = 250;
/** Load before the first round (connections, mesh TLS, JIT warm). */
const WARMUP_MS = 3000;
/** Longest a deny or a restore may take before the round counts as missed. */
const ROUND_TIMEOUT_MS = 10_000;
/** Consecutive 200s that count as "restored". */
const RESTORED_AFTER = 50;
const START_TIMEOUT_MS = 30_000;
const CONNECTIONS = 32;
const TRACE = process.env.WARD_BENCH_REVOCATION_TRACE === '1';
const WARD_BIN = new URL('../bin/ward.js', import.meta.url).pathname;
const AUTHORITY = 'server-svc.demo.svc.cluster.local:80';
/** An identity no workload has: the deny lists it instead of the client. */
const REVOKED_ID = 'nobody.demo.serviceaccount.identity.linkerd.cluster.local';

type WriteStyle = 'in-place' | 'rename-over';
const STYLES: readonly WriteStyle[] = ['in-place', 'rename-over'];

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
---
apiVersion: v1
kind: Pod
metadata: {name: server-0, namespace: demo, labels: {app: server}}
spec:
  serviceAccountName: server
  containers:
  - name: app
    image: bench/server
    ports: [{name: http, containerPort: 8080}]
status: {podIP: ${SERVER_POD_IP}}
---
apiVersion: v1
kind: Pod
metadata: {name: client-0, namespace: demo, labels: {app: client}}
spec:
  serviceAccountName: client
  containers: [{name: app, image: bench/client}]
status: {podIP: ${CLIENT_POD_IP}}
---
apiVersion: v1
kind: Service
metadata: {name: server-svc, namespace: demo}
spec:
  selector: {app: server}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: server-http, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: 8080
  proxyProtocol: HTTP/1
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: server-http-clients, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: server-http}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: clients}
`;

/** The file each round rewrites: who the AuthorizationPolicy admits. */
const clientsManifest = (identity: string): string => `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: demo}
spec:
  identities: ["${identity}"]
`;

const PROXY_READY = /ward proxy ready: identity \S+, mesh :(\d+), admin :(\d+), inbound .*?(?:, outbound :(\d+))?$/m;
const CONTROLLER_READY = /ward controller ready: policy :(\d+), identity :(\d+), destination :(\d+), admin http:\/\/[^:]+:(\d+)/;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The value at quantile `q` (0..1) of ascending `sorted` (nearest rank); NaN when empty. */
function quantileOf(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

/** Writes `text` to `file` the way `style` says. */
function writeStyled(file: string, text: string, style: WriteStyle, seq: number): void {
  if (style === 'in-place') {
    writeFileSync(file, text);
    return;
  }
  // As atomic writers name their temporary file: beside the target, not a manifest name.
  const tmp = `${file}.${process.pid}.${seq}`;
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

// === the mesh ===

interface Mesh {
  readonly manifests: string;
  readonly controller: LoggedChild;
  readonly inbound: LoggedChild;
  readonly outboundPort: number;
  /** The controller's and both proxies' pids. */
  readonly pids: readonly number[];
  stop(): Promise<void>;
}

async function startMesh(dir: string, appPort: number): Promise<Mesh> {
  const identityDir = join(dir, 'identity');
  const manifests = join(dir, 'manifests');
  mkdirSync(manifests, { recursive: true });
  const init = await initIdentity({ outDir: identityDir });
  if (!init.ok) throw new Error(`identity init failed: ${init.diagnostics.map((d) => d.message).join('; ')}`);
  writeFileSync(join(manifests, 'mesh.yaml'), MANIFESTS);
  writeFileSync(join(manifests, 'clients.yaml'), clientsManifest(CLIENT_ID));
  const signerKeyPem = readFileSync(join(identityDir, IDENTITY_FILES.tokenKey), 'utf8');
  const tokenFile = (sa: string, pod: string): string => {
    const file = join(dir, `${sa}.token`);
    writeFileSync(file, `${mintToken({ signerKeyPem, namespace: 'demo', serviceAccount: sa, pod })}\n`);
    return file;
  };
  const started: LoggedChild[] = [];
  const stop = async () => {
    for (const p of started.reverse()) await p.stop();
  };
  const ward = (name: string, args: readonly string[]): LoggedChild => {
    const nodeArgs = args[0] === 'proxy' ? PROXY_NODE_OPTIONS : [];
    const p = spawnLogged(name, process.execPath, [...nodeArgs, WARD_BIN, ...args], join(dir, `${name}.log`));
    started.push(p);
    return p;
  };
  const proxyReady = async (p: LoggedChild) => {
    const m = await waitForLog(p, PROXY_READY, START_TIMEOUT_MS);
    const ports = { mesh: Number(m[1]), admin: Number(m[2]), outbound: m[3] === undefined ? undefined : Number(m[3]) };
    await waitFor(
      `${p.name} /ready`,
      async () => {
        try {
          return (await fetch(`http://${HOST}:${ports.admin}/ready`, { signal: AbortSignal.timeout(2000) })).status === 200 ? true : undefined;
        } catch {
          return undefined;
        }
      },
      START_TIMEOUT_MS,
    );
    return ports;
  };
  try {
    const controller = ward('ward-controller', [
      'controller',
      '--manifests',
      manifests,
      '--identity-dir',
      identityDir,
      ...(TRACE ? ['--log-level', 'debug'] : []),
      ...['--policy-addr', '--identity-addr', '--destination-addr', '--admin-addr'].flatMap((f) => [f, `${HOST}:0`]),
    ]);
    const c = await waitForLog(controller, CONTROLLER_READY, START_TIMEOUT_MS);
    const proxy = (name: string, pod: string, sa: string, extra: readonly string[]) =>
      ward(name, [
        'proxy',
        ...['--workload', `demo/${pod}`, '--service-account', sa, '--trust-anchors', join(identityDir, IDENTITY_FILES.anchorCert)],
        ...['--token-file', tokenFile(sa, pod), '--identity-addr', `${HOST}:${c[2]}`, '--policy-addr', `${HOST}:${c[1]}`],
        ...['--mesh-addr', `${HOST}:0`, '--admin-addr', `${HOST}:0`],
        ...extra,
      ]);
    const inbound = proxy('ward-proxy-inbound', 'server-0', 'server', ['--listen-host', SERVER_POD_IP, '--inbound', `8080@0=${HOST}:${appPort}`]);
    const inboundPorts = await proxyReady(inbound);
    const outbound = proxy('ward-proxy-outbound', 'client-0', 'client', [
      ...['--listen-host', CLIENT_POD_IP, '--destination-addr', `${HOST}:${c[3]}`, '--outbound-addr', `${HOST}:0`],
      ...['--mesh-port-override', `${SERVER_POD_IP}=${inboundPorts.mesh}`],
    ]);
    const outboundPorts = await proxyReady(outbound);
    if (outboundPorts.outbound === undefined) throw new Error('the client proxy reported no outbound port');
    return { manifests, controller, inbound, outboundPort: outboundPorts.outbound, pids: [controller.pid, inbound.pid, outbound.pid], stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

// === the client ===

/** What the client saw: each response's status (0 = failed) with its arrival time. */
type Observer = (status: number, atMs: number) => void;

/**
 * GETs at `ratePerSec` through the forward proxy on keep-alive connections, paced by a 1 ms
 * timer that sends every request due by then (the deny is seen within a request interval or two
 * of the proxy applying it). Stops on `stop()`.
 */
function startLoad(proxyPort: number, ratePerSec: number, observe: Observer): { stop(): void; sent(): number } {
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS, scheduling: 'lifo' });
  const options = { host: HOST, port: proxyPort, path: `http://${AUTHORITY}/ping`, agent, headers: { host: AUTHORITY } };
  const t0 = performance.now();
  let sent = 0;
  const send = () => {
    const req = httpRequest(options, (res) => {
      res.resume();
      res.on('end', () => observe(res.statusCode ?? 0, performance.now()));
      res.on('error', () => observe(0, performance.now()));
    });
    req.on('error', () => observe(0, performance.now()));
    req.end();
  };
  const timer = setInterval(() => {
    const due = Math.floor(((performance.now() - t0) * ratePerSec) / 1000);
    for (; sent < due; sent++) send();
  }, 1);
  return {
    stop: () => {
      clearInterval(timer);
      agent.destroy();
    },
    sent: () => sent,
  };
}

// === rounds ===

interface RoundResult {
  readonly style: WriteStyle;
  /** Write → first 403, ms (NaN: none within the timeout). */
  readonly revokeMs: number;
  /** Allow written → first 200, ms (NaN: none within the timeout). */
  readonly restoreMs: number;
  /** Epoch ms of the deny write (for the log stages). */
  readonly writtenAtEpochMs: number;
}

/**
 * Resolves with the arrival time of the first response with `status` from now on that begins a run of
 * `count` such responses in a row, or NaN after {@link ROUND_TIMEOUT_MS}.
 */
function firstStatus(waiters: Set<Observer>, status: number, count = 1): Promise<number> {
  return new Promise((resolve) => {
    let seen = 0;
    let first = Number.NaN;
    const w: Observer = (s, at) => {
      if (s !== status) {
        seen = 0;
        return;
      }
      if (seen++ === 0) first = at;
      if (seen < count) return;
      waiters.delete(w);
      clearTimeout(timer);
      resolve(first);
    };
    const timer = setTimeout(() => {
      waiters.delete(w);
      resolve(Number.NaN);
    }, ROUND_TIMEOUT_MS);
    waiters.add(w);
  });
}

/** Epoch ms of each log line of `text` whose `msg` is `msg` (pino JSON, ISO `time`). */
function logTimes(text: string, msg: string): number[] {
  const out: number[] = [];
  for (const line of text.split('\n')) {
    if (!line.includes(msg)) continue;
    try {
      const o = JSON.parse(line) as { msg?: unknown; time?: unknown };
      if (o.msg === msg && typeof o.time === 'string') out.push(Date.parse(o.time));
    } catch {
      // not a JSON line
    }
  }
  return out;
}

/** The first time in `times` at or after `from` and before `until`, minus `from`; NaN when none. */
function stage(times: readonly number[], from: number, until: number): number {
  const t = times.find((x) => x >= from && x < until);
  return t === undefined ? Number.NaN : t - from;
}

function summary(name: string, values: readonly number[], extra: Record<string, number | boolean | string> = {}): BenchResult {
  const ok = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  return {
    name,
    nsPerOp: null,
    opsPerSec: null,
    rounds: values.length,
    missed: values.length - ok.length,
    p50Ms: round(quantileOf(ok, 0.5), 1),
    p95Ms: round(quantileOf(ok, 0.95), 1),
    p99Ms: round(quantileOf(ok, 0.99), 1),
    maxMs: round(ok.at(-1) ?? Number.NaN, 1),
    ...extra,
  };
}

/** Runs the revocation suite. */
export async function runRevocationSuite(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'ward-bench-revocation-'));
  const apps = await startApps();
  let mesh: Mesh | undefined;
  let load: ReturnType<typeof startLoad> | undefined;
  try {
    mesh = await startMesh(dir, apps.ports.http1);
    const file = join(mesh.manifests, 'clients.yaml');
    const waiters = new Set<Observer>();
    const counts = new Map<number, number>();
    load = startLoad(mesh.outboundPort, RATE_PER_SEC, (status, at) => {
      counts.set(status, (counts.get(status) ?? 0) + 1);
      for (const w of waiters) w(status, at);
    });
    log(`revocation: ${RATE_PER_SEC} rps through the proxies, warming up ${WARMUP_MS} ms...`);
    if (Number.isNaN(await firstStatus(waiters, 200, RESTORED_AFTER))) throw new Error('the client never got through the proxies');
    await sleep(WARMUP_MS);
    const others = OtherProcesses.take([process.pid, apps.child.pid ?? 0, ...mesh.pids]);
    const rounds: RoundResult[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const style = STYLES[r % STYLES.length] as WriteStyle;
      // 300-1,000 ms apart, varied, so the writes fall at every phase of the periodic rescan.
      await sleep(300 + ((r * 373) % 700));
      const denied = firstStatus(waiters, 403);
      const writtenAtEpochMs = Date.now();
      const t0 = performance.now();
      writeStyled(file, clientsManifest(REVOKED_ID), style, 2 * r);
      const revokeMs = (await denied) - t0;
      await sleep(100 + ((r * 211) % 300));
      const restored = firstStatus(waiters, 200, RESTORED_AFTER);
      const t1 = performance.now();
      writeStyled(file, clientsManifest(CLIENT_ID), style, 2 * r + 1);
      const restoreMs = (await restored) - t1;
      rounds.push({ style, revokeMs, restoreMs, writtenAtEpochMs });
      log(`revocation: round ${r + 1}/${ROUNDS} (${style}): revoked in ${revokeMs.toFixed(1)} ms, restored in ${restoreMs.toFixed(1)} ms`);
    }
    const sent = load.sent();
    load.stop();
    load = undefined;

    const otherCpuPct = others.since();

    // Where each round's time went (trace only): the first log line of each stage after its write.
    const indexed = TRACE ? logTimes(mesh.controller.log(), 'indexes updated') : [];
    const inForce = TRACE ? logTimes(mesh.inbound.log(), 'inbound policy in force') : [];
    const stagesOf = (x: RoundResult) => ({
      indexMs: stage(indexed, x.writtenAtEpochMs, x.writtenAtEpochMs + ROUND_TIMEOUT_MS),
      proxyMs: stage(inForce, x.writtenAtEpochMs, x.writtenAtEpochMs + ROUND_TIMEOUT_MS),
    });
    const p99Of = (xs: readonly number[]) =>
      round(
        quantileOf(
          [...xs].filter(Number.isFinite).sort((a, b) => a - b),
          0.99,
        ),
        1,
      );
    const stageFields = (rs: readonly RoundResult[]): Record<string, number> => {
      if (!TRACE) return {};
      const st = rs.map(stagesOf);
      return { indexP99Ms: p99Of(st.map((x) => x.indexMs)), proxyP99Ms: p99Of(st.map((x) => x.proxyMs)) };
    };
    const slowest = rounds.reduce((a, b) => (b.revokeMs > a.revokeMs || Number.isNaN(b.revokeMs) ? b : a));
    const slowestFields = TRACE ? { slowestIndexMs: stagesOf(slowest).indexMs, slowestProxyMs: stagesOf(slowest).proxyMs } : {};

    const revokes = rounds.map((x) => x.revokeMs);
    const p99 = quantileOf(
      [...revokes].filter(Number.isFinite).sort((a, b) => a - b),
      0.99,
    );
    const meetsTarget = revokes.every(Number.isFinite) && p99 < TARGET_P99_MS;
    const statuses = [...counts].map(([s, n]) => `${s === 0 ? 'error' : s}:${n}`).join(',');
    return [
      ...STYLES.map((style) => {
        const rs = rounds.filter((x) => x.style === style);
        return summary(
          `revoke/${style}`,
          rs.map((x) => x.revokeMs),
          stageFields(rs),
        );
      }),
      summary('revoke/all', revokes, {
        ...stageFields(rounds),
        ...slowestFields,
        rps: RATE_PER_SEC,
        requests: sent,
        statuses,
        otherCpuPct: round(otherCpuPct, 1),
        targetMs: TARGET_P99_MS,
        meetsTarget,
      }),
      summary(
        'restore/all',
        rounds.map((x) => x.restoreMs),
      ),
    ];
  } finally {
    load?.stop();
    await mesh?.stop();
    await stopApps(apps);
    if (process.env.WARD_BENCH_KEEP !== '1') rmSync(dir, { recursive: true, force: true });
    else log(`revocation: kept ${dir}`);
  }
}
