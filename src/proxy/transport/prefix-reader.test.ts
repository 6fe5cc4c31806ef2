import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, request as httpRequest } from 'node:http';
import { createServer as createH2Server, connect as h2connect } from 'node:http2';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, mock } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createServer as createTlsServer, connect as tlsConnect } from 'node:tls';
import { IDENTITY_FILES, initIdentity } from '../../identity/index.js';
import { mkSocketPair, type SocketPair } from '../testing/client-hello-fixtures.js';
import { sniffClientHello } from './client-hello.js';
import { detectHttp } from './detect-http.js';
import { type PrefixRead, readPrefix } from './prefix-reader.js';
import { decodeTransportHeader, encodeTransportHeader } from './transport-header.js';

const TRANSPORT_ALPN = 'transport.l5d.io/v1';
const EVENTS = ['data', 'end', 'error', 'close', 'readable', 'timeout'] as const;
const listenerCounts = (s: Socket) => EVENTS.map((e) => s.listenerCount(e));
/**
 * Runs readPrefix and checks what every path must leave behind: the socket's listeners as they
 * were, and its one timer cleared (spied through the global setTimeout/clearTimeout).
 */
async function readChecked<T>(socket: Socket, decide: (b: Buffer) => T | 'need-more', timeoutMs: number, maxBytes: number): Promise<PrefixRead<T>> {
  const listeners = listenerCounts(socket);
  const setSpy = mock.method(globalThis, 'setTimeout');
  const clearSpy = mock.method(globalThis, 'clearTimeout');
  let r: PrefixRead<T>;
  try {
    r = await readPrefix(socket, decide, { timeoutMs, maxBytes });
  } finally {
    setSpy.mock.restore();
    clearSpy.mock.restore();
  }
  assert.deepEqual(listenerCounts(socket), listeners, 'listeners left behind');
  const cleared = new Set(clearSpy.mock.calls.map((c) => c.arguments[0]));
  const created = setSpy.mock.calls.map((c) => c.result);
  assert.ok(created.length <= 1, `${created.length} timers`);
  for (const t of created) assert.ok(cleared.has(t), 'timer left behind');
  return r;
}

/** Writes `pieces` one at a time with a pause between, so each arrives as its own read. */
async function dribble(socket: Socket, pieces: readonly string[], gapMs = 15): Promise<void> {
  for (const p of pieces) {
    socket.write(p);
    await sleep(gapMs);
  }
}

/** Reads what the socket holds after a hand-back (paused mode). */
function drain(socket: Socket): Buffer {
  const parts: Buffer[] = [];
  for (let b: Buffer | null = socket.read(); b !== null; b = socket.read()) parts.push(b);
  return Buffer.concat(parts);
}

