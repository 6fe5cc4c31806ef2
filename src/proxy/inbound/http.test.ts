/**
 * The inbound HTTP stack through a real InboundProxy on 127.0.0.1: an HTTP/1 application and an
 * HTTP/2 (gRPC-speaking) application record what reaches them; clients connect from 127.0.0.2 so
 * that the proxy-added `default:localhost` authorization does not admit them; mesh identities
 * come from an in-process CA.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import {
  Agent,
  type ClientRequest,
  createServer as createHttpServer,
  type Server as HttpServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
} from 'node:http';
import {
  type ClientHttp2Session,
  createServer as createHttp2Server,
  type IncomingHttpHeaders as Http2Headers,
  type OutgoingHttpHeaders as Http2OutgoingHeaders,
  type Http2Server,
  constants as h2constants,
  connect as http2Connect,
} from 'node:http2';
import { type AddressInfo, createServer as createNetServer, connect as netConnect, type Socket } from 'node:net';
import { after, afterEach, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type ConnectionOptions, connect as tlsConnect } from 'node:tls';
import {
  type Authorization,
  defaultMeta,
  type GrpcRoute,
  type HttpRoute,
  type HttpRouteMatch,
  type InboundServer,
  type Network,
  type ProxyProtocol,
} from '../../core/index.js';
import { createLogger } from '../../shared/index.js';
import { mkTestMesh, TempDirs, type TestMesh, waitFor, within } from '../testing/identity.js';
import { FakePolicies } from '../testing/policies.js';
import { MeshTlsContext, TRANSPORT_HEADER_ALPN } from '../tls/context.js';
import { encodeTransportHeader } from '../transport/transport-header.js';
import { InboundProxy } from './proxy.js';

const HOST = '127.0.0.1';
const FROM = '127.0.0.2';
const WAIT_MS = 5000;
const HEADERS_TIMEOUT_MS = 400;
const CHECK_MS = 50;

// ---------------------------------------------------------------------------------------------
// Policies

const ALL_NETWORKS: readonly Network[] = [
  { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
  { net: { ip: '::', prefixLen: 0 }, except: [] },
];

const mkAuthz = (name: string, authentication: Authorization['authentication']): Authorization => ({
  meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name },
  networks: ALL_NETWORKS,
  authentication,
});
const anyone = mkAuthz('anyone', { kind: 'unauthenticated' });
const onlyIdentity = (id: string) => mkAuthz('only-id', { kind: 'tlsAuthenticated', identities: [id], suffixes: [] });
const audit: Authorization = { meta: defaultMeta('audit'), networks: ALL_NETWORKS, authentication: { kind: 'unauthenticated' } };

const prefix = (value: string): HttpRouteMatch => ({ path: { kind: 'prefix', value }, headers: [], queryParams: [] });

function mkRoute(name: string, matches: HttpRouteMatch[], authorizations: Authorization[] = []): HttpRoute {
  return { meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name }, hosts: [], authorizations, rules: [{ matches, filters: [] }] };
}

function mkGrpcRoute(name: string, rpc: { service?: string; method?: string }, authorizations: Authorization[] = []): GrpcRoute {
  return {
    meta: { group: 'gateway.networking.k8s.io', kind: 'GRPCRoute', name },
    hosts: [],
    authorizations,
    rules: [{ matches: [{ rpc, headers: [] }], filters: [] }],
  };
}

function mkServer(protocol: ProxyProtocol, authorizations: readonly Authorization[] = []): InboundServer {
  return { meta: { group: 'policy.linkerd.io', kind: 'Server', name: 'web-http' }, protocol, authorizations };
}

/** `/open` admits anyone (route-level), `/secret` only what the server admits; anything else has no route. */
function webRoutes(secretAuthz: Authorization[] = []): HttpRoute[] {
  return [mkRoute('open', [prefix('/open')], [anyone]), mkRoute('secret', [prefix('/secret')], secretAuthz)];
}
const detectWeb = (serverAuthz: Authorization[] = [], secretAuthz: Authorization[] = []): InboundServer =>
  mkServer({ kind: 'detect', timeoutMs: 1000, httpRoutes: webRoutes(secretAuthz) }, serverAuthz);
const http2Web = (serverAuthz: Authorization[] = []): InboundServer => mkServer({ kind: 'http2', routes: webRoutes() }, serverAuthz);

const SERVICE = 'emojivoto.v1.VotingService';
const grpcServer = (serverAuthz: Authorization[] = []): InboundServer =>
  mkServer(
    {
      kind: 'grpc',
      routes: [mkGrpcRoute('vote', { service: SERVICE, method: 'VoteDoughnut' }, [anyone]), mkGrpcRoute('results', { service: SERVICE, method: 'Results' })],
    },
    serverAuthz,
  );

// ---------------------------------------------------------------------------------------------
// The applications

interface Seen {
  readonly version: '1' | '2';
  readonly method: string;
  readonly path: string;
  /** Raw header pairs (HTTP/1) or the header object's entries (HTTP/2), names lower-cased. */
  readonly headers: [string, string][];
  body: string;
  /** The application saw the exchange end before it finished its response (client gone). */
  aborted: boolean;
}

const seen: Seen[] = [];

/** Bytes the application has written of its `/open/big` response (it honours backpressure). */
let bigWritten = 0;
const BIG_TOTAL = 256 * 1024 * 1024;
const BIG_CHUNK = Buffer.alloc(64 * 1024, 'b');

function headerValues(s: Seen, name: string): string[] {
  return s.headers.filter(([n]) => n === name).map(([, v]) => v);
}

function lowerPairs(raw: readonly string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([(raw[i] as string).toLowerCase(), raw[i + 1] as string]);
  return out;
}

async function startApp1(): Promise<HttpServer> {
  const server = createHttpServer((req, res) => {
    const s: Seen = { version: '1', method: req.method ?? '', path: req.url ?? '', headers: lowerPairs(req.rawHeaders), body: '', aborted: false };
    seen.push(s);
    res.once('close', () => {
      s.aborted = !res.writableFinished;
    });
    if (req.url === '/open/hang') {
      res.writeHead(200);
      res.write('first chunk');
      return;
    }
    if (req.url === '/open/big') {
      bigWritten = 0;
      res.writeHead(200, { 'content-length': String(BIG_TOTAL) });
      const more = (): void => {
        while (bigWritten < BIG_TOTAL && !res.destroyed) {
          bigWritten += BIG_CHUNK.length;
          if (!res.write(BIG_CHUNK)) {
            res.once('drain', more);
            return;
          }
        }
        res.end();
      };
      more();
      return;
    }
    if (req.url === '/open/drop-upload') {
      // Hangs up on the upload after its first bytes, without a response.
      req.once('data', () => req.socket.destroy());
      return;
    }
    if (req.url === '/open/hints') {
      res.writeProcessing();
      res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('after hints');
      return;
    }
    if (req.url === '/open/reason') {
      // A reason phrase with obs-text (Latin-1 0xE9): node writes it as one byte.
      res.writeHead(299, 'Caf\u00e9', { 'content-length': '6' });
      res.end('reason');
      return;
    }
    if (req.url === '/open/echo') {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      req.pipe(res);
      return;
    }
    req.setEncoding('latin1');
    req.on('data', (c: string) => {
      s.body += c;
    });
    req.on('end', () => {
      if (req.url === '/open/trailers') {
        res.writeHead(200, { trailer: 'x-checksum' });
        res.write('with trailers');
        res.addTrailers({ 'x-checksum': 'abc123' });
        res.end();
        return;
      }
      res.setHeader('set-cookie', ['a=1', 'b=2']);
      res.setHeader('x-app', 'h1');
      res.end(`hello ${req.url}`);
    });
  });
  server.listen(0, HOST);
  await once(server, 'listening');
  return server;
}

