/**
 * The HTTP/1 upstream client of both proxies: one keep-alive pool per upstream (the application,
 * or a mesh endpoint), one request per connection at a time, responses parsed by node's native
 * parser (h1/parser). It replaces undici's `Pool` (STACK.md §2.13): a relay needs none of what
 * undici's machinery is for (fetch semantics, retries, redirects, pipelining, interceptors), and
 * it cost the proxies CPU on every request. Measured (two ward meshes side by side, HTTP/1 at
 * 1,000 requests/s, 10 alternating rounds of 3 s): the pair's CPU per request 509 → 434 µs
 * (lower in 8 of 10 rounds), added latency p50 0.42 → 0.35 ms, p99 1.85 → 1.16 ms (medians).
 *
 * - **Requests** are written as given (the caller has dropped hop-by-hop headers and checked names
 *   and values: `refusalOf`), in one write with their head; a body announced by `Content-Length`
 *   goes as is, any other is sent chunked; a request with no body whose method normally carries
 *   one gets `content-length: 0`; a request without `Host` gets the pool's authority.
 * - **Responses**: 1xx are skipped; a response to HEAD has no body; a parse error, a connection
 *   closed mid-response, a status below 100, a 101 or bytes the request did not ask for fail the exchange and the
 *   connection (a server that answers more than it was asked is not trusted with another
 *   request). Backpressure both ways: the body's `onData` returning false pauses the
 *   connection until `resume()`; the request body pauses while the connection is full.
 * - **Reuse**: a connection returns to the pool after its response when both sides allow it
 *   (keep-alive, the whole request sent, nothing extra received), most recently used first. An
 *   idle connection closes after `idleTimeoutMs`, or the server's `Keep-Alive: timeout` hint less
 *   {@link KEEP_ALIVE_MARGIN_MS} when shorter (the server closes first otherwise, and a request
 *   written into that race fails); idle connections are swept, no timer per request. One that
 *   the server closes, or that receives anything while idle, is dropped at once.
 * - **Connect failures** fail every request waiting for a connection when the pool has none left
 *   (the upstream is down for them all), else only the request the connection was for; before
 *   their `onConnect`, so their bodies are unread and a caller may send them elsewhere.
 * - A handler that throws fails its exchange and closes the connection; it never escapes into
 *   the socket's event handler.
 * - No deadline on a response head or body (a proxy imposes none; the caller's client does).
 */
import { connect as connectTcp } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import { MeshError } from '../../shared/index.js';
import { createResponseParser, type Http1Parser } from './parser.js';

/** A request for {@link Http1Pool.dispatch}. */
export interface Http1PoolRequest {
  readonly method: string;
  /** Origin-form target. */
  readonly path: string;
  /** Flat name/value pairs (Latin-1), hop-by-hop headers dropped, names and values valid. */
  readonly headers: readonly string[];
  /** The body, or null for none. */
  readonly body: Readable | null;
  /** Keep the connection after a HEAD request (the server is known not to send a body anyway). */
  readonly keepAfterHead?: boolean;
  /** Ask the upstream to close after this request (`connection: close`), and never reuse its connection. */
  readonly close?: boolean;
}

/** How a pool reports an exchange. Each handler gets `onComplete` or `onError`, once. */
export interface Http1PoolHandler {
  /**
   * The request has a connection and is about to be written; `abort` cancels it (the
   * connection is closed and `onError` follows). Throwing drops the request unsent (no
   * `onError`) and keeps the connection.
   */
  onConnect(abort: (err?: Error) => void): void;
  /** The response head (flat pairs). Returning false pauses the response until `resume()`. */
  onHeaders(status: number, headers: string[], resume: () => void, reason: string): boolean;
  /** A piece of the response body. Returning false pauses the response until `resume()`. */
  onData(chunk: Buffer): boolean;
  /** The response ended; its trailers as flat pairs (empty without). */
  onComplete(trailers: string[]): void;
  /** The exchange failed (a connect failure comes before `onConnect`). */
  onError(err: Error): void;
}

