/**
 * Connections from the outbound proxy to endpoints (POLICY-SEMANTICS §4.2, §7).
 *
 * A meshed endpoint (one the Destination API gave a TLS identity) is reached through its proxy's
 * mesh port — `meshPortOf(endpoint)`, by default the endpoint's `opaqueTransportPort` or 4143 —
 * with TLS 1.3: SNI = the endpoint's server name (else its identity), our workload certificate as
 * the client certificate, the server chain verified against the trust anchors, the server
 * certificate required to carry exactly the endpoint's identity, ALPN `transport.l5d.io/v1`.
 * Every meshed connection then starts with a transport header naming the endpoint's port and the
 * session protocol (`http1` / `http2`; none for an opaque stream) — the 2.18+ default of sending
 * the header for every meshed endpoint. An endpoint without an identity gets plain TCP to
 * `ip:port`. Nothing is written on a connection before its handshake and checks have passed, so
 * a peer with the wrong identity never sees a byte of the request.
 *
 * Reuse (no handshake per request): HTTP/1 goes through one keep-alive `Http1Pool` per endpoint
 * and session protocol (STACK.md §2.13), whose `connect` hands over a connection already through
 * the handshake with its header written; HTTP/2 shares one {@link H2Connection} (client role) per
 * endpoint, replaced once it closes, fails or receives a GOAWAY (streams beyond the peer's
 * `MAX_CONCURRENT_STREAMS` wait in the connection for a slot). HTTP/1 needs one connection per
 * concurrent request, up to the pool's cap; requests beyond it queue in the pool, and idle
 * connections are kept for reuse. A failure to connect surfaces before any byte of a request is
 * written: as a rejected `open`/`connect`, or as the error of an HTTP/1 request dispatched to the
 * pool before its `onConnect` — callers may then retry on another endpoint.
 */
import { connect as connectTcp, isIP, type Socket } from 'node:net';
import { type ConnectionOptions, connect as connectTls, type TLSSocket } from 'node:tls';
import type { DestinationEndpoint } from '../../api/index.js';
import { dropIdle, H2_INTERNAL_ERROR, H2Connection, Http1Pool, isOpen } from '../../http/index.js';
import type { WorkloadCertificate } from '../../identity/index.js';
import { errorMessage, type Logger, MeshError, silentLogger } from '../../shared/index.js';
import { meshClientOptions, TRANSPORT_HEADER_ALPN } from '../tls/context.js';
import { encodeTransportHeader, type SessionProtocol } from '../transport/transport-header.js';

/** The upstream proxies' mesh (inbound) port. */
export const DEFAULT_MESH_PORT = 4143;

/** What a connection carries: HTTP/1, HTTP/2, or opaque bytes. */
export type OutboundProtocol = SessionProtocol | 'opaque';

/** What the connector needs of the mesh TLS settings (structurally, `RotatingMeshTls` or `MeshTlsContext`). */
export interface OutboundTlsSource {
  /** The certificate new handshakes use; undefined before the first one (meshed connects then fail). */
  readonly certificate: WorkloadCertificate | undefined;
  /** The trust anchors (PEM). */
  readonly anchorsPem: string;
}

/** Why a connection to an endpoint could not be made. */
export type OutboundConnectFailure =
  /** The proxy has no certificate yet: it cannot originate mesh TLS. */
  | 'no certificate'
  /** The TCP connection was refused or failed. */
  | 'connect failed'
  /** TCP connect plus handshake took longer than the connect timeout. */
  | 'connect timeout'
  /** The peer's certificate does not carry the endpoint's identity. */
  | 'identity mismatch'
  /** Any other TLS failure: an untrusted chain, an expired certificate, no ALPN `transport.l5d.io/v1`… */
  | 'tls handshake failed';

/** A failed connection attempt; nothing was written to the endpoint. Code `ERR_OUTBOUND_CONNECT`. */
export class OutboundConnectError extends MeshError {
  readonly reason: OutboundConnectFailure;
  /** `ip:port` dialed. */
  readonly address: string;

