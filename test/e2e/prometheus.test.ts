/**
 * The Prometheus metrics backend against a real Prometheus (Debian's) scraping a real `ward up`
 * of test/e2e/prometheus-mesh (pods from 127.20.224.1): `ward prometheus-config --local` writes
 * its configuration (promtool accepts it), the test asks the client pod to call the server and
 * the intruder pod to be denied, twice the same traffic (the first round makes every series and
 * bucket exist before the second, so Prometheus's extrapolation scales them alike), and then:
 *
 * - totals (`latest` of counters) and gauges equal what the server's proxy exposes, with the
 *   labels the configuration adds (namespace, pod, workload_kind, workload_name);
 * - `rate` over a window from just before the second round to now, times the window, is the
 *   second round's count, give or take what the scrape interval explains at the window's edges;
 * - `quantile` equals histogram_quantile computed here from the round's bucket counts;
 * - `targets` lists every meshed pod, up, at its admin address;
 * - ward up's controller runs its embedded collector every second beside Prometheus: stat and
 *   edges computed over Prometheus, and those of a `ward controller --metrics-backend prometheus`
 *   on the same manifests, give the same rows, edges, connections and quantiles as ward up's,
 *   and counts within the same bounds;
 * - hostile label values match nothing where the same text pasted into PromQL unescaped would
 *   inject a series;
 * - the Kubernetes relabelling, run by Prometheus on targets carrying pod discovery's labels,
 *   gives each pod its namespace, pod and owning workload, and drops what is not a proxy;
 * - a stopped Prometheus is a PrometheusError naming it, and the controller answers 503
 *   METRICS_UNAVAILABLE with the same message.
 *
 * Skipped with a message when /usr/bin/prometheus is absent, except under CI=true.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { kubernetesPrometheusConfig } from '../../src/cli/commands/prometheus-config.js';
import type { Sample, SeriesQuery, TargetHealth } from '../../src/controller/observe/metrics-backend.js';
import { computeEdges, computeStat, type Edge, Inventory, type StatRow } from '../../src/controller/observe/observe-views.js';
import { PrometheusBackend, type PrometheusError } from '../../src/controller/observe/prometheus-backend.js';
import { controllerPorts, localMeshApi, metricSum, upControllerFlags, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const PROMETHEUS = '/usr/bin/prometheus';
const PROMTOOL = '/usr/bin/promtool';
const MESH_DIR = new URL('prometheus-mesh/', import.meta.url).pathname;
const FIRST_IP = '127.20.224.1';
const SERVER_URL = 'http://server.demo.svc.cluster.local/work';
const idOf = (sa: string) => `${sa}.demo.serviceaccount.identity.linkerd.cluster.local`;
/** Calls per round: allowed (client) and denied (intruder), and the server's delays (ms), spread over several latency buckets. */
const ALLOWED = 24;
const DENIED = 5;
const DELAYS = [0, 3, 7, 15, 25, 45];
/**
 * The window compared, at least, and how much of it the scrapes inside it may leave uncovered:
 * up to LEAD_MS at its start, and about a scrape interval (1 s) at each end, more on a loaded
 * machine.
 */
const MIN_WINDOW_S = 30;
const EDGE_S = 6;
/** How late after t0 a compared window may start and still hold a scrape of round 1's counts. */
const LEAD_MS = 3000;

const skip = existsSync(PROMETHEUS) || process.env.CI === 'true' ? false : `${PROMETHEUS} is absent (install Debian's prometheus package to run it)`;

interface PodJson {
  namespace: string;
  name: string;
  owner: string | null;
  ip: string;
  ready: boolean;
  adminAddress: string | null;
  identity: string | null;
}

let work: string;
let state: string;
let up: WardProcess;
let api: string;
let token: string;
let pods: PodJson[] = [];
let prometheus: ChildProcess | undefined;
let prometheusLog = '';
let promUrl: string;
let backend: PrometheusBackend;
/** A `ward controller --metrics-backend prometheus` on the mesh's manifests, and its admin URL. */
let promCtl: WardProcess | undefined;
let promController: string | undefined;
/** ward up's controller (the embedded collector, scraping every second). */
let controller: string;
/** Start of the compared window: after round 1 was scraped by both, before round 2. */
let t0 = 0;
/** Round 2's cumulative latency bucket counts at the server, by upper bound. */
let round2 = new Map<number, number>();
const windowNow = () => (Date.now() - t0) / 1000;

