/**
 * Tap over real sockets on 127.0.0.1: an InboundProxy in front of an HTTP/1 application and an
 * AdminServer share one TapHub, as in a running proxy. Clients connect from 127.0.0.2 so that the
 * proxy-added `default:localhost` admits nobody. The admin port's policy admits the `tap` and
 * `prometheus` identities over mesh TLS, and the tap identity is `tap`'s: it taps; prometheus is
 * admitted by the policy (its /metrics is served) but refused /tap; an identity the policy does not
 * admit and plaintext are refused like any other admin request. Under a policy that admits
 * everyone, plaintext still gets no tap, and a proxy without a tap identity taps nobody.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer as createHttpServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { connect as http2Connect } from 'node:http2';
import { type AddressInfo, connect as netConnect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import {
  ALL_NETWORKS,
  type Authorization,
  type CompiledServer,
  compileServer,
  DEFAULT_HTTP_ROUTE,
  defaultMeta,
  type InboundServer,
  parseIp,
} from '../../core/index.js';
import type { WorkloadCertificate } from '../../identity/index.js';
import { ADMIN_POLICY_PORT, AdminServer } from '../admin-server.js';
import { InboundProxy } from '../inbound/proxy.js';
import { MetricsRegistry } from '../metrics/cells.js';
import { InboundMetrics } from '../metrics/inbound.js';
import { mkTestMesh, TempDirs, type TestMesh, waitFor } from '../testing/identity.js';
import { FakePolicies } from '../testing/policies.js';
import { MeshTlsContext } from '../tls/context.js';
import type { ProxyTapEvent } from './tap-event.js';
import { TapHub } from './tap-hub.js';

const HOST = '127.0.0.1';
const FROM = '127.0.0.2';
const WAIT_MS = 10_000;

const authzOf = (name: string, authentication: Authorization['authentication']): Authorization => ({
  meta: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name },
  networks: ALL_NETWORKS,
  authentication,
});

/** Port 8080 of web: `/api` admits vote-bot's identity only, `/open` anyone, nothing else has a route. */
function webServer(voteBot: string): InboundServer {
  const route = (name: string, value: string, authorizations: Authorization[]) => ({
    meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name },
    hosts: [],
    authorizations,
    rules: [{ matches: [{ path: { kind: 'prefix' as const, value }, headers: [], queryParams: [] }], filters: [] }],
  });
  return {
    meta: { group: 'policy.linkerd.io', kind: 'server', name: 'web-http' },
    protocol: {
      kind: 'detect',
      timeoutMs: 1000,
      httpRoutes: [
        route('api', '/api', [authzOf('web-api-from-vote-bot', { kind: 'tlsAuthenticated', identities: [voteBot], suffixes: [] })]),
        route('open', '/open', [authzOf('web-open', { kind: 'unauthenticated' })]),
      ],
    },
    authorizations: [],
  };
}

/** The admin port: anything from these identities. */
function adminServer(identities: string[]): InboundServer {
  return {
    meta: { group: 'policy.linkerd.io', kind: 'server', name: 'linkerd-admin' },
    protocol: { kind: 'detect', timeoutMs: 10_000, httpRoutes: [DEFAULT_HTTP_ROUTE] },
    authorizations: [authzOf('admin-scrapers', { kind: 'tlsAuthenticated', identities, suffixes: [] })],
  };
}

/** The admin port under the `all-unauthenticated` default: anything from anyone, plaintext included. */
const ADMIN_OPEN = compileServer({
  meta: { group: 'policy.linkerd.io', kind: 'server', name: 'linkerd-admin' },
  protocol: { kind: 'detect', timeoutMs: 10_000, httpRoutes: [DEFAULT_HTTP_ROUTE] },
  authorizations: [authzOf('admin-everyone', { kind: 'unauthenticated' })],
});

interface Tap {
  readonly status: number;
  readonly res: IncomingMessage;
  /** Every line so far. */
  readonly lines: string[];
  readonly done: Promise<void>;
}

