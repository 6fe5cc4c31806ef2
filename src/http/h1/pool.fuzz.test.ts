/**
 * Http1Pool against an upstream that answers with arbitrary and mutated bytes: responses valid or
 * not, split anywhere, more than asked, late, cut short, FINs and resets, over in-memory sockets.
 * Whatever it sends, the pool never throws, every request is settled exactly once (onComplete or
 * onError, nothing after), and a response - head or body - reaches only the request it answers:
 * each response names the request that was last written to its connection when it was sent. And
 * node's own HTTP client (llhttp) is the reference for one response: what it reads whole, the
 * pool reads the same (status, raw headers, body), and what it refuses the pool never delivers.
 */
import assert from 'node:assert/strict';
import { Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Duplex, Readable } from 'node:stream';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { bytewise, cuts, fuzzParams, latin1, type Mutation, mutate, mutation, split } from '../../shared/testing/fuzz.js';
import { Http1Pool, type Http1PoolHandler, type Http1PoolRequest } from './pool.js';

/** One reaction of the upstream to a request: the pieces it sends, in order. */
type Piece =
  | { readonly kind: 'response'; readonly shape: ResponseShape; readonly mutations: readonly Mutation[] | undefined; readonly cuts: number[] }
  | { readonly kind: 'junk'; readonly bytes: Uint8Array }
  | { readonly kind: 'end' }
  | { readonly kind: 'reset' };

interface ResponseShape {
  readonly status: number;
  readonly minor: number;
  readonly framing: 'length' | 'chunked' | 'close' | 'none';
  readonly connection: string | undefined;
  readonly keepAliveHint: boolean;
  readonly informational: boolean;
  readonly body: string;
}

/** An in-memory upstream connection: records what the pool writes, and pushes what the script says. */
class UpstreamSocket extends Duplex {
  /** The tag of the request last written here (undefined before the first). */
  lastTag: string | undefined;
  written = '';
  readonly #onRequest: (socket: UpstreamSocket) => void;

  constructor(onRequest: (socket: UpstreamSocket) => void) {
    super({ allowHalfOpen: true });
    this.#onRequest = onRequest;
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.written += chunk.toString('latin1');
    // Each request head names its tag in x-tag; the latest one is what a response answers.
    for (;;) {
      const m = /x-tag: (\w+)\r\n/.exec(this.written);
      if (m === null) break;
      this.written = this.written.slice(m.index + m[0].length);
      this.lastTag = m[1];
      this.#onRequest(this);
    }
    callback();
  }

  override _final(callback: () => void): void {
    callback();
  }
}

/** The bytes of a response answering `tag`: its head says so, and so does its body. */
function responseBytes(shape: ResponseShape, tag: string): Buffer {
  const body = `for-${tag}:${shape.body}`;
  let head = '';
  if (shape.informational) head += `HTTP/1.1 100 Continue\r\nx-answers: ${tag}\r\n\r\n`;
  head += `HTTP/1.${shape.minor} ${shape.status} X\r\nx-answers: ${tag}\r\n`;
  if (shape.connection !== undefined) head += `connection: ${shape.connection}\r\n`;
  if (shape.keepAliveHint) head += 'keep-alive: timeout=5\r\n';
  let rest = '';
  if (shape.framing === 'length') {
    head += `content-length: ${body.length}\r\n`;
    rest = body;
  } else if (shape.framing === 'chunked') {
    head += 'transfer-encoding: chunked\r\n';
    rest = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
  } else if (shape.framing === 'close') rest = body;
  return Buffer.from(`${head}\r\n${rest}`, 'latin1');
}

const responseShape: fc.Arbitrary<ResponseShape> = fc.record({
  status: fc.constantFrom(200, 200, 200, 204, 304, 404, 500, 101, 199),
  minor: fc.constantFrom(1, 1, 1, 0),
  framing: fc.constantFrom('length', 'length', 'chunked', 'close', 'none'),
  connection: fc.constantFrom(undefined, undefined, 'close', 'keep-alive', 'Keep-Alive, close'),
  keepAliveHint: fc.boolean(),
  informational: fc.boolean(),
  body: latin1({ maxLength: 20 }),
});

