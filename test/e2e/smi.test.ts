/**
 * The emojivoto lockdown written in SMI (examples/emojivoto-smi/policy), enforced on live traffic
 * by a real `ward up`: the services of examples/emojivoto with the TrafficTargets instead of the
 * Linkerd policy.
 *
 * - every pod becomes ready under the namespace's deny default (probes stay admitted);
 * - emojivoto/vote-bot's votes succeed: web admits it, and emoji and voting admit web;
 * - bad/vote-bot's votes get 403 from web's proxy, which counts them on the TrafficTarget's
 *   server with bad's client_id;
 * - the host (this test, 127.0.0.1) is denied on web: SMI cannot admit a network, and under
 *   `ward up` the proxy's own loopback authorization admits only the pod's address;
 * - a TrafficTarget admitting bad, written into the directory, takes effect, and so does
 *   deleting it;
 * - Ctrl-C leaves no process behind.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments, stringify } from 'yaml';
import { localMeshApi, metricSum, processesMentioning, upControllerFlags, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const EXAMPLE = join(ROOT, 'examples', 'emojivoto');
const SMI_POLICY = join(ROOT, 'examples', 'emojivoto-smi', 'policy');
/** Pod addresses of this test only (ward up's pod range is 127.20.0.0/16). */
const FIRST_IP = '127.20.5.1';
const IP_PREFIX = '127.20.5.';
const VOTE_INTERVAL_MS = 200;

const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const BAD_ID = idOf('bad', 'vote-bot');
const WORKLOADS = ['bad/vote-bot', 'emojivoto/emoji', 'emojivoto/vote-bot', 'emojivoto/voting', 'emojivoto/web'];

/** The edit under test: a second TrafficTarget on web, for bad's vote-bot. */
const ADMIT_BAD = `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: web-from-bad, namespace: emojivoto}
spec:
  destination: {kind: ServiceAccount, name: web, namespace: emojivoto}
  rules:
  - {kind: TCPRoute, name: app-port}
  - {kind: HTTPRouteGroup, name: web-app, matches: [everything]}
  sources:
  - {kind: ServiceAccount, name: vote-bot, namespace: bad}
`;

interface PodJson {
  namespace: string;
  name: string;
  owner: string | null;
  ip: string;
  ready: boolean;
  adminAddress: string | null;
}

let work: string;
let dir: string;
let state: string;
let up: WardProcess | undefined;
let api: string;
let token: string;
const podNames = new Map<string, string>();

/** The example's app and services, its SMI policy instead of the Linkerd one, vote-bots voting every 200 ms. */
function copyExample(to: string): void {
  for (const sub of ['app', 'services']) cpSync(join(EXAMPLE, sub), join(to, sub), { recursive: true });
  cpSync(SMI_POLICY, join(to, 'policy'), { recursive: true });
  for (const file of ['vote-bot-emojivoto.yaml', 'vote-bot-bad.yaml']) {
    const path = join(to, 'app', file);
    const docs = parseAllDocuments(readFileSync(path, 'utf8')).map((d) => d.toJS() as Record<string, unknown>);
    for (const doc of docs) {
      if (doc.kind !== 'Deployment') continue;
      const containers = (doc as { spec: { template: { spec: { containers: { env?: { name: string; value?: string }[] }[] } } } }).spec.template.spec
        .containers;
      for (const c of containers)
        c.env = [...(c.env ?? []).filter((e) => e.name !== 'VOTE_INTERVAL_MS'), { name: 'VOTE_INTERVAL_MS', value: String(VOTE_INTERVAL_MS) }];
    }
    writeFileSync(path, docs.map((d) => stringify(d)).join('---\n'));
  }
}

async function pods(): Promise<PodJson[]> {
  const res = await fetch(`${api}/api/v1/local/status`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) });
  return ((await res.json()) as { pods: PodJson[] }).pods;
}

async function pod(workload: string): Promise<PodJson> {
  const name = podNames.get(workload);
  const p = (await pods()).find((x) => `${x.namespace}/${x.name}` === `${workload.split('/')[0]}/${name}`);
  assert.ok(p, `a pod of ${workload}`);
  return p;
}

async function metricsOf(p: PodJson): Promise<string> {
  assert.ok(p.adminAddress !== null);
  const res = await fetch(`http://${p.adminAddress}/metrics`, { signal: AbortSignal.timeout(5000) });
  assert.equal(res.status, 200);
  return res.text();
}

function appLog(workload: string, tail: number): string[] {
  const [ns] = workload.split('/');
  const r = wardSync(['logs', `${ns}/${podNames.get(workload)}`, '-c', 'app', '--tail', String(tail), '--state-dir', state]);
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.split('\n').filter((l) => l !== '');
}

const leftovers = () => processesMentioning([dir, state, IP_PREFIX]);