describe('tap over the admin port', () => {
  const dirs = new TempDirs();
  const policies = new FakePolicies();
  const adminPolicies = new Map<number, CompiledServer>();
  const registry = new MetricsRegistry();
  const metrics = new InboundMetrics({ registry, targetIp: HOST });
  const hub = new TapHub({ maxSubscribers: 3, eventsPerSecond: 1_000_000 });
  let mesh: TestMesh;
  let proxyCert: WorkloadCertificate;
  let voteBot: WorkloadCertificate;
  let tapper: WorkloadCertificate;
  let scraper: WorkloadCertificate;
  let stranger: WorkloadCertificate;
  let app: Server;
  let proxy: InboundProxy;
  let admin: AdminServer;
  let webPort: number;
  let adminPort: number;

  /** Opens a tap as `cert` (plaintext without one); resolves once the head arrived. */
  function tap(query: string, cert: WorkloadCertificate | undefined, port = adminPort): Promise<Tap> {
    return get(`/tap?${query}`, cert, port);
  }

  /** GET `path` of the admin server on `port` as `cert` (plaintext without one); resolves once the head arrived. */
  function get(path: string, cert: WorkloadCertificate | undefined, port: number): Promise<Tap> {
    return new Promise((resolve, reject) => {
      const tcp = () => {
        const s = netConnect({ host: HOST, port, localAddress: FROM });
        s.on('error', () => {});
        return s;
      };
      const ctx = cert === undefined ? undefined : new MeshTlsContext(cert, mesh.anchorsPem);
      const req = httpRequest(
        {
          host: HOST,
          port,
          path,
          createConnection: () => (ctx === undefined ? tcp() : tlsConnect({ ...ctx.clientOptions(proxyCert.identity), socket: tcp() })),
        },
        (res) => {
          const lines: string[] = [];
          let rest = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            rest += c;
            const parts = rest.split('\n');
            rest = parts.pop() ?? '';
            lines.push(...parts);
          });
          const done = once(res, 'end').then(() => undefined);
          resolve({ status: res.statusCode ?? 0, res, lines, done });
        },
      );
      req.on('error', reject);
      req.end();
    });
  }

  /** A request to web through the proxy, over mesh TLS as `cert` or plaintext. */
  function call(method: string, path: string, cert: WorkloadCertificate | undefined, headers: Record<string, string> = {}): Promise<number> {
    return new Promise((resolve, reject) => {
      const ctx = cert === undefined ? undefined : new MeshTlsContext(cert, mesh.anchorsPem);
      const tcp = () => {
        const s = netConnect({ host: HOST, port: webPort, localAddress: FROM });
        s.on('error', () => {});
        return s;
      };
      const req = httpRequest(
        {
          host: HOST,
          port: webPort,
          method,
          path,
          headers: { host: 'web.emojivoto:8080', ...headers },
          createConnection: () => (ctx === undefined ? tcp() : tlsConnect({ ...ctx.clientOptions(proxyCert.identity), socket: tcp() })),
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.end('body-s3cr3t');
    });
  }

  const events = (t: Tap) =>
    t.lines.map((l) => JSON.parse(l) as ProxyTapEvent & { end?: { reason: string; events: number; dropped: { rate: number; slow: number } } });

  before(async () => {
    mesh = await mkTestMesh(dirs);
    [proxyCert, voteBot, tapper, scraper, stranger] = await Promise.all([
      mesh.issue('emojivoto', 'web'),
      mesh.issue('emojivoto', 'vote-bot'),
      mesh.issue('linkerd-viz', 'tap'),
      mesh.issue('linkerd-viz', 'prometheus'),
      mesh.issue('emojivoto', 'emoji'),
    ]);
    app = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => res.end('ok'));
    });
    app.listen(0, HOST);
    await once(app, 'listening');
    const appPort = (app.address() as AddressInfo).port;
    const tls = new MeshTlsContext(proxyCert, mesh.anchorsPem);
    proxy = new InboundProxy({
      identity: proxyCert.identity,
      tls,
      policies,
      appHost: HOST,
      appPortOf: () => appPort,
      listen: { host: HOST, meshPort: 0, appPorts: [0] },
      detectTimeoutMs: 1000,
      metrics: metrics.hooks,
      tap: hub,
    });
    const bound = await proxy.start();
    webPort = bound.appPorts[0] as number;
    policies.set(webPort, webServer(voteBot.identity));
    adminPolicies.set(ADMIN_POLICY_PORT, compileServer(adminServer([tapper.identity, scraper.identity])));
    admin = new AdminServer({
      host: HOST,
      port: 0,
      policies: { current: (p) => adminPolicies.get(p) },
      isReady: () => true,
      registry,
      debugPolicies: () => null,
      identity: proxyCert.identity,
      tls,
      metrics: metrics.hooks,
      tap: hub,
      tapIdentity: tapper.identity,
    });
    adminPort = await admin.start();
  });

  after(async () => {
    await admin?.close();
    await proxy?.close();
    app?.close();
    app?.closeAllConnections();
    dirs.cleanup();
  });

  it('streams allowed requests with their authorization and client identity, and denials with the reason; never a header value, body or query', async () => {
    const t = await tap('max=4&seconds=60', tapper);
    assert.equal(t.status, 200);
    assert.equal(t.res.headers['content-type'], 'application/x-ndjson');
    await waitFor(() => hub.active, 'the tap to subscribe', WAIT_MS);
    const secrets = { authorization: 'Bearer hunter2', cookie: 'session=c00kie', 'x-api-key': 'k3y' };
    assert.equal(await call('GET', '/api/list?token=q5ecret', voteBot, secrets), 200);
    assert.equal(await call('POST', '/api/vote', undefined, secrets), 403);
    assert.equal(await call('GET', '/nowhere', stranger), 404);
    assert.equal(await call('GET', '/open/x', undefined), 200);
    await t.done;
    const [ok, denied, missing, open, end] = events(t);
    assert.deepEqual(
      [ok?.decision, ok?.method, ok?.path, ok?.authority, ok?.clientId, ok?.tls, ok?.server, ok?.route, ok?.authz, ok?.status, ok?.port],
      [
        'allow',
        'GET',
        '/api/list',
        'web.emojivoto:8080',
        voteBot.identity,
        true,
        'server/web-http',
        'HTTPRoute/api',
        'authorizationpolicy/web-api-from-vote-bot',
        200,
        webPort,
      ],
    );
    assert.equal(ok?.clientAddr, FROM);
    assert.ok(typeof ok?.latencyMs === 'number' && ok.latencyMs >= 0);
    assert.deepEqual(
      [denied?.decision, denied?.clientId, denied?.tls, denied?.authz, denied?.status, denied?.kind, denied?.route],
      ['deny', null, false, null, 403, 'http403', 'HTTPRoute/api'],
    );
    assert.match(denied?.reason ?? '', /unauthorized/);
    assert.deepEqual([missing?.decision, missing?.status, missing?.clientId, missing?.reason], ['deny', 404, stranger.identity, 'no route found for request']);
    assert.deepEqual([open?.authz, open?.clientId], ['authorizationpolicy/web-open', null]);
    assert.deepEqual(end?.end, { reason: 'max', events: 4, dropped: { rate: 0, slow: 0 } });
    const raw = t.lines.join('\n');
    for (const s of ['hunter2', 'c00kie', 'k3y', 'q5ecret', 's3cr3t', 'token=']) assert.ok(!raw.includes(s), `${s} leaked into the tap`);
    await waitFor(() => !hub.active, 'the tap to leave the hub', WAIT_MS);
  });

  it('filters denials, by path and by identity', async () => {
    const denied = await tap('denied=true&max=2', tapper);
    const byId = await tap(`identity=${encodeURIComponent(voteBot.identity)}&path=/api&max=1`, tapper);
    await waitFor(() => hub.subscribers === 2, 'both taps to subscribe', WAIT_MS);
    assert.equal(await call('GET', '/open/1', undefined), 200);
    assert.equal(await call('GET', '/api/1', stranger), 403);
    assert.equal(await call('GET', '/open/2', voteBot), 200);
    assert.equal(await call('GET', '/api/2', voteBot), 200);
    assert.equal(await call('GET', '/api/3', undefined), 403);
    await Promise.all([denied.done, byId.done]);
    assert.deepEqual(
      events(denied).map((e) => e.path ?? e.end?.reason),
      ['/api/1', '/api/3', 'max'],
    );
    assert.deepEqual(
      events(byId).map((e) => e.path ?? e.end?.reason),
      ['/api/2', 'max'],
    );
  });

  it('refuses a tap to identities and clients the admin policy does not admit, and bad queries with 400', async () => {
    assert.equal((await tap('max=1', stranger)).status, 403);
    assert.equal((await tap('max=1', undefined)).status, 403);
    const bad = await tap('max=0', tapper);
    await bad.done;
    assert.equal(bad.status, 400);
    assert.equal((JSON.parse(bad.lines[0] ?? '') as { error: { code: string } }).error.code, 'TAP_BAD_QUERY');
    assert.equal(hub.subscribers, 0);
  });

  it('refuses a tap to another identity the admin policy admits, and still serves it /metrics', async () => {
    const refused = await tap('max=1', scraper);
    await refused.done;
    assert.equal(refused.status, 403);
    assert.match(refused.lines.join('\n'), /tap identity only/);
    const scrape = await get('/metrics', scraper, adminPort);
    await scrape.done;
    assert.equal(scrape.status, 200);
    assert.equal(hub.subscribers, 0);
  });

  it('under an admin policy that admits everyone, refuses a tap to plaintext and to other identities, not to the tap identity', async () => {
    const open = new AdminServer({
      host: HOST,
      port: 0,
      policies: { current: () => ADMIN_OPEN },
      isReady: () => true,
      registry,
      debugPolicies: () => null,
      identity: proxyCert.identity,
      tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
      tap: hub,
      tapIdentity: tapper.identity,
    });
    const port = await open.start();
    try {
      const plain = await tap('max=1', undefined, port);
      await plain.done;
      assert.equal(plain.status, 403);
      assert.match(plain.lines.join('\n'), /needs mesh TLS/);
      assert.equal((await tap('max=1', stranger, port)).status, 403);
      const scrape = await get('/metrics', undefined, port);
      await scrape.done;
      assert.equal(scrape.status, 200);
      assert.equal(hub.subscribers, 0);
      const t = await tap('max=1', tapper, port);
      assert.equal(t.status, 200);
      await waitFor(() => hub.active, 'the tap to subscribe', WAIT_MS);
      assert.equal(await call('GET', '/open/granted', undefined), 200);
      await t.done;
      assert.deepEqual(
        events(t).map((e) => e.path ?? e.end?.reason),
        ['/open/granted', 'max'],
      );
    } finally {
      await open.close();
    }
  });

  it('without a tap identity, refuses every tap (tap disabled), even under an admin policy that admits everyone', async () => {
    const noTap = new AdminServer({
      host: HOST,
      port: 0,
      policies: { current: () => ADMIN_OPEN },
      isReady: () => true,
      registry,
      debugPolicies: () => null,
      identity: proxyCert.identity,
      tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
      tap: hub,
    });
    const port = await noTap.start();
    try {
      for (const cert of [tapper, undefined]) {
        const t = await tap('max=1', cert, port);
        await t.done;
        assert.equal(t.status, 403);
        assert.match(t.lines.join('\n'), /tap disabled/);
      }
      assert.equal(hub.subscribers, 0);
    } finally {
      await noTap.close();
    }
  });

  it('answers 503 beyond the subscriber limit, and ends every tap when a client goes away', async () => {
    const open = await Promise.all([tap('seconds=60', tapper), tap('seconds=60', tapper), tap('seconds=60', tapper)]);
    await waitFor(() => hub.subscribers === 3, 'three taps', WAIT_MS);
    const busy = await tap('seconds=60', tapper);
    await busy.done;
    assert.equal(busy.status, 503);
    assert.equal((JSON.parse(busy.lines[0] ?? '') as { error: { code: string } }).error.code, 'TAP_BUSY');
    for (const t of open) t.res.destroy();
    await waitFor(() => hub.subscribers === 0, 'the taps to end with their clients', WAIT_MS);
  });

  it('a reader that stops reading gets its events dropped, not queued, and the data path never waits', async () => {
    const t = await tap('seconds=60&max=1000000', tapper);
    await waitFor(() => hub.active, 'the tap to subscribe', WAIT_MS);
    t.res.pause();
    const ip = parseIp(FROM);
    assert.ok(ip !== undefined);
    const client = { ip, tls: { kind: 'established' as const, clientId: voteBot.identity } };
    const d = {
      allowed: false as const,
      level: 'tcp' as const,
      kind: 'tcp-refuse' as const,
      server: defaultMeta('deny'),
      route: undefined,
      reason: 'x'.repeat(200),
    };
    const N = 100_000;
    const used = () => {
      const m = process.memoryUsage();
      return m.heapUsed + m.external;
    };
    const before = used();
    // ~45 MB of lines, far more than loopback buffers hold.
    for (let i = 0; i < N; i++) hub.tcpDenied(9999, client, d, false);
    const grewMb = (used() - before) / 1e6;
    assert.ok(grewMb < 30, `memory grew ${grewMb.toFixed(1)} MB while publishing`);
    t.res.resume();
    // The seconds have not run out: end it from the proxy's side.
    hub.close();
    await t.done;
    const end = events(t).at(-1)?.end;
    assert.ok(end !== undefined);
    assert.equal(end.reason, 'shutdown');
    assert.ok(end.dropped.slow > 0, 'events were dropped for the slow reader');
    assert.equal(end.events + end.dropped.slow, N);
    assert.equal(events(t).length - 1, end.events);
  });
});