  constructor(reason: OutboundConnectFailure, address: string, detail: string, options?: { cause?: unknown }) {
    super('ERR_OUTBOUND_CONNECT', `${reason} (${address}): ${detail}`, options);
    this.name = 'OutboundConnectError';
    this.reason = reason;
    this.address = address;
  }
}

/** Options of {@link OutboundConnector}. */
export interface OutboundConnectorOptions {
  readonly tls: OutboundTlsSource;
  /**
   * The mesh port of a meshed endpoint's proxy (default: its `opaqueTransportPort`, else 4143).
   * Local mode runs several proxies on one host; tests map each pod address to its proxy's port.
   */
  readonly meshPortOf?: (endpoint: DestinationEndpoint) => number;
  /**
   * Source address of every connection: the pod's own address. In local mode this matters for
   * authorization — the far side's proxy admits `127.0.0.1` (its `default:localhost`), so a
   * proxy connecting from there would pass any policy. Default: chosen by the OS.
   */
  readonly localAddress?: string;
  /** Deadline for TCP connect plus TLS handshake (default 10 s). */
  readonly connectTimeoutMs?: number;
  /** Concurrent HTTP/1 connections per endpoint and session protocol (default 128; more requests queue). */
  readonly maxSocketsPerEndpoint?: number;
  /** An idle pooled HTTP/1 connection is closed after this (default 30 s, below the server side's 60 s keep-alive). */
  readonly idleSocketTimeoutMs?: number;
  /**
   * Called for every connection made to an endpoint, once it is usable (meshed: after the
   * handshake and the checks, before the transport header), e.g. for transport metrics. Must not throw.
   */
  readonly onConnection?: (socket: Socket, endpoint: DestinationEndpoint) => void;
  readonly logger?: Logger;
}

/** Counters of an {@link OutboundConnector}. */
export interface OutboundConnectorStats {
  /** Mesh TLS handshakes completed (with the identity and ALPN checks passed). */
  readonly handshakes: number;
  /** Mesh TLS handshakes that failed (identity mismatches included). */
  readonly handshakeFailures: number;
  readonly identityMismatches: number;
  /** Plain TCP connections made to unmeshed endpoints. */
  readonly plainConnects: number;
  /** Connection attempts that failed, by reason. */
  readonly connectFailures: Readonly<Partial<Record<OutboundConnectFailure, number>>>;
  /** Connections currently open. */
  readonly open: number;
  /** HTTP/1 pools and HTTP/2 sessions currently held. */
  readonly http1Pools: number;
  readonly http2Sessions: number;
}

/** A connection through its handshake, before its transport header (see {@link OutboundConnector.open}). */
export interface OutboundLink {
  readonly socket: Socket;
  /** True for mesh TLS (a transport header must be written first), false for plain TCP. */
  readonly meshed: boolean;
  /**
   * Writes the transport header announcing `protocol` (meshed links; a no-op for plain TCP).
   * Call it exactly once, before any other byte.
   */
  start(protocol: OutboundProtocol): void;
}

function noop(): void {}

/** The identity a meshed endpoint must present, or undefined for plain TCP. */
function identityOf(e: DestinationEndpoint): string | undefined {
  return e.identity === undefined || e.identity === '' ? undefined : e.identity;
}

function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** Pool key: one pool per address, identity, mesh port and protocol. */
function poolKey(e: DestinationEndpoint, meshPort: number, protocol: OutboundProtocol): string {
  return `${e.ip}|${e.port}|${identityOf(e) ?? ''}|${e.serverName ?? ''}|${meshPort}|${protocol}`;
}

interface SessionSlot {
  session: H2Connection | undefined;
  pending: Promise<H2Connection> | undefined;
}

