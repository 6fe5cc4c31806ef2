/**
 * `npm run bench -- kube`: ward's controller at scale against a real kube-apiserver + etcd (the
 * apiserver kit, src/sources/kube/testing/kube-kit.ts; no kubelet, so the bench writes the pods'
 * status as a kubelet would). Not in `all`: it takes about 4-6 minutes on a busy 2-core machine,
 * and needs the kit's binaries.
 *
 * 1. Creates through the API, {@link CONCURRENCY} requests in flight: {@link NAMESPACES}
 *    namespaces of {@link PODS_PER_NS} meshed pods each (status written through `pods/status`:
 *    Running, a 10.200.x.y address, Ready), {@link SERVERS_PER_NS} Servers, two
 *    AuthorizationPolicies per Server and their MeshTLSAuthentications/NetworkAuthentications.
 * 2. A `ward controller --kubernetes` started before the creates: the time from the last create's
 *    response to its index agreeing with what was created (pod and resource counts of its admin
 *    API), and to its last status write as the Lease holder (every object it writes status for,
 *    ~7,000 writes; what follows is measured once they are done). A second controller started
 *    after them: its initial sync (spawn to its ready line). Target < 30 s.
 * 3. The first controller's RSS after the sync (and its private part). Target < 500 MB.
 * 4. {@link WATCHED} WatchPort streams (the pods of {@link HOT_NAMESPACES} namespaces, port 8080):
 *    each of those namespaces' AuthorizationPolicy on the port's Server requires one shared
 *    MeshTLSAuthentication, so one PATCH of it reaches every stream. Over {@link ROUNDS} rounds:
 *    the time from just before the PATCH to each stream's update, p50/p99. Target p99 < 200 ms.
 * 5. The API server stopped and started again (nothing changed meanwhile): the time from its start
 *    (it serves before its /readyz answers 200) to every reflector listing or watching again
 *    without a new failure (from the ward_kube_* counters on /metrics), and whether any stream
 *    received a different policy during or after the relist. A different decision fails the bench
 *    (it throws, after printing the figures to stderr).
 *
 * Every wait is bounded; the controllers and the kit are always stopped. `WARD_BENCH_KEEP=1`
 * keeps the directory with the controllers' logs; `WARD_BENCH_LOG=debug` raises their log level.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { InboundPolicyClient } from '../src/api/index.js';
import { initIdentity } from '../src/identity/index.js';
import { KubeClient, loadKubeconfig } from '../src/sources/index.js';
import { type KubeKit, kubeKitAvailable, startKubeKit } from '../src/sources/kube/testing/kube-kit.js';
import type { BenchResult } from './harness.js';
import { type LoggedChild, residentMb, spawnLogged, waitFor, waitForLog } from './mesh-proc.js';

const NAMESPACES = 50;
const PODS_PER_NS = 100;
const SERVERS_PER_NS = 20;
/** Namespaces whose pods are watched (all {@link PODS_PER_NS} of each, port 8080). */
const HOT_NAMESPACES = 5;
const WATCHED = HOT_NAMESPACES * PODS_PER_NS;
const ROUNDS = 10;
const CONCURRENCY = 32;
const CHANNELS = 50;
const HTTP_PORT = 8080;
const TARGET_SYNC_MS = 30_000;
const TARGET_RSS_MB = 500;
const TARGET_P99_MS = 200;
/** Longest wait for the index to agree, for streams, for an update round, for a resync. */
const AGREE_TIMEOUT_MS = 300_000;
const STREAMS_TIMEOUT_MS = 120_000;
const ROUND_TIMEOUT_MS = 30_000;
const RESYNC_TIMEOUT_MS = 120_000;
/** Quiet time after a resync during which a late update would still count. */
const AFTER_RESYNC_MS = 5000;
/** A resync counts once no reflector failed again for this long. */
const RESYNC_STABLE_MS = 2000;
const SCRAPE_MS = 100;
/** Longest wait for the leader's status writes to end, and the quiet time that says they did. */
const STATUS_TIMEOUT_MS = 420_000;
const STATUS_QUIET_MS = 3000;
const ROOT = new URL('../', import.meta.url).pathname;
const WARD_BIN = join(ROOT, 'bin/ward.js');
const SERVER_NAME = 'linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local';
const CONTROLLER_READY = /ward controller ready: policy :(\d+), identity :(\d+), destination :(\d+), admin http:\/\/[^:]+:(\d+)/;
const POLICY = 'policy.linkerd.io';
const HOT_AUTHN = { namespace: 'bench-00', name: 'hot-clients' };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const nsName = (n: number) => `bench-${String(n).padStart(2, '0')}`;
const podName = (p: number) => `web-${String(p).padStart(3, '0')}`;
const round = (n: number, digits = 1) => Number(n.toFixed(digits));
const hotIdentity = (r: number) => `hot-${r}.bench-00.serviceaccount.identity.linkerd.cluster.local`;

