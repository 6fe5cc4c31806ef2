import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor, within } from '../../shared/testing/waits.js';
import { Http1Server, type Http1ServerEvents, type Http1ServerRequest, type Http1ServerResponse } from './server.js';

const HOST = '127.0.0.1';

type Handler = (req: Http1ServerRequest, res: Http1ServerResponse) => void;

interface Served {
  readonly port: number;
  readonly server: Http1Server<string>;
  /** The server side of each accepted connection. */
  readonly sockets: Socket[];
  readonly clientErrors: { code: string; status: number | undefined }[];
  readonly failures: unknown[];
  readonly connects: { url: string; head: string; socket: Duplex }[];
}

const opened: { net: Server; server: Http1Server<string> }[] = [];
after(() => {
  for (const o of opened) {
    o.server.close();
    o.net.close();
  }
});

async function serve(handler: Handler, opts: { headersTimeoutMs?: number; keepAliveTimeoutMs?: number; requireHost?: boolean } = {}): Promise<Served> {
  const clientErrors: Served['clientErrors'] = [];
  const failures: unknown[] = [];
  const connects: Served['connects'] = [];
  const events: Http1ServerEvents<string> = {
    request: (req, res) => handler(req, res),
    connect: (req, socket, head) => connects.push({ url: req.url, head: head.toString('latin1'), socket }),
    clientError: (code, status) => clientErrors.push({ code, status }),
    failed: (err) => failures.push(err),
  };
  const server = new Http1Server<string>({
    events,
    maxHeaderBytes: 1024,
    headersTimeoutMs: opts.headersTimeoutMs ?? 5000,
    keepAliveTimeoutMs: opts.keepAliveTimeoutMs ?? 5000,
    checkIntervalMs: 50,
    requireHost: opts.requireHost === true,
  });
  const sockets: Socket[] = [];
  const net = createServer({ allowHalfOpen: true, noDelay: true }, (s) => {
    sockets.push(s);
    server.serve(s, 'ctx');
  });
  net.listen(0, HOST);
  await once(net, 'listening');
  opened.push({ net, server });
  return { port: (net.address() as AddressInfo).port, server, sockets, clientErrors, failures, connects };
}

/** A raw client: what it has received so far, and whether the server closed. */
class Raw {
  readonly socket: Socket;
  text = '';
  ended = false;
  closed = false;

  constructor(port: number) {
    this.socket = connect({ host: HOST, port, allowHalfOpen: true });
    this.socket.setEncoding('latin1');
    this.socket.on('data', (d: string) => {
      this.text += d;
    });
    this.socket.on('end', () => {
      this.ended = true;
    });
    this.socket.on('error', () => {});
    this.socket.on('close', () => {
      this.closed = true;
    });
  }

  send(s: string | Buffer): this {
    this.socket.write(s);
    return this;
  }

  /** Waits until the received text matches `re`. */
  async until(re: RegExp, what = re.source): Promise<string> {
    await waitFor(() => re.test(this.text), `response matching ${what} (got ${JSON.stringify(this.text.slice(0, 300))})`);
    return this.text;
  }

  async untilClosed(): Promise<string> {
    await waitFor(() => this.ended || this.closed, `the server to close (got ${JSON.stringify(this.text.slice(0, 300))})`);
    return this.text;
  }

