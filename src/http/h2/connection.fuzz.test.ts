/**
 * H2Connection (server side) under arbitrary and mutated client bytes: sequences of frames of
 * every type (header blocks from a real HPACK encoder, split over CONTINUATION, padded, with
 * priority; DATA, WINDOW_UPDATE, SETTINGS, PING, RST_STREAM, PRIORITY, GOAWAY, unknown types),
 * and what node:http2's client (nghttp2) sends, mutated (bit flips, truncation, splicing, length
 * edits). Whatever arrives, the connection never fails with an internal error (a defect caught in
 * its data handler), and what it reports and writes is the same whether the bytes come at once,
 * in random pieces or one by one. Over in-memory sockets.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { connect as connectHttp2, createServer as createHttp2Server, type ServerHttp2Stream } from 'node:http2';
import { type AddressInfo, createServer, connect as netConnect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { before, describe, it } from 'node:test';
import fc from 'fast-check';
import { bytewise, cuts, fuzzParams, latin1, mutate, mutation, split } from '../../shared/testing/fuzz.js';
import { H2_INTERNAL_ERROR, H2Connection, type H2Stream } from './connection.js';
import { ByteWriter, HpackEncoder } from './hpack.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

class MemorySocket extends Duplex {
  readonly written: Buffer[] = [];

  constructor() {
    super({ allowHalfOpen: true });
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.written.push(Buffer.from(chunk));
    callback();
  }

  override _final(callback: () => void): void {
    callback();
  }
}

function frame(type: number, flags: number, id: number, payload: Uint8Array): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(id >>> 0, 5);
  return Buffer.concat([head, payload]);
}

// --- frame sequences

type Op =
  | { op: 'headers'; stream: number; extra: [string, string][]; endStream: boolean; pieces: number; padded: number; priority: boolean; trailers: boolean }
  | { op: 'data'; stream: number; bytes: Uint8Array; endStream: boolean; padded: number }
  | { op: 'window'; stream: number; increment: number }
  | { op: 'settings'; entries: [number, number][]; ack: boolean }
  | { op: 'ping'; ack: boolean }
  | { op: 'rst'; stream: number; code: number }
  | { op: 'priority'; stream: number; dependsOn: number }
  | { op: 'goaway' }
  | { op: 'unknown'; type: number; stream: number; bytes: Uint8Array };

/** A well-formed request or response head first, so that most sequences get past their first stream. */
const firstHead = fc.record({
  op: fc.constant('headers' as const),
  stream: fc.constant(1),
  extra: fc.constant<[string, string][]>([]),
  endStream: fc.boolean(),
  pieces: fc.integer({ min: 1, max: 2 }),
  padded: fc.constant(-1),
  priority: fc.constant(false),
  trailers: fc.constant(false),
});
/** Ops after a first head. */
const opsAfterHead = (sender: 'client' | 'server'): fc.Arbitrary<Buffer> =>
  fc.tuple(firstHead, fc.array(op, { minLength: 0, maxLength: 10 })).map(([head, rest]) => peerBytes([head, ...rest], sender));

const streamRef = fc.integer({ min: 0, max: 4 }).map((k) => (k === 0 ? 0 : 2 * k - 1));
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('headers' as const),
      stream: streamRef,
      extra: fc.array(
        fc.oneof(
          { weight: 6, arbitrary: fc.tuple(fc.stringMatching(/^x-[a-z0-9-]{0,10}$/), fc.stringMatching(/^[\x21-\x7e]{0,12}$/)) },
          { weight: 1, arbitrary: fc.tuple(fc.constantFrom('content-length', 'te', 'connection', 'Upper', ':path'), latin1({ maxLength: 6 })) },
        ),
        { maxLength: 3 },
      ),
      endStream: fc.boolean(),
      pieces: fc.integer({ min: 1, max: 3 }),
      padded: fc.integer({ min: -1, max: 4 }),
      priority: fc.boolean(),
      trailers: fc.boolean(),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('data' as const),
      stream: streamRef,
      bytes: fc.uint8Array({ maxLength: 40 }),
      endStream: fc.boolean(),
      padded: fc.integer({ min: -1, max: 4 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('window' as const),
      stream: streamRef,
      increment: fc.oneof(fc.integer({ min: 0, max: 70_000 }), fc.constant(0x7fff_ffff)),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('settings' as const),
      entries: fc.array(
        fc.tuple(
          fc.integer({ min: 0, max: 8 }),
          fc.oneof(fc.integer({ min: 0, max: 70_000 }), fc.constantFrom(0x7fff_ffff, 0x8000_0000, 16_777_215, 16_777_216)),
        ),
        {
          maxLength: 3,
        },
      ),
      ack: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('ping' as const), ack: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('rst' as const), stream: streamRef, code: fc.integer({ min: 0, max: 14 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('priority' as const), stream: streamRef, dependsOn: streamRef }) },
  { weight: 1, arbitrary: fc.constant({ op: 'goaway' as const }) },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('unknown' as const),
      type: fc.integer({ min: 10, max: 255 }),
      stream: streamRef,
      bytes: fc.uint8Array({ maxLength: 8 }),
    }),
  },
);

