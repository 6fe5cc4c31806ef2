/**
 * One HTTP/2 request of the application relayed by the outbound proxy: the application's stream
 * (`down`, on the proxy's server connection) and the endpoint's (`up`, on the shared connection
 * to the endpoint), one object serving as the events of both, as inbound/h2-relay does.
 *
 * - The relay is the client stream's events from its first frame: while the target is resolved
 *   and the endpoint connected, the request body waits here unconsumed (the stream's window
 *   bounds it), then goes to the endpoint with the client's trailers; each chunk is credited
 *   back to its sender once written to the other side (h2/connection's flow control).
 * - Client trailers lose `l5d-*` and `proxy-*`, as the headers did; the endpoint's headers and
 *   trailers lose hop-by-hop fields (h2/connection has refused connection-specific ones).
 * - A reset on either side resets the other: the client's reset cancels the endpoint's stream;
 *   the endpoint failing before its response is the caller's to answer (502 / UNAVAILABLE), and
 *   in the middle of it resets the client's stream with the endpoint's code (or INTERNAL_ERROR).
 *   A NO_ERROR reset by the endpoint after its whole response (RFC 9113 §8.1) only stops the
 *   request body. A request is never sent twice.
 */

import type { HeaderBlock } from '../../http/index.js';
import { detached, H2_CANCEL, H2_INTERNAL_ERROR, H2_NO_ERROR, type H2Stream, type H2StreamEvents } from '../../http/index.js';
import { grpcStatusValue, h2Error } from '../metrics/http.js';
import type { OutboundExchange } from '../metrics/outbound.js';
import { HOP_BY_HOP } from '../relay/http-headers.js';
import { headerValue } from '../relay/http-relay.js';
import { filterOutboundRequest2 } from './http-headers.js';

/** What a relay needs of the outbound proxy. */
export interface OutboundH2RelayHost {
  /** The endpoint failed before responding (`detail` says how): the client gets 502 / UNAVAILABLE. */
  failed(relay: OutboundH2Relay, detail: string): void;
  /** The endpoint failed in the middle of its response; the client's stream is reset right after. */
  aborted(relay: OutboundH2Relay): void;
}

/** A relayed request: the client's stream's events from the start, the endpoint's once {@link OutboundH2Relay.send} made it. */
export class OutboundH2Relay implements H2StreamEvents {
  readonly down: H2Stream;
  readonly grpc: boolean;
  readonly ex: OutboundExchange | undefined;
  /** The request head as it goes to the endpoint (`l5d-*`, `proxy-*` dropped). */
  readonly pairs: readonly string[];
  readonly sensitive: readonly string[] | undefined;
  #host: OutboundH2RelayHost | undefined;
  #up: H2Stream | undefined;
  /** The request body received before the endpoint's stream exists (not yet credited to the client). */
  #waiting: Buffer[] = [];
  #trailers: HeaderBlock | undefined;
  /** Answered by the proxy itself: whatever else the client sends is dropped. */
  #answered = false;
  /** Counts the request down on the endpoint's load once its stream is over. */
  #settled: (() => void) | undefined;

  constructor(down: H2Stream, block: HeaderBlock, grpc: boolean, ex: OutboundExchange | undefined) {
    this.down = down;
    this.grpc = grpc;
    if (ex !== undefined) ex.isGrpc = grpc;
    this.ex = ex;
    this.pairs = filterOutboundRequest2(block.pairs);
    this.sensitive = block.sensitive;
    down.events = this;
  }

  /** True once the client's stream is gone or the request was answered: nothing more to do for it. */
  get over(): boolean {
    return this.down.closed || this.#answered;
  }

  /** Whether the request still holds back nothing but its head (it may be sent with END_STREAM on its HEADERS). */
  get headersOnly(): boolean {
    return this.down.remoteEnded && this.#waiting.length === 0 && this.#trailers === undefined;
  }

