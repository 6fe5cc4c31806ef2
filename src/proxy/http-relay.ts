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
import { RESPOND_WITH_TRAILERS, RESPOND_WITHOUT_BODY } from './h2-stream-options.js';
import { filterHttp2Response, pairsOf } from './inbound-http-headers.js';

const { NGHTTP2_CANCEL, NGHTTP2_INTERNAL_ERROR, NGHTTP2_NO_ERROR } = h2constants;
const END_STREAM = h2constants.NGHTTP2_FLAG_END_STREAM;

/**
 * Relays the body and trailers of the HTTP/1 response `ures` to `res`, whose head the caller has
 * written. When `ures` closes before it is complete (and `res` is still open), `onAborted` is
 * called and `res` is destroyed.
 */
export function relayHttp1Body(ures: IncomingMessage, res: ServerResponse, onAborted: () => void): void {
  ures.pipe(res, { end: false });
  ures.once('end', () => {
    if (ures.rawTrailers.length > 0) res.addTrailers(pairsOf(ures.rawTrailers));
    res.end();
  });
  ures.once('close', () => {
    if (ures.complete || res.writableEnded || res.destroyed) return;
    onAborted();
    res.destroy();
  });
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
