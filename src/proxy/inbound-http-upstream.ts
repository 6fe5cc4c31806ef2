/**
 * Connections from the inbound HTTP stack to the application (`host:port`: local mode's
 * `appHost:appPort`, or in transparent mode the pod address a connection to an undeclared port
 * arrived on).
 * HTTP/1: one keep-alive {@link Http1Pool} per application address; the connection count per
 * address is bounded, requests beyond it queue in the pool. Idle connections close after 4 s (or
 * the application's `Keep-Alive: timeout` hint less 2 s), and pools left without a connection
 * are dropped every {@link PRUNE_INTERVAL_MS}. HTTP/2 (and gRPC):
 * one `ClientHttp2Session` per application address, shared by every request to it and replaced
 * once it closes, fails or receives a GOAWAY (streams already open on it finish there).
 * nghttp2 queues streams beyond the application's `maxConcurrentStreams` itself.
 */
import type { OutgoingHttpHeaders } from 'node:http';
import { type ClientHttp2Session, type ClientHttp2Stream, connect as connectHttp2 } from 'node:http2';
import { connect as connectTcp } from 'node:net';
import { requestOptions } from './h2-stream-options.js';
import { dropIdle, Http1Pool, isOpen, plainConnect } from './http1-pool.js';

/** Settings of an {@link AppUpstream}. */
export interface AppUpstreamOptions {
  /** Upper bound of concurrent HTTP/1 connections to each application address. */
  readonly maxSocketsPerPort: number;
}

function noop(): void {}

/** How often HTTP/1 pools without a connection are dropped. */
export const PRUNE_INTERVAL_MS = 30_000;

const SESSION_GONE: ReadonlySet<string> = new Set(['ERR_HTTP2_INVALID_SESSION', 'ERR_HTTP2_GOAWAY_SESSION', 'ERR_HTTP2_OUT_OF_STREAMS']);

function isSessionGone(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && SESSION_GONE.has(code);
}

/** The application's HTTP/1 connection pool and HTTP/2 sessions. */
export class AppUpstream {
  readonly #maxSockets: number;
  /** By `host|port`. */
  readonly #pools = new Map<string, Http1Pool>();
  #pruneTimer: NodeJS.Timeout | undefined;
  /** By `host|port`. */
  readonly #sessions = new Map<string, ClientHttp2Session>();
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
   * Opens an HTTP/2 stream to the application at `host:port` on the shared session. Throws
   * (like `ClientHttp2Session.request`) only when even a fresh session refuses the stream.
   */
  request2(host: string, port: number, headers: OutgoingHttpHeaders, endStream: boolean): ClientHttp2Stream {
    const key = `${host}|${port}`;
    const session = this.#session(key, host, port);
    try {
      return session.request(headers, requestOptions(endStream));
    } catch (e) {
      // The session went away between uses (closed, GOAWAY, stream ids used up): one retry on a
      // new one. Anything else (an invalid header) is the request's fault, not the session's.
      if (!isSessionGone(e)) throw e;
      this.#drop(key, session);
      return this.#session(key, host, port).request(headers, requestOptions(endStream));
    }
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

  #session(key: string, host: string, port: number): ClientHttp2Session {
    const live = this.#sessions.get(key);
    if (live !== undefined && !live.closed && !live.destroyed) return live;
    const authorityHost = host.includes(':') ? `[${host}]` : host;
    const session = connectHttp2(`http://${authorityHost}:${port}`, {
      createConnection: () => connectTcp({ host, port, noDelay: true }),
    });
    // Stream errors reach the streams; the session's own error only retires it.
    session.on('error', () => this.#drop(key, session));
    session.on('goaway', () => this.#drop(key, session));
    session.on('close', () => this.#drop(key, session));
    session.on('frameError', noop);
    if (this.#closed) session.destroy();
    else this.#sessions.set(key, session);
    return session;
  }

  #drop(key: string, session: ClientHttp2Session): void {
    if (this.#sessions.get(key) === session) this.#sessions.delete(key);
  }
}
