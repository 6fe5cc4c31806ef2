import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type ClientHttp2Session, connect as connectHttp2, createServer as createHttp2Server, type Http2Server, type ServerHttp2Stream } from 'node:http2';
import { type AddressInfo, connect as connectTcp, createServer, type Server, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { after, describe, it } from 'node:test';
import {
  H2_CANCEL,
  H2_ENHANCE_YOUR_CALM,
  H2Connection,
  type H2ConnectionOptions,
  type H2Stream,
  type H2StreamEvents,
  HEADER_BLOCK_TIMEOUT_MS,
  MAX_HELD_BYTES,
  MAX_PENDING_PINGS,
  SERVER_IDLE_TIMEOUT_MS,
} from './connection.js';
import { ByteWriter, HpackDecoder, HpackEncoder } from './hpack.js';

const closers: (() => void)[] = [];
after(() => {
  for (const c of closers) c();
});

async function listen(server: Server | Http2Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  closers.push(() => server.close());
  return (server.address() as AddressInfo).port;
}

/** A server speaking our HTTP/2; `onStream` as in the options. */
async function ourServer(
  onStream: NonNullable<H2ConnectionOptions['onStream']>,
  extra: Partial<H2ConnectionOptions> = {},
): Promise<{ port: number; conns: H2Connection[] }> {
  const conns: H2Connection[] = [];
  const server = createServer((s: Socket) => {
    conns.push(new H2Connection(s, { role: 'server', onStream, ...extra }));
  });
  closers.push(() => {
    for (const c of conns) c.destroy();
  });
  return { port: await listen(server), conns };
}

function get(pairs: readonly string[], name: string): string | undefined {
  for (let i = 0; i < pairs.length; i += 2) if (pairs[i] === name) return pairs[i + 1];
  return undefined;
}

/** Echoes the request body back with `x-method`, then trailers `x-bytes: <n>`. */
function echo(stream: H2Stream, block: { pairs: string[] }): void {
  let n = 0;
  stream.respond([':status', '200', 'x-method', get(block.pairs, ':method') ?? '', 'x-path', get(block.pairs, ':path') ?? ''], false);
  const events: H2StreamEvents = {
    headers: (s) => s.end(['x-bytes', String(n)]),
    data: (s, chunk, end) => {
      n += chunk.length;
      s.write(chunk);
      if (end) s.end(['x-bytes', String(n)]);
    },
    // Consumed once written: a slow reader slows the writer.
    sent: (s, k) => s.consumed(k),
    closed: () => {},
  };
  stream.events = events;
  if (stream.remoteEnded) stream.end(['x-bytes', '0']);
}

async function nodeRequest(
  session: ClientHttp2Session,
  headers: Record<string, string>,
  body?: Buffer,
): Promise<{ headers: Record<string, unknown>; body: Buffer; trailers: Record<string, unknown> }> {
  const req = session.request(headers, { endStream: body === undefined });
  if (body !== undefined) req.end(body);
  const chunks: Buffer[] = [];
  let trailers: Record<string, unknown> = {};
  req.on('trailers', (t) => {
    trailers = t;
  });
  const [h] = (await once(req, 'response')) as [Record<string, unknown>];
  req.on('data', (d: Buffer) => chunks.push(d));
  await once(req, 'end');
  return { headers: h, body: Buffer.concat(chunks), trailers };
}

describe('H2Connection as a server, to node:http2 clients', { timeout: 20_000 }, () => {
  it('answers requests with bodies and trailers, many at once, large ones within the windows', async () => {
    const { port } = await ourServer(echo);
    const session = connectHttp2(`http://127.0.0.1:${port}`);
    closers.push(() => session.destroy());
    const big = Buffer.alloc(3 * 1024 * 1024 + 7, 'x');
    const results = await Promise.all([
      nodeRequest(session, { ':method': 'GET', ':path': '/a' }),
      nodeRequest(session, { ':method': 'POST', ':path': '/b', 'content-type': 'application/grpc' }, Buffer.from('hello')),
      nodeRequest(session, { ':method': 'PUT', ':path': '/big' }, big),
      ...Array.from({ length: 20 }, (_, i) => nodeRequest(session, { ':method': 'POST', ':path': `/n${i}` }, Buffer.from(`body ${i}`))),
    ]);
    assert.equal(results[0]?.headers[':status'], 200);
    assert.equal(results[0]?.body.length, 0);
    assert.equal(results[0]?.trailers['x-bytes'], '0');
    assert.equal(results[1]?.headers['x-method'], 'POST');
    assert.equal(results[1]?.body.toString(), 'hello');
    assert.equal(results[1]?.trailers['x-bytes'], '5');
    assert.ok(results[2]?.body.equals(big), 'a 3 MiB body both ways');
    assert.equal(results[2]?.trailers['x-bytes'], String(big.length));
    for (let i = 0; i < 20; i++) assert.equal(results[3 + i]?.body.toString(), `body ${i}`);
  });

  it('reports a client reset to the stream, and the connection goes on', async () => {
    let closedWith: [number | undefined, boolean] | undefined;
    const { port } = await ourServer((stream, block) => {
      if (get(block.pairs, ':path') !== '/hang') {
        echo(stream, block);
        return;
      }
      stream.events = {
        headers: () => {},
        data: () => {},
        closed: (_s, code, byPeer) => {
          closedWith = [code, byPeer];
        },
      };
    });
    const session = connectHttp2(`http://127.0.0.1:${port}`);
    closers.push(() => session.destroy());
    const req = session.request({ ':method': 'POST', ':path': '/hang' });
    req.on('error', () => {});
    req.write('partial');
    await new Promise((r) => setTimeout(r, 50));
    req.close(H2_CANCEL);
    const deadline = Date.now() + 2000;
    while (closedWith === undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(closedWith, [H2_CANCEL, true]);
    assert.equal((await nodeRequest(session, { ':method': 'GET', ':path': '/after' })).headers[':status'], 200);
  });
});

describe('H2Connection as a client, to node:http2 servers', { timeout: 20_000 }, () => {
  async function nodeEchoServer(settings?: { maxConcurrentStreams: number }): Promise<number> {
    const server = createHttp2Server(settings === undefined ? {} : { settings });
    server.on('stream', (stream: ServerHttp2Stream, headers) => {
      const chunks: Buffer[] = [];
      stream.on('data', (d: Buffer) => chunks.push(d));
      stream.on('end', () => {
        const body = Buffer.concat(chunks);
        // Hold each stream a little, so a concurrency limit is actually reached.
        setTimeout(() => {
          stream.respond({ ':status': 200, 'x-path': String(headers[':path']) }, { waitForTrailers: true });
          stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'x-bytes': String(body.length) }));
          stream.end(body);
        }, 5);
      });
    });
    return listen(server);
  }

  function ourRequest(conn: H2Connection, path: string, body?: Buffer): Promise<{ status: string; body: Buffer; trailers: string[] }> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let status = '';
      let trailers: string[] = [];
      const s = conn.request([':method', 'POST', ':scheme', 'http', ':path', path, ':authority', 'test'], body === undefined);
      if (s === undefined) {
        reject(new Error('connection not usable'));
        return;
      }
      s.events = {
        headers: (_s, block, end) => {
          if (status === '') status = get(block.pairs, ':status') ?? '?';
          else trailers = block.pairs;
          if (end) resolve({ status, body: Buffer.concat(chunks), trailers });
        },
        data: (st, chunk, end) => {
          chunks.push(chunk);
          st.consumed(chunk.length);
          if (end) resolve({ status, body: Buffer.concat(chunks), trailers });
        },
        closed: (_s, code) => {
          if (code !== undefined) reject(new Error(`stream reset ${code}`));
        },
      };
      if (body !== undefined) {
        s.write(body);
        s.end();
      }
    });
  }

  it("sends requests with bodies and reads responses and trailers, queueing beyond the peer's stream limit", async () => {
    const port = await nodeEchoServer({ maxConcurrentStreams: 2 });
    const socket = connectTcp({ host: '127.0.0.1', port });
    const conn = new H2Connection(socket, { role: 'client' });
    closers.push(() => conn.destroy());
    const big = Buffer.alloc(2 * 1024 * 1024, 'y');
    const results = await Promise.all([
      ourRequest(conn, '/big', big),
      ...Array.from({ length: 12 }, (_, i) => ourRequest(conn, `/r${i}`, Buffer.from(`r${i}`))),
    ]);
    assert.equal(results[0]?.status, '200');
    assert.ok(results[0]?.body.equals(big));
    assert.equal(get(results[0]?.trailers ?? [], 'x-bytes'), String(big.length));
    for (let i = 0; i < 12; i++) {
      assert.equal(results[1 + i]?.body.toString(), `r${i}`);
      assert.equal(get(results[1 + i]?.trailers ?? [], 'grpc-status'), '0');
    }
    assert.equal(conn.streamCount, 0);
  });

  it('a stream whose reader never reads holds only its own window: the other streams go on', async () => {
    const server = createHttp2Server();
    server.on('stream', (stream: ServerHttp2Stream, headers) => {
      stream.respond({ ':status': 200 });
      stream.end(Buffer.alloc(String(headers[':path']).startsWith('/hold') ? 256 * 1024 : 100 * 1024, 'h'));
    });
    const port = await listen(server);
    const conn = new H2Connection(connectTcp({ host: '127.0.0.1', port }), { role: 'client' });
    closers.push(() => conn.destroy());
    // 20 streams whose data nobody consumes: 20 x 64 KiB, more than the 1 MiB connection window.
    let held = 0;
    for (let i = 0; i < 20; i++) {
      const s = conn.request([':method', 'GET', ':scheme', 'http', ':path', `/hold${i}`, ':authority', 't'], true);
      assert.ok(s !== undefined);
      s.events = {
        headers: () => {},
        data: (_s, chunk) => {
          held += chunk.length;
        },
        closed: () => {},
      };
    }
    const fast = await Promise.race([ourRequest(conn, '/fast'), new Promise<undefined>((r) => setTimeout(() => r(undefined), 3000).unref())]);
    assert.equal(fast?.body.length, 100 * 1024, 'the fast stream completed');
    assert.equal(held, 20 * 65_535, 'each held stream got exactly its window');
  });

  it('fails when the peer never sends its SETTINGS: waiting streams are refused', async () => {
    const mute = createServer(() => {});
    const port = await listen(mute);
    const socket = connectTcp({ host: '127.0.0.1', port });
    const conn = new H2Connection(socket, { role: 'client', settingsTimeoutMs: 200 });
    closers.push(() => conn.destroy());
    const s = conn.request([':method', 'GET', ':scheme', 'http', ':path', '/', ':authority', 't'], true);
    assert.ok(s !== undefined);
    const closed = new Promise<number | undefined>((resolve) => {
      s.events = { headers: () => {}, data: () => {}, closed: (_s, code) => resolve(code) };
    });
    assert.equal(await closed, 7, 'REFUSED_STREAM');
    assert.equal(conn.destroyed, true);
  });

  it('sends no reset for a stream complete both ways (nghttp2 counts them and ends the connection)', async () => {
    const server = createHttp2Server();
    server.on('stream', (stream) => {
      stream.respond({ ':status': 200 }, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end('ok');
    });
    const port = await listen(server);
    const conn = new H2Connection(connectTcp({ host: '127.0.0.1', port }), { role: 'client' });
    closers.push(() => conn.destroy());
    // A relay resets its other side when one closes; done from the last event, the stream is complete.
    const one = (): Promise<number | undefined> =>
      new Promise((resolve) => {
        const s = conn.request([':method', 'GET', ':scheme', 'http', ':path', '/', ':authority', 't'], true);
        if (s === undefined) {
          resolve(-1);
          return;
        }
        s.events = {
          headers: (st, _b, end) => {
            if (end) st.reset(H2_CANCEL);
          },
          data: (st, chunk) => st.consumed(chunk.length),
          closed: (_s, code) => resolve(code),
        };
      });
    const codes: (number | undefined)[] = [];
    for (let batch = 0; batch < 15; batch++) codes.push(...(await Promise.all(Array.from({ length: 100 }, one))));
    assert.deepEqual(new Set(codes), new Set([undefined]), 'every stream completed');
    assert.equal(conn.usable, true, 'no GOAWAY from the server');
  });

  it('refuses the streams a GOAWAY leaves out and takes no new ones', async () => {
    const server = createHttp2Server();
    server.on('stream', (stream) => {
      stream.respond({ ':status': 200 });
      stream.end('ok');
      stream.session?.close();
    });
    const port = await listen(server);
    const conn = new H2Connection(connectTcp({ host: '127.0.0.1', port }), { role: 'client' });
    closers.push(() => conn.destroy());
    const first = await ourRequest(conn, '/one');
    assert.equal(first.body.toString(), 'ok');
    const deadline = Date.now() + 2000;
    while (conn.usable && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.equal(conn.usable, false);
    assert.equal(conn.request([':method', 'GET', ':scheme', 'http', ':path', '/', ':authority', 't'], true), undefined);
  });

  it("tells the peer's GOAWAY error code to onGoaway", async () => {
    const server = createHttp2Server();
    server.on('session', (session) => session.goaway(H2_ENHANCE_YOUR_CALM));
    const port = await listen(server);
    const codes: (number | undefined)[] = [];
    const conn = new H2Connection(connectTcp({ host: '127.0.0.1', port }), { role: 'client', onGoaway: (code) => codes.push(code) });
    closers.push(() => conn.destroy());
    const deadline = Date.now() + 5000;
    while (codes.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.deepStrictEqual(codes, [H2_ENHANCE_YOUR_CALM]);
  });

  it('sends PINGs and runs each callback once at its acknowledgement, by node:http2 and by ours', async () => {
    const nodePort = await listen(createHttp2Server());
    const ours = await ourServer(() => {});
    for (const port of [nodePort, ours.port]) {
      const conn = new H2Connection(connectTcp({ host: '127.0.0.1', port }), { role: 'client' });
      closers.push(() => conn.destroy());
      const acked: number[] = [];
      assert.equal(
        conn.ping(() => acked.push(1)),
        true,
      );
      assert.equal(
        conn.ping(() => acked.push(2)),
        true,
      );
      const deadline = Date.now() + 5000;
      while (acked.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      await new Promise((r) => setTimeout(r, 20));
      assert.deepStrictEqual(acked.sort(), [1, 2]);
      conn.destroy();
      assert.equal(
        conn.ping(() => acked.push(3)),
        false,
      );
    }
  });

  it('drops unacknowledged PINGs when the connection goes, and bounds how many may wait', async () => {
    // A peer that sends SETTINGS and then nothing: it never acknowledges a PING.
    const sockets: Socket[] = [];
    const server = createServer((s) => {
      sockets.push(s);
      s.on('error', () => {});
      s.write(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]));
    });
    closers.push(() => {
      for (const s of sockets) s.destroy();
    });
    const port = await listen(server);
    const conn = new H2Connection(connectTcp({ host: '127.0.0.1', port }), { role: 'client' });
    closers.push(() => conn.destroy());
    let acks = 0;
    const sent: boolean[] = [];
    for (let i = 0; i < MAX_PENDING_PINGS + 1; i++) sent.push(conn.ping(() => acks++));
    assert.deepStrictEqual(sent, [...Array<boolean>(MAX_PENDING_PINGS).fill(true), false]);
    await new Promise((r) => setTimeout(r, 50));
    conn.destroy();
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(acks, 0);
  });
});

