/**
 * One permitted HTTP/2 request relayed by the inbound proxy: the client's stream (`down`) and the
 * application's (`up`), one object serving as the events of both (told apart by the stream), so
 * a relayed request costs one allocation rather than two event objects of closures.
 *
 * - Headers, data and trailers go across as they come; each chunk is credited back to its sender
 *   once written to the other side (h2/connection's flow control), so a slow reader slows its
 *   writer. The client's trailers lose `l5d-*`, as its headers did.
 * - A reset on either side resets the other; a NO_ERROR reset by the application after its whole
 *   response (RFC 9113 §8.1) only stops the request body.
 * - Until the response starts, the request relayed so far is kept (up to {@link REPLAY_BYTES},
 *   the client's credit for it held back meanwhile, so flow control still bounds it — and it
 *   counts toward the connection's MAX_HELD_BYTES): a stream the application refused unprocessed
 *   (REFUSED_STREAM, RFC 9113 §8.7: its RST_STREAM, its GOAWAY leaving the stream out) goes once
 *   more, on a new connection if need be. A connection that failed to connect or to send its
 *   SETTINGS is not tried again: that would only double the wait for the same 502.
 */

import type { HeaderBlock } from '../../http/index.js';
import { detached, H2_CANCEL, H2_INTERNAL_ERROR, H2_NO_ERROR, H2_REFUSED_STREAM, type H2Stream, type H2StreamEvents } from '../../http/index.js';
import { grpcStatusValue, type HttpExchange, h2Error } from '../metrics/http.js';
import { isL5dHeader } from '../relay/http-headers.js';
import { headerValue } from '../relay/http-relay.js';

/** Request bytes kept for sending again when the application refuses a stream unprocessed. */
export const REPLAY_BYTES = 16 * 1024;
/** And at most this many chunks of them. */
const REPLAY_CHUNKS = 64;

/** What a relay needs of the inbound HTTP stack. */
export interface H2RelayHost {
  /** A stream to the application for `relay`'s request; undefined when that failed (the client was answered). */
  open(relay: H2Relay, endStream: boolean): H2Stream | undefined;
  /** The application failed before responding: the client gets 502 / UNAVAILABLE. */
  unreachable(relay: H2Relay, err: string): void;
  /** The application failed in the middle of its response. */
  aborted(relay: H2Relay): void;
  /** The application refused the request unprocessed and it was sent again. */
  retried(relay: H2Relay): void;
}

/** A relayed request; {@link H2Relay.start} opens the application's stream. */
export class H2Relay implements H2StreamEvents {
  readonly #host: H2RelayHost;
  readonly down: H2Stream;
  /** What goes to the application: the request head as forwarded. */
  readonly pairs: readonly string[];
  readonly sensitive: readonly string[] | undefined;
  readonly ex: HttpExchange | undefined;
  /** The application's stream (the second one after a refusal). */
  #up: H2Stream | undefined;
  /** Request body relayed so far, while the request may still go again. */
  #kept: Buffer[] | undefined = [];
  #keptBytes = 0;
  /** Credit for kept bytes, given to the client once they may no longer be sent again. */
  #withheld = 0;
  #trailers: HeaderBlock | undefined;

  constructor(host: H2RelayHost, down: H2Stream, pairs: readonly string[], sensitive: readonly string[] | undefined, ex: HttpExchange | undefined) {
    this.#host = host;
    this.down = down;
    this.pairs = pairs;
    this.sensitive = sensitive;
    this.ex = ex;
  }

  /** Opens the application's stream and relays from now on (nothing, when that failed). */
  start(): void {
    const up = this.#host.open(this, this.down.remoteEnded);
    if (up === undefined) return;
    this.#up = up;
    this.down.events = this;
    up.events = this;
  }

