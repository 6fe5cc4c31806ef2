/**
 * The outbound proxy's HTTP/2 relay (prior knowledge) against a node:http2 application reached
 * by its IP address (unknown to the controller, so connected to directly): bodies past the flow
 * control windows both ways, trailers, resets in either direction, the endpoint's concurrency
 * limit, and the shared connection's replacement after a GOAWAY.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import {
  type ClientHttp2Session,
  type ClientHttp2Stream,
  createServer as createHttp2Server,
  type IncomingHttpHeaders as Http2Headers,
  type OutgoingHttpHeaders as Http2OutgoingHeaders,
  type Http2Server,
  type Http2Session,
  constants as h2constants,
  connect as http2Connect,
  type ServerHttp2Stream,
} from 'node:http2';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { DestinationEvent, StreamHandlers, WireResult } from '../../api/index.js';
import { H2Connection } from '../../http/h2/connection.js';
import { waitFor, within } from '../testing/identity.js';
import { HOST } from '../testing/outbound.js';
import { OutboundConnector } from './connector.js';
import { OutboundProxy } from './proxy.js';
import { DestinationCache, type DestinationSource } from './resolver.js';

const WAIT_MS = 5000;
const { NGHTTP2_CANCEL, NGHTTP2_ENHANCE_YOUR_CALM } = h2constants;

/** Knows no name and no address: every IP is connected to directly. */
class EmptySource implements DestinationSource {
  get(_path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>): () => void {
    queueMicrotask(() => handlers.onMessage({ ok: true, value: { kind: 'noEndpoints', exists: false } }));
    return () => {};
  }
}

interface Reply {
  status: number;
  headers: Http2Headers;
  body: Buffer;
  trailers: Http2Headers | undefined;
}

function send(session: ClientHttp2Session, headers: Http2OutgoingHeaders, body?: Buffer, trailers?: Http2OutgoingHeaders): Promise<Reply> {
  const stream = session.request(headers, { endStream: body === undefined && trailers === undefined, waitForTrailers: trailers !== undefined });
  if (trailers !== undefined) stream.on('wantTrailers', () => stream.sendTrailers(trailers));
  return collect(stream, body);
}

function collect(stream: ClientHttp2Stream, body?: Buffer): Promise<Reply> {
  return within(
    new Promise((resolve, reject) => {
      let response: Http2Headers | undefined;
      let trailers: Http2Headers | undefined;
      const chunks: Buffer[] = [];
      stream.on('response', (h: Http2Headers) => {
        response = h;
      });
      stream.on('trailers', (t: Http2Headers) => {
        trailers = t;
      });
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', () => {});
      stream.on('close', () =>
        response === undefined || stream.rstCode !== h2constants.NGHTTP2_NO_ERROR
          ? reject(new Error(`no whole response (rst ${stream.rstCode})`))
          : resolve({ status: Number(response[':status']), headers: response, body: Buffer.concat(chunks), trailers }),
      );
      if (body !== undefined) stream.end(body);
    }),
    WAIT_MS,
    'an HTTP/2 response',
  );
}

let app: Http2Server;
/** Answers every request with a head and part of a body, then resets the stream (ENHANCE_YOUR_CALM). */
let failing: NetServer;
let failingPort: number;
let appPort: number;
let deadPort: number;
const appSessions = new Set<Http2Session>();
/** Streams the application is serving now, and the most at once. */
let appActive = 0;
let appMaxActive = 0;
let lastAppStream: { headers: Http2Headers; trailers: Http2Headers | undefined; closedWith: number | undefined } | undefined;
let connector: OutboundConnector;
let cache: DestinationCache;
let proxy: OutboundProxy;
let port: number;
let session: ClientHttp2Session;

