/**
 * Route-policy bypass and identity spoofing against real lenient applications: Python's
 * http.server (HTTP/1.1 keep-alive, never reads a request body) and wsgiref (WSGI: `l5d_client_id`
 * and `l5d-client-id` are one variable), and node:http2, each behind a real inbound proxy.
 *
 * Pod ports and their policies:
 * - 8080 `http1` → http.server, no server-level authorization; routes: `/public` admits anyone,
 *   `/admin` only X; `/vhost` on host `public.example` admits anyone, on `admin.example` only X;
 * - 8081 `detect` → http.server and 8082 `detect` → wsgiref: a server-level authorization admits
 *   anyone (so a TCP stream would be admitted too), one route, `/public`;
 * - 8083 `http2` → node:http2, the routes of 8080.
 * The attacker (plaintext from 127.0.0.3, or identity Y) must never get an application to serve
 * an `/admin` path or the admin virtual host, nor to read X's identity from a header.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer as createHttp2Server, type Http2Server, type IncomingHttpHeaders } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Authorization, HttpRoute, InboundServer, Network } from '../../src/core/index.js';
import { PolicyWatcher } from '../../src/proxy/inbound/policy-watch.js';
import { InboundProxy } from '../../src/proxy/inbound/proxy.js';
import { mkTestMesh, TempDirs, type TestMesh } from '../../src/proxy/testing/identity.js';
import { MeshTlsContext, TRANSPORT_HEADER_ALPN } from '../../src/proxy/tls/context.js';
import { encodeTransportHeader } from '../../src/proxy/transport/transport-header.js';
import { ATTACKER_FROM, clientSockets, HOST, h2Request, h2Session, ScriptedPolicyStreams, tcpFrom, tlsFrom, WAIT_MS, waitFor, within } from './attack-lab.js';

const POD = { paths: 8080, detectPy: 8081, detectWsgi: 8082, h2: 8083 } as const;
type Port = keyof typeof POD;
const PORTS = Object.keys(POD) as Port[];

const ALL: readonly Network[] = [
  { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
  { net: { ip: '::', prefixLen: 0 }, except: [] },
];
const anyone: Authorization = {
  meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: 'anyone' },
  networks: ALL,
  authentication: { kind: 'unauthenticated' },
};
const onlyX = (x: string): Authorization => ({
  meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: 'only-x' },
  networks: ALL,
  authentication: { kind: 'tlsAuthenticated', identities: [x], suffixes: [] },
});

function route(name: string, prefix: string, authorizations: readonly Authorization[], host?: string): HttpRoute {
  return {
    meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name },
    hosts: host === undefined ? [] : [{ kind: 'exact', value: host }],
    authorizations,
    rules: [{ matches: [{ path: { kind: 'prefix', value: prefix }, headers: [], queryParams: [] }], filters: [] }],
  };
}

function policyOf(port: Port, x: string): InboundServer {
  const meta = { group: 'policy.linkerd.io', kind: 'Server', name: port };
  const routes = [
    route('public', '/public', [anyone]),
    route('admin', '/admin', [onlyX(x)]),
    route('public-host', '/vhost', [anyone], 'public.example'),
    route('admin-host', '/vhost', [onlyX(x)], 'admin.example'),
  ];
  switch (port) {
    case 'paths':
      return { meta, protocol: { kind: 'http1', routes }, authorizations: [] };
    case 'h2':
      return { meta, protocol: { kind: 'http2', routes }, authorizations: [] };
    case 'detectPy':
    case 'detectWsgi':
      return { meta, protocol: { kind: 'detect', timeoutMs: 500, httpRoutes: [route('public', '/public', [])] }, authorizations: [anyone] };
  }
}

/** What an application served. */
interface Served {
  readonly app: string;
  readonly method: string;
  readonly path: string;
  readonly host: string | null;
  readonly ids: readonly string[];
}

