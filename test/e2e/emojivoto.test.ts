/**
 * Issue 5's demo, end to end: a real `ward up` on a copy of examples/emojivoto, asserted through
 * the traffic of its own services (vote-bots voting through web, web calling emoji and voting):
 *
 * - every pod becomes ready under the namespace's deny default;
 * - emojivoto/vote-bot's votes succeed (its log, web's leaderboard);
 * - bad/vote-bot's votes get 403, and the web proxy counts them with bad's `client_id`;
 * - a policy file admitting bad takes effect within 2 s, and so does deleting it;
 * - an extra pod (probe-demo) whose readiness probe its policy does not authorize stays unready;
 * - Ctrl-C leaves no process behind.
 *
 * The copy lives outside the repository (in the system's temporary directory), as a user's copy
 * would: the services run from their bundles (services/dist/) with no node_modules beside them.
 * It differs from the example in two ways: the vote-bots vote every 200 ms (so the 2 s bound is
 * measurable), and probe-demo is added. The test process is "the host" (127.0.0.1),
 * which the web policy admits.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments, stringify } from 'yaml';
import { localMeshApi, metricSum, processesMentioning, upControllerFlags, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const EXAMPLE = join(ROOT, 'examples', 'emojivoto');
/** Pod addresses of this test (apart from a developer's mesh on 127.20.0.x and up.test.ts's 127.20.200.x). */
const FIRST_IP = '127.20.100.1';
const IP_PREFIX = '127.20.100.';
const VOTE_INTERVAL_MS = 200;
/** The bound of issue 5 on a policy edit taking effect (and its revert). */
const EDIT_BOUND_MS = 2000;

const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const BAD_ID = idOf('bad', 'vote-bot');

/**
 * A pod whose readiness probe its policy does not authorize: its port has a route for `/` and
 * admits mesh identities only, so the kubelet's plaintext probe from the node gets 403.
 */
const PROBE_DEMO_APP = `apiVersion: v1
kind: ServiceAccount
metadata: {name: probe-demo, namespace: emojivoto}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: probe-demo, namespace: emojivoto}
spec:
  replicas: 1
  selector: {matchLabels: {app: probe-demo}}
  template:
    metadata: {labels: {app: probe-demo}}
    spec:
      serviceAccountName: probe-demo
      containers:
      - name: app
        command: [node, -e, "require('node:http').createServer((req, res) => res.end('ok')).listen(Number(process.env.PORT), process.env.WARD_APP_HOST)"]
        env: [{name: PORT, value: "8090"}]
        ports: [{name: http, containerPort: 8090}]
        readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 1}
`;

const PROBE_DEMO_POLICY = `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: probe-demo-http, namespace: emojivoto}
spec:
  podSelector: {matchLabels: {app: probe-demo}}
  port: http
  proxyProtocol: HTTP/1
---
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {name: probe-demo-all, namespace: emojivoto}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: probe-demo-http}]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}]}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: any-mesh-identity, namespace: emojivoto}
spec:
  identities: ["*"]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: probe-demo-from-mesh, namespace: emojivoto}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: probe-demo-http}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: any-mesh-identity}]
`;

/** The edit under test: web's port also admits the bad namespace's identities. */
const ADMIT_BAD = `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: bad-identities, namespace: emojivoto}
spec:
  identities: ["*.bad.serviceaccount.identity.linkerd.cluster.local"]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: web-from-bad, namespace: emojivoto}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-http}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: bad-identities}]
`;

interface PodJson {
  namespace: string;
  name: string;
  owner: string | null;
  ip: string;
  ready: boolean;
  adminAddress: string | null;
  identity: string | null;
  containers: { name: string; state: string; ready: boolean; message?: string }[];
}
interface DenialJson {
  namespace: string;
  pod: string;
  port: number;
  kind: string;
  client: string;
  clientId: string | null;
  server: string | null;
  path?: string;
}
interface StatusJson {
  pods: PodJson[];
  denials: DenialJson[];
}