/** Times app2 saw each `/open/refuse…` and `/open/goaway…` path. */
const refusals = new Map<string, number>();

async function startApp2(): Promise<Http2Server> {
  const server = createHttp2Server();
  server.on('stream', (stream, headers: Http2Headers) => {
    stream.on('error', () => {});
    const s: Seen = {
      version: '2',
      method: String(headers[':method']),
      path: String(headers[':path']),
      headers: Object.entries(headers).flatMap(([n, v]) =>
        v === undefined ? [] : Array.isArray(v) ? v.map((x): [string, string] => [n, x]) : [[n, String(v)]],
      ),
      body: '',
      aborted: false,
    };
    seen.push(s);
    stream.once('close', () => {
      s.aborted = stream.rstCode !== 0;
    });
    if (headers[':path'] === '/open/hang') {
      stream.respond({ ':status': 200 });
      stream.write('first chunk');
      return;
    }
    const path = String(headers[':path']);
    if (path.startsWith('/open/refuse') || path.startsWith('/open/goaway')) {
      const n = (refusals.get(path) ?? 0) + 1;
      refusals.set(path, n);
      if (path.endsWith('-always') || n === 1) {
        // Not processed: refused (RST_STREAM), or a GOAWAY that leaves this stream out.
        // (nghttp2 reads a last stream id of 0 as "the last one processed": the one before it, then.)
        if (path.startsWith('/open/goaway')) stream.session?.goaway(h2constants.NGHTTP2_NO_ERROR, Math.max(1, (stream.id ?? 3) - 2));
        else stream.close(h2constants.NGHTTP2_REFUSED_STREAM);
        return;
      }
      let body = '';
      stream.on('data', (c: Buffer) => {
        body += c.toString();
      });
      stream.on('end', () => {
        stream.respond({ ':status': 200 });
        stream.end(`got ${body}`);
      });
      return;
    }
    const grpc = String(headers['content-type']).startsWith('application/grpc');
    if (grpc) {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': 'ok', 'x-trailer': 'yes' }));
      stream.on('data', (c: Buffer) => {
        s.body += c.toString('latin1');
      });
      // One length-prefixed message back, after the request's end.
      stream.on('end', () => stream.end(grpcFrame('pong')));
      return;
    }
    if (headers[':path'] === '/open/echo') {
      stream.respond({ ':status': 200 });
      stream.pipe(stream);
      return;
    }
    stream.resume();
    stream.on('end', () => {
      stream.respond({ ':status': 200, 'x-app': 'h2' });
      stream.end(`hello h2 ${headers[':path']}`);
    });
  });
  server.listen(0, HOST);
  await once(server, 'listening');
  return server;
}

function grpcFrame(message: string): Buffer {
  const body = Buffer.from(message);
  const out = Buffer.alloc(5 + body.length);
  out.writeUInt32BE(body.length, 1);
  body.copy(out, 5);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Clients

interface Reply {
  readonly status: number;
  /** The reason phrase. */
  readonly message: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  readonly trailers: NodeJS.Dict<string>;
  /** Local port of the client's connection (same port = same keep-alive connection). */
  readonly localPort: number | undefined;
}

const sockets = new Set<Socket>();
const agents = new Set<Agent>();
const sessions = new Set<ClientHttp2Session>();

function track<S extends Socket>(s: S): S {
  sockets.add(s);
  s.on('error', () => {});
  s.once('close', () => sockets.delete(s));
  return s;
}

function keepAliveAgent(): Agent {
  const a = new Agent({ keepAlive: true, maxSockets: 1 });
  agents.add(a);
  return a;
}

interface H1Options {
  readonly method?: string;
  readonly headers?: OutgoingHttpHeaders;
  readonly body?: string | Buffer;
  readonly agent?: Agent;
  /** A socket of the test's own making (mesh TLS, transport header); one request per socket. */
  readonly socket?: () => Socket;
}

function h1(port: number, path: string, opts: H1Options = {}): Promise<Reply> {
  const p = new Promise<Reply>((resolve, reject) => {
    const req = httpRequest({
      host: HOST,
      port,
      localAddress: FROM,
      path,
      method: opts.method ?? 'GET',
      headers: opts.headers ?? {},
      // Without an agent (not even `false`, which makes a fresh one) node uses createConnection.
      ...(opts.socket !== undefined ? { createConnection: () => track((opts.socket as () => Socket)()) } : { agent: opts.agent ?? false }),
    });
    req.on('socket', (s: Socket) => track(s));
    req.on('error', reject);
    req.on('response', (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          message: res.statusMessage ?? '',
          headers: res.headers,
          body: Buffer.concat(chunks),
          trailers: res.trailers,
          localPort: res.socket?.localPort,
        }),
      );
    });
    req.end(opts.body);
  });
  return within(p, WAIT_MS, `HTTP/1 ${path}`);
}

/** A GET whose response has begun: resolves once its head and first body chunk have arrived. */
async function firstChunkOf(port: number, path: string): Promise<{ req: ClientRequest; res: IncomingMessage }> {
  const req = httpRequest({ host: HOST, port, localAddress: FROM, path, agent: false });
  req.on('socket', (s: Socket) => track(s));
  req.on('error', () => {});
  req.end();
  const [res] = (await within(once(req, 'response'), WAIT_MS, 'the response head')) as [IncomingMessage];
  await within(once(res, 'data'), WAIT_MS, 'the first chunk');
  return { req, res };
}

function h2Session(port: number, tls?: ConnectionOptions, preface?: Buffer): ClientHttp2Session {
  const session = http2Connect(`http://${HOST}:${port}`, {
    createConnection: () => {
      const tcp = track(netConnect({ host: HOST, port, localAddress: FROM }));
      if (tls === undefined) return tcp;
      const t = track(tlsConnect({ ...tls, socket: tcp }));
      if (preface !== undefined) t.write(preface);
      return t;
    },
  });
  session.on('error', () => {});
  sessions.add(session);
  return session;
}