interface Lab {
  readonly dirs: TempDirs;
  readonly mesh: TestMesh;
  readonly proxyId: string;
  readonly x: MeshTlsContext;
  readonly y: MeshTlsContext;
  readonly python: ChildProcessWithoutNullStreams;
  readonly h2App: Http2Server;
  readonly served: Served[];
  readonly watcher: PolicyWatcher;
  readonly proxy: InboundProxy;
  readonly port: Record<Port, number>;
  readonly meshPort: number;
}

let lab: Lab;

async function startPython(served: Served[]): Promise<{ child: ChildProcessWithoutNullStreams; ports: { httpServer: number; wsgi: number } }> {
  const child = spawn('python3', [fileURLToPath(new URL('./python-apps.py', import.meta.url))], { stdio: 'pipe' });
  let ready: ((p: { httpServer: number; wsgi: number }) => void) | undefined;
  const readyP = new Promise<{ httpServer: number; wsgi: number }>((resolve) => {
    ready = resolve;
  });
  let pending = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk: string) => {
    pending += chunk;
    for (let nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n')) {
      const line = JSON.parse(pending.slice(0, nl)) as Served | { ready: { httpServer: number; wsgi: number } };
      pending = pending.slice(nl + 1);
      if ('ready' in line) ready?.(line.ready);
      else served.push(line);
    }
  });
  return { child, ports: await within(readyP, 15_000, 'the Python applications to start') };
}

before(async () => {
  const dirs = new TempDirs();
  const mesh = await mkTestMesh(dirs);
  const [proxyCert, xCert, yCert] = await Promise.all([mesh.issue('emojivoto', 'web'), mesh.issue('emojivoto', 'vote-bot'), mesh.issue('emojivoto', 'emoji')]);
  const served: Served[] = [];
  const { child, ports: py } = await startPython(served);
  const h2App = createHttp2Server();
  h2App.on('stream', (stream, headers: IncomingHttpHeaders) => {
    stream.on('error', () => {});
    const ids = [headers['l5d-client-id'], headers.l5d_client_id].flat().filter((v): v is string => typeof v === 'string');
    served.push({ app: 'http2', method: String(headers[':method']), path: String(headers[':path']), host: headers.host ?? headers[':authority'] ?? null, ids });
    stream.respond({ ':status': 200 });
    stream.end(`served ${String(headers[':path'])}`);
  });
  h2App.listen(0, HOST);
  await once(h2App, 'listening');
  const h2Port = (h2App.address() as AddressInfo).port;
  const streams = new ScriptedPolicyStreams();
  const watcher = new PolicyWatcher({ client: streams, workload: '{"ns":"emojivoto","pod":"web-0"}', ports: PORTS.map((p) => POD[p]) });
  for (const p of PORTS) streams.publish(POD[p], policyOf(p, xCert.identity));
  await within(watcher.ready(), WAIT_MS, 'every policy');
  const appPort = (pod: number): number =>
    pod === POD.detectWsgi ? py.wsgi : pod === POD.h2 ? h2Port : pod === POD.paths || pod === POD.detectPy ? py.httpServer : 1;
  const proxy = new InboundProxy({
    identity: proxyCert.identity,
    tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
    policies: watcher,
    appHost: HOST,
    appPortOf: appPort,
    listen: { host: HOST, meshPort: 0, appPorts: PORTS.map(() => 0), policyPorts: PORTS.map((p) => POD[p]) },
    detectTimeoutMs: 500,
    http: { headersTimeoutMs: 1000, timeoutCheckIntervalMs: 50 },
  });
  const bound = await proxy.start();
  lab = {
    dirs,
    mesh,
    proxyId: proxyCert.identity,
    x: new MeshTlsContext(xCert, mesh.anchorsPem),
    y: new MeshTlsContext(yCert, mesh.anchorsPem),
    python: child,
    h2App,
    served,
    watcher,
    proxy,
    port: Object.fromEntries(PORTS.map((p, i) => [p, bound.appPorts[i] as number])) as Record<Port, number>,
    meshPort: bound.meshPort,
  };
});

after(async () => {
  for (const s of clientSockets) s.destroy();
  await lab.proxy.close();
  lab.watcher.stop();
  lab.python.stdin.end();
  lab.python.kill();
  await new Promise<void>((resolve) => lab.h2App.close(() => resolve()));
  lab.dirs.cleanup();
});