/** A raw HTTP/2 client speaking frames by hand, for what no well-behaved client sends. */
class RawClient {
  readonly socket: Socket;
  readonly encoder = new HpackEncoder();
  readonly decoder = new HpackDecoder();
  #buf = Buffer.alloc(0);
  frames: { type: number; flags: number; id: number; payload: Buffer }[] = [];
  ended = false;

  constructor(port: number) {
    this.socket = connectTcp({ host: '127.0.0.1', port });
    this.socket.on('data', (d: Buffer) => {
      this.#buf = Buffer.concat([this.#buf, d]);
      while (this.#buf.length >= 9) {
        const len = this.#buf.readUIntBE(0, 3);
        if (this.#buf.length < 9 + len) break;
        this.frames.push({
          type: this.#buf[3] as number,
          flags: this.#buf[4] as number,
          id: this.#buf.readUInt32BE(5),
          payload: this.#buf.subarray(9, 9 + len),
        });
        this.#buf = this.#buf.subarray(9 + len);
      }
    });
    this.socket.on('close', () => {
      this.ended = true;
    });
    this.socket.on('error', () => {});
    closers.push(() => this.socket.destroy());
  }

  static frame(type: number, flags: number, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
    const h = Buffer.alloc(9);
    h.writeUIntBE(payload.length, 0, 3);
    h[3] = type;
    h[4] = flags;
    h.writeUInt32BE(id, 5);
    return Buffer.concat([h, payload]);
  }

  preface(): void {
    this.socket.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), RawClient.frame(4, 0, 0)]));
  }

  block(pairs: string[]): Buffer {
    const w = new ByteWriter();
    this.encoder.encode(w, pairs);
    return w.take();
  }

  headers(id: number, pairs: string[], flags = 0x5): void {
    this.socket.write(RawClient.frame(1, flags, id, this.block(pairs)));
  }

  send(b: Buffer): void {
    this.socket.write(b);
  }

  async until(pred: () => boolean, what: string): Promise<void> {
    const deadline = Date.now() + 3000;
    while (!pred() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.ok(pred(), what);
  }

  goaway(): { code: number; reason: string } | undefined {
    const g = this.frames.find((f) => f.type === 7);
    return g === undefined ? undefined : { code: g.payload.readUInt32BE(4), reason: g.payload.subarray(8).toString() };
  }

  rst(id: number): number | undefined {
    const r = this.frames.find((f) => f.type === 3 && f.id === id);
    return r?.payload.readUInt32BE(0);
  }

  /** Header blocks received, decoded in order (the table is shared by them all), by stream. */
  readonly #blocks = new Map<number, string[] | string>();
  #decodedFrames = 0;

  responseStatus(id: number): string | undefined {
    for (; this.#decodedFrames < this.frames.length; this.#decodedFrames++) {
      const f = this.frames[this.#decodedFrames] as { type: number; id: number; payload: Buffer };
      if (f.type !== 1) continue;
      // Every block is decoded (trailers too), the first of each stream kept.
      const r = this.decoder.decode(f.payload, 1 << 20);
      if (!this.#blocks.has(f.id)) this.#blocks.set(f.id, typeof r === 'string' ? r : r.pairs);
    }
    const b = this.#blocks.get(id);
    return b === undefined || typeof b === 'string' ? b : get(b, ':status');
  }
}

const REQ = [':method', 'POST', ':scheme', 'http', ':path', '/x', ':authority', 'a'];

describe('H2Connection against malformed and abusive peers', { timeout: 20_000 }, () => {
  let seen: string[] = [];
  const server = ourServer((stream, block) => {
    seen.push(get(block.pairs, ':path') ?? '');
    echo(stream, block);
  });

  it('never hands over a malformed request: the stream is reset, the connection goes on', async () => {
    const { port } = await server;
    seen = [];
    const bad: string[][] = [
      [':method', 'GET', ':scheme', 'http', ':path', '/upper', ':authority', 'a', 'X-Up', '1'],
      [...REQ, ':path', '/dup'],
      [':method', 'GET', ':scheme', 'http', ':path', '/te', 'te', 'gzip'],
      [':method', 'GET', ':scheme', 'http', ':path', '/conn', 'connection', 'close'],
      [':method', 'GET', ':scheme', 'http', ':path', '/cr', 'x-a', 'a\rb'],
      [':method', 'GET', ':scheme', 'http', ':path', '/sp', 'x-a', ' a'],
      [':method', 'GET', ':scheme', 'http', 'x-a', 'b', ':path', '/late'],
      [':method', 'GET', ':scheme', 'http', ':path', '/cl', 'content-length', '1', 'content-length', '2'],
      [':method', 'GET', ':scheme', 'http', ':path', '/st', ':status', '200'],
      [':method', 'GET', ':path', '/noscheme'],
      [':method', 'GET', ':scheme', 'http', ':path', ''],
      [':method', 'GET', ':scheme', 'http', ':path', 'http://x/admin'],
      [':method', 'GET', ':scheme', 'http', ':path', '/a b'],
    ];
    const c = new RawClient(port);
    c.preface();
    for (const [i, pairs] of bad.entries()) c.headers(1 + 2 * i, pairs);
    c.headers(1 + 2 * bad.length, [':method', 'GET', ':scheme', 'http', ':path', '/good', ':authority', 'a']);
    await c.until(() => c.responseStatus(1 + 2 * bad.length) !== undefined, 'the good request answered');
    for (let i = 0; i < bad.length; i++) assert.equal(c.rst(1 + 2 * i), 1, `request ${i} reset with PROTOCOL_ERROR`);
    assert.deepEqual(seen, ['/good']);
    assert.equal(c.goaway(), undefined);
  });

  it('resets a request whose DATA exceeds or falls short of its content-length', async () => {
    const { port } = await server;
    seen = [];
    const c = new RawClient(port);
    c.preface();
    c.headers(1, [...REQ, 'content-length', '3'], 0x4);
    c.send(RawClient.frame(0, 0x1, 1, Buffer.from('four')));
    c.headers(3, [...REQ, 'content-length', '3'], 0x4);
    c.send(RawClient.frame(0, 0x1, 3, Buffer.from('tw')));
    await c.until(() => c.rst(1) !== undefined && c.rst(3) !== undefined, 'both reset');
    assert.equal(c.rst(1), 1);
    assert.equal(c.rst(3), 1);
    // The echo got the first headers, but never a byte past the declared length.
    const data = c.frames.filter((f) => f.type === 0 && f.payload.length > 0);
    assert.deepEqual(data, []);
  });

  it('answers 431 to a header list over the bound and keeps decoding in step', async () => {
    const { port } = await ourServer(echo, { maxHeaderListSize: 1024 });
    const c = new RawClient(port);
    c.preface();
    c.headers(1, [...REQ, 'x-big', 'b'.repeat(2000)]);
    c.headers(3, [...REQ]);
    await c.until(() => c.responseStatus(3) !== undefined, 'the next request answered');
    assert.equal(c.responseStatus(1), '431');
    assert.equal(c.responseStatus(3), '200');
  });

  it('answers 431 to a header list over the field bound (128)', async () => {
    const { port } = await server;
    const c = new RawClient(port);
    c.preface();
    const fields = (n: number): string[] => Array.from({ length: n - REQ.length / 2 }, (_, i) => [`x-f${i}`, 'v']).flat();
    c.headers(1, [...REQ, ...fields(129)]);
    c.headers(3, [...REQ, ...fields(128)]);
    await c.until(() => c.responseStatus(3) !== undefined, 'the next request answered');
    assert.equal(c.responseStatus(1), '431');
    assert.equal(c.responseStatus(3), '200');
  });

  it('does not charge a client for header blocks in flight on streams it answered and reset', async () => {
    const { port } = await ourServer((stream) => {
      stream.events = { headers: () => {}, data: () => {}, closed: () => {} };
      stream.respond([':status', '403', 'content-length', '0'], true);
    });
    const c = new RawClient(port);
    c.preface();
    const n = 1100;
    c.send(Buffer.concat(Array.from({ length: n }, (_, i) => RawClient.frame(1, 0x4, 1 + 2 * i, c.block(REQ)))));
    await c.until(() => c.rst(1 + 2 * (n - 1)) !== undefined, 'every request answered and reset');
    // The client's trailers were on their way: more of them than the whole reset budget.
    c.send(Buffer.concat(Array.from({ length: n }, (_, i) => RawClient.frame(1, 0x5, 1 + 2 * i, c.block(['x-t', '1'])))));
    c.headers(1 + 2 * n, REQ, 0x4);
    await c.until(() => c.responseStatus(1 + 2 * n) !== undefined, 'the next request answered');
    assert.equal(c.responseStatus(1 + 2 * n), '403');
    assert.equal(c.goaway(), undefined);
  });

  it('holds back the connection window once its streams hold too much unconsumed, and credits it as they are consumed', async () => {
    const held: H2Stream[] = [];
    const { port } = await ourServer((stream) => {
      held.push(stream);
      stream.events = { headers: () => {}, data: () => {}, closed: () => {} };
    });
    const c = new RawClient(port);
    c.preface();
    const credit = (): number => c.frames.filter((f) => f.type === 8 && f.id === 0).reduce((a, f) => a + f.payload.readUInt32BE(0), 0);
    let sent = 0;
    let streams = 0;
    /** Opens a stream and sends its whole window (65,535 bytes) once the connection window allows. */
    const fill = async (): Promise<boolean> => {
      const deadline = Date.now() + 300;
      while (sent + 65_535 > 65_535 + credit()) {
        if (Date.now() > deadline) return false;
        await new Promise((r) => setTimeout(r, 5));
      }
      const id = 1 + 2 * streams++;
      c.headers(id, REQ, 0x4);
      for (const size of [16_384, 16_384, 16_384, 16_383]) c.send(RawClient.frame(0, 0, id, Buffer.alloc(size, 'd')));
      sent += 65_535;
      return true;
    };
    while (streams < 120 && (await fill()));
    assert.ok(streams < 120, 'the window stopped');
    assert.ok(sent >= MAX_HELD_BYTES, `credited on receipt up to the bound (${sent} sent)`);
    assert.ok(sent <= MAX_HELD_BYTES + 1024 * 1024 + 65_535, `then no further than one window (${sent} sent)`);
    assert.equal(c.goaway(), undefined);
    for (const s of held) s.consumed(65_535);
    assert.ok(await fill(), 'consumed: the window opens again');
  });

  it('fails the connection, not the process, when a consumer throws; the peer learns no more than that', async () => {
    let closed: [number, string | undefined] | undefined;
    const { port } = await ourServer(
      (stream) => {
        stream.events = {
          headers: () => {},
          data: () => {
            throw new Error('a defect with /secret/paths in its message');
          },
          closed: () => {},
        };
      },
      {
        onClose: (code, reason) => {
          closed = [code, reason];
        },
      },
    );
    const c = new RawClient(port);
    c.preface();
    c.headers(1, REQ, 0x4);
    c.send(RawClient.frame(0, 0x1, 1, Buffer.from('x')));
    await c.until(() => c.ended, 'connection closed');
    assert.deepEqual(c.goaway(), { code: 2, reason: 'internal error' });
    assert.equal(closed?.[0], 2);
    assert.match(closed?.[1] ?? '', /^internal error: Error: a defect/);
  });

  it('cuts off a SETTINGS flood with ENHANCE_YOUR_CALM', async () => {
    const { port } = await server;
    const c = new RawClient(port);
    c.preface();
    const one = RawClient.frame(4, 0, 0, Buffer.from([0, 4, 0, 0, 0xff, 0xff]));
    c.send(Buffer.concat(Array.from({ length: 1100 }, () => one)));
    await c.until(() => c.ended, 'connection closed');
    assert.equal(c.goaway()?.code, 0xb);
  });

  it('handles frames however the reads split them', async () => {
    const body = Buffer.alloc(16_384 + 5);
    for (let i = 0; i < body.length; i++) body[i] = i % 251;
    const input = Buffer.concat([
      Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
      RawClient.frame(4, 0, 0),
      RawClient.frame(
        1,
        0x4,
        1,
        (() => {
          const w = new ByteWriter();
          new HpackEncoder().encode(w, REQ);
          return w.take();
        })(),
      ),
      RawClient.frame(0, 0, 1, body.subarray(0, 16_384)),
      RawClient.frame(0, 1, 1, body.subarray(16_384)),
    ]);
    for (const size of [1, 3, 9, 10, 100, 4096, 16_393, 16_394, input.length]) {
      const got: Buffer[] = [];
      let ended = false;
      const duplex = new Duplex({ read() {}, write: (_c, _e, cb) => cb() });
      const conn = new H2Connection(duplex, {
        role: 'server',
        onStream: (stream) => {
          stream.events = {
            headers: () => {},
            data: (_s, chunk, end) => {
              got.push(Buffer.from(chunk));
              ended ||= end;
            },
            closed: () => {},
          };
        },
      });
      for (let off = 0; off < input.length; off += size) duplex.push(input.subarray(off, off + size));
      await new Promise((r) => setImmediate(r));
      assert.ok(ended && Buffer.concat(got).equals(body), `reads of ${size} bytes`);
      conn.destroy();
    }
  });

  it('copies a small slice of a large buffer before it waits in a queue', async () => {
    let queued: Buffer[] = [];
    const { port } = await ourServer((stream) => {
      stream.events = { headers: () => {}, data: () => {}, closed: () => {} };
      stream.respond([':status', '200'], false);
      stream.write(Buffer.alloc(1024 * 1024).subarray(0, 10));
      queued = stream.queue;
    });
    const c = new RawClient(port);
    // A peer with no stream window: the data waits.
    c.send(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), RawClient.frame(4, 0, 0, Buffer.from([0, 4, 0, 0, 0, 0]))]));
    c.headers(1, REQ);
    await c.until(() => queued.length === 1, 'the data waits');
    assert.equal(queued[0]?.length, 10);
    // A copy: in its own memory or node's shared pool (8 KiB on Node 20, 64 KiB from Node 22 on).
    assert.ok((queued[0]?.buffer.byteLength ?? 0) < 256 * 1024, 'not the 1 MiB it came from');
  });

  it('after a graceful close, a slow reader still gets every byte buffered for it', async () => {
    const size = 24 * 1024 * 1024;
    const { port, conns } = await ourServer((stream) => {
      stream.events = { headers: () => {}, data: () => {}, closed: () => {} };
      stream.respond([':status', '200'], false);
      stream.write(Buffer.alloc(size, 'z'));
      stream.end();
      conns[0]?.close();
    });
    const socket = connectTcp({ host: '127.0.0.1', port });
    closers.push(() => socket.destroy());
    const window = Buffer.alloc(4);
    window.writeUInt32BE(0x7fff_ffff - 65_535);
    socket.write(
      Buffer.concat([
        Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
        RawClient.frame(4, 0, 0, Buffer.from([0, 4, 0x7f, 0xff, 0xff, 0xff])),
        RawClient.frame(8, 0, 0, window),
        RawClient.frame(1, 0x5, 1, new RawClient(port).block(REQ)),
      ]),
    );
    // Reads in bursts with pauses longer than a second, like a reader on a congested link.
    let received = 0;
    socket.on('data', (d: Buffer) => {
      received += d.length;
    });
    const deadline = Date.now() + 15_000;
    let closed = false;
    socket.once('close', () => {
      closed = true;
    });
    while (!closed && Date.now() < deadline) {
      socket.pause();
      await new Promise((r) => setTimeout(r, 1500));
      socket.resume();
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(closed, 'the connection ended');
    assert.ok(received > size, `all ${size} bytes arrived (got ${received})`);
  });

  it('ends the connection on a bad preface, a first frame other than SETTINGS, DATA on an idle stream, a bad HPACK block', async () => {
    const { port } = await server;
    const cases: [string, (c: RawClient) => void, number][] = [
      ['bad preface', (c) => c.send(Buffer.from('GET / HTTP/1.1\r\nHost: a\r\n\r\n')), 1],
      ['no SETTINGS first', (c) => c.send(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), RawClient.frame(6, 0, 0, Buffer.alloc(8))])), 1],
      [
        'DATA on an idle stream',
        (c) => {
          c.preface();
          c.send(RawClient.frame(0, 1, 5, Buffer.from('x')));
        },
        1,
      ],
      [
        'HPACK index out of range',
        (c) => {
          c.preface();
          c.send(RawClient.frame(1, 5, 1, Buffer.from([0xff, 0x10])));
        },
        9,
      ],
      [
        'window overflow',
        (c) => {
          c.preface();
          const inc = Buffer.alloc(4);
          inc.writeUInt32BE(0x7fff_ffff);
          c.send(RawClient.frame(8, 0, 0, inc));
        },
        3,
      ],
      [
        'frame over the size',
        (c) => {
          c.preface();
          c.send(RawClient.frame(0, 0, 1, Buffer.alloc(20_000)));
        },
        6,
      ],
    ];
    for (const [what, act, code] of cases) {
      const c = new RawClient(port);
      act(c);
      await c.until(() => c.ended, `${what}: connection closed`);
      assert.equal(c.goaway()?.code, code, what);
    }
  });

  it('cuts off a rapid-reset client (streams opened and reset at once) with ENHANCE_YOUR_CALM', async () => {
    const { port } = await server;
    const c = new RawClient(port);
    c.preface();
    const rst = Buffer.alloc(4);
    rst.writeUInt32BE(H2_CANCEL);
    const frames: Buffer[] = [];
    for (let i = 0; i < 1200; i++) frames.push(RawClient.frame(1, 0x4, 1 + 2 * i, c.block(REQ)), RawClient.frame(3, 0, 1 + 2 * i, rst));
    c.send(Buffer.concat(frames));
    await c.until(() => c.ended, 'connection closed');
    assert.equal(c.goaway()?.code, 0xb);
  });

  it('cuts off an endless header block (CONTINUATION flood)', async () => {
    const { port } = await server;
    const c = new RawClient(port);
    c.preface();
    c.send(RawClient.frame(1, 0x0, 1, c.block(REQ)));
    for (let i = 0; i < 200; i++) c.send(RawClient.frame(9, 0, 1, Buffer.alloc(1000, 0x40)));
    await c.until(() => c.ended, 'connection closed');
    assert.equal(c.goaway()?.code, 0xb);
  });

  it('refuses streams over its concurrency limit', async () => {
    const { port } = await ourServer(
      (stream) => {
        stream.events = { headers: () => {}, data: () => {}, closed: () => {} };
      },
      { maxConcurrentStreams: 2 },
    );
    const c = new RawClient(port);
    c.preface();
    for (let i = 0; i < 3; i++) c.headers(1 + 2 * i, REQ, 0x4);
    await c.until(() => c.rst(5) !== undefined, 'third stream reset');
    assert.equal(c.rst(5), 7);
    assert.equal(c.rst(1), undefined);
  });
});

