/**
 * The outbound forward proxy end to end in-process: clients on 127.0.0.1 use it as HTTP_PROXY,
 * a DestinationCache over a scripted Destination source resolves the services, and a real
 * InboundProxy (mesh TLS, transport header, per-request policy admitting only `client`) serves
 * the applications. The outbound connects from 127.0.0.2, as a pod of its own would.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Agent, createServer as createHttpServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import {
  type ClientHttp2Session,
  createServer as createHttp2Server,
  type IncomingHttpHeaders as Http2Headers,
  type OutgoingHttpHeaders as Http2OutgoingHeaders,
  type Http2Server,
  connect as http2Connect,
} from 'node:http2';
import { type AddressInfo, createServer as createNetServer, connect as netConnect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { DestinationEndpoint, DestinationEvent, StreamHandlers, WireResult } from '../../api/index.js';
import { MetricsRegistry } from '../metrics/cells.js';
import { OutboundMetrics } from '../metrics/outbound.js';
import { TempDirs, waitFor, within } from '../testing/identity.js';
import { HOST, POD_HTTP1, POD_HTTP2, POD_TCP, type ServerSide, startServerSide } from '../testing/outbound.js';
import { MeshTlsContext } from '../tls/context.js';
import { OutboundConnector } from './connector.js';
import { OutboundProxy } from './proxy.js';
import { DestinationCache, type DestinationSource } from './resolver.js';

const WAIT_MS = 5000;
const FROM = '127.0.0.2';
const SVC = (name: string, port = 80) => `${name}.demo.svc.cluster.local:${port}`;

/** Answers Destination lookups from a table; anything else is an unknown name or IP. */
class TableSource implements DestinationSource {
  readonly table = new Map<string, DestinationEvent>();
  get(path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>): () => void {
    let live = true;
    queueMicrotask(() => {
      if (live) handlers.onMessage({ ok: true, value: this.table.get(path) ?? { kind: 'noEndpoints', exists: false } });
    });
    return () => {
      live = false;
    };
  }
}

const dirs = new TempDirs();
let side: ServerSide;
let source: TableSource;
let cache: DestinationCache;
let connector: OutboundConnector;
let proxy: OutboundProxy;
let port: number;
let deadPort: number;
let plainApp: Server;
let plainPort: number;
const plainSeen: IncomingHttpHeaders[] = [];
const agents: Agent[] = [];
const sockets = new Set<Socket>();

function track<S extends Socket>(s: S): S {
  sockets.add(s);
  s.on('error', () => {});
  s.once('close', () => sockets.delete(s));
  return s;
}

interface Reply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly trailers: NodeJS.Dict<string>;
}

/** A request to the proxy (`opts.port`, default the shared one) with an absolute-form (or any) target. */
function viaProxy(
  target: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string; agent?: Agent; port?: number } = {},
): Promise<Reply> {
  const p = new Promise<Reply>((resolve, reject) => {
    const req = httpRequest({
      host: HOST,
      port: opts.port ?? port,
      path: target,
      method: opts.method ?? 'GET',
      headers: opts.headers ?? {},
      agent: opts.agent ?? false,
    });
    req.on('socket', (s: Socket) => track(s));
    req.on('error', reject);
    req.on('response', (res: IncomingMessage) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, trailers: res.trailers }));
    });
    req.end(opts.body);
  });
  return within(p, WAIT_MS, `${opts.method ?? 'GET'} ${target}`);
}

/** Opens a CONNECT tunnel; resolves with the socket after the proxy's answer head, and that head. */
async function tunnel(authority: string, proxyPort = port): Promise<{ socket: Socket; head: string; rest: Buffer }> {
  const s = track(netConnect({ host: HOST, port: proxyPort }));
  s.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  const chunks: Buffer[] = [];
  const result = await within(
    new Promise<{ head: string; rest: Buffer }>((resolve, reject) => {
      const onData = (c: Buffer) => {
        chunks.push(c);
        const all = Buffer.concat(chunks);
        const end = all.indexOf('\r\n\r\n');
        if (end === -1) return;
        s.off('data', onData);
        s.pause();
        const head = all.subarray(0, end).toString('latin1');
        const length = /content-length: (\d+)/i.exec(head);
        resolve({ head, rest: all.subarray(end + 4, end + 4 + (length === null ? 0 : Number(length[1]))) });
      };
      s.on('data', onData);
      s.once('close', () => reject(new Error('closed before the answer')));
    }),
    WAIT_MS,
    `CONNECT ${authority}`,
  );
  return { socket: s, ...result };
}