  /** From now on the proxy answers itself: what the client sends more is consumed and dropped. */
  answer(): void {
    this.#answered = true;
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const c of waiting) this.down.consumed(c.length);
  }

  /**
   * Relays through `up`, the endpoint's stream for {@link pairs} (opened with END_STREAM when
   * {@link headersOnly}): what the client sent meanwhile goes first. `settled` is called once
   * `up` is over. False, with `settled` called, when `up` closed already.
   */
  send(up: H2Stream, host: OutboundH2RelayHost, settled: () => void): boolean {
    this.#up = up;
    this.#host = host;
    this.#settled = settled;
    up.events = this;
    if (up.closed) {
      this.#settle();
      return false;
    }
    // Opened with END_STREAM: nothing follows.
    if (this.headersOnly) return true;
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const c of waiting) up.write(c);
    const trailers = this.#trailers;
    this.#trailers = undefined;
    if (trailers !== undefined) up.end(filterOutboundRequest2(trailers.pairs), trailers.sensitive);
    else if (this.down.remoteEnded) up.end();
    return true;
  }

  headers(s: H2Stream, block: HeaderBlock, end: boolean): void {
    const down = this.down;
    const up = this.#up;
    if (s === down) {
      // The client's trailers.
      if (this.#answered) return;
      if (up === undefined) this.#trailers = block;
      else up.end(filterOutboundRequest2(block.pairs), block.sensitive);
      return;
    }
    const pairs = withoutHopByHop(block.pairs);
    const ex = this.ex;
    if (!down.headersDone) {
      // Recorded first: a head that ends the response (trailers-only gRPC, 204) closes the stream, which ends the exchange.
      ex?.head(Number(headerValue(pairs, ':status')), grpcStatusValue(headerValue(pairs, 'grpc-status')));
      down.respond(pairs, end, block.sensitive);
    } else {
      ex?.trailers(grpcStatusValue(headerValue(pairs, 'grpc-status')));
      down.end(pairs, block.sensitive);
    }
  }

  data(s: H2Stream, chunk: Buffer, end: boolean): void {
    if (s === this.down) {
      if (this.#answered) {
        s.consumed(chunk.length);
        return;
      }
      const up = this.#up;
      if (up === undefined) {
        // What waits is what it weighs, not the read it came in.
        if (chunk.length > 0) this.#waiting.push(detached(chunk));
        return;
      }
      up.write(chunk);
      if (end) up.end();
      return;
    }
    this.down.write(chunk);
    if (end) this.down.end();
  }

  sent(s: H2Stream, n: number): void {
    if (s === this.down) this.#up?.consumed(n);
    else this.down.consumed(n);
  }

  closed(s: H2Stream, code: number | undefined): void {
    const down = this.down;
    const up = this.#up;
    if (s === down) {
      this.#waiting = [];
      if (up !== undefined && !up.closed) up.reset(H2_CANCEL);
      // A reset (by the client, or ours relaying the endpoint's) fails the exchange.
      if (code !== undefined && code !== H2_NO_ERROR) this.ex?.fail(h2Error(code));
      this.ex?.end();
      return;
    }
    this.#settle();
    if (up === undefined || down.closed || down.localEnded || code === undefined || (code === H2_NO_ERROR && up.remoteEnded)) return;
    const host = this.#host as OutboundH2RelayHost;
    if (!down.headersDone) {
      // A reset the endpoint sent is labelled as upstream spells it, like the inbound side's.
      const lost = up.conn.destroyed;
      if (!lost) this.ex?.fail(h2Error(code));
      host.failed(this, lost ? 'the connection to the endpoint failed' : `stream reset (code ${code})`);
    } else {
      host.aborted(this);
      down.reset(code !== H2_NO_ERROR ? code : H2_INTERNAL_ERROR);
    }
  }

  #settle(): void {
    const settled = this.#settled;
    this.#settled = undefined;
    settled?.();
  }
}

/** `pairs` without hop-by-hop fields (`te` in a response, say), a copy only when there is one. */
function withoutHopByHop(pairs: readonly string[]): readonly string[] {
  let i = 0;
  while (i + 1 < pairs.length && !HOP_BY_HOP.has(pairs[i] as string)) i += 2;
  if (i + 1 >= pairs.length) return pairs;
  const out = pairs.slice(0, i);
  for (; i + 1 < pairs.length; i += 2) if (!HOP_BY_HOP.has(pairs[i] as string)) out.push(pairs[i] as string, pairs[i + 1] as string);
  return out;
}