describe('H2Connection stream states (RFC 9113 §5.1, §5.3.1)', { timeout: 20_000 }, () => {
  const server = ourServer((stream, block) => {
    if (get(block.pairs, ':path') === '/reset') {
      stream.events = { headers: () => {}, data: () => {}, closed: () => {} };
      stream.reset(H2_CANCEL);
      return;
    }
    echo(stream, block);
  });
  const GET = [':method', 'GET', ':scheme', 'http', ':path', '/x', ':authority', 'a'];
  const data = (id: number) => RawClient.frame(0, 0x1, id, Buffer.from('late'));

  /** A client whose GET on stream 1 was answered whole (both sides ended: the stream is closed). */
  async function closedStream(): Promise<RawClient> {
    const { port } = await server;
    const c = new RawClient(port);
    c.preface();
    c.headers(1, GET);
    await c.until(() => c.frames.some((f) => f.type === 1 && f.id === 1 && (f.flags & 0x1) !== 0), 'the response ended');
    return c;
  }

  it('fails the connection with STREAM_CLOSED on DATA or HEADERS on a stream the client ended', async () => {
    const cases: [string, (c: RawClient) => void][] = [
      ['DATA', (c) => c.send(data(1))],
      ['HEADERS', (c) => c.headers(1, GET)],
    ];
    for (const [what, act] of cases) {
      const c = await closedStream();
      act(c);
      await c.until(() => c.ended, `${what}: connection closed`);
      assert.equal(c.goaway()?.code, 0x5, what);
    }
  });

  it('fails the connection with STREAM_CLOSED on DATA or HEADERS after the client reset the stream', async () => {
    const { port } = await server;
    const cancel = Buffer.alloc(4);
    cancel.writeUInt32BE(H2_CANCEL);
    for (const [what, late] of [
      ['DATA', (c: RawClient) => c.send(data(1))],
      ['HEADERS', (c: RawClient) => c.headers(1, ['x-t', '1'])],
    ] as const) {
      const c = new RawClient(port);
      c.preface();
      c.headers(1, REQ, 0x4);
      c.send(RawClient.frame(3, 0, 1, cancel));
      late(c);
      await c.until(() => c.ended, `${what}: connection closed`);
      assert.equal(c.goaway()?.code, 0x5, what);
    }
  });

  it('ignores DATA and trailers in flight on a stream it reset itself', async () => {
    const { port } = await server;
    const c = new RawClient(port);
    c.preface();
    c.headers(1, [...REQ.slice(0, 4), ':path', '/reset', ':authority', 'a'], 0x4);
    await c.until(() => c.rst(1) !== undefined, 'the stream reset');
    c.send(data(1));
    c.headers(1, ['x-t', '1'], 0x5);
    c.headers(3, GET);
    await c.until(() => c.responseStatus(3) !== undefined, 'the next request answered');
    assert.equal(c.responseStatus(3), '200');
    assert.equal(c.goaway(), undefined);
  });

  it('fails the connection with PROTOCOL_ERROR on a stream id below one already opened', async () => {
    const { port } = await server;
    const c = new RawClient(port);
    c.preface();
    c.headers(5, GET);
    c.headers(3, GET);
    await c.until(() => c.ended, 'connection closed');
    assert.equal(c.goaway()?.code, 0x1);
    assert.equal(c.responseStatus(3), undefined);
  });

  it('resets a stream that depends on itself (HEADERS), and fails the connection for PRIORITY naming an idle one', async () => {
    const { port } = await server;
    const c = new RawClient(port);
    c.preface();
    const self = Buffer.from([0, 0, 0, 1, 255]);
    c.send(RawClient.frame(1, 0x5 | 0x20, 1, Buffer.concat([self, c.block(GET)])));
    c.headers(3, GET);
    await c.until(() => c.responseStatus(3) !== undefined, 'the next request answered');
    assert.equal(c.rst(1), 0x1);
    assert.equal(c.responseStatus(1), undefined);
    // PRIORITY of an open stream on itself: a stream error too.
    c.headers(5, REQ, 0x4);
    c.send(RawClient.frame(2, 0, 5, Buffer.from([0, 0, 0, 5, 16])));
    await c.until(() => c.rst(5) !== undefined, 'stream 5 reset');
    assert.equal(c.rst(5), 0x1);
    assert.equal(c.goaway(), undefined);

    const idle = new RawClient(port);
    idle.preface();
    idle.send(RawClient.frame(2, 0, 7, Buffer.from([0, 0, 0, 7, 16])));
    await idle.until(() => idle.ended, 'connection closed');
    assert.equal(idle.goaway()?.code, 0x1);
    assert.equal(idle.rst(7), undefined, 'no RST_STREAM names an idle stream');
  });
});