async function readUntil(s: Socket, done: (text: string) => boolean): Promise<string> {
  const chunks: Buffer[] = [];
  return within(
    new Promise<string>((resolve, reject) => {
      s.on('data', (c: Buffer) => {
        chunks.push(c);
        const text = Buffer.concat(chunks).toString('latin1');
        if (done(text)) resolve(text);
      });
      s.once('close', () => reject(new Error(`closed after ${JSON.stringify(Buffer.concat(chunks).toString('latin1'))}`)));
      s.resume();
    }),
    WAIT_MS,
    'the tunnel reply',
  );
}

function h2Request(
  session: ClientHttp2Session,
  headers: Http2OutgoingHeaders,
  body?: string,
): Promise<{ headers: Http2Headers; body: string; trailers: Http2Headers | undefined }> {
  return within(
    new Promise((resolve, reject) => {
      const stream = session.request(headers, { endStream: body === undefined });
      let response: Http2Headers | undefined;
      let trailers: Http2Headers | undefined;
      let text = '';
      stream.setEncoding('latin1');
      stream.on('response', (h: Http2Headers) => {
        response = h;
      });
      stream.on('trailers', (t: Http2Headers) => {
        trailers = t;
      });
      stream.on('data', (c: string) => {
        text += c;
      });
      stream.on('error', () => {});
      stream.on('close', () =>
        response === undefined ? reject(new Error(`no response (rst ${stream.rstCode})`)) : resolve({ headers: response, body: text, trailers }),
      );
      if (body !== undefined) stream.end(body);
    }),
    WAIT_MS,
    `h2 ${String(headers[':path'])}`,
  );
}

function endpointsOf(...endpoints: DestinationEndpoint[]): DestinationEvent {
  return { kind: 'add', endpoints, setLabels: {} };
}

before(async () => {
  side = await startServerSide(dirs);
  const gone = createNetServer().listen(0, HOST);
  await once(gone, 'listening');
  deadPort = (gone.address() as AddressInfo).port;
  await new Promise((r) => gone.close(r));
  plainApp = createHttpServer((req, res) => {
    plainSeen.push(req.headers);
    res.end(`plain ${req.url}`);
  });
  plainApp.listen(0, HOST);
  await once(plainApp, 'listening');
  plainPort = (plainApp.address() as AddressInfo).port;

  source = new TableSource();
  source.table.set(SVC('server'), endpointsOf(side.endpoint(POD_HTTP1)));
  source.table.set(SVC('grpc'), endpointsOf(side.endpoint(POD_HTTP2)));
  source.table.set(SVC('echo', 9000), endpointsOf(side.endpoint(POD_TCP, { protocolHint: 'opaque', opaqueTransportPort: 4143 })));
  source.table.set(SVC('empty'), { kind: 'noEndpoints', exists: true });
  // The controller names another identity than the one the peer's certificate carries (the SNI
  // is the peer's own name, or its proxy would refuse the handshake before we could check).
  source.table.set(SVC('impostor'), endpointsOf(side.endpoint(POD_HTTP1, { identity: side.otherCert.identity, serverName: side.serverCert.identity })));
  // Two endpoints, the heavier one (preferred on equal load) unreachable.
  const dead = { ip: '127.0.0.9', weight: 20_000, labels: { dead: 'yes' } };
  source.table.set(SVC('flaky'), endpointsOf(side.endpoint(POD_HTTP1, dead), side.endpoint(POD_HTTP1)));
  source.table.set(SVC('flaky-echo', 9000), endpointsOf(side.endpoint(POD_TCP, dead), side.endpoint(POD_TCP)));

  cache = new DestinationCache({ source, namespace: 'demo', lookupTimeoutMs: 2000 });
  connector = new OutboundConnector({
    tls: new MeshTlsContext(side.clientCert, side.mesh.anchorsPem),
    meshPortOf: (e) => (e.labels.dead === 'yes' ? deadPort : side.meshPort),
    localAddress: FROM,
  });
  proxy = new OutboundProxy({ listen: { host: HOST, port: 0 }, resolver: cache, connector, random: () => 0, detectTimeoutMs: 1000 });
  port = await proxy.start();
});

