/**
 * `l5d-orig-proto` (linkerd2-proxy's orig-proto downgrade): a client proxy told by the Destination
 * API that an endpoint speaks HTTP/2 between proxies (`protocol_hint: h2`) sends its application's
 * HTTP/1 requests as HTTP/2 streams marked `l5d-orig-proto: HTTP/1.1` (or `HTTP/1.0`, either with
 * `; absolute-form`). The inbound turns such a stream back into an HTTP/1.1 request to the
 * application, on the same keep-alive pool as plain HTTP/1 requests, and the application's
 * response back into the stream's response, marked `l5d-orig-proto: HTTP/1.1` (the version the
 * application answered with) so the client proxy hands its application an HTTP/1.1 response.
 *
 * - The request's mark is removed (every client-sent `l5d-*` is); its `:authority` becomes `Host`
 *   when the stream carries none. An absolute-form mark is honoured as origin-form with that `Host`
 *   (the pool writes origin-form targets only), and HTTP/1.0 is sent as HTTP/1.1: the application
 *   reads the same request either way.
 * - Request trailers have no HTTP/1 equivalent the pool can send: dropped. The response's
 *   hop-by-hop headers are dropped and its names lower-cased (HTTP/2 wants both); a response that
 *   cannot have a body (to HEAD, 204, 304) ends with its headers.
 * - Flow control both ways: the stream's received bytes are credited back once the pool has taken
 *   them, and the application's response pauses while the stream's queue is above
 *   {@link RESPONSE_HIGH_WATER_BYTES}.
 * - Failures: before the response head the caller answers (502); after it the stream is reset
 *   with INTERNAL_ERROR, so a truncated body never looks complete; a reset by the client aborts
 *   the application's request.
 */
import { Readable } from 'node:stream';
import type { HeaderBlock } from '../../http/index.js';
import { H2_INTERNAL_ERROR, type H2Stream, type H2StreamEvents, type Http1Pool, type Http1PoolHandler } from '../../http/index.js';
import { grpcStatusValue, type HttpExchange, h2Error } from '../metrics/http.js';
import { filterHttp1Response, HOP_BY_HOP } from '../relay/http-headers.js';
import { type Http1UpstreamRequest, headerValue, refusalOf } from '../relay/http-relay.js';

/** The mark a client proxy puts on a request (and the inbound on its response). */
export const L5D_ORIG_PROTO = 'l5d-orig-proto';
/** The response's mark: the application always answers over HTTP/1.1. */
const RESPONSE_ORIG_PROTO = 'HTTP/1.1';
/** Response bytes the stream may hold unsent before the application's response is paused. */
export const RESPONSE_HIGH_WATER_BYTES = 64 * 1024;

/** What an `l5d-orig-proto` value says of the original request. */
export interface OrigProto {
  readonly version: 'HTTP/1.1' | 'HTTP/1.0';
  readonly absoluteForm: boolean;
}

/**
 * An `l5d-orig-proto` value as linkerd2-proxy reads it (its prefix names the version, bytes 10..23
 * `absolute-form`); undefined for a value it does not know, whose request stays HTTP/2.
 */
export function parseOrigProto(value: string): OrigProto | undefined {
  const version = value.startsWith('HTTP/1.1') ? 'HTTP/1.1' : value.startsWith('HTTP/1.0') ? 'HTTP/1.0' : undefined;
  if (version === undefined) return undefined;
  return { version, absoluteForm: value.slice(10, 23) === 'absolute-form' };
}

/**
 * The HTTP/1 request for a downgraded stream's forwarded header pairs (pseudo-headers first, as
 * the inbound stack builds them; the request's `l5d-*` headers already removed, its own
 * `l5d-client-id` added): method and path from the pseudo-headers, `Host` from `:authority`
 * unless the request has one, hop-by-hop headers (`te`…) and `expect` dropped.
 */
export function http1RequestOf(pairs: readonly string[]): { readonly method: string; readonly path: string; readonly headers: string[] } {
  let method = 'GET';
  let path = '/';
  let authority: string | undefined;
  let hasHost = false;
  const headers: string[] = [];
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const name = pairs[i] as string;
    const value = pairs[i + 1] as string;
    if (name.charCodeAt(0) === 0x3a /* : */) {
      if (name === ':method') method = value;
      else if (name === ':path') path = value;
      else if (name === ':authority') authority = value;
      continue;
    }
    // `expect` too: the client proxy answered its client's 100-continue already, and the body follows.
    if (HOP_BY_HOP.has(name) || name === 'expect') continue;
    if (name === 'host') hasHost = true;
    headers.push(name, value);
  }
  if (!hasHost && authority !== undefined) headers.unshift('host', authority);
  return { method, path, headers };
}

/** The HTTP/2 form of an HTTP/1 response's header pairs: hop-by-hop and `l5d-orig-proto` dropped, names lower-cased. */
function http2Fields(raw: readonly string[]): string[] {
  const kept = filterHttp1Response(raw);
  const out: string[] = [];
  for (let i = 0; i + 1 < kept.length; i += 2) {
    const name = (kept[i] as string).toLowerCase();
    if (name === L5D_ORIG_PROTO) continue;
    out.push(name, kept[i + 1] as string);
  }
  return out;
}

