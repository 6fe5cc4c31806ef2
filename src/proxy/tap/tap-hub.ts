/**
 * The proxy's tap: the inbound stacks publish request and connection decisions to it, and each
 * `/tap` subscriber gets the ones its filter selects, as NDJSON lines.
 *
 * Cost on the data path: with nobody tapping, a publisher reads {@link TapHub.active} (a field)
 * and does nothing else — no event object, no clock read. With subscribers, an event is built and
 * serialized once, and written to each subscriber that wants it; a write never waits.
 *
 * Bounds (per proxy, per subscriber), so a tap can neither exhaust the proxy nor slow its traffic:
 * - at most `maxSubscribers` at once (the admin server answers 503 beyond);
 * - at most `eventsPerSecond` events per subscriber (a token bucket, burst = one second's worth):
 *   events beyond are dropped and counted (`dropped.rate`), a sample of the traffic rather than
 *   all of it;
 * - a slow reader: once `maxBufferedBytes` wait in its socket's buffer, events are dropped and
 *   counted (`dropped.slow`) instead of queued, so memory stays bounded and nothing waits;
 * - `max` events and `seconds` seconds (the subscriber's own, capped by the query bounds).
 * The stream then ends with one line `{"end":{"reason","events","dropped":{"rate","slow"}}}`.
 */
import type { ClientInfo, Deny, Permit, RequestInfo } from '../../core/index.js';
import { httpStatusOf } from '../../core/index.js';
import type { InboundHttpRecorder } from '../metrics/inbound-stats.js';
import { denyEvent, type ProxyTapEvent, pathOf, permitEvent } from './tap-event.js';
import type { TapFilter } from './tap-query.js';

/** Where a subscriber's lines go. */
export interface TapSink {
  /** Writes one line (newline included). */
  write(line: string): void;
  /** Bytes written and not yet flushed to the socket. */
  bufferedBytes(): number;
  /** Writes the last line and ends the stream. */
  end(line: string): void;
}

/** Why a tap stream ended. */
export type TapEndReason = 'max' | 'seconds' | 'closed' | 'shutdown';

/** The last line of a tap stream. */
export interface TapEnd {
  readonly end: {
    readonly reason: TapEndReason;
    readonly events: number;
    readonly dropped: { readonly rate: number; readonly slow: number };
  };
}

/** Limits of a {@link TapHub}. */
export interface TapLimits {
  /** Concurrent subscribers (default 8). */
  readonly maxSubscribers?: number;
  /** Events per second per subscriber before sampling drops (default 100). */
  readonly eventsPerSecond?: number;
  /** A subscriber's unflushed bytes beyond which its events are dropped (default 64 KiB). */
  readonly maxBufferedBytes?: number;
}

/** Default of {@link TapLimits.maxSubscribers}. */
export const TAP_MAX_SUBSCRIBERS = 8;
/** Default of {@link TapLimits.eventsPerSecond}. */
export const TAP_EVENTS_PER_SECOND = 100;
/** Default of {@link TapLimits.maxBufferedBytes}. */
export const TAP_MAX_BUFFERED_BYTES = 64 * 1024;

const NONE_GRPC = -1;

/** One open `/tap` stream. */
export class TapSubscriber {
  readonly #hub: TapHub;
  readonly #filter: TapFilter;
  readonly #sink: TapSink;
  readonly #rate: number;
  readonly #maxBuffered: number;
  #tokens: number;
  #refilledMs: number;
  #events = 0;
  #droppedRate = 0;
  #droppedSlow = 0;
  #timer: NodeJS.Timeout | undefined;
  #ended = false;

  /** @internal made by {@link TapHub.subscribe} */
  constructor(hub: TapHub, filter: TapFilter, sink: TapSink, rate: number, maxBuffered: number) {
    this.#hub = hub;
    this.#filter = filter;
    this.#sink = sink;
    this.#rate = rate;
    this.#maxBuffered = maxBuffered;
    this.#tokens = rate;
    this.#refilledMs = performance.now();
    this.#timer = setTimeout(() => this.end('seconds'), filter.seconds * 1000);
    this.#timer.unref();
  }

  /** Whether the stream has ended. */
  get ended(): boolean {
    return this.#ended;
  }

  /** Whether this subscriber selects `e`. */
  matches(e: ProxyTapEvent): boolean {
    const f = this.#filter;
    if (f.denied && e.decision === 'allow') return false;
    if (f.method !== undefined && e.method !== f.method) return false;
    if (f.identity !== undefined && e.clientId !== f.identity) return false;
    if (f.pathPrefix !== undefined && (e.path === null || !e.path.startsWith(f.pathPrefix))) return false;
    return true;
  }

