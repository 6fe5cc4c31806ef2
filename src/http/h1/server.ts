/**
 * The server side of HTTP/1 in both proxies: requests parsed by node's native parser
 * (h1/parser), responses framed here. It replaces node's `http.Server`, whose per-request
 * machinery (an `IncomingMessage` and a `ServerResponse` stream each, their events and ticks) was
 * most of a proxy's JavaScript time per HTTP/1 request; the outbound and inbound proxies each
 * parse and answer every request, so it counted twice.
 *
 * - **Requests** are served one at a time per connection, in order: one pipelined behind a
 *   response in progress waits (its body, if any, kept) and the connection stops reading until
 *   its turn (a head begun meanwhile is not timed: the wait is ours). Requests behind a response
 *   that closes the connection are never served. A request whose headers announce a body (`Content-Length`, `Transfer-Encoding`)
 *   has it as a `Readable` with backpressure (the connection stops reading while it is full);
 *   one without has none, and costs no stream.
 * - **Responses**: {@link Http1ServerResponse.writeHead} keeps the head until the first body
 *   bytes or the end, so a small response leaves in one write. A `Content-Length` is kept and
 *   held to (more bytes, or fewer by the end, close the connection: the client would read the
 *   next response wrong); without one the body is chunked (trailers allowed) for an HTTP/1.1
 *   client and delimited by the close for an HTTP/1.0 one. No body is sent for 1xx, 204, 304 or
 *   HEAD. Every response has `date`; a kept connection says `keep-alive: timeout=<s>`, a closing
 *   one `connection: close`.
 * - **Keep-alive**: the connection stays after a response unless the request or the response
 *   said otherwise (llhttp's verdict on version and `Connection`, `keepAlive = false`), the body
 *   was delimited by the close, or a request expecting `100-continue` was answered without one
 *   (its body may follow or not: the connection cannot be read reliably).
 * - **A body the response did not wait for** (a denial of an upload, say) is read and discarded
 *   to keep the connection, and must end within `headersTimeoutMs`, else the connection closes.
 * - **Limits**: a header block above `maxHeaderBytes` (431), one not complete `headersTimeoutMs`
 *   after the request's first byte (408), and parse errors (400; an oversized chunk extension
 *   413) are answered when no response is under way, then the connection closes. An idle
 *   connection closes after `keepAliveTimeoutMs` (from the end of the last response, extended
 *   while its bytes still move to a slow reader). Deadlines are checked every `checkIntervalMs`
 *   over all connections (no timer per request), on a monotonic clock.
 * - **Strict parsing** (llhttp, no lenient flags): `Content-Length` with `Transfer-Encoding`,
 *   repeated or invalid `Content-Length`, bare LF, invalid characters are errors before a request
 *   exists. So is a `Transfer-Encoding` whose final coding is not chunked (RFC 9112 §6.3: the
 *   body's length is unknowable), which llhttp reports only after the head: it is refused here,
 *   400 and close, before any handler sees it, for every user of the server.
 * - **CONNECT** hands the socket over (`connect`, with the bytes after the head); another
 *   upgrade (`Upgrade` with `Connection: upgrade`) is served as a plain request, its `upgrade`
 *   set: declining it is the caller's (the next request is parsed as HTTP/1).
 * - **The client's FIN** ends an idle connection; with a request under way (or begun) the client
 *   is taken to be gone, as node's server does: the connection closes and the exchange is
 *   cancelled. Handlers that throw close the connection; nothing escapes into the socket's
 *   events.
 */
import { STATUS_CODES } from 'node:http';
import { type Duplex, Readable } from 'node:stream';
import { unsentBytes } from '../node-internals.js';
import { lingerThenDestroy } from '../socket.js';
import { createRequestParser, type Http1Parser } from './parser.js';

/** A request, as the server hands it over. */
export interface Http1ServerRequest {
  readonly method: string;
  /** The request target as sent. */
  readonly url: string;
  /** Flat name/value pairs in their order, as sent (Latin-1). */
  readonly rawHeaders: readonly string[];
  /** 0 for HTTP/1.0, 1 for HTTP/1.1. */
  readonly minorVersion: number;
  /** The request asked for another protocol (`Upgrade` with `Connection: upgrade`, or CONNECT). */
  readonly upgrade: boolean;
  /** It carries `Expect: 100-continue` (HTTP/1.1): see {@link Http1ServerResponse.writeContinue}. */
  readonly expectsContinue: boolean;
  /** Its body, when its headers announce one (`Content-Length`, even 0, or `Transfer-Encoding`). */
  readonly body: Readable | null;
  /** The whole request, body included, has been read. */
  readonly complete: boolean;
}