const xId = () => lab.x.certificate.identity;
const yId = () => lab.y.certificate.identity;

/** Who attacks: plaintext from the attacker's address, or Y with mesh TLS (on a port, or through the mesh port). */
type Attacker = 'plaintext' | 'Y' | 'Y via the mesh port';
const ATTACKERS: readonly Attacker[] = ['plaintext', 'Y', 'Y via the mesh port'];

function connect(who: Attacker, port: Port): Socket {
  if (who === 'plaintext') return tcpFrom(lab.port[port], ATTACKER_FROM);
  if (who === 'Y') return tlsFrom(lab.port[port], lab.y.clientOptions(lab.proxyId), ATTACKER_FROM);
  // No session protocol: the target port's protocol must decide.
  const t = tlsFrom(lab.meshPort, lab.y.clientOptions(lab.proxyId, [TRANSPORT_HEADER_ALPN]), ATTACKER_FROM);
  t.write(encodeTransportHeader({ port: POD[port] }));
  return t;
}

/** Writes raw bytes and collects what comes back until the proxy closes or a whole response with a length arrived. */
async function raw(who: Attacker, port: Port, bytes: string): Promise<string> {
  const s = connect(who, port);
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  const closed = new Promise<void>((resolve) => s.once('close', () => resolve()));
  s.write(bytes);
  const text = () => Buffer.concat(chunks).toString('latin1');
  const complete = () => {
    const t = text();
    const end = t.indexOf('\r\n\r\n');
    if (end < 0) return false;
    const m = /\r\ncontent-length: *(\d+)/i.exec(t.slice(0, end));
    return m !== null && t.length >= end + 4 + Number(m[1]);
  };
  await within(Promise.race([closed, waitFor(complete, 'a whole response', WAIT_MS)]), WAIT_MS + 1000, `an answer to ${JSON.stringify(bytes.slice(0, 60))}`);
  s.destroy();
  return text();
}

const statusOf = (response: string) => Number(/^HTTP\/1\.1 (\d{3}) /.exec(response)?.[1] ?? 0);

/**
 * Waits until a request X sends after the attack has reached the application, plus the time a
 * slow /admin handler takes, then returns what the applications served since `mark` that the
 * attacker should never have got: an admin path or virtual host, or a client id other than Y's.
 */
async function breaches(mark: number): Promise<Served[]> {
  const sentinel = `/public/sentinel-${mark}-${Date.now()}`;
  const s = tcpFrom(lab.port.paths, '127.0.0.2');
  s.write(`GET ${sentinel} HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n`);
  await waitFor(() => lab.served.some((r) => r.path === sentinel), 'the sentinel request', WAIT_MS);
  s.destroy();
  await new Promise((resolve) => setTimeout(resolve, 400));
  return lab.served.slice(mark).filter((r) => {
    if (r.path === sentinel) return false;
    const adminPath = /admin/i.test(decodeURIComponent(r.path.replace(/%(?![0-9a-f]{2})/gi, '%25')));
    const adminHost = r.host !== null && /admin/i.test(r.host);
    const forged = r.ids.some((id) => id !== yId());
    return adminPath || adminHost || forged;
  });
}