const PLAIN_ANSWER: Piece = {
  kind: 'response',
  shape: { status: 200, minor: 1, framing: 'length', connection: undefined, keepAliveHint: false, informational: false, body: '' },
  mutations: undefined,
  cuts: [],
};

const piece: fc.Arbitrary<Piece> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('response' as const),
      shape: responseShape,
      mutations: fc.option(fc.array(mutation, { minLength: 1, maxLength: 2 }), { nil: undefined, freq: 3 }),
      cuts,
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('junk' as const), bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'end' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'reset' as const }) },
);

/** What the upstream does on each request it reads, per connection in order (a valid answer when the list runs out). */
const script = fc.array(fc.array(piece, { minLength: 0, maxLength: 3 }), { maxLength: 8 });

interface Tracked {
  readonly tag: string;
  headers: string[] | undefined;
  body: string;
  settled: 'complete' | 'error' | undefined;
  /** Calls after the first terminal one, or out of order. */
  readonly violations: string[];
}

function track(tag: string): { t: Tracked; handler: Http1PoolHandler } {
  const t: Tracked = { tag, headers: undefined, body: '', settled: undefined, violations: [] };
  const handler: Http1PoolHandler = {
    onConnect() {
      if (t.settled !== undefined) t.violations.push('onConnect after the end');
    },
    onHeaders(_status, headers) {
      if (t.settled !== undefined) t.violations.push('onHeaders after the end');
      if (t.headers !== undefined) t.violations.push('onHeaders twice');
      t.headers = headers;
      return true;
    },
    onData(chunk) {
      if (t.settled !== undefined || t.headers === undefined) t.violations.push('onData out of order');
      t.body += chunk.toString('latin1');
      return true;
    },
    onComplete() {
      if (t.settled !== undefined) t.violations.push(`onComplete after ${t.settled}`);
      if (t.headers === undefined) t.violations.push('onComplete without headers');
      t.settled ??= 'complete';
    },
    onError() {
      if (t.settled !== undefined) t.violations.push(`onError after ${t.settled}`);
      t.settled ??= 'error';
    },
  };
  return { t, handler };
}

async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