/** Connections to endpoints, pooled per endpoint; see the module comment. */
export class OutboundConnector {
  readonly #tls: OutboundTlsSource;
  readonly #meshPortOf: (endpoint: DestinationEndpoint) => number;
  readonly #connectTimeoutMs: number;
  readonly #localAddress: string | undefined;
  readonly #maxSockets: number;
  readonly #idleSocketTimeoutMs: number;
  readonly #onConnection: ((socket: Socket, endpoint: DestinationEndpoint) => void) | undefined;
  readonly #log: Logger;
  readonly #open = new Set<Socket>();
  readonly #pools = new Map<string, Http1Pool>();
  /** The pool of each endpoint object, per protocol (a pool dropped by `prune` is destroyed, and then looked up again). */
  readonly #http1PoolOf = new WeakMap<DestinationEndpoint, Http1Pool>();
  readonly #opaquePoolOf = new WeakMap<DestinationEndpoint, Http1Pool>();
  readonly #sessions = new Map<string, SessionSlot>();
  /** The HTTP/2 slot of each endpoint object, per protocol (as for the HTTP/1 pools). */
  readonly #http2SlotOf = new WeakMap<DestinationEndpoint, SessionSlot>();
  readonly #opaque2SlotOf = new WeakMap<DestinationEndpoint, SessionSlot>();
  readonly #failures: Partial<Record<OutboundConnectFailure, number>> = {};
  #handshakes = 0;
  #handshakeFailures = 0;
  #identityMismatches = 0;
  #plainConnects = 0;
  #closed = false;