const podNamed = (name: string) => {
  const p = pods.find((x) => x.name === name || x.owner === `Deployment/${name}`);
  assert.ok(p, `pod ${name} is listed`);
  return p;
};

async function meshPods(): Promise<PodJson[]> {
  const res = await fetch(`${api}/api/v1/local/status`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) });
  return ((await res.json()) as { pods: PodJson[] }).pods;
}

/** Asks the relay of pod `name` to call the server `n` times; the statuses it got. */
async function callsFrom(name: string, n: number): Promise<number[]> {
  const q = new URLSearchParams({ url: SERVER_URL, n: String(n), delays: DELAYS.join(',') });
  const res = await fetch(`http://${podNamed(name).ip}:8080/call?${q}`, { signal: AbortSignal.timeout(60_000) });
  return ((await res.json()) as { statuses: number[] }).statuses;
}

/** One round of traffic: ALLOWED calls from client, DENIED from intruder. */
async function round(): Promise<void> {
  const [allowed, denied] = await Promise.all([callsFrom('client', ALLOWED), callsFrom('intruder', DENIED)]);
  assert.deepEqual(allowed, Array(ALLOWED).fill(200));
  assert.deepEqual(denied, Array(DENIED).fill(403));
}

/** The server proxy's own exposition: the truth Prometheus copies. */
async function serverMetrics(): Promise<string> {
  const res = await fetch(`http://${podNamed('server').adminAddress}/metrics`, { signal: AbortSignal.timeout(5000) });
  assert.equal(res.status, 200);
  return res.text();
}

const SERVER_HTTP = { direction: 'inbound', target_port: '8080' };
const BY = ['namespace', 'pod', 'workload_kind', 'workload_name'];

/** The one sample of `samples` (asserting there is exactly one). */
function only(samples: readonly Sample[], what: string): Sample {
  assert.equal(samples.length, 1, `${what}: ${JSON.stringify(samples)}`);
  return samples[0] as Sample;
}

/** The cumulative bucket counts of the server's inbound latency histogram, by upper bound. */
function buckets(text: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const m of text.matchAll(/^response_latency_ms_bucket\{(.*)\} (\S+)$/gm)) {
    const labels = m[1] as string;
    if (!labels.includes('direction="inbound"') || !labels.includes('target_port="8080"')) continue;
    const le = /(?:^|,)le="([^"]+)"/.exec(labels)?.[1] as string;
    const bound = le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le);
    out.set(bound, (out.get(bound) ?? 0) + Number(m[2]));
  }
  return out;
}

/** Prometheus's histogram_quantile over cumulative bucket counts (upper bound → count). */
function histogramQuantile(q: number, counts: ReadonlyMap<number, number>): number {
  const b = [...counts].sort((x, y) => x[0] - y[0]);
  const total = b[b.length - 1]?.[1] ?? 0;
  assert.ok(b.length >= 2 && total > 0);
  let rank = q * total;
  const i = b.findIndex(([, c], k) => k < b.length - 1 && c >= rank);
  if (i === -1) return b[b.length - 2]?.[0] as number;
  const [end, endCount] = b[i] as [number, number];
  if (i === 0 && end <= 0) return end;
  let start = 0;
  let count = endCount;
  if (i > 0) {
    const [prevBound, prevCount] = b[i - 1] as [number, number];
    start = prevBound;
    count -= prevCount;
    rank -= prevCount;
  }
  return start + (end - start) * (rank / count);
}

/** The raw samples of `metric` on the server's HTTP port over the last `seconds`, to explain a failed comparison. */
async function samplesOf(metric: string, seconds: number): Promise<string> {
  const query = `${metric}{job="linkerd-proxy",workload_name="server",target_port="8080"}[${Math.ceil(seconds)}s]`;
  const res = await fetch(`${promUrl}/api/v1/query`, { method: 'POST', body: new URLSearchParams({ query }) });
  return JSON.stringify(((await res.json()) as { data: unknown }).data);
}