describe('http1 pool fuzz: an upstream sending arbitrary bytes', () => {
  it('settles every request once and delivers a response only to the request it answers', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 2 }),
        fc.array(fc.record({ method: fc.constantFrom('GET', 'GET', 'HEAD', 'POST'), body: fc.option(latin1({ maxLength: 10 }), { nil: undefined }) }), {
          minLength: 1,
          maxLength: 5,
        }),
        script,
        async (connections, requests, reactions) => {
          const sockets: UpstreamSocket[] = [];
          let reaction = 0;
          const react = async (socket: UpstreamSocket): Promise<void> => {
            const tag = socket.lastTag as string;
            const pieces = reactions[reaction++] ?? [PLAIN_ANSWER];
            await turns(1);
            for (const p of pieces) {
              if (socket.destroyed) return;
              if (p.kind === 'end') socket.push(null);
              else if (p.kind === 'reset') socket.destroy();
              else if (p.kind === 'junk') socket.push(Buffer.from(p.bytes));
              else {
                // The response answers the request last written to this connection when it is sent.
                const bytes = responseBytes(p.shape, socket.lastTag ?? tag);
                for (const c of split(p.mutations === undefined ? bytes : mutate(bytes, p.mutations), p.cuts)) {
                  if (socket.destroyed || socket.readableEnded) return;
                  socket.push(c);
                  await turns(1);
                }
              }
              await turns(1);
            }
          };
          const pool = new Http1Pool({
            authority: 'upstream.test:80',
            connections,
            connect: (callback) => {
              const socket = new UpstreamSocket((s) => void react(s));
              socket.on('error', () => {});
              sockets.push(socket);
              queueMicrotask(() => callback(null, socket));
            },
          });
          const tracked: Tracked[] = [];
          for (const [i, r] of requests.entries()) {
            const tag = `t${i}x${Math.random().toString(36).slice(2, 10)}`;
            const { t, handler } = track(tag);
            tracked.push(t);
            const headers = ['x-tag', tag];
            const body = r.body === undefined ? null : Readable.from([Buffer.from(r.body, 'latin1')]);
            if (r.body !== undefined && r.body.length % 2 === 0) headers.push('content-length', String(r.body.length));
            const request: Http1PoolRequest = { method: r.method, path: '/', headers, body };
            pool.dispatch(request, handler);
          }
          await turns(200);
          // Whatever is still open is cut off: every request must then settle.
          for (const s of sockets) s.destroy();
          await turns(20);
          await pool.destroy();
          const tags = new Set(tracked.map((t) => t.tag));
          for (const t of tracked) {
            assert.deepEqual(t.violations, [], t.tag);
            assert.notEqual(t.settled, undefined, `${t.tag} settled`);
            const answers = t.headers?.[t.headers.findIndex((h, i) => i % 2 === 0 && h === 'x-answers') + 1];
            if (t.headers !== undefined && answers !== undefined && tags.has(answers)) assert.equal(answers, t.tag, 'the response head answers this request');
            for (const other of tags) if (other !== t.tag) assert.ok(!t.body.includes(`for-${other}:`), `${t.tag} got the body of ${other}`);
          }
        },
      ),
      fuzzParams(300),
    );
  });
});

/** A connection that answers the first write with `chunks`, then ends. */
class AnsweringSocket extends Duplex {
  #answered = false;
  readonly #chunks: readonly Buffer[];

  constructor(chunks: readonly Buffer[]) {
    super();
    this.#chunks = chunks;
  }

  override _read(): void {}

  override _write(_chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    if (!this.#answered) {
      this.#answered = true;
      void (async () => {
        for (const c of this.#chunks) {
          await turns(1);
          if (this.destroyed) return;
          this.push(c);
        }
        await turns(1);
        if (!this.destroyed) this.push(null);
      })();
    }
    callback();
  }