interface H2Reply {
  readonly headers: Http2Headers;
  readonly flags: number;
  readonly body: Buffer;
  readonly trailers: Http2Headers | undefined;
  readonly rstCode: number | undefined;
}

function h2(session: ClientHttp2Session, headers: Http2OutgoingHeaders, body?: string | Buffer): Promise<H2Reply> {
  const p = new Promise<H2Reply>((resolve, reject) => {
    const stream = session.request(headers, { endStream: body === undefined });
    let response: { headers: Http2Headers; flags: number } | undefined;
    let trailers: Http2Headers | undefined;
    const chunks: Buffer[] = [];
    stream.on('response', (h: Http2Headers, flags: number) => {
      response = { headers: h, flags };
    });
    stream.on('trailers', (t: Http2Headers) => {
      trailers = t;
    });
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('error', () => {});
    stream.on('close', () => {
      if (response === undefined) reject(new Error(`stream closed without a response (rst ${stream.rstCode})`));
      else resolve({ ...response, body: Buffer.concat(chunks), trailers, rstCode: stream.rstCode });
    });
    if (body !== undefined) stream.end(body);
  });
  return within(p, WAIT_MS, `HTTP/2 ${String(headers[':path'])}`);
}

const grpcCall = (session: ClientHttp2Session, method: string, extra: Http2OutgoingHeaders = {}) =>
  h2(session, { ':method': 'POST', ':path': `/${SERVICE}/${method}`, 'content-type': 'application/grpc', te: 'trailers', ...extra }, grpcFrame('ping'));

/** Writes raw bytes and collects the answer until the proxy closes the connection. */
async function raw(port: number, data: string | Buffer, waitMs = WAIT_MS): Promise<string> {
  const s = track(netConnect({ host: HOST, port, localAddress: FROM }));
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  const closed = once(s, 'close');
  s.write(data);
  await within(closed, waitMs, 'the proxy to close the raw connection');
  return Buffer.concat(chunks).toString('latin1');
}

// ---------------------------------------------------------------------------------------------
// Suite set-up

const dirs = new TempDirs();
const APP_SOCKETS = 4;
let mesh: TestMesh;
let x: MeshTlsContext;
let proxyIdentity: string;
let app1: HttpServer;
let app2: Http2Server;
let deadPort: number;
const policies = new FakePolicies();
const logLines: string[] = [];
let proxy: InboundProxy;
let meshPort: number;
/** Inbound ports: to the HTTP/1 app, to the HTTP/2 app, to nothing listening. */
let portH1: number;
let portH2: number;
let portDown: number;

const portOf = (s: { address(): AddressInfo | string | null }) => (s.address() as AddressInfo).port;
const meshClient = (alpn?: readonly string[]) => x.clientOptions(proxyIdentity, alpn);
const logs = () => logLines.map((l) => JSON.parse(l) as Record<string, unknown>);

before(async () => {
  mesh = await mkTestMesh(dirs);
  const [proxyCert, clientCert] = await Promise.all([mesh.issue('emojivoto', 'web'), mesh.issue('emojivoto', 'vote-bot')]);
  proxyIdentity = proxyCert.identity;
  x = new MeshTlsContext(clientCert, mesh.anchorsPem);
  [app1, app2] = await Promise.all([startApp1(), startApp2()]);
  const gone = createNetServer().listen(0, HOST);
  await once(gone, 'listening');
  deadPort = portOf(gone);
  await new Promise<void>((resolve) => gone.close(() => resolve()));
  proxy = new InboundProxy({
    identity: proxyIdentity,
    tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
    policies,
    appHost: HOST,
    appPortOf: (p) => (p === portH2 ? portOf(app2) : p === portDown ? deadPort : portOf(app1)),
    listen: { host: HOST, meshPort: 0, appPorts: [0, 0, 0] },
    detectTimeoutMs: 1000,
    logger: createLogger({ level: 'info', destination: { write: (line: string) => logLines.push(line) } }),
    // Few connections per application port: a request that used one up for good would show.
    http: { headersTimeoutMs: HEADERS_TIMEOUT_MS, timeoutCheckIntervalMs: CHECK_MS, maxAppSocketsPerPort: APP_SOCKETS },
  });
  const bound = await proxy.start();
  meshPort = bound.meshPort;
  [portH1, portH2, portDown] = bound.appPorts as [number, number, number];
});

afterEach(async () => {
  for (const s of sessions) s.destroy();
  sessions.clear();
  for (const a of agents) a.destroy();
  agents.clear();
  for (const s of sockets) s.destroy();
  await waitFor(() => proxy.stats().open === 0, 'the proxy to close every connection', WAIT_MS);
  policies.clear();
  seen.length = 0;
  logLines.length = 0;
});

after(async () => {
  await proxy?.close();
  app2?.close();
  await new Promise<void>((resolve) => (app1 === undefined ? resolve() : app1.close(() => resolve())));
  app1?.closeAllConnections();
  dirs.cleanup();
});

// ---------------------------------------------------------------------------------------------