/** GET `path` of a controller's admin API (JSON), by default ward up's. */
async function controllerGet<T>(path: string, base = controller): Promise<T> {
  const res = await fetch(`${base}${path}`, { signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  assert.equal(res.status, 200, `${path}: ${text}`);
  return JSON.parse(text) as T;
}

/** The views' pods, from the mesh's status (a pod's ServiceAccount is its identity's first label). */
function inventory(): Inventory {
  return new Inventory(
    pods.map((p) => ({
      namespace: p.namespace,
      name: p.name,
      serviceAccount: p.identity?.split('.')[0] ?? 'default',
      workload: p.owner !== null ? { kind: p.owner.split('/')[0] as string, name: p.owner.split('/')[1] as string } : { kind: 'Pod', name: p.name },
      meshed: p.adminAddress !== null,
      identity: p.identity,
    })),
  );
}

/** `n` requests over `w` seconds, give or take the window's edges: the bounds a rate must fall in. */
function assertCount(rps: number, w: number, n: number, what: string): void {
  assert.ok(rps * w >= n - 1e-9 && rps * w <= (n * w) / (w - EDGE_S), `${what}: ${rps}/s over ${w} s is ${rps * w}, want ${n}`);
}

/** The JSON of /api/v1/stat and of `ward stat -o json`. */
interface StatJson {
  readonly window: number;
  readonly backend: string;
  readonly rows: readonly StatRow[];
}

/** The JSON of /api/v1/edges and of `ward edges -o json`. */
interface EdgesJson {
  readonly window: number;
  readonly backend: string;
  readonly edges: readonly Edge[];
}

/** Stat over Prometheus (`prom`) and over the embedded collector: the same rows, round 2's counts over window `w`, its quantiles. */
function compareStat(prom: StatJson, embedded: StatJson, w: number): void {
  assert.deepEqual([prom.backend, embedded.backend], ['prometheus', 'embedded']);
  const key = (r: StatRow) => [r.namespace, r.kind, r.name, r.port, r.meshed, r.pods, r.successRate, r.tcpConnections];
  assert.deepEqual(prom.rows.map(key), embedded.rows.map(key));
  assert.ok(prom.rows.length > 0);
  for (const [name, rows] of [
    ['Prometheus', prom.rows],
    ['embedded', embedded.rows],
  ] as const) {
    for (const r of rows) {
      assertCount(r.rps, w, ALLOWED, `${name} stat rps, port ${r.port}`);
      assertCount(r.deniedRps, w, DENIED, `${name} stat deniedRps, port ${r.port}`);
      for (const [q, got] of [
        [0.5, r.p50Ms],
        [0.95, r.p95Ms],
        [0.99, r.p99Ms],
      ] as const) {
        const want = histogramQuantile(q, round2);
        assert.ok(got !== null && Math.abs(got - want) <= 1e-6 * Math.max(1, want), `${name} p${q * 100}: ${got}, round 2's buckets ${want}`);
      }
    }
  }
}

/** Edges over Prometheus and over the embedded collector: the same edges and connections, round 2's counts over window `w`. */
function compareEdges(prom: EdgesJson, embedded: EdgesJson, w: number): void {
  assert.deepEqual([prom.backend, embedded.backend], ['prometheus', 'embedded']);
  const edgeKey = (e: Edge) => JSON.stringify([e.src, e.srcIdentity, e.dst, e.dstIdentity, e.port, e.secured, e.reason]);
  const toServer = (edges: readonly Edge[]) => edges.filter((e) => e.dst.name === 'server' && e.port === 8080);
  assert.deepEqual(toServer(prom.edges).map(edgeKey), toServer(embedded.edges).map(edgeKey));
  assert.deepEqual(new Set(prom.edges.map(edgeKey)), new Set(embedded.edges.map(edgeKey)));
  for (const [name, edges] of [
    ['Prometheus', prom.edges],
    ['embedded', embedded.edges],
  ] as const) {
    const fromClient = toServer(edges).find((e) => e.srcIdentity === idOf('client'));
    const fromIntruder = toServer(edges).find((e) => e.srcIdentity === idOf('intruder'));
    assert.ok(fromClient && fromIntruder, `${name}: ${JSON.stringify(toServer(edges))}`);
    assert.deepEqual(
      [fromClient.src, fromClient.secured, fromIntruder.src, fromIntruder.secured],
      [{ namespace: 'demo', kind: 'Pod', name: 'client' }, true, { namespace: 'demo', kind: 'Pod', name: 'intruder' }, true],
    );
    assertCount(fromClient.rps, w, ALLOWED, `${name} client → server rps`);
    assertCount(fromIntruder.deniedRps, w, DENIED, `${name} intruder → server deniedRps`);
  }
}

/**
 * Waits until the edges `views` gives (over Prometheus, over the embedded collector) count the
 * same open connections to the server: gauges agree once a scrape of each has seen the last
 * change (the callers' pooled connections close when idle, at any time).
 */
async function connectionsAgree(views: () => Promise<[EdgesJson, EdgesJson]>): Promise<void> {
  const conns = (v: EdgesJson) => JSON.stringify(v.edges.filter((e) => e.dst.name === 'server' && e.port === 8080).map((e) => [e.srcIdentity, e.connections]));
  let last = '';
  try {
    await waitFor(
      'both backends to count the same connections',
      async () => {
        const [prom, embedded] = await views();
        last = `Prometheus ${conns(prom)}, embedded ${conns(embedded)}`;
        return conns(prom) === conns(embedded) ? true : undefined;
      },
      20_000,
      500,
    );
  } catch (e) {
    throw new Error(`${(e as Error).message} (last: ${last})`);
  }
}

async function freePort(): Promise<number> {
  const s = createServer();
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  const port = (s.address() as AddressInfo).port;
  s.close();
  await once(s, 'close');
  return port;
}

/** Starts Prometheus on a free port (another try if the port was taken meanwhile); resolves once it is ready. */
async function startPrometheus(configFile: string): Promise<string> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const child = spawn(
      PROMETHEUS,
      [`--config.file=${configFile}`, `--storage.tsdb.path=${join(work, `tsdb-${attempt}`)}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    prometheus = child;
    child.stderr?.on('data', (c: Buffer) => {
      prometheusLog += c.toString();
    });
    const url = `http://127.0.0.1:${port}`;
    try {
      await waitFor(
        `Prometheus to be ready (log: ${prometheusLog.slice(-1000)})`,
        async () => {
          if (child.exitCode !== null) throw new Error(`prometheus exited with ${child.exitCode}: ${prometheusLog.slice(-1000)}`);
          try {
            return (await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(2000) })).status === 200 ? true : undefined;
          } catch {
            return undefined;
          }
        },
        60_000,
        100,
      );
      return url;
    } catch (e) {
      child.kill('SIGKILL');
      if (attempt >= 3 || !/address already in use/.test(prometheusLog)) throw e;
    }
  }
}