/**
 * A peer's bytes for `ops`: a client's (preface, SETTINGS, requests) or a server's (SETTINGS,
 * responses on the streams the client opened), then each op's frames; header blocks through one
 * encoder, in order.
 */
function peerBytes(ops: readonly Op[], sender: 'client' | 'server' = 'client'): Buffer {
  const enc = new HpackEncoder();
  const out: Buffer[] = sender === 'client' ? [PREFACE, frame(0x4, 0, 0, Buffer.alloc(0))] : [frame(0x4, 0, 0, Buffer.alloc(0))];
  // Stream references are to streams opened so far (mostly the latest), or 0: new requests take the next id.
  let latest = 0;
  const ref = (k: number): number => (k === 0 ? 0 : Math.min(k, latest) || 1);
  for (const raw of ops) {
    let o = raw;
    if (o.op === 'headers') {
      if (o.trailers || o.stream === 0) o = { ...o, stream: o.stream === 0 ? 0 : Math.max(latest, 1) };
      else {
        latest = latest === 0 ? 1 : latest + 2;
        o = { ...o, stream: latest };
      }
    } else if ('stream' in o) o = { ...o, stream: ref(o.stream) };
    switch (o.op) {
      case 'headers': {
        const head =
          sender === 'client'
            ? [':method', 'POST', ':scheme', 'http', ':path', `/s${o.stream}`, ':authority', 'a.test']
            : [':status', o.stream === 3 ? '103' : '200'];
        const pairs = o.trailers ? [] : head;
        for (const [n, v] of o.extra) pairs.push(n, v);
        const w = new ByteWriter(64);
        enc.encode(w, pairs);
        const block = w.take();
        const size = Math.ceil(block.length / o.pieces) || 1;
        const parts: Buffer[] = [];
        for (let at = 0; at < block.length || parts.length === 0; at += size) parts.push(block.subarray(at, at + size));
        let first: Buffer = parts[0] as Buffer;
        let flags = (o.endStream ? 0x1 : 0) | (parts.length === 1 ? 0x4 : 0);
        if (o.priority) {
          flags |= 0x20;
          first = Buffer.concat([Buffer.from([0, 0, 0, o.stream === 1 ? 3 : 1, 16]), first]);
        }
        if (o.padded >= 0) {
          flags |= 0x8;
          first = Buffer.concat([Buffer.of(o.padded), first, Buffer.alloc(o.padded)]);
        }
        out.push(frame(0x1, flags, o.stream, first));
        for (let i = 1; i < parts.length; i++) out.push(frame(0x9, i === parts.length - 1 ? 0x4 : 0, o.stream, parts[i] as Buffer));
        break;
      }
      case 'data': {
        let payload = Buffer.from(o.bytes);
        let flags = o.endStream ? 0x1 : 0;
        if (o.padded >= 0) {
          flags |= 0x8;
          payload = Buffer.concat([Buffer.of(o.padded), payload, Buffer.alloc(o.padded)]);
        }
        out.push(frame(0x0, flags, o.stream, payload));
        break;
      }
      case 'window': {
        const p = Buffer.alloc(4);
        p.writeUInt32BE(o.increment);
        out.push(frame(0x8, 0, o.stream, p));
        break;
      }
      case 'settings': {
        const p = Buffer.alloc(o.ack ? 0 : 6 * o.entries.length);
        if (!o.ack) {
          for (const [i, [id, v]] of o.entries.entries()) {
            p.writeUInt16BE(id, 6 * i);
            p.writeUInt32BE(v >>> 0, 6 * i + 2);
          }
        }
        out.push(frame(0x4, o.ack ? 1 : 0, 0, p));
        break;
      }
      case 'ping':
        out.push(frame(0x6, o.ack ? 1 : 0, 0, Buffer.alloc(8, 7)));
        break;
      case 'rst': {
        const p = Buffer.alloc(4);
        p.writeUInt32BE(o.code);
        out.push(frame(0x3, 0, o.stream, p));
        break;
      }
      case 'priority': {
        const p = Buffer.alloc(5);
        p.writeUInt32BE(o.dependsOn);
        p[4] = 15;
        out.push(frame(0x2, 0, o.stream, p));
        break;
      }
      case 'goaway':
        out.push(frame(0x7, 0, 0, Buffer.alloc(8)));
        break;
      case 'unknown':
        out.push(frame(o.type, 0, o.stream, o.bytes));
        break;
    }
  }
  return Buffer.concat(out);
}

