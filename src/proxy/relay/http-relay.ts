/**
 * Relaying an upstream's HTTP/1 response to the client, shared by the inbound HTTP stack (the
 * upstream is the application) and the outbound proxy (the upstream is an endpoint). Bodies
 * stream with backpressure, trailers follow them, hop-by-hop headers are dropped
 * (relay/http-headers); an upstream failing mid-response destroys the client's response, since
 * a truncated body must not look complete. What the proxy answers when the upstream fails before
 * responding is the caller's. HTTP/2 is relayed on h2/connection streams (inbound/h2-relay,
 * outbound/h2-relay).
 */
import type { Http1Pool, Http1PoolHandler, Http1ServerRequest, Http1ServerResponse } from '../../http/index.js';
import { filterHttp1Response } from './http-headers.js';

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
   * request, which then costs no new mTLS handshake. Otherwise the pool closes it, in case a
   * misbehaving server sends a body anyway.
   */
  readonly upstreamIsProxy?: boolean;
  /**
   * Sent with `connection: close` on a connection that is then never reused: for a request whose
   * body the upstream may leave unread, which it would then parse as the next request.
   */
  readonly closeAfter?: boolean;
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
  /** The server refused to write the upstream's response head (`err`: an invalid status or header); the upstream request is aborted and `res` untouched. */
  unrelayable(err: Error): void;
  /** The upstream failed mid-response; `res` is destroyed right after. */
  aborted(): void;
  /** The exchange with the upstream is over (completed, failed, refused, or cancelled): once. */
  settled?(): void;
}

/** The first value of the header `lowerName` (lower case) in flat pairs, or undefined. */
export function headerValue(pairs: readonly string[], lowerName: string): string | undefined {
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const name = pairs[i] as string;
    if (name.length === lowerName.length && name.toLowerCase() === lowerName) return pairs[i + 1];
  }
  return undefined;
}

/** Header names the pool frames itself or a proxy must not forward. */
const NOT_FORWARDED: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'expect']);
/** What a header value may hold (RFC 9110 §5.5, obs-text included). */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** A header name: a token (RFC 9110 §5.1). */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** True when `target` holds a character that would break the request line (whitespace, a control, non-ASCII). */
function hasBadTargetChar(target: string): boolean {
  for (let i = 0; i < target.length; i++) {
    const c = target.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f) return true;
  }
  return false;
}
/** A reason phrase relayed as is: printable ASCII (node refuses what is not Latin-1). */
const PRINTABLE_REASON = /^[\t\x20-\x7e]*$/;

/**
 * Why `request` cannot be written upstream as it is, or undefined. The pool writes names, values
 * and the target verbatim, so this is what keeps a request from saying more than it did: no
 * header the pool frames itself, nothing that would end a line or the request line early, no
 * ambiguous `Host` or `Content-Length`. (node's parser refuses most of it from a client already;
 * route filters and other code paths pass through here too.)
 */
export function refusalOf(request: Http1UpstreamRequest): string | undefined {
  const path = request.path;
  if (path.charCodeAt(0) !== 0x2f /* / */) return `request target ${JSON.stringify(path.slice(0, 100))} is not origin-form`;
  if (hasBadTargetChar(path)) return 'invalid request target';
  const h = request.headers;
  let hosts = 0;
  let lengths = 0;
  for (let i = 0; i + 1 < h.length; i += 2) {
    const name = h[i] as string;
    const value = h[i + 1] as string;
    if (!HEADER_NAME.test(name)) return `invalid header name ${JSON.stringify(name.slice(0, 100))}`;
    // Only names as long as one of those looked for are lower-cased (no string per header).
    const n = name.length;
    if (n === 4 || n === 6 || n === 7 || n === 10 || n === 14 || n === 17) {
      const lower = name.toLowerCase();
      if (lower === 'host') {
        hosts++;
        // A bracketed host (an IPv6 literal) closes its bracket.
        if (value.charCodeAt(0) === 0x5b /* [ */ && !value.includes(']')) return 'invalid Host header';
      } else if (lower === 'content-length') {
        lengths++;
        if (!/^\d{1,15}$/.test(value)) return 'invalid Content-Length header';
      } else if (NOT_FORWARDED.has(lower)) return `the ${lower} header cannot be forwarded`;
    }
    if (!HEADER_VALUE.test(value)) return `invalid value of the ${name.toLowerCase()} header`;
  }
  if (hosts > 1) return 'more than one Host header';
  if (lengths > 1) return 'more than one Content-Length header';
  return undefined;
}