function appRoute(stream: ServerHttp2Stream, headers: Http2Headers): void {
  const path = String(headers[':path']);
  const seen: { headers: Http2Headers; trailers: Http2Headers | undefined; closedWith: number | undefined } = {
    headers,
    trailers: undefined,
    closedWith: undefined,
  };
  lastAppStream = seen;
  appActive++;
  appMaxActive = Math.max(appMaxActive, appActive);
  stream.on('error', () => {});
  stream.on('close', () => {
    appActive--;
    seen.closedWith = stream.rstCode;
  });
  stream.on('trailers', (t: Http2Headers) => {
    seen.trailers = t;
  });
  if (path === '/hang') return;
  if (path === '/reset-before') {
    stream.close(NGHTTP2_ENHANCE_YOUR_CALM);
    return;
  }
  const chunks: Buffer[] = [];
  stream.on('data', (c: Buffer) => chunks.push(c));
  stream.on('end', () => {
    const body = Buffer.concat(chunks);
    const reply = (): void => {
      if (stream.closed) return;
      stream.respond({ ':status': 200, 'x-length': String(body.length) }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'x-sum': String(body.reduce((a, b) => (a + b) % 65_521, 0)) }));
      // The body back, twice: a response larger than the request.
      stream.write(body);
      stream.end(body);
      if (path === '/goaway') stream.session?.close();
    };
    // Held a moment so that concurrent requests overlap at the application.
    if (path === '/slow') setImmediate(reply);
    else reply();
  });
}

before(async () => {
  app = createHttp2Server({ settings: { maxConcurrentStreams: 2 } });
  app.on('session', (s: Http2Session) => {
    appSessions.add(s);
    s.on('error', () => {});
  });
  app.on('stream', appRoute);
  app.listen(0, HOST);
  await once(app, 'listening');
  appPort = (app.address() as AddressInfo).port;
  failing = createNetServer((socket) => {
    socket.on('error', () => {});
    new H2Connection(socket, {
      role: 'server',
      onStream: (stream) => {
        stream.events = { headers: () => {}, data: (st, c) => st.consumed(c.length), closed: () => {} };
        stream.respond([':status', '200'], false);
        stream.write(Buffer.from('part of it'));
        stream.reset(NGHTTP2_ENHANCE_YOUR_CALM);
      },
    });
  });
  failing.listen(0, HOST);
  await once(failing, 'listening');
  failingPort = (failing.address() as AddressInfo).port;
  const gone = createNetServer().listen(0, HOST);
  await once(gone, 'listening');
  deadPort = (gone.address() as AddressInfo).port;
  await new Promise((r) => gone.close(r));

  cache = new DestinationCache({ source: new EmptySource(), namespace: 'demo', lookupTimeoutMs: 2000 });
  connector = new OutboundConnector({ tls: { certificate: undefined, anchorsPem: '' } });
  proxy = new OutboundProxy({ listen: { host: HOST, port: 0 }, resolver: cache, connector, random: () => 0, detectTimeoutMs: 1000 });
  port = await proxy.start();
  session = http2Connect(`http://${HOST}:${port}`);
  session.on('error', () => {});
});

after(async () => {
  session?.destroy();
  await proxy?.close();
  connector?.close();
  cache?.close();
  for (const s of appSessions) s.destroy();
  await new Promise((r) => app?.close(r));
  failing?.close();
});

const request = (path: string, extra: Http2OutgoingHeaders = {}): Http2OutgoingHeaders => ({
  ':method': 'POST',
  ':path': path,
  ':authority': `${HOST}:${appPort}`,
  ...extra,
});