/** How the server reports to its owner; `C` is what the owner attached to each connection. */
export interface Http1ServerEvents<C> {
  /** A request to answer through `res` (one at a time per connection). */
  request(req: Http1ServerRequest, res: Http1ServerResponse, ctx: C): void;
  /**
   * A CONNECT request: the socket is the callee's from now on (the server's listeners removed,
   * not flowing), with `head`, the bytes read after the request's head.
   */
  connect(req: Http1ServerRequest, socket: Duplex, head: Buffer, ctx: C): void;
  /**
   * The connection fails for the client's fault (`code`: the parser's `HPE_*`,
   * `ERR_HTTP_REQUEST_TIMEOUT` for a header deadline, or `ERR_HTTP1_PIPELINED_CONNECT` for a
   * CONNECT sent behind another request). `status` is what it is answered with, or undefined
   * when nothing can be answered (a response was under way, or the socket is gone).
   */
  clientError?(code: string, status: number | undefined, ctx: C): void;
  /** A handler threw: the connection is destroyed. */
  failed?(err: unknown, ctx: C): void;
}

/** Settings of an {@link Http1Server}. */
export interface Http1ServerOptions<C> {
  readonly events: Http1ServerEvents<C>;
  /** Bound on a request's header block in bytes. */
  readonly maxHeaderBytes: number;
  /** A request's header block must be complete this long after its first byte (also bounds a discarded body). */
  readonly headersTimeoutMs: number;
  /** An idle connection is closed after this. */
  readonly keepAliveTimeoutMs: number;
  /** How often deadlines are checked (default `min(1000, headersTimeoutMs)`). */
  readonly checkIntervalMs?: number;
  /** An HTTP/1.1 request without `Host` is answered 400 (RFC 9112 §3.2). */
  readonly requireHost?: boolean;
}

function noop(): void {}

/** Statuses whose responses never have a body (RFC 9110 §6.4.1). */
function bodiless(status: number): boolean {
  return status < 200 || status === 204 || status === 304;
}

/** A header name: a token (RFC 9110 §5.1). */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** What a header value must not hold: line ends and NUL (and other controls but tab). */
const BAD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
/** A reason phrase: printable, no line end. */
const REASON = /^[\t\x20-\x7e\x80-\xff]*$/;

const CRLF = '\r\n';
/** A response body up to this size leaves with its head in one buffer (one write). */
const COALESCE_BYTES = 16 * 1024;

/** The `date` header's value, formatted once a second. */
let dateValue = '';
let dateSecond = 0;
function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateValue = new Date(now).toUTCString();
  }
  return dateValue;
}

/** The deadlines' clock: monotonic milliseconds (a wall-clock step must not open or close them). */
function clock(): number {
  return performance.now();
}

/** A request being read, answered, or waiting its turn. */
class Message implements Http1ServerRequest {
  readonly method: string;
  readonly url: string;
  readonly rawHeaders: readonly string[];
  readonly minorVersion: number;
  readonly upgrade: boolean;
  readonly expectsContinue: boolean;
  body: Readable | null = null;
  complete = false;
  /** llhttp's verdict: the client keeps the connection after this request. */
  readonly keepAlive: boolean;
  /** Its headers announce a body (`Content-Length`, even 0, or `Transfer-Encoding`). */
  readonly announcesBody: boolean;
  /** It has a `Host` header. */
  readonly hasHost: boolean;
  /** Its `Transfer-Encoding` (all of them, in order) does not end with `chunked`: its body cannot be delimited. */
  readonly unframed: boolean;
  /** The body is no longer wanted (its response ended): what comes is dropped. */
  discarding = false;
  /** The body's reader is full: the connection waits for it to read. */
  bodyFull = false;
  res: Http1ServerResponse | undefined;

  constructor(method: string, url: string, rawHeaders: string[], minor: number, keepAlive: boolean, upgrade: boolean) {
    this.method = method;
    this.url = url;
    this.rawHeaders = rawHeaders;
    this.minorVersion = minor;
    this.keepAlive = keepAlive;
    this.upgrade = upgrade;
    // One pass over the headers for what the server needs of them.
    let expects = false;
    let announces = false;
    let host = false;
    let lastCoding: string | undefined;
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      const name = rawHeaders[i] as string;
      const n = name.length;
      if (n === 4 && name.toLowerCase() === 'host') host = true;
      else if (n === 6 && minor === 1 && name.toLowerCase() === 'expect' && (rawHeaders[i + 1] as string).toLowerCase() === '100-continue') expects = true;
      else if (n === 14 && name.toLowerCase() === 'content-length') announces = true;
      else if (n === 17 && name.toLowerCase() === 'transfer-encoding') {
        announces = true;
        const value = rawHeaders[i + 1] as string;
        lastCoding = value.slice(value.lastIndexOf(',') + 1);
      }
    }
    this.expectsContinue = expects;
    this.announcesBody = announces;
    this.hasHost = host;
    this.unframed = lastCoding !== undefined && lastCoding.trim().toLowerCase() !== 'chunked';
  }
}

