/**
 * Relaying an upstream's response to the client, shared by the inbound HTTP stack (the upstream
 * is the application) and the outbound proxy (the upstream is an endpoint). Bodies stream with
 * backpressure, trailers follow them, hop-by-hop headers are dropped (inbound-http-headers); an
 * upstream failing mid-response aborts the client's response (HTTP/1: destroyed, HTTP/2: reset),
 * since a truncated body must not look complete. What the proxy answers when the upstream fails
 * before responding is the caller's.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type ClientHttp2Stream,
  type IncomingHttpHeaders as Http2IncomingHeaders,
  constants as h2constants,
  type IncomingHttpStatusHeader,
  type ServerHttp2Stream,
} from 'node:http2';
import type { Dispatcher } from 'undici';
import { RESPOND_WITH_TRAILERS, RESPOND_WITHOUT_BODY } from './h2-stream-options.js';
import { filterHttp1Response, filterHttp2Response, pairsOf } from './inbound-http-headers.js';

const { NGHTTP2_CANCEL, NGHTTP2_INTERNAL_ERROR, NGHTTP2_NO_ERROR } = h2constants;
const END_STREAM = h2constants.NGHTTP2_FLAG_END_STREAM;

/** An HTTP/1 request as {@link relayHttp1} sends it upstream. */
export interface Http1UpstreamRequest {
  readonly method: string;
  /** Origin-form target (`/…`). */
  readonly path: string;
  /** Flat name/value pairs, hop-by-hop headers already dropped. */
  readonly headers: readonly string[];
  /**
   * The upstream is a proxy's HTTP server (a meshed endpoint with the `http1` session protocol:
   * its proxy answers, and never sends a body to HEAD): the connection is kept after a HEAD
   * request, which then costs no new mTLS handshake. Otherwise undici closes it, in case a
   * misbehaving server sends a body anyway.
   */
  readonly upstreamIsProxy?: boolean;
}

/** How {@link relayHttp1} reports an exchange to its caller. The hooks must not throw. */
export interface Http1RelayHooks {
  /** The request has a connection and is being written (a connect failure comes before this, if at all). */
  sent?(): void;
  /** The upstream's response head was relayed: the status written and the relayed header pairs. */
  head?(status: number, headers: readonly string[]): void;
  /** The response ended; its trailers as pairs (empty without). */
  trailers?(trailers: readonly string[]): void;
  /**
   * The request cannot be sent as it is (`reason`: an asterisk-form target, two `Host` headers,
   * a header a proxy must not forward…); nothing was sent and `res` is untouched: the caller
   * answers 400.
   */
  refused(reason: string): void;
  /**
   * The upstream failed before a response head was relayed (`res` is untouched: the caller
   * answers). `connected` is false for a connect failure: no byte of the request was written and
   * its body is unread, so it may go to another endpoint.
   */
  failed(err: Error, connected: boolean): void;
  /** node refused to write the upstream's response head (`err`: an invalid status or header); the upstream request is aborted and `res` untouched. */
  unrelayable(err: Error): void;
  /** The upstream failed mid-response; `res` is destroyed right after. */
  aborted(): void;
  /** The exchange with the upstream is over (completed, failed, refused, or cancelled): once. */
  settled?(): void;
}

/** Flat pairs of latin1 strings from undici's raw header buffers. */
function latin1Pairs(raw: readonly Buffer[]): string[] {
  const out = new Array<string>(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = (raw[i] as Buffer).toString('latin1');
  return out;
}

/** The first value of the header `lowerName` (lower case) in flat pairs, or undefined. */
export function headerValue(pairs: readonly string[], lowerName: string): string | undefined {
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const name = pairs[i] as string;
    if (name.length === lowerName.length && name.toLowerCase() === lowerName) return pairs[i + 1];
  }
  return undefined;
}