describe('ward up with the SMI emojivoto lockdown', { timeout: 150_000 }, () => {
  before(async () => {
    const built = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(built.status, 0, built.stderr);
    work = mkdtempSync(join(tmpdir(), 'ward-smi-'));
    dir = join(work, 'emojivoto-smi');
    state = join(work, 'state');
    copyExample(dir);
    up = wardSpawn(['up', dir, '--state-dir', state, ...upControllerFlags(), '--first-pod-ip', FIRST_IP, '--probe-period-scale', '0.5']);
    ({ api, token } = await localMeshApi(up, state));
  });

  after(async () => {
    if (up !== undefined && up.child.exitCode === null && up.child.signalCode === null) await up.stop(5000);
    for (const p of leftovers()) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  it('every pod becomes ready: kubelet probes stay admitted on the ports TrafficTargets govern', async () => {
    await waitFor(
      `the emojivoto pods to be ready (ward up: ${up?.stdout() ?? ''}${up?.stderr() ?? ''})`,
      async () => {
        const all = await pods();
        for (const p of all) podNames.set(`${p.namespace}/${(p.owner ?? '').replace(/^Deployment\//, '')}`, p.name);
        const ready = all.filter((p) => p.ready).map((p) => `${p.namespace}/${(p.owner ?? '').replace(/^Deployment\//, '')}`);
        return WORKLOADS.every((w) => ready.includes(w)) ? true : undefined;
      },
      60_000,
      250,
    );
    for (const w of WORKLOADS) assert.ok((await pod(w)).ip.startsWith(IP_PREFIX), w);
  });

  it("emojivoto/vote-bot's votes get through web, whose gRPC calls emoji and voting admit", async () => {
    // Votes cast before web was ready got 503 (no endpoints): wait for five in a row since.
    const lastFive = (workload: string, line: RegExp) => {
      const lines = appLog(workload, 5);
      return lines.length === 5 && lines.every((l) => line.test(l)) ? true : undefined;
    };
    await waitFor('five votes of emojivoto/vote-bot admitted in a row', () => lastFive('emojivoto/vote-bot', /^vote :[^ ]+: -> 200$/), 15_000, 200);
    const web = await metricsOf(await pod('emojivoto/web'));
    assert.ok(
      metricSum(web, 'inbound_http_authz_allow_total', {
        srv_kind: 'traffictarget',
        srv_name: 'web-from-emojivoto',
        route_name: 'web-app:everything',
        authz_kind: 'traffictarget',
        authz_name: 'web-from-emojivoto',
        client_id: idOf('emojivoto', 'vote-bot'),
      }) > 0,
      web,
    );
    const voting = await metricsOf(await pod('emojivoto/voting'));
    assert.ok(
      metricSum(voting, 'inbound_http_authz_allow_total', {
        srv_name: 'voting-from-web',
        route_name: 'voting-service:any-method',
        authz_name: 'voting-from-web',
        client_id: idOf('emojivoto', 'web'),
      }) > 0,
      voting,
    );
  });

  it('bad/vote-bot gets 403 from the TrafficTarget it is not a source of, and is never admitted', async () => {
    const denied = /^vote :[^ ]+: -> 403 \(l5d-proxy-error: unauthorized request on route\)$/;
    await waitFor(
      'five votes of bad/vote-bot denied in a row',
      () => {
        const lines = appLog('bad/vote-bot', 5);
        return lines.length === 5 && lines.every((l) => denied.test(l)) ? true : undefined;
      },
      15_000,
      200,
    );
    assert.doesNotMatch(appLog('bad/vote-bot', 100_000).join('\n'), /-> 200/);
    const web = await metricsOf(await pod('emojivoto/web'));
    assert.ok(
      metricSum(web, 'inbound_http_authz_deny_total', { srv_name: 'web-from-emojivoto', route_name: 'web-app:everything', client_id: BAD_ID }) > 0,
      web,
    );
    assert.equal(metricSum(web, 'inbound_http_authz_allow_total', { client_id: BAD_ID }), 0, web);
  });

  it('the host is denied on web (SMI admits ServiceAccounts only), and on the metrics port the deny default still rules', async () => {
    const web = await pod('emojivoto/web');
    assert.equal((await fetch(`http://${web.ip}:8080/api/leaderboard`, { signal: AbortSignal.timeout(5000) })).status, 403);
    const emoji = await pod('emojivoto/emoji');
    assert.equal((await fetch(`http://${emoji.ip}:8801/metrics`, { signal: AbortSignal.timeout(5000) })).status, 403);
    const m = await metricsOf(emoji);
    assert.ok(metricSum(m, 'inbound_http_authz_deny_total', { srv_kind: 'default', srv_name: 'deny', target_port: '8801' }) > 0, m);
  });

  it('a TrafficTarget admitting bad takes effect when written, and stops when deleted', async () => {
    const web = await pod('emojivoto/web');
    const count = async (name: string, labels: Record<string, string>) => metricSum(await metricsOf(web), name, { client_id: BAD_ID, ...labels });
    const file = join(dir, 'policy', 'admit-bad.yaml');
    writeFileSync(file, ADMIT_BAD);
    await waitFor(
      'a vote of bad admitted by web-from-bad',
      async () =>
        (await count('inbound_http_authz_allow_total', { authz_name: 'web-from-bad', srv_name: 'web-from-bad,web-from-emojivoto' })) > 0 ? true : undefined,
      20_000,
      100,
    );
    const denied = await count('inbound_http_authz_deny_total', {});
    rmSync(file);
    await waitFor('a vote of bad denied again', async () => ((await count('inbound_http_authz_deny_total', {})) > denied ? true : undefined), 20_000, 100);
    assert.match(appLog('bad/vote-bot', 100_000).join('\n'), /-> 200$/m);
    for (const l of appLog('emojivoto/vote-bot', 5)) assert.match(l, /^vote :[^ ]+: -> 200$/);
  });

  it('stops on SIGINT and leaves no process', async () => {
    assert.ok(up !== undefined);
    up.child.kill('SIGINT');
    const code = await Promise.race([up.exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 15_000).unref())]);
    assert.equal(code, 0, `exit ${code}; ${up.stderr()}`);
    await waitFor('no process left', () => (leftovers().length === 0 ? true : undefined), 5000, 100).catch(() => {
      assert.deepEqual(
        leftovers().map((p) => p.line),
        [],
      );
    });
  });
});