describe('lenient HTTP/1 on detect ports, with a forged l5d-client-id', () => {
  const forged = () => `l5d-client-id: ${xId()}\r\nl5d_client_id: ${xId()}\r\n`;
  const shapes = (): Record<string, string> => ({
    'a request line over 8 KiB': `GET /admin?${'a'.repeat(9000)} HTTP/1.1\r\nHost: web\r\n${forged()}Connection: close\r\n\r\n`,
    'two spaces after the method': `GET  /admin HTTP/1.1\r\nHost: web\r\n${forged()}Connection: close\r\n\r\n`,
    'a tab after the method': `GET\t/admin HTTP/1.1\r\nHost: web\r\n${forged()}Connection: close\r\n\r\n`,
    'a leading CRLF': `\r\nGET /admin HTTP/1.1\r\nHost: web\r\n${forged()}Connection: close\r\n\r\n`,
    'bare LF': `GET /admin HTTP/1.1\nHost: web\n${forged().replaceAll('\r\n', '\n')}Connection: close\n\n`,
    'HTTP/0.9': 'GET /admin\r\n',
    'a lowercase method': `get /admin HTTP/1.1\r\nHost: web\r\n${forged()}Connection: close\r\n\r\n`,
  });

  for (const port of ['detectPy', 'detectWsgi'] as const) {
    for (const who of ATTACKERS) {
      it(`${port}: no shape reaches the application raw, from ${who}`, async () => {
        const mark = lab.served.length;
        for (const [name, bytes] of Object.entries(shapes())) {
          const response = await raw(who, port, bytes);
          // Strictly parsed: refused, or (the long line) authorized by route: no route for /admin here.
          assert.ok(response === '' || /^HTTP\/1\.1 (400|404|408|431) /.test(response), `${name}: ${JSON.stringify(response.slice(0, 80))}`);
        }
        assert.deepEqual(await breaches(mark), []);
      });
    }
  }

  it('an HTTP/1 port reached through the mesh port without a session protocol is still HTTP', async () => {
    const mark = lab.served.length;
    const response = await raw('Y via the mesh port', 'paths', `GET /public/x HTTP/1.1\r\nHost: web\r\n${forged()}Connection: close\r\n\r\n`);
    assert.equal(statusOf(response), 200);
    const seen = lab.served.slice(mark).find((r) => r.path === '/public/x');
    assert.deepEqual(seen?.ids, [yId()], 'the application reads the verified identity only');
    assert.deepEqual(await breaches(mark), []);
  });
});

describe('paths the application normalizes, fragments and authorities', () => {
  const denied: Record<string, number> = {
    '/public/../admin': 403,
    '/public/%2e%2e/admin': 403,
    '/public/.%2e/admin': 403,
    '/public/%2E%2E/admin/x': 403,
    '//admin': 403,
    '/%61dmin': 403,
    '/./admin': 403,
    '/public/..\\admin': 400,
    '/admin%2F': 400,
    '/public/..%2fadmin': 400,
    '/public/..%5cadmin': 400,
    '/admin#x': 400,
    '/public#/../admin': 400,
    '/public/%zz': 400,
  };

  for (const who of ['plaintext', 'Y'] as const) {
    it(`HTTP/1 from ${who}: each is denied or refused, and the application never serves /admin`, async () => {
      const mark = lab.served.length;
      for (const [path, status] of Object.entries(denied)) {
        const response = await raw(who, 'paths', `GET ${path} HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n`);
        assert.equal(statusOf(response), status, `${path}: ${JSON.stringify(response.slice(0, 60))}`);
      }
      assert.deepEqual(await breaches(mark), []);
    });
  }

  it('HTTP/1: an admitted path is served normalized, so the application reads what was authorized', async () => {
    const mark = lab.served.length;
    for (const path of ['/public/./x/../y', '/public//y', '/%70ublic/y']) {
      assert.equal(statusOf(await raw('plaintext', 'paths', `GET ${path} HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n`)), 200, path);
    }
    assert.deepEqual(
      lab.served.slice(mark).map((r) => r.path),
      ['/public/y', '/public/y', '/public/y'],
    );
  });

  it('HTTP/1: an absolute-form authority replaces Host; an empty one is refused', async () => {
    const mark = lab.served.length;
    const r1 = await raw('plaintext', 'paths', 'GET http://public.example/vhost HTTP/1.1\r\nHost: admin.example\r\nConnection: close\r\n\r\n');
    assert.equal(statusOf(r1), 200);
    assert.deepEqual(
      lab.served.slice(mark).map((r) => [r.path, r.host]),
      [['/vhost', 'public.example']],
    );
    const r2 = await raw('plaintext', 'paths', 'GET http://admin.example/vhost HTTP/1.1\r\nHost: public.example\r\nConnection: close\r\n\r\n');
    assert.equal(statusOf(r2), 403);
    for (const target of ['http:///vhost', 'http://user@admin.example/vhost']) {
      const r = await raw('plaintext', 'paths', `GET ${target} HTTP/1.1\r\nHost: public.example\r\nConnection: close\r\n\r\n`);
      assert.equal(statusOf(r), 400, target);
    }
    assert.deepEqual(await breaches(mark), []);
  });

  it('HTTP/2: the same paths, a fragment, and host differing from :authority', async () => {
    const mark = lab.served.length;
    const session = h2Session(lab.port.h2, () => tcpFrom(lab.port.h2, ATTACKER_FROM));
    try {
      for (const [path, status] of Object.entries(denied)) {
        const r = await within(h2Request(session, { ':method': 'GET', ':path': path, ':authority': 'web' }), WAIT_MS, path);
        assert.equal(r.headers?.[':status'], status, path);
      }
      const mismatch = await within(
        h2Request(session, { ':method': 'GET', ':path': '/vhost', ':authority': 'public.example', host: 'admin.example' }),
        WAIT_MS,
        'host differing from :authority',
      );
      assert.equal(mismatch.headers, undefined, 'a malformed request gets no response');
      assert.equal(mismatch.rstCode, 1, 'PROTOCOL_ERROR');
      const normalized = await within(h2Request(session, { ':method': 'GET', ':path': '/public/./a/../b', ':authority': 'web' }), WAIT_MS, 'normalized');
      assert.equal(normalized.headers?.[':status'], 200);
    } finally {
      session.destroy();
    }
    assert.ok(lab.served.slice(mark).some((r) => r.app === 'http2' && r.path === '/public/b'));
    assert.deepEqual(await breaches(mark), []);
  });
});