// --- running a server connection

interface Run {
  /** Everything the connection reported, in order. */
  readonly log: string[];
  /** Everything it wrote. */
  readonly written: Buffer;
  readonly internalError: string | undefined;
}

/** Stream events logged, and the server's answer once a request ends. */
function streamEvents(log: string[]): NonNullable<H2Stream['events']> {
  return {
    headers(s, b, end) {
      log.push(`headers ${s.id} ${b.pairs.join('|')} ${end}`);
    },
    data(s, chunk, end) {
      log.push(`data ${s.id} ${chunk.toString('latin1')} ${end}`);
      s.consumed(chunk.length);
      if (end) s.respond([':status', '200'], true);
    },
    closed(s, code, byPeer) {
      log.push(`closed ${s.id} ${code} ${byPeer}`);
    },
  };
}

/** A client connection fed a server's `chunks`, with three requests open (one with a body). */
async function request(chunks: readonly Buffer[]): Promise<Run> {
  const socket = new MemorySocket();
  socket.on('error', () => {});
  const log: string[] = [];
  let internalError: string | undefined;
  const conn = new H2Connection(socket, {
    role: 'client',
    settingsTimeoutMs: 60_000,
    onClose(code, reason) {
      log.push(`close ${code}`);
      if (code === H2_INTERNAL_ERROR || reason?.startsWith('internal error') === true) internalError = reason ?? 'internal error';
    },
  });
  for (let i = 0; i < 3; i++) {
    const s = conn.request([':method', i === 1 ? 'POST' : 'GET', ':scheme', 'http', ':path', `/c${i}`, ':authority', 'a.test'], i !== 1);
    if (s === undefined) continue;
    s.events = streamEvents(log);
    if (i === 1) {
      s.write(Buffer.from('request body'));
      s.end();
    }
  }
  for (const c of chunks) {
    if (socket.destroyed) break;
    socket.push(c);
    await new Promise((r) => setImmediate(r));
  }
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  const written = Buffer.concat(socket.written);
  conn.destroy();
  socket.destroy();
  return { log, written, internalError };
}

async function serve(chunks: readonly Buffer[]): Promise<Run> {
  const socket = new MemorySocket();
  socket.on('error', () => {});
  const log: string[] = [];
  let internalError: string | undefined;
  const conn = new H2Connection(socket, {
    role: 'server',
    idleTimeoutMs: 0,
    onStream(stream: H2Stream, block) {
      log.push(`stream ${stream.id} ${block.pairs.join('|')}`);
      stream.events = streamEvents(log);
      if (stream.remoteEnded) stream.respond([':status', '204'], true);
    },
    onClose(code, reason) {
      log.push(`close ${code}`);
      if (code === H2_INTERNAL_ERROR || reason?.startsWith('internal error') === true) internalError = reason ?? 'internal error';
    },
  });
  for (const c of chunks) {
    if (socket.destroyed) break;
    socket.push(c);
    await new Promise((r) => setImmediate(r));
  }
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  const written = Buffer.concat(socket.written);
  conn.destroy();
  socket.destroy();
  return { log, written, internalError };
}

