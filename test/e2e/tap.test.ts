/**
 * `ward tap` and the controller's denial groups on a real `ward up` (pods on 127.20.122.0/24): a
 * namespace shop with Deployment web (an HTTP app behind a Server whose only authorization admits
 * the `client` identity) and two relay pods, client and intruder, that call web through their
 * proxy's outbound port when the test asks them to. The test process is the host (127.0.0.1).
 *
 * Each tap runs the real CLI against the mesh's controller, which fans out to web's proxy over
 * mesh TLS as its own identity; the requests it sees are real ones through the mesh.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { localMeshApi, upControllerFlags, type WardProcess, waitFor, wardSpawn } from './helpers.js';

const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const FIRST_IP = '127.20.122.1';
const WEB_URL = 'http://web.shop.svc.cluster.local';

const WEB_APP = `import { createServer } from 'node:http';
createServer((req, res) => res.end('web ' + req.url)).listen(8080, process.env.WARD_APP_HOST, () => console.log('web listening'));
`;

const RELAY_APP = `import { createServer, request } from 'node:http';
const proxy = new URL(process.env.HTTP_PROXY);
createServer((req, res) => {
  const target = new URL(new URL(req.url, 'http://relay').searchParams.get('url') ?? 'http://none');
  const out = request({ host: proxy.hostname, port: Number(proxy.port), path: target.href, headers: { host: target.host, authorization: 'Bearer tap-must-not-see-this' } }, (r) => {
    let body = '';
    r.on('data', (c) => { body += c; });
    r.on('end', () => res.end(JSON.stringify({ status: r.statusCode, body })));
  });
  out.on('error', (e) => res.end(JSON.stringify({ status: 0, body: e.message })));
  out.end();
}).listen(8080, process.env.WARD_APP_HOST, () => console.log('relay listening'));
`;

const relay = (name: string) => `---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ${name}, namespace: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ${name}, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: ${name}}}
  template:
    metadata: {labels: {app: ${name}}}
    spec:
      serviceAccountName: ${name}
      containers:
      - name: relay
        command: [node, apps/relay.mjs]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1}
`;

const MANIFESTS = `apiVersion: v1
kind: Namespace
metadata:
  name: shop
  annotations: {linkerd.io/inject: enabled, config.linkerd.io/default-inbound-policy: all-unauthenticated}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      serviceAccountName: web
      containers:
      - name: web
        command: [node, apps/web.mjs]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web-http, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  port: http
  proxyProtocol: HTTP/1
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: client-only, namespace: shop}
spec:
  identities: ["${idOf('shop', 'client')}"]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: web-from-client, namespace: shop}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-http}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: client-only}
${relay('client')}${relay('intruder')}`;

interface PodJson {
  namespace: string;
  name: string;
  owner: string | null;
  ip: string;
  ready: boolean;
}

interface TapEventJson {
  time: string;
  namespace: string;
  pod: string;
  workload: { kind: string; name: string };
  port: number;
  method: string | null;
  authority: string | null;
  path: string | null;
  clientAddr: string;
  clientId: string | null;
  tls: boolean;
  server: string;
  route: string | null;
  authz: string | null;
  decision: string;
  reason: string | null;
  status: number | null;
  latencyMs: number | null;
  end?: { reason: string; events: number };
  error?: unknown;
}

interface DenialGroupJson {
  namespace: string;
  workload: { kind: string; name: string };
  port: number;
  clientId: string | null;
  server: string | null;
  reason: string | null;
  kind: string;
  decision: string;
  count: number;
  pods: string[];
  example: { method: string | null; path: string | null };
}

describe('ward tap and /api/v1/denials on ward up', () => {
  let work: string;
  let state: string;
  let up: WardProcess;
  let api: string;
  let token: string;
  let controller: string;
  const ipOf = new Map<string, string>();

  async function pods(): Promise<PodJson[]> {
    const res = await fetch(`${api}/api/v1/local/status`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) });
    // Empty until the mesh has started its pods.
    if (!res.ok) return [];
    return ((await res.json()) as { pods: PodJson[] }).pods;
  }

  /** GET web `path` from the relay of `from` (client or intruder), through its proxy. */
  async function call(from: string, path: string): Promise<number> {
    const ip = ipOf.get(from);
    assert.ok(ip !== undefined, from);
    const res = await fetch(`http://${ip}:8080/call?url=${encodeURIComponent(WEB_URL + path)}`, { signal: AbortSignal.timeout(5000) });
    const body = await res.text();
    assert.equal(res.status, 200, `the relay of ${from} answered ${res.status}: ${body}`);
    return (JSON.parse(body) as { status: number }).status;
  }

  /** Starts `ward tap` and waits until the controller's stream is open (the proxy tapped). */
  async function tap(args: string[]): Promise<WardProcess> {
    const p = wardSpawn(['tap', ...args, '--controller', controller]);
    // The controller answers once the proxy has the tap open; the CLI then says so.
    await waitFor(
      'the tap to open',
      () => {
        if (p.child.exitCode !== null) throw new Error(`ward tap exited with ${p.child.exitCode}: ${p.stdout()}${p.stderr()}`);
        return p.stderr().includes('tapping ') ? true : undefined;
      },
      20_000,
      50,
    );
    return p;
  }

  async function exited(p: WardProcess, what: string): Promise<number> {
    return waitFor(`${what} to end (stdout: ${p.stdout()} stderr: ${p.stderr()})`, () => p.child.exitCode ?? undefined, 20_000, 50);
  }

  const lines = (p: WardProcess) =>
    p
      .stdout()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as TapEventJson);

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'ward-tap-'));
    const dir = join(work, 'mesh');
    state = join(work, 'state');
    mkdirSync(join(dir, 'apps'), { recursive: true });
    writeFileSync(join(dir, 'apps', 'web.mjs'), WEB_APP);
    writeFileSync(join(dir, 'apps', 'relay.mjs'), RELAY_APP);
    writeFileSync(join(dir, 'shop.yaml'), MANIFESTS);
    up = wardSpawn(['up', dir, '--state-dir', state, ...upControllerFlags(), '--first-pod-ip', FIRST_IP]);
    ({ api, token } = await localMeshApi(up, state));
    controller = (JSON.parse(readFileSync(join(state, 'mesh.json'), 'utf8')) as { controller: string }).controller;
    const ready = await waitFor(
      'web, client and intruder ready',
      async () => {
        const ps = (await pods()).filter((p) => p.namespace === 'shop');
        return ps.length === 3 && ps.every((p) => p.ready) ? ps : undefined;
      },
      60_000,
      200,
    );
    for (const p of ready) ipOf.set(p.owner?.split('/')[1] ?? p.name, p.ip);
    // Through the mesh as each client sees it: client admitted, intruder not.
    // (The relays' apps may take a moment after their probes pass: 502 until then.)
    await waitFor('client admitted by web', async () => ((await call('client', '/warm').catch(() => 0)) === 200 ? true : undefined), 30_000, 200);
    await waitFor('intruder refused by web', async () => ((await call('intruder', '/warm').catch(() => 0)) === 403 ? true : undefined), 30_000, 200);
  });

  after(async () => {
    if (up !== undefined && up.child.exitCode === null) await up.stop(5000);
    rmSync(work, { recursive: true, force: true });
  });

  it('sees allowed requests with their authorization and client identity, a denial with its reason, and ends at --max', async () => {
    const t = await tap(['deploy/web', '-n', 'shop', '--path', '/api', '-o', 'json', '--max', '3']);
    assert.equal(await call('client', '/api/list?token=q-secret'), 200);
    assert.equal(await call('intruder', '/api/vote'), 403);
    assert.equal(await call('client', '/api/done'), 200);
    assert.equal(await exited(t, 'the tap'), 0);
    const [a, d, b, end, ...rest] = lines(t);
    assert.deepEqual(rest, []);
    const webPod = a?.pod ?? '';
    assert.match(webPod, /^web-/);
    for (const [e, path] of [
      [a, '/api/list'],
      [b, '/api/done'],
    ] as const) {
      assert.deepEqual(
        [e?.namespace, e?.workload, e?.port, e?.method, e?.path, e?.clientId, e?.tls, e?.server, e?.authz, e?.decision, e?.status],
        [
          'shop',
          { kind: 'Deployment', name: 'web' },
          8080,
          'GET',
          path,
          idOf('shop', 'client'),
          true,
          'server/web-http',
          'authorizationpolicy/web-from-client',
          'allow',
          200,
        ],
      );
      assert.equal(e?.clientAddr, ipOf.get('client'));
      assert.ok(typeof e?.latencyMs === 'number');
    }
    assert.deepEqual(
      [d?.pod, d?.path, d?.clientId, d?.decision, d?.authz, d?.status, d?.clientAddr],
      [webPod, '/api/vote', idOf('shop', 'intruder'), 'deny', null, 403, ipOf.get('intruder')],
    );
    assert.match(d?.reason ?? '', /unauthorized/);
    assert.deepEqual(end?.end?.reason, 'max');
    assert.ok(!t.stdout().includes('q-secret') && !t.stdout().includes('tap-must-not-see-this'), 'a query or header value leaked');
  });

  it('--denied shows only denials; --to keeps the requests from the source workload, printed one line each', async () => {
    const denied = await tap(['deploy/web', '-n', 'shop', '--denied', '-o', 'json', '--max', '1']);
    const to = await tap(['deploy/client', '-n', 'shop', '--to', 'deploy/web', '--path', '/api', '--max', '1']);
    assert.equal(await call('client', '/api/ok'), 200);
    assert.equal(await call('intruder', '/api/no'), 403);
    assert.equal(await exited(denied, 'the --denied tap'), 0);
    assert.equal(await exited(to, 'the --to tap'), 0);
    const [only, end] = lines(denied);
    assert.deepEqual([only?.decision, only?.path, only?.clientId], ['deny', '/api/no', idOf('shop', 'intruder')]);
    assert.equal(end?.end?.reason, 'max');
    const text = to.stdout().trim().split('\n');
    assert.equal(text.length, 1, to.stdout());
    assert.match(
      text[0] ?? '',
      new RegExp(
        `^req id=0 proxy=in src=${ipOf.get('client')?.replaceAll('.', '\\.')} dst=shop/web-[^ ]+:8080 tls=true identity=${idOf('shop', 'client').replaceAll('.', '\\.')} :method=GET :authority=web\\.shop\\.svc\\.cluster\\.local :path=/api/ok :status=200 latency=[0-9.]+ms authz=authorizationpolicy/web-from-client$`,
      ),
    );
  });

  it('bad arguments are refused with the controller’s reason', async () => {
    const t = wardSpawn(['tap', 'deploy/nope', '-n', 'shop', '--controller', controller]);
    assert.equal(await exited(t, 'the tap of nothing'), 2);
    assert.match(t.stderr(), /no meshed pod of deploy\/nope in namespace shop/);
    const bad = wardSpawn(['tap', 'deploy/web', '-n', 'shop', '--path', 'api', '--controller', controller]);
    assert.equal(await exited(bad, 'the tap with a bad path'), 2);
    assert.match(bad.stderr(), /path "api" must start with \//);
  });

  it('/api/v1/denials groups repeated denials with their count', async () => {
    type Answer = { groups: DenialGroupJson[]; watched: number; unwatched: unknown[] };
    const denials = async (q: string): Promise<Answer> => {
      const res = await fetch(`${controller}/api/v1/denials?${q}`, { signal: AbortSignal.timeout(5000) });
      assert.equal(res.status, 200);
      return (await res.json()) as Answer;
    };
    const intruderGroup = (a: Answer) => a.groups.find((g) => g.clientId === idOf('shop', 'intruder') && g.workload.name === 'web');
    // The feed starts with the first request; denials count once its tap of web is open.
    await denials('namespace=shop');
    const before = await waitFor(
      'the feed to see an intruder denial',
      async () => {
        assert.equal(await call('intruder', '/api/probe'), 403);
        return intruderGroup(await denials('namespace=shop'));
      },
      20_000,
      300,
    );
    for (const p of ['/api/a', '/api/b', '/api/c']) assert.equal(await call('intruder', p), 403);
    const g = await waitFor(
      'three more in the group',
      async () => {
        const x = intruderGroup(await denials('namespace=shop&kind=http403'));
        return x !== undefined && x.count >= before.count + 3 ? x : undefined;
      },
      10_000,
      100,
    );
    assert.equal(g.count, before.count + 3);
    assert.deepEqual(
      [g.namespace, g.workload, g.port, g.server, g.kind, g.decision, g.example.method, g.example.path],
      ['shop', { kind: 'Deployment', name: 'web' }, 8080, 'server/web-http', 'http403', 'deny', 'GET', '/api/c'],
    );
    assert.equal(g.pods.length, 1);
    assert.match(g.reason ?? '', /unauthorized/);
    // Allowed requests are not denials; other namespaces and kinds filter out.
    assert.equal(await call('client', '/api/fine'), 200);
    const all = await denials('namespace=shop');
    assert.ok(all.groups.every((x) => x.decision !== 'allow' && x.clientId !== idOf('shop', 'client')));
    assert.deepEqual((await denials('namespace=elsewhere')).groups, []);
    assert.deepEqual((await denials('namespace=shop&kind=tcp-refuse')).groups, []);
    const bad = await fetch(`${controller}/api/v1/denials?kind=nope`);
    assert.equal(bad.status, 400);
  });
});
