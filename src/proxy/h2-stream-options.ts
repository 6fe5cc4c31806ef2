/**
 * The options objects the outbound proxy hands to node:http2 for every relayed request and response,
 * complete, shared and frozen.
 *
 * `ClientHttp2Session#request` and `ServerHttp2Stream#respond` copy their options (`{ ...options }`)
 * and then add the fields the caller left out: `weight`, `parent`, `exclusive` and `silent` for a
 * request, `endStream` for a response. Adding properties to that fresh copy costs V8 new hidden
 * classes per call, and these live in the old generation. Measured on the inbound proxy at 1,000
 * gRPC requests/s (`npm run bench -- mesh`'s gRPC path, V8's sampling heap profiler attached,
 * counting what only a full collection reclaims): with `{ endStream }` alone, ~6 KiB per request
 * ended in the old generation, the request's streams and everything reachable from them included,
 * so a mark-compact came every ~4 s (7-30 ms pauses, which is what the gRPC p99 is made of); with
 * every field present, ~1 KiB per request, and a mark-compact every ~30 s.
 *
 * node only reads these objects (it copies them before adding anything), so one frozen object of
 * each shape serves every call. Values are node's own defaults: priority weight 16, no parent,
 * not exclusive, not silent.
 */
import { constants as h2constants } from 'node:http2';

const PRIORITY = { weight: h2constants.NGHTTP2_DEFAULT_WEIGHT, parent: 0, exclusive: false, silent: false } as const;

/** `session.request(headers, …)`: the request ends with its headers (no body). */
export const REQUEST_WITHOUT_BODY = Object.freeze({ endStream: true, ...PRIORITY });
/** `session.request(headers, …)`: a body follows. */
export const REQUEST_WITH_BODY = Object.freeze({ endStream: false, ...PRIORITY });

/** `stream.respond(headers, …)`: the response ends with its headers. */
export const RESPOND_WITHOUT_BODY = Object.freeze({ endStream: true, waitForTrailers: false });
/** `stream.respond(headers, …)`: a body follows, then trailers (`'wantTrailers'`). */
export const RESPOND_WITH_TRAILERS = Object.freeze({ endStream: false, waitForTrailers: true });
/** `stream.respond(headers, …)`: a body follows, no trailers. */
export const RESPOND_WITH_BODY = Object.freeze({ endStream: false, waitForTrailers: false });

/** The request options for a request that does (`endStream` false) or does not have a body. */
export function requestOptions(endStream: boolean): typeof REQUEST_WITHOUT_BODY | typeof REQUEST_WITH_BODY {
  return endStream ? REQUEST_WITHOUT_BODY : REQUEST_WITH_BODY;
}