describe('OutboundProxy: HTTP/2 relay', () => {
  it('relays bodies larger than the flow control windows both ways, and trailers without l5d-* and proxy-*', async () => {
    const body = Buffer.alloc(3 * 1024 * 1024 + 7);
    for (let i = 0; i < body.length; i++) body[i] = (i * 31) & 0xff;
    const r = await send(session, request('/echo', { 'l5d-dst-override': 'x', 'proxy-authorization': 'y', 'x-kept': 'z' }), body, {
      'x-request-trailer': 'yes',
      'l5d-spoofed': 'no',
      'proxy-thing': 'no',
    });
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-length'], String(body.length));
    assert.equal(r.body.length, 2 * body.length);
    assert.ok(r.body.subarray(0, body.length).equals(body) && r.body.subarray(body.length).equals(body), 'the body came back whole');
    assert.equal(r.trailers?.['x-sum'], String(body.reduce((a, b) => (a + b) % 65_521, 0)));
    const seen = lastAppStream;
    assert.equal(seen?.headers['x-kept'], 'z');
    assert.equal(seen?.headers['l5d-dst-override'], undefined);
    assert.equal(seen?.headers['proxy-authorization'], undefined);
    assert.equal(seen?.trailers?.['x-request-trailer'], 'yes');
    assert.equal(seen?.trailers?.['l5d-spoofed'], undefined);
    assert.equal(seen?.trailers?.['proxy-thing'], undefined);
  });

  it("queues requests beyond the endpoint's concurrency limit on the shared connection", async () => {
    appMaxActive = 0;
    const replies = await Promise.all(Array.from({ length: 12 }, (_, i) => send(session, request('/slow'), Buffer.from(`#${i}`))));
    assert.deepEqual(
      replies.map((r) => r.body.toString()),
      Array.from({ length: 12 }, (_, i) => `#${i}#${i}`),
    );
    assert.ok(appMaxActive <= 2, `at most 2 streams at once at the application, saw ${appMaxActive}`);
    assert.equal(connector.stats().http2Sessions, 1);
  });

  it('replaces the shared connection after a GOAWAY, and streams open on it finish', async () => {
    const before = appSessions.size;
    const first = await send(session, request('/goaway'), Buffer.from('a'));
    assert.equal(first.body.toString(), 'aa');
    const next = await send(session, request('/echo'), Buffer.from('b'));
    assert.equal(next.body.toString(), 'bb');
    assert.equal(appSessions.size, before + 1, 'a new connection to the application');
  });

  it("cancels the endpoint's stream when the client resets its own", async () => {
    const stream = session.request(request('/hang'));
    stream.on('error', () => {});
    stream.write('x');
    await waitFor(() => lastAppStream?.headers[':path'] === '/hang' && appActive > 0, 'the request to reach the application');
    const seen = lastAppStream;
    stream.close(NGHTTP2_CANCEL);
    await waitFor(() => seen?.closedWith !== undefined, "the application's stream to close");
    assert.equal(seen?.closedWith, NGHTTP2_CANCEL);
  });

  it("resets the client's stream with the endpoint's code when the endpoint fails mid-response", async () => {
    const stream = session.request(request('/', { ':authority': `${HOST}:${failingPort}` }), { endStream: true });
    stream.on('error', () => {});
    let head: Http2Headers | undefined;
    stream.on('response', (h: Http2Headers) => {
      head = h;
    });
    stream.resume();
    await within(new Promise((r) => stream.once('close', r)), WAIT_MS, 'the stream to close');
    assert.equal(head?.[':status'], 200);
    assert.equal(stream.rstCode, NGHTTP2_ENHANCE_YOUR_CALM);
  });

  it('answers 502 with the reason when the endpoint resets before responding or cannot be reached; gRPC gets UNAVAILABLE', async () => {
    const reset = await send(session, request('/reset-before'));
    assert.equal(reset.status, 502);
    assert.match(String(reset.headers['l5d-proxy-error']), /endpoint failed before responding/);
    assert.match(reset.body.toString(), /stream reset \(code 11\)/);
    const refused = await send(session, request('/', { ':authority': `${HOST}:${deadPort}` }));
    assert.equal(refused.status, 502);
    assert.equal(refused.headers['content-type'], 'text/plain; charset=utf-8');
    assert.match(String(refused.headers['l5d-proxy-error']), /connect failed/);
    const grpc = await send(session, request('/demo.Svc/Call', { ':authority': `${HOST}:${deadPort}`, 'content-type': 'application/grpc' }));
    assert.equal(grpc.status, 200);
    assert.equal(grpc.headers['grpc-status'], '14');
    assert.match(String(grpc.headers['grpc-message']), /connect failed/);
    assert.equal(grpc.body.length, 0);
  });
});