describe('a body the application ignores', () => {
  it('never runs a request smuggled in a GET body, nor hands its response to another client', async () => {
    const mark = lab.served.length;
    const smuggled = 'GET /admin/delete-everything HTTP/1.1\r\nHost: web\r\n\r\n';
    for (const method of ['GET', 'DELETE', 'OPTIONS']) {
      const attack = `${method} /public/a HTTP/1.1\r\nHost: web\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`;
      const response = await raw('plaintext', 'paths', attack);
      assert.equal(statusOf(response), 200, method);
      assert.match(response, /served \/public\/a$/, method);
      // Another client right behind, on the proxy's connections to the application.
      const other = await raw('plaintext', 'paths', 'GET /public/b HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n');
      assert.match(other, /served \/public\/b$/, `${method}: another client got another response`);
    }
    assert.deepEqual(await breaches(mark), []);
  });
});

describe('identity headers with underscores', () => {
  it('reach a WSGI application from no one', async () => {
    const mark = lab.served.length;
    const plain = await raw(
      'plaintext',
      'detectWsgi',
      `GET /public/u HTTP/1.1\r\nHost: web\r\nl5d_client_id: ${xId()}\r\nL5D_CLIENT_ID: ${xId()}\r\nConnection: close\r\n\r\n`,
    );
    assert.equal(statusOf(plain), 200);
    const meshed = await raw('Y', 'detectWsgi', `GET /public/v HTTP/1.1\r\nHost: web\r\nl5d_client_id: ${xId()}\r\nConnection: close\r\n\r\n`);
    assert.equal(statusOf(meshed), 200);
    assert.deepEqual(
      lab.served
        .slice(mark)
        .filter((r) => r.app === 'wsgiref')
        .map((r) => [r.path, r.ids]),
      [
        ['/public/u', []],
        ['/public/v', [yId()]],
      ],
    );
    const session = h2Session(lab.port.h2, () => tcpFrom(lab.port.h2, ATTACKER_FROM));
    try {
      const r = await within(h2Request(session, { ':method': 'GET', ':path': '/public/w', ':authority': 'web', l5d_client_id: xId() }), WAIT_MS, 'h2');
      assert.equal(r.headers?.[':status'], 200);
    } finally {
      session.destroy();
    }
    assert.deepEqual(await breaches(mark), []);
  });
});
