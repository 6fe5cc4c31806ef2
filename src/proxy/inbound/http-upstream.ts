/**
 * Connections from the inbound HTTP stack to the application (`host:port`: local mode's
 * `appHost:appPort`, or in transparent mode the pod address a connection to an undeclared port
 * arrived on).
 * HTTP/1: one keep-alive {@link Http1Pool} per application address; the connection count per
 * address is bounded, requests beyond it queue in the pool. Idle connections close after 4 s (or
 * the application's `Keep-Alive: timeout` hint less 2 s), and pools left without a connection
 * are dropped every {@link PRUNE_INTERVAL_MS}. HTTP/2 (and gRPC):
 * one {@link H2Connection} per application address, shared by every request to it and replaced
 * once it closes, fails or receives a GOAWAY (streams already open on it finish there).
 * Streams beyond the application's `MAX_CONCURRENT_STREAMS` wait in the connection for a slot.
 */
import { connect as connectTcp } from 'node:net';
import { dropIdle, H2Connection, type H2Stream, Http1Pool, isOpen, plainConnect } from '../../http/index.js';

/** Settings of an {@link AppUpstream}. */
export interface AppUpstreamOptions {
  /** Upper bound of concurrent HTTP/1 connections to each application address. */
  readonly maxSocketsPerPort: number;
}

/** How often HTTP/1 pools without a connection are dropped. */
export const PRUNE_INTERVAL_MS = 30_000;

/** The application's HTTP/1 connection pool and HTTP/2 sessions. */
export class AppUpstream {
  readonly #maxSockets: number;
  /** By `host|port`. */
  readonly #pools = new Map<string, Http1Pool>();
  #pruneTimer: NodeJS.Timeout | undefined;
  /** By `host|port`. */
  readonly #sessions = new Map<string, H2Connection>();
  #closed = false;

  constructor(opts: AppUpstreamOptions) {
    this.#maxSockets = opts.maxSocketsPerPort;
  }

  /**
   * The HTTP/1 keep-alive pool to the application at `host:port` (a request without a `Host`
   * header gets `host:port`). Destroyed pools refuse requests once the upstream is closed.
   */
  pool1(host: string, port: number): Http1Pool {
    const key = `${host}|${port}`;
    let pool = this.#pools.get(key);
    // A closed pool (retired by the relay) finishes its requests on its own; a new one takes its place.
    if (!isOpen(pool)) {
      const authorityHost = host.includes(':') ? `[${host}]` : host;
      pool = new Http1Pool({ authority: `${authorityHost}:${port}`, connect: plainConnect(host, port), connections: this.#maxSockets });
      if (this.#closed) void pool.destroy();
      else {
        this.#pools.set(key, pool);
        if (this.#pruneTimer === undefined) {
          this.#pruneTimer = setInterval(() => this.prune(), PRUNE_INTERVAL_MS);
          this.#pruneTimer.unref();
        }
      }
    }
    return pool;
  }

  /**
   * Opens an HTTP/2 stream to the application at `host:port` on the shared connection (a new one
   * when it went away): set its `events` at once, then check `closed` (a connection can fail while
   * sending the headers). Undefined once the upstream is closed, or when too many requests already
   * wait for the application's concurrency limit. A connection that fails to connect closes the
   * stream (`stream.conn.destroyed`).
   */
  request2(host: string, port: number, pairs: readonly string[], endStream: boolean, sensitive?: readonly string[]): H2Stream | undefined {
    if (this.#closed) return undefined;
    const key = `${host}|${port}`;
    const session = this.#session(key, host, port);
    const stream = session.request(pairs, endStream, sensitive);
    if (stream !== undefined || session.usable) return stream;
    // It went away between uses (GOAWAY, closing, stream ids spent): one retry on a new one.
    this.#sessions.delete(key);
    return this.#session(key, host, port).request(pairs, endStream, sensitive);
  }

  /** Drops the HTTP/1 pools that hold no connection and no request (transparent mode makes one per pod address and port). */
  prune(): void {
    dropIdle(this.#pools);
  }

  /** HTTP/1 pools currently held. */
  get http1Pools(): number {
    return this.#pools.size;
  }

  /** Closes every pooled connection and session; later requests fail. */
  close(): void {
    this.#closed = true;
    clearInterval(this.#pruneTimer);
    for (const p of this.#pools.values()) void p.destroy();
    this.#pools.clear();
    for (const s of this.#sessions.values()) s.destroy();
    this.#sessions.clear();
  }

  #session(key: string, host: string, port: number): H2Connection {
    const live = this.#sessions.get(key);
    if (live?.usable === true) return live;
    const socket = connectTcp({ host, port, noDelay: true });
    const session: H2Connection = new H2Connection(socket, {
      role: 'client',
      onGoaway: () => this.#drop(key, session),
      onClose: () => this.#drop(key, session),
    });
    this.#sessions.set(key, session);
    return session;
  }

  #drop(key: string, session: H2Connection): void {
    if (this.#sessions.get(key) === session) this.#sessions.delete(key);
  }
}