/**
 * The response to one request. Its head is written by {@link writeHead}, its body by
 * {@link write} and {@link end}; {@link destroy} closes the connection (the only way to abort an
 * HTTP/1 response). `onClose` hooks run once: when it has ended (`finished` true) or when the
 * connection closed first.
 */
export class Http1ServerResponse {
  /** Keep the connection after this response (the caller may clear it; never set it back). */
  keepAlive: boolean;
  statusCode = 0;
  headersSent = false;
  finished = false;
  /** Called when the socket can take more after {@link write} returned false. */
  ondrain: (() => void) | undefined;
  readonly #conn: ServerConnection<unknown>;
  readonly #msg: Message;
  /** The head, kept until the first body bytes or the end. */
  #head: string | undefined;
  /** A first body chunk kept with the head (for one write), until the end or the next tick. */
  #held: Buffer | undefined;
  #flushScheduled = false;
  #chunked = false;
  #noBody = false;
  /** Bytes the `Content-Length` still promises, or -1. */
  #remaining = -1;
  #sent100 = false;
  #closeHooks: ((finished: boolean) => void)[] | undefined;
  #closed = false;

  constructor(conn: ServerConnection<unknown>, msg: Message) {
    this.#conn = conn;
    this.#msg = msg;
    this.keepAlive = msg.keepAlive;
  }

  /** The connection is gone (nothing more can be written). */
  get destroyed(): boolean {
    return this.#conn.destroyed;
  }