/** Makes a connection to the upstream: a connected socket, or the error. */
export type Http1Connect = (callback: (err: Error | null, socket: Duplex | null) => void) => void;

/** Settings of an {@link Http1Pool}. */
export interface Http1PoolOptions {
  /** `host:port` for requests without a `Host` header. */
  readonly authority: string;
  /** Makes each connection. */
  readonly connect: Http1Connect;
  /** Upper bound of connections; requests beyond them wait. */
  readonly connections: number;
  /** An idle connection is closed after this (default {@link DEFAULT_IDLE_TIMEOUT_MS}); a server's hint may shorten it. */
  readonly idleTimeoutMs?: number;
  /** Bound on a response's header block in bytes (default 16 KiB, node's). */
  readonly maxHeaderBytes?: number;
}

/** Default of {@link Http1PoolOptions.idleTimeoutMs} (undici's, which the proxies had). */
export const DEFAULT_IDLE_TIMEOUT_MS = 4000;
/** How much before a server's `Keep-Alive: timeout` hint an idle connection is closed. */
export const KEEP_ALIVE_MARGIN_MS = 2000;
/** How often idle connections are checked for their timeout (they close up to this much early, never late). */
const SWEEP_MS = 500;
const MAX_HEADER_BYTES = 16 * 1024;

/** Methods whose requests normally carry a body: without one they get `content-length: 0` (RFC 9110 §8.6). */
const BODY_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH', 'QUERY']);

/** True when `name` (any case) is `lower`; only a name of the same length is lower-cased. */
function isHeader(name: string, lower: string): boolean {
  return name.length === lower.length && name.toLowerCase() === lower;
}

/** The last `Keep-Alive` value read and its hint: an upstream sends the same one on every response. */
let lastHintValue = '';
let lastHintMs: number | undefined;

/** The `timeout` of a `Keep-Alive` header value in ms, or undefined. */
function keepAliveHintMs(value: string): number | undefined {
  if (value === lastHintValue) return lastHintMs;
  const m = /(?:^|[\s,;])timeout\s*=\s*(\d{1,9})/i.exec(value);
  lastHintValue = value;
  lastHintMs = m === null ? undefined : Number(m[1]) * 1000;
  return lastHintMs;
}

/** Whether a response's connection persists by its version and `Connection` header (RFC 9112 §9.3). */
function persists(headers: readonly string[], minor: number): boolean {
  let close = false;
  let keepAlive = false;
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const name = headers[i] as string;
    if (!isHeader(name, 'connection')) continue;
    for (const option of (headers[i + 1] as string).toLowerCase().split(',')) {
      const o = option.trim();
      if (o === 'close') close = true;
      else if (o === 'keep-alive') keepAlive = true;
    }
  }
  return !close && (minor >= 1 || keepAlive);
}

/** One request through the pool. */
class Exchange {
  readonly request: Http1PoolRequest;
  readonly handler: Http1PoolHandler;
  /** The request is written whole (its body too). */
  sent = false;
  /** A final (non-1xx) response head arrived. */
  responding = false;
  /** Over: onComplete or onError was called, or it was dropped unsent. */
  settled = false;

  constructor(request: Http1PoolRequest, handler: Http1PoolHandler) {
    this.request = request;
    this.handler = handler;
  }

  fail(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.handler.onError(err);
  }
}

/** A socket's reference on the event loop, where it has one (net and TLS sockets). */
interface Referable {
  ref?(): void;
  unref?(): void;
}