function assertSame(a: Run, b: Run, what: string): void {
  assert.deepEqual(b.log, a.log, `${what}: reports`);
  assert.deepEqual(b.written.toString('hex'), a.written.toString('hex'), `${what}: bytes written`);
}

/** Client bytes node:http2 (nghttp2) writes for a few requests with bodies, captured once. */
let nodeClientBytes: Buffer[] = [];

before(async () => {
  const captures: Buffer[] = [];
  for (const requests of [1, 3]) {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const chunks: Buffer[] = [];
    server.on('connection', (s: Socket) => {
      s.on('error', () => {});
      s.write(Buffer.from('000000040000000000000000040100000000', 'hex'));
      s.on('data', (d: Buffer) => chunks.push(d));
    });
    const session = connectHttp2(`http://127.0.0.1:${port}`);
    session.on('error', () => {});
    for (let i = 0; i < requests; i++) {
      const req = session.request({ ':method': 'POST', ':path': `/r${i}`, 'content-type': 'application/grpc', te: 'trailers', 'x-i': String(i) });
      req.on('error', () => {});
      req.end(Buffer.alloc(100 + i, 0x61));
    }
    // Until every stream has ended (END_STREAM on a DATA frame of each).
    const ended = (): number => {
      const wire = Buffer.concat(chunks);
      let n = 0;
      for (let pos = PREFACE.length; pos + 9 <= wire.length; pos += 9 + wire.readUIntBE(pos, 3))
        if (wire[pos + 3] === 0 && ((wire[pos + 4] as number) & 1) === 1) n++;
      return n;
    };
    const deadline = Date.now() + 5000;
    while (ended() < requests && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    session.destroy();
    server.close();
    captures.push(Buffer.concat(chunks));
  }
  nodeClientBytes = captures;
});

describe('h2 connection fuzz: the server side on arbitrary client bytes', () => {
  const generated = fc.oneof(
    opsAfterHead('client'),
    fc.array(op, { minLength: 1, maxLength: 10 }).map((ops) => peerBytes(ops)),
  );
  const input = fc.oneof(
    generated,
    fc.tuple(generated, fc.array(mutation, { minLength: 1, maxLength: 3 })).map(([b, ms]) => mutate(b, ms)),
    fc
      .tuple(fc.nat(), fc.array(mutation, { minLength: 0, maxLength: 3 }))
      .map(([which, ms]) => mutate(nodeClientBytes[which % nodeClientBytes.length] as Buffer, ms)),
    fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.concat([PREFACE, b])),
  );

  it('never fails with an internal error, and reports and writes the same however the bytes are split', async () => {
    await fc.assert(
      fc.asyncProperty(input, cuts, async (bytes, at) => {
        const whole = await serve([bytes]);
        assert.equal(whole.internalError, undefined, 'no defect caught in the data handler');
        assertSame(whole, await serve(split(bytes, at)), 'split');
      }),
      fuzzParams(400),
    );
  });

  it('reports and writes the same fed byte by byte', async () => {
    await fc.assert(
      fc.asyncProperty(input, async (bytes) => {
        const whole = await serve([bytes]);
        const one = await serve(bytewise(bytes.subarray(0, 600)));
        const cut = await serve([bytes.subarray(0, 600)]);
        assert.equal(one.internalError, undefined);
        assertSame(cut, one, 'byte by byte');
        if (bytes.length <= 600) assertSame(whole, one, 'byte by byte');
      }),
      fuzzParams(60),
    );
  });

  it('serves what node:http2 sends: every request, its body whole', async () => {
    for (const bytes of nodeClientBytes) {
      const r = await serve([bytes]);
      const streams = r.log.filter((l) => l.startsWith('stream '));
      assert.ok(streams.length >= 1, r.log.join('\n'));
      for (const s of streams) assert.match(s, /:method\|POST/);
      assert.equal(r.internalError, undefined);
    }
  });
});