describe('InboundHttp: HTTP/1.1', () => {
  it('allows, 403s and 404s per request on one keep-alive connection, forwarding only the permitted request', async () => {
    policies.set(portH1, detectWeb());
    const s0 = proxy.stats();
    const agent = keepAliveAgent();
    const ok = await h1(portH1, '/open/a?x=1', { agent });
    const denied = await h1(portH1, '/secret', { agent });
    const missing = await h1(portH1, '/nowhere', { agent });
    const again = await h1(portH1, '/open/b', { agent, method: 'POST', body: 'payload' });
    assert.equal(ok.status, 200);
    assert.equal(ok.body.toString(), 'hello /open/a?x=1');
    assert.deepEqual(ok.headers['set-cookie'], ['a=1', 'b=2']);
    assert.equal(ok.headers['x-app'], 'h1');
    assert.deepEqual([denied.status, denied.body.length, denied.headers['content-length']], [403, 0, '0']);
    assert.deepEqual([missing.status, missing.body.length], [404, 0]);
    assert.equal(denied.headers['l5d-proxy-error'], undefined, 'no error details for an unmeshed client');
    assert.equal(again.status, 200);
    assert.equal(new Set([ok.localPort, denied.localPort, missing.localPort, again.localPort]).size, 1, 'one connection throughout');
    const s1 = proxy.stats();
    assert.equal(s1.accepted - s0.accepted, 1);
    assert.deepEqual(
      seen.map((s) => [s.method, s.path, s.body]),
      [
        ['GET', '/open/a?x=1', ''],
        ['POST', '/open/b', 'payload'],
      ],
    );
    assert.deepEqual([s1.httpAuthzAllow, s1.httpAuthzDeny, s1.httpRouteNotFound], [s0.httpAuthzAllow + 2, s0.httpAuthzDeny + 1, s0.httpRouteNotFound + 1]);
    const byMetric = (m: string) => s1.httpAuthz.filter((c) => c.metric === m && c.port === portH1);
    assert.deepEqual(byMetric('allow'), [
      { metric: 'allow', port: portH1, server: 'Server:web-http', route: 'HTTPRoute:open', authz: 'AuthorizationPolicy:anyone', count: 2 },
    ]);
    assert.deepEqual(byMetric('deny'), [{ metric: 'deny', port: portH1, server: 'Server:web-http', route: 'HTTPRoute:secret', authz: undefined, count: 1 }]);
    assert.deepEqual(byMetric('route_not_found'), [
      { metric: 'route_not_found', port: portH1, server: 'Server:web-http', route: undefined, authz: undefined, count: 1 },
    ]);
    const denial = logs().find((l) => l.msg === 'Request denied' && l.path === '/secret');
    assert.ok(denial, 'denials are logged at info');
    assert.equal((denial.route as { name: string }).name, 'secret');
  });

  it('streams bodies both ways and relays response trailers', async () => {
    policies.set(portH1, detectWeb());
    const payload = Buffer.alloc(4 * 1024 * 1024, 'abcdefgh');
    const echo = await h1(portH1, '/open/echo', { method: 'POST', body: payload });
    assert.equal(echo.status, 200);
    assert.ok(echo.body.equals(payload), 'the 4 MiB body comes back intact');
    const t = await h1(portH1, '/open/trailers');
    assert.equal(t.body.toString(), 'with trailers');
    assert.deepEqual(t.trailers, { 'x-checksum': 'abc123' });
  });

  it('frames request bodies as the client did: none for a bare GET, chunked stays chunked, a length stays a length', async () => {
    policies.set(portH1, detectWeb());
    const get = await h1(portH1, '/open/get');
    assert.equal(get.status, 200);
    const chunked = await new Promise<number>((resolve, reject) => {
      const req = httpRequest({ host: HOST, port: portH1, localAddress: FROM, path: '/open/chunked', method: 'POST', agent: false });
      req.on('socket', (s: Socket) => track(s));
      req.on('error', reject);
      req.on('response', (res: IncomingMessage) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.write('part one, ');
      setTimeout(() => req.end('part two'), 20);
    });
    assert.equal(chunked, 200);
    const sized = await h1(portH1, '/open/sized', { method: 'POST', headers: { 'content-length': '5' }, body: 'hello' });
    assert.equal(sized.status, 200);
    const [g, c, z] = seen.slice(-3);
    assert.equal(g?.path, '/open/get');
    assert.deepEqual(
      [...headerValues(g as Seen, 'content-length'), ...headerValues(g as Seen, 'transfer-encoding')],
      [],
      'a GET without a body gets no body framing',
    );
    assert.deepEqual(headerValues(c as Seen, 'transfer-encoding'), ['chunked']);
    assert.deepEqual(headerValues(c as Seen, 'content-length'), []);
    assert.equal(c?.body, 'part one, part two');
    assert.deepEqual(headerValues(z as Seen, 'content-length'), ['5']);
    assert.deepEqual(headerValues(z as Seen, 'transfer-encoding'), []);
    assert.equal(z?.body, 'hello');
  });

  it('answers 400 to a request it cannot forward as sent (two Host headers, an unclosed [), closes, and keeps serving past its pool size', async () => {
    policies.set(portH1, detectWeb());
    const before = seen.length;
    for (let i = 0; i < APP_SOCKETS + 2; i++) {
      const twoHosts = await raw(portH1, 'GET /open/two-hosts HTTP/1.1\r\nHost: web\r\nHost: evil\r\n\r\n');
      assert.match(twoHosts, /^HTTP\/1\.1 400 /, twoHosts);
      assert.match(twoHosts, /connection: close/i);
      const openBracket = await raw(portH1, 'GET /open/bracket HTTP/1.1\r\nHost: [x\r\n\r\n');
      assert.match(openBracket, /^HTTP\/1\.1 400 /, openBracket);
    }
    assert.equal(seen.length, before, 'the application saw none of them');
    const after = await Promise.all(Array.from({ length: APP_SOCKETS + 1 }, (_, i) => h1(portH1, `/open/after/${i}`)));
    assert.deepEqual(
      after.map((r) => r.status),
      Array.from({ length: APP_SOCKETS + 1 }, () => 200),
    );
    assert.equal(proxy.stats().httpErrors['bad request'], 2 * (APP_SOCKETS + 2));
  });

  it("answers 502 and closes when the application hangs up mid-upload, and outlives the unread body's deadline", async () => {
    policies.set(portH1, detectWeb());
    const reply = await new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
      const req = httpRequest({
        host: HOST,
        port: portH1,
        localAddress: FROM,
        path: '/open/drop-upload',
        method: 'POST',
        headers: { 'content-length': String(1024 * 1024) },
        agent: false,
      });
      req.on('socket', (sock: Socket) => track(sock));
      req.on('error', reject);
      req.on('response', (res: IncomingMessage) => {
        res.resume();
        resolve({ status: res.statusCode ?? 0, connection: res.headers.connection });
      });
      // Part of the body only: the rest never comes.
      req.write(Buffer.alloc(64 * 1024, 'u'));
    });
    assert.deepEqual(reply, { status: 502, connection: 'close' });
    // The discarded-body deadline passes with the proxy still serving.
    await sleep(HEADERS_TIMEOUT_MS + 300);
    assert.equal((await h1(portH1, '/open/still-there')).status, 200);
  });

  it('skips 1xx informational responses and relays the final one; a reason phrase it cannot relay as is becomes the default', async () => {
    policies.set(portH1, detectWeb());
    const hints = await h1(portH1, '/open/hints');
    assert.equal(hints.status, 200);
    assert.equal(hints.body.toString(), 'after hints');
    const reason = await h1(portH1, '/open/reason');
    assert.deepEqual(
      { status: reason.status, message: reason.message, body: reason.body.toString('latin1') },
      { status: 299, message: 'unknown', body: 'reason' },
    );
  });

  it('holds the application back while the client does not read (backpressure), instead of buffering its response', async () => {
    policies.set(portH1, detectWeb());
    const { req, res } = await firstChunkOf(portH1, '/open/big');
    res.pause();
    // Wait until the application stops writing (socket buffers full along the way), at most 3 s.
    let last = -1;
    for (let waited = 0; waited < 3000 && bigWritten !== last; waited += 300) {
      last = bigWritten;
      await sleep(300);
    }
    assert.ok(bigWritten < 64 * 1024 * 1024, `the application wrote ${bigWritten} of ${BIG_TOTAL} bytes to a client that reads nothing`);
    req.destroy();
  });

  it('applies the latest policy to the next request of an open keep-alive connection (§4.8)', async () => {
    policies.set(portH1, detectWeb([anyone]));
    const agent = keepAliveAgent();
    const before = await h1(portH1, '/secret', { agent });
    assert.equal(before.status, 200);
    policies.set(portH1, detectWeb([]));
    const after = await h1(portH1, '/secret', { agent });
    assert.equal(after.status, 403);
    assert.equal(after.localPort, before.localPort, 'the connection was not closed by the policy change');
    // A port that stops being HTTP has no routes for later requests on the connection.
    policies.set(portH1, mkServer({ kind: 'opaque' }, [anyone]));
    const opaque = await h1(portH1, '/open', { agent });
    assert.equal(opaque.status, 404);
    policies.clear();
    const none = await h1(portH1, '/open', { agent });
    assert.equal(none.status, 500, 'no policy: fail closed');
    assert.equal(none.localPort, before.localPort);
    assert.equal(seen.length, 1);
    assert.equal(proxy.stats().httpErrors['no policy'], 1);
  });

  it('aborts the request to the application when the client goes away mid-response', async () => {
    policies.set(portH1, detectWeb());
    const { req } = await firstChunkOf(portH1, '/open/hang');
    req.destroy();
    await waitFor(() => seen[0]?.aborted === true, 'the application request to be aborted', WAIT_MS);
  });

  it('answers 502 when the application is down, keeping the connection', async () => {
    policies.set(portDown, detectWeb());
    const agent = keepAliveAgent();
    const a = await h1(portDown, '/open', { agent });
    const b = await h1(portDown, '/open', { agent, method: 'POST', body: 'x'.repeat(100_000) });
    assert.deepEqual([a.status, b.status], [502, 502]);
    assert.equal(a.localPort, b.localPort);
    assert.ok((proxy.stats().httpErrors['app unreachable'] ?? 0) >= 2);
  });

  it('allows audit-mode requests and logs them at info with authz.name=audit (§4.9)', async () => {
    policies.set(portH1, detectWeb([audit]));
    const r = await h1(portH1, '/secret/x');
    assert.equal(r.status, 200);
    assert.equal(seen.length, 1);
    const line = logs().find((l) => l.msg === 'Request allowed');
    assert.ok(line, `an audit line in ${JSON.stringify(logLines)}`);
    assert.equal(line.level, 30);
    assert.deepEqual(line.authz, { group: '', kind: 'default', name: 'audit' });
    assert.deepEqual(line.route, { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'secret' });
    // Audit does not create routes.
    assert.equal((await h1(portH1, '/nowhere')).status, 404);
    // A request admitted by a real authorization is not an audit event.
    logLines.length = 0;
    assert.equal((await h1(portH1, '/open')).status, 200);
    assert.equal(
      logs().some((l) => l.msg === 'Request allowed'),
      false,
    );
  });

  it('logs an opaque connection the audit default policy lets through at info, as a would-be denial', async () => {
    policies.set(portH1, mkServer({ kind: 'opaque' }, [audit]));
    const sock = track(netConnect({ host: HOST, port: portH1, localAddress: FROM }));
    await once(sock, 'connect');
    sock.write('GET /open HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n');
    const reply = await new Promise<string>((resolve, reject) => {
      let text = '';
      sock.on('data', (c: Buffer) => {
        text += c.toString('latin1');
      });
      sock.on('end', () => resolve(text));
      sock.on('error', reject);
    });
    assert.match(reply, /^HTTP\/1\.1 200/, 'the audited connection reaches the application');
    const line = logs().find((l) => l.msg === 'inbound TCP connection allowed');
    assert.ok(line, `an audit line in ${JSON.stringify(logLines)}`);
    assert.equal(line.level, 30);
    assert.deepEqual(line.authz, { group: '', kind: 'default', name: 'audit' });
    // A connection admitted by a real authorization is not logged at info.
    logLines.length = 0;
    policies.set(portH1, mkServer({ kind: 'opaque' }, [anyone]));
    const again = track(netConnect({ host: HOST, port: portH1, localAddress: FROM }));
    await once(again, 'connect');
    again.end('GET /open HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n');
    await once(again.resume(), 'end');
    assert.equal(
      logs().some((l) => l.msg === 'inbound TCP connection allowed'),
      false,
    );
  });

  it('answers 501 to upgrades it cannot proxy, ignores h2c upgrades and handles 100-continue', async () => {
    policies.set(portH1, detectWeb());
    const agent = keepAliveAgent();
    const ws = await h1(portH1, '/open/ws', {
      agent,
      headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' },
    });
    assert.equal(ws.status, 501);
    const h2c = await h1(portH1, '/open/h2c', {
      agent,
      headers: { connection: 'Upgrade, HTTP2-Settings', upgrade: 'h2c', 'http2-settings': 'AAMAAABkAAQAAP__' },
    });
    assert.equal(h2c.status, 200);
    assert.equal(ws.localPort, h2c.localPort);
    const forwarded = seen.find((s) => s.path === '/open/h2c');
    assert.ok(forwarded);
    for (const hop of ['upgrade', 'http2-settings']) assert.deepEqual(headerValues(forwarded, hop), [], `${hop} is not forwarded`);
    assert.equal(
      seen.some((s) => s.path === '/open/ws'),
      false,
    );
    const cont = await h1(portH1, '/open/continue', { method: 'POST', headers: { expect: '100-continue' }, body: 'after continue' });
    assert.equal(cont.status, 200);
    assert.equal(seen.find((s) => s.path === '/open/continue')?.body, 'after continue');
    const deniedContinue = await h1(portH1, '/secret', { method: 'POST', headers: { expect: '100-continue' }, body: 'never forwarded' });
    assert.equal(deniedContinue.status, 403);
    assert.equal(
      seen.some((s) => s.path === '/secret'),
      false,
    );
    const refused = await raw(portH1, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    assert.match(refused, /^HTTP\/1\.1 501 /);
  });

  it("a defect in the proxy closes that request's connection, never the process", async () => {
    policies.set(portH1, detectWeb());
    const agent = keepAliveAgent();
    assert.equal((await h1(portH1, '/open/a', { agent })).status, 200);
    policies.throwOnce = new Error('injected defect');
    await assert.rejects(h1(portH1, '/open/b', { agent }), /socket hang up|ECONNRESET/);
    assert.equal((await h1(portH1, '/open/c')).status, 200, 'the proxy goes on');
    assert.ok(logs().some((l) => l.msg === 'inbound HTTP request failed in the proxy' && l.level === 50));
  });
});

