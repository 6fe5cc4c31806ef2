/**
 * Request metrics of a redirected HTTP/1 connection (transparent mode), which the outbound proxy
 * carries as a tunnel to one endpoint: the bytes are piped as they are, and this reads a copy of
 * each direction with node's parser to count what upstream's outbound counts per request —
 * `request_total` at each request head, `response_total` and `response_latency_ms` at each
 * response (status, a gRPC request's `grpc-status`, trailers included), on the endpoint's series
 * (metrics/outbound), as for a request sent through the forward proxy.
 *
 * - Responses answer requests in order (HTTP/1 has no other way); a 1xx is not the response. The
 *   answer to HEAD has no body whatever its headers say.
 * - It stops reading at what it cannot follow: a protocol switch (a `101`, a CONNECT's 2xx, a
 *   request the parser stopped after because it asked for an upgrade), a parse error either way,
 *   a response nobody asked for. The bytes still flow; exchanges in flight are then reported as
 *   failed (`error="connection closed"` when the connection ends under them, else
 *   `"unclassified"`), so no series stays held.
 * - Nothing is buffered: each chunk is parsed as it passes (a second `data` listener beside the
 *   pipe), the parsers' own state aside.
 */
import type { Socket } from 'node:net';
import { createRequestParser, createResponseParser, type Http1Parser } from '../../http/index.js';
import { grpcStatusValue, type HttpExchange, isGrpcContentType } from '../metrics/http.js';
import { headerValue } from '../relay/http-relay.js';

/** Bound on a header block the tap parses (beyond it, it stops counting). */
const MAX_HEADER_BYTES = 64 * 1024;

interface InFlight {
  readonly ex: HttpExchange;
  readonly method: string;
  responded: boolean;
}

/**
 * Counts the HTTP/1 exchanges of `client` ↔ `upstream` (piped elsewhere); `start` makes the
 * exchange of a request whose head just went by (counted on its endpoint from now on).
 */
export function tapHttp1(client: Socket, upstream: Socket, start: () => HttpExchange): void {
  const inFlight: InFlight[] = [];
  let informational = false;
  /** No more requests are read (an upgrade request, or stopped). */
  let requestsOver = false;
  let stopped = false;

  const stop = (error: string): void => {
    if (stopped) return;
    stopped = true;
    client.off('data', onRequestData);
    upstream.off('data', onResponseData);
    for (const f of inFlight.splice(0)) {
      f.ex.fail(error);
      f.ex.end();
    }
    // Never from inside one of their own callbacks.
    setImmediate(() => {
      requests.close();
      responses.close();
    });
  };

  const requests: Http1Parser = createRequestParser(
    {
      begin: noop,
      head: (method, _url, headers) => {
        const ex = start();
        ex.isGrpc = isGrpcContentType(headerValue(headers, 'content-type'));
        inFlight.push({ ex, method, responded: false });
      },
      body: noop,
      complete: noop,
    },
    MAX_HEADER_BYTES,
  );

  const responses: Http1Parser = createResponseParser(
    {
      begin: noop,
      head: (status, _reason, headers) => {
        const cur = inFlight[0];
        if (cur === undefined) {
          // Answering nothing: not followed any further.
          queueMicrotask(() => stop('unclassified'));
          return true;
        }
        if (status < 200 && status !== 101) {
          informational = true;
          return false;
        }
        cur.responded = true;
        cur.ex.head(status, grpcStatusValue(headerValue(headers, 'grpc-status')));
        if (status === 101 || (cur.method === 'CONNECT' && status < 300)) {
          // Another protocol from here: this exchange is over as far as HTTP goes.
          inFlight.shift();
          cur.ex.end();
          queueMicrotask(() => stop('unclassified'));
          return true;
        }
        return cur.method === 'HEAD';
      },
      body: noop,
      complete: (trailers) => {
        if (informational) {
          informational = false;
          return;
        }
        const cur = inFlight.shift();
        if (cur === undefined) return;
        if (trailers.length > 0) cur.ex.trailers(grpcStatusValue(headerValue(trailers, 'grpc-status')));
        cur.ex.end();
        if (requestsOver && inFlight.length === 0) queueMicrotask(() => stop('unclassified'));
      },
    },
    MAX_HEADER_BYTES,
  );

  function onRequestData(chunk: Buffer): void {
    if (requestsOver) return;
    const n = requests.execute(chunk);
    if (n instanceof Error) stop('unclassified');
    else if (n < chunk.length) requestsOver = true;
  }

  function onResponseData(chunk: Buffer): void {
    const n = responses.execute(chunk);
    if (n instanceof Error) stop('unclassified');
  }

  client.on('data', onRequestData);
  upstream.on('data', onResponseData);
  // A response delimited by the close ends with the upstream's FIN.
  upstream.once('end', () => {
    if (stopped) return;
    const err = responses.finish();
    if (err !== undefined) stop('connection closed');
  });
  const closed = (): void => stop('connection closed');
  client.once('close', closed);
  upstream.once('close', closed);
}

function noop(): void {}