describe('tap over HTTP/2', () => {
  it('streams to an HTTP/2 client (mesh TLS, ALPN h2) as to an HTTP/1 one: the head first, then each event', async () => {
    const dirs = new TempDirs();
    const mesh = await mkTestMesh(dirs);
    const [proxyCert, tapper] = await Promise.all([mesh.issue('emojivoto', 'web'), mesh.issue('linkerd-viz', 'tap')]);
    const hub = new TapHub();
    const admin = new AdminServer({
      host: HOST,
      port: 0,
      policies: { current: () => ADMIN_OPEN },
      isReady: () => true,
      registry: new MetricsRegistry(),
      debugPolicies: () => null,
      identity: proxyCert.identity,
      tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
      tap: hub,
      tapIdentity: tapper.identity,
    });
    const port = await admin.start();
    const client = new MeshTlsContext(tapper, mesh.anchorsPem);
    const session = http2Connect(`https://${HOST}:${port}`, {
      createConnection: () => tlsConnect({ ...client.clientOptions(proxyCert.identity, ['h2']), host: HOST, port }),
    });
    session.on('error', () => {});
    try {
      const req = session.request({ ':path': '/tap?max=2' });
      const head = (await once(req, 'response')) as [Record<string, unknown>];
      assert.equal(head[0][':status'], 200);
      assert.equal(hub.subscribers, 1);
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => {
        body += c;
      });
      const ip = parseIp(FROM);
      assert.ok(ip !== undefined);
      const d = {
        allowed: false as const,
        level: 'tcp' as const,
        kind: 'tcp-refuse' as const,
        server: defaultMeta('deny'),
        route: undefined,
        reason: 'unauthorized connection',
      };
      hub.tcpDenied(9000, { ip, tls: { kind: 'none', reason: 'no_tls_from_remote' } }, d, false);
      hub.tcpDenied(9001, { ip, tls: { kind: 'none', reason: 'no_tls_from_remote' } }, d, false);
      await once(req, 'end');
      const lines = body
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { port?: number; end?: { reason: string } });
      assert.deepEqual(
        lines.map((l) => l.port ?? l.end?.reason),
        [9000, 9001, 'max'],
      );
    } finally {
      session.destroy();
      await admin.close();
      dirs.cleanup();
    }
  });
});