describe('InboundHttp: header hygiene', () => {
  it('never forwards client-sent l5d-* headers (a spoofed l5d-client-id from plaintext) nor hop-by-hop headers', async () => {
    policies.set(portH1, detectWeb());
    const r = await raw(
      portH1,
      'GET /open/spoof HTTP/1.1\r\nHost: web\r\nL5d-Client-Id: admin.ns.serviceaccount.identity.linkerd.cluster.local\r\n' +
        'l5d-dst-override: evil:80\r\nL5D-ORIG-PROTO: HTTP/1.1\r\nX-Keep: yes\r\nConnection: close, X-Drop\r\nX-Drop: no\r\nKeep-Alive: timeout=5\r\n\r\n',
    );
    assert.match(r, /^HTTP\/1\.1 200 /);
    const s = seen[0];
    assert.ok(s);
    assert.deepEqual(
      s.headers.filter(([n]) => n.startsWith('l5d-')),
      [],
    );
    assert.deepEqual(headerValues(s, 'x-keep'), ['yes']);
    assert.deepEqual(headerValues(s, 'x-drop'), [], 'headers named by Connection are hop-by-hop');
    assert.deepEqual(headerValues(s, 'keep-alive'), []);
    assert.deepEqual(headerValues(s, 'host'), ['web']);
  });

  it('sets l5d-client-id from the verified identity of a mesh TLS client (HTTP/1 and the transport header)', async () => {
    policies.set(portH1, detectWeb([], [onlyIdentity(x.certificate.identity)]));
    const viaApp = await h1(portH1, '/secret/a', {
      headers: { 'l5d-client-id': 'spoofed.identity' },
      socket: () => tlsConnect({ ...meshClient(), socket: netConnect({ host: HOST, port: portH1, localAddress: FROM }) }),
    });
    assert.equal(viaApp.status, 200);
    const viaMesh = await h1(meshPort, '/secret/b', {
      socket: () => {
        const t = tlsConnect({ ...meshClient([TRANSPORT_HEADER_ALPN]), socket: netConnect({ host: HOST, port: meshPort, localAddress: FROM }) });
        t.write(encodeTransportHeader({ port: portH1, sessionProtocol: 'http1' }));
        return t;
      },
    });
    assert.equal(viaMesh.status, 200);
    assert.deepEqual(
      seen.map((s) => [s.path, headerValues(s, 'l5d-client-id')]),
      [
        ['/secret/a', [x.certificate.identity]],
        ['/secret/b', [x.certificate.identity]],
      ],
    );
    // A meshed client that is denied learns why.
    policies.set(portH1, detectWeb());
    const denied = await h1(portH1, '/secret/c', {
      socket: () => tlsConnect({ ...meshClient(), socket: netConnect({ host: HOST, port: portH1, localAddress: FROM }) }),
    });
    assert.equal(denied.status, 403);
    assert.equal(denied.headers['l5d-proxy-error'], 'unauthorized request on route');
  });
});