describe('readPrefix on a real socket pair', () => {
  let pair: SocketPair;
  const open = async () => {
    pair = await mkSocketPair();
    pair.client.setNoDelay(true);
    return pair;
  };
  after(() => pair?.close());

  it('reads pieces until the detector decides, then pauses and puts every byte back', async () => {
    const { client, server } = await open();
    const written = dribble(client, ['GE', 'T /or', 'ders HTTP/1', '.1\r\nHost: a\r\n\r\n']);
    let calls = 0;
    const r = await readChecked(
      server,
      (b) => {
        calls++;
        return detectHttp(b);
      },
      2000,
      8192,
    );
    await written;
    assert.ok(calls >= 3, `${calls} reads`);
    assert.ok('result' in r);
    assert.equal(r.result, 'http1');
    assert.ok(r.buffer.toString().startsWith('GET /orders HTTP/1.1\r\n'), r.buffer.toString());
    assert.equal(server.isPaused(), true);
    await sleep(20); // anything sent after the decision queues behind the unshifted bytes
    assert.equal(drain(server).toString(), 'GET /orders HTTP/1.1\r\nHost: a\r\n\r\n');
    await pair.close();
  });

  it('times out with a deadline even while bytes keep dribbling in', async () => {
    const { client, server } = await open();
    let stop = false;
    const slowloris = (async () => {
      for (const ch of 'GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa') {
        if (stop) break;
        client.write(ch);
        await sleep(10);
      }
    })();
    await sleep(20); // the first bytes are waiting before the read starts
    const t0 = performance.now();
    const r = await readChecked(server, (b) => detectHttp(b), 50, 8192);
    const elapsed = performance.now() - t0;
    stop = true;
    await slowloris;
    assert.ok('timeout' in r, JSON.stringify(r));
    assert.ok(elapsed >= 45 && elapsed < 1000, `${elapsed} ms`);
    assert.ok(r.buffer.length > 0 && 'GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'.startsWith(r.buffer.toString()), r.buffer.toString());
    assert.equal(server.isPaused(), true);
    assert.ok(drain(server).toString().startsWith(r.buffer.toString()));
    await pair.close();
  });

  it('times out on a silent client with an empty buffer', async () => {
    const { server } = await open();
    const r = await readChecked(server, (b) => detectHttp(b), 50, 8192);
    assert.deepEqual(r, { timeout: true, buffer: Buffer.alloc(0) });
    await pair.close();
  });

  it('reports a half-close before a decision as closed, with the bytes read', async () => {
    const { client, server } = await open();
    client.end('GE');
    const r = await readChecked(server, (b) => detectHttp(b), 2000, 8192);
    assert.deepEqual(r, { closed: true, buffer: Buffer.from('GE') });
    await pair.close();
  });

  it('reports a reset as closed', async () => {
    const { client, server } = await open();
    client.write('PO');
    await sleep(10);
    client.resetAndDestroy();
    const r = await readChecked(server, (b) => detectHttp(b), 2000, 8192);
    assert.ok('closed' in r);
    assert.equal(r.buffer.toString(), 'PO');
    await pair.close();
  });

  it('reports an error mid-read as closed with the error', async () => {
    const { client, server } = await open();
    client.write('PO');
    setTimeout(() => server.destroy(new Error('boom')), 20);
    const r = await readChecked(server, (b) => detectHttp(b), 2000, 8192);
    assert.ok('closed' in r && r.error?.message === 'boom', JSON.stringify(r));
    assert.equal(r.buffer.toString(), 'PO');
    await pair.close();
  });

  it('returns at once for a destroyed socket', async () => {
    const { server } = await open();
    server.destroy();
    assert.deepEqual(await readChecked(server, (b) => detectHttp(b), 2000, 8192), { closed: true, buffer: Buffer.alloc(0) });
    await pair.close();
  });

  it('overflows once maxBytes are buffered without a decision, keeping every byte', async () => {
    const { client, server } = await open();
    const sent = 'x'.repeat(10);
    const written = dribble(client, [sent, sent, sent]);
    const r = await readChecked(server, () => 'need-more' as const, 2000, 16);
    await written;
    assert.ok('overflow' in r);
    assert.equal(r.buffer.toString(), sent.repeat(2));
    await sleep(10);
    assert.equal(drain(server).toString(), sent.repeat(3));
    await pair.close();
  });

  it('rejects with the error of a throwing detector, bytes put back', async () => {
    const { client, server } = await open();
    client.write('abc');
    const listeners = listenerCounts(server);
    await assert.rejects(
      readPrefix(
        server,
        () => {
          throw new Error('detector bug');
        },
        { timeoutMs: 2000, maxBytes: 64 },
      ),
      /detector bug/,
    );
    assert.deepEqual(listenerCounts(server), listeners);
    assert.equal(drain(server).toString(), 'abc');
    await pair.close();
  });

  it('refuses bad options and text-mode sockets', async () => {
    const { server } = await open();
    for (const timeoutMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31]) {
      await assert.rejects(readPrefix(server, detectHttp, { timeoutMs, maxBytes: 10 }), RangeError);
    }
    await assert.rejects(readPrefix(server, detectHttp, { timeoutMs: 10, maxBytes: 0 }), RangeError);
    server.setEncoding('utf8');
    await assert.rejects(readPrefix(server, detectHttp, { timeoutMs: 10, maxBytes: 10 }), TypeError);
    await pair.close();
  });
});