/** One request relayed through an {@link Http1Pool}. */
class Http1Exchange implements Http1PoolHandler {
  readonly #req: Http1ServerRequest;
  readonly #res: Http1ServerResponse;
  readonly #hooks: Http1RelayHooks;
  #abort: ((err?: Error) => void) | undefined;
  #connected = false;
  #cancelled = false;
  #settled = false;

  constructor(req: Http1ServerRequest, res: Http1ServerResponse, hooks: Http1RelayHooks) {
    this.#req = req;
    this.#res = res;
    this.#hooks = hooks;
  }

  /** The client went away: abort the upstream request, or drop it unsent when it has no connection yet. */
  cancel(): void {
    if (this.#cancelled) return;
    this.#cancelled = true;
    if (this.#abort !== undefined) this.#abort();
    else this.#settle();
  }

  onConnect(abort: (err?: Error) => void): void {
    // Thrown: the pool then drops the request unsent and keeps the connection.
    if (this.#cancelled) throw new Error('the client went away');
    this.#abort = abort;
    this.#connected = true;
    this.#hooks.sent?.();
  }

  onHeaders(status: number, headers: string[], resume: () => void, reason: string): boolean {
    const res = this.#res;
    if (this.#cancelled || res.destroyed) {
      this.cancel();
      return false;
    }
    const relayed = filterHttp1Response(headers);
    try {
      res.writeHead(status, reason === '' || !PRINTABLE_REASON.test(reason) ? undefined : reason, relayed);
    } catch (e) {
      // A response the server refuses to relay (an invalid status or header): the caller answers.
      this.#cancelled = true;
      this.#abort?.();
      this.#keepAliveUnlessBodyLost();
      this.#hooks.unrelayable(e instanceof Error ? e : new Error(String(e)));
      return false;
    }
    this.#hooks.head?.(status, relayed);
    res.ondrain = resume;
    return true;
  }

  onData(chunk: Buffer): boolean {
    return this.#res.write(chunk);
  }

  onComplete(trailers: string[]): void {
    this.#settle();
    const res = this.#res;
    res.ondrain = undefined;
    if (res.destroyed) return;
    // The upstream answered before the client finished its body (a 413, say): the rest is
    // discarded, and the connection closed after the answer rather than kept for an upload of
    // unknown length.
    if (!this.#req.complete && this.#req.body !== null) res.keepAlive = false;
    this.#hooks.trailers?.(trailers);
    res.end(trailers.length > 0 ? filterHttp1Response(trailers) : undefined);
  }

  onError(err: Error): void {
    this.#settle();
    const res = this.#res;
    res.ondrain = undefined;
    if (this.#cancelled || res.finished || res.destroyed) return;
    if (res.headersSent) {
      this.#hooks.aborted();
      res.destroy();
      return;
    }
    this.#keepAliveUnlessBodyLost();
    this.#hooks.failed(err, this.#connected);
  }

  /** Settles without sending: the request was refused before it reached the pool. */
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

  /**
   * A request body the pool had started to send and stopped (the upstream failed) is part gone:
   * the client's connection is closed after the caller's answer rather than kept on a body half
   * relayed. A body still unread (a connect failure) is whole, and the server discards it as usual.
   */
  #keepAliveUnlessBodyLost(): void {
    if (this.#connected && !this.#req.complete && this.#req.body !== null) this.#res.keepAlive = false;
  }
}

/**
 * Sends `request` through `upstream` with the client's body (`req.body`, when its headers
 * announce one) and relays the response to `res`: head, body with backpressure, trailers. The
 * client's response closing first cancels the upstream request. The pool reads the body only
 * once the request has a connection, so after a connect failure it is still whole. A request
 * that cannot be written as it is ({@link refusalOf}) is not sent: `hooks.refused`.
 */
export function relayHttp1(
  upstream: Http1Pool,
  req: Http1ServerRequest,
  res: Http1ServerResponse,
  request: Http1UpstreamRequest,
  hooks: Http1RelayHooks,
): void {
  const exchange = new Http1Exchange(req, res, hooks);
  const refusal = refusalOf(request);
  if (refusal !== undefined) {
    exchange.refuse(refusal);
    return;
  }
  res.onClose((finished) => {
    if (!finished) exchange.cancel();
  });
  upstream.dispatch(
    {
      method: request.method,
      path: request.path,
      headers: request.headers,
      body: req.body,
      keepAfterHead: request.upstreamIsProxy === true,
      close: request.closeAfter === true,
    },
    exchange,
  );
}