after(async () => {
  for (const a of agents) a.destroy();
  for (const s of sockets) s.destroy();
  await proxy?.close();
  connector?.close();
  cache?.close();
  plainApp?.closeAllConnections();
  await new Promise((r) => plainApp?.close(r));
  await side?.close();
  dirs.cleanup();
});

describe('OutboundProxy: absolute-form HTTP/1', () => {
  it('forwards to a meshed service with our identity, stripping hop-by-hop, proxy-* and l5d-* headers', async () => {
    const before = side.seen.length;
    const r = await viaProxy(`http://${SVC('server')}/hello?x=1`, {
      headers: {
        'l5d-client-id': 'spoofed',
        'L5d-Dst-Override': 'evil',
        'proxy-authorization': 'Basic c2VjcmV0',
        'proxy-connection': 'keep-alive',
        connection: 'x-hop',
        'x-hop': 'dropped',
        'x-kept': 'yes',
        host: 'wrong.example',
      },
    });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.body, 'hello /hello?x=1 ');
    assert.equal(r.headers['x-app'], 'h1');
    const seen = side.seen.slice(before);
    assert.equal(seen.length, 1);
    const h = seen[0]?.headers ?? {};
    assert.equal(h['l5d-client-id'], side.clientCert.identity);
    assert.equal(h['l5d-dst-override'], undefined);
    assert.equal(h['proxy-authorization'], undefined);
    assert.equal(h['proxy-connection'], undefined);
    assert.equal(h['x-hop'], undefined);
    assert.equal(h['x-kept'], 'yes');
    assert.equal(h.host, SVC('server'));
  });

  it('expands short names, streams request bodies and relays trailers', async () => {
    const post = await viaProxy('http://server.demo/upload', { method: 'POST', body: 'x'.repeat(100_000), headers: { 'content-type': 'text/plain' } });
    assert.equal(post.status, 200);
    assert.equal(post.body, `hello /upload ${'x'.repeat(100_000)}`);
    const short = await viaProxy('http://server/short');
    assert.equal(short.body, 'hello /short ');
    const t = await viaProxy(`http://${SVC('server')}/trailers`);
    assert.equal(t.body, 'with trailers');
    assert.equal(t.trailers['x-checksum'], 'abc123');
  });

  it('answers Expect: 100-continue before the body, and then relays it', async () => {
    const s = track(netConnect({ host: HOST, port }));
    s.write(`POST http://${SVC('server')}/upload HTTP/1.1\r\nHost: ${SVC('server')}\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n`);
    const interim = await readUntil(s, (t) => t.includes('\r\n\r\n'));
    assert.match(interim, /^HTTP\/1\.1 100 Continue\r\n\r\n$/);
    s.write('hello');
    const text = await readUntil(s, (t) => t.endsWith('hello /upload hello'));
    assert.match(text, /^HTTP\/1\.1 200 /);
    s.destroy();
  });

  it('reuses its mesh connection: 50 sequential requests (every fifth a HEAD), at most 2 handshakes', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    agents.push(agent);
    const fresh = new OutboundConnector({
      tls: new MeshTlsContext(side.clientCert, side.mesh.anchorsPem),
      meshPortOf: () => side.meshPort,
      localAddress: FROM,
    });
    const own = new OutboundProxy({ listen: { host: HOST, port: 0 }, resolver: cache, connector: fresh });
    const ownPort = await own.start();
    try {
      for (let i = 0; i < 50; i++) {
        const r = await within(
          new Promise<number>((resolve, reject) => {
            const method = i % 5 === 4 ? 'HEAD' : 'GET';
            const req = httpRequest({ host: HOST, port: ownPort, method, path: `http://${SVC('server')}/n/${i}`, agent }, (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode ?? 0));
            });
            req.on('error', reject);
            req.end();
          }),
          WAIT_MS,
          `request ${i}`,
        );
        assert.equal(r, 200);
      }
      assert.ok(own.stats().handshakes <= 2, `handshakes: ${own.stats().handshakes}`);
      assert.equal(own.stats().requests, 50);
    } finally {
      agent.destroy();
      await own.close();
      fresh.close();
    }
  });

  it('answers 502 / 503 / 400 itself, with the reason in l5d-proxy-error', async () => {
    const cases: [string, number, RegExp][] = [
      [`http://${SVC('nope')}/`, 502, /unknown service nope\.demo\.svc\.cluster\.local:80/],
      ['http://example.com/', 502, /unknown service example\.com\.svc\.cluster\.local:80/],
      ['http://a.b.c.d/', 502, /not a cluster service name/],
      [`http://${SVC('empty')}/`, 503, /has no endpoints/],
      ['/origin-form', 400, /not a proxy request/],
      ['https://server.demo/', 400, /use CONNECT/],
    ];
    for (const [target, status, re] of cases) {
      const r = await viaProxy(target);
      assert.equal(r.status, status, target);
      assert.match(String(r.headers['l5d-proxy-error']), re, target);
      assert.match(r.body, re);
    }
    const errors = proxy.stats().errors;
    assert.ok((errors['unknown service'] ?? 0) >= 3);
    assert.ok((errors['no endpoints'] ?? 0) >= 1);
    assert.ok((errors['bad request'] ?? 0) >= 2);
  });

  it('never sends a request to an endpoint that fails the identity check: 502', async () => {
    const before = side.seen.length;
    const r = await viaProxy(`http://${SVC('impostor')}/secret`, { method: 'POST', body: 'do not leak' });
    assert.equal(r.status, 502);
    assert.match(String(r.headers['l5d-proxy-error']), /identity mismatch/);
    assert.equal(side.seen.length, before, 'the application saw nothing');
    assert.ok((proxy.stats().errors['identity mismatch'] ?? 0) >= 1);
  });

  it('retries a connect failure once on another endpoint', async () => {
    const retries = proxy.stats().retries;
    for (let i = 0; i < 3; i++) {
      const r = await viaProxy(`http://${SVC('flaky')}/r/${i}`, { method: 'POST', body: `body ${i}` });
      assert.equal(r.status, 200);
      assert.equal(r.body, `hello /r/${i} body ${i}`);
    }
    assert.equal(proxy.stats().retries - retries, 3);
  });

  it('connects directly, without mesh TLS, to an IP address the controller does not know', async () => {
    const handshakes = connector.stats().handshakes;
    const r = await viaProxy(`http://${HOST}:${plainPort}/direct`, { headers: { 'l5d-client-id': 'spoofed' } });
    assert.equal(r.status, 200);
    assert.equal(r.body, 'plain /direct');
    assert.equal(plainSeen.at(-1)?.['l5d-client-id'], undefined);
    assert.equal(connector.stats().handshakes, handshakes);
  });
});