/** The value at percentile `p` of ascending `sorted` (nearest rank). */
function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number;
}

// === the objects ===

interface Create {
  readonly path: string;
  readonly body: Record<string, unknown>;
  /** Written after the create, through the status subresource. */
  readonly status?: Record<string, unknown>;
}

const meta = (namespace: string, name: string, extra: Record<string, unknown> = {}) => ({ metadata: { namespace, name, ...extra } });
const policyPath = (version: string, ns: string, plural: string) => `/apis/${POLICY}/${version}/namespaces/${ns}/${plural}`;

/** Pod `p` of namespace `n`: app=web on 8080, and one of 19 shards on 9000+shard. */
function pod(n: number, p: number): Create {
  const ns = nsName(n);
  const shard = 1 + (p % (SERVERS_PER_NS - 1));
  const ip = `10.200.${n}.${p + 10}`;
  return {
    path: `/api/v1/namespaces/${ns}/pods`,
    body: {
      apiVersion: 'v1',
      kind: 'Pod',
      ...meta(ns, podName(p), {
        labels: { app: 'web', shard: `s${shard}`, 'linkerd.io/control-plane-ns': 'linkerd' },
        annotations: { 'linkerd.io/proxy-version': 'ward' },
      }),
      spec: {
        serviceAccountName: 'web',
        containers: [
          {
            name: 'app',
            image: 'localhost/none:1',
            ports: [
              { name: 'http', containerPort: HTTP_PORT },
              { name: 'shard', containerPort: 9000 + shard },
            ],
          },
        ],
      },
    },
    status: { status: { phase: 'Running', podIP: ip, podIPs: [{ ip }], conditions: [{ type: 'Ready', status: 'True' }] } },
  };
}