  /** Responses received, split on status lines. */
  get statuses(): number[] {
    return [...this.text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
  }
}

/** Reads a body to the end. */
async function bodyOf(req: Http1ServerRequest): Promise<string> {
  let s = '';
  for await (const c of req.body ?? []) s += (c as Buffer).toString('latin1');
  return s;
}

function answer(res: Http1ServerResponse, status: number, body: string, extra: string[] = []): void {
  res.writeHead(status, undefined, ['content-length', String(Buffer.byteLength(body)), ...extra]);
  if (body !== '') res.write(Buffer.from(body));
  res.end();
}

describe('Http1Server: responses and keep-alive', () => {
  it('keeps the connection: a Content-Length body as is, date and the keep-alive hint, requests in order on one connection', async () => {
    const seen: string[] = [];
    const s = await serve((req, res) => {
      seen.push(`${req.method} ${req.url} ${req.body === null ? 'no body' : 'body'}`);
      answer(res, 200, `hello ${req.url}`, ['X-Case', 'Kept']);
    });
    const c = new Raw(s.port).send('GET /a HTTP/1.1\r\nHost: x\r\n\r\n');
    await c.until(/hello \/a$/);
    c.send('GET /b?q=1 HTTP/1.1\r\nHost: x\r\n\r\n');
    const text = await c.until(/hello \/b\?q=1$/);
    assert.deepEqual(c.statuses, [200, 200]);
    assert.match(
      text,
      /^HTTP\/1\.1 200 OK\r\ncontent-length: 8\r\nX-Case: Kept\r\ndate: \w{3}, \d\d \w{3} \d{4} [\d:]{8} GMT\r\nkeep-alive: timeout=5\r\n\r\nhello \/a/,
    );
    assert.deepEqual(seen, ['GET /a no body', 'GET /b?q=1 no body']);
    assert.equal(s.sockets.length, 1);
    assert.equal(c.closed, false);
    c.socket.destroy();
  });

  it('chunks a body without Content-Length (trailers included) for HTTP/1.1, and delimits it by the close for HTTP/1.0', async () => {
    const s = await serve((_req, res) => {
      res.writeHead(200, 'Fine', ['content-type', 'text/plain']);
      res.write(Buffer.from('abc'));
      res.write(Buffer.from('de'));
      res.end(['grpc-status', '0', 'bad name', 'dropped']);
    });
    const c11 = new Raw(s.port).send('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    const t11 = await c11.until(/0\r\n(.*\r\n)*\r\n$/);
    assert.match(t11, /^HTTP\/1\.1 200 Fine\r\n/);
    assert.match(t11, /transfer-encoding: chunked\r\n/);
    assert.match(t11, /\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\ngrpc-status: 0\r\n\r\n$/, 'the invalid trailer is dropped');
    assert.equal(c11.closed, false);
    c11.socket.destroy();
    const c10 = new Raw(s.port).send('GET / HTTP/1.0\r\n\r\n');
    const t10 = await c10.untilClosed();
    assert.doesNotMatch(t10, /transfer-encoding/i);
    assert.match(t10, /connection: close\r\n\r\nabcde$/);
  });

  it('keeps an HTTP/1.0 connection that asks for it, with a length', async () => {
    const s = await serve((_req, res) => answer(res, 200, 'one'));
    const c = new Raw(s.port).send('GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n');
    const t = await c.until(/one$/);
    assert.match(t, /connection: keep-alive\r\nkeep-alive: timeout=5\r\n/);
    c.send('GET / HTTP/1.0\r\n\r\n');
    await c.untilClosed();
    assert.deepEqual(c.statuses, [200, 200]);
  });

  it('sends no body for HEAD, 204 and 304, and keeps the connection', async () => {
    const s = await serve((req, res) => {
      const status = req.url === '/204' ? 204 : req.url === '/304' ? 304 : 200;
      res.writeHead(status, undefined, status === 200 ? ['content-length', '5'] : []);
      res.write(Buffer.from('hello'));
      res.end();
    });
    const c = new Raw(s.port).send(
      'HEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET /204 HTTP/1.1\r\nHost: x\r\n\r\nGET /304 HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n',
    );
    const t = await c.until(/hello$/);
    assert.deepEqual(c.statuses, [200, 204, 304, 200]);
    assert.equal(t.split('hello').length, 2, 'one body, the GET');
    assert.doesNotMatch(t, /transfer-encoding/);
    c.socket.destroy();
  });

  it('answers pipelined requests in order, one at a time, bodies kept for their turn', async () => {
    const order: string[] = [];
    let release: (() => void) | undefined;
    const s = await serve((req, res) => {
      order.push(`start ${req.url}`);
      void bodyOf(req).then((body) => {
        const reply = () => {
          order.push(`end ${req.url}`);
          answer(res, 200, `${req.url}:${body}`);
        };
        if (req.url === '/slow') release = reply;
        else reply();
      });
    });
    const c = new Raw(s.port).send(
      'POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcPOST /next HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\nGET /last HTTP/1.1\r\nHost: x\r\n\r\n',
    );
    await waitFor(() => release !== undefined, 'the slow request');
    await sleep(50);
    assert.deepEqual(order, ['start /slow'], 'the next request waits for the response before it');
    release?.();
    const t = await c.until(/\/last:$/);
    assert.deepEqual(order, ['start /slow', 'end /slow', 'start /next', 'end /next', 'start /last', 'end /last']);
    assert.ok(t.indexOf('/slow:abc') < t.indexOf('/next:xy') && t.indexOf('/next:xy') < t.indexOf('/last:'));
    c.socket.destroy();
  });

  it('closes the connection on a body longer or shorter than its Content-Length, and after Connection: close', async () => {
    const s = await serve((req, res) => {
      res.writeHead(200, undefined, ['content-length', '4']);
      if (req.url === '/long') res.write(Buffer.from('12345'));
      else if (req.url === '/short') res.write(Buffer.from('123'));
      else res.write(Buffer.from('1234'));
      res.end();
    });
    for (const path of ['/long', '/short']) {
      const c = new Raw(s.port).send(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
      const t = await c.untilClosed();
      assert.doesNotMatch(t, /12345/, `${path}: never more than the length`);
      assert.doesNotMatch(t, /\r\n\r\n1234$/, `${path}: never a complete-looking body`);
    }
    const c = new Raw(s.port).send('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    const t = await c.untilClosed();
    assert.match(t, /connection: close\r\n\r\n1234$/);
  });

  it('refuses an invalid head with nothing written; 101 and 1xx are not for writeHead', async () => {
    const errors: string[] = [];
    const s = await serve((req, res) => {
      for (const [status, reason, h] of [
        [200, undefined, ['x-bad', 'a\r\nInjected: 1']],
        [200, undefined, ['bad name', 'v']],
        [200, 'split\r\nInjected: 1', []],
        [101, undefined, []],
        [1000, undefined, []],
        [200, undefined, ['content-length', '1', 'content-length', '1']],
      ] as [number, string | undefined, string[]][]) {
        try {
          res.writeHead(status, reason, h);
        } catch (e) {
          errors.push((e as Error).message);
        }
      }
      answer(res, 200, req.url);
    });
    const c = new Raw(s.port).send('GET /after HTTP/1.1\r\nHost: x\r\n\r\n');
    const t = await c.until(/\/after$/);
    assert.equal(errors.length, 6);
    assert.doesNotMatch(t, /Injected/);
    assert.deepEqual(c.statuses, [200]);
    c.socket.destroy();
  });
});

describe('Http1Server: request bodies', () => {
  it('gives a body only to requests that announce one, and holds the client back while it is not read', async () => {
    let held: Http1ServerRequest | undefined;
    const s = await serve((req, res) => {
      if (req.url === '/hold') {
        held = req;
        return;
      }
      void bodyOf(req).then((b) => answer(res, 200, `${req.body === null ? 'none' : 'some'}:${b.length}`));
    });
    const c = new Raw(s.port).send('POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n');
    await c.until(/some:0$/);
    c.send('GET /x HTTP/1.1\r\nHost: x\r\n\r\n');
    await c.until(/none:0$/);
    // 64 MiB announced, sent as fast as the server takes it, never read.
    const total = 64 * 1024 * 1024;
    c.send(`POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: ${total}\r\n\r\n`);
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    let written = 0;
    const pump = (): void => {
      while (written < total && c.socket.write(chunk)) written += chunk.length;
      if (written < total)
        c.socket.once('drain', () => {
          written += chunk.length;
          pump();
        });
    };
    pump();
    await waitFor(() => held !== undefined, 'the held request');
    await sleep(300);
    const serverSide = s.sockets[0] as Socket;
    assert.ok(serverSide.bytesRead < 16 * 1024 * 1024, `the server stopped reading (read ${serverSide.bytesRead})`);
    // Reading it lets the rest in.
    let got = 0;
    held?.body?.on('data', (d: Buffer) => {
      got += d.length;
    });
    await waitFor(() => got === total, 'the whole body', 20_000);
    c.socket.destroy();
  });

  it('discards a body its response did not wait for, keeping the connection when it ends in time', async () => {
    const s = await serve((req, res) => answer(res, 403, `denied ${req.url}`), { headersTimeoutMs: 300 });
    const c = new Raw(s.port).send('POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345');
    await c.until(/denied \/a$/);
    c.send('67890GET /b HTTP/1.1\r\nHost: x\r\n\r\n');
    await c.until(/denied \/b$/);
    assert.equal(c.closed, false);
    // A body that never ends is cut off after the deadline.
    const d = new Raw(s.port).send('POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n');
    await d.until(/denied \/c$/);
    const t0 = Date.now();
    await within(d.untilClosed(), 3000, 'the discarded body deadline');
    assert.ok(Date.now() - t0 >= 200, 'not before the deadline');
    c.socket.destroy();
  });

  it('sends 100 Continue on request, and closes after an answer that did not', async () => {
    const s = await serve((req, res) => {
      if (req.url === '/go') {
        res.writeContinue();
        void bodyOf(req).then((b) => answer(res, 200, `got ${b}`));
      } else answer(res, 403, 'no');
    });
    const c = new Raw(s.port).send('POST /go HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n');
    await c.until(/^HTTP\/1\.1 100 Continue\r\n\r\n$/);
    c.send('ok');
    await c.until(/got ok$/);
    c.send('POST /no HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n');
    const t = await c.untilClosed();
    assert.match(t, /HTTP\/1\.1 403 Forbidden\r\ncontent-length: 2\r\ndate: [^\r]+\r\nconnection: close\r\n\r\nno$/);
    assert.deepEqual(c.statuses, [100, 200, 403]);
  });

  it('fails the body and cancels the exchange when the client goes away mid-request or mid-response', async () => {
    const closes: boolean[] = [];
    const bodyErrors: string[] = [];
    const s = await serve((req, res) => {
      res.onClose((finished) => closes.push(finished));
      req.body?.on('error', (e: Error) => bodyErrors.push(e.message));
      if (req.url === '/stream') {
        res.writeHead(200, undefined, []);
        res.write(Buffer.from('partial'));
      }
    });
    const a = new Raw(s.port).send('POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nsome');
    await waitFor(() => s.sockets.length === 1, 'the first connection');
    await sleep(50);
    a.socket.end();
    const b = new Raw(s.port).send('GET /stream HTTP/1.1\r\nHost: x\r\n\r\n');
    await b.until(/partial/);
    b.socket.destroy();
    await waitFor(() => closes.length === 2, 'both responses closed');
    assert.deepEqual(closes, [false, false]);
    assert.equal(bodyErrors.length, 1);
  });
});

describe('Http1Server: connection state (from a review)', () => {
  it('reads on after a response that left a whole, full body unread (no stall)', async () => {
    const s = await serve((req, res) => {
      if (req.url === '/unread') setTimeout(() => answer(res, 502, 'gone'), 50);
      else answer(res, 200, `ok ${req.url}`);
    });
    const c = new Raw(s.port).send(`POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 40000\r\n\r\n${'a'.repeat(40000)}`);
    await c.until(/gone$/);
    c.send('GET /b HTTP/1.1\r\nHost: x\r\n\r\n');
    await within(c.until(/ok \/b$/), 3000, 'the next request on the connection');
    c.socket.destroy();
  });

  it('delivers a whole closing response to a slow reader while the request body ends behind it', async () => {
    const size = 8 * 1024 * 1024;
    const s = await serve((_req, res) => {
      res.keepAlive = false;
      res.writeHead(200, undefined, ['content-length', String(size)]);
      res.write(Buffer.alloc(size, 0x62));
      res.end();
    });
    const c = new Raw(s.port);
    c.socket.pause();
    c.send('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n');
    await sleep(100);
    c.send('hello');
    await sleep(100);
    c.socket.resume();
    const text = await within(c.untilClosed(), 10_000, 'the response');
    const body = text.slice(text.indexOf('\r\n\r\n') + 4);
    assert.equal(body.length, size, 'every byte of the response');
  });

  it('answers thousands of pipelined requests answered as they start, without recursing', async () => {
    let n = 0;
    const s = await serve((req, res) => {
      n++;
      // The first one later: the others queue behind it, and run when it ends.
      if (req.url === '/first') setTimeout(() => answer(res, 200, ''), 50);
      else answer(res, 403, '');
    });
    const count = 5000;
    const c = new Raw(s.port).send(`GET /first HTTP/1.1\r\nHost: x\r\n\r\n${'GET /x HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(count - 1)}`);
    await within(
      waitFor(() => c.statuses.length === count, `${count} answers`, 10_000),
      12_000,
      'the answers',
    );
    assert.equal(n, count);
    assert.equal(s.failures.length, 0);
    c.socket.destroy();
  });

  it('does not time out a pipelined head that waits behind a slow response', async () => {
    const s = await serve(
      (req, res) => {
        if (req.url === '/slow') setTimeout(() => answer(res, 200, 'slow done'), 600);
        else answer(res, 200, `fast ${req.url}`);
      },
      { headersTimeoutMs: 200 },
    );
    // A whole request queued behind the slow one (the connection stops reading), then part of a head.
    const c = new Raw(s.port).send('GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /queued HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHo');
    await sleep(50);
    c.send('st: x\r\n\r\n');
    await within(c.until(/fast \/next$/), 3000, 'the pipelined requests');
    assert.deepEqual(c.statuses, [200, 200, 200]);
    assert.deepEqual(s.clientErrors, []);
    c.socket.destroy();
  });

  it('never serves a request pipelined behind a response that closes the connection', async () => {
    const seen: string[] = [];
    const s = await serve((req, res) => {
      seen.push(req.url);
      res.keepAlive = false;
      answer(res, 200, 'last');
    });
    const c = new Raw(s.port).send('GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nCONNECT db:1 HTTP/1.1\r\nHost: db:1\r\n\r\n');
    await c.untilClosed();
    await sleep(50);
    assert.deepEqual(seen, ['/a']);
    assert.deepEqual(s.connects, []);
    assert.deepEqual(c.statuses, [200]);
  });
});

describe('Http1Server: slow readers (from a second review)', () => {
  /** Read slowly: a few seconds at one chunk per 5 ms (the kernel's buffers take a few MB of it). */
  const SIZE = 16 * 1024 * 1024;
  /** The response, written at once in 64 KiB pieces (as a relay's reads come); what the socket cannot take waits in it. */
  const big = (res: Http1ServerResponse, size = SIZE): void => {
    res.writeHead(200, undefined, ['content-length', String(size)]);
    const piece = Buffer.alloc(64 * 1024, 0x63);
    for (let sent = 0; sent < size; sent += piece.length) res.write(piece.subarray(0, Math.min(piece.length, size - sent)));
    res.end();
  };
  /**
   * Reads the socket one chunk (at most 64 KiB) every 5 ms — at full speed once `fastWhen()` says
   * so —; resolves with the body length once `SIZE` bytes after the head arrived, or at close.
   */
  const drainSlowly = (c: Raw, size = SIZE, fastWhen: () => boolean = () => false): Promise<number> =>
    new Promise((resolve) => {
      let total = 0;
      let headEnd = -1;
      c.socket.removeAllListeners('data');
      c.socket.on('data', (d: string) => {
        if (headEnd < 0) {
          c.text += d;
          headEnd = c.text.indexOf('\r\n\r\n');
          if (headEnd >= 0) total = c.text.length - headEnd - 4;
        } else total += d.length;
        if (total >= size) {
          resolve(total);
          return;
        }
        if (fastWhen()) return;
        c.socket.pause();
        setTimeout(() => c.socket.resume(), 5);
      });
      c.socket.once('end', () => resolve(total));
      c.socket.once('close', () => resolve(total));
      c.socket.resume();
    });

  it('keeps a kept connection while a slow reader still takes the last response, past the idle deadline, response after response', async () => {
    // Long enough to be read slowly for more than twice the idle deadline.
    const size = 3 * SIZE;
    const s = await serve((_req, res) => big(res, size), { keepAliveTimeoutMs: 1000 });
    const c = new Raw(s.port);
    // The server judges a reader's progress by what it has yet to hand the kernel; what the kernel
    // holds for the reader (megabytes on loopback) it cannot see, so that part is read at once,
    // within the deadline, as a reader does that is slow only while the server waits on it.
    const handedOver = () => s.sockets[0]?.writableLength === 0;
    // Twice on one connection: the second idle period is judged on its own.
    for (const round of [1, 2]) {
      c.text = '';
      c.socket.pause();
      c.send('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      const t0 = Date.now();
      const got = await within(drainSlowly(c, size, handedOver), 30_000, `slow read ${round}`);
      assert.equal(got, size, `every byte (response ${round})`);
      assert.ok(Date.now() - t0 > 2000, `read slowly (${Date.now() - t0} ms), past twice the idle deadline`);
    }
    assert.equal(s.sockets.length, 1, 'one connection');
    c.socket.destroy();
  });

  it('delivers a response to a slow reader after its FIN while its body was being discarded', async () => {
    const s = await serve((_req, res) => big(res), { headersTimeoutMs: 200 });
    const c = new Raw(s.port);
    c.socket.pause();
    c.send('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345');
    await sleep(100);
    c.socket.end();
    await sleep(500);
    const got = await within(drainSlowly(c), 30_000, 'the slow read');
    assert.equal(got, SIZE, 'every byte, past the discarded body deadline');
  });

  it('lets go of a closing connection whose peer stops reading (linger bounds)', async () => {
    // More than the kernel's buffers take: the rest waits in the socket.
    const s = await serve((_req, res) => big(res, 64 * 1024 * 1024));
    const c = new Raw(s.port);
    c.socket.pause();
    c.send('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    await waitFor(() => s.sockets.length === 1, 'the connection');
    const server = s.sockets[0] as Socket;
    await waitFor(() => server.destroyed, 'the server to let go of a peer that never reads', 12_000);
    c.socket.destroy();
  });
});

describe('Http1Server: limits, errors and handover', () => {
  it('answers 400, 431 and a Host-less HTTP/1.1 request with 400, then closes; counted once each', async () => {
    let requests = 0;
    const s = await serve(
      (_req, res) => {
        requests++;
        answer(res, 200, 'x');
      },
      { requireHost: true },
    );
    const cases: [string, RegExp, string][] = [
      ['GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n', /^HTTP\/1\.1 400 /, 'HPE_'],
      ['GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n', /^HTTP\/1\.1 400 /, 'HPE_'],
      ['GET / HTTP/1.1\nHost: x\n\n', /^HTTP\/1\.1 400 /, 'HPE_'],
      ['\x16\x03\x01garbage\r\n\r\n', /^HTTP\/1\.1 400 /, 'HPE_'],
      [`GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(2000)}\r\n\r\n`, /^HTTP\/1\.1 431 /, 'HPE_HEADER_OVERFLOW'],
      ['GET / HTTP/1.1\r\n\r\n', /^HTTP\/1\.1 400 .*\r\nconnection: close\r\n/s, 'HPE_MISSING_HOST'],
    ];
    for (const [bytes, re, code] of cases) {
      const before = s.clientErrors.length;
      const c = new Raw(s.port).send(bytes);
      const t = await c.untilClosed();
      assert.match(t, re, JSON.stringify(bytes.slice(0, 60)));
      assert.equal(s.clientErrors.length - before, 1, `counted once: ${JSON.stringify(bytes.slice(0, 60))}`);
      assert.ok((s.clientErrors.at(-1)?.code ?? '').startsWith(code), s.clientErrors.at(-1)?.code);
    }
    assert.equal(requests, 0, 'no request reached the handler');
  });

  it('answers 408 to headers not complete in time, and closes idle keep-alive connections', async () => {
    const s = await serve((_req, res) => answer(res, 200, 'ok'), { headersTimeoutMs: 200, keepAliveTimeoutMs: 300 });
    const slow = new Raw(s.port).send('GET / HTTP/1.1\r\nHost: x\r\n');
    const t0 = Date.now();
    assert.match(await within(slow.untilClosed(), 3000, '408'), /^HTTP\/1\.1 408 /);
    assert.ok(Date.now() - t0 >= 150);
    assert.equal(s.clientErrors.at(-1)?.code, 'ERR_HTTP_REQUEST_TIMEOUT');
    // Nothing at all after connecting counts too.
    const silent = new Raw(s.port);
    assert.match(await within(silent.untilClosed(), 3000, '408 for silence'), /^HTTP\/1\.1 408 /);
    const idle = new Raw(s.port).send('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    await idle.until(/ok$/);
    const t1 = Date.now();
    const text = await within(idle.untilClosed(), 3000, 'the idle timeout');
    assert.ok(Date.now() - t1 >= 200, 'kept until the idle timeout');
    assert.deepEqual(idle.statuses, [200], 'closed silently');
    assert.match(text, /ok$/);
  });

  it('closes the connection of a handler that throws (reported), and keeps serving others', async () => {
    const s = await serve((req, res) => {
      if (req.url === '/throw') throw new Error('defect');
      answer(res, 200, 'fine');
    });
    const bad = new Raw(s.port).send('GET /throw HTTP/1.1\r\nHost: x\r\n\r\n');
    await bad.untilClosed();
    assert.equal(s.failures.length, 1);
    assert.match(String(s.failures[0]), /defect/);
    // Pipelined behind a good request: the throw happens outside the parser's callback.
    const piped = new Raw(s.port).send('GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /throw HTTP/1.1\r\nHost: x\r\n\r\n');
    await piped.untilClosed();
    assert.deepEqual(piped.statuses, [200]);
    assert.equal(s.failures.length, 2);
    const good = new Raw(s.port).send('GET /ok HTTP/1.1\r\nHost: x\r\n\r\n');
    await good.until(/fine$/);
    good.socket.destroy();
  });

  it('hands a CONNECT over with the bytes after its head; serves an upgrade it declines as HTTP/1 and reads on', async () => {
    const s = await serve((req, res) => answer(res, req.upgrade ? 501 : 200, `${req.url} upgrade=${req.upgrade}`));
    const c = new Raw(s.port).send('CONNECT db:5432 HTTP/1.1\r\nHost: db:5432\r\n\r\nearly bytes');
    await waitFor(() => s.connects.length === 1, 'the handover');
    const h = s.connects[0];
    assert.equal(h?.url, 'db:5432');
    assert.equal(h?.head, 'early bytes');
    h?.socket.on('data', (d: Buffer) => h.socket.write(`echo ${d.toString('latin1')}`));
    c.send('later');
    await c.until(/echo later/);
    assert.equal(c.text.includes('HTTP/1.1'), false, 'the server wrote nothing of its own');
    c.socket.destroy();
    const u = new Raw(s.port).send('GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n');
    await u.until(/\/next upgrade=false$/);
    assert.deepEqual(u.statuses, [501, 200]);
    u.socket.destroy();
  });

  it('names every method llhttp takes as node does, QUERY and M-SEARCH included', async () => {
    const seen: string[] = [];
    const s = await serve((req, res) => {
      seen.push(req.method);
      answer(res, 200, '');
    });
    const c = new Raw(s.port).send(
      'QUERY /q HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nM-SEARCH * HTTP/1.1\r\nHost: x\r\n\r\nSOURCE / HTTP/1.1\r\nHost: x\r\n\r\n',
    );
    await waitFor(() => c.statuses.length === 3, 'three answers');
    assert.deepEqual(seen, ['QUERY', 'M-SEARCH', 'SOURCE']);
    c.socket.destroy();
  });
});