  // What node's HTTP client calls on a net.Socket.
  setTimeout(): this {
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  ref(): this {
    return this;
  }
  unref(): this {
    return this;
  }
}

/** How a client read one response. */
interface Read {
  status: number | undefined;
  headers: string[] | undefined;
  body: string;
  complete: boolean;
  failed: boolean;
}

function viaNodeClient(method: string, chunks: readonly Buffer[]): Promise<Read> {
  const read: Read = { status: undefined, headers: undefined, body: '', complete: false, failed: false };
  return new Promise((resolve) => {
    const agent = new Agent();
    (agent as unknown as { createConnection: () => Duplex }).createConnection = () => new AnsweringSocket(chunks);
    const done = (): void => {
      agent.destroy();
      setImmediate(() => resolve(read));
    };
    const req = httpRequest({ method, path: '/', agent, headers: { host: 'upstream.test' } });
    req.on('response', (res: IncomingMessage) => {
      read.status = res.statusCode;
      read.headers = res.rawHeaders;
      res.on('data', (c: Buffer) => {
        read.body += c.toString('latin1');
      });
      res.on('end', () => {
        read.complete = true;
        done();
      });
      res.on('error', () => {
        read.failed = true;
        done();
      });
      res.on('aborted', () => {
        read.failed = true;
      });
    });
    req.on('error', () => {
      read.failed = true;
      if (read.status === undefined) done();
    });
    req.on('close', () => setTimeout(done, 5));
    req.end();
  });
}

async function viaPool(method: string, chunks: readonly Buffer[]): Promise<Read> {
  const read: Read = { status: undefined, headers: undefined, body: '', complete: false, failed: false };
  const pool = new Http1Pool({
    authority: 'upstream.test:80',
    connections: 1,
    connect: (callback) => {
      const socket = new AnsweringSocket(chunks);
      socket.on('error', () => {});
      queueMicrotask(() => callback(null, socket));
    },
  });
  await new Promise<void>((resolve) => {
    pool.dispatch(
      { method, path: '/', headers: [], body: null },
      {
        onConnect() {},
        onHeaders(status, headers) {
          read.status = status;
          read.headers = headers;
          return true;
        },
        onData(chunk) {
          read.body += chunk.toString('latin1');
          return true;
        },
        onComplete() {
          read.complete = true;
          resolve();
        },
        onError() {
          read.failed = true;
          resolve();
        },
      },
    );
  });
  await pool.destroy();
  return read;
}

describe('http1 pool fuzz: regressions', () => {
  it('fails an exchange answered with a status below 100, rather than skip it as informational', async () => {
    // Found by the comparison below: "HTTP/1.1 000 ..." was skipped like a 100 Continue, and what
    // followed it taken for the response.
    const bytes = Buffer.from('HTTP/1.1 000 X\r\ncontent-length: 0\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok', 'latin1');
    const pool = await viaPool('GET', [bytes]);
    assert.deepEqual(pool, { status: undefined, headers: undefined, body: '', complete: false, failed: true });
    assert.equal((await viaNodeClient('GET', [bytes])).status, 0, 'node takes 000 for the response, not for a 1xx');
  });
});

describe('http1 pool fuzz: node http client (llhttp) as the reference', () => {
  it('reads a response as node reads it, and never one node refuses', async () => {
    const bytes = fc
      .tuple(responseShape, fc.option(fc.array(mutation, { minLength: 1, maxLength: 3 }), { nil: undefined, freq: 2 }))
      .map(([shape, ms]) => (ms === undefined ? responseBytes(shape, 'n') : mutate(responseBytes(shape, 'n'), ms)));
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('GET', 'GET', 'HEAD'), bytes, cuts, async (method, response, at) => {
        const chunks = split(response, at);
        const node = await viaNodeClient(method, chunks);
        const pool = await viaPool(method, chunks);
        assert.ok(pool.complete !== pool.failed, 'the pool settled once');
        // Where node reads a whole response the pool does too, but for a 101 it did not ask for
        // (the connection would become another protocol's) or a status below 100 (none at all).
        if (node.complete && node.status !== 101 && (node.status ?? 0) >= 100) assert.ok(pool.complete, 'the pool read what node read');
        if (pool.complete) {
          assert.notEqual(node.status, undefined, 'node read a response head where the pool read one');
          assert.equal(pool.status, node.status);
          assert.deepEqual(pool.headers, node.headers);
          if (node.complete) assert.equal(pool.body, node.body);
        }
        if (node.status === undefined) assert.equal(pool.headers, undefined, 'no head node refused reached the handler');
      }),
      fuzzParams(300),
    );
  });

  it('reads a response the same in one piece, in random pieces and byte by byte', async () => {
    const bytes = fc
      .tuple(responseShape, fc.option(fc.array(mutation, { minLength: 1, maxLength: 3 }), { nil: undefined, freq: 2 }))
      .map(([shape, ms]) => (ms === undefined ? responseBytes(shape, 'n') : mutate(responseBytes(shape, 'n'), ms)));
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('GET', 'HEAD'), bytes, cuts, async (method, response, at) => {
        const whole = await viaPool(method, [response]);
        assert.deepEqual(await viaPool(method, split(response, at)), whole, 'random pieces');
        assert.deepEqual(await viaPool(method, bytewise(response)), whole, 'byte by byte');
      }),
      fuzzParams(100),
    );
  });
});
