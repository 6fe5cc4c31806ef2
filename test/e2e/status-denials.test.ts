/**
 * `ward status` on a real `ward up`: denials grouped by client identity, workload, port, route and
 * reason with counts, filterable by namespace, pod and kind; requests the audit default policy let
 * through listed apart. The mesh (pod addresses 127.20.222.x):
 *
 * - guard (deny default): Deployment web, a Server with one HTTPRoute that only
 *   `friend.callers` may use;
 * - lax (audit default): pod open, no Server: everything is allowed and audited;
 * - callers (all-unauthenticated, so the test can drive them): friend and intruder, tiny relays
 *   calling through their outbound proxy.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { DenialGroup } from '../../src/core/index.js';
import { localMeshApi, upControllerFlags, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const FIRST_IP = '127.20.222.1';

const SERVER_APP = `import { createServer } from 'node:http';
createServer((req, res) => res.end('hello ' + req.url)).listen(Number(process.env.PORT), process.env.WARD_APP_HOST);
`;

/** Calls ?url= through the pod's outbound proxy. */
const RELAY_APP = `import { createServer, request } from 'node:http';
const proxy = new URL(process.env.HTTP_PROXY);
createServer((req, res) => {
  const target = new URL(new URL(req.url, 'http://relay').searchParams.get('url') ?? 'http://none');
  const out = request({ host: proxy.hostname, port: Number(proxy.port), method: req.method, path: target.href, headers: { host: target.host } }, (r) => {
    r.resume();
    r.on('end', () => res.end(JSON.stringify({ status: r.statusCode })));
  });
  out.on('error', (e) => res.end(JSON.stringify({ status: 0, error: e.message })));
  out.end();
}).listen(8080, process.env.WARD_APP_HOST);
`;

const MANIFESTS = `apiVersion: v1
kind: Namespace
metadata:
  name: guard
  annotations: {linkerd.io/inject: enabled, config.linkerd.io/default-inbound-policy: deny}
---
apiVersion: v1
kind: Namespace
metadata:
  name: lax
  annotations: {linkerd.io/inject: enabled, config.linkerd.io/default-inbound-policy: audit}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: guard}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        command: [node, apps/server.mjs]
        env: [{name: PORT, value: "8080"}]
        ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: guard}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: open, namespace: lax, labels: {app: open}}
spec:
  containers:
  - name: open
    command: [node, apps/server.mjs]
    env: [{name: PORT, value: "8080"}]
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: open, namespace: lax}
spec:
  selector: {app: open}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Namespace
metadata:
  name: callers
  annotations: {linkerd.io/inject: enabled, config.linkerd.io/default-inbound-policy: all-unauthenticated}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: friend, namespace: callers}
---
apiVersion: v1
kind: Pod
metadata: {name: friend, namespace: callers}
spec:
  serviceAccountName: friend
  containers:
  - name: relay
    command: [node, apps/relay.mjs]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: intruder, namespace: callers}
---
apiVersion: v1
kind: Pod
metadata: {name: intruder, namespace: callers}
spec:
  serviceAccountName: intruder
  containers:
  - name: relay
    command: [node, apps/relay.mjs]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1}
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web-http, namespace: guard}
spec:
  podSelector: {matchLabels: {app: web}}
  port: http
  proxyProtocol: HTTP/1
---
# The proxies' admin port is open (metrics, tap), as in the emojivoto lockdown.
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: admin, namespace: guard}
spec:
  podSelector: {}
  port: linkerd-admin
  proxyProtocol: HTTP/1
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: admin-everyone, namespace: guard}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: admin}
  requiredAuthenticationRefs: []
---
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {name: web-api, namespace: guard}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-http}]
  rules: [{matches: [{path: {type: PathPrefix, value: /api}}]}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: friends, namespace: guard}
spec:
  identityRefs: [{kind: ServiceAccount, name: friend, namespace: callers}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: web-api-friends, namespace: guard}
spec:
  targetRef: {group: policy.linkerd.io, kind: HTTPRoute, name: web-api}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: friends}]
`;

interface PodJson {
  namespace: string;
  name: string;
  owner: string | null;
  ip: string;
  ready: boolean;
}
interface StatusJson {
  pods: PodJson[];
  groups: DenialGroup[];
  denials: { namespace: string; pod: string; kind: string; decision: string; clientId: string | null }[];
}

const WEB_API = 'http://web.guard.svc.cluster.local/api/items';
const OPEN = 'http://open.lax.svc.cluster.local/anything';