  /** Validates the options. Throws RangeError for bad limits. */
  constructor(opts: OutboundConnectorOptions) {
    this.#tls = opts.tls;
    this.#meshPortOf = opts.meshPortOf ?? ((e) => e.opaqueTransportPort ?? DEFAULT_MESH_PORT);
    this.#connectTimeoutMs = opts.connectTimeoutMs ?? 10_000;
    // A wildcard is no address of the pod's own: let the OS choose.
    this.#localAddress = opts.localAddress === '0.0.0.0' || opts.localAddress === '::' ? undefined : opts.localAddress;
    this.#maxSockets = opts.maxSocketsPerEndpoint ?? 128;
    this.#idleSocketTimeoutMs = opts.idleSocketTimeoutMs ?? 30_000;
    if (!(this.#connectTimeoutMs > 0 && this.#connectTimeoutMs <= 0x7fff_ffff)) throw new RangeError(`bad connectTimeoutMs ${this.#connectTimeoutMs}`);
    if (!(Number.isInteger(this.#maxSockets) && this.#maxSockets >= 1)) throw new RangeError(`bad maxSocketsPerEndpoint ${this.#maxSockets}`);
    if (!(this.#idleSocketTimeoutMs > 0 && this.#idleSocketTimeoutMs <= 0x7fff_ffff))
      throw new RangeError(`bad idleSocketTimeoutMs ${this.#idleSocketTimeoutMs}`);
    this.#onConnection = opts.onConnection;
    this.#log = opts.logger ?? silentLogger();
  }

  /** Whether traffic to `endpoint` goes over mesh TLS. */
  isMeshed(endpoint: DestinationEndpoint): boolean {
    return identityOf(endpoint) !== undefined;
  }

  /**
   * Opens a connection to `endpoint` through its handshake and checks, without a transport
   * header yet (for tunnels, whose protocol is learned after connecting). The socket is
   * half-open: a FIN from either side is relayed without closing the other direction. Rejects
   * with {@link OutboundConnectError}.
   */
  async open(endpoint: DestinationEndpoint): Promise<OutboundLink> {
    const meshed = this.isMeshed(endpoint);
    const socket = await this.#dial(endpoint, true);
    let started = false;
    return {
      socket,
      meshed,
      start: (protocol) => {
        if (started) return;
        started = true;
        if (meshed) socket.write(encodeTransportHeader(headerFor(endpoint, protocol)));
      },
    };
  }

  /**
   * Opens a connection to `endpoint` ready for `protocol` bytes (transport header written), as
   * the HTTP pools use them (not half-open: the peer's FIN closes it). Rejects with
   * {@link OutboundConnectError}.
   */
  async connect(endpoint: DestinationEndpoint, protocol: OutboundProtocol): Promise<Socket> {
    const socket = await this.#dial(endpoint, false);
    if (!this.isMeshed(endpoint)) return socket;
    // Resolved once the header is flushed: a header that cannot be written is a connect failure,
    // which the caller may retry on another endpoint (nothing of a request was sent).
    await new Promise<void>((resolve, reject) => {
      socket.write(encodeTransportHeader(headerFor(endpoint, protocol)), (err) => {
        if (err === undefined || err === null) resolve();
        else {
          socket.destroy();
          reject(this.#fail('connect failed', hostPort(endpoint.ip, endpoint.port), `the transport header could not be written: ${err.message}`, err));
        }
      });
    });
    return socket;
  }

  /**
   * The HTTP/1 keep-alive pool to `endpoint` for `protocol` (`http1`, or `opaque` for an
   * endpoint whose port is opaque: the bytes are then forwarded as a TCP stream). A connect
   * failure is the error of the requests waiting for that connection (an
   * {@link OutboundConnectError}), before their `onConnect`.
   */
  pool1(endpoint: DestinationEndpoint, protocol: 'http1' | 'opaque'): Http1Pool {
    // The resolver hands out the same endpoint object until the endpoint changes: remember its
    // pool on it rather than build the pool's key for every request.
    const byEndpoint = protocol === 'http1' ? this.#http1PoolOf : this.#opaquePoolOf;
    const known = byEndpoint.get(endpoint);
    if (isOpen(known)) return known;
    const key = poolKey(endpoint, this.#meshPortOfSafe(endpoint), protocol);
    let pool = this.#pools.get(key);
    // A closed pool (retired by the relay) finishes its requests on its own; a new one takes its place.
    if (!isOpen(pool) || this.#closed) {
      pool = new Http1Pool({
        authority: hostPort(endpoint.ip, endpoint.port),
        connections: this.#maxSockets,
        // Asynchronous: a request gets its connection (and writes its first byte) only once the
        // handshake, the checks and the transport header are done.
        connect: (callback) => {
          this.connect(endpoint, protocol).then(
            (s) => callback(null, s),
            (e: unknown) => callback(e instanceof Error ? e : new Error(String(e)), null),
          );
        },
        idleTimeoutMs: this.#idleSocketTimeoutMs,
      });
      if (this.#closed) void pool.destroy();
      else this.#pools.set(key, pool);
    }
    if (!this.#closed) byEndpoint.set(endpoint, pool);
    return pool;
  }

  /**
   * The shared HTTP/2 connection to `endpoint` for `protocol` (`http2`, or `opaque` for an
   * endpoint whose port is opaque) when one is open and takes new streams; else undefined (then
   * {@link session2}). Spares the request path a promise when the connection is there.
   */
  liveSession2(endpoint: DestinationEndpoint, protocol: 'http2' | 'opaque' = 'http2'): H2Connection | undefined {
    const session = (protocol === 'http2' ? this.#http2SlotOf : this.#opaque2SlotOf).get(endpoint)?.session;
    return session?.usable === true ? session : undefined;
  }

  /**
   * The shared HTTP/2 connection to `endpoint` for `protocol` (`http2`, or `opaque` for an
   * endpoint whose port is opaque), made on first use and replaced once it closes, fails or
   * receives a GOAWAY (streams open on it finish there). Rejects with {@link OutboundConnectError}
   * when it cannot be made.
   */
  session2(endpoint: DestinationEndpoint, protocol: 'http2' | 'opaque' = 'http2'): Promise<H2Connection> {
    const byEndpoint = protocol === 'http2' ? this.#http2SlotOf : this.#opaque2SlotOf;
    const key = poolKey(endpoint, this.#meshPortOfSafe(endpoint), protocol);
    let slot = this.#sessions.get(key);
    const live = slot?.session;
    if (live?.usable === true) return Promise.resolve(live);
    if (slot?.pending !== undefined) return slot.pending;
    if (slot === undefined) {
      slot = { session: undefined, pending: undefined };
      this.#sessions.set(key, slot);
    }
    const s = slot;
    if (!this.#closed) byEndpoint.set(endpoint, s);
    const forget = (session: H2Connection): void => {
      if (s.session === session) s.session = undefined;
      if (s.session === undefined && s.pending === undefined && this.#sessions.get(key) === s) this.#sessions.delete(key);
    };
    const pending = this.connect(endpoint, protocol).then(
      (socket) => {
        s.pending = undefined;
        const session: H2Connection = new H2Connection(socket, {
          role: 'client',
          onGoaway: () => forget(session),
          onClose: (code, reason) => {
            forget(session);
            if (code === H2_INTERNAL_ERROR)
              this.#log.error({ endpoint: hostPort(endpoint.ip, endpoint.port), reason }, 'outbound HTTP/2 connection failed in the proxy');
            else if (reason !== undefined && this.#log.isLevelEnabled('debug'))
              this.#log.debug({ endpoint: hostPort(endpoint.ip, endpoint.port), code, reason }, 'outbound HTTP/2 connection failed');
          },
        });
        s.session = session;
        // A connection must not keep the process up.
        socket.unref();
        if (this.#closed) session.destroy();
        return session;
      },
      (e: unknown) => {
        s.pending = undefined;
        if (s.session === undefined && this.#sessions.get(key) === s) this.#sessions.delete(key);
        throw e;
      },
    );
    s.pending = pending;
    return pending;
  }

  /** Counters (see {@link OutboundConnectorStats}). */
  stats(): OutboundConnectorStats {
    return {
      handshakes: this.#handshakes,
      handshakeFailures: this.#handshakeFailures,
      identityMismatches: this.#identityMismatches,
      plainConnects: this.#plainConnects,
      connectFailures: { ...this.#failures },
      open: this.#open.size,
      http1Pools: this.#pools.size,
      http2Sessions: this.#sessions.size,
    };
  }

  /** Drops the HTTP/1 pools that hold no connection and no queued request. */
  prune(): void {
    dropIdle(this.#pools);
  }

  /** Destroys every connection, pool and session; later connects fail. Idempotent. */
  close(): void {
    this.#closed = true;
    for (const p of this.#pools.values()) void p.destroy();
    this.#pools.clear();
    for (const slot of this.#sessions.values()) slot.session?.destroy();
    this.#sessions.clear();
    for (const s of this.#open) s.destroy();
    this.#open.clear();
  }

  #meshPortOfSafe(endpoint: DestinationEndpoint): number {
    return this.isMeshed(endpoint) ? this.#meshPortOf(endpoint) : endpoint.port;
  }

  #fail(reason: OutboundConnectFailure, address: string, detail: string, cause?: unknown): OutboundConnectError {
    this.#failures[reason] = (this.#failures[reason] ?? 0) + 1;
    return new OutboundConnectError(reason, address, detail, cause === undefined ? undefined : { cause });
  }

  /** TCP (plain) or TCP + mesh TLS with the identity and ALPN checks; resolves once usable. */
  #dial(endpoint: DestinationEndpoint, allowHalfOpen: boolean): Promise<Socket> {
    if (this.#closed) return Promise.reject(new OutboundConnectError('connect failed', hostPort(endpoint.ip, endpoint.port), 'the connector is closed'));
    const identity = identityOf(endpoint);
    if (identity === undefined) return this.#dialPlain(endpoint, allowHalfOpen);
    const port = this.#meshPortOf(endpoint);
    const address = hostPort(endpoint.ip, port);
    const cert = this.#tls.certificate;
    if (cert === undefined) return Promise.reject(this.#fail('no certificate', address, 'no workload certificate yet'));
    let options: ReturnType<typeof meshClientOptions>;
    try {
      options = meshClientOptions(cert, this.#tls.anchorsPem, identity, [TRANSPORT_HEADER_ALPN]);
    } catch (e) {
      return Promise.reject(this.#fail('tls handshake failed', address, `the certificate does not load: ${errorMessage(e)}`, e));
    }
    const servername = endpoint.serverName ?? identity;
    return new Promise<Socket>((resolve, reject) => {
      // tls.connect passes `allowHalfOpen` to its TCP socket; @types/node does not list it.
      const socket: TLSSocket = connectTls({
        ...options,
        servername,
        host: endpoint.ip,
        port,
        allowHalfOpen,
        noDelay: true,
        ...this.#bindFor(endpoint.ip),
      } as ConnectionOptions);
      socket.setNoDelay(true);
      this.#track(socket);
      let tcpConnected = false;
      const fail = (e: OutboundConnectError): void => {
        socket.off('secureConnect', onSecure);
        socket.off('error', onError);
        socket.off('timeout', onTimeout);
        socket.destroy();
        reject(e);
      };
      const onTimeout = (): void => fail(this.#fail('connect timeout', address, `no mesh TLS connection within ${this.#connectTimeoutMs} ms`));
      const onError = (err: NodeJS.ErrnoException): void => {
        if (!tcpConnected) {
          fail(this.#fail('connect failed', address, err.message, err));
          return;
        }
        this.#handshakeFailures++;
        if (err.code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
          this.#identityMismatches++;
          fail(this.#fail('identity mismatch', address, err.message, err));
        } else {
          fail(this.#fail('tls handshake failed', address, err.message, err));
        }
      };
      const onSecure = (): void => {
        socket.off('error', onError);
        socket.off('timeout', onTimeout);
        socket.setTimeout(0);
        // Errors after this point surface as 'close' to whoever uses the socket.
        socket.on('error', noop);
        if (socket.alpnProtocol !== TRANSPORT_HEADER_ALPN) {
          this.#handshakeFailures++;
          fail(this.#fail('tls handshake failed', address, `the peer did not negotiate ALPN ${TRANSPORT_HEADER_ALPN}`));
          return;
        }
        this.#handshakes++;
        this.#onConnection?.(socket, endpoint);
        resolve(socket);
      };
      socket.once('connect', () => {
        tcpConnected = true;
      });
      socket.setTimeout(this.#connectTimeoutMs);
      socket.once('timeout', onTimeout);
      socket.once('error', onError);
      socket.once('secureConnect', onSecure);
    });
  }

  #dialPlain(endpoint: DestinationEndpoint, allowHalfOpen: boolean): Promise<Socket> {
    const address = hostPort(endpoint.ip, endpoint.port);
    return new Promise<Socket>((resolve, reject) => {
      const socket = connectTcp({ host: endpoint.ip, port: endpoint.port, allowHalfOpen, noDelay: true, ...this.#bindFor(endpoint.ip) });
      this.#track(socket);
      const fail = (e: OutboundConnectError): void => {
        socket.off('connect', onConnect);
        socket.off('error', onError);
        socket.off('timeout', onTimeout);
        socket.destroy();
        reject(e);
      };
      const onTimeout = (): void => fail(this.#fail('connect timeout', address, `no TCP connection within ${this.#connectTimeoutMs} ms`));
      const onError = (err: Error): void => fail(this.#fail('connect failed', address, err.message, err));
      const onConnect = (): void => {
        socket.off('error', onError);
        socket.off('timeout', onTimeout);
        socket.setTimeout(0);
        socket.on('error', noop);
        this.#plainConnects++;
        this.#onConnection?.(socket, endpoint);
        resolve(socket);
      };
      socket.setTimeout(this.#connectTimeoutMs);
      socket.once('timeout', onTimeout);
      socket.once('error', onError);
      socket.once('connect', onConnect);
    });
  }

  /** The source address option for a connection to `ip` (only an address of the same family). */
  #bindFor(ip: string): { localAddress?: string } {
    const local = this.#localAddress;
    return local !== undefined && isIP(local) === isIP(ip) ? { localAddress: local } : {};
  }

  #track(socket: Socket): void {
    this.#open.add(socket);
    socket.once('close', () => this.#open.delete(socket));
  }
}

/** The transport header of a meshed connection to `endpoint` carrying `protocol`. */
function headerFor(endpoint: DestinationEndpoint, protocol: OutboundProtocol): { port: number; sessionProtocol?: SessionProtocol } {
  return protocol === 'opaque' ? { port: endpoint.port } : { port: endpoint.port, sessionProtocol: protocol };
}