describe('H2Connection deadlines', { timeout: 20_000 }, () => {
  it('defaults: the header block deadline of HTTP/1 (10 s); a server closes idle connections after 60 s, a client never', () => {
    assert.equal(HEADER_BLOCK_TIMEOUT_MS, 10_000);
    assert.equal(SERVER_IDLE_TIMEOUT_MS, 60_000);
    for (const bad of [-1, 1.5, 2 ** 31, Number.NaN]) {
      assert.throws(() => new H2Connection(new Duplex({ read() {}, write: (_c, _e, cb) => cb() }), { role: 'server', idleTimeoutMs: bad }), RangeError);
    }
    assert.throws(() => new H2Connection(new Duplex({ read() {}, write: (_c, _e, cb) => cb() }), { role: 'server', headerBlockTimeoutMs: 0 }), RangeError);
  });

  it('fails a connection whose header block is not finished within the deadline (HEADERS, CONTINUATION, then silence)', async () => {
    const reasons: (string | undefined)[] = [];
    const { port } = await ourServer(echo, { headerBlockTimeoutMs: 300, onClose: (_code, reason) => reasons.push(reason) });
    const c = new RawClient(port);
    c.preface();
    const block = c.block([...REQ, 'x-pad', 'p'.repeat(3000)]);
    c.send(RawClient.frame(1, 0x1, 1, block.subarray(0, 1000)));
    c.send(RawClient.frame(9, 0, 1, block.subarray(1000, 2000)));
    const t0 = Date.now();
    await c.until(() => c.ended, 'connection closed');
    const ms = Date.now() - t0;
    assert.equal(c.goaway()?.code, 0xb);
    assert.deepEqual(reasons, ['header block timeout']);
    assert.ok(ms >= 250 && ms < 2500, `closed after ${ms} ms`);
  });

  it('bounds the bytes unfinished header blocks hold over the connections sharing a budget, and each block by the list size', async () => {
    const budget = { used: 0, max: 6500 };
    const reasons: (string | undefined)[] = [];
    const { port } = await ourServer(echo, { headerBlockBudget: budget, maxHeaderListSize: 8000, onClose: (_code, reason) => reasons.push(reason) });
    const a = new RawClient(port);
    a.preface();
    const blockA = a.block([...REQ, 'x-pad', 'p'.repeat(6000)]);
    a.send(RawClient.frame(1, 0x1, 1, blockA.subarray(0, 3000)));
    await a.until(() => budget.used === 3000, 'the first block held');
    // A second connection's block would take the shared budget past its bound: that connection fails.
    const b = new RawClient(port);
    b.preface();
    b.send(RawClient.frame(1, 0x1, 1, b.block([...REQ, 'x-pad', 'q'.repeat(6000)]).subarray(0, 3600)));
    await b.until(() => b.ended, 'the second connection closed');
    assert.equal(b.goaway()?.code, 0xb);
    // The first finishes its block (the bytes held go back) and is served.
    a.send(RawClient.frame(9, 0x4, 1, blockA.subarray(3000)));
    await a.until(() => a.responseStatus(1) !== undefined, 'the first request answered');
    assert.equal(budget.used, 0);
    // A block larger than the header list bound fails its connection before it is held whole.
    const c = new RawClient(port);
    c.preface();
    const big = c.block([...REQ, 'x-pad', 'r'.repeat(9000)]);
    c.send(RawClient.frame(1, 0x1, 1, big.subarray(0, 4000)));
    c.send(RawClient.frame(9, 0, 1, big.subarray(4000, 8500)));
    await c.until(() => c.ended, 'the oversized block refused');
    assert.equal(c.goaway()?.code, 0xb);
    await a.until(() => budget.used === 0, 'every held byte given back');
    assert.deepEqual(reasons, ['too many unfinished header blocks', 'header block too large']);
  });

  it('serves a header block finished within the deadline, and the deadline is per block', async () => {
    const { port } = await ourServer(echo, { headerBlockTimeoutMs: 400, idleTimeoutMs: 0 });
    const c = new RawClient(port);
    c.preface();
    for (const id of [1, 3, 5]) {
      const block = c.block([...REQ.slice(0, 4), ':path', `/b${id}`, ':authority', 'a', 'x-pad', 'p'.repeat(3000)]);
      c.send(RawClient.frame(1, 0x1, id, block.subarray(0, 1000)));
      await new Promise((r) => setTimeout(r, 250));
      c.send(RawClient.frame(9, 0x4, id, block.subarray(1000)));
      await c.until(() => c.responseStatus(id) !== undefined, `request ${id} answered`);
    }
    assert.equal(c.goaway(), undefined);
    assert.equal(c.ended, false);
  });

  it('closes a connection without an open stream after the idle timeout (GOAWAY NO_ERROR), not one with a stream open', async () => {
    let hold: H2Stream | undefined;
    const { port } = await ourServer(
      (stream, block) => {
        if (get(block.pairs, ':path') !== '/hold') {
          echo(stream, block);
          return;
        }
        hold = stream;
        stream.events = { headers: () => {}, data: () => {}, closed: () => {} };
        stream.respond([':status', '200'], false);
      },
      { idleTimeoutMs: 300 },
    );
    const c = new RawClient(port);
    c.preface();
    c.headers(1, [...REQ.slice(0, 4), ':path', '/hold', ':authority', 'a']);
    await c.until(() => c.responseStatus(1) !== undefined, 'the held stream answered');
    // A stream open past several idle periods: the connection stays.
    await new Promise((r) => setTimeout(r, 900));
    assert.equal(c.ended, false, 'a connection with an open stream is not idle');
    hold?.end();
    const t0 = Date.now();
    await c.until(() => c.ended, 'connection closed once idle');
    const ms = Date.now() - t0;
    assert.equal(c.goaway()?.code, 0);
    assert.ok(ms >= 250 && ms < 2500, `closed ${ms} ms after its last stream`);

    // A connection that never opens a stream is closed too.
    const silent = new RawClient(port);
    silent.preface();
    await silent.until(() => silent.ended, 'a silent connection closed');
    assert.equal(silent.goaway()?.code, 0);
  });
});