/** The policy objects of namespace `n`, in dependency order: authentications, Servers, policies. */
function policyObjects(n: number): { authn: Create[]; servers: Create[]; policies: Create[] } {
  const ns = nsName(n);
  const authn: Create[] = [];
  const servers: Create[] = [];
  const policies: Create[] = [];
  for (let s = 0; s < SERVERS_PER_NS; s++) {
    const server = s === 0 ? 'web-http' : `shard-${s}`;
    servers.push({
      path: policyPath('v1beta3', ns, 'servers'),
      body: {
        apiVersion: `${POLICY}/v1beta3`,
        kind: 'Server',
        ...meta(ns, server),
        spec:
          s === 0
            ? { podSelector: { matchLabels: { app: 'web' } }, port: 'http', proxyProtocol: 'HTTP/1' }
            : { podSelector: { matchLabels: { shard: `s${s}` } }, port: 9000 + s, proxyProtocol: 'opaque' },
      },
    });
    authn.push(
      {
        path: policyPath('v1alpha1', ns, 'meshtlsauthentications'),
        body: {
          apiVersion: `${POLICY}/v1alpha1`,
          kind: 'MeshTLSAuthentication',
          ...meta(ns, `clients-${s}`),
          spec: { identities: [`client-${s}.${ns}.serviceaccount.identity.linkerd.cluster.local`] },
        },
      },
      {
        path: policyPath('v1alpha1', ns, 'networkauthentications'),
        body: {
          apiVersion: `${POLICY}/v1alpha1`,
          kind: 'NetworkAuthentication',
          ...meta(ns, `net-${s}`),
          spec: { networks: [{ cidr: `10.${100 + s}.0.0/16` }] },
        },
      },
    );
    // The watched namespaces' port-8080 policy requires the shared authentication: one change reaches all.
    const mtls = s === 0 && n < HOT_NAMESPACES ? { ...HOT_AUTHN } : { namespace: ns, name: `clients-${s}` };
    const ap = (name: string, ref: Record<string, unknown>): Create => ({
      path: policyPath('v1alpha1', ns, 'authorizationpolicies'),
      body: {
        apiVersion: `${POLICY}/v1alpha1`,
        kind: 'AuthorizationPolicy',
        ...meta(ns, name),
        spec: { targetRef: { group: POLICY, kind: 'Server', name: server }, requiredAuthenticationRefs: [ref] },
      },
    });
    policies.push(
      ap(`${server}-mtls`, { group: POLICY, kind: 'MeshTLSAuthentication', ...mtls }),
      ap(`${server}-net`, { group: POLICY, kind: 'NetworkAuthentication', name: `net-${s}` }),
    );
  }
  if (n === 0) {
    authn.push({
      path: policyPath('v1alpha1', HOT_AUTHN.namespace, 'meshtlsauthentications'),
      body: {
        apiVersion: `${POLICY}/v1alpha1`,
        kind: 'MeshTLSAuthentication',
        ...meta(HOT_AUTHN.namespace, HOT_AUTHN.name),
        spec: { identities: [hotIdentity(0)] },
      },
    });
  }
  return { authn, servers, policies };
}

/** Runs `fn` over `items` with at most `limit` in flight; rejects with the first failure. */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

async function create(client: KubeClient, c: Create): Promise<void> {
  await client.request({ method: 'POST', path: c.path, body: c.body });
  if (c.status !== undefined) {
    const name = (c.body.metadata as { name: string }).name;
    await client.request({ method: 'PATCH', path: `${c.path}/${name}/status`, body: c.status });
  }
}

/** Counts of what was created, as the controller's index should show them. */
interface Expected {
  readonly pods: number;
  readonly kinds: Readonly<Record<string, number>>;
}

// === the controller ===

interface Controller {
  readonly proc: LoggedChild;
  readonly policyPort: number;
  readonly admin: string;
}

function spawnController(dir: string, name: string, kit: KubeKit, idDir: string): LoggedChild {
  const level = process.env.WARD_BENCH_LOG ?? 'info';
  return spawnLogged(
    name,
    process.execPath,
    [
      WARD_BIN,
      'controller',
      '--kubernetes',
      ...['--kubeconfig', kit.kubeconfigPath, '--identity-dir', idDir, '--controller-host', '127.0.0.1', '--log-level', level],
      ...['--policy-addr', '--identity-addr', '--destination-addr', '--admin-addr'].flatMap((f) => [f, '127.0.0.1:0']),
    ],
    join(dir, `${name}.log`),
    { POD_NAME: name, POD_NAMESPACE: 'linkerd' },
  );
}

async function controllerReady(proc: LoggedChild, timeoutMs: number): Promise<Controller> {
  const m = await waitForLog(proc, CONTROLLER_READY, timeoutMs);
  return { proc, policyPort: Number(m[1]), admin: `http://127.0.0.1:${m[4]}` };
}

async function getJson<T>(url: string): Promise<T> {
  const res = await fetch(url, { signal: AbortSignal.timeout(60_000) });
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status}`);
  return (await res.json()) as T;
}

/** Undefined when the controller's index agrees with `want`, else what differs. */
async function disagreement(c: Controller, want: Expected): Promise<string | undefined> {
  const status = await getJson<{ pods: number }>(`${c.admin}/api/v1/status`);
  if (status.pods !== want.pods) return `pods ${status.pods}/${want.pods}`;
  const { resources } = await getJson<{ resources: { kind: string; namespace: string }[] }>(`${c.admin}/api/v1/resources`);
  const got: Record<string, number> = {};
  for (const r of resources) if (r.namespace.startsWith('bench-')) got[r.kind] = (got[r.kind] ?? 0) + 1;
  for (const [kind, n] of Object.entries(want.kinds)) if (got[kind] !== n) return `${kind} ${got[kind] ?? 0}/${n}`;
  return undefined;
}

/** Polls until the index agrees; the time (performance.now()) it was first seen agreeing. */
async function agreed(c: Controller, want: Expected, timeoutMs: number, intervalMs: number): Promise<number> {
  let last = '';
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const why = await disagreement(c, want);
    const at = performance.now();
    if (why === undefined) return at;
    last = why;
    if (at > deadline) throw new Error(`${c.proc.name}'s index did not agree within ${timeoutMs} ms: ${last}`);
    await sleep(intervalMs);
  }
}

