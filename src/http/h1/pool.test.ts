import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { PassThrough, Readable } from 'node:stream';
import { after, afterEach, before, describe, it } from 'node:test';
import { waitFor, within } from '../../shared/testing/waits.js';
import { Http1Pool, type Http1PoolRequest, plainConnect } from './pool.js';

const HOST = '127.0.0.1';
const WAIT_MS = 5000;

/** A request as the scripted upstream read it: head and body bytes, raw. */
interface Received {
  readonly conn: number;
  readonly head: string;
  body: string;
}

/**
 * An upstream speaking raw bytes: each request head (and its body, framed by Content-Length or
 * chunked) is recorded, and `answer` writes whatever bytes the test wants back.
 */
class ScriptedUpstream {
  readonly server: Server;
  readonly received: Received[] = [];
  readonly sockets: Socket[] = [];
  connections = 0;
  answer: (r: Received, socket: Socket) => void = (_r, s) => s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');

  constructor() {
    this.server = createServer((socket) => {
      const conn = ++this.connections;
      this.sockets.push(socket);
      socket.on('error', () => {});
      let buf = '';
      let current: { r: Received; remaining: number; chunked: boolean } | undefined;
      socket.setEncoding('latin1');
      socket.on('data', (d: string) => {
        buf += d;
        for (;;) {
          if (current === undefined) {
            const end = buf.indexOf('\r\n\r\n');
            if (end < 0) return;
            const head = buf.slice(0, end);
            buf = buf.slice(end + 4);
            const length = /\r\ncontent-length: *(\d+)/i.exec(head);
            const chunked = /\r\ntransfer-encoding: *chunked/i.test(head);
            current = { r: { conn, head, body: '' }, remaining: length === null ? 0 : Number(length[1]), chunked };
          }
          const c = current;
          if (c.chunked) {
            const end = buf.indexOf('0\r\n\r\n');
            if (end < 0) return;
            c.r.body = buf.slice(0, end + 5);
            buf = buf.slice(end + 5);
          } else {
            const take = Math.min(c.remaining, buf.length);
            c.r.body += buf.slice(0, take);
            buf = buf.slice(take);
            c.remaining -= take;
            if (c.remaining > 0) return;
          }
          current = undefined;
          this.received.push(c.r);
          this.answer(c.r, socket);
        }
      });
    });
  }

