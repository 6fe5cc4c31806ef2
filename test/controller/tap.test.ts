/**
 * The controller's tap over real proxies' admin servers on 127.20.122.201-203:4191 (each with a
 * TapHub, mesh TLS to its pod's identity, and a port-4191 policy): `/api/v1/tap` served by
 * TapStreams on a real HTTP server, reaching the proxies over mesh TLS as the controller's client
 * identity, and the denial feed. Pods web-0 and web-1 (Deployment web) admit the controller on
 * 4191; locked-0 (Deployment locked) admits nobody. Events are published into the proxies' hubs
 * directly (the proxy's own tests cover what publishes them).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { type ProxyAdminTls, proxyAdminTlsOf } from '../../src/controller/observe/proxy-admin-client.js';
import { DenialFeed } from '../../src/controller/tap/denial-feed.js';
import { TapStreams } from '../../src/controller/tap/tap-stream.js';
import { ALL_NETWORKS, compileServer, DEFAULT_HTTP_ROUTE, type Deny, type InboundServer, localhostAuthz, parseIp } from '../../src/core/index.js';
import { PolicyIndex, type PolicyView } from '../../src/index/index.js';
import type { Pod } from '../../src/manifest/index.js';
import { ADMIN_POLICY_PORT, AdminServer } from '../../src/proxy/admin-server.js';
import { MetricsRegistry } from '../../src/proxy/metrics/cells.js';
import { TapHub } from '../../src/proxy/tap/tap-hub.js';
import { mkTestMesh, TempDirs, type TestMesh, waitFor } from '../../src/proxy/testing/identity.js';
import { MeshTlsContext } from '../../src/proxy/tls/context.js';
import { silentLogger } from '../../src/shared/index.js';

const WAIT_MS = 10_000;
const PODS = [
  { name: 'web-0', ip: '127.20.122.201', owner: 'Deployment/web', sa: 'web', admits: true },
  { name: 'web-1', ip: '127.20.122.202', owner: 'Deployment/web', sa: 'web', admits: true },
  { name: 'locked-0', ip: '127.20.122.203', owner: 'Deployment/locked', sa: 'locked', admits: false },
] as const;

function adminPolicy(identities: string[]): InboundServer {
  return {
    meta: { group: 'policy.linkerd.io', kind: 'server', name: 'admin' },
    protocol: { kind: 'detect', timeoutMs: 10_000, httpRoutes: [DEFAULT_HTTP_ROUTE] },
    authorizations: [
      {
        meta: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name: 'admin-controller' },
        networks: ALL_NETWORKS,
        authentication: { kind: 'tlsAuthenticated', identities, suffixes: [] },
      },
    ],
  };
}

function mkPod(p: (typeof PODS)[number]): Pod {
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: { namespace: 'shop', name: p.name, labels: { app: p.owner.split('/')[1] ?? '', 'linkerd.io/control-plane-ns': 'linkerd' }, annotations: {} },
    spec: { containers: [{ name: 'app', image: 'app' }], serviceAccountName: p.sa },
    status: { podIP: p.ip },
    owner: p.owner,
  } as Pod;
}

const DENY: Deny = {
  allowed: false,
  level: 'http',
  kind: 'http403',
  server: { group: 'policy.linkerd.io', kind: 'server', name: 'web-http' },
  route: undefined,
  reason: 'unauthorized request on route',
};

interface Lines {
  readonly status: number;
  readonly res: IncomingMessage;
  readonly lines: Record<string, unknown>[];
  readonly done: Promise<void>;
}

describe('controller tap over proxies', () => {
  const dirs = new TempDirs();
  const hubs = new Map<string, TapHub>();
  const admins: AdminServer[] = [];
  let mesh: TestMesh;
  let tls: ProxyAdminTls;
  let view: PolicyView;
  let server: Server;
  let port: number;
  let streams: TapStreams;

  function get(query: string): Promise<Lines> {
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: `/api/v1/tap?${query}` }, (res) => {
        const lines: Record<string, unknown>[] = [];
        let rest = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          rest += c;
          const parts = rest.split('\n');
          rest = parts.pop() ?? '';
          for (const l of parts) lines.push(JSON.parse(l) as Record<string, unknown>);
        });
        resolve({ status: res.statusCode ?? 0, res, lines, done: once(res, 'end').then(() => undefined) });
      });
      req.on('error', reject);
      req.end();
    });
  }

  function deny(pod: string, path: string, clientId = 'intruder.shop.serviceaccount.identity.linkerd.cluster.local'): void {
    const ip = parseIp('127.20.122.9');
    assert.ok(ip !== undefined);
    hubs.get(pod)?.httpDenied(8080, { ip, tls: { kind: 'established', clientId } }, { method: 'GET', path, authority: 'web', headers: {} }, DENY, false);
  }

  before(async () => {
    mesh = await mkTestMesh(dirs);
    const controllerCert = await mesh.issue('linkerd', 'ward-controller');
    tls = proxyAdminTlsOf(controllerCert.identity, { current: controllerCert }, () => mesh.anchorsPem);
    const config = clusterConfig({});
    const index = new PolicyIndex(config);
    for (const p of PODS) {
      index.apply(mkPod(p));
      const cert = await mesh.issue('shop', p.sa);
      const hub = new TapHub({ eventsPerSecond: 100_000 });
      hubs.set(p.name, hub);
      // `default:localhost` is the pod's own address (as in a local mesh), not all of loopback: the controller connects from 127.0.0.1.
      const compile = { localhost: localhostAuthz([{ net: { ip: p.ip, prefixLen: 32 }, except: [] }]) };
      const policy = compileServer(
        adminPolicy([p.admits ? controllerCert.identity : 'prometheus.linkerd-viz.serviceaccount.identity.linkerd.cluster.local']),
        compile,
      );
      const admin = new AdminServer({
        host: p.ip,
        port: ADMIN_POLICY_PORT,
        policies: { current: (n) => (n === ADMIN_POLICY_PORT ? policy : undefined) },
        isReady: () => true,
        registry: new MetricsRegistry(),
        debugPolicies: () => null,
        identity: cert.identity,
        tls: new MeshTlsContext(cert, mesh.anchorsPem),
        tap: hub,
        tapIdentity: controllerCert.identity,
        compile,
      });
      await admin.start();
      admins.push(admin);
    }
    view = { config, index };
    streams = new TapStreams({ view: () => view, tls: () => Promise.resolve(tls), log: silentLogger() });
    server = createServer((req, res) => streams.handle(req, res, new URL(req.url ?? '/', 'http://controller')));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  });

  after(async () => {
    server?.closeAllConnections();
    server?.close();
    await Promise.all(admins.map((a) => a.close()));
    dirs.cleanup();
  });

  it('merges the pods of a workload, each event with its pod, and ends at max', async () => {
    const t = await get('resource=deploy/web&namespace=shop&max=3&seconds=60');
    assert.equal(t.status, 200);
    assert.equal(t.res.headers['content-type'], 'application/x-ndjson');
    // The head comes once both proxies have the tap open.
    assert.equal(hubs.get('web-0')?.subscribers, 1);
    assert.equal(hubs.get('web-1')?.subscribers, 1);
    deny('web-0', '/a');
    deny('locked-0', '/not-tapped');
    deny('web-1', '/b');
    deny('web-0', '/c');
    await t.done;
    const events = t.lines.filter((l) => l.end === undefined);
    assert.deepEqual(events.map((e) => [e.pod, e.path, e.namespace, e.workload, e.decision]).sort(), [
      ['web-0', '/a', 'shop', { kind: 'Deployment', name: 'web' }, 'deny'],
      ['web-0', '/c', 'shop', { kind: 'Deployment', name: 'web' }, 'deny'],
      ['web-1', '/b', 'shop', { kind: 'Deployment', name: 'web' }, 'deny'],
    ]);
    assert.deepEqual(t.lines.at(-1), { end: { reason: 'max', events: 3, pods: 2, dropped: { rate: 0, slow: 0, invalid: 0 } } });
    await waitFor(() => hubs.get('web-0')?.subscribers === 0 && hubs.get('web-1')?.subscribers === 0, 'the upstream taps to close', WAIT_MS);
  });

  it('reports a pod whose policy refuses the controller as an error line', async () => {
    const t = await get('resource=pod/locked-0&namespace=shop&seconds=60');
    await t.done;
    const [err, end] = t.lines as [{ error: { code: string; message: string; pod: string } }, { end: { reason: string } }];
    assert.deepEqual([err.error.code, err.error.pod], ['ERR_PROXY_ADMIN_DENIED', 'locked-0']);
    assert.match(err.error.message, /ward-controller\.linkerd\.serviceaccount/);
    assert.equal(end.end.reason, 'upstreams');
  });

  it('closes every upstream tap when the client goes away', async () => {
    const t = await get('resource=deploy/web&namespace=shop&seconds=60');
    assert.equal(hubs.get('web-0')?.subscribers, 1);
    t.res.destroy();
    await waitFor(() => hubs.get('web-0')?.subscribers === 0 && hubs.get('web-1')?.subscribers === 0, 'the upstream taps to close', WAIT_MS);
    await waitFor(() => streams.open === 0, 'the tap to be counted closed', WAIT_MS);
  });

  it('refuses bad queries (400) and a resource without pods (404) before tapping anything', async () => {
    for (const [q, status, code] of [
      ['resource=deploy/web&namespace=shop&max=0', 400, 'INVALID_ARGUMENT'],
      ['resource=deploy/web&namespace=shop&seconds=601', 400, 'INVALID_ARGUMENT'],
      ['resource=deploy/web&path=/a%3Fb', 400, 'INVALID_ARGUMENT'],
      ['resource=gizmo/web', 400, 'INVALID_ARGUMENT'],
      ['namespace=shop', 400, 'INVALID_ARGUMENT'],
      ['resource=deploy/web&namespace=shop&evil=1', 400, 'INVALID_ARGUMENT'],
      ['resource=deploy/nope&namespace=shop', 404, 'NOT_FOUND'],
    ] as const) {
      const t = await get(q);
      await t.done;
      assert.equal(t.status, status, q);
      assert.equal((t.lines[0] as { error: { code: string } }).error.code, code, q);
    }
    assert.equal(hubs.get('web-0')?.subscribers, 0);
  });

  it('the denial feed keeps at most 512 characters of a path or authority, so a flood of long paths stays small', () => {
    const feed = new DenialFeed({ view: () => view, tls: () => Promise.resolve(tls), log: silentLogger() });
    const long = `/${'a'.repeat(4000)}`;
    feed.record({
      time: new Date().toISOString(),
      namespace: 'shop',
      pod: 'web-0',
      workload: { kind: 'Deployment', name: 'web' },
      port: 8080,
      method: 'GET',
      authority: `${'b'.repeat(3000)}.example`,
      path: long,
      clientAddr: '10.0.0.9',
      clientId: null,
      tls: false,
      server: 'server/web',
      route: null,
      authz: null,
      decision: 'deny',
      reason: 'unauthorized request on route',
      status: 403,
      grpcStatus: null,
      latencyMs: null,
      kind: 'http403',
      error: null,
    });
    const example = feed.answer({}).groups[0]?.example;
    assert.equal(example?.path, `${long.slice(0, 512)}…`);
  });

  it('the denial feed taps every pod, groups repeated denials, lists pods it cannot watch, and stops', async () => {
    const feed = new DenialFeed({ view: () => view, tls: () => Promise.resolve(tls), log: silentLogger(), resyncMs: 200 });
    try {
      await feed.start();
      await waitFor(() => hubs.get('web-0')?.subscribers === 1 && hubs.get('web-1')?.subscribers === 1, 'the feed to tap web', WAIT_MS);
      for (const p of ['/x', '/y', '/z']) deny('web-0', p);
      deny('web-1', '/w');
      deny('web-0', '/other', 'emoji.shop.serviceaccount.identity.linkerd.cluster.local');
      await waitFor(
        () => {
          const x = feed.answer({ namespace: 'shop' });
          return x.groups.reduce((n, g) => n + g.count, 0) === 5 && x.unwatched.length === 1;
        },
        'five denials and the locked pod',
        WAIT_MS,
      );
      const a = feed.answer({ namespace: 'shop' });
      const intruder = a.groups.find((g) => g.clientId?.startsWith('intruder.') === true);
      assert.deepEqual(
        [intruder?.count, intruder?.pods, intruder?.workload, intruder?.kind, intruder?.example.path],
        [4, ['web-0', 'web-1'], { kind: 'Deployment', name: 'web' }, 'http403', '/w'],
      );
      assert.equal(a.groups.length, 2);
      assert.deepEqual(
        a.unwatched.map((u) => [u.pod, u.code]),
        [['locked-0', 'ERR_PROXY_ADMIN_DENIED']],
      );
      assert.deepEqual(
        feed.answer({ pod: 'web-1' }).groups.map((g) => g.count),
        [1],
      );
      assert.deepEqual(feed.answer({ namespace: 'other' }).groups, []);
    } finally {
      feed.stop();
    }
    await waitFor(() => hubs.get('web-0')?.subscribers === 0 && hubs.get('web-1')?.subscribers === 0, 'the feed to close its taps', WAIT_MS);
  });
});
