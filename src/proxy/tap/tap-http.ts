/**
 * `GET /tap` on the admin port: the query parsed (400 with a JSON error when it is bad), a
 * subscriber opened (503 with a JSON error when the proxy serves as many taps as it may), then
 * NDJSON until the subscriber ends or the client goes away. The admin server has authorized the
 * request with the port-4191 policy and checked that the client is the tap identity over mesh TLS
 * before it gets here.
 */
import type { TapHub, TapSink } from './tap-hub.js';
import { parseTapQuery, type TapQueryBounds } from './tap-query.js';

const NDJSON = 'application/x-ndjson';
const JSON_TYPE = 'application/json';

function errorBody(code: string, message: string, hint: string): string {
  return `${JSON.stringify({ error: { code, message, hint } })}\n`;
}

/** What `/tap` uses of an HTTP/1 `ServerResponse` or an HTTP/2 compatibility response. */
export interface TapResponse {
  writeHead(status: number, headers: Record<string, string>): unknown;
  write(chunk: string): unknown;
  end(chunk: string): unknown;
  once(event: 'close', listener: () => void): unknown;
  /** HTTP/1 only: sends the head before the first event. */
  flushHeaders?: () => void;
  /** HTTP/1: the unflushed bytes. */
  readonly writableLength?: number;
  /** HTTP/2: the stream holds the unflushed bytes (the compatibility response has no count of its own). */
  readonly stream?: { readonly writableLength: number };
}

/** A sink over an HTTP/1 or HTTP/2 response. */
function sinkOf(res: TapResponse): TapSink {
  const buffered = res.stream !== undefined ? () => res.stream?.writableLength ?? 0 : () => res.writableLength ?? 0;
  return {
    write: (line) => {
      res.write(line);
    },
    bufferedBytes: buffered,
    end: (line) => {
      res.end(line);
    },
  };
}

/** Serves one `/tap` request on `hub`. Never throws. */
export function serveTap(hub: TapHub, url: URL, res: TapResponse, bounds?: TapQueryBounds): void {
  const q = parseTapQuery(url.searchParams, bounds);
  if (!q.ok) {
    res.writeHead(400, { 'content-type': JSON_TYPE });
    res.end(errorBody(q.error.code, q.error.message, q.error.hint));
    return;
  }
  const sub = hub.subscribe(q.value, sinkOf(res));
  if (sub === undefined) {
    res.writeHead(503, { 'content-type': JSON_TYPE, 'retry-after': '5' });
    res.end(
      errorBody(
        'TAP_BUSY',
        `this proxy serves ${hub.maxSubscribers} taps at once, all open`,
        'retry once another tap of this pod ends (each ends after its max events or seconds)',
      ),
    );
    return;
  }
  res.writeHead(200, { 'content-type': NDJSON, 'cache-control': 'no-store' });
  // Headers now, so the client knows the tap is open before the first event (HTTP/2's go at once).
  res.flushHeaders?.();
  res.once('close', () => sub.end('closed'));
}