describe('OutboundProxy: CONNECT', () => {
  it('opens an opaque tunnel to a meshed endpoint', async () => {
    const before = side.echoConnections();
    const t = await tunnel(SVC('echo', 9000));
    assert.match(t.head, /^HTTP\/1\.1 200 Connection Established$/);
    t.socket.write('opaque bytes');
    assert.equal(await readUntil(t.socket, (x) => x === 'opaque bytes'), 'opaque bytes');
    assert.equal(side.echoConnections(), before + 1);
    // Half-close: our FIN reaches the echo application, whose FIN comes back.
    const closed = once(t.socket, 'close');
    t.socket.end();
    await within(closed, WAIT_MS, 'the tunnel to close');
  });

  it('detects HTTP/1 in a tunnel: the far side then applies per-request policy', async () => {
    const before = side.seen.length;
    const t = await tunnel(SVC('server'));
    assert.match(t.head, /^HTTP\/1\.1 200/);
    t.socket.write('GET /in-tunnel HTTP/1.1\r\nHost: server.demo\r\nConnection: close\r\n\r\n');
    const text = await readUntil(t.socket, (x) => x.includes('hello /in-tunnel'));
    assert.match(text, /^HTTP\/1\.1 200 OK/);
    assert.equal(side.seen.at(-1)?.headers['l5d-client-id'], side.clientCert.identity);
    assert.equal(side.seen.length, before + 1);
  });

  it('carries gRPC (HTTP/2) in a tunnel', async () => {
    const t = await tunnel(SVC('grpc'));
    assert.match(t.head, /^HTTP\/1\.1 200/);
    const session = http2Connect(`http://${SVC('grpc')}`, { createConnection: () => t.socket });
    session.on('error', () => {});
    try {
      const r = await h2Request(
        session,
        { ':method': 'POST', ':path': '/demo.Svc/Call', 'content-type': 'application/grpc', te: 'trailers' },
        '\x00\x00\x00\x00\x04ping',
      );
      assert.equal(r.headers[':status'], 200);
      assert.equal(r.trailers?.['grpc-status'], '0');
      assert.equal(side.seen.at(-1)?.path, '/demo.Svc/Call');
      assert.equal(side.seen.at(-1)?.headers['l5d-client-id'], side.clientCert.identity);
    } finally {
      session.destroy();
    }
  });

  it('refuses unknown services and retries unreachable endpoints', async () => {
    const unknown = await tunnel(SVC('nope', 443));
    assert.match(unknown.head, /^HTTP\/1\.1 502 Bad Gateway/);
    assert.match(unknown.head, /l5d-proxy-error: unknown service/);
    const bad = await tunnel('server.demo');
    assert.match(bad.head, /^HTTP\/1\.1 400/);
    const mismatch = await tunnel(SVC('impostor'));
    assert.match(mismatch.head, /^HTTP\/1\.1 502/);
    assert.match(mismatch.head, /identity mismatch/);
    const flaky = await tunnel(SVC('flaky-echo', 9000));
    assert.match(flaky.head, /^HTTP\/1\.1 200/);
    flaky.socket.write('after retry');
    assert.equal(await readUntil(flaky.socket, (x) => x === 'after retry'), 'after retry');
    flaky.socket.destroy();
  });
});