  headers(s: H2Stream, block: HeaderBlock, end: boolean): void {
    const down = this.down;
    const up = this.#up as H2Stream;
    if (s === down) {
      // The client's trailers.
      if (this.#kept !== undefined) this.#trailers = block;
      up.end(withoutL5d(block.pairs), block.sensitive);
      return;
    }
    const ex = this.ex;
    if (!down.headersDone) {
      this.#release();
      // Recorded first: a head that ends the response (trailers-only gRPC, 204) closes the stream, which ends the exchange.
      ex?.head(Number(headerValue(block.pairs, ':status')), grpcStatusValue(headerValue(block.pairs, 'grpc-status')));
      down.respond(block.pairs, end, block.sensitive);
    } else {
      ex?.trailers(grpcStatusValue(headerValue(block.pairs, 'grpc-status')));
      down.end(block.pairs, block.sensitive);
    }
  }

  data(s: H2Stream, chunk: Buffer, end: boolean): void {
    if (s === this.down) {
      const kept = this.#kept;
      if (kept !== undefined) {
        if (this.#keptBytes + chunk.length <= REPLAY_BYTES && kept.length < REPLAY_CHUNKS) {
          // What is kept is what it weighs, not the read it came in.
          kept.push(detached(chunk));
          this.#keptBytes += chunk.length;
        } else this.#release();
      }
      const up = this.#up as H2Stream;
      up.write(chunk);
      if (end) up.end();
      return;
    }
    this.down.write(chunk);
    if (end) this.down.end();
  }

  sent(s: H2Stream, n: number): void {
    if (s === this.down) (this.#up as H2Stream).consumed(n);
    else if (this.#kept === undefined) this.down.consumed(n);
    else this.#withheld += n;
  }

  closed(s: H2Stream, code: number | undefined, byPeer: boolean): void {
    const down = this.down;
    const up = this.#up as H2Stream;
    const ex = this.ex;
    if (s === down) {
      if (!up.closed) up.reset(H2_CANCEL);
      if (code !== undefined && code !== H2_NO_ERROR) ex?.fail(h2Error(code));
      ex?.end();
      return;
    }
    // A reset with NO_ERROR after the whole response (RFC 9113 §8.1) only stops the request body.
    if (code === undefined || down.closed || down.localEnded || (code === H2_NO_ERROR && up.remoteEnded)) return;
    // Refused by the application itself (its RST_STREAM, its GOAWAY), on a connection still there:
    // not when a connection failed (to connect, or to send SETTINGS), which a second try would only repeat.
    if (!down.headersDone && code === H2_REFUSED_STREAM && byPeer && !up.conn.destroyed && this.#kept !== undefined) {
      this.#again(this.#kept);
      return;
    }
    if (!down.headersDone) {
      // Failed before responding: the connection (never made, or lost) or a reset by the application.
      const lost = up.conn.destroyed;
      ex?.fail(lost ? 'app unreachable' : h2Error(code));
      this.#host.unreachable(this, lost ? 'connection failed' : `stream reset by the application (code ${code})`);
    } else {
      this.#host.aborted(this);
      down.reset(code !== H2_NO_ERROR ? code : H2_INTERNAL_ERROR);
    }
  }

  /** Sends the request once more: what was kept, then its end as far as it came. Credit is given as it goes. */
  #again(replay: Buffer[]): void {
    this.#kept = undefined;
    this.#withheld = 0;
    const down = this.down;
    const up = this.#host.open(this, down.remoteEnded && this.#keptBytes === 0 && this.#trailers === undefined);
    if (up === undefined) return;
    this.#up = up;
    up.events = this;
    this.#host.retried(this);
    for (const c of replay) up.write(c);
    const trailers = this.#trailers;
    if (trailers !== undefined) up.end(withoutL5d(trailers.pairs), trailers.sensitive);
    else if (down.remoteEnded && this.#keptBytes > 0) up.end();
  }

  /** The request can no longer go again: its kept bytes are let go and their credit given. */
  #release(): void {
    this.#kept = undefined;
    if (this.#withheld > 0) this.down.consumed(this.#withheld);
    this.#withheld = 0;
  }
}

/** `pairs` without the client's `l5d-*` headers. */
export function withoutL5d(pairs: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < pairs.length; i += 2) if (!isL5dHeader(pairs[i] as string)) out.push(pairs[i] as string, pairs[i + 1] as string);
  return out;
}