describe('ward status groups denials', { timeout: 180_000 }, () => {
  let work: string;
  let state: string;
  let up: WardProcess;
  let api: string;
  let token: string;
  const ipOf = new Map<string, string>();
  let webPod = '';
  let dir = '';

  const localStatus = async (): Promise<{ pods: PodJson[] }> => {
    const res = await fetch(`${api}/api/v1/local/status`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) });
    return (await res.json()) as { pods: PodJson[] };
  };
  const call = async (from: string, url: string): Promise<number> => {
    const res = await fetch(`http://${ipOf.get(from)}:8080/call?url=${encodeURIComponent(url)}`, { signal: AbortSignal.timeout(10_000) });
    return ((await res.json()) as { status: number }).status;
  };
  const status = (...args: string[]) => {
    const r = wardSync(['status', '--state-dir', state, ...args]);
    return r;
  };
  const statusJson = (...args: string[]): StatusJson => {
    const r = status('-o', 'json', ...args);
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as StatusJson;
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'ward-status-'));
    dir = join(work, 'mesh');
    state = join(work, 'state');
    mkdirSync(join(dir, 'apps'), { recursive: true });
    writeFileSync(join(dir, 'apps', 'server.mjs'), SERVER_APP);
    writeFileSync(join(dir, 'apps', 'relay.mjs'), RELAY_APP);
    writeFileSync(join(dir, 'mesh.yaml'), MANIFESTS);
    up = wardSpawn(['up', dir, '--state-dir', state, ...upControllerFlags(), '--first-pod-ip', FIRST_IP]);
    ({ api, token } = await localMeshApi(up, state));
    await waitFor(
      `the pods to be ready (ward up: ${up.stdout()}${up.stderr()})`,
      async () => {
        const s = await localStatus();
        for (const p of s.pods) ipOf.set(p.name, p.ip);
        webPod = s.pods.find((p) => p.owner === 'Deployment/web')?.name ?? '';
        return s.pods.length === 4 && s.pods.every((p) => p.ready) ? true : undefined;
      },
      60_000,
      250,
    );
    assert.ok(ipOf.get('friend')?.startsWith('127.20.222.'));
  });

  after(async () => {
    if (up.child.exitCode === null) await up.stop(5000);
    rmSync(work, { recursive: true, force: true });
  });

  it('a denied caller repeating a request makes one group with its count, identity, route and reason', async () => {
    // The web app has no probe: ready means started, so wait for it to answer the friend.
    await waitFor('the friend to be served', async () => ((await call('friend', WEB_API).catch(() => 0)) === 200 ? true : undefined), 20_000, 200);
    assert.equal(await call('intruder', WEB_API), 403);
    assert.equal(await call('intruder', WEB_API), 403);
    assert.equal(await call('intruder', WEB_API), 403);
    const groups = await waitFor(
      'three denials of the intruder',
      () => {
        const s = statusJson();
        const g = s.groups.filter((x) => x.decision === 'deny' && x.clientId === idOf('callers', 'intruder'));
        return g.length === 1 && g[0]!.count >= 3 ? g : undefined;
      },
      10_000,
      250,
    );
    const g = groups[0]!;
    assert.deepStrictEqual(
      {
        namespace: g.namespace,
        workload: g.workload,
        port: g.port,
        client: g.client,
        server: g.server,
        route: g.route,
        kind: g.kind,
        reason: g.reason,
        count: g.count,
        pods: g.pods,
        example: [g.example.method, g.example.path, g.example.clientAddr],
      },
      {
        namespace: 'guard',
        workload: { kind: 'Deployment', name: 'web' },
        port: 8080,
        client: idOf('callers', 'intruder'),
        server: 'server/web-http',
        route: 'HTTPRoute/web-api',
        kind: 'http403',
        reason: g.reason,
        count: 3,
        pods: [webPod],
        example: ['GET', '/api/items', ipOf.get('intruder')],
      },
    );
    assert.match(g.reason ?? '', /unauthorized/);
    assert.ok(g.firstSeen <= g.lastSeen);
    // The friend was allowed: no group names it.
    assert.equal(statusJson().groups.filter((x) => x.clientId === idOf('callers', 'friend')).length, 0);
  });

  it('a plaintext client is its own group, named "plaintext client"', async () => {
    // The test process (the host, 127.0.0.1) calls the web pod directly, without the mesh.
    assert.equal((await fetch(`http://${ipOf.get(webPod)}:8080/api/x`)).status, 403);
    assert.equal((await fetch(`http://${ipOf.get(webPod)}:8080/api/y`)).status, 403);
    const g = await waitFor(
      'the plaintext group',
      () => statusJson().groups.find((x) => x.workload.name === 'web' && x.clientId === null && x.decision === 'deny' && x.count >= 2),
      10_000,
      250,
    );
    assert.equal(g.client, 'plaintext client');
    assert.equal(g.example.path, '/api/y');
  });

  it('requests only the audit default let through are listed apart, as audits', async () => {
    assert.equal(await call('intruder', OPEN), 200);
    assert.equal(await call('intruder', OPEN), 200);
    const g = await waitFor(
      'the audit group',
      () => statusJson().groups.find((x) => x.decision === 'audit' && x.namespace === 'lax' && x.count >= 2),
      10_000,
      250,
    );
    assert.deepStrictEqual(
      [g.kind, g.clientId, g.workload, g.example.path],
      ['audit', idOf('callers', 'intruder'), { kind: 'Pod', name: 'open' }, '/anything'],
    );
    const text = status();
    assert.equal(text.status, 0, text.stderr);
    const [denied, audited] = text.stdout.split(/^AUDITED/m);
    assert.ok(audited !== undefined, text.stdout);
    assert.match(denied ?? '', /RECENT DENIALS\n/);
    assert.match(
      denied ?? '',
      /\d\d:\d\d:\d\d +3 +guard\/deploy\/web +8080 +intruder\.callers\.serviceaccount\.identity\.linkerd\.cluster\.local +http403 +server\/web-http +HTTPRoute\/web-api +unauthorized/,
    );
    assert.match(audited, /lax\/pod\/open +8080 +intruder\.callers\S+ +default\/\S+ +\S+ +GET \/anything from 127\.20\.222\.\d+/);
    assert.doesNotMatch(audited, /guard\/deploy\/web/);
  });

  it('filters by namespace, pod and kind; a bad kind is a usage error', () => {
    const lax = statusJson('-n', 'lax');
    assert.ok(lax.groups.length > 0);
    assert.ok(lax.groups.every((g) => g.namespace === 'lax'));
    assert.deepStrictEqual(
      lax.pods.map((p) => p.name),
      ['open'],
    );
    assert.ok(lax.denials.every((d) => d.namespace === 'lax'));
    const web = statusJson('--pod', webPod);
    assert.ok(web.groups.length >= 2);
    assert.ok(web.groups.every((g) => g.pods.every((p) => p === webPod)));
    const http403 = statusJson('--kind', 'http403');
    assert.ok(http403.groups.length >= 2 && http403.groups.every((g) => g.kind === 'http403'));
    assert.deepStrictEqual(statusJson('--kind', 'tcp-refuse').groups, []);
    assert.ok(statusJson('--kind', 'audit').groups.every((g) => g.decision === 'audit'));
    const bad = status('--kind', 'teapot');
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /--kind "teapot" is not a denial kind: use one of http403, grpc7, http404, grpc5, http500, tcp-refuse, tcp-terminate, audit/);
  });
  it('a live edit naming an identity that does not exist is reported on the terminal and by the controller', async () => {
    // ward up printed its start-up warnings before starting (none here) and does not repeat them.
    assert.doesNotMatch(up.stdout(), /policy warnings/);
    writeFileSync(
      join(dir, 'typo.yaml'),
      `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: typo, namespace: guard}
spec:
  identities: ["*.calers.serviceaccount.identity.linkerd.cluster.local"]
`,
    );
    const line = await waitFor('the warning on the terminal', () => /^.*policy warnings\n.*\n?/m.exec(up.stdout())?.[0], 15_000, 100);
    assert.match(line, /warning: policy warnings/);
    assert.match(
      up.stdout(),
      /typo\.yaml:5:16: warning POL114 identity "\*\.calers\.serviceaccount\.identity\.linkerd\.cluster\.local" names namespace calers, which is not among the loaded resources \(did you mean namespace callers\?\) \[MeshTLSAuthentication guard\/typo\]/,
    );
    const controller = (JSON.parse(readFileSync(join(state, 'mesh.json'), 'utf8')) as { controller: string }).controller;
    const res = (await (await fetch(`${controller}/api/v1/resources?namespace=guard&kind=MeshTLSAuthentication`)).json()) as {
      resources: { name: string; diagnostics: { code: string; severity: string; source?: { line: number; col: number } }[] }[];
    };
    const typo = res.resources.find((r) => r.name === 'typo');
    assert.deepStrictEqual(
      typo?.diagnostics.map((d) => [d.code, d.severity, d.source?.line, d.source?.col]),
      [['POL114', 'warning', 5, 16]],
    );
    // Fixed: the warning is gone from the API, and is not logged again.
    const before = up.stdout().split('POL114').length;
    writeFileSync(join(dir, 'typo.yaml'), readFileSync(join(dir, 'typo.yaml'), 'utf8').replace('*.calers.', '*.callers.'));
    await waitFor(
      'the warning to clear',
      async () => {
        const r = (await (await fetch(`${controller}/api/v1/resources?namespace=guard&kind=MeshTLSAuthentication`)).json()) as typeof res;
        const t = r.resources.find((x) => x.name === 'typo');
        return t !== undefined && t.diagnostics.length === 0 ? true : undefined;
      },
      15_000,
      100,
    );
    assert.equal(up.stdout().split('POL114').length, before);
  });
  it("--controller reads the controller's /api/v1/denials: the same grouping", async () => {
    const controller = (JSON.parse(readFileSync(join(state, 'mesh.json'), 'utf8')) as { controller: string }).controller;
    // The first call starts the controller's feed; it covers what happens from then on.
    const first = status('--controller', controller, '-o', 'json');
    assert.equal(first.status, 0, first.stderr);
    assert.ok(Array.isArray((JSON.parse(first.stdout) as { groups: unknown }).groups));
    await waitFor(
      'the feed to watch the web pod',
      async () => {
        const r = (await (await fetch(`${controller}/api/v1/denials`)).json()) as { watched: number; unwatched: { pod: string }[] };
        return r.watched >= 4 && !r.unwatched.some((u) => u.pod === webPod) ? true : undefined;
      },
      20_000,
      200,
    );
    // Taps attach asynchronously; repeat until the controller saw two of this caller's denials.
    const g = await waitFor(
      'a group of two denials through the controller',
      async () => {
        assert.equal(await call('intruder', `${WEB_API}/again`), 403);
        const r = status('--controller', controller, '-o', 'json', '-n', 'guard', '--kind', 'http403');
        assert.equal(r.status, 0, r.stderr);
        const groups = (JSON.parse(r.stdout) as { groups: DenialGroup[] }).groups;
        return groups.find((x) => x.clientId === idOf('callers', 'intruder') && x.count >= 2);
      },
      30_000,
      300,
    );
    assert.deepStrictEqual(
      [g.namespace, g.workload, g.port, g.route, g.decision],
      ['guard', { kind: 'Deployment', name: 'web' }, 8080, 'HTTPRoute/web-api', 'deny'],
    );
    assert.equal(g.example.path, '/api/items/again');
    const text = status('--controller', controller, '-n', 'guard');
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /^denials seen by the controller at http:\/\/127\.0\.0\.1:\d+ \(watching \d+ pods\)\n/);
    assert.match(text.stdout, /RECENT DENIALS\n.*\n.* guard\/deploy\/web +8080 +intruder\.callers\S+ +http403 +server\/web-http +HTTPRoute\/web-api/);
  });
  it('ward authz of a policy object asks the running mesh: where the Server and the policy apply', () => {
    const saved = process.env.WARD_STATE_DIR;
    process.env.WARD_STATE_DIR = state;
    try {
      const r = wardSync(['authz', 'authorizationpolicy/web-api-friends', '-n', 'guard', '-o', 'json']);
      assert.equal(r.status, 0, r.stderr);
      const o = (JSON.parse(r.stdout) as { policies: { appliesTo: { pod: string; port: number; server: string; route: string | null; via: string }[] }[] })
        .policies[0];
      assert.deepStrictEqual(o?.appliesTo, [
        {
          namespace: 'guard',
          pod: webPod,
          workload: 'Deployment/web',
          port: 8080,
          server: 'server/web-http',
          route: 'httproute/web-api',
          via: 'AuthorizationPolicy web-api-friends → HTTPRoute web-api',
          active: true,
        },
      ]);
      const srv = wardSync(['authz', 'srv/admin', '-n', 'guard']);
      assert.equal(srv.status, 0, srv.stderr);
      assert.match(srv.stdout, new RegExp(`guard/${webPod} +Deployment/web +4191 +server/admin`));
    } finally {
      if (saved === undefined) delete process.env.WARD_STATE_DIR;
      else process.env.WARD_STATE_DIR = saved;
    }
  });
});