/** A raw listener that detects, then hands each socket to `route(detection)`. */
async function detectingListener(onSocket: (socket: Socket) => Promise<void>): Promise<{ server: Server; port: number }> {
  const server = createServer((socket) => {
    onSocket(socket).catch((err: unknown) => {
      socket.destroy(err instanceof Error ? err : new Error(String(err)));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as AddressInfo).port };
}

describe('handing the socket on after detection', () => {
  const closers: (() => void)[] = [];
  after(() => {
    for (const c of closers) c();
  });

  it('node:http reads the complete request (line split across reads, body included)', async () => {
    const http = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => res.end(`${req.method} ${req.url} ${Buffer.concat(chunks).toString()}`));
    });
    const { server, port } = await detectingListener(async (socket) => {
      const r = await readPrefix(socket, (b) => detectHttp(b), { timeoutMs: 2000, maxBytes: 8192 });
      assert.ok('result' in r && r.result === 'http1');
      http.emit('connection', socket);
      socket.resume();
    });
    closers.push(
      () => server.close(),
      () => http.close(),
      () => http.closeAllConnections(),
    );
    const body = await new Promise<string>((resolve, reject) => {
      const req = httpRequest(
        { host: '127.0.0.1', port, agent: false, method: 'POST', path: '/api/v5/orders?id=7', headers: { 'content-type': 'text/plain' } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve(Buffer.concat(chunks).toString()));
        },
      );
      req.on('error', reject);
      req.flushHeaders();
      setTimeout(() => req.end('hello body'), 30);
    });
    assert.equal(body, 'POST /api/v5/orders?id=7 hello body');
  });

  it('node:http2 reads the session when the socket is not resumed', async () => {
    const h2 = createH2Server();
    h2.on('stream', (stream, headers) => {
      stream.respond({ ':status': 200 });
      stream.end(`h2 ${String(headers[':path'])}`);
    });
    const { server, port } = await detectingListener(async (socket) => {
      const r = await readPrefix(socket, (b) => detectHttp(b), { timeoutMs: 2000, maxBytes: 8192 });
      assert.ok('result' in r && r.result === 'http2');
      h2.emit('connection', socket);
    });
    closers.push(
      () => server.close(),
      () => h2.close(),
    );
    const session = h2connect(`http://127.0.0.1:${port}`);
    try {
      for (const path of ['/one', '/two']) {
        const req = session.request({ ':path': path });
        req.end();
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        await once(req, 'end');
        assert.equal(Buffer.concat(chunks).toString(), `h2 ${path}`);
      }
    } finally {
      session.destroy();
    }
  });

  describe('node:tls', () => {
    let dir: string;
    let key: Buffer;
    let cert: Buffer;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'ward-detect-'));
      const init = await initIdentity({ outDir: dir, force: true });
      assert.ok(init.ok);
      key = readFileSync(join(dir, IDENTITY_FILES.issuerKey));
      cert = readFileSync(join(dir, IDENTITY_FILES.issuerCert));
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    it('completes the handshake after the ClientHello was sniffed', async () => {
      const tls = createTlsServer({ key, cert, ALPNProtocols: ['h2', 'http/1.1'] }, (s) => {
        s.end(`sni=${String(s.servername)} alpn=${String(s.alpnProtocol)}`);
      });
      const sniffed: unknown[] = [];
      const { server, port } = await detectingListener(async (socket) => {
        const r = await readPrefix(
          socket,
          (b) => {
            const h = sniffClientHello(b);
            return h.kind === 'need-more' ? 'need-more' : h;
          },
          { timeoutMs: 2000, maxBytes: 32 * 1024 },
        );
        assert.ok('result' in r);
        sniffed.push(r.result);
        tls.emit('connection', socket);
      });
      closers.push(
        () => server.close(),
        () => tls.close(),
      );
      const client = tlsConnect({ host: '127.0.0.1', port, servername: 'web.ns.svc', ALPNProtocols: ['http/1.1'], rejectUnauthorized: false });
      const chunks: Buffer[] = [];
      client.on('data', (c: Buffer) => chunks.push(c));
      await once(client, 'end');
      client.destroy();
      assert.equal(Buffer.concat(chunks).toString(), 'sni=web.ns.svc alpn=http/1.1');
      assert.deepEqual(sniffed, [{ kind: 'hello', sni: 'web.ns.svc', alpn: ['http/1.1'] }]);
    });

    it('chains inside TLS: transport header, then HTTP detection, then node:http', async () => {
      const http = createHttpServer((req, res) => res.end(`${req.method} ${req.url}`));
      const headers: unknown[] = [];
      const tls = createTlsServer({ key, cert, ALPNProtocols: [TRANSPORT_ALPN] }, (socket) => {
        void (async () => {
          const th = await readPrefix(
            socket,
            (b) => {
              const d = decodeTransportHeader(b);
              return d.kind === 'need-more' ? 'need-more' : d;
            },
            { timeoutMs: 2000, maxBytes: 1024 },
          );
          assert.ok('result' in th && th.result.kind === 'header');
          headers.push(th.result.header);
          socket.read(th.result.consumed); // drop the header; the HTTP bytes stay buffered
          const h = await readPrefix(socket, (b) => detectHttp(b), { timeoutMs: 2000, maxBytes: 8192 });
          assert.ok('result' in h && h.result === 'http1');
          http.emit('connection', socket);
          socket.resume();
        })().catch((err: unknown) => socket.destroy(err instanceof Error ? err : new Error(String(err))));
      });
      tls.listen(0, '127.0.0.1');
      await once(tls, 'listening');
      closers.push(
        () => tls.close(),
        () => http.close(),
        () => http.closeAllConnections(),
      );
      const client = tlsConnect({ host: '127.0.0.1', port: (tls.address() as AddressInfo).port, ALPNProtocols: [TRANSPORT_ALPN], rejectUnauthorized: false });
      await once(client, 'secureConnect');
      client.write(
        Buffer.concat([
          encodeTransportHeader({ port: 8080, sessionProtocol: 'http1' }),
          Buffer.from('GET /via-header HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n'),
        ]),
      );
      const chunks: Buffer[] = [];
      client.on('data', (c: Buffer) => chunks.push(c));
      await once(client, 'end');
      client.destroy();
      assert.match(Buffer.concat(chunks).toString(), /^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\nGET \/via-header$/);
      assert.deepEqual(headers, [{ port: 8080, sessionProtocol: 'http1' }]);
    });
  });
});