describe('InboundHttp: HTTP/1 framing and limits', () => {
  it('answers 400 to request smuggling shapes and closes; the application sees nothing', async () => {
    policies.set(portH1, detectWeb());
    const s0 = proxy.stats();
    const shapes = [
      'POST /open HTTP/1.1\r\nHost: web\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /open/smuggled HTTP/1.1\r\nHost: web\r\n\r\n',
      'POST /open HTTP/1.1\r\nHost: web\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!',
      'POST /open HTTP/1.1\r\nHost: web\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello',
      'POST /open HTTP/1.1\r\nHost: web\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n',
      'POST /open HTTP/1.1\r\nHost: web\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n',
      'POST /open HTTP/1.1\r\nHost: web\r\nTransfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
      'GET /open HTTP/1.1\r\n\r\n',
    ];
    for (const shape of shapes) {
      const answer = await raw(portH1, shape);
      assert.match(answer, /^HTTP\/1\.1 400 /, JSON.stringify(shape));
    }
    await sleep(50);
    assert.deepEqual(seen, [], 'nothing reached the application');
    assert.equal((proxy.stats().httpErrors['bad request'] ?? 0) - (s0.httpErrors['bad request'] ?? 0), shapes.length);
  });

  it('answers 431 to oversized headers', async () => {
    policies.set(portH1, detectWeb());
    const answer = await raw(portH1, `GET /open HTTP/1.1\r\nHost: web\r\nX-Big: ${'a'.repeat(20 * 1024)}\r\n\r\n`);
    assert.match(answer, /^HTTP\/1\.1 431 /);
    assert.deepEqual(seen, []);
    assert.equal(proxy.stats().httpErrors['request headers too large'], 1);
  });

  it('closes a connection whose headers do not complete within the headers timeout', async () => {
    policies.set(portH1, detectWeb());
    const t0 = Date.now();
    const answer = await raw(portH1, 'GET /open HTTP/1.1\r\nHost: web\r\nX-Slow: ', HEADERS_TIMEOUT_MS + 2000);
    const elapsed = Date.now() - t0;
    assert.match(answer, /^HTTP\/1\.1 408 /);
    assert.ok(elapsed >= HEADERS_TIMEOUT_MS - 20 && elapsed < HEADERS_TIMEOUT_MS + 4 * CHECK_MS + 200, `closed after ${elapsed} ms`);
    assert.deepEqual(seen, []);
    assert.equal(proxy.stats().httpErrors['request headers timeout'], 1);
  });
});