/** Copies the example to `to`, the vote-bots voting every {@link VOTE_INTERVAL_MS}, plus probe-demo. */
function copyExample(to: string): void {
  for (const sub of ['app', 'policy', 'services']) cpSync(join(EXAMPLE, sub), join(to, sub), { recursive: true });
  for (const file of ['vote-bot-emojivoto.yaml', 'vote-bot-bad.yaml']) {
    const path = join(to, 'app', file);
    const docs = parseAllDocuments(readFileSync(path, 'utf8')).map((d) => d.toJS() as Record<string, unknown>);
    let patched = 0;
    for (const doc of docs) {
      if (doc.kind !== 'Deployment') continue;
      const containers = (doc as { spec: { template: { spec: { containers: { env?: { name: string; value?: string }[] }[] } } } }).spec.template.spec
        .containers;
      for (const c of containers) {
        c.env = [...(c.env ?? []).filter((e) => e.name !== 'VOTE_INTERVAL_MS'), { name: 'VOTE_INTERVAL_MS', value: String(VOTE_INTERVAL_MS) }];
        patched++;
      }
    }
    assert.equal(patched, 1, `one vote-bot container in ${file}`);
    writeFileSync(path, docs.map((d) => stringify(d)).join('---\n'));
  }
  writeFileSync(join(to, 'app', 'probe-demo.yaml'), PROBE_DEMO_APP);
  writeFileSync(join(to, 'policy', 'probe-demo.yaml'), PROBE_DEMO_POLICY);
}

let work: string;
let dir: string;
let state: string;
let up: WardProcess | undefined;
let api: string;
let token: string;

/** The local API's status (faster than spawning `ward status` in polling loops). */
async function status(): Promise<StatusJson> {
  const res = await fetch(`${api}/api/v1/local/status`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) });
  return (await res.json()) as StatusJson;
}

/** `ward status -o json`, as a user runs it. */
function wardStatus(): StatusJson {
  const s = wardSync(['status', '-o', 'json', '--state-dir', state]);
  assert.equal(s.status, 0, s.stderr);
  return JSON.parse(s.stdout) as StatusJson;
}

async function pod(ns: string, name: string): Promise<PodJson> {
  const p = (await status()).pods.find((x) => x.namespace === ns && x.name === name);
  assert.ok(p, `pod ${ns}/${name} is listed`);
  return p;
}

async function metricsOf(adminAddress: string | null): Promise<string> {
  assert.ok(adminAddress !== null, 'a meshed pod has an admin address');
  const res = await fetch(`http://${adminAddress}/metrics`, { signal: AbortSignal.timeout(5000) });
  assert.equal(res.status, 200);
  return res.text();
}

/** `ward logs NS/POD -c app --tail N` lines. */
function appLog(podRef: string, tail: number): string[] {
  const r = wardSync(['logs', podRef, '-c', 'app', '--tail', String(tail), '--state-dir', state]);
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.split('\n').filter((l) => l !== '');
}

/** Total votes on web's leaderboard, asked from the host. */
async function totalVotes(webIp: string): Promise<number> {
  const res = await fetch(`http://${webIp}:8080/api/leaderboard`, { signal: AbortSignal.timeout(5000) });
  assert.equal(res.status, 200, 'the host is admitted on web');
  const board = (await res.json()) as { shortcode: string; votes: number }[];
  return board.reduce((sum, e) => sum + e.votes, 0);
}

/** What a stopped mesh must not leave: processes naming the copy, the state dir or a pod address of this test. */
const leftovers = () => processesMentioning([dir, state, IP_PREFIX]);

/** The Deployments whose pods must become ready, as `NS/NAME`. */
const EMOJIVOTO_WORKLOADS = ['bad/vote-bot', 'emojivoto/emoji', 'emojivoto/vote-bot', 'emojivoto/voting', 'emojivoto/web'];

/** `NS/DEPLOYMENT` of a pod. */
const workloadOf = (p: PodJson) => `${p.namespace}/${(p.owner ?? '').replace(/^Deployment\//, '')}`;
/** `NS/DEPLOYMENT` -> the name of its pod, as the mesh named it (`DEPLOYMENT-<pod-template-hash>-0`). */
const podNames = new Map<string, string>();
function podOf(workload: string): string {
  const name = podNames.get(workload);
  assert.ok(name !== undefined, `a pod of ${workload} is listed`);
  return name;
}