/** The value of the unlabelled metric `name` in `text` (NaN when absent). */
function metricValue(text: string, name: string): number {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m === null ? Number.NaN : Number(m[1]);
}

/**
 * Waits until the leader's status writes stop ({@link STATUS_QUIET_MS} without one); the time
 * (performance.now()) of the last write seen, and the writes so far. Gives up after `timeoutMs`
 * with `settled` false.
 */
async function statusSettled(c: Controller, timeoutMs: number): Promise<{ at: number; writes: number; settled: boolean }> {
  const deadline = performance.now() + timeoutMs;
  let writes = -1;
  let changedAt = performance.now();
  for (;;) {
    const text = await (await fetch(`${c.admin}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
    const now = performance.now();
    const w = metricValue(text, 'ward_status_writes_total');
    if (w !== writes) {
      writes = w;
      changedAt = now;
    } else if (metricValue(text, 'ward_leader') === 1 && now - changedAt >= STATUS_QUIET_MS) {
      return { at: changedAt, writes, settled: true };
    }
    if (now > deadline) return { at: changedAt, writes, settled: false };
    await sleep(250);
  }
}

/** The controller's V8 heap in MB (MiB): in use, and reserved (what RSS holds beyond it is other memory). */
async function heapMb(c: Controller): Promise<{ used: number; total: number }> {
  const text = await (await fetch(`${c.admin}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  const mb = (name: string) => metricValue(text, name) / (1024 * 1024);
  return { used: mb('nodejs_heap_size_used_bytes'), total: mb('nodejs_heap_size_total_bytes') };
}

/** Per resource, the reflector counters of the controller's /metrics. */
type Counters = Map<string, { lists: number; restarts: number; errors: number; synced: number }>;

async function reflectorCounters(c: Controller): Promise<Counters> {
  const res = await fetch(`${c.admin}/metrics`, { signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  const out: Counters = new Map();
  const field = {
    ward_kube_lists_total: 'lists',
    ward_kube_watch_restarts_total: 'restarts',
    ward_kube_list_watch_errors_total: 'errors',
    ward_kube_synced: 'synced',
  } as const;
  for (const m of text.matchAll(
    /^(ward_kube_lists_total|ward_kube_watch_restarts_total|ward_kube_list_watch_errors_total|ward_kube_synced)\{resource="([^"]+)"\} (\S+)$/gm,
  )) {
    const resource = m[2] as string;
    const e = out.get(resource) ?? { lists: 0, restarts: 0, errors: 0, synced: 0 };
    e[field[m[1] as keyof typeof field]] = Number(m[3]);
    out.set(resource, e);
  }
  if (out.size === 0) throw new Error('the controller exposes no ward_kube_* reflector metrics');
  return out;
}

/**
 * When every reflector was back, from scrapes taken since `from` (the API server's start): per resource,
 * the first scrape whose attempts (LISTs + watches opened) exceed those of the scrape where its
 * failures last grew (or that scrape itself when both happened in one interval). Undefined while
 * some reflector failed within the last {@link RESYNC_STABLE_MS} or made no attempt since.
 */
function resyncedAt(scrapes: readonly { at: number; counters: Counters }[], from: number): number | undefined {
  const last = scrapes[scrapes.length - 1];
  if (last === undefined || last.at - from < RESYNC_STABLE_MS) return undefined;
  let latest = from;
  for (const resource of last.counters.keys()) {
    const series = scrapes.map((s) => ({ at: s.at, c: s.counters.get(resource) }));
    const finalErrors = last.counters.get(resource)?.errors ?? 0;
    const k = series.findIndex((s) => (s.c?.errors ?? 0) === finalErrors);
    const atK = series[k];
    if (atK === undefined || last.at - atK.at < RESYNC_STABLE_MS) return undefined;
    const attempts = (s: (typeof series)[number]) => (s.c?.lists ?? 0) + (s.c?.restarts ?? 0);
    const after = series.slice(k + 1).find((s) => attempts(s) > attempts(atK));
    // No failure since `from` and no attempt either: still waiting out a backoff.
    if (after === undefined && k === 0) return undefined;
    const t = after?.at ?? atK.at;
    if ((last.counters.get(resource)?.synced ?? 0) !== 1) return undefined;
    latest = Math.max(latest, t);
  }
  return latest;
}

// === the suite ===

/** Runs the kube suite. */
export async function runKubeSuite(): Promise<BenchResult[]> {
  const unavailable = kubeKitAvailable();
  if (unavailable !== undefined) throw new Error(`the kube bench needs the apiserver kit: ${unavailable}`);
  const dir = mkdtempSync(join(tmpdir(), 'ward-bench-kube-'));
  const progress = (s: string) => process.stderr.write(`kube: ${s}\n`);
  let kit: KubeKit | undefined;
  let client: KubeClient | undefined;
  const procs: LoggedChild[] = [];
  const grpcClients: InboundPolicyClient[] = [];
  const cancels: (() => void)[] = [];
  try {
    progress('starting the API server kit...');
    kit = await startKubeKit(join(dir, 'api'));
    const crds = execFileSync(process.execPath, [WARD_BIN, 'install', '--crds'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    await kit.kubectl(['apply', '--server-side', '-f', '-'], crds);
    await kit.kubectl([
      'wait',
      '--for=condition=Established',
      '--timeout=120s',
      ...['servers', 'authorizationpolicies', 'meshtlsauthentications', 'networkauthentications'].map((p) => `crd/${p}.${POLICY}`),
    ]);
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
    const kube = client;
    await kube.request({ method: 'POST', path: '/api/v1/namespaces', body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'linkerd' } } });
    // The CRDs answer 429 for about a second after they are Established (kit gotcha 2).
    await waitFor(
      'the policy CRDs to be served',
      async () => {
        try {
          await kube.request({ method: 'GET', path: '/apis/policy.linkerd.io/v1alpha1/authorizationpolicies', query: { limit: '1' } });
          return true;
        } catch {
          return undefined;
        }
      },
      60_000,
      250,
    );
    const idDir = join(dir, 'identity');
    const init = await initIdentity({ outDir: idDir });
    if (!init.ok) throw new Error(`identity init failed: ${init.diagnostics.map((d) => d.message).join('; ')}`);

    // The first controller runs through the creates.
    const procA = spawnController(dir, 'ward-controller-a', kit, idDir);
    procs.push(procA);
    const ctlA = await controllerReady(procA, 60_000);
    progress(`controller a ready (admin ${ctlA.admin}); creating objects...`);

    const pods: Create[] = [];
    const authn: Create[] = [];
    const servers: Create[] = [];
    const policies: Create[] = [];
    for (let n = 0; n < NAMESPACES; n++) {
      for (let p = 0; p < PODS_PER_NS; p++) pods.push(pod(n, p));
      const o = policyObjects(n);
      authn.push(...o.authn);
      servers.push(...o.servers);
      policies.push(...o.policies);
    }
    const want: Expected = {
      pods: pods.length,
      kinds: {
        Pod: pods.length,
        Server: servers.length,
        AuthorizationPolicy: policies.length,
        MeshTLSAuthentication: authn.filter((c) => c.body.kind === 'MeshTLSAuthentication').length,
        NetworkAuthentication: authn.filter((c) => c.body.kind === 'NetworkAuthentication').length,
      },
    };
    const t0 = performance.now();
    await pool(
      Array.from({ length: NAMESPACES }, (_, n) => n),
      CONCURRENCY,
      (n) =>
        kube
          .request({ method: 'POST', path: '/api/v1/namespaces', body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: nsName(n) } } })
          .then(() => {}),
    );
    const tNs = performance.now();
    await pool(pods, CONCURRENCY, (c) => create(kube, c));
    const tPods = performance.now();
    progress(`${pods.length} pods created with status in ${round((tPods - tNs) / 1000)} s`);
    await pool(authn, CONCURRENCY, (c) => create(kube, c));
    await pool(servers, CONCURRENCY, (c) => create(kube, c));
    await pool(policies, CONCURRENCY, (c) => create(kube, c));
    const tLast = performance.now();
    const policyCount = authn.length + servers.length + policies.length;
    progress(`${policyCount} policy objects created in ${round((tLast - tPods) / 1000)} s; waiting for controller a to agree...`);
    const agreeA = await agreed(ctlA, want, AGREE_TIMEOUT_MS, 100);
    const lastCreateToAgreeMs = agreeA - tLast;
    progress(`controller a agrees ${round(lastCreateToAgreeMs)} ms after the last create`);
    // The leader writes the status of every object it was told of; the rest is measured once it is done.
    progress('waiting for the status writes to end...');
    const status = await statusSettled(ctlA, STATUS_TIMEOUT_MS);
    const statusSettledMs = status.at - tLast;
    progress(`${status.writes} status writes, the last ${round(statusSettledMs)} ms after the last create`);
    await sleep(2000);
    const memA = residentMb(procA.pid);
    const heapA = await heapMb(ctlA);

    // The second controller: initial sync of everything at once.
    const tSpawnB = performance.now();
    const procB = spawnController(dir, 'ward-controller-b', kit, idDir);
    procs.push(procB);
    const ctlB = await controllerReady(procB, AGREE_TIMEOUT_MS);
    const tReadyB = performance.now();
    const agreeB = await agreed(ctlB, want, AGREE_TIMEOUT_MS, 100);
    const memB = residentMb(procB.pid);
    progress(`controller b ready ${round(tReadyB - tSpawnB)} ms after its start, agreeing after ${round(agreeB - tSpawnB)} ms`);
    await procB.stop();

    // Streams on the watched pods' port 8080, at controller a.
    const anchor = readFileSync(join(idDir, 'ca.crt'), 'utf8');
    for (let c = 0; c < CHANNELS; c++) {
      grpcClients.push(
        new InboundPolicyClient({ address: `127.0.0.1:${ctlA.policyPort}`, tls: { caPem: anchor, serverName: SERVER_NAME }, dedicatedConnection: true }),
      );
    }
    const counts = new Int32Array(WATCHED);
    const arrivals = new Float64Array(WATCHED);
    // The values themselves: serialising them here would delay the streams' later arrivals.
    const latest: unknown[] = new Array<unknown>(WATCHED).fill(undefined);
    const content = (i: number) => JSON.stringify(latest[i]) ?? '';
    let streamErrors = 0;
    for (let i = 0; i < WATCHED; i++) {
      const ns = nsName(Math.floor(i / PODS_PER_NS));
      const c = grpcClients[i % CHANNELS] as InboundPolicyClient;
      cancels.push(
        c.watchPort(`${ns}:${podName(i % PODS_PER_NS)}`, HTTP_PORT, {
          onMessage: (m) => {
            arrivals[i] = performance.now();
            counts[i] = (counts[i] as number) + 1;
            if (!m.ok) {
              streamErrors++;
              return;
            }
            latest[i] = m.value;
          },
          onEnd: (e) => {
            if (e !== undefined) streamErrors++;
          },
        }),
      );
    }
    progress(`opening ${WATCHED} WatchPort streams...`);
    await waitFor('every stream to get its first policy', () => (counts.every((c) => c >= 1) ? true : undefined), STREAMS_TIMEOUT_MS, 20);
    const firstWrong = latest.filter((_, i) => !content(i).includes(hotIdentity(0))).length;
    if (firstWrong > 0) throw new Error(`${firstWrong} streams' first policy lacks ${hotIdentity(0)}: ${content(0)}`);

    // Rounds of one PATCH reaching every stream.
    const latencies: number[] = [];
    const fromResponse: number[] = [];
    let wrongContent = 0;
    const hotPath = `${policyPath('v1alpha1', HOT_AUTHN.namespace, 'meshtlsauthentications')}/${HOT_AUTHN.name}`;
    for (let r = 1; r <= ROUNDS; r++) {
      const before = Int32Array.from(counts);
      // Spread the rounds over the controller's timers (status writer, bookmarks).
      await sleep(300 + ((r * 137) % 400));
      const w0 = performance.now();
      const w0Wall = new Date().toISOString();
      await kube.request({ method: 'PATCH', path: hotPath, body: { spec: { identities: [hotIdentity(r)] } } });
      const w1 = performance.now();
      await waitFor(
        `round ${r}: the ${WATCHED} streams`,
        () => {
          for (let i = 0; i < WATCHED; i++) if ((counts[i] as number) <= (before[i] as number)) return undefined;
          return true;
        },
        ROUND_TIMEOUT_MS,
        2,
      );
      for (let i = 0; i < WATCHED; i++) {
        latencies.push((arrivals[i] as number) - w0);
        fromResponse.push((arrivals[i] as number) - w1);
        if (!content(i).includes(hotIdentity(r))) wrongContent++;
      }
      // The write's wall time, to line the round up with the controller's log.
      const roundMs = latencies.slice(-WATCHED).sort((a, b) => a - b);
      progress(
        `round ${r}/${ROUNDS} (PATCH at ${w0Wall}, answered in ${round(w1 - w0)} ms): first ${round(roundMs[0] as number)} ms, p99 ${round(percentile(roundMs, 99))} ms`,
      );
    }
    latencies.sort((a, b) => a - b);
    fromResponse.sort((a, b) => a - b);
    const memAfterStreams = residentMb(procA.pid);

    // The API server restart.
    await sleep(1000);
    const snapshot = latest.map((_, i) => content(i));
    const countsBefore = Int32Array.from(counts);
    const scrapes: { at: number; counters: Counters }[] = [];
    let scraping = true;
    let scrapeFailures = 0;
    const scraper = (async () => {
      while (scraping) {
        try {
          scrapes.push({ at: performance.now(), counters: await reflectorCounters(ctlA) });
        } catch {
          scrapeFailures++;
        }
        await sleep(SCRAPE_MS);
      }
    })();
    progress('stopping the API server...');
    const tDown = performance.now();
    await kit.stopApiserver();
    const tStopped = performance.now();
    await sleep(2000);
    const tStart = performance.now();
    await kit.startApiserver();
    const tUp = performance.now();
    progress(`API server ready again (${round((tUp - tDown) / 1000)} s after the stop); waiting for the reflectors...`);
    let resyncAt: number | undefined;
    try {
      // From the start: the API server serves (and the reflectors relist) before its /readyz says so.
      resyncAt = await waitFor(
        'the reflectors to resync',
        () =>
          resyncedAt(
            scrapes.filter((s) => s.at >= tStart),
            tStart,
          ),
        RESYNC_TIMEOUT_MS,
        SCRAPE_MS,
      );
    } finally {
      scraping = false;
      await scraper;
    }
    const upScrapes = scrapes.filter((s) => s.at >= tStart);
    const finalCounters = upScrapes[upScrapes.length - 1]?.counters ?? new Map();
    const downCounters = scrapes.filter((s) => s.at < tDown).pop()?.counters ?? new Map();
    let relists = 0;
    for (const [resource, c] of finalCounters) relists += c.lists - (downCounters.get(resource)?.lists ?? 0);
    await sleep(AFTER_RESYNC_MS);
    const stillAgrees = (await disagreement(ctlA, want)) ?? 'yes';
    let updatesDuringRelist = 0;
    let changedDecisions = 0;
    for (let i = 0; i < WATCHED; i++) {
      if (counts[i] !== countsBefore[i]) updatesDuringRelist++;
      if (content(i) !== snapshot[i]) changedDecisions++;
    }
    const p50 = percentile(latencies, 50);
    const p99 = percentile(latencies, 99);
    const syncB = tReadyB - tSpawnB;
    const results: BenchResult[] = [
      {
        name: `create ${pods.length} pods with status`,
        nsPerOp: Math.round(((tPods - tNs) * 1e6) / pods.length),
        opsPerSec: round(pods.length / ((tPods - tNs) / 1000)),
        seconds: round((tPods - tNs) / 1000, 2),
        inFlight: CONCURRENCY,
      },
      {
        name: `create ${policyCount} policy objects`,
        nsPerOp: Math.round(((tLast - tPods) * 1e6) / policyCount),
        opsPerSec: round(policyCount / ((tLast - tPods) / 1000)),
        seconds: round((tLast - tPods) / 1000, 2),
        servers: servers.length,
        authorizationPolicies: policies.length,
        authentications: authn.length,
      },
      { name: 'create everything', nsPerOp: null, opsPerSec: null, seconds: round((tLast - t0) / 1000, 2), namespaces: NAMESPACES },
      { name: 'last create -> index agrees (controller running)', nsPerOp: null, opsPerSec: null, ms: round(lastCreateToAgreeMs) },
      {
        name: 'last create -> last status write (leader)',
        nsPerOp: null,
        opsPerSec: null,
        ms: round(statusSettledMs),
        writes: status.writes,
        settled: status.settled,
      },
      {
        name: 'initial sync (controller started after the creates)',
        nsPerOp: null,
        opsPerSec: null,
        ms: round(syncB),
        agreeMs: round(agreeB - tSpawnB),
        rssMb: round(memB.rss),
        targetMs: TARGET_SYNC_MS,
        meetsTarget: syncB < TARGET_SYNC_MS,
      },
      {
        name: 'controller RSS after sync',
        nsPerOp: null,
        opsPerSec: null,
        rssMb: round(memA.rss),
        privateMb: round(memA.private),
        heapUsedMb: round(heapA.used),
        heapTotalMb: round(heapA.total),
        withStreamsRssMb: round(memAfterStreams.rss),
        targetMb: TARGET_RSS_MB,
        meetsTarget: memA.rss < TARGET_RSS_MB,
      },
      {
        name: `AuthorizationPolicy change -> ${WATCHED} WatchPort updates`,
        nsPerOp: null,
        opsPerSec: null,
        p50Ms: round(p50, 2),
        p99Ms: round(p99, 2),
        maxMs: round(latencies[latencies.length - 1] as number, 2),
        fromResponseP99Ms: round(percentile(fromResponse, 99), 2),
        samples: latencies.length,
        rounds: ROUNDS,
        wrongContent,
        streamErrors,
        targetMs: TARGET_P99_MS,
        meetsTarget: p99 < TARGET_P99_MS && wrongContent === 0,
      },
      {
        name: 'API server restart -> reflectors resynced',
        nsPerOp: null,
        opsPerSec: null,
        resyncMs: resyncAt === undefined ? null : round(resyncAt - tStart),
        afterReadyMs: resyncAt === undefined ? null : round(resyncAt - tUp),
        apiserverStartMs: round(tUp - tStart),
        apiserverStopMs: round(tStopped - tDown),
        relists,
        updatesDuringRelist,
        changedDecisions,
        indexAgrees: stillAgrees,
        scrapeFailures,
        meetsTarget: changedDecisions === 0 && stillAgrees === 'yes',
      },
    ];
    if (changedDecisions > 0 || stillAgrees !== 'yes') {
      process.stderr.write(`${JSON.stringify({ suite: 'kube', results })}\n`);
      throw new Error(`the API server restart changed ${changedDecisions} streams' policy (index agrees: ${stillAgrees})`);
    }
    return results;
  } finally {
    for (const c of cancels) c();
    for (const c of grpcClients) c.close();
    for (const p of procs.reverse()) await p.stop();
    client?.close();
    await kit?.stop();
    if (process.env.WARD_BENCH_KEEP === '1') process.stderr.write(`kube: kept ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
}