describe('h2 connection fuzz: the client side on arbitrary server bytes', () => {
  const generated = fc.oneof(
    opsAfterHead('server'),
    fc.array(op, { minLength: 1, maxLength: 10 }).map((ops) => peerBytes(ops, 'server')),
  );
  const input = fc.oneof(
    generated,
    fc.tuple(generated, fc.array(mutation, { minLength: 1, maxLength: 3 })).map(([b, ms]) => mutate(b, ms)),
    fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.concat([frame(0x4, 0, 0, Buffer.alloc(0)), b])),
  );

  it('never fails with an internal error, and reports and writes the same however the bytes are split', async () => {
    await fc.assert(
      fc.asyncProperty(input, cuts, async (bytes, at) => {
        const whole = await request([bytes]);
        assert.equal(whole.internalError, undefined, 'no defect caught in the data handler');
        assertSame(whole, await request(split(bytes, at)), 'split');
        if (bytes.length <= 400) assertSame(whole, await request(bytewise(bytes)), 'byte by byte');
      }),
      fuzzParams(400),
    );
  });
});

// --- flow control against nghttp2, both ways

/** `n` bytes that differ from stream to stream (so a mix-up shows in the digest). */
function payload(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7) & 0xff;
  return b;
}

const digest = (b: Buffer): string => createHash('sha1').update(b).digest('hex');

/** Writes `body` to `write` in pieces of the given sizes, a turn apart, then calls `end`. */
async function writeInPieces(body: Buffer, sizes: readonly number[], write: (b: Buffer) => void, end: () => void): Promise<void> {
  let at = 0;
  for (let i = 0; at < body.length; i++) {
    const n = Math.max(1, sizes[i % Math.max(1, sizes.length)] ?? body.length);
    write(body.subarray(at, at + n));
    at += n;
    if (i % 4 === 3) await new Promise((r) => setImmediate(r));
  }
  end();
}

const exchange = fc.record({
  requestBytes: fc.oneof(fc.integer({ min: 0, max: 2000 }), fc.integer({ min: 60_000, max: 150_000 })),
  responseBytes: fc.oneof(fc.integer({ min: 0, max: 2000 }), fc.integer({ min: 60_000, max: 150_000 })),
  pieces: fc.array(fc.integer({ min: 1, max: 40_000 }), { minLength: 1, maxLength: 4 }),
});
const peerSettings = fc.record({
  initialWindowSize: fc.constantFrom(100, 16_384, 65_535, 1 << 20),
  maxFrameSize: fc.constantFrom(16_384, 16_777_215),
});
/** Our reader consumes at once, a turn later, or a few milliseconds later. */
const readerDelay = fc.constantFrom(0, 1, 5);

function consumeLater(stream: H2Stream, n: number, delayMs: number): void {
  if (delayMs === 0) stream.consumed(n);
  else if (delayMs === 1) setImmediate(() => stream.consumed(n));
  else setTimeout(() => stream.consumed(n), delayMs);
}