  /** Runs `hook` once when the response has ended or its connection closed first. */
  onClose(hook: (finished: boolean) => void): void {
    if (this.#closed) {
      hook(this.finished);
      return;
    }
    if (this.#closeHooks === undefined) this.#closeHooks = [hook];
    else this.#closeHooks.push(hook);
  }

  /** Sends `100 Continue` (once, and only to a request that expects it, before the head). */
  writeContinue(): void {
    if (this.#sent100 || this.headersSent || !this.#msg.expectsContinue || this.destroyed) return;
    this.#sent100 = true;
    this.#conn.socket.write('HTTP/1.1 100 Continue\r\n\r\n', 'latin1');
  }

  /**
   * The response head: `status` (100-999, not 101), the reason phrase (the status's own when
   * empty or undefined), and header pairs without hop-by-hop headers (the server frames the body
   * itself). Throws for an invalid status, reason, name or value, with nothing written.
   */
  writeHead(status: number, reason: string | undefined, headers: readonly string[]): void {
    if (this.headersSent) throw new Error('the response head was already written');
    if (!Number.isInteger(status) || status < 200 || status > 999) throw new RangeError(`invalid response status ${status}`);
    const phrase = reason === undefined || reason === '' ? (STATUS_CODES[status] ?? 'unknown') : reason;
    if (!REASON.test(phrase)) throw new Error('invalid character in the reason phrase');
    const msg = this.#msg;
    let head = `HTTP/1.1 ${status} ${phrase}${CRLF}`;
    let length = -1;
    let hasDate = false;
    for (let i = 0; i + 1 < headers.length; i += 2) {
      const name = headers[i] as string;
      const value = headers[i + 1] as string;
      if (!HEADER_NAME.test(name)) throw new Error(`invalid header name ${JSON.stringify(name.slice(0, 100))}`);
      if (BAD_VALUE.test(value)) throw new Error(`invalid character in the value of the ${name} header`);
      const n = name.length;
      if (n === 14 && name.toLowerCase() === 'content-length') {
        if (length >= 0 || !/^\d{1,15}$/.test(value)) throw new Error('invalid or repeated content-length');
        length = Number(value);
      } else if (n === 4 && !hasDate && name.toLowerCase() === 'date') hasDate = true;
      head += `${name}: ${value}${CRLF}`;
    }
    if (!hasDate) head += `date: ${httpDate()}${CRLF}`;
    this.#noBody = bodiless(status) || msg.method === 'HEAD';
    if (!this.#noBody) {
      if (length >= 0) this.#remaining = length;
      else if (msg.minorVersion >= 1) {
        this.#chunked = true;
        head += `transfer-encoding: chunked${CRLF}`;
      } else {
        // An HTTP/1.0 client: the body ends with the connection.
        this.keepAlive = false;
      }
    }
    // A client that expected 100-continue and did not get it may send its body or not.
    if (msg.expectsContinue && !this.#sent100 && !msg.complete) this.keepAlive = false;
    if (!this.keepAlive || this.#conn.closing) head += `connection: close${CRLF}`;
    else if (msg.minorVersion === 0) head += `connection: keep-alive${CRLF}${this.#conn.keepAliveHeader}`;
    else head += this.#conn.keepAliveHeader;
    this.statusCode = status;
    this.headersSent = true;
    this.#head = head + CRLF;
  }

  /** A piece of the body; false when the socket is full (wait for {@link ondrain}). */
  write(chunk: Buffer): boolean {
    if (this.finished || this.destroyed) return false;
    if (!this.headersSent) throw new Error('the response head is not written');
    const n = chunk.length;
    if (n === 0 || this.#noBody) return true;
    if (this.#remaining >= 0) {
      this.#remaining -= n;
      if (this.#remaining < 0) {
        // More than its Content-Length: the client would take the rest for the next response.
        this.#conn.destroy();
        return false;
      }
    }
    const socket = this.#conn.socket;
    if (this.#head !== undefined && this.#held === undefined && n <= COALESCE_BYTES) {
      // Kept for one write with the head: the end usually comes in the same tick.
      this.#held = chunk;
      if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        process.nextTick(flushHeld, this);
      }
      return true;
    }
    this.flushHead();
    if (!this.#chunked) return socket.write(chunk);
    socket.cork();
    socket.write(`${n.toString(16)}${CRLF}`, 'latin1');
    socket.write(chunk);
    const ok = socket.write(CRLF, 'latin1');
    socket.uncork();
    return ok;
  }

  /** Writes what is kept (the head, and a first chunk). */
  flushHead(): void {
    this.#flushScheduled = false;
    const head = this.#head;
    if (head === undefined) return;
    this.#head = undefined;
    const held = this.#held;
    this.#held = undefined;
    if (this.destroyed) return;
    this.#conn.socket.write(held === undefined ? head : this.#framed(head, held, ''), 'latin1');
  }

  /**
   * The end of the response, with `trailers` (flat pairs; sent only with a chunked body). A body
   * shorter than its `Content-Length` closes the connection instead.
   */
  end(trailers?: readonly string[]): void {
    if (this.finished || this.destroyed) return;
    if (!this.headersSent) throw new Error('the response head is not written');
    let tail = '';
    if (this.#chunked) {
      tail = '0\r\n';
      if (trailers !== undefined) {
        for (let i = 0; i + 1 < trailers.length; i += 2) {
          const name = trailers[i] as string;
          const value = trailers[i + 1] as string;
          // An invalid trailer is dropped rather than written: the body is already out.
          if (HEADER_NAME.test(name) && !BAD_VALUE.test(value)) tail += `${name}: ${value}${CRLF}`;
        }
      }
      tail += CRLF;
    } else if (this.#remaining > 0) {
      this.#conn.destroy();
      return;
    }
    this.finished = true;
    const head = this.#head;
    const held = this.#held;
    this.#head = undefined;
    this.#held = undefined;
    const socket = this.#conn.socket;
    if (head !== undefined) {
      if (held === undefined) socket.write(tail === '' ? head : head + tail, 'latin1');
      else socket.write(this.#framed(head, held, tail));
    } else if (tail !== '') {
      socket.write(tail, 'latin1');
    }
    this.#conn.responseEnded(this.#msg, this);
  }

  /** Closes the connection (a response cannot be aborted otherwise). */
  destroy(): void {
    this.#conn.destroy();
  }

  /** From the connection: the response is over (ended, or its connection closed). */
  closed(): void {
    if (this.#closed) return;
    this.#closed = true;
    const hooks = this.#closeHooks;
    this.#closeHooks = undefined;
    if (hooks === undefined) return;
    for (const hook of hooks) hook(this.finished);
  }

  /** The head, one body chunk framed, and `tail`, as one buffer. */
  #framed(head: string, chunk: Buffer, tail: string): Buffer {
    const prefix = this.#chunked ? `${head}${chunk.length.toString(16)}${CRLF}` : head;
    const suffix = this.#chunked ? CRLF + tail : tail;
    const out = Buffer.allocUnsafe(prefix.length + chunk.length + suffix.length);
    out.write(prefix, 0, 'latin1');
    chunk.copy(out, prefix.length);
    if (suffix.length > 0) out.write(suffix, prefix.length + chunk.length, 'latin1');
    return out;
  }
}

function flushHeld(res: Http1ServerResponse): void {
  if (!res.finished) res.flushHead();
}

/** One client connection. */
class ServerConnection<C> {
  readonly socket: Duplex;
  readonly ctx: C;
  readonly #server: Http1Server<C>;
  readonly #parser: Http1Parser;
  /** The request being parsed (its head seen), until its end. */
  #parsing: Message | undefined;
  /** The request being answered. */
  #active: Message | undefined;
  /** Requests parsed behind it, waiting their turn. */
  #queue: Message[] | undefined;
  /** A handler threw during `execute`. */
  #thrown: unknown;
  /** A CONNECT request was parsed: the socket goes to its handler once `execute` returns. */
  #connect: Message | undefined;
  /** A request head was refused (its framing): answered once `execute` returns, with this code. */
  #refused: string | undefined;
  /** llhttp's keep-alive verdict on the last request head parsed. */
  #lastKeepAlive = true;
  /** When the current request's first byte came (0: not reading a head, or not reading at all). Times are {@link clock}'s. */
  headersSince: number;
  /** The parser is inside a request's head. */
  #inHead = true;
  /** When the connection became idle (0: not idle). */
  idleSince = 0;
  /** What the socket still had to send when the idle deadline was last checked (a slow reader still taking the last response). */
  #leftAtCheck = -1;
  /** When a discarded body started to be discarded (0: none). */
  discardSince = 0;
  /** The client sent its FIN, or a response said close: no request after the current one. */
  closing = false;
  #paused = false;
  /** Input is no longer read: handed over (CONNECT), failed, or closed. */
  #done = false;
  #closeHandled = false;
  /** Inside the parser's `execute` (a handler's throw is handled once it returns). */
  #executing = false;
  /** Inside {@link #next}: a response ending meanwhile sets {@link #nextAgain} instead of recursing. */
  #inNext = false;
  #nextAgain = false;
  /** Our side is ending (the last response written). */
  #ending = false;

  constructor(server: Http1Server<C>, socket: Duplex, ctx: C, maxHeaderBytes: number) {
    this.#server = server;
    this.socket = socket;
    this.ctx = ctx;
    this.headersSince = clock();
    this.#parser = createRequestParser(
      {
        begin: () => {
          this.idleSince = 0;
          this.#inHead = true;
          // Not while paused: the wait is ours (resuming starts the clock).
          if (this.headersSince === 0 && !this.#paused) this.headersSince = clock();
        },
        head: (method, url, headers, minor, keepAlive, upgrade) => this.#onHead(method, url, headers, minor, keepAlive, upgrade),
        body: (chunk) => this.#onBody(chunk),
        complete: () => this.#onComplete(),
      },
      maxHeaderBytes,
    );
    socket.on('data', this.#onData);
    socket.on('end', this.#onEnd);
    socket.on('error', this.#onError);
    socket.on('close', this.#onClose);
    socket.on('drain', this.#onDrain);
  }

  get keepAliveHeader(): string {
    return this.#server.keepAliveHeader;
  }

  /** Nothing more can be written. */
  get destroyed(): boolean {
    return this.#closeHandled || this.socket.destroyed;
  }

  /** Closes the connection now. */
  destroy(): void {
    this.socket.destroy();
  }

  // --- input

  readonly #onData = (chunk: Buffer): void => {
    if (this.#done || this.destroyed) return;
    let data = chunk;
    for (;;) {
      this.#executing = true;
      const r = this.#parser.execute(data);
      this.#executing = false;
      if (this.#thrown !== undefined) {
        this.#fail(this.#thrown);
        return;
      }
      if (this.#refused !== undefined) {
        // Whatever llhttp made of the bytes after the refused head, none of it is read.
        this.#clientError(this.#refused, false);
        return;
      }
      if (typeof r !== 'number') {
        const code = (r as NodeJS.ErrnoException).code ?? 'HPE_INVALID';
        // After the last response (the connection ending), or after a request that closes the
        // connection (llhttp's "data after Connection: close", while its response may still be
        // under way), what follows is not read: no error, and that response is still sent.
        if (code === 'HPE_CLOSED_CONNECTION' || (this.closing && this.#active?.res?.finished !== false)) this.#done = true;
        else this.#clientError(code, false);
        return;
      }
      const connect = this.#connect;
      if (connect !== undefined) {
        this.#handOver(connect, data.subarray(r));
        return;
      }
      // Stopped after an upgrade request that is served as HTTP/1: the rest is the next request.
      if (r >= data.length || this.destroyed || this.#done) return;
      if (r === 0) {
        // llhttp, after an upgrade, takes nothing of bytes that cannot start a request and
        // reports no error: asked again, it would do the same forever. After a request that
        // closes the connection they are not read (as above); otherwise they are a bad request.
        if (this.#lastKeepAlive) this.#clientError('HPE_INVALID_METHOD', false);
        else this.#done = true;
        return;
      }
      data = data.subarray(r);
    }
  };

  #onHead(method: string, url: string, headers: string[], minor: number, keepAlive: boolean, upgrade: boolean): void {
    this.headersSince = 0;
    this.#lastKeepAlive = keepAlive;
    this.#inHead = false;
    const msg = new Message(method, url, headers, minor, keepAlive, upgrade);
    this.#parsing = msg;
    if (this.closing || this.destroyed) {
      // Behind a response that closes the connection (or after it closed): never served.
      msg.discarding = true;
      return;
    }
    if ((msg.unframed && method !== 'CONNECT') || method === '') {
      // llhttp fails such a request only after this callback: it must not start meanwhile (a
      // CONNECT has no body: what follows it is the tunnel's, and llhttp takes it so). A method
      // without a name is one llhttp knows and node does not: never guessed at.
      msg.discarding = true;
      this.#refused = method === '' ? 'HPE_INVALID_METHOD' : 'HPE_INVALID_TRANSFER_ENCODING';
      return;
    }
    if (method === 'CONNECT') {
      // The socket becomes a tunnel: only when nothing else is under way.
      // Pipelined behind another, it is the client's fault, not a defect of a handler (which is
      // logged as an error): the connection fails as for a bad request.
      if (this.#active !== undefined) {
        msg.discarding = true;
        this.#refused = 'ERR_HTTP1_PIPELINED_CONNECT';
      } else this.#connect = msg;
      return;
    }
    if (msg.announcesBody) {
      const body = new Readable({ read: () => this.#bodyRead(msg) });
      // Failed when the request is cut short: whoever reads it hears; unread, it must not throw.
      body.on('error', noop);
      msg.body = body;
    }
    if (this.#active === undefined) this.#start(msg);
    else {
      if (this.#queue === undefined) this.#queue = [msg];
      else this.#queue.push(msg);
      this.#pause();
    }
  }

  #onBody(chunk: Buffer): void {
    const msg = this.#parsing;
    if (msg === undefined || msg.discarding || msg.body === null) return;
    try {
      if (!msg.body.push(chunk)) {
        msg.bodyFull = true;
        this.#pause();
      }
    } catch (e) {
      this.#thrown ??= e;
    }
  }

  #onComplete(): void {
    const msg = this.#parsing;
    this.#parsing = undefined;
    this.headersSince = 0;
    if (msg === undefined || msg === this.#connect) return;
    msg.complete = true;
    try {
      if (msg.body !== null && !msg.discarding) msg.body.push(null);
    } catch (e) {
      this.#thrown ??= e;
    }
    if (msg.discarding) {
      this.discardSince = 0;
      msg.body = null;
    }
    // Its response may be over already (an answer before the body's end).
    if (msg === this.#active && msg.res?.finished === true) this.#next();
  }

  #bodyRead(msg: Message): void {
    if (!msg.bodyFull) return;
    msg.bodyFull = false;
    this.#resumeIfFree();
  }

  // --- requests and responses

  #start(msg: Message): void {
    this.#active = msg;
    const res = new Http1ServerResponse(this as ServerConnection<unknown>, msg);
    msg.res = res;
    const server = this.#server;
    if (server.requireHost && msg.minorVersion === 1 && !msg.hasHost) {
      res.keepAlive = false;
      server.reportClientError('HPE_MISSING_HOST', 400, this.ctx);
      res.writeHead(400, undefined, ['content-length', '0']);
      res.end();
      return;
    }
    try {
      server.events.request(msg, res, this.ctx);
    } catch (e) {
      // Inside `execute`, handled once it returns; else (a request that waited its turn) now.
      if (this.#executing) this.#thrown ??= e;
      else this.#fail(e);
    }
  }

  /** From a response: it ended. */
  responseEnded(msg: Message, res: Http1ServerResponse): void {
    if (!res.keepAlive) this.closing = true;
    res.closed();
    // The body is not wanted any more: what it holds unread is let go (a reader that never came
    // must not keep the connection paused).
    if (msg.bodyFull) {
      msg.bodyFull = false;
      this.#resumeIfFree();
    }
    if (msg.complete) {
      this.#next();
      return;
    }
    // What is still to come of it is read and dropped, within the deadline; or the connection
    // closes now, when it is not kept.
    msg.discarding = true;
    if (this.closing) this.#endSocket();
    else this.discardSince = clock();
  }

  /**
   * The active exchange is over both ways: the next request, or idle. Iterative: requests
   * answered as they start (pipelined denials) end inside {@link #start}, and would otherwise
   * recurse once per request.
   */
  #next(): void {
    this.#active = undefined;
    if (this.#inNext) {
      this.#nextAgain = true;
      return;
    }
    this.#inNext = true;
    try {
      do {
        this.#nextAgain = false;
        if (this.destroyed) return;
        if (this.closing) {
          this.#endSocket();
          return;
        }
        const queue = this.#queue;
        const next = queue?.shift();
        if (next === undefined) {
          this.#resumeIfFree();
          if (this.headersSince === 0 && !this.#inHead) {
            this.idleSince = clock();
            // A new idle period: what an earlier one saw left to send says nothing now.
            this.#leftAtCheck = -1;
          }
          return;
        }
        if (queue?.length === 0) this.#resumeIfFree();
        this.#start(next);
      } while (this.#nextAgain && this.#active === undefined && !this.destroyed);
    } finally {
      this.#inNext = false;
    }
  }

  // --- the socket

  /** Stops reading; a head begun meanwhile is not timed (the wait is ours: see `begin`). */
  #pause(): void {
    if (this.#paused) return;
    this.#paused = true;
    this.socket.pause();
  }

  #resumeIfFree(): void {
    if (!this.#paused || (this.#queue !== undefined && this.#queue.length > 0)) return;
    const parsing = this.#parsing;
    if (parsing?.bodyFull === true) return;
    this.#paused = false;
    if (this.#inHead && this.headersSince === 0) this.headersSince = clock();
    this.socket.resume();
  }

  readonly #onDrain = (): void => {
    const res = this.#active?.res;
    if (res !== undefined && !res.finished) res.ondrain?.();
  };

  readonly #onEnd = (): void => {
    if (this.#done) return;
    this.closing = true;
    // Nothing under way (idle, or only a body being discarded): the connection ends once its
    // output has left. Otherwise the client is taken to be gone, as node's server does: what is
    // under way is cancelled.
    const active = this.#active;
    const parsing = this.#parsing;
    const busy =
      (active !== undefined && active.res?.finished !== true) ||
      (parsing !== undefined && parsing !== active && !parsing.discarding) ||
      (this.#queue !== undefined && this.#queue.length > 0) ||
      this.headersSince !== 0;
    if (busy) this.destroy();
    else this.#endSocket();
  };

  readonly #onError = (): void => {
    // 'close' follows.
  };

  readonly #onClose = (): void => {
    if (this.#closeHandled) return;
    this.#closeHandled = true;
    this.#done = true;
    this.#server.connectionClosed(this);
    const aborted = new Error('the client connection closed');
    for (const msg of [this.#active, ...(this.#queue ?? [])]) {
      if (msg === undefined) continue;
      if (!msg.complete && msg.body !== null && !msg.body.destroyed) msg.body.destroy(aborted);
      msg.res?.closed();
    }
    if (this.#parsing !== undefined && this.#parsing !== this.#active && this.#parsing.body !== null) this.#parsing.body.destroy(aborted);
    this.#queue = undefined;
    this.#parser.close();
  };

  /**
   * Ends the connection once what is written has left (once): nothing more is read, and no
   * deadline of a request applies; a peer that stops reading what is left is cut off by the
   * linger bounds (socket.ts's `lingerThenDestroy`).
   */
  #endSocket(): void {
    const socket = this.socket;
    if (this.destroyed || this.#ending) return;
    this.#ending = true;
    this.#done = true;
    this.headersSince = 0;
    this.discardSince = 0;
    this.idleSince = 0;
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    socket.end(() => socket.destroy());
    lingerThenDestroy(socket);
  }

  #handOver(msg: Message, head: Buffer): void {
    this.#done = true;
    const socket = this.socket;
    socket.off('data', this.#onData);
    socket.off('end', this.#onEnd);
    socket.off('error', this.#onError);
    socket.off('close', this.#onClose);
    socket.off('drain', this.#onDrain);
    this.#server.connectionClosed(this);
    // Not flowing until the new owner reads (a 'data' listener, a pipe), as node's server leaves it.
    socket.pause();
    (socket as { readableFlowing: boolean | null }).readableFlowing = null;
    queueMicrotask(() => this.#parser.close());
    try {
      this.#server.events.connect(msg, socket, head, this.ctx);
    } catch (e) {
      this.#server.events.failed?.(e, this.ctx);
      socket.destroy();
    }
  }

  #fail(err: unknown): void {
    this.#thrown = undefined;
    this.#done = true;
    if (this.destroyed) return;
    this.destroy();
    try {
      this.#server.events.failed?.(err, this.ctx);
    } catch {
      // A hook that throws does not change how the connection ends.
    }
  }

  /** A parse error or a deadline: answered when nothing is under way, then closed. */
  #clientError(code: string, timeout: boolean): void {
    if (this.destroyed) return;
    let status: number | undefined;
    if (timeout) status = 408;
    else if (code === 'HPE_HEADER_OVERFLOW') status = 431;
    else if (code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW') status = 413;
    else if (code.startsWith('HPE_')) status = 400;
    const answerable = status !== undefined && this.#active === undefined && this.socket.writable;
    this.#server.reportClientError(code, answerable ? status : undefined, this.ctx);
    // The request being read fails (its body, if any).
    const parsing = this.#parsing;
    if (parsing !== undefined && !parsing.complete) parsing.body?.destroy(new Error(`bad request (${code})`));
    this.#done = true;
    this.closing = true;
    if (!answerable) {
      this.destroy();
      return;
    }
    this.socket.pause();
    this.socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status as number] ?? ''}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`, () =>
      this.socket.destroy(),
    );
    lingerThenDestroy(this.socket);
  }

  /** From the server's periodic check. */
  check(now: number): void {
    if (this.#done || this.destroyed) return;
    if (this.headersSince !== 0 && now - this.headersSince > this.#server.headersTimeoutMs) {
      this.headersSince = 0;
      this.#clientError('ERR_HTTP_REQUEST_TIMEOUT', true);
    } else if (this.discardSince !== 0 && now - this.discardSince > this.#server.headersTimeoutMs) {
      this.destroy();
    } else if (this.idleSince !== 0 && now - this.idleSince > this.#server.keepAliveTimeoutMs) {
      // Idle from the end of the last response; while a slow reader is still taking it (what is
      // left to send goes down), not yet.
      const left = unsentBytes(this.socket);
      if (left > 0 && (this.#leftAtCheck < 0 || left < this.#leftAtCheck)) {
        this.#leftAtCheck = left;
        this.idleSince = now;
      } else this.destroy();
    }
  }
}

/**
 * The HTTP/1 server of a proxy: never listening, it serves the connections handed to it
 * ({@link serve}), each with the owner's context `C`.
 */
export class Http1Server<C> {
  readonly events: Http1ServerEvents<C>;
  readonly headersTimeoutMs: number;
  readonly keepAliveTimeoutMs: number;
  readonly requireHost: boolean;
  /** The `keep-alive` header line of kept connections. */
  readonly keepAliveHeader: string;
  readonly #maxHeaderBytes: number;
  readonly #checkMs: number;
  readonly #conns = new Set<ServerConnection<C>>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(opts: Http1ServerOptions<C>) {
    this.events = opts.events;
    this.headersTimeoutMs = opts.headersTimeoutMs;
    this.keepAliveTimeoutMs = opts.keepAliveTimeoutMs;
    this.requireHost = opts.requireHost === true;
    this.keepAliveHeader = `keep-alive: timeout=${Math.max(1, Math.floor(opts.keepAliveTimeoutMs / 1000))}${CRLF}`;
    this.#maxHeaderBytes = opts.maxHeaderBytes;
    this.#checkMs = opts.checkIntervalMs ?? Math.min(1000, opts.headersTimeoutMs);
  }

  /** Connections served now. */
  get size(): number {
    return this.#conns.size;
  }

  /** Serves HTTP/1 on `socket` (its first bytes may have been put back); `ctx` comes back with each request. */
  serve(socket: Duplex, ctx: C): void {
    if (this.#closed) {
      socket.destroy();
      return;
    }
    const conn = new ServerConnection(this, socket, ctx, this.#maxHeaderBytes);
    this.#conns.add(conn);
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#check(), this.#checkMs);
      this.#timer.unref();
    }
    socket.resume();
  }

  /** Destroys every connection and serves no more. */
  close(): void {
    this.#closed = true;
    for (const c of [...this.#conns]) c.destroy();
    this.#conns.clear();
    this.#stop();
  }

  /** From a connection. */
  connectionClosed(conn: ServerConnection<C>): void {
    this.#conns.delete(conn);
    if (this.#conns.size === 0) this.#stop();
  }

  /** From a connection. */
  reportClientError(code: string, status: number | undefined, ctx: C): void {
    try {
      this.events.clientError?.(code, status, ctx);
    } catch {
      // A hook that throws does not change how the connection ends.
    }
  }

  #check(): void {
    const now = clock();
    for (const c of this.#conns) c.check(now);
  }

  #stop(): void {
    if (this.#timer === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