describe('OutboundProxy: HTTP/2 prior knowledge', () => {
  it('routes each stream by :authority over a shared session', async () => {
    const session = http2Connect(`http://${HOST}:${port}`);
    session.on('error', () => {});
    try {
      const replies = await Promise.all(
        Array.from({ length: 5 }, (_, i) =>
          h2Request(session, { ':method': 'GET', ':path': `/p/${i}`, ':authority': SVC('grpc'), 'l5d-client-id': 'spoofed' }),
        ),
      );
      assert.deepEqual(
        replies.map((r) => [r.headers[':status'], r.body]),
        Array.from({ length: 5 }, (_, i) => [200, `hello h2 /p/${i}`]),
      );
      assert.equal(side.seen.at(-1)?.headers['l5d-client-id'], side.clientCert.identity);
      const grpc = await h2Request(
        session,
        { ':method': 'POST', ':path': '/demo.Svc/Call', ':authority': SVC('grpc'), 'content-type': 'application/grpc', te: 'trailers' },
        '\x00\x00\x00\x00\x04ping',
      );
      assert.equal(grpc.trailers?.['grpc-status'], '0');
      const unknown = await h2Request(session, {
        ':method': 'POST',
        ':path': '/demo.Svc/Call',
        ':authority': SVC('nope'),
        'content-type': 'application/grpc',
      });
      assert.equal(unknown.headers[':status'], 200);
      assert.equal(unknown.headers['grpc-status'], '14');
      assert.match(String(unknown.headers['l5d-proxy-error']), /unknown service/);
    } finally {
      session.destroy();
    }
  });
});