/** What a downgraded request needs of the inbound HTTP stack. */
export interface OrigProtoHost {
  /** The request cannot be written as HTTP/1 (`reason`); nothing was sent: the client gets 400. */
  refused(relay: OrigProtoRelay, reason: string): void;
  /** The application failed before responding: the client gets 502. */
  unreachable(relay: OrigProtoRelay, err: string): void;
  /** The application failed in the middle of its response (the stream is reset). */
  aborted(relay: OrigProtoRelay): void;
}

/**
 * One downgraded request: the client proxy's stream (`down`) relayed as an HTTP/1.1 exchange
 * with the application; it is the stream's events and the pool's handler at once.
 */
export class OrigProtoRelay implements H2StreamEvents, Http1PoolHandler {
  readonly #host: OrigProtoHost;
  readonly down: H2Stream;
  readonly ex: HttpExchange | undefined;
  #body: Readable | null = null;
  /** Request bytes received while the body was full: credited once it is read. */
  #owed = 0;
  #abort: ((err?: Error) => void) | undefined;
  /** The pool's resume, while the application's response is paused for the stream's queue. */
  #resume: (() => void) | undefined;
  #resumeFn: (() => void) | undefined;
  #cancelled = false;

  constructor(host: OrigProtoHost, down: H2Stream, ex: HttpExchange | undefined) {
    this.#host = host;
    this.down = down;
    this.ex = ex;
  }

  /** Sends the request through `pool` (after {@link refusalOf}'s checks) and relays from now on. */
  start(pool: Http1Pool, request: Http1UpstreamRequest): void {
    const down = this.down;
    down.events = this;
    const refusal = refusalOf(request);
    if (refusal !== undefined) {
      this.#cancelled = true;
      this.ex?.fail('bad request');
      this.#host.refused(this, refusal);
      return;
    }
    if (!down.remoteEnded) {
      this.#body = new Readable({ read: () => this.#credit() });
      this.#body.on('error', noop);
    }
    pool.dispatch({ method: request.method, path: request.path, headers: request.headers, body: this.#body, close: request.closeAfter === true }, this);
  }

  // === H2StreamEvents (the client proxy's stream) ===

  headers(_s: H2Stream, _block: HeaderBlock, _end: boolean): void {
    // The client's trailers: HTTP/1 has nowhere to put them here; the body ends.
    this.#body?.push(null);
  }

  data(_s: H2Stream, chunk: Buffer, end: boolean): void {
    const body = this.#body;
    if (body === null || body.readableEnded || body.destroyed) {
      this.down.consumed(chunk.length);
      return;
    }
    if (chunk.length > 0) {
      if (body.push(chunk)) this.down.consumed(chunk.length);
      else this.#owed += chunk.length;
    }
    if (end) body.push(null);
  }

  sent(_s: H2Stream, _n: number): void {
    const resume = this.#resume;
    if (resume !== undefined && this.down.queued < RESPONSE_HIGH_WATER_BYTES) {
      this.#resume = undefined;
      resume();
    }
  }

  closed(_s: H2Stream, code: number | undefined, _byPeer: boolean): void {
    if (code !== undefined) {
      this.ex?.fail(h2Error(code));
      this.#cancel();
    }
    this.ex?.end();
  }

  // === Http1PoolHandler (the application's side) ===

  onConnect(abort: (err?: Error) => void): void {
    // Thrown: the pool drops the request unsent (the client went away while it waited).
    if (this.#cancelled) throw new Error('the client went away');
    this.#abort = abort;
  }

  onHeaders(status: number, headers: string[], resume: () => void): boolean {
    const down = this.down;
    if (this.#cancelled || down.closed) {
      this.#cancel();
      return false;
    }
    const pairs = [':status', String(status), ...http2Fields(headers), L5D_ORIG_PROTO, RESPONSE_ORIG_PROTO];
    this.ex?.head(status, grpcStatusValue(headerValue(headers, 'grpc-status')));
    const bodiless = down.method === 'HEAD' || status === 204 || status === 304;
    down.respond(pairs, bodiless);
    this.#resumeFn = resume;
    return true;
  }

  onData(chunk: Buffer): boolean {
    const down = this.down;
    if (down.closed || down.localEnded) return true;
    down.write(chunk);
    if (down.queued < RESPONSE_HIGH_WATER_BYTES) return true;
    this.#resume = this.#resumeFn;
    return false;
  }

  onComplete(trailers: string[]): void {
    this.#abort = undefined;
    const down = this.down;
    if (down.closed || down.localEnded) return;
    if (trailers.length > 0) {
      this.ex?.trailers(grpcStatusValue(headerValue(trailers, 'grpc-status')));
      down.end(http2Fields(trailers));
    } else down.end();
  }

  onError(err: Error): void {
    this.#abort = undefined;
    const down = this.down;
    if (this.#cancelled || down.closed) return;
    this.#body?.destroy();
    if (!down.headersDone) {
      this.ex?.fail('app unreachable');
      this.#host.unreachable(this, err.message);
      return;
    }
    this.ex?.fail('app response aborted');
    this.#host.aborted(this);
    down.reset(H2_INTERNAL_ERROR);
  }

  /** The body was read: what was held back is credited to the client. */
  #credit(): void {
    const owed = this.#owed;
    if (owed === 0) return;
    this.#owed = 0;
    this.down.consumed(owed);
  }

  /** The client went away: the application's request is aborted (or dropped unsent). */
  #cancel(): void {
    if (this.#cancelled) return;
    this.#cancelled = true;
    const abort = this.#abort;
    this.#abort = undefined;
    abort?.();
    this.#body?.destroy();
  }
}

function noop(): void {}