  /** Offers one selected event (serialized once for all subscribers). */
  offer(line: string): void {
    if (this.#ended) return;
    const now = performance.now();
    this.#tokens = Math.min(this.#rate, this.#tokens + ((now - this.#refilledMs) * this.#rate) / 1000);
    this.#refilledMs = now;
    if (this.#tokens < 1) {
      this.#droppedRate++;
      return;
    }
    if (this.#sink.bufferedBytes() > this.#maxBuffered) {
      this.#droppedSlow++;
      return;
    }
    this.#tokens -= 1;
    this.#events++;
    this.#sink.write(line);
    if (this.#events >= this.#filter.max) this.end('max');
  }

  /** Ends the stream with its summary line (unless the client is gone). Idempotent. */
  end(reason: TapEndReason): void {
    if (this.#ended) return;
    this.#ended = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#hub.remove(this);
    if (reason === 'closed') return;
    const end: TapEnd = { end: { reason, events: this.#events, dropped: { rate: this.#droppedRate, slow: this.#droppedSlow } } };
    this.#sink.end(`${JSON.stringify(end)}\n`);
  }
}

/**
 * The tap of one proxy. Publishers check {@link active} first; every `publish*` method is a
 * no-op without subscribers anyway.
 */
export class TapHub {
  /** True while someone taps: read by the data path before doing any tap work. */
  active = false;
  readonly #subs: TapSubscriber[] = [];
  readonly #max: number;
  readonly #rate: number;
  readonly #maxBuffered: number;

  /** Throws RangeError for a limit that is not a positive integer. */
  constructor(limits: TapLimits = {}) {
    this.#max = limits.maxSubscribers ?? TAP_MAX_SUBSCRIBERS;
    this.#rate = limits.eventsPerSecond ?? TAP_EVENTS_PER_SECOND;
    this.#maxBuffered = limits.maxBufferedBytes ?? TAP_MAX_BUFFERED_BYTES;
    for (const [name, v] of [
      ['maxSubscribers', this.#max],
      ['eventsPerSecond', this.#rate],
      ['maxBufferedBytes', this.#maxBuffered],
    ] as const) {
      if (!Number.isInteger(v) || v < 1) throw new RangeError(`bad ${name} ${v}`);
    }
  }

  /** Open subscriptions. */
  get subscribers(): number {
    return this.#subs.length;
  }

  /** The most subscribers at once. */
  get maxSubscribers(): number {
    return this.#max;
  }

  /** A new subscriber, or undefined when `maxSubscribers` are open. */
  subscribe(filter: TapFilter, sink: TapSink): TapSubscriber | undefined {
    if (this.#subs.length >= this.#max) return undefined;
    const s = new TapSubscriber(this, filter, sink, this.#rate, this.#maxBuffered);
    this.#subs.push(s);
    this.active = true;
    return s;
  }

  /** @internal called by a subscriber that ended */
  remove(s: TapSubscriber): void {
    const i = this.#subs.indexOf(s);
    if (i !== -1) this.#subs.splice(i, 1);
    this.active = this.#subs.length > 0;
  }

  /** Ends every stream (the proxy is closing). */
  close(): void {
    for (const s of [...this.#subs]) s.end('shutdown');
  }

  /** Hands an event to the subscribers that select it. */
  publish(e: ProxyTapEvent): void {
    let line: string | undefined;
    // A copy: a subscriber reaching its max leaves the list during the loop.
    for (const s of this.#subs.slice()) {
      if (!s.matches(e)) continue;
      line ??= `${JSON.stringify(e)}\n`;
      s.offer(line);
    }
  }

  /** A request denied (or answered 404/500 for want of a route or policy). `grpc`: answered with a gRPC status. */
  httpDenied(port: number, client: ClientInfo, req: RequestInfo, d: Deny, grpc: boolean): void {
    if (!this.active) return;
    const status = grpc ? 200 : httpStatusOf(d);
    const grpcStatus = grpc ? grpcStatusOf(d) : null;
    this.publish(denyEvent({ port, client, method: req.method, authority: req.authority ?? null, path: pathOf(req.path) }, d, d.kind, status, grpcStatus));
  }

  /**
   * A permitted request: its event is published when the exchange ends, through the recorder
   * returned (which also reports to `inner`, the metrics' own).
   */
  httpPermitted(port: number, client: ClientInfo, req: RequestInfo, d: Permit, inner: InboundHttpRecorder | undefined): InboundHttpRecorder {
    return {
      end: (status, headerGrpc, trailerGrpc, error, latencyMs, grpc) => {
        inner?.end(status, headerGrpc, trailerGrpc, error, latencyMs, grpc);
        if (!this.active) return;
        const grpcStatus = trailerGrpc !== NONE_GRPC ? trailerGrpc : headerGrpc !== NONE_GRPC ? headerGrpc : null;
        this.publish(
          permitEvent(
            { port, client, method: req.method, authority: req.authority ?? null, path: pathOf(req.path) },
            d,
            status === 0 ? null : status,
            grpcStatus,
            Number.isNaN(latencyMs) ? null : Math.round(latencyMs * 1000) / 1000,
            error ?? null,
          ),
        );
      },
    };
  }

  /** A connection refused, or (`terminated`) cut because a policy change revoked it. */
  tcpDenied(port: number, client: ClientInfo, d: Deny, terminated: boolean): void {
    if (!this.active) return;
    this.publish(denyEvent({ port, client, method: null, authority: null, path: null }, d, terminated ? 'tcp-terminate' : d.kind, null, null));
  }

  /** A connection admitted only by the audit policy (would be refused otherwise). */
  tcpAudited(port: number, client: ClientInfo, d: Permit): void {
    if (!this.active) return;
    this.publish(permitEvent({ port, client, method: null, authority: null, path: null }, d, null, null, null, null));
  }
}

function grpcStatusOf(d: Deny): number {
  switch (d.kind) {
    case 'http403':
    case 'grpc7':
      return 7;
    case 'http404':
    case 'grpc5':
      return 5;
    default:
      return 13;
  }
}