describe('h2 connection fuzz: flow control against nghttp2 (node:http2), both ways', () => {
  it('carries every request and response body whole, whatever the windows, frame sizes and reader speed', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(exchange, { minLength: 1, maxLength: 3 }), peerSettings, readerDelay, async (exchanges, settings, delay) => {
        // Our server, node's client.
        const received = new Map<string, string>();
        const server = createServer((socket) => {
          socket.on('error', () => {});
          new H2Connection(socket, {
            role: 'server',
            onStream(stream, block) {
              const path = block.pairs[block.pairs.indexOf(':path') + 1] as string;
              const i = Number(path.slice(1));
              const chunks: Buffer[] = [];
              const answer = (): void => {
                received.set(path, digest(Buffer.concat(chunks)));
                const ex = exchanges[i] as (typeof exchanges)[number];
                stream.respond([':status', '200'], false);
                void writeInPieces(
                  payload(ex.responseBytes, i + 100),
                  ex.pieces,
                  (b) => stream.write(Buffer.from(b)),
                  () => stream.end(),
                );
              };
              stream.events = {
                headers() {},
                data(s, chunk, end) {
                  chunks.push(Buffer.from(chunk));
                  consumeLater(s, chunk.length, delay);
                  if (end) answer();
                },
                closed() {},
              };
              if (stream.remoteEnded) answer();
            },
          });
        });
        server.listen(0, '127.0.0.1');
        await once(server, 'listening');
        const session = connectHttp2(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { settings });
        session.on('error', () => {});
        try {
          const results = await Promise.race([
            Promise.all(
              exchanges.map(
                (ex, i) =>
                  new Promise<string>((resolve, reject) => {
                    const req = session.request({ ':method': 'POST', ':path': `/${i}` });
                    const got: Buffer[] = [];
                    req.on('data', (c: Buffer) => got.push(c));
                    req.on('end', () => resolve(digest(Buffer.concat(got))));
                    req.on('error', reject);
                    void writeInPieces(
                      payload(ex.requestBytes, i),
                      ex.pieces,
                      (b) => req.write(b),
                      () => req.end(),
                    );
                  }),
              ),
            ),
            new Promise<never>((_, reject) => setTimeout(() => reject(new Error('stalled: our server, node client')), 15_000).unref()),
          ]);
          for (const [i, ex] of exchanges.entries()) {
            assert.equal(received.get(`/${i}`), digest(payload(ex.requestBytes, i)), `request body ${i}`);
            assert.equal(results[i], digest(payload(ex.responseBytes, i + 100)), `response body ${i}`);
          }
        } finally {
          session.destroy();
          server.close();
        }

        // Our client, node's server.
        const h2 = createHttp2Server({ settings });
        h2.on('stream', (stream: ServerHttp2Stream, headers) => {
          const i = Number(String(headers[':path']).slice(1));
          const ex = exchanges[i] as (typeof exchanges)[number];
          const got: Buffer[] = [];
          stream.on('error', () => {});
          stream.on('data', (c: Buffer) => got.push(c));
          stream.on('end', () => {
            stream.respond({ ':status': 200, 'x-request': digest(Buffer.concat(got)) });
            void writeInPieces(
              payload(ex.responseBytes, i + 100),
              ex.pieces,
              (b) => stream.write(b),
              () => stream.end(),
            );
          });
        });
        h2.listen(0, '127.0.0.1');
        await once(h2, 'listening');
        const socket = netConnect({ port: (h2.address() as AddressInfo).port, host: '127.0.0.1' });
        socket.on('error', () => {});
        await once(socket, 'connect');
        const conn = new H2Connection(socket, { role: 'client' });
        try {
          const results = await Promise.race([
            Promise.all(
              exchanges.map(
                (ex, i) =>
                  new Promise<[string, string]>((resolve, reject) => {
                    const stream = conn.request([':method', 'POST', ':scheme', 'http', ':path', `/${i}`, ':authority', 'a.test'], false);
                    if (stream === undefined) {
                      reject(new Error('no stream'));
                      return;
                    }
                    const got: Buffer[] = [];
                    let echoed = '';
                    stream.events = {
                      headers(_s, block) {
                        echoed = block.pairs[block.pairs.indexOf('x-request') + 1] ?? '';
                      },
                      data(s, chunk, end) {
                        got.push(Buffer.from(chunk));
                        consumeLater(s, chunk.length, delay);
                        if (end) resolve([echoed, digest(Buffer.concat(got))]);
                      },
                      closed(_s, code) {
                        if (code !== undefined) reject(new Error(`stream reset ${code}`));
                      },
                    };
                    void writeInPieces(
                      payload(ex.requestBytes, i),
                      ex.pieces,
                      (b) => stream.write(Buffer.from(b)),
                      () => stream.end(),
                    );
                  }),
              ),
            ),
            new Promise<never>((_, reject) => setTimeout(() => reject(new Error('stalled: our client, node server')), 15_000).unref()),
          ]);
          for (const [i, ex] of exchanges.entries()) {
            assert.deepEqual(results[i], [digest(payload(ex.requestBytes, i)), digest(payload(ex.responseBytes, i + 100))], `exchange ${i}`);
          }
        } finally {
          conn.destroy();
          socket.destroy();
          h2.close();
        }
      }),
      fuzzParams(6),
    );
  });
});