/** One upstream connection and its parser. */
class Connection {
  readonly socket: Duplex;
  readonly #pool: Http1Pool;
  readonly #parser: Http1Parser;
  /** The exchange on it (busy), or undefined (idle). */
  exchange: Exchange | undefined;
  /** When it became idle (Date.now()). */
  idleSince = 0;
  /** Its idle timeout, possibly shortened by the server's hint. */
  idleTimeoutMs: number;
  /** Not to be reused (the server or the request said so, or it misbehaved). */
  spent = false;
  closed = false;
  /** The exchange's response ended during the current `execute`. */
  #completedNow = false;
  /** What a handler threw inside the parser's callbacks (handled once `execute` returns). */
  #handlerError: Error | undefined;
  #error: Error | undefined;
  #bodyRemaining = -1;
  #chunked = false;
  #stopBody: (() => void) | undefined;

  constructor(pool: Http1Pool, socket: Duplex, idleTimeoutMs: number, maxHeaderBytes: number) {
    this.#pool = pool;
    this.socket = socket;
    this.idleTimeoutMs = idleTimeoutMs;
    this.#parser = createResponseParser(
      {
        begin: () => {
          const ex = this.exchange;
          // A message nobody asked for: the server answers more than it was asked.
          if (ex === undefined || ex.responding) this.spent = true;
        },
        head: (status, reason, headers, keepAlive, upgrade, minor) => this.#onHead(status, reason, headers, keepAlive, upgrade, minor),
        body: (chunk) => {
          const ex = this.exchange;
          if (ex === undefined || ex.settled || this.#handlerError !== undefined) return;
          try {
            if (!ex.handler.onData(chunk)) socket.pause();
          } catch (e) {
            this.#thrown(e);
          }
        },
        complete: (trailers) => this.#onComplete(trailers),
      },
      maxHeaderBytes,
    );
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('end', () => this.#onEnd());
    socket.on('error', (err: Error) => {
      this.#error ??= err;
    });
    socket.on('close', () => this.#onClose());
  }

  /** Writes `ex`'s request: the head, then the body as it comes. False: refused unsent (`ex` failed), the connection still idle. */
  start(ex: Exchange): boolean {
    this.exchange = ex;
    this.#completedNow = false;
    (this.socket as Referable).ref?.();
    const req = ex.request;
    let head = `${req.method} ${req.path} HTTP/1.1\r\n`;
    const h = req.headers;
    let hasHost = false;
    let length = -1;
    for (let i = 0; i + 1 < h.length; i += 2) {
      const name = h[i] as string;
      const value = h[i + 1] as string;
      if (isHeader(name, 'host')) hasHost = true;
      else if (isHeader(name, 'content-length')) length = Number(value);
      head += `${name}: ${value}\r\n`;
    }
    if (!hasHost) head += `host: ${this.#pool.authority}\r\n`;
    const body = req.body;
    if (body === null) {
      if (length > 0) {
        // A length with nothing to send: the upstream would read the next request as its body.
        this.exchange = undefined;
        ex.fail(new MeshError('ERR_HTTP1_BODY_LENGTH', 'the request announces a body it does not have'));
        return false;
      }
      if (length < 0 && BODY_METHODS.has(req.method)) head += 'content-length: 0\r\n';
    }
    // An application may send a body to HEAD anyway: its connection is not reused after one.
    if (req.method === 'HEAD' && req.keepAfterHead !== true) this.spent = true;
    if (req.close === true) {
      head += 'connection: close\r\n';
      this.spent = true;
    }
    if (body === null) {
      ex.sent = true;
      this.socket.write(`${head}\r\n`, 'latin1');
      return true;
    }
    this.#chunked = length < 0;
    this.#bodyRemaining = length;
    if (this.#chunked) head += 'transfer-encoding: chunked\r\n';
    this.socket.write(`${head}\r\n`, 'latin1');
    this.#sendBody(ex, body);
    return true;
  }

  #sendBody(ex: Exchange, body: Readable): void {
    const socket = this.socket;
    const onDrain = (): void => {
      body.resume();
    };
    const stop = (): void => {
      this.#stopBody = undefined;
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('error', onFail);
      body.off('close', onClose);
      socket.off('drain', onDrain);
      // Not sent further (the upstream answered or failed first): what is left is read and
      // discarded, never left paused, which would stall the client's connection.
      if (!body.readableEnded) body.resume();
    };
    const onData = (chunk: Buffer | string): void => {
      const buf = typeof chunk === 'string' ? Buffer.from(chunk, 'latin1') : chunk;
      if (buf.length === 0) return;
      let ok: boolean;
      if (this.#chunked) {
        socket.cork();
        socket.write(`${buf.length.toString(16)}\r\n`, 'latin1');
        socket.write(buf);
        ok = socket.write('\r\n', 'latin1');
        socket.uncork();
      } else {
        this.#bodyRemaining -= buf.length;
        if (this.#bodyRemaining < 0) {
          // More than its Content-Length: it must never run into the next request.
          this.abort(ex, new MeshError('ERR_HTTP1_BODY_LENGTH', 'the request body is longer than its Content-Length'));
          return;
        }
        ok = socket.write(buf);
      }
      if (!ok) {
        body.pause();
        socket.once('drain', onDrain);
      }
    };
    const onEnd = (): void => {
      stop();
      if (this.#chunked) socket.write('0\r\n\r\n', 'latin1');
      else if (this.#bodyRemaining !== 0) {
        this.abort(ex, new MeshError('ERR_HTTP1_BODY_LENGTH', 'the request body is shorter than its Content-Length'));
        return;
      }
      ex.sent = true;
    };
    const onFail = (err?: Error): void => {
      this.abort(ex, err instanceof Error ? err : new MeshError('ERR_HTTP1_BODY_ABORTED', 'the request body was aborted'));
    };
    const onClose = (): void => {
      if (!body.readableEnded) onFail();
    };
    this.#stopBody = stop;
    body.on('data', onData);
    body.on('end', onEnd);
    body.on('error', onFail);
    body.on('close', onClose);
    if (body.isPaused()) body.resume();
  }

  /** Cancels `ex` if it is on this connection: the connection closes and `ex` fails with `err`. */
  abort(ex: Exchange, err: Error): void {
    if (this.exchange !== ex || this.closed) return;
    this.spent = true;
    this.#stopBody?.();
    this.socket.destroy();
    ex.fail(err);
  }

  #onHead(status: number, reason: string, headers: string[], keepAlive: boolean, upgrade: boolean, minor: number): boolean {
    const ex = this.exchange;
    if (ex === undefined || ex.settled) {
      this.spent = true;
      return true;
    }
    // Below 100 is no status at all (llhttp takes any three digits): not informational, not a
    // response; what follows it cannot be trusted to be the answer either.
    if (status < 100) {
      this.abort(ex, new MeshError('ERR_HTTP1_BAD_STATUS', `the upstream answered with status ${status}`));
      return true;
    }
    // 1xx (100, 102, 103): informational, not the response.
    if (status < 200 && status !== 101) return true;
    if (status === 101 || upgrade) {
      this.abort(ex, new MeshError('ERR_HTTP1_UPGRADE', `the upstream switched protocols (status ${status}) unasked`));
      return true;
    }
    ex.responding = true;
    const isHead = ex.request.method === 'HEAD';
    // The answer to HEAD has no body whatever its framing says: only the version and
    // `Connection` decide whether the connection stays.
    if (isHead ? !persists(headers, minor) : !keepAlive) this.spent = true;
    else {
      for (let i = 0; i + 1 < headers.length; i += 2) {
        const name = headers[i] as string;
        if (!isHeader(name, 'keep-alive')) continue;
        const hint = keepAliveHintMs(headers[i + 1] as string);
        if (hint === undefined) continue;
        const ms = hint - KEEP_ALIVE_MARGIN_MS;
        if (ms <= 0) this.spent = true;
        else if (ms < this.idleTimeoutMs) this.idleTimeoutMs = ms;
      }
    }
    try {
      if (!ex.handler.onHeaders(status, headers, () => this.#resume(ex), reason)) this.socket.pause();
    } catch (e) {
      this.#thrown(e);
    }
    return isHead;
  }

  #resume(ex: Exchange): void {
    if (this.exchange === ex && !this.closed) this.socket.resume();
  }

  #onComplete(trailers: string[]): void {
    const ex = this.exchange;
    if (ex === undefined || ex.settled) {
      this.spent = true;
      return;
    }
    // The end of a 1xx: the response is still to come. After a handler threw, the exchange fails instead.
    if (!ex.responding || this.#handlerError !== undefined) return;
    this.#completedNow = true;
    ex.settled = true;
    try {
      ex.handler.onComplete(trailers);
    } catch (e) {
      this.#thrown(e);
    }
  }

  /** A handler threw: the exchange fails and the connection closes once the parser returns. */
  #thrown(e: unknown): void {
    this.spent = true;
    this.#handlerError ??= e instanceof Error ? e : new Error(String(e));
  }

  #onData(chunk: Buffer): void {
    if (this.closed) return;
    const ex = this.exchange;
    if (ex === undefined || ex.settled) {
      // Bytes nothing asked for (on an idle connection, or after the answer): not to be trusted.
      this.spent = true;
      this.socket.destroy();
      return;
    }
    this.#completedNow = false;
    const r = this.#parser.execute(chunk);
    const thrown = this.#handlerError;
    if (r instanceof Error || thrown !== undefined) {
      this.#handlerError = undefined;
      this.#stopBody?.();
      this.socket.destroy();
      ex.fail(thrown ?? (r as Error));
      return;
    }
    if (!this.#completedNow) return;
    // An answer before the whole request was sent: the rest of the request is not sent, and
    // the connection cannot be reused.
    if (!ex.sent) this.spent = true;
    this.#release();
  }

  #onEnd(): void {
    const ex = this.exchange;
    this.spent = true;
    if (ex !== undefined && !ex.settled && !this.closed) {
      // A body delimited by the close ends here; anything else was cut short.
      const err = this.#handlerError ?? this.#parser.finish() ?? this.#handlerError;
      if (err !== undefined) ex.fail(err);
      else if (!ex.settled) ex.fail(new MeshError('ERR_HTTP1_CLOSED', 'the upstream closed the connection before the response ended'));
    }
    this.socket.destroy();
  }

  #onClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.spent = true;
    this.#stopBody?.();
    const ex = this.exchange;
    this.exchange = undefined;
    this.#parser.close();
    ex?.fail(this.#error ?? new MeshError('ERR_HTTP1_CLOSED', 'the upstream connection closed before the response ended'));
    this.#pool.connectionClosed(this);
  }

  /** The exchange is over: the connection goes back to the pool, or closes when spent. */
  #release(): void {
    this.exchange = undefined;
    this.#stopBody?.();
    // Bytes already buffered behind the response (read while it was paused), or the upstream's
    // end: nothing the next request may be answered with.
    if (this.socket.readableLength > 0 || this.socket.readableEnded) this.spent = true;
    if (this.spent) {
      this.socket.destroy();
      return;
    }
    this.idleSince = Date.now();
    (this.socket as Referable).unref?.();
    // Paused by the last response's backpressure: idle, it reads again (anything it gets is then
    // unasked for, and closes it).
    this.socket.resume();
    this.#pool.connectionIdle(this);
  }
}