describe('ward up examples/emojivoto', { timeout: 120_000 }, () => {
  before(async () => {
    const built = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(built.status, 0, built.stderr);
    work = mkdtempSync(join(tmpdir(), 'ward-emojivoto-'));
    dir = join(work, 'emojivoto');
    state = join(work, 'state');
    copyExample(dir);
    up = wardSpawn(['up', dir, '--state-dir', state, ...upControllerFlags(), '--first-pod-ip', FIRST_IP, '--probe-period-scale', '0.5']);
    ({ api, token } = await localMeshApi(up, state));
  });

  after(async () => {
    if (up !== undefined && up.child.exitCode === null && up.child.signalCode === null) await up.stop(5000);
    // Whatever a failed run left behind: only processes that name this test's directories or addresses.
    for (const p of leftovers()) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  it('every pod becomes ready under the deny default, except probe-demo whose probes are not authorized', async () => {
    const t0 = Date.now();
    await waitFor(
      `the emojivoto pods to be ready (ward up: ${up?.stdout() ?? ''}${up?.stderr() ?? ''})`,
      async () => {
        const pods = (await status()).pods;
        for (const p of pods) podNames.set(workloadOf(p), p.name);
        const ready = pods.filter((p) => p.ready).map(workloadOf);
        return EMOJIVOTO_WORKLOADS.every((w) => ready.includes(w)) ? true : undefined;
      },
      60_000,
      250,
    );
    console.log(`# all emojivoto pods ready ${Date.now() - t0} ms after mesh.json`);
    const s = wardStatus();
    assert.deepEqual(
      // Each Deployment's pod is named after its template, as in a cluster.
      s.pods.map((p) => [workloadOf(p), /^[a-z-]+-[bcdfghjklmnpqrstvwxz2456789]+-0$/.test(p.name), p.ip.startsWith(IP_PREFIX), p.ready, p.identity]),
      [
        ['bad/vote-bot', true, true, true, idOf('bad', 'vote-bot')],
        ['emojivoto/emoji', true, true, true, idOf('emojivoto', 'emoji')],
        ['emojivoto/probe-demo', true, true, false, idOf('emojivoto', 'probe-demo')],
        ['emojivoto/vote-bot', true, true, true, idOf('emojivoto', 'vote-bot')],
        ['emojivoto/voting', true, true, true, idOf('emojivoto', 'voting')],
        ['emojivoto/web', true, true, true, idOf('emojivoto', 'web')],
      ],
    );
    // The deny default at work: no Server covers voting's metrics port, so even the host is refused.
    const voting = s.pods.find((p) => p.name === podOf('emojivoto/voting'));
    assert.ok(voting);
    assert.equal((await fetch(`http://${voting.ip}:8801/metrics`, { signal: AbortSignal.timeout(5000) })).status, 403);
    const d = wardStatus().denials.filter((x) => x.namespace === 'emojivoto' && x.pod === podOf('emojivoto/voting'));
    assert.ok(
      d.some((x) => x.port === 8801 && x.server === 'default/deny' && x.client === '127.0.0.1' && x.path === '/metrics'),
      JSON.stringify(d),
    );
  });

  it('probe-demo stays unready through several probe periods, its probes denied (403 to 127.19.0.1, listed by ward status)', async () => {
    const demo = await pod('emojivoto', podOf('emojivoto/probe-demo'));
    assert.deepEqual(
      demo.containers.map((c) => [c.name, c.state]),
      [['app', 'running']],
    );
    // Each probe the proxy refuses is counted as a plaintext denial on the app port.
    const denied = async () =>
      metricSum(await metricsOf(demo.adminAddress), 'inbound_http_authz_deny_total', {
        srv_name: 'probe-demo-http',
        target_port: '8090',
        tls: 'no_identity',
      });
    const before = await denied();
    // The probe period is 1 s scaled by 0.5: at least three more probes within 5 s.
    await waitFor('three more denied probes', async () => ((await denied()) >= before + 3 ? true : undefined), 5000, 100);
    const after = await pod('emojivoto', podOf('emojivoto/probe-demo'));
    assert.equal(after.ready, false);
    assert.match(after.containers[0]?.message ?? '', /^readiness probe failed: HTTP 403/);
    const d = wardStatus().denials.filter((x) => x.namespace === 'emojivoto' && x.pod === podOf('emojivoto/probe-demo'));
    assert.ok(
      d.some((x) => x.port === 8090 && x.kind === 'http403' && x.client === '127.19.0.1' && x.clientId === null && x.path === '/ready'),
      JSON.stringify(d),
    );
    // The other pods are still ready.
    const others = (await status()).pods.filter((p) => EMOJIVOTO_WORKLOADS.includes(workloadOf(p)));
    assert.deepEqual(
      others.map((p) => p.ready),
      [true, true, true, true, true],
    );
  });

  it('emojivoto/vote-bot votes get through: 200s in its log, and the leaderboard grows', async () => {
    const web = await pod('emojivoto', podOf('emojivoto/web'));
    const votes0 = await totalVotes(web.ip);
    const lines = appLog(`emojivoto/${podOf('emojivoto/vote-bot')}`, 5);
    assert.equal(lines.length, 5, lines.join('\n'));
    for (const l of lines) assert.match(l, /^vote :[^ ]+: -> 200$/);
    await waitFor(`more votes than ${votes0}`, async () => ((await totalVotes(web.ip)) > votes0 ? true : undefined), 5000, 100);
  });

  it("bad/vote-bot gets 403; the web proxy counts the denials with bad's client_id and ward status lists them", async () => {
    const lines = appLog(`bad/${podOf('bad/vote-bot')}`, 5);
    assert.equal(lines.length, 5, lines.join('\n'));
    for (const l of lines) assert.match(l, /^vote :[^ ]+: -> 403 \(l5d-proxy-error: unauthorized request on route\)$/);
    assert.doesNotMatch(appLog(`bad/${podOf('bad/vote-bot')}`, 100_000).join('\n'), /-> 200/, 'never admitted');
    const web = await pod('emojivoto', podOf('emojivoto/web'));
    const m = await metricsOf(web.adminAddress);
    assert.ok(metricSum(m, 'inbound_http_authz_deny_total', { srv_name: 'web-http', tls: 'true', client_id: BAD_ID }) > 0, m);
    assert.equal(metricSum(m, 'inbound_http_authz_allow_total', { client_id: BAD_ID }), 0, m);
    assert.ok(metricSum(m, 'inbound_http_authz_allow_total', { srv_name: 'web-http', client_id: idOf('emojivoto', 'vote-bot') }) > 0, m);
    const d = wardStatus().denials.filter((x) => x.pod === podOf('emojivoto/web'));
    assert.ok(
      d.some((x) => x.namespace === 'emojivoto' && x.port === 8080 && x.kind === 'http403' && x.clientId === BAD_ID),
      JSON.stringify(d),
    );
  });

  it('a policy file admitting bad takes effect within 2 s, and so does deleting it', async () => {
    const web = await pod('emojivoto', podOf('emojivoto/web'));
    const count = async (name: string, labels: Record<string, string> = {}) =>
      metricSum(await metricsOf(web.adminAddress), name, { srv_name: 'web-http', client_id: BAD_ID, ...labels });
    const file = join(dir, 'policy', 'admit-bad.yaml');

    const allowed0 = await count('inbound_http_authz_allow_total');
    assert.equal(allowed0, 0);
    const t0 = Date.now();
    writeFileSync(file, ADMIT_BAD);
    await waitFor(
      'a vote of bad allowed',
      async () => ((await count('inbound_http_authz_allow_total', { authz_name: 'web-from-bad' })) > 0 ? true : undefined),
      10_000,
      50,
    );
    const admitMs = Date.now() - t0;

    const denied0 = await count('inbound_http_authz_deny_total');
    const t1 = Date.now();
    rmSync(file);
    await waitFor('a vote of bad denied again', async () => ((await count('inbound_http_authz_deny_total')) > denied0 ? true : undefined), 10_000, 50);
    const revertMs = Date.now() - t1;

    const msg = `policy edit took effect in ${admitMs} ms, its revert in ${revertMs} ms (votes every ${VOTE_INTERVAL_MS} ms)`;
    console.log(`# ${msg}`);
    assert.ok(admitMs < EDIT_BOUND_MS, `edit took ${admitMs} ms`);
    assert.ok(revertMs < EDIT_BOUND_MS, `revert took ${revertMs} ms`);
    // bad's bot saw the window; emojivoto's kept voting throughout.
    assert.match(appLog(`bad/${podOf('bad/vote-bot')}`, 100_000).join('\n'), /-> 200$/m);
    for (const l of appLog(`emojivoto/${podOf('emojivoto/vote-bot')}`, 5)) assert.match(l, /^vote :[^ ]+: -> 200$/);
  });

  it('stops on SIGINT (exit 0 within 10 s), removing mesh.json and leaving no process', async () => {
    assert.ok(up !== undefined);
    const running = leftovers();
    // ward up itself, and for each of the 6 pods at least its app and its proxy.
    assert.ok(running.length >= 13, running.map((p) => p.line).join('\n'));
    const t0 = Date.now();
    up.child.kill('SIGINT');
    const code = await Promise.race([up.exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000).unref())]);
    const ms = Date.now() - t0;
    console.log(`# stopped in ${ms} ms`);
    assert.equal(code, 0, `exit ${code}; ${up.stderr()}`);
    assert.equal(existsSync(join(state, 'mesh.json')), false);
    await waitFor('no process left', () => (leftovers().length === 0 ? true : undefined), 3000, 100).catch(() => {
      assert.deepEqual(
        leftovers().map((p) => p.line),
        [],
      );
    });
  });
});