  async listen(): Promise<number> {
    this.server.listen(0, HOST);
    await once(this.server, 'listening');
    return (this.server.address() as AddressInfo).port;
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
}

interface Outcome {
  readonly status: number;
  readonly headers: string[];
  readonly body: string;
  readonly trailers: string[];
  readonly error: (Error & { code?: string }) | undefined;
  readonly connected: boolean;
}

function send(pool: Http1Pool, request: Partial<Http1PoolRequest> & { path?: string }, onHeaders?: (resume: () => void) => boolean): Promise<Outcome> {
  return within(
    new Promise<Outcome>((resolve) => {
      let status = 0;
      let headers: string[] = [];
      let connected = false;
      const chunks: Buffer[] = [];
      pool.dispatch(
        { method: 'GET', path: '/', headers: ['host', 'app'], body: null, ...request },
        {
          onConnect: () => {
            connected = true;
          },
          onHeaders: (s, h, resume) => {
            status = s;
            headers = h;
            return onHeaders?.(resume) ?? true;
          },
          onData: (c) => {
            chunks.push(c);
            return true;
          },
          onComplete: (trailers) => resolve({ status, headers, body: Buffer.concat(chunks).toString('latin1'), trailers, error: undefined, connected }),
          onError: (error) => resolve({ status, headers, body: Buffer.concat(chunks).toString('latin1'), trailers: [], error, connected }),
        },
      );
    }),
    WAIT_MS,
    `${request.method ?? 'GET'} ${request.path ?? '/'}`,
  );
}

describe('Http1Pool', () => {
  const up = new ScriptedUpstream();
  let port = 0;
  const pools: Http1Pool[] = [];
  const pool = (connections = 4, idleTimeoutMs?: number): Http1Pool => {
    const p = new Http1Pool({
      authority: `${HOST}:${port}`,
      connect: plainConnect(HOST, port),
      connections,
      ...(idleTimeoutMs === undefined ? {} : { idleTimeoutMs }),
    });
    pools.push(p);
    return p;
  };
  afterEach(async () => {
    await Promise.all(pools.splice(0).map((p) => p.destroy()));
    up.answer = (_r, s) => s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
    up.received.length = 0;
  });
  before(async () => {
    port = await up.listen();
  });
  after(() => up.close());

  it('keeps a connection alive across requests and frames each response by its headers', async () => {
    const p = pool();
    const framings = [
      'HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello',
      'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n',
      'HTTP/1.1 204 No Content\r\n\r\n',
      'HTTP/1.1 304 Not Modified\r\ncontent-length: 99\r\n\r\n',
    ];
    up.answer = (r, s) => s.write(framings[up.received.indexOf(r)] as string);
    const before = up.connections;
    const got: [number, string][] = [];
    for (let i = 0; i < framings.length; i++) {
      const o = await send(p, { path: `/${i}` });
      assert.equal(o.error, undefined);
      got.push([o.status, o.body]);
    }
    assert.deepEqual(got, [
      [200, 'hello'],
      [200, 'abcde'],
      [204, ''],
      [304, ''],
    ]);
    assert.equal(up.connections - before, 1, 'one connection for all four');
    assert.deepEqual(p.stats, { connected: 1, size: 0 });
  });

  it('writes the request as given, adds Host when missing and content-length: 0 to a bodiless POST', async () => {
    const p = pool();
    await send(p, { method: 'GET', path: '/a?b=c', headers: ['Host', 'web', 'X-Caf', 'caf\u00e9'] });
    await send(p, { method: 'POST', path: '/p', headers: [] });
    const [a, b] = up.received;
    assert.equal(a?.head, 'GET /a?b=c HTTP/1.1\r\nHost: web\r\nX-Caf: caf\u00e9');
    assert.equal(b?.head, `POST /p HTTP/1.1\r\nhost: ${HOST}:${port}\r\ncontent-length: 0`);
  });

  it('sends a body with a Content-Length as is, and any other chunked', async () => {
    const p = pool();
    const sized = await send(p, {
      method: 'PUT',
      path: '/s',
      headers: ['content-length', '11'],
      body: Readable.from([Buffer.from('hello '), Buffer.from('world')]),
    });
    const chunked = await send(p, { method: 'POST', path: '/c', headers: [], body: Readable.from([Buffer.from('part one, '), Buffer.from('part two')]) });
    assert.equal(sized.status, 200);
    assert.equal(chunked.status, 200);
    const [s, c] = up.received;
    assert.match(s?.head ?? '', /\r\ncontent-length: 11\r\n/);
    assert.equal(s?.body, 'hello world');
    assert.match(c?.head ?? '', /transfer-encoding: chunked$/);
    assert.equal(c?.body, 'a\r\npart one, \r\n8\r\npart two\r\n0\r\n\r\n');
  });

  it('never lets a body run past its Content-Length into the next request, nor fall short of it', async () => {
    const p = pool();
    const long = await send(p, { method: 'POST', headers: ['content-length', '3'], body: Readable.from([Buffer.from('abcdef')]) });
    assert.equal(long.error?.message, 'the request body is longer than its Content-Length');
    const short = await send(p, { method: 'POST', headers: ['content-length', '9'], body: Readable.from([Buffer.from('abc')]) });
    assert.equal(short.error?.message, 'the request body is shorter than its Content-Length');
    await waitFor(() => p.stats.connected === 0, 'both connections closed');
    assert.deepEqual(up.received, [], 'the upstream never saw a whole request');
  });

  it('skips 1xx responses, relays trailers, and reads a body delimited by the close', async () => {
    const p = pool();
    up.answer = (r, s) => {
      if (r.head.startsWith('GET /hints'))
        s.write('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx');
      else if (r.head.startsWith('GET /trailers'))
        s.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n1\r\ny\r\n0\r\nx-sum: 42\r\n\r\n');
      else s.end('HTTP/1.0 200 OK\r\n\r\nuntil the end');
    };
    const hints = await send(p, { path: '/hints' });
    const trailers = await send(p, { path: '/trailers' });
    const eof = await send(p, { path: '/eof' });
    assert.deepEqual([hints.status, hints.body, hints.headers], [200, 'x', ['content-length', '1']]);
    assert.deepEqual([trailers.body, trailers.trailers], ['y', ['x-sum', '42']]);
    assert.deepEqual([eof.status, eof.body, eof.error], [200, 'until the end', undefined]);
  });

  it('fails the exchange and drops the connection on a malformed or ambiguous response (CL with TE, two lengths, a bad chunk, a truncated body)', async () => {
    const p = pool(1);
    const bad = [
      ['HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n', 'HPE_INVALID_TRANSFER_ENCODING'],
      ['HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc', 'HPE_UNEXPECTED_CONTENT_LENGTH'],
      ['HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n', 'HPE_INVALID_CHUNK_SIZE'],
      ['HTTP/1.1 200 OK\nbare: lf\n\n', 'HPE_CR_EXPECTED'],
    ] as const;
    up.answer = (r, s) => {
      const i = Number(/^GET \/(\d)/.exec(r.head)?.[1]);
      if (i < bad.length) s.write((bad[i] as readonly [string, string])[0]);
      else s.end('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort');
    };
    const before = up.connections;
    for (let i = 0; i < bad.length; i++) {
      const o = await send(p, { path: `/${i}` });
      assert.equal(o.error?.code, (bad[i] as readonly [string, string])[1], `response ${i}`);
    }
    const truncated = await send(p, { path: '/9' });
    assert.ok(truncated.error !== undefined, 'a body cut short is an error, not a complete response');
    assert.equal(truncated.body, 'short');
    assert.equal(up.connections - before, bad.length + 1, 'a new connection after each failure');
  });

  it('does not trust a connection that answered more than it was asked: the extra response reaches nobody', async () => {
    const p = pool(1);
    up.answer = (r, s) => {
      if (r.head.startsWith('GET /first')) {
        s.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nsmuggled');
      } else s.write('HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond');
    };
    const before = up.connections;
    const first = await send(p, { path: '/first' });
    const second = await send(p, { path: '/second' });
    assert.deepEqual([first.body, second.body], ['first', 'second']);
    assert.equal(up.connections - before, 2, 'the second request went over a new connection');
    // Only the start of an extra response: not a message yet, but not to be read as the next answer.
    up.answer = (r, s) => {
      if (r.head.startsWith('GET /third')) s.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nthirdHTTP/1.1 200 OK\r\ncontent-le');
      else s.write('HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nfourth');
    };
    const third = await send(p, { path: '/third' });
    const fourth = await send(p, { path: '/fourth' });
    assert.deepEqual([third.body, fourth.error, fourth.body], ['third', undefined, 'fourth']);
    // The third reused the second's clean connection; the fourth needed a new one.
    assert.equal(up.connections - before, 3);
  });

  it('drops an idle connection that receives anything, and one the upstream closes', async () => {
    const p = pool(1);
    const before = up.connections;
    await send(p, { path: '/a' });
    const sock = up.sockets.at(-1) as Socket;
    sock.write('HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nlate');
    // Well before the idle timeout (4 s).
    await waitFor(() => p.stats.connected === 0, 'the connection that spoke out of turn to be dropped', 1000);
    const b = await send(p, { path: '/b' });
    assert.equal(b.body, 'ok');
    (up.sockets.at(-1) as Socket).end();
    await waitFor(() => p.stats.connected === 0, 'the connection closed by the upstream to be dropped', 1000);
    assert.equal((await send(p, { path: '/c' })).body, 'ok');
    assert.equal(up.connections - before, 3);
  });

  it('does not reuse a connection after Connection: close, an HTTP/1.0 response, or HEAD unless told the upstream is a proxy', async () => {
    const p = pool(1);
    const answers: Record<string, string> = {
      '/close': 'HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n',
      '/ten': 'HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n',
      '/ten-ka': 'HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n',
      '/head': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n',
      '/head-proxy': 'HTTP/1.1 200 OK\r\n\r\n',
      '/after': 'HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n',
    };
    up.answer = (r, s) => s.write(answers[/^\w+ (\S+)/.exec(r.head)?.[1] ?? ''] ?? '');
    const conns: number[] = [];
    const seen = (): number => (up.received.at(-1) as Received).conn;
    for (const [path, method, keepAfterHead] of [
      ['/close', 'GET', false],
      ['/ten', 'GET', false],
      ['/ten-ka', 'GET', false],
      ['/head', 'HEAD', false],
      ['/head-proxy', 'HEAD', true],
      ['/after', 'GET', false],
    ] as const) {
      const o = await send(p, { path, method, keepAfterHead });
      assert.deepEqual([o.error, o.status, o.body], [undefined, 200, ''], path);
      conns.push(seen());
    }
    const [close, ten, tenKa, head, headProxy, afterAll] = conns as [number, number, number, number, number, number];
    assert.notEqual(ten, close, 'Connection: close was honoured');
    assert.notEqual(tenKa, ten, 'HTTP/1.0 without keep-alive was not reused');
    assert.equal(head, tenKa, 'HTTP/1.0 with keep-alive was reused');
    assert.notEqual(headProxy, head, 'a HEAD to an application closes its connection (a body may follow anyway)');
    assert.equal(afterAll, headProxy, 'a HEAD to a proxy keeps it');
  });

  it("closes an idle connection after its timeout, sooner when the upstream's Keep-Alive hint says so", async () => {
    const p = pool(2, 800);
    up.answer = (r, s) =>
      s.write(
        r.head.includes('/hint') ? 'HTTP/1.1 200 OK\r\nkeep-alive: timeout=3\r\ncontent-length: 0\r\n\r\n' : 'HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n',
      );
    await send(p, { path: '/plain' });
    const t0 = Date.now();
    await waitFor(() => p.stats.connected === 0, 'the idle connection to close');
    const waited = Date.now() - t0;
    assert.ok(waited <= 900, `closed after ${waited} ms (timeout 800 ms, never late)`);
    assert.ok(waited >= 250, `closed after ${waited} ms (at most one sweep early)`);
    const q = pool(2, 60_000);
    await send(q, { path: '/hint' });
    const t1 = Date.now();
    await waitFor(() => q.stats.connected === 0, 'the hinted idle connection to close', 3000);
    assert.ok(Date.now() - t1 <= 1100, 'closed 2 s before the 3 s hint');
  });

  it('queues requests beyond its connections and serves them in order on the connections it has', async () => {
    const p = pool(2);
    up.answer = (r, s) => setTimeout(() => s.write(`HTTP/1.1 200 OK\r\ncontent-length: ${r.head.length}\r\n\r\n${r.head}`), 20);
    const before = up.connections;
    const all = await Promise.all(Array.from({ length: 6 }, (_, i) => send(p, { path: `/${i}` })));
    assert.deepEqual(
      all.map((o) => /^GET (\S+)/.exec(o.body)?.[1]),
      ['/0', '/1', '/2', '/3', '/4', '/5'],
    );
    assert.equal(up.connections - before, 2);
  });

  it('fails every waiting request on a connect failure before it has a connection', async () => {
    const dead = createServer();
    dead.listen(0, HOST);
    await once(dead, 'listening');
    const deadPort = (dead.address() as AddressInfo).port;
    dead.close();
    await once(dead, 'close');
    const p = new Http1Pool({ authority: 'x', connect: plainConnect(HOST, deadPort), connections: 1 });
    pools.push(p);
    const all = await Promise.all([send(p, {}), send(p, {}), send(p, {})]);
    for (const o of all) {
      assert.equal((o.error as NodeJS.ErrnoException | undefined)?.code, 'ECONNREFUSED');
      assert.equal(o.connected, false, 'failed before onConnect: the body is unread');
    }
    assert.deepEqual(p.stats, { connected: 0, size: 0 });
  });

  it('pauses the response on backpressure and resumes it on request; an abort closes the connection and fails the exchange once', async () => {
    const p = pool(1);
    const big = 'z'.repeat(256 * 1024);
    up.answer = (r, s) => {
      if (r.head.includes('/hang')) s.write('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial');
      else s.write(`HTTP/1.1 200 OK\r\ncontent-length: ${big.length}\r\n\r\n${big}`);
    };
    let resumeLater: (() => void) | undefined;
    const paused = send(p, { path: '/big' }, (resume) => {
      resumeLater = resume;
      return false;
    });
    await waitFor(() => resumeLater !== undefined, 'the head');
    await new Promise((r) => setTimeout(r, 50));
    resumeLater?.();
    const o = await paused;
    assert.equal(o.body.length, big.length);
    // Every chunk pushes back, the last one too: the connection must read again once idle.
    let got = 0;
    await within(
      new Promise<void>((resolve, reject) => {
        let resumeIt: () => void = () => {};
        p.dispatch(
          { method: 'GET', path: '/big', headers: [], body: null },
          {
            onConnect: () => {},
            onHeaders: (_s, _h, resume) => {
              resumeIt = resume;
              return true;
            },
            onData: (c) => {
              got += c.length;
              setTimeout(resumeIt, 1);
              return false;
            },
            onComplete: () => resolve(),
            onError: reject,
          },
        );
      }),
      WAIT_MS,
      'a response paused at every chunk',
    );
    assert.equal(got, big.length);
    assert.equal((await send(p, { path: '/after-pauses' })).body.length, big.length, 'the connection is read again');
    const errors: Error[] = [];
    let abort: ((err?: Error) => void) | undefined;
    p.dispatch(
      { method: 'GET', path: '/hang', headers: [], body: null },
      {
        onConnect: (a) => {
          abort = a;
        },
        onHeaders: () => true,
        onData: () => {
          abort?.();
          return true;
        },
        onComplete: () => assert.fail('an aborted exchange does not complete'),
        onError: (e) => errors.push(e),
      },
    );
    await waitFor(() => errors.length > 0 && p.stats.connected === 0, 'the abort');
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(errors.length, 1);
    assert.equal((errors[0] as Error & { code?: string }).code, 'ERR_HTTP1_ABORTED');
  });

  it('closes a connection whose upstream answered before the whole request body was sent', async () => {
    const p = pool(1);
    up.answer = () => {};
    const body = new PassThrough();
    const before = up.connections;
    const pending = send(p, { method: 'POST', path: '/upload', headers: [], body });
    body.write('first part');
    await waitFor(() => up.sockets.length > 0 && up.connections > before, 'the connection');
    const upstreamSide = up.sockets.at(-1) as Socket;
    // The upstream stops reading: the body backs up and the pool pauses it.
    upstreamSide.pause();
    const big = Buffer.alloc(8 * 1024 * 1024, 'u');
    body.write(big);
    await waitFor(() => body.isPaused(), 'the body to be paused by backpressure');
    upstreamSide.write('HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n');
    const o = await pending;
    assert.deepEqual([o.status, o.error], [413, undefined]);
    await waitFor(() => p.stats.connected === 0, 'the connection to close: the rest of the body is not sent');
    assert.equal(body.isPaused(), false, 'the unsent rest is discarded, not left paused');
    body.end('second part');
    await waitFor(() => body.readableEnded, 'the rest of the body to be read and dropped');
  });

  it('close() lets the running request finish and refuses new ones; destroy() fails those waiting', async () => {
    const p = pool(1);
    up.answer = (_r, s) => setTimeout(() => s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok'), 30);
    const running = send(p, { path: '/running' });
    await waitFor(() => p.stats.connected === 1, 'a connection');
    const closed = p.close();
    const refused = await send(p, { path: '/late' });
    assert.equal(refused.error?.code, 'ERR_HTTP1_POOL_CLOSED');
    assert.equal((await running).body, 'ok');
    await within(closed, WAIT_MS, 'close()');
    assert.deepEqual(p.stats, { connected: 0, size: 0 });
    const q = pool(1);
    up.answer = () => {};
    const first = send(q, { path: '/never' });
    const waiting = send(q, { path: '/waiting' });
    await waitFor(() => q.stats.connected === 1, 'a connection');
    await q.destroy();
    const [f, w] = await Promise.all([first, waiting]);
    assert.ok(f.error !== undefined && w.error !== undefined);
    assert.equal(w.connected, false);
  });

  it('fails only the request a connection was for when other connections remain', async () => {
    let connects = 0;
    const flaky = plainConnect(HOST, port);
    const p = new Http1Pool({
      authority: 'x',
      connections: 2,
      connect: (cb) => {
        connects++;
        if (connects === 2) setImmediate(() => cb(Object.assign(new Error('refused once'), { code: 'ECONNREFUSED' }), null));
        else flaky(cb);
      },
    });
    pools.push(p);
    up.answer = (_r, s) => setTimeout(() => s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok'), 30);
    const first = send(p, { path: '/1' });
    await waitFor(() => p.stats.connected === 1, 'the first connection');
    const [second, third] = await Promise.all([send(p, { path: '/2' }), send(p, { path: '/3' }), first]);
    assert.deepEqual([second.error?.message, second.connected], ['refused once', false]);
    assert.deepEqual([third.error, third.body], [undefined, 'ok'], 'served on the connection there was');
  });

  it('fails the exchange and closes the connection when a handler throws, without escaping into the socket', async () => {
    const p = pool(1);
    const errors: Error[] = [];
    p.dispatch(
      { method: 'GET', path: '/throws', headers: [], body: null },
      {
        onConnect: () => {},
        onHeaders: () => {
          throw new Error('handler bug');
        },
        onData: () => true,
        onComplete: () => assert.fail('not completed'),
        onError: (e) => errors.push(e),
      },
    );
    await waitFor(() => errors.length === 1 && p.stats.connected === 0, 'the failure');
    assert.equal(errors[0]?.message, 'handler bug');
    assert.equal((await send(p, { path: '/next' })).body, 'ok');
  });

  it('refuses to write a Content-Length it has no body for, and keeps the connection', async () => {
    const p = pool(1);
    await send(p, { path: '/warm' });
    const before = up.connections;
    up.received.length = 0;
    const o = await send(p, { method: 'POST', path: '/liar', headers: ['content-length', '5'], body: null });
    assert.equal(o.error?.code, 'ERR_HTTP1_BODY_LENGTH');
    const head = await send(p, { method: 'HEAD', path: '/liar', headers: ['content-length', '5'], body: null });
    assert.equal(head.error?.code, 'ERR_HTTP1_BODY_LENGTH');
    assert.equal((await send(p, { path: '/next' })).body, 'ok');
    assert.deepEqual(
      up.received.map((r) => r.head.split('\r\n')[0]),
      ['GET /next HTTP/1.1'],
      'the upstream never saw the request without its body',
    );
    assert.equal(up.connections, before, 'the same connection');
  });

  it('refuses a response head above its header limit', async () => {
    const p = new Http1Pool({ authority: 'x', connect: plainConnect(HOST, port), connections: 1, maxHeaderBytes: 1024 });
    pools.push(p);
    up.answer = (_r, s) => s.write(`HTTP/1.1 200 OK\r\nx-big: ${'b'.repeat(2000)}\r\ncontent-length: 0\r\n\r\n`);
    const o = await send(p, {});
    assert.equal(o.error?.code, 'HPE_HEADER_OVERFLOW');
  });
});