describe('InboundHttp: HTTP/2 and gRPC', () => {
  it('a defect in the proxy fails that one stream (INTERNAL_ERROR), never the session or the process', async () => {
    policies.set(portH2, http2Web());
    const session = h2Session(portH2);
    assert.equal((await h2(session, { ':path': '/open/a' })).headers[':status'], 200);
    policies.throwOnce = new Error('injected defect');
    await assert.rejects(h2(session, { ':path': '/open/b' }), /rst 2\)/);
    assert.equal((await h2(session, { ':path': '/open/c' })).headers[':status'], 200, 'the session goes on');
    assert.ok(logs().some((l) => l.msg === 'inbound HTTP/2 request failed in the proxy' && l.level === 50));
  });

  it('allows and 403s HTTP/2 prior-knowledge requests on one session', async () => {
    policies.set(portH2, http2Web());
    const s0 = proxy.stats();
    const session = h2Session(portH2);
    const ok = await h2(session, { ':path': '/open/a', 'x-client': 'c', 'l5d-client-id': 'spoofed' });
    const denied = await h2(session, { ':path': '/secret' });
    const missing = await h2(session, { ':path': '/elsewhere' });
    const echo = await h2(session, { ':method': 'POST', ':path': '/open/echo' }, Buffer.alloc(1024 * 1024, 'z'));
    assert.equal(ok.headers[':status'], 200);
    assert.equal(ok.headers['x-app'], 'h2');
    assert.equal(ok.body.toString(), 'hello h2 /open/a');
    assert.deepEqual([denied.headers[':status'], denied.body.length], [403, 0]);
    assert.equal(missing.headers[':status'], 404);
    assert.equal(echo.body.length, 1024 * 1024);
    assert.equal(proxy.stats().accepted - s0.accepted, 1);
    const first = seen[0];
    assert.ok(first);
    assert.deepEqual(headerValues(first, 'x-client'), ['c']);
    assert.deepEqual(headerValues(first, 'l5d-client-id'), []);
    assert.deepEqual(
      seen.map((s) => s.path),
      ['/open/a', '/open/echo'],
    );
  });

  it('relays gRPC trailers on allow; denies with trailers-only PERMISSION_DENIED (7) and NOT_FOUND (5)', async () => {
    policies.set(portH2, grpcServer());
    const session = h2Session(portH2);
    const ok = await grpcCall(session, 'VoteDoughnut');
    assert.equal(ok.headers[':status'], 200);
    assert.equal(ok.body.subarray(5).toString(), 'pong');
    assert.deepEqual(Object.fromEntries(Object.entries(ok.trailers ?? {})), { 'grpc-status': '0', 'grpc-message': 'ok', 'x-trailer': 'yes' });
    const denied = await grpcCall(session, 'Results');
    assert.equal(denied.headers[':status'], 200);
    assert.equal(denied.headers['grpc-status'], '7');
    assert.equal(denied.headers['content-type'], 'application/grpc');
    assert.ok((denied.flags & 1) === 1, 'trailers-only: END_STREAM on the headers');
    assert.equal(denied.headers['grpc-message'], undefined, 'no details for an unmeshed client');
    const missing = await grpcCall(session, 'Unknown');
    assert.equal(missing.headers['grpc-status'], '5');
    assert.deepEqual(
      seen.map((s) => [s.path, s.body.length]),
      [[`/${SERVICE}/VoteDoughnut`, 9]],
    );
    const st = proxy.stats();
    assert.ok(st.httpAuthz.some((c) => c.metric === 'deny' && c.route === 'GRPCRoute:results'));
  });

  it('gives meshed gRPC clients grpc-message and l5d-proxy-error, and the app l5d-client-id (mesh TLS without ALPN)', async () => {
    policies.set(portH2, grpcServer());
    const session = h2Session(portH2, meshClient(), undefined);
    const denied = await grpcCall(session, 'Results');
    assert.equal(denied.headers['grpc-status'], '7');
    assert.equal(denied.headers['grpc-message'], 'unauthorized request on route');
    assert.equal(denied.headers['l5d-proxy-error'], 'unauthorized request on route');
    const ok = await grpcCall(session, 'VoteDoughnut', { 'l5d-client-id': 'spoofed' });
    assert.equal(ok.trailers?.['grpc-status'], '0');
    const s = seen[0];
    assert.ok(s);
    assert.deepEqual(headerValues(s, 'l5d-client-id'), [x.certificate.identity]);
  });

  it('serves HTTP/2 sessions announced by a transport header', async () => {
    policies.set(portH2, http2Web());
    // The header is written (and flushed) before the session takes the socket over: node's
    // HTTP/2 session must not start writing to a TLS socket with a JS write in flight.
    const t = track(tlsConnect({ ...meshClient([TRANSPORT_HEADER_ALPN]), socket: track(netConnect({ host: HOST, port: meshPort, localAddress: FROM })) }));
    await within(once(t, 'secureConnect'), WAIT_MS, 'the mesh TLS handshake');
    await new Promise<void>((resolve, reject) =>
      t.write(encodeTransportHeader({ port: portH2, sessionProtocol: 'http2' }), (e) => (e ? reject(e) : resolve())),
    );
    const session = http2Connect(`http://${HOST}:${meshPort}`, { createConnection: () => t });
    session.on('error', () => {});
    sessions.add(session);
    const ok = await h2(session, { ':path': '/open/mesh' });
    assert.equal(ok.headers[':status'], 200);
    assert.deepEqual(headerValues(seen[0] as Seen, 'l5d-client-id'), [x.certificate.identity]);
  });

  it('answers 502 / UNAVAILABLE (14) when the application is down', async () => {
    policies.set(portDown, grpcServer());
    const session = h2Session(portDown);
    const g = await grpcCall(session, 'VoteDoughnut');
    assert.equal(g.headers[':status'], 200);
    assert.equal(g.headers['grpc-status'], '14');
    policies.set(portDown, http2Web());
    const h = await h2(session, { ':path': '/open' });
    assert.equal(h.headers[':status'], 502);
  });

  it('sends a request the application refused unprocessed once more (REFUSED_STREAM, GOAWAY), body and all, and only once', async () => {
    policies.set(portH2, http2Web());
    refusals.clear();
    const session = h2Session(portH2);
    const refused = await h2(session, { ':method': 'POST', ':path': '/open/refuse-once' }, 'the body');
    assert.deepEqual([refused.headers[':status'], refused.body.toString()], [200, 'got the body']);
    const left = await h2(session, { ':method': 'POST', ':path': '/open/goaway-once' }, 'more');
    assert.deepEqual([left.headers[':status'], left.body.toString()], [200, 'got more']);
    const never = await h2(session, { ':path': '/open/refuse-always' });
    assert.equal(never.headers[':status'], 502);
    assert.deepEqual(
      [...refusals],
      [
        ['/open/refuse-once', 2],
        ['/open/goaway-once', 2],
        ['/open/refuse-always', 2],
      ],
    );
    // Only what the application answered reached the client: one request each.
    assert.equal((await h2(session, { ':path': '/open/after' })).headers[':status'], 200);
  });

  it('cancels the application stream when the client resets its stream', async () => {
    policies.set(portH2, http2Web());
    const session = h2Session(portH2);
    const stream = session.request({ ':path': '/open/hang' }, { endStream: true });
    stream.on('error', () => {});
    await within(once(stream, 'data'), WAIT_MS, 'the first chunk');
    stream.close(h2constants.NGHTTP2_CANCEL);
    await waitFor(() => seen[0]?.aborted === true, 'the application stream to be reset', WAIT_MS);
    // The session to the client and the one to the application both stay usable.
    assert.equal((await h2(session, { ':path': '/open/after' })).headers[':status'], 200);
  });

  it('applies the latest policy to the next stream of an open session', async () => {
    policies.set(portH2, http2Web([anyone]));
    const session = h2Session(portH2);
    assert.equal((await h2(session, { ':path': '/secret' })).headers[':status'], 200);
    policies.set(portH2, http2Web());
    assert.equal((await h2(session, { ':path': '/secret' })).headers[':status'], 403);
    assert.equal((await h2(session, { ':path': '/open' })).headers[':status'], 200);
  });
});