async function stopPrometheus(): Promise<void> {
  const child = prometheus;
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/** Pods as Kubernetes pod discovery describes them, for the relabelling test (nothing listens at their addresses). */
const DISCOVERED = [
  { pod: 'web-5d4f8b6c9-x7kqz', container: 'linkerd-proxy', port: 'linkerd-admin', kind: 'ReplicaSet', owner: 'web-5d4f8b6c9', hash: '5d4f8b6c9' },
  { pod: 'db-0', container: 'linkerd-proxy', port: 'linkerd-admin', kind: 'StatefulSet', owner: 'db', hash: '' },
  { pod: 'solo', container: 'linkerd-proxy', port: 'linkerd-admin', kind: '', owner: '', hash: '' },
  { pod: 'bare-rs-abcde', container: 'linkerd-proxy', port: 'linkerd-admin', kind: 'ReplicaSet', owner: 'bare-rs', hash: '' },
  { pod: 'report-28901234-qq8lm', container: 'linkerd-proxy', port: 'linkerd-admin', kind: 'Job', owner: 'report-28901234', hash: '' },
  // Not a proxy's admin port: dropped.
  { pod: 'web-5d4f8b6c9-x7kqz', container: 'web', port: 'http', kind: 'ReplicaSet', owner: 'web-5d4f8b6c9', hash: '5d4f8b6c9' },
  { pod: 'web-5d4f8b6c9-x7kqz', container: 'linkerd-proxy', port: 'linkerd-proxy', kind: 'ReplicaSet', owner: 'web-5d4f8b6c9', hash: '5d4f8b6c9' },
  { pod: 'done-0', container: 'linkerd-proxy', port: 'linkerd-admin', kind: '', owner: '', hash: '', phase: 'Succeeded' },
];

/** A job with the Kubernetes configuration's relabelling over static targets labelled as pod discovery labels them. */
function relabelJob(): Record<string, unknown> {
  const k8s = parse(kubernetesPrometheusConfig({ scrapeInterval: '1s' })) as { scrape_configs: { relabel_configs: unknown[] }[] };
  return {
    job_name: 'kubernetes-relabel',
    scrape_interval: '1m',
    static_configs: DISCOVERED.map((d, i) => ({
      targets: [`127.20.224.${200 + i}:4191`],
      labels: {
        __meta_kubernetes_namespace: 'shop',
        __meta_kubernetes_pod_name: d.pod,
        __meta_kubernetes_pod_phase: d.phase ?? 'Running',
        __meta_kubernetes_pod_container_name: d.container,
        __meta_kubernetes_pod_container_port_name: d.port,
        ...(d.kind !== '' ? { __meta_kubernetes_pod_controller_kind: d.kind, __meta_kubernetes_pod_controller_name: d.owner } : {}),
        ...(d.hash !== '' ? { __meta_kubernetes_pod_label_pod_template_hash: d.hash } : {}),
      },
    })),
    relabel_configs: k8s.scrape_configs[0]?.relabel_configs,
  };
}

describe('e2e: the Prometheus metrics backend on a real Prometheus scraping ward up', { timeout: 400_000, skip }, () => {
  before(async () => {
    // Reached under CI=true only: there the binary must be installed.
    assert.ok(existsSync(PROMETHEUS), `${PROMETHEUS} is absent: .ci/run installs Debian's prometheus package`);
    work = mkdtempSync(join(tmpdir(), 'ward-e2e-prometheus-'));
    state = join(work, 'state');
    up = wardSpawn(['up', MESH_DIR, '--state-dir', state, ...upControllerFlags(), '--first-pod-ip', FIRST_IP], { WARD_SCRAPE_INTERVAL: '1s' });
    ({ api, token } = await localMeshApi(up, state));
    controller = (JSON.parse(readFileSync(join(state, 'mesh.json'), 'utf8')) as { controller: string }).controller;
    pods = await waitFor(
      `the mesh's pods to be ready (ward up: ${up.stdout()}${up.stderr()})`,
      async () => {
        const ps = await meshPods();
        return ps.length === 3 && ps.every((p) => p.ready && p.adminAddress !== null) ? ps : undefined;
      },
      90_000,
      250,
    );
    const cfg = wardSync(['prometheus-config', '--local', '--state-dir', state, '--scrape-interval', '1s']);
    assert.equal(cfg.status, 0, cfg.stderr);
    const config = parse(cfg.stdout) as { scrape_configs: unknown[] };
    config.scrape_configs.push(relabelJob());
    const file = join(work, 'prometheus.yml');
    writeFileSync(file, `${cfg.stdout.split('\nglobal:')[0]}\n${stringify(config)}`);
    if (existsSync(PROMTOOL)) {
      const check = spawnSync(PROMTOOL, ['check', 'config', file], { encoding: 'utf8', timeout: 60_000 });
      assert.equal(check.status, 0, `promtool: ${check.stdout}${check.stderr}`);
    }
    promUrl = await startPrometheus(file);
    backend = new PrometheusBackend({ url: promUrl });
  });

  after(async () => {
    await promCtl?.stop(10_000);
    await stopPrometheus();
    if (up !== undefined && up.child.exitCode === null) await up.stop(10_000);
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  it('targets: every meshed pod, up, at its admin address, with its namespace and pod', async () => {
    const want = pods.map((p) => ({ namespace: p.namespace, pod: p.name, address: p.adminAddress, up: true })).sort((a, b) => a.pod.localeCompare(b.pod));
    await waitFor(
      'Prometheus to scrape every pod',
      async () => {
        const got = (await backend.targets()).map((t) => ({ namespace: t.namespace, pod: t.pod, address: t.address, up: t.up }));
        return JSON.stringify(got) === JSON.stringify(want) ? true : undefined;
      },
      60_000,
      250,
    );
    for (const t of await backend.targets()) {
      assert.ok(t.lastScrape !== null && Date.parse(t.lastScrape) > Date.now() - 60_000, JSON.stringify(t));
      assert.equal(t.error, undefined);
    }
  });

  it('totals, gauges, rates over a quiet window and quantiles agree with what the server proxy counted', async () => {
    const server = podNamed('server');
    const labels = { namespace: 'demo', pod: server.name, workload_kind: 'Deployment', workload_name: 'server' };
    const requests: SeriesQuery = { metric: 'request_total', match: { ...SERVER_HTTP, workload_name: 'server' }, by: BY };
    const denials: SeriesQuery = { metric: 'inbound_http_authz_deny_total', match: { target_port: '8080', workload_name: 'server' }, by: [...BY, 'client_id'] };
    /** Prometheus's totals once they equal `allowed` and `denied`. */
    const scraped = (allowed: number, denied: number) =>
      waitFor(
        `Prometheus to hold ${allowed} allowed and ${denied} denied requests`,
        async () => {
          const [a, d] = await Promise.all([backend.latest(requests), backend.latest(denials)]);
          return a[0]?.value === allowed && d[0]?.value === denied ? true : undefined;
        },
        60_000,
        200,
      );

    // Round 1 makes every series and bucket exist.
    await round();
    await scraped(ALLOWED, DENIED);
    // Windows start at t0, or up to LEAD_MS later (the time a query takes to start): Prometheus
    // and the embedded collector both scrape round 1's counts after t0 + LEAD_MS, before round 2.
    t0 = Date.now();
    const scrapedSince = (targets: readonly TargetHealth[]) => {
      const t = targets.find((x) => x.pod === server.name);
      return t?.lastScrape != null && Date.parse(t.lastScrape) >= t0 + LEAD_MS;
    };
    await waitFor(
      'a scrape of the server after t0 + LEAD_MS by both',
      async () =>
        scrapedSince(await backend.targets()) && scrapedSince((await controllerGet<{ targets: TargetHealth[] }>('/api/v1/observe/targets')).targets)
          ? true
          : undefined,
      30_000,
      100,
    );
    const before = await serverMetrics();
    await round();
    const afterRound = await serverMetrics();
    assert.equal(metricSum(afterRound, 'request_total', SERVER_HTTP), 2 * ALLOWED);
    assert.equal(metricSum(afterRound, 'inbound_http_authz_deny_total', { target_port: '8080' }), 2 * DENIED);
    await scraped(2 * ALLOWED, 2 * DENIED);

    // Totals: exactly the proxy's, with the configuration's labels.
    assert.deepEqual(await backend.latest(requests), [{ labels, value: 2 * ALLOWED }]);
    assert.deepEqual(await backend.latest(denials), [{ labels: { ...labels, client_id: idOf('intruder') }, value: 2 * DENIED }]);

    // Gauges: the proxy's open connections (the callers' pooled connections), once both agree.
    const conns: SeriesQuery = { metric: 'tcp_open_connections', match: { ...SERVER_HTTP, workload_name: 'server' }, by: ['client_id'] };
    await waitFor(
      'Prometheus and the proxy to agree on open connections',
      async () => {
        const text = await serverMetrics();
        const want = [idOf('client'), idOf('intruder')]
          .map((id) => ({ labels: { client_id: id }, value: metricSum(text, 'tcp_open_connections', { ...SERVER_HTTP, client_id: id }) }))
          .filter((s) => s.value > 0);
        const got = [...(await backend.latest(conns))].sort((a, b) => (a.labels.client_id ?? '').localeCompare(b.labels.client_id ?? ''));
        return want.length > 0 && JSON.stringify(got) === JSON.stringify(want) ? true : undefined;
      },
      30_000,
      250,
    );

    // Rates over a window from t0 (after round 1 was scraped, with a scrape before round 2) to now, once it is
    // long enough: rate × window is round 2's count, plus at most what extrapolating over the
    // window's first and last scrape intervals adds.
    await waitFor('the window to be long enough', () => (Date.now() - t0 >= MIN_WINDOW_S * 1000 ? true : undefined), MIN_WINDOW_S * 1000 + 5000, 250);
    let w = windowNow();
    const rate = only(await backend.rate(requests, w), 'request rate');
    assert.deepEqual(rate.labels, labels);
    assert.ok(
      rate.value * w >= ALLOWED - 1e-9 && rate.value * w <= (ALLOWED * w) / (w - EDGE_S),
      `rate ${rate.value}/s over ${w} s: ${rate.value * w} requests, want ${ALLOWED} (t0 ${t0 / 1000}; samples ${await samplesOf('request_total', w + 5)})`,
    );
    console.log(`# request rate × window: ${(rate.value * w).toFixed(2)} for ${ALLOWED} requests over ${w.toFixed(1)} s`);
    w = windowNow();
    const denied = only(await backend.rate(denials, w), 'denial rate');
    assert.ok(denied.value * w >= DENIED - 1e-9 && denied.value * w <= (DENIED * w) / (w - EDGE_S), `denials ${denied.value}/s over ${w} s`);
    w = windowNow();
    const total = only(await backend.rate({ metric: 'request_total', match: SERVER_HTTP, by: [] }, w), 'request rate, no grouping');
    assert.deepEqual(total.labels, {});

    // Quantiles: Prometheus's over the rates of the buckets equal those of round 2's bucket counts.
    const b0 = buckets(before);
    round2 = new Map([...buckets(afterRound)].map(([le, c]) => [le, c - (b0.get(le) ?? 0)]));
    assert.equal(round2.get(Number.POSITIVE_INFINITY), ALLOWED);
    for (const q of [0.5, 0.95, 0.99]) {
      const want = histogramQuantile(q, round2);
      const got = only(
        await backend.quantile(q, { metric: 'response_latency_ms', match: { ...SERVER_HTTP, workload_name: 'server' }, by: ['workload_name'] }, windowNow()),
        `p${q * 100}`,
      );
      assert.deepEqual(got.labels, { workload_name: 'server' });
      console.log(`# p${q * 100}: Prometheus ${got.value.toFixed(3)} ms, round 2's buckets ${want.toFixed(3)} ms`);
      assert.ok(Math.abs(got.value - want) <= 1e-6 * Math.max(1, want), `p${q * 100}: Prometheus ${got.value}, the buckets ${want}`);
    }
    // No requests in the last seconds: the buckets' rates are 0, Prometheus's quantile NaN, left out.
    const quiet = { metric: 'response_latency_ms', match: { ...SERVER_HTTP, workload_name: 'server' }, by: [] };
    assert.equal(only(await backend.rate({ ...quiet, metric: 'response_latency_ms_count' }, 3), 'quiet rate').value, 0);
    assert.deepEqual(await backend.quantile(0.5, quiet, 3), []);
  });

  it("edges and stat computed over Prometheus agree with the embedded collector's", async () => {
    let w = windowNow();
    const embeddedStat = await controllerGet<StatJson>(`/api/v1/stat?resource=deploy/server&namespace=demo&window=${w.toFixed(3)}`);
    const promStat = await computeStat(backend, inventory(), { namespace: 'demo', kind: 'Deployment', name: 'server' }, w);
    compareStat(promStat, embeddedStat, w);
    console.log(`# stat rps × window: Prometheus ${(promStat.rows[0]?.rps ?? 0) * w}, embedded ${(embeddedStat.rows[0]?.rps ?? 0) * w}, for ${ALLOWED}`);
    w = windowNow();
    const embeddedEdges = await controllerGet<EdgesJson>(`/api/v1/edges?namespace=demo&window=${w.toFixed(3)}`);
    compareEdges(await computeEdges(backend, inventory(), { namespace: 'demo' }, w), embeddedEdges, w);
    await connectionsAgree(async () => [
      await computeEdges(backend, inventory(), { namespace: 'demo' }, 60),
      await controllerGet<EdgesJson>('/api/v1/edges?namespace=demo&window=60'),
    ]);
  });

  it("a controller with --metrics-backend prometheus answers /api/v1/stat and /api/v1/edges as ward up's embedded collector", async () => {
    const idDir = join(work, 'controller-identity');
    const init = wardSync(['identity', 'init', '--out', idDir]);
    assert.equal(init.status, 0, init.stderr);
    promCtl = wardSpawn([
      'controller',
      '--manifests',
      MESH_DIR,
      '--identity-dir',
      idDir,
      ...upControllerFlags(),
      '--metrics-backend',
      'prometheus',
      '--prometheus-url',
      promUrl,
    ]);
    promController = `http://127.0.0.1:${(await controllerPorts(promCtl)).admin}`;
    let w = windowNow();
    const stat = `/api/v1/stat?resource=deploy/server&namespace=demo&window=${w.toFixed(3)}`;
    compareStat(await controllerGet<StatJson>(stat, promController), await controllerGet<StatJson>(stat), w);
    w = windowNow();
    const edges = `/api/v1/edges?namespace=demo&window=${w.toFixed(3)}`;
    compareEdges(await controllerGet<EdgesJson>(edges, promController), await controllerGet<EdgesJson>(edges), w);
    await connectionsAgree(async () => [await controllerGet<EdgesJson>(edges, promController), await controllerGet<EdgesJson>(edges)]);
  });

  it("ward stat and ward edges through that controller print what they print through ward up's", async () => {
    const controllerUrl = promController;
    assert.ok(controllerUrl !== undefined, 'the controller with the Prometheus backend runs');
    /** `ward ARGS -o json --window W --controller URL`, parsed. */
    const cli = <T>(args: string[], url: string, w: number): T => {
      const r = wardSync([...args, '-o', 'json', '--window', `${Math.floor(w * 1000)}ms`, '--controller', url]);
      assert.equal(r.status, 0, `ward ${args.join(' ')}: ${r.stderr}`);
      return JSON.parse(r.stdout) as T;
    };
    let w = windowNow();
    const stat = ['stat', 'deploy/server', '-n', 'demo'];
    compareStat(cli<StatJson>(stat, controllerUrl, w), cli<StatJson>(stat, controller, w), w);
    w = windowNow();
    compareEdges(cli<EdgesJson>(['edges', '-n', 'demo'], controllerUrl, w), cli<EdgesJson>(['edges', '-n', 'demo'], controller, w), w);
    await connectionsAgree(() =>
      Promise.resolve([cli<EdgesJson>(['edges', '-n', 'demo'], controllerUrl, 60), cli<EdgesJson>(['edges', '-n', 'demo'], controller, 60)]),
    );
    // The table a user reads names the backend's edges the same way.
    const text = wardSync(['edges', '-n', 'demo', '--window', `${Math.floor(windowNow() * 1000)}ms`, '--controller', controllerUrl]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /client\s+server\s/);
  });

  it('hostile label values match nothing; the same text unescaped would inject a series', async () => {
    const control = await backend.latest({ metric: 'request_total', match: { namespace: 'demo' }, by: ['namespace'] });
    assert.equal(control.length, 1);
    const injection = 'x"} or vector(1) or up{job="';
    const naive = `sum by (namespace) (request_total{job="linkerd-proxy",namespace="${injection}"})`;
    const res = await fetch(`${promUrl}/api/v1/query`, { method: 'POST', body: new URLSearchParams({ query: naive }) });
    const naiveAnswer = (await res.json()) as { status: string; data: { result: unknown[] } };
    assert.equal(naiveAnswer.status, 'success');
    assert.ok(naiveAnswer.data.result.length > 0, 'pasted unescaped, the value injects series');
    for (const value of [injection, '"}or vector(1)', 'demo\\', '\\"} or up{', 'demo"}', 'de\nmo', "demo' or 1", '\u0000']) {
      assert.deepEqual(await backend.latest({ metric: 'request_total', match: { namespace: value }, by: ['namespace'] }), [], JSON.stringify(value));
      assert.deepEqual(await backend.rate({ metric: 'request_total', match: { pod: value }, by: [] }, 60), [], JSON.stringify(value));
    }
  });

  it('the Kubernetes relabelling gives each proxy its namespace, pod and workload, and drops the rest', async () => {
    const res = await fetch(`${promUrl}/api/v1/targets?state=active`);
    const body = (await res.json()) as { data: { activeTargets: { labels: Record<string, string> }[] } };
    const got = body.data.activeTargets
      .filter((t) => t.labels.job === 'kubernetes-relabel')
      .map((t) => [t.labels.namespace, t.labels.pod, t.labels.workload_kind, t.labels.workload_name])
      .sort((a, b) => String(a[1]).localeCompare(String(b[1])));
    assert.deepEqual(got, [
      ['shop', 'bare-rs-abcde', 'ReplicaSet', 'bare-rs'],
      ['shop', 'db-0', 'StatefulSet', 'db'],
      ['shop', 'report-28901234-qq8lm', 'Job', 'report-28901234'],
      ['shop', 'solo', 'Pod', 'solo'],
      ['shop', 'web-5d4f8b6c9-x7kqz', 'Deployment', 'web'],
    ]);
  });

  it('a stopped Prometheus: "cannot reach Prometheus at URL: ECONNREFUSED", 503 from the backend and the controller', async () => {
    await stopPrometheus();
    if (promController !== undefined) {
      const res = await fetch(`${promController}/api/v1/stat?resource=deploy&namespace=demo&window=60`, { signal: AbortSignal.timeout(20_000) });
      assert.equal(res.status, 503);
      assert.deepEqual(await res.json(), { error: { code: 'METRICS_UNAVAILABLE', message: `cannot reach Prometheus at ${promUrl}: ECONNREFUSED` } });
      const r = wardSync(['edges', '-n', 'demo', '--controller', promController]);
      assert.notEqual(r.status, 0);
      assert.ok(r.stderr.includes(`cannot reach Prometheus at ${promUrl}: ECONNREFUSED`), r.stderr);
    }
    try {
      await backend.latest({ metric: 'request_total', by: [] });
      assert.fail('expected an error');
    } catch (e) {
      const err = e as PrometheusError;
      assert.equal(err.message, `cannot reach Prometheus at ${promUrl}: ECONNREFUSED`);
      assert.deepEqual([err.code, err.httpStatus, err.apiCode], ['ERR_PROMETHEUS_UNREACHABLE', 503, 'METRICS_UNAVAILABLE']);
    }
  });
});
