/**
 * `ward edges`, `ward stat` and `ward stat authz` on a real `ward up` mesh (test/e2e/observe-mesh,
 * pods from 127.20.22.1), the controller's embedded collector scraping every 500 ms
 * (`WARD_SCRAPE_INTERVAL`): a meshed client calls the server over HTTP (allowed, application
 * errors, and a route its policy denies) and over TCP (a CONNECT tunnel kept open), an unmeshed
 * pod calls it in plaintext, and a pod whose `deny` default keeps the controller out of its admin
 * port. Everything is read as users read it, through the CLI's JSON and text output, and through
 * the admin API; the test polls until the data appears rather than sleeping.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { localMeshApi, upControllerFlags, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const MESH_DIR = new URL('observe-mesh/', import.meta.url).pathname;
const FIRST_IP = '127.20.22.1';
const CLIENT = '127.20.22.1';
const SERVER = '127.20.22.3';
const LEGACY = '127.20.22.4';
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const SERVER_URL = 'http://server.demo.svc.cluster.local';
const WAIT_MS = 60_000;

interface Ref {
  namespace: string;
  kind: string;
  name: string;
}
interface Edge {
  src: Ref | null;
  srcIdentity: string | null;
  dst: Ref;
  dstIdentity: string | null;
  port: number | null;
  secured: boolean;
  reason: string | null;
  connections: number;
  rps: number;
  deniedRps: number;
}
interface StatRow {
  namespace: string;
  kind: string;
  name: string;
  port: number | null;
  meshed: boolean;
  pods: number;
  rps: number;
  successRate: number | null;
  deniedRps: number;
  p50Ms: number | null;
  p95Ms: number | null;
  p99Ms: number | null;
  tcpConnections: number;
}
interface AuthzRow {
  port: number;
  server: string;
  route: string | null;
  authz: string | null;
  allowedRps: number;
  deniedRps: number;
}

let work: string;
let state: string;
let up: WardProcess;
let controller: string;

async function relay(ip: string, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://${ip}:8080${path}`, { signal: AbortSignal.timeout(20_000) });
  return { status: res.status, body: await res.text() };
}

async function calls(ip: string, url: string, n: number): Promise<number[]> {
  const r = await relay(ip, `/call?${new URLSearchParams({ url, n: String(n) })}`);
  assert.equal(r.status, 200, r.body);
  return (JSON.parse(r.body) as { statuses: number[] }).statuses;
}

/** `ward ARGS --controller URL -o json`, parsed. */
function wardJson<T>(args: readonly string[]): T {
  const r = wardSync([...args, '--controller', controller, '-o', 'json']);
  assert.equal(r.status, 0, `ward ${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}

async function api<T>(path: string): Promise<{ status: number; body: T }> {
  const res = await fetch(`${controller}${path}`, { signal: AbortSignal.timeout(20_000) });
  return { status: res.status, body: (await res.json()) as T };
}

describe('e2e: ward edges and ward stat on ward up', { timeout: 240_000 }, () => {
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'ward-e2e-observe-'));
    state = join(work, 'state');
    up = wardSpawn(['up', MESH_DIR, '--state-dir', state, ...upControllerFlags(), '--first-pod-ip', FIRST_IP], { WARD_SCRAPE_INTERVAL: '500ms' });
    await localMeshApi(up, state);
    controller = (JSON.parse(readFileSync(join(state, 'mesh.json'), 'utf8')) as { controller: string }).controller;
    // Every pod ready (its proxy serving its policies) before any traffic: on a loaded machine the
    // relays can answer while the server's or the locked pod's proxy is still starting.
    await waitFor(
      `every pod ready (ward up: ${up.stdout()}${up.stderr()})`,
      () => {
        const r = wardSync(['status', '--state-dir', state, '-o', 'json']);
        if (r.status !== 0) return undefined;
        const pods = (JSON.parse(r.stdout) as { pods: { ready: boolean }[] }).pods;
        return pods.length > 0 && pods.every((p) => p.ready) ? true : undefined;
      },
      WAIT_MS,
      200,
    );
    // Every app answers once its pod runs.
    await waitFor(
      `the relays to answer (ward up: ${up.stdout()}${up.stderr()})`,
      async () => {
        try {
          await Promise.all([relay(CLIENT, '/call?n=0'), relay(LEGACY, '/call?n=0')]);
          return true;
        } catch {
          return undefined;
        }
      },
      WAIT_MS,
      200,
    );
  });

  after(async () => {
    if (up !== undefined && up.child.exitCode === null) await up.stop(5000);
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  it('says there is no traffic yet, how often the collector scrapes, and which pod denies it', async () => {
    const targets = await waitFor(
      'a denied scrape of the locked pod',
      async () => {
        const t = (await api<{ targets: { pod: string; up: boolean; error?: string }[] }>('/api/v1/observe/targets')).body.targets;
        const locked = t.find((x) => x.pod.startsWith('locked-'));
        return locked?.error?.startsWith("denied by the pod's policy") === true && t.filter((x) => x.up).length >= 2 ? t : undefined;
      },
      WAIT_MS,
      200,
    );
    const locked = targets.find((x) => x.pod.startsWith('locked-'));
    assert.equal(locked?.up, false);
    assert.ok(
      locked?.error?.startsWith(`denied by the pod's policy on port 4191: authorize the identity ${idOf('linkerd', 'ward-controller')}`),
      locked?.error,
    );
    const r = wardSync(['edges', '-n', 'legacy', '--controller', controller]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^no traffic observed in the last 1m: the collector scrapes every 0\.5s$/m);
    assert.match(r.stdout, /^ {2}demo\/locked-[a-z0-9-]+: denied by the pod's policy on port 4191/m);
  });

  it('lists the secured edges with both identities and the unmeshed client as not secured, with its reason', async () => {
    assert.deepEqual(await calls(CLIENT, `${SERVER_URL}/work`, 20), Array(20).fill(200));
    assert.deepEqual(await calls(CLIENT, `${SERVER_URL}/work/fail`, 5), Array(5).fill(500));
    assert.deepEqual(await calls(CLIENT, `${SERVER_URL}/secret`, 4), Array(4).fill(403));
    // The legacy pod is unmeshed: plaintext to the server's pod address, admitted by its address.
    assert.deepEqual(await calls(LEGACY, `http://${SERVER}:8080/work`, 6), Array(6).fill(200));
    const tcp = await relay(CLIENT, `/tcp?${new URLSearchParams({ to: 'server.demo.svc.cluster.local:9000', holdMs: '120000' })}`);
    assert.deepEqual([tcp.status, tcp.body], [200, '{"echo":"ping"}']);

    const edges = await waitFor(
      'the three edges into the server',
      () => {
        const v = wardJson<{ window: number; backend: string; edges: Edge[] }>(['edges', '-n', 'demo']);
        const into = v.edges.filter((e) => e.dst.name === 'server');
        const http = into.find((e) => e.port === 8080 && e.secured && e.rps > 0 && e.deniedRps > 0);
        const legacy = into.find((e) => e.port === 8080 && !e.secured && e.rps > 0);
        const conn = into.find((e) => e.port === 9000 && e.connections >= 1);
        return http !== undefined && legacy !== undefined && conn !== undefined ? { v, http, legacy, conn } : undefined;
      },
      WAIT_MS,
      500,
    );
    assert.equal(edges.v.backend, 'embedded');
    assert.equal(edges.v.window, 60);
    const client = { namespace: 'demo', kind: 'Deployment', name: 'client' };
    const server = { namespace: 'demo', kind: 'Deployment', name: 'server' };
    assert.deepEqual(
      [edges.http.src, edges.http.srcIdentity, edges.http.dst, edges.http.dstIdentity, edges.http.reason],
      [client, idOf('demo', 'client'), server, idOf('demo', 'server'), null],
    );
    assert.deepEqual([edges.conn.src, edges.conn.srcIdentity, edges.conn.secured], [client, idOf('demo', 'client'), true]);
    assert.deepEqual(
      [edges.legacy.src, edges.legacy.srcIdentity, edges.legacy.dstIdentity, edges.legacy.reason],
      [null, null, idOf('demo', 'server'), 'not meshed'],
    );

    // The same through the API, and as a table.
    const viaApi = await api<{ edges: Edge[] }>('/api/v1/edges?namespace=demo');
    assert.equal(viaApi.status, 200);
    assert.ok(viaApi.body.edges.some((e) => e.dst.name === 'server' && e.port === 9000 && e.secured && e.srcIdentity === idOf('demo', 'client')));
    const text = wardSync(['edges', '-n', 'demo', '--controller', controller]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /^SRC\s+DST\s+SRC_NS\s+DST_NS\s+CLIENT_ID\s+SERVER_ID\s+SECURED\s+CONN\s+RPS$/m);
    assert.match(text.stdout, /^client\s+server\s+demo\s+demo\s+client\.demo\s+server\.demo\s+√\s+\d+\s+[\d.]+rps$/m);
    assert.match(text.stdout, /^-\s+server\s+-\s+demo\s+-\s+server\.demo\s+not meshed\s+\d+\s+[\d.]+rps$/m);
  });

  it('counts requests, application errors apart from policy denials, latency and connections per workload', async () => {
    const row = await waitFor(
      'the server row',
      () => {
        const v = wardJson<{ rows: StatRow[] }>(['stat', '-n', 'demo', 'deploy/server']);
        const all = v.rows.find((r) => r.port === null);
        return all !== undefined && all.rps > 0 && all.deniedRps > 0 && all.tcpConnections >= 1 && all.successRate !== null ? { v, all } : undefined;
      },
      WAIT_MS,
      500,
    );
    const all = row.all;
    assert.deepEqual([all.namespace, all.kind, all.name, all.meshed, all.pods], ['demo', 'Deployment', 'server', true, 1]);
    // 26 successes, 5 application errors; the 4 denials are not in the success rate.
    assert.ok((all.successRate as number) > 0.5 && (all.successRate as number) < 1, String(all.successRate));
    assert.ok(all.p50Ms !== null && all.p99Ms !== null && all.p50Ms <= all.p99Ms);
    assert.deepEqual(
      row.v.rows.map((r) => r.port),
      [null, 8080, 9000],
    );
    assert.equal(row.v.rows.find((r) => r.port === 9000)?.tcpConnections, 1);
    // Every Deployment of the namespace is listed, the unmeshed pod as such.
    const deploys = wardJson<{ rows: StatRow[] }>(['stat', '-n', 'demo', 'deploy']).rows.filter((r) => r.port === null);
    assert.deepEqual(
      deploys.map((r) => [r.name, r.meshed]),
      [
        ['client', true],
        ['locked', true],
        ['server', true],
      ],
    );
    // A namespace is cluster-scoped: no -n needed.
    const ns = wardJson<{ rows: StatRow[] }>(['stat', 'ns/demo', '--window', '10m']).rows.filter((r) => r.port === null);
    assert.deepEqual(
      ns.map((r) => [r.kind, r.name, r.pods, r.rps > 0]),
      [['Namespace', 'demo', 3, true]],
    );
    const legacy = wardJson<{ rows: StatRow[] }>(['stat', '-n', 'legacy', 'po']).rows;
    assert.deepEqual(
      legacy.map((r) => [r.name, r.meshed, r.pods]),
      [['legacy', false, 1]],
    );
    const text = wardSync(['stat', '-n', 'demo', 'deploy', '--controller', controller]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /^NAME\s+MESHED\s+SUCCESS\s+RPS\s+DENIED\s+LATENCY_P50\s+LATENCY_P95\s+LATENCY_P99\s+TCP_CONN$/m);
    assert.match(text.stdout, /^server\s+1\/1\s+\d+\.\d\d%\s+[\d.]+rps\s+[\d.]+rps\s+[\d.]+ms\s+[\d.]+ms\s+[\d.]+ms\s+\d+$/m);
  });

  it('gives allowed rates per authorization and flags the denied route UNAUTHORIZED', async () => {
    const rows = await waitFor(
      'allowed and denied rows',
      () => {
        const v = wardJson<{ rows: AuthzRow[] }>(['stat', 'authz', '-n', 'demo', 'deploy/server']).rows;
        const find = (route: string | null, authz: string | null) => v.find((r) => r.route === route && r.authz === authz);
        const ok =
          (find('HTTPRoute/work', 'authorizationpolicy/work-client')?.allowedRps ?? 0) > 0 &&
          (find('HTTPRoute/work', 'authorizationpolicy/work-legacy')?.allowedRps ?? 0) > 0 &&
          (find('HTTPRoute/secret', null)?.deniedRps ?? 0) > 0 &&
          (find(null, 'authorizationpolicy/tcp-client')?.allowedRps ?? 0) > 0;
        return ok ? v : undefined;
      },
      WAIT_MS,
      500,
    );
    const denied = rows.find((r) => r.route === 'HTTPRoute/secret' && r.authz === null);
    assert.deepEqual([denied?.port, denied?.server, denied?.allowedRps], [8080, 'server/server-http', 0]);
    assert.deepEqual(
      rows.filter((r) => r.port === 9000).map((r) => [r.server, r.route, r.authz]),
      [['server/server-tcp', null, 'authorizationpolicy/tcp-client']],
    );
    const text = wardSync(['stat', 'authz', '-n', 'demo', 'deploy/server', '--controller', controller]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /^SERVER\s+ROUTE\s+AUTHORIZATION\s+ALLOWED\s+DENIED$/m);
    assert.match(text.stdout, /^server\/server-http\s+HTTPRoute\/secret\s+UNAUTHORIZED\s+0\.0rps\s+[\d.]+rps$/m);
    const viaApi = await api<{ rows: AuthzRow[] }>('/api/v1/stat/authz?namespace=demo&resource=deploy/server');
    assert.ok(viaApi.body.rows.some((r) => r.route === 'HTTPRoute/secret' && r.authz === null && r.deniedRps > 0));
  });

  it('answers bad parameters with 400 and a message, and the CLI says when no controller answers', async () => {
    const noResource = await api<{ error: { code: string; message: string } }>('/api/v1/stat?namespace=demo');
    assert.deepEqual([noResource.status, noResource.body.error.code], [400, 'INVALID_ARGUMENT']);
    assert.match(noResource.body.error.message, /"resource" is required/);
    const badWindow = await api<{ error: { message: string } }>('/api/v1/edges?window=forever');
    assert.equal(badWindow.status, 400);
    assert.match(badWindow.body.error.message, /window "forever" is not a duration/);
    const tooLong = await api<{ error: { message: string } }>('/api/v1/edges?window=1h');
    assert.match(tooLong.body.error.message, /longer than the 600 s the metrics backend keeps/);
    const badKind = await api<{ error: { message: string } }>('/api/v1/stat?resource=bogus/x');
    assert.equal(badKind.status, 400);
    const gone = wardSync(['edges', '--controller', 'http://127.0.0.1:1']);
    assert.equal(gone.status, 2);
    assert.match(gone.stderr, /cannot reach the controller at http:\/\/127\.0\.0\.1:1/);
    const saved = process.env.WARD_STATE_DIR;
    process.env.WARD_STATE_DIR = join(work, 'no-mesh');
    try {
      const none = wardSync(['stat', 'deploy']);
      assert.equal(none.status, 2);
      assert.match(none.stderr, /ward stat reads traffic from a controller: give --controller URL, or start a local mesh with `ward up DIR`/);
    } finally {
      if (saved === undefined) delete process.env.WARD_STATE_DIR;
      else process.env.WARD_STATE_DIR = saved;
    }
  });
});