describe('InboundHttp: l5d-orig-proto (HTTP/1 carried as HTTP/2 by a client proxy)', () => {
  const ORIG = { 'l5d-orig-proto': 'HTTP/1.1' };

  it('sends the request to an HTTP/1 application as HTTP/1.1 and marks the response l5d-orig-proto: HTTP/1.1', async () => {
    policies.set(portH1, detectWeb());
    const session = h2Session(portH1, meshClient());
    const r = await h2(session, { ':path': '/open/a', ':authority': 'web.emojivoto.svc.cluster.local:8080', 'x-client': 'c', ...ORIG });
    assert.equal(r.headers[':status'], 200);
    assert.equal(r.headers['l5d-orig-proto'], 'HTTP/1.1');
    assert.equal(r.headers['x-app'], 'h1');
    assert.deepEqual(r.headers['set-cookie'], ['a=1', 'b=2']);
    assert.equal(r.body.toString(), 'hello /open/a');
    const s = seen[0];
    assert.ok(s);
    assert.deepEqual([s.version, s.method, s.path], ['1', 'GET', '/open/a']);
    assert.deepEqual(headerValues(s, 'host'), ['web.emojivoto.svc.cluster.local:8080']);
    assert.deepEqual(headerValues(s, 'x-client'), ['c']);
    assert.deepEqual(headerValues(s, 'l5d-orig-proto'), []);
    assert.deepEqual(headerValues(s, 'l5d-client-id'), [x.certificate.identity]);
  });

  it('keeps a Host header the request carries (once), and marks HTTP/1.0 and absolute-form requests the same way', async () => {
    policies.set(portH1, detectWeb());
    const session = h2Session(portH1);
    const withHost = await h2(session, { ':path': '/open/h', ':authority': 'b.example', host: 'b.example', ...ORIG });
    assert.equal(withHost.headers['l5d-orig-proto'], 'HTTP/1.1');
    const old = await h2(session, { ':path': '/open/old', ':authority': 'a.example:80', 'l5d-orig-proto': 'HTTP/1.0; absolute-form' });
    assert.equal(old.headers['l5d-orig-proto'], 'HTTP/1.1');
    assert.deepEqual(
      seen.map((s) => [s.version, s.path, headerValues(s, 'host')]),
      [
        ['1', '/open/h', ['b.example']],
        ['1', '/open/old', ['a.example:80']],
      ],
    );
  });

  it('streams request and response bodies both ways and relays the response trailers', async () => {
    policies.set(portH1, detectWeb());
    const session = h2Session(portH1);
    const payload = Buffer.alloc(2 * 1024 * 1024, 'abcdefgh');
    const echo = await h2(session, { ':method': 'POST', ':path': '/open/echo', ...ORIG }, payload);
    assert.equal(echo.headers[':status'], 200);
    assert.ok(echo.body.equals(payload), 'the 2 MiB body comes back intact');
    // curl's Expect on an upload: its client proxy answered the 100 already, the body follows.
    const posted = await h2(session, { ':method': 'POST', ':path': '/open/form', 'content-length': '5', expect: '100-continue', ...ORIG }, 'hello');
    assert.equal(posted.body.toString(), 'hello /open/form');
    const t = await h2(session, { ':path': '/open/trailers', ...ORIG });
    assert.equal(t.body.toString(), 'with trailers');
    assert.equal(t.trailers?.['x-checksum'], 'abc123');
    assert.deepEqual(
      seen.map((s) => [s.version, s.path, s.body.length]),
      [
        ['1', '/open/echo', 0],
        ['1', '/open/form', 5],
        ['1', '/open/trailers', 0],
      ],
    );
    assert.deepEqual(headerValues(seen[1] as Seen, 'content-length'), ['5']);
    assert.deepEqual(headerValues(seen[1] as Seen, 'expect'), []);
  });

  it('ends a HEAD response with its headers', async () => {
    policies.set(portH1, detectWeb());
    const session = h2Session(portH1);
    const r = await h2(session, { ':method': 'HEAD', ':path': '/open/head', ...ORIG });
    assert.equal(r.headers[':status'], 200);
    assert.ok((r.flags & 1) === 1, 'END_STREAM on the headers');
    assert.equal(r.body.length, 0);
    assert.equal(seen[0]?.method, 'HEAD');
  });

  it('authorizes as any request: a denial is the proxy own answer, unmarked, and the application sees nothing', async () => {
    policies.set(portH1, detectWeb());
    const session = h2Session(portH1);
    const denied = await h2(session, { ':path': '/secret', ...ORIG });
    const missing = await h2(session, { ':path': '/elsewhere', ...ORIG });
    assert.deepEqual([denied.headers[':status'], denied.headers['l5d-orig-proto']], [403, undefined]);
    assert.equal(missing.headers[':status'], 404);
    assert.equal(seen.length, 0);
  });

  it('answers 502 when the application is down, and the session goes on', async () => {
    policies.set(portDown, detectWeb());
    const session = h2Session(portDown);
    const r = await h2(session, { ':path': '/open', ...ORIG });
    assert.equal(r.headers[':status'], 502);
    assert.equal(r.headers['l5d-orig-proto'], undefined);
    policies.set(portH1, detectWeb());
    assert.equal((await h2(h2Session(portH1), { ':path': '/open/after', ...ORIG })).headers[':status'], 200);
  });

  it('aborts the application request when the client resets its stream mid-response', async () => {
    policies.set(portH1, detectWeb());
    const session = h2Session(portH1);
    const stream = session.request({ ':path': '/open/hang', ...ORIG }, { endStream: true });
    stream.on('error', () => {});
    await within(once(stream, 'data'), WAIT_MS, 'the first chunk');
    stream.close(h2constants.NGHTTP2_CANCEL);
    await waitFor(() => seen[0]?.aborted === true, 'the application request to be aborted', WAIT_MS);
    assert.equal((await h2(session, { ':path': '/open/after', ...ORIG })).headers[':status'], 200);
  });

  it('holds the application back while the client does not read (flow control), instead of buffering its response', async () => {
    policies.set(portH1, detectWeb());
    const session = h2Session(portH1);
    const stream = session.request({ ':path': '/open/big', ...ORIG }, { endStream: true });
    stream.on('error', () => {});
    await within(once(stream, 'data'), WAIT_MS, 'the first chunk');
    stream.pause();
    let last = -1;
    for (let waited = 0; waited < 3000 && bigWritten !== last; waited += 300) {
      last = bigWritten;
      await sleep(300);
    }
    assert.ok(bigWritten < 64 * 1024 * 1024, `the application wrote ${bigWritten} of ${BIG_TOTAL} bytes to a client that reads nothing`);
    stream.close(h2constants.NGHTTP2_CANCEL);
    await waitFor(() => seen[0]?.aborted === true, 'the application request to be aborted', WAIT_MS);
  });

  it('leaves a request with an unknown l5d-orig-proto value on HTTP/2 (the mark removed)', async () => {
    policies.set(portH2, http2Web());
    const session = h2Session(portH2);
    const r = await h2(session, { ':path': '/open/x', 'l5d-orig-proto': 'SPDY/3' });
    assert.equal(r.headers[':status'], 200);
    assert.equal(r.headers['l5d-orig-proto'], undefined);
    assert.deepEqual([seen[0]?.version, headerValues(seen[0] as Seen, 'l5d-orig-proto')], ['2', []]);
  });
});
