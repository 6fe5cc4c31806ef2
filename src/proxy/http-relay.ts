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
  /** Origin-form target. */
  readonly path: string;
  /** Flat name/value pairs, hop-by-hop headers already dropped (undici refuses them). */
  readonly headers: readonly string[];
}

/** How {@link relayHttp1} reports an exchange to its caller. */
export interface Http1RelayHooks {
  /** The request has a connection and is being written (a connect failure comes before this, if at all). */
  sent?(): void;
  /** The upstream's response head was relayed: the status written and the relayed header pairs. */
  head?(status: number, headers: readonly string[]): void;
  /** The response ended; its trailers as pairs (empty without). */
  trailers?(trailers: readonly string[]): void;
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
  /** The exchange with the upstream is over (completed, failed, or cancelled). */
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

/**
 * One request relayed through undici: its callbacks are undici's raw dispatch handler (undici's
 * own `request` and `stream` use the same), which hands over the response's headers as raw
 * pairs in their order, unparsed.
 */
class Http1Exchange implements Dispatcher.DispatchHandler {
  readonly #res: ServerResponse;
  readonly #hooks: Http1RelayHooks;
  #abort: ((err?: Error) => void) | undefined;
  #connected = false;
  #cancelled = false;
  #settled = false;

  constructor(res: ServerResponse, hooks: Http1RelayHooks) {
    this.#res = res;
    this.#hooks = hooks;
  }

  /** The client went away: abort the upstream request (now, or as soon as it has a connection). */
  cancel(): void {
    if (this.#cancelled) return;
    this.#cancelled = true;
    this.#abort?.();
  }

  onConnect(abort: (err?: Error) => void): void {
    if (this.#cancelled) {
      abort();
      return;
    }
    this.#abort = abort;
    this.#connected = true;
    this.#hooks.sent?.();
  }

  onHeaders(status: number, raw: Buffer[], resume: () => void, statusText: string): boolean {
    const res = this.#res;
    if (this.#cancelled || res.destroyed) {
      this.cancel();
      return false;
    }
    const headers = filterHttp1Response(latin1Pairs(raw));
    try {
      if (statusText === '') res.writeHead(status, headers);
      else res.writeHead(status, statusText, headers);
    } catch (e) {
      // A response node refuses to relay (an invalid status or header): the caller answers.
      this.#cancelled = true;
      this.#abort?.();
      this.#hooks.unrelayable(e instanceof Error ? e : new Error(String(e)));
      return false;
    }
    this.#hooks.head?.(res.statusCode, headers);
    res.on('drain', resume);
    return true;
  }

  onData(chunk: Buffer): boolean {
    return this.#res.write(chunk);
  }

  onComplete(trailers: string[] | Buffer[] | null): void {
    this.#settle();
    const res = this.#res;
    if (res.destroyed) return;
    const pairs = trailers === null || trailers.length === 0 ? EMPTY : latin1Pairs(trailers as Buffer[]);
    if (pairs.length > 0) res.addTrailers(pairsOf(pairs));
    this.#hooks.trailers?.(pairs);
    res.end();
  }

  onError(err: Error): void {
    this.#settle();
    const res = this.#res;
    if (this.#cancelled || res.writableEnded || res.destroyed) return;
    if (res.headersSent) {
      this.#hooks.aborted();
      res.destroy();
      return;
    }
    this.#hooks.failed(err, this.#connected);
  }

  #settle(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#hooks.settled?.();
  }
}

const EMPTY: readonly string[] = [];

/**
 * Sends `request` through `upstream` (an undici pool) with the client's body (`req`, when its
 * headers announce one) and relays the response to `res`: head, body with backpressure,
 * trailers. The client's response closing first cancels the upstream request. undici reads the
 * body only once the request has a connection, so after a connect failure it is still whole.
 */
export function relayHttp1(upstream: Dispatcher, req: IncomingMessage, res: ServerResponse, request: Http1UpstreamRequest, hooks: Http1RelayHooks): void {
  const exchange = new Http1Exchange(res, hooks);
  res.once('close', () => {
    if (!res.writableFinished) exchange.cancel();
  });
  upstream.dispatch(
    {
      method: request.method,
      path: request.path,
      headers: request.headers as string[],
      body: announcesBody(req.rawHeaders) ? req : null,
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