/** A keep-alive pool of HTTP/1 connections to one upstream. */
export class Http1Pool {
  readonly authority: string;
  readonly #connect: Http1Connect;
  readonly #max: number;
  readonly #idleTimeoutMs: number;
  readonly #maxHeaderBytes: number;
  readonly #conns = new Set<Connection>();
  /** Idle connections, most recently used last. */
  readonly #idle: Connection[] = [];
  readonly #queue: Exchange[] = [];
  #connecting = 0;
  #sweep: NodeJS.Timeout | undefined;
  #closed = false;
  #destroyed = false;
  #whenEmpty: (() => void)[] = [];

  constructor(opts: Http1PoolOptions) {
    this.authority = opts.authority;
    this.#connect = opts.connect;
    this.#max = Math.max(1, opts.connections);
    this.#idleTimeoutMs = opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    this.#maxHeaderBytes = opts.maxHeaderBytes ?? MAX_HEADER_BYTES;
  }

  /** Closed: takes no new request (those under way finish). */
  get closed(): boolean {
    return this.#closed;
  }

  get destroyed(): boolean {
    return this.#destroyed;
  }

  /** Connections held (busy or idle), and requests under way or waiting. */
  get stats(): { readonly connected: number; readonly size: number } {
    let busy = 0;
    for (const c of this.#conns) if (c.exchange !== undefined) busy++;
    return { connected: this.#conns.size, size: busy + this.#queue.length };
  }

  /** Sends `request`; `handler` hears how it goes. A closed pool fails it (asynchronously). */
  dispatch(request: Http1PoolRequest, handler: Http1PoolHandler): void {
    const ex = new Exchange(request, handler);
    if (this.#closed) {
      queueMicrotask(() => ex.fail(new MeshError('ERR_HTTP1_POOL_CLOSED', 'the upstream pool is closed')));
      return;
    }
    this.#queue.push(ex);
    this.#drain();
  }

  /** Takes no new request; resolves once those under way and waiting are over and every connection is closed. */
  close(): Promise<void> {
    this.#closed = true;
    return this.#empty();
  }

  /** Fails every request and closes every connection. */
  destroy(): Promise<void> {
    this.#closed = true;
    this.#destroyed = true;
    const err = new MeshError('ERR_HTTP1_POOL_CLOSED', 'the upstream pool was destroyed');
    for (const ex of this.#queue.splice(0)) ex.fail(err);
    for (const c of this.#conns) c.socket.destroy();
    return this.#empty();
  }

  /** From a connection: it is idle again. */
  connectionIdle(conn: Connection): void {
    if (this.#closed) {
      conn.socket.destroy();
      return;
    }
    this.#idle.push(conn);
    this.#armSweep();
    this.#drain();
  }

  /** From a connection: it closed. */
  connectionClosed(conn: Connection): void {
    if (!this.#conns.delete(conn)) return;
    const i = this.#idle.lastIndexOf(conn);
    if (i >= 0) this.#idle.splice(i, 1);
    this.#drain();
    this.#settleIfEmpty();
  }

  #drain(): void {
    while (this.#queue.length > 0) {
      const conn = this.#idle.pop();
      if (conn !== undefined) {
        // One the upstream ended, or that spoke out of turn, is on its way out ('close' comes later).
        if (conn.spent || conn.closed || conn.socket.destroyed) {
          conn.socket.destroy();
          continue;
        }
        this.#start(conn, this.#queue.shift() as Exchange);
        continue;
      }
      if (this.#destroyed || this.#conns.size + this.#connecting >= this.#max || this.#connecting >= this.#queue.length) return;
      this.#open();
    }
    if (this.#closed) this.#settleIfEmpty();
  }

  #start(conn: Connection, ex: Exchange): void {
    try {
      ex.handler.onConnect((err) => conn.abort(ex, err ?? new MeshError('ERR_HTTP1_ABORTED', 'the request was aborted')));
    } catch {
      // The caller no longer wants it: dropped unsent, and the connection stays idle.
      ex.settled = true;
      this.#backToIdle(conn);
      return;
    }
    if (!conn.start(ex)) this.#backToIdle(conn);
  }

  #backToIdle(conn: Connection): void {
    conn.idleSince = Date.now();
    (conn.socket as Referable).unref?.();
    this.#idle.push(conn);
    this.#armSweep();
  }

  #open(): void {
    this.#connecting++;
    let called = false;
    this.#connect((err, socket) => {
      if (called) return;
      called = true;
      this.#connecting--;
      if (err !== null || socket === null) {
        const failure = err ?? new MeshError('ERR_HTTP1_CONNECT', 'the upstream connection could not be made');
        // With no connection left, the upstream is unreachable for every request waiting on it;
        // otherwise only the one this connection was opened for fails, and the rest wait for
        // the connections there are.
        const failed = this.#conns.size === 0 ? this.#queue.splice(0) : this.#queue.splice(0, 1);
        for (const ex of failed) ex.fail(failure);
        this.#settleIfEmpty();
        return;
      }
      if (this.#destroyed || socket.destroyed) {
        socket.destroy();
        this.#drain();
        this.#settleIfEmpty();
        return;
      }
      const conn = new Connection(this, socket, this.#idleTimeoutMs, this.#maxHeaderBytes);
      this.#conns.add(conn);
      const ex = this.#queue.shift();
      if (ex !== undefined) this.#start(conn, ex);
      else {
        conn.idleSince = Date.now();
        (socket as Referable).unref?.();
        this.connectionIdle(conn);
      }
      this.#drain();
    });
  }

  #armSweep(): void {
    if (this.#sweep !== undefined) return;
    this.#sweep = setInterval(() => this.#sweepIdle(), SWEEP_MS);
    this.#sweep.unref();
  }

  #sweepIdle(): void {
    const now = Date.now();
    for (let i = this.#idle.length - 1; i >= 0; i--) {
      const c = this.#idle[i] as Connection;
      // Up to one sweep early rather than late: the server may close at its own timeout.
      if (now - c.idleSince + SWEEP_MS >= c.idleTimeoutMs) {
        this.#idle.splice(i, 1);
        c.socket.destroy();
      }
    }
    if (this.#idle.length === 0) this.#stopSweep();
  }

  #stopSweep(): void {
    clearInterval(this.#sweep);
    this.#sweep = undefined;
  }

  #empty(): Promise<void> {
    const done = new Promise<void>((resolve) => this.#whenEmpty.push(resolve));
    this.#settleIfEmpty();
    return done;
  }

  #settleIfEmpty(): void {
    if (!this.#closed) return;
    // Closing: idle connections are not kept.
    for (const c of this.#idle.splice(0)) c.socket.destroy();
    if (this.#conns.size > 0 || this.#queue.length > 0 || this.#connecting > 0) return;
    this.#stopSweep();
    for (const resolve of this.#whenEmpty.splice(0)) resolve();
  }
}

/** How long a plain TCP connect may take (undici's default, which the proxies had). */
export const CONNECT_TIMEOUT_MS = 10_000;

/** A plain TCP {@link Http1Connect} to `host:port` (no Nagle delay), failing after `timeoutMs`. */
export function plainConnect(host: string, port: number, timeoutMs = CONNECT_TIMEOUT_MS): Http1Connect {
  return (callback) => {
    const socket = connectTcp({ host, port, noDelay: true });
    const timer = setTimeout(() => {
      socket.destroy();
      callback(new MeshError('ERR_HTTP1_CONNECT_TIMEOUT', `connecting to ${host}:${port} timed out after ${timeoutMs} ms`), null);
    }, timeoutMs);
    timer.unref();
    const onError = (err: Error): void => {
      clearTimeout(timer);
      callback(err, null);
    };
    socket.once('error', onError);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.off('error', onError);
      callback(null, socket);
    });
  };
}

/** True for a pool that takes requests: neither closed (retired) nor destroyed. */
export function isOpen(pool: Http1Pool | undefined): pool is Http1Pool {
  return pool !== undefined && !pool.closed;
}

/** Destroys and forgets the pools of `pools` that hold no connection and no request. */
export function dropIdle(pools: Map<string, Http1Pool>): void {
  for (const [key, pool] of pools) {
    const st = pool.stats;
    if (st.connected !== 0 || st.size !== 0) continue;
    void pool.destroy();
    pools.delete(key);
  }
}