/** True when a request's raw headers announce a body (RFC 9112 §6.3: `Content-Length` or `Transfer-Encoding`). */
export function announcesBody(raw: readonly string[]): boolean {
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i] as string;
    if (name.length === 14 && name.toLowerCase() === 'content-length') return true;
    if (name.length === 17 && name.toLowerCase() === 'transfer-encoding') return true;
  }
  return false;
}

function noop(): void {}

/** The errors undici's Request constructor throws for a request it will not send (invalid argument, unsupported, a failed assertion). */
function isUndiciRefusal(err: Error): boolean {
  const code = (err as { code?: unknown }).code;
  return code === 'UND_ERR_INVALID_ARG' || code === 'UND_ERR_NOT_SUPPORTED' || code === 'ERR_ASSERTION';
}

/** Header names undici refuses in a request (it frames the message itself); a proxy drops them anyway. */
const REFUSED_BY_UNDICI: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'expect']);
/** What a header value may hold (RFC 9110 §5.5, obs-text included), as undici checks it. */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** A reason phrase relayed as is: printable ASCII (undici decodes it as UTF-8, and node refuses what is not Latin-1). */
const PRINTABLE_REASON = /^[\t\x20-\x7e]*$/;

/**
 * Why undici would refuse `request` (its Request constructor throws), or undefined. undici then
 * reports the error, but its pool also takes the refusal for a busy connection and never uses
 * that connection again: enough such requests would wedge the pool. So they never reach it.
 */
export function refusalOf(request: Http1UpstreamRequest): string | undefined {
  if (request.path.charCodeAt(0) !== 0x2f /* / */) return `request target ${JSON.stringify(request.path.slice(0, 100))} is not origin-form`;
  const h = request.headers;
  let hosts = 0;
  let lengths = 0;
  for (let i = 0; i + 1 < h.length; i += 2) {
    const name = h[i] as string;
    // Only names as long as one of those looked for are lower-cased (no string per header).
    const n = name.length;
    if (n === 4 || n === 6 || n === 7 || n === 10 || n === 14 || n === 17) {
      const lower = name.toLowerCase();
      if (lower === 'host') {
        hosts++;
        // undici asserts that a bracketed host (an IPv6 literal) closes its bracket.
        const value = h[i + 1] as string;
        if (value.charCodeAt(0) === 0x5b /* [ */ && !value.includes(']')) return 'invalid Host header';
      } else if (lower === 'content-length') lengths++;
      else if (REFUSED_BY_UNDICI.has(lower)) return `the ${lower} header cannot be forwarded`;
    }
    if (!HEADER_VALUE.test(h[i + 1] as string)) return `invalid value of the ${name.toLowerCase()} header`;
  }
  if (hosts > 1) return 'more than one Host header';
  if (lengths > 1) return 'more than one Content-Length header';
  return undefined;
}

/**
 * One request relayed through undici: its callbacks are undici's raw dispatch handler (undici's
 * own `request` and `stream` use the same), which hands over the response's headers as raw
 * pairs in their order, unparsed.
 */
class Http1Exchange implements Dispatcher.DispatchHandler {
  readonly #req: IncomingMessage;
  readonly #res: ServerResponse;
  readonly #hooks: Http1RelayHooks;
  #abort: ((err?: Error) => void) | undefined;
  #resume: (() => void) | undefined;
  #connected = false;
  #cancelled = false;
  #settled = false;

  readonly #retire: () => void;

  constructor(req: IncomingMessage, res: ServerResponse, hooks: Http1RelayHooks, retire: () => void) {
    this.#req = req;
    this.#res = res;
    this.#hooks = hooks;
    this.#retire = retire;
  }