describe('OutboundProxy: lifecycle', () => {
  it('closes clients and tunnels on close(), and refuses a second start', async () => {
    const own = new OutboundProxy({ listen: { host: HOST, port: 0 }, resolver: cache, connector });
    const ownPort = await own.start();
    await assert.rejects(own.start(), /cannot start/);
    const s = track(netConnect({ host: HOST, port: ownPort }));
    s.write(`CONNECT ${SVC('echo', 9000)} HTTP/1.1\r\n\r\n`);
    await readUntil(s, (x) => x.includes('\r\n\r\n'));
    await waitFor(() => own.stats().open === 1, 'the tunnel to be counted');
    const closed = once(s, 'close');
    await own.close();
    await within(closed, WAIT_MS, 'the tunnel to be closed');
    assert.equal(own.stats().open, 0);
  });

  it('keeps an idle tunnel past the header deadline, and a silent one goes opaque', async () => {
    const own = new OutboundProxy({ listen: { host: HOST, port: 0 }, resolver: cache, connector, headersTimeoutMs: 100, tunnelDetectTimeoutMs: 100 });
    const ownPort = await own.start();
    try {
      const s = track(netConnect({ host: HOST, port: ownPort }));
      s.write(`CONNECT ${SVC('server')} HTTP/1.1\r\n\r\n`);
      await readUntil(s, (x) => x.includes('\r\n\r\n'));
      await new Promise((r) => setTimeout(r, 1500));
      // Silent past the tunnel deadline: opaque to pod port 8080, authorized per connection, so
      // HTTP still reaches the application (without per-request policy).
      s.write('GET /late HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      const text = await readUntil(s, (x) => x.includes('hello /late'));
      assert.match(text, /HTTP\/1\.1 200 OK/);
    } finally {
      await own.close();
    }
  });

  it('closes a connection that is not HTTP', async () => {
    const s = track(netConnect({ host: HOST, port }));
    const closed = once(s, 'close');
    s.write('\x16\x03\x01 definitely not http');
    await within(closed, WAIT_MS, 'the proxy to close it');
    assert.ok((proxy.stats().errors['not http'] ?? 0) >= 1);
  });
});

describe('OutboundProxy: request metrics', () => {
  let registry: MetricsRegistry;
  let own: OutboundProxy;
  let ownConnector: OutboundConnector;
  let ownPort: number;
  /** An unmeshed gRPC application the controller does not know (reached by IP), failing every call with 13 in the trailers. */
  let grpcApp: Http2Server;
  let grpcPort: number;
  /** The same over HTTP/1 (`grpc-status` 13 in the trailers), also unmeshed. */
  let trailersApp: Server;
  let trailersPort: number;
  /** Nothing listens there (taken after the applications above, so none of them reuses it). */
  let refusedPort: number;

  const meshed = (name: string, podPort: number) =>
    `direction="outbound",authority="${SVC(name)}",target_addr="${HOST}:${podPort}",target_ip="${HOST}",target_port="${podPort}",` +
    `tls="true",server_id="${side.serverCert.identity}",dst_service="${name}",dst_namespace="demo"`;
  const direct = (p: number) =>
    `direction="outbound",target_addr="${HOST}:${p}",target_ip="${HOST}",target_port="${p}",tls="no_identity",no_tls_reason="not_provided_by_service_discovery"`;
  const service = (name: string) => `direction="outbound",authority="${SVC(name)}",dst_service="${name}",dst_namespace="demo"`;
  /** Waits for a sample line (responses are counted when the exchange closes, just after the client saw them). */
  const expectLine = (line: string) =>
    waitFor(
      () => registry.render().split('\n').includes(line),
      `${line}\nin\n${registry
        .render()
        .split('\n')
        .filter((l) => l.includes('outbound'))
        .join('\n')}`,
    );
  const lines = (name: string) =>
    registry
      .render()
      .split('\n')
      .filter((l) => l.startsWith(`${name}{`));

  before(async () => {
    registry = new MetricsRegistry();
    ownConnector = new OutboundConnector({
      tls: new MeshTlsContext(side.clientCert, side.mesh.anchorsPem),
      meshPortOf: (e) => (e.labels.dead === 'yes' ? deadPort : side.meshPort),
      localAddress: FROM,
    });
    own = new OutboundProxy({
      listen: { host: HOST, port: 0 },
      resolver: cache,
      connector: ownConnector,
      random: () => 0,
      metrics: new OutboundMetrics({ registry }),
    });
    ownPort = await own.start();
    grpcApp = createHttp2Server();
    grpcApp.on('stream', (stream) => {
      stream.on('error', () => {});
      stream.resume();
      stream.on('end', () => {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '13', 'grpc-message': 'boom' }));
        stream.end();
      });
    });
    grpcApp.listen(0, HOST);
    await once(grpcApp, 'listening');
    grpcPort = (grpcApp.address() as AddressInfo).port;
    trailersApp = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/grpc-web', trailer: 'grpc-status' });
        res.write('x');
        res.addTrailers({ 'grpc-status': '13' });
        res.end();
      });
    });
    trailersApp.listen(0, HOST);
    await once(trailersApp, 'listening');
    trailersPort = (trailersApp.address() as AddressInfo).port;
    const gone = createNetServer().listen(0, HOST);
    await once(gone, 'listening');
    refusedPort = (gone.address() as AddressInfo).port;
    await new Promise((r) => gone.close(r));
  });

  after(async () => {
    await own?.close();
    ownConnector?.close();
    await new Promise((r) => grpcApp?.close(r));
    trailersApp?.closeAllConnections();
    await new Promise((r) => trailersApp?.close(r));
  });

  it('counts HTTP/1 requests on the endpoint, with its authority, target, TLS and dst labels; not CONNECT tunnels', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await viaProxy(`http://${SVC('server')}/m/${i}`, { port: ownPort })).status, 200);
    const labels = meshed('server', POD_HTTP1);
    await expectLine(`response_total{${labels},status_code="200",classification="success",grpc_status="",error=""} 3`);
    assert.deepEqual(lines('request_total'), [`request_total{${labels}} 3`]);
    assert.ok(registry.render().includes(`response_latency_ms_count{${labels},status_code="200"} 3`));
    assert.ok(registry.render().includes(`response_latency_ms_bucket{${labels},status_code="200",le="+Inf"} 3`));

    const t = await tunnel(SVC('echo', 9000), ownPort);
    assert.match(t.head, /^HTTP\/1\.1 200/);
    t.socket.write('x');
    await readUntil(t.socket, (x) => x === 'x');
    t.socket.destroy();
    assert.deepEqual(lines('request_total'), [`request_total{${labels}} 3`], 'a tunnel is no request');

    // A request is counted once it is sent to the endpoint, before its response.
    const slow = httpRequest({ host: HOST, port: ownPort, path: `http://${SVC('server')}/slow`, method: 'POST', agent: false });
    slow.on('socket', (sk: Socket) => track(sk));
    const replied = new Promise<number>((resolve, reject) => {
      slow.on('error', reject);
      slow.on('response', (res: IncomingMessage) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
    });
    slow.write('part of the body');
    await waitFor(() => lines('request_total').includes(`request_total{${labels}} 4`), 'the request in flight to be counted');
    assert.ok(!registry.render().includes(`response_total{${labels},status_code="200",classification="success",grpc_status="",error=""} 4`));
    slow.end();
    assert.equal(await within(replied, WAIT_MS, 'the slow response'), 200);
    await expectLine(`response_total{${labels},status_code="200",classification="success",grpc_status="",error=""} 4`);
  });

  it('counts gRPC over HTTP/2 with its gRPC status: OK through the mesh, 13 in the trailers of an unmeshed address', async () => {
    const session = http2Connect(`http://${HOST}:${ownPort}`);
    session.on('error', () => {});
    try {
      const call = (authority: string) =>
        h2Request(
          session,
          { ':method': 'POST', ':path': '/demo.Svc/Call', ':authority': authority, 'content-type': 'application/grpc', te: 'trailers' },
          '\x00\x00\x00\x00\x04ping',
        );
      for (let i = 0; i < 2; i++) assert.equal((await call(SVC('grpc'))).trailers?.['grpc-status'], '0');
      // A stream is counted once it is sent to the endpoint, before its response.
      const streaming = session.request({ ':method': 'POST', ':path': '/demo.Svc/Stream', ':authority': SVC('grpc'), 'content-type': 'application/grpc' });
      streaming.on('error', () => {});
      streaming.write('\x00\x00\x00\x00\x01a');
      await waitFor(() => lines('request_total').includes(`request_total{${meshed('grpc', POD_HTTP2)}} 3`), 'the stream in flight to be counted');
      const closed = once(streaming, 'close');
      streaming.resume();
      streaming.end();
      await within(closed, WAIT_MS, 'the stream to end');
      assert.equal((await call(`${HOST}:${grpcPort}`)).trailers?.['grpc-status'], '13');
      const unknown = await call(SVC('nope'));
      assert.equal(unknown.headers['grpc-status'], '14');
    } finally {
      session.destroy();
    }
    await expectLine(`response_total{${meshed('grpc', POD_HTTP2)},status_code="200",classification="success",grpc_status="0",error=""} 3`);
    await expectLine(`response_total{${direct(grpcPort)},status_code="200",classification="failure",grpc_status="13",error=""} 1`);
    // The proxy's own trailers-only answer: a failure with its reason, no status relayed.
    await expectLine(`response_total{${service('nope')},classification="failure",grpc_status="",error="unknown service"} 1`);
    for (const l of [`request_total{${meshed('grpc', POD_HTTP2)}} 3`, `request_total{${direct(grpcPort)}} 1`, `request_total{${service('nope')}} 1`]) {
      assert.ok(lines('request_total').includes(l), l);
    }
    assert.ok(registry.render().includes(`response_latency_ms_count{${meshed('grpc', POD_HTTP2)},status_code="200"} 3`));

    // A gRPC request over HTTP/1 is classified by the status in its trailers too; any other request by its HTTP status.
    const h1 = await viaProxy(`http://${HOST}:${trailersPort}/`, { port: ownPort, method: 'POST', body: 'x', headers: { 'content-type': 'application/grpc' } });
    assert.equal(h1.trailers['grpc-status'], '13');
    await expectLine(`response_total{${direct(trailersPort)},status_code="200",classification="failure",grpc_status="13",error=""} 1`);
    const plain = await viaProxy(`http://${HOST}:${trailersPort}/`, { port: ownPort, method: 'POST', body: 'x' });
    assert.equal(plain.trailers['grpc-status'], '13');
    await expectLine(`response_total{${direct(trailersPort)},status_code="200",classification="success",grpc_status="",error=""} 1`);
  });

  it("counts the proxy's own failures: no endpoints, connection refused, identity mismatch; a retried connect failure only once", async () => {
    assert.equal((await viaProxy(`http://${SVC('empty')}/`, { port: ownPort })).status, 503);
    assert.equal((await viaProxy(`http://${HOST}:${refusedPort}/`, { port: ownPort })).status, 502);
    assert.equal((await viaProxy(`http://${SVC('impostor')}/`, { port: ownPort })).status, 502);
    assert.equal((await viaProxy(`http://${SVC('flaky')}/`, { port: ownPort })).status, 200);
    await expectLine(`response_total{${service('empty')},classification="failure",grpc_status="",error="no endpoints"} 1`);
    await expectLine(`response_total{${direct(refusedPort)},classification="failure",grpc_status="",error="connect failed"} 1`);
    const impostor = meshed('impostor', POD_HTTP1).replace(side.serverCert.identity, side.otherCert.identity);
    await expectLine(`response_total{${impostor},classification="failure",grpc_status="",error="identity mismatch"} 1`);
    await expectLine(`response_total{${meshed('flaky', POD_HTTP1)},status_code="200",classification="success",grpc_status="",error=""} 1`);
    for (const l of [`request_total{${service('empty')}} 1`, `request_total{${direct(refusedPort)}} 1`, `request_total{${impostor}} 1`]) {
      assert.ok(lines('request_total').includes(l), l);
    }
    assert.ok(!registry.render().includes('dst_dead='), 'the endpoint that failed to connect and was retried counts nothing');
  });
});