  /** The client went away: abort the upstream request, or drop it unsent when it has no connection yet. */
  cancel(): void {
    if (this.#cancelled) return;
    this.#cancelled = true;
    if (this.#abort !== undefined) this.#abort();
    else this.#settle();
  }

  onConnect(abort: (err?: Error) => void): void {
    if (this.#cancelled) {
      // Thrown, not abort(): undici then drops the request and keeps the connection (abort would
      // destroy it, and with it a handshake). A request with a body does not get here: its body
      // failed when the client went away, and undici aborts such a request, connection and all.
      throw new Error('the client went away');
    }
    this.#abort = abort;
    this.#connected = true;
    this.#hooks.sent?.();
  }

  onHeaders(status: number, raw: Buffer[], resume: () => void, statusText: string): boolean {
    // 1xx (102, 103): informational, not the response; node:http's client did not relay them either.
    if (status < 200) return true;
    const res = this.#res;
    if (this.#cancelled || res.destroyed) {
      this.cancel();
      return false;
    }
    const headers = filterHttp1Response(latin1Pairs(raw));
    try {
      if (statusText === '' || !PRINTABLE_REASON.test(statusText)) res.writeHead(status, headers);
      else res.writeHead(status, statusText, headers);
    } catch (e) {
      // A response node refuses to relay (an invalid status or header): the caller answers, with
      // its own reason phrase (node keeps the one it refused otherwise).
      res.statusMessage = '';
      this.#cancelled = true;
      this.#abort?.();
      this.#keepAliveUnlessBodyLost();
      this.#hooks.unrelayable(e instanceof Error ? e : new Error(String(e)));
      return false;
    }
    this.#hooks.head?.(res.statusCode, headers);
    this.#resume = resume;
    res.on('drain', resume);
    return true;
  }

  onData(chunk: Buffer): boolean {
    return this.#res.write(chunk);
  }

  onComplete(trailers: string[] | Buffer[] | null): void {
    this.#settle();
    const res = this.#res;
    this.#unhookDrain();
    if (res.destroyed) return;
    const pairs = trailers === null || trailers.length === 0 ? EMPTY : latin1Pairs(trailers as Buffer[]);
    if (pairs.length > 0) res.addTrailers(pairsOf(pairs));
    this.#hooks.trailers?.(pairs);
    res.end();
  }

  onError(err: Error): void {
    this.#settle();
    this.#unhookDrain();
    if (!this.#connected && isUndiciRefusal(err)) {
      // undici refused the request itself: a shape refusalOf missed. Its pool has taken that for
      // a busy connection it will never use again, so the pool is retired (it finishes what it
      // runs; its owner makes a new one) and the client is answered as for refusalOf.
      this.#retire();
      if (!this.#cancelled && !this.#res.headersSent && !this.#res.destroyed) this.#hooks.refused(`the request cannot be forwarded: ${err.message}`);
      return;
    }
    const res = this.#res;
    if (this.#cancelled || res.writableEnded || res.destroyed) return;
    if (res.headersSent) {
      this.#hooks.aborted();
      res.destroy();
      return;
    }
    this.#keepAliveUnlessBodyLost();
    this.#hooks.failed(err, this.#connected);
  }

  /** Settles without sending: the request was refused before it reached undici. */
  refuse(reason: string): void {
    this.#cancelled = true;
    this.#settle();
    this.#hooks.refused(reason);
  }

  #settle(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#hooks.settled?.();
  }

  #unhookDrain(): void {
    if (this.#resume === undefined) return;
    this.#res.off('drain', this.#resume);
    this.#resume = undefined;
  }

  /**
   * undici destroys the request body it failed to send: the rest of it is never read, so the
   * client's connection cannot carry another request after the caller's answer.
   */
  #keepAliveUnlessBodyLost(): void {
    if (this.#req.destroyed && !this.#req.complete) this.#res.shouldKeepAlive = false;
  }
}

const EMPTY: readonly string[] = [];

/**
 * Sends `request` through `upstream` (an undici pool) with the client's body (`req`, when its
 * headers announce one) and relays the response to `res`: head, body with backpressure,
 * trailers. The client's response closing first cancels the upstream request. undici reads the
 * body only once the request has a connection, so after a connect failure it is still whole. A
 * request undici would refuse ({@link refusalOf}) is not sent: `hooks.refused`. Should undici
 * refuse one all the same, `upstream` is closed (gracefully): its owner must not hand out a
 * closed pool.
 */
export function relayHttp1(upstream: Dispatcher, req: IncomingMessage, res: ServerResponse, request: Http1UpstreamRequest, hooks: Http1RelayHooks): void {
  const exchange = new Http1Exchange(req, res, hooks, () => {
    upstream.close().catch(noop);
  });
  const refusal = refusalOf(request);
  if (refusal !== undefined) {
    exchange.refuse(refusal);
    return;
  }
  res.once('close', () => {
    if (!res.writableFinished) exchange.cancel();
  });
  upstream.dispatch(
    {
      method: request.method,
      path: request.path,
      headers: request.headers as string[],
      body: announcesBody(req.rawHeaders) ? req : null,
      ...(request.upstreamIsProxy === true ? { reset: false } : {}),
    },
    exchange,
  );
}

/** How {@link relayHttp2} reports the upstream's failures (the client's stream is still open). */
export interface Http2RelayHooks {
  /** node refused to send the upstream's response headers (`err`); the upstream stream is cancelled. */
  unrelayable(err: unknown): void;
  /** The upstream stream closed before any response was sent: its error, or undefined for a reset (`up.rstCode`). */
  failedBeforeResponse(err: Error | undefined): void;
  /** The upstream stream failed mid-response; the client's stream is reset right after. */
  aborted(): void;
}

/**
 * Relays the client's request stream to the upstream stream `up` (unless the request ended with
 * its headers: `endStream`) and `up`'s response headers, body and trailers back. A client stream
 * that closes first cancels `up`; `up` failing mid-response resets the client's stream with
 * `up`'s error code (or INTERNAL_ERROR).
 */
export function relayHttp2(stream: ServerHttp2Stream, up: ClientHttp2Stream, endStream: boolean, hooks: Http2RelayHooks): void {
  let upError: Error | undefined;
  let trailers: Http2IncomingHeaders | undefined;
  up.on('error', (err: Error) => {
    upError ??= err;
  });
  up.on('response', (h: Http2IncomingHeaders & IncomingHttpStatusHeader, responseFlags: number) => {
    if (stream.destroyed || stream.closed) return;
    const headersOnly = (responseFlags & END_STREAM) !== 0;
    try {
      stream.respond(filterHttp2Response(h), headersOnly ? RESPOND_WITHOUT_BODY : RESPOND_WITH_TRAILERS);
    } catch (e) {
      // Headers node refuses to relay (e.g. an invalid value): a bad gateway.
      up.close(NGHTTP2_CANCEL);
      hooks.unrelayable(e);
      return;
    }
    if (!headersOnly) up.pipe(stream);
  });
  up.on('trailers', (t: Http2IncomingHeaders) => {
    trailers = t;
  });
  stream.on('wantTrailers', () => {
    try {
      stream.sendTrailers(trailers === undefined ? {} : filterHttp2Response(trailers));
    } catch {
      stream.close(NGHTTP2_INTERNAL_ERROR);
    }
  });
  up.once('close', () => {
    if (stream.destroyed || stream.closed) return;
    if (!stream.headersSent) {
      hooks.failedBeforeResponse(upError);
    } else if (upError !== undefined || (up.rstCode !== undefined && up.rstCode !== NGHTTP2_NO_ERROR)) {
      hooks.aborted();
      stream.close(up.rstCode !== undefined && up.rstCode !== NGHTTP2_NO_ERROR ? up.rstCode : NGHTTP2_INTERNAL_ERROR);
    }
  });
  // The client reset the stream or went away: cancel the upstream's stream too.
  stream.once('close', () => {
    if (!up.closed && !up.destroyed) up.close(NGHTTP2_CANCEL);
  });
  if (!endStream) stream.pipe(up);
}
