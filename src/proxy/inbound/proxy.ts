/**
 * The inbound side of the proxy in local mode (POLICY-SEMANTICS §4.2-4.5, §4.7, §4.8): one
 * listener per application port for callers that reach the pod directly, and the mesh port
 * (4143) for direct connections carrying a transport header. Every accepted connection goes
 * through detection and then either the HTTP stack (`handleHttp`, by default {@link InboundHttp}:
 * per-request authorization and forwarding) or connection-level authorization and opaque
 * forwarding to the application.
 *
 * Application ports: the port's policy is read at accept; no policy → fail closed (but see
 * transparent mode for ports whose policy is discovered on first use). `opaque` skips
 * TLS detection (`None(port_skipped)`). Otherwise the first bytes are sniffed for a ClientHello
 * within the detect timeout: SNI equal to our identity → mesh TLS is terminated by a `tls.Server`
 * (client certificate required and verified; `Established(client id = first SAN)`); another SNI →
 * `Passthru(sni)`, the bytes are forwarded untouched; no TLS (or a hello without SNI, or a broken
 * one) → `None(no_tls_from_remote)`; nothing decisive in time → closed ("tls detection timeout").
 * Local mode puts every pod on a loopback address, so loopback clients are not special-cased: the
 * bytes decide. Then by the port's protocol: `http1`/`http2`/`grpc` → HTTP; `detect` → HTTP
 * detection within the policy's detect timeout (lenient: transport/detect-http), HTTP → HTTP, not HTTP →
 * TCP, still undecided at the deadline or the byte bound → HTTP/1 when the line may still become
 * a request (the strict parser answers), else TCP, and TCP when no byte came; `tls`, `opaque` and
 * passthrough TLS → TCP.
 *
 * Mesh port: mTLS to our name with a client identity and ALPN `transport.l5d.io/v1`, else closed
 * ("direct connections must be mutually authenticated"); then the transport header names the
 * target port, whose policy applies with `Established(client id)`. A session protocol → HTTP; a
 * gateway `name` → closed (not supported); otherwise the target port's protocol decides, as on
 * the port itself (an HTTP port is HTTP, `detect` detects, opaque and TLS are TCP).
 *
 * Transparent mode (`originalDst`, §4.1): iptables redirects every inbound connection to the mesh
 * port. One whose original destination (SO_ORIGINAL_DST) is another port P is served exactly as if
 * it had been accepted on an application listener for P — P's policy, TLS detection, HTTP or TCP,
 * forwarded to `appHostOf(P, pod address):appPortOf(P)` — the address the connection arrived on:
 * only the original destination's port is used, its address being the client's choice; one whose
 * original destination is the mesh port itself (or that was not redirected) is direct, as above.
 * One whose original destination cannot be read is closed ("original destination unknown"). Any port may be redirected, not only the declared ones
 * (§2.4 `pod-inbound-ports`): when P has no policy yet — an undeclared port, or a declared one the
 * controller has not answered for — the connection waits, paused (no byte read), for the policy
 * to be discovered (`policies.discover`: the controller is asked for P's policy, usually the
 * pod's default one), then proceeds as above; the same holds for the port a transport header
 * names. Discovery failing closes the connection without a byte reaching the application:
 * "policy discovery timeout" (no policy within the watcher's bound), "policy discovery limit"
 * (too many undeclared ports watched), else "no policy". Each connection holds its port
 * (`policies.use`) until it closes, so a discovered port is not dropped under it. The proxy's own
 * ports (the mesh port, `isProxyPort`) are never discovered: "proxy port". The proxy sends an
 * undeclared port to the pod address the connection arrived on (`appHostOf`), so a service bound
 * to loopback only is not exposed, and no other host is reached through the proxy. Local mode
 * does not discover: only the declared ports are served, and a transport header naming another
 * port fails closed ("no policy").
 *
 * TCP: `authorizeConnection` on the target port's current policy. Deny → the connection is reset
 * before any byte reaches the application; permit → piped to the application (`appHostOf`, `appPortOf`) and tracked,
 * so that each later policy update of the port re-checks it (`reauthorizeConnection`) and tears it
 * down when revoked. HTTP has no connection-level authorization (§4.4): it is handed to
 * `handleHttp`, which authorizes every request against the port's current policy (§4.8). A
 * stream that was silent until the HTTP detect deadline (forwarded: the server may speak first)
 * still has its first bytes checked, and is closed if they are HTTP after all.
 *
 * Limits (`limits`, {@link InboundLimits}): at most `maxUnfinished` connections still detecting,
 * handshaking or waiting for a transport header (the oldest is shed for a new one), at most
 * `maxConnections` in all (the oldest connection without a verified mesh identity is shed, finished
 * or not; a meshed one never is, a new one is refused instead), and a
 * forwarded TCP connection idle both ways for `tcpIdleTimeoutMs` is closed.
 */
import { readFileSync } from 'node:fs';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer, type TLSSocket, type Server as TlsServer } from 'node:tls';
import {
  authorizeConnection,
  type ClientInfo,
  type CompiledServer,
  DETECT_TIMEOUT_MS,
  type Deny,
  type ParsedIp,
  parseIp,
  reauthorizeConnection,
  type TlsState,
} from '../../core/index.js';
import { errorMessage, hasCode, type Logger, MeshError, silentLogger } from '../../shared/index.js';
import { type InboundErrorReason, type InboundMetricsHooks, type InboundStats, InboundStatsCounter } from '../metrics/inbound-stats.js';
import type { TapHub } from '../tap/tap-hub.js';
import { clientIdentityOf, type InboundTlsSettings, TRANSPORT_HEADER_ALPN } from '../tls/context.js';
import { CLIENT_HELLO_MAX_PREFIX_BYTES, type ClientHelloSniff, sniffClientHello } from '../transport/client-hello.js';
import { detectHttp, detectHttpUndecided, HTTP1_MAX_REQUEST_LINE_BYTES, type HttpDetection } from '../transport/detect-http.js';
import { forwardTcp } from '../transport/forward.js';
import type { OriginalDstReader } from '../transport/original-dst.js';
import { type PrefixRead, readPrefix } from '../transport/prefix-reader.js';
import {
  decodeTransportHeader,
  TRANSPORT_HEADER_MAX_MESSAGE_BYTES,
  TRANSPORT_HEADER_PREFACE,
  type TransportHeaderDecode,
} from '../transport/transport-header.js';
import { InboundConnectionTracker, type PolicySubscriptions } from './connection-tracker.js';
import { InboundHttp, type InboundHttpSettings } from './http.js';
import type { InboundHttpConnection, InboundHttpHandler, InboundHttpVersion } from './http-connection.js';

/** What the inbound proxy needs of the policy watcher (structurally, `PolicyWatcher`). */
export interface InboundPolicies extends PolicySubscriptions {
  /** The port's latest compiled policy; `undefined` means none yet (see `discover`). */
  current(port: number): CompiledServer | undefined;
  /**
   * Transparent mode: the policy of a port that has none yet, once it arrives (lazy discovery,
   * bounded in time); rejects when there is none to be had — `MeshError` code
   * `ERR_POLICY_DISCOVERY_TIMEOUT` or `ERR_POLICY_DISCOVERY_LIMIT`, or anything else. Without it
   * (and always in local mode) a port without a policy fails closed at once.
   */
  discover?(port: number): Promise<CompiledServer>;
  /** Transparent mode: holds `port` while a connection uses its policy; returns the release function. */
  use?(port: number): () => void;
}

export type { InboundTlsSettings } from '../tls/context.js';

/** Where the inbound proxy listens. */
export interface InboundListen {
  /** The pod's address (local mode: its loopback address). */
  readonly host: string;
  /** The mesh port for direct connections (4143; 0 = any free port). */
  readonly meshPort: number;
  /** The application ports served for callers reaching the pod directly (each 0 = any free port). */
  readonly appPorts: readonly number[];
  /**
   * The pod port whose policy (and application port) applies to each listener of `appPorts`, by
   * index (default: the bound port itself). Lets local mode serve pod port 8080 on another port.
   */
  readonly policyPorts?: readonly number[];
  /** The mesh port's address (default: `host`). */
  readonly meshHost?: string;
}

/** The ports the proxy actually listens on, in the order they were asked for. */
export interface InboundBoundPorts {
  readonly meshPort: number;
  /** The bound application ports; each one's policy port is `policyPorts[i]`, or the bound port without them. */
  readonly appPorts: readonly number[];
}

export type { InboundHttpConnection, InboundHttpHandler, InboundHttpVersion } from './http-connection.js';

/** Options of {@link InboundProxy}. */
export interface InboundProxyOptions {
  /** This proxy's mesh identity: the SNI for which mesh TLS is terminated. */
  readonly identity: string;
  readonly tls: InboundTlsSettings;
  readonly policies: InboundPolicies;
  /** Where the application listens (local mode: the pod's private address). */
  readonly appHost: string;
  /** The application port behind an inbound port (default: the same number). */
  readonly appPortOf?: (port: number) => number;
  /**
   * Where the application behind `port` is, given the pod address the connection arrived on
   * (`podIp`: the local address it was accepted on, which for a redirected connection is the
   * receiving interface's address — not its original destination address, which the client
   * chooses: a packet for another host or 127.0.0.1 sent to the pod's interface is redirected too,
   * and forwarding there would make the proxy an open relay). Default: `appHost` for every port.
   * Transparent mode sends undeclared ports to `podIp`: a service the pod binds to loopback only
   * stays out of reach, as it would be without the mesh.
   */
  readonly appHostOf?: (port: number, podIp: string | undefined) => string;
  readonly listen: InboundListen;
  /**
   * Deadline for a ClientHello, the mesh TLS handshake and the transport header (default 10 s,
   * §4.3). HTTP detection on `detect` ports uses the policy's own timeout.
   */
  readonly detectTimeoutMs?: number;
  readonly logger?: Logger;
  readonly metrics?: InboundMetricsHooks;
  /** The HTTP stack. Default: an {@link InboundHttp} over this proxy's policies, application and counters. */
  readonly handleHttp?: InboundHttpHandler;
  /** Where connection denials (and the default HTTP stack's decisions) are published while someone taps. */
  readonly tap?: TapHub | undefined;
  /** Settings of the default HTTP stack (ignored with a custom `handleHttp`). */
  readonly http?: InboundHttpSettings;
  /**
   * Transparent mode: reads the original destination of each connection accepted on the mesh
   * port, which then serves redirected application traffic too (see the module comment).
   * Without it every mesh-port connection is direct.
   */
  readonly originalDst?: OriginalDstReader;
  /**
   * Transparent mode: the proxy's other listening ports (the outbound listener), besides the mesh
   * port this proxy knows itself. A connection headed for one of them — redirected there, or
   * named by a transport header — is never given a discovered policy and forwarded to
   * `appHost`, where it would reach the proxy's own listener with the pod's identity behind it.
   */
  readonly isProxyPort?: (port: number) => boolean;
  /** Bounds on connections (see {@link InboundLimits}); each has a default. */
  readonly limits?: InboundLimits;
  /** Where the counters go (give the same one to a custom `handleHttp`'s stack); default: the proxy's own. */
  readonly counter?: InboundStatsCounter;
}

/**
 * How many connections the proxy holds and for how long. Overload rule: beyond `maxUnfinished`
 * connections still detecting, in the TLS handshake or waiting for a transport header (an
 * attacker's cheapest way to hold memory), the oldest of them goes; at `maxConnections`, the
 * oldest connection without a verified mesh identity goes, unfinished or plaintext (by accept
 * order: a healthy client's handshake in progress is younger than an attacker's held connections,
 * so their newer connections cannot cut it); a connection with a verified mesh identity is never
 * shed for another, and when only those are left a new connection is refused.
 */
export interface InboundLimits {
  /** Connections held at once (default from the file descriptor limit: see {@link defaultMaxConnections}). */
  readonly maxConnections?: number;
  /** Unfinished connections held at once (default 1024, about 50 MB of TLS handshakes). */
  readonly maxUnfinished?: number;
  /** A forwarded TCP connection carrying no byte either way for this long is closed (default 1 h, Envoy's TCP proxy default). */
  readonly tcpIdleTimeoutMs?: number;
}

/** Default of {@link InboundLimits.maxUnfinished}. */
export const INBOUND_MAX_UNFINISHED = 1024;
/** Default of {@link InboundLimits.tcpIdleTimeoutMs}. */
export const INBOUND_TCP_IDLE_TIMEOUT_MS = 3_600_000;

/**
 * The most connections a proxy holds by default, whatever its descriptor limit: a held, forwarded
 * connection costs about 12 KB (10,000 held opaque connections took the inbound from 71 to 184 MB
 * in the attack bench), and a Kubernetes container's limit is often 1,048,576.
 */
export const INBOUND_MAX_CONNECTIONS = 10_000;

/**
 * The default connection bound: half the file descriptors the process may open (a forwarded
 * connection holds two: the client's and the application's), less 1,024 kept for everything else
 * (application pools, the control plane, the admin port), and at most
 * {@link INBOUND_MAX_CONNECTIONS}; `nofile` is the soft `RLIMIT_NOFILE` (undefined when unknown: 4,096).
 */
export function defaultMaxConnections(nofile: number | undefined): number {
  if (nofile === undefined || !Number.isFinite(nofile)) return 4096;
  return Math.max(64, Math.min(INBOUND_MAX_CONNECTIONS, Math.floor((nofile - 1024) / 2)));
}

const NO_TLS: TlsState = Object.freeze({ kind: 'none', reason: 'no_tls_from_remote' });
const PORT_SKIPPED: TlsState = Object.freeze({ kind: 'none', reason: 'port_skipped' });
const MAX_TIMER_MS = 0x7fff_ffff;
const TRANSPORT_HEADER_MAX_PREFIX_BYTES = Buffer.byteLength(TRANSPORT_HEADER_PREFACE) + 4 + TRANSPORT_HEADER_MAX_MESSAGE_BYTES;

type HelloDecision = Exclude<ClientHelloSniff, { readonly kind: 'need-more' }>;
type HeaderDecision = Exclude<TransportHeaderDecode, { readonly kind: 'need-more' }>;

function decideClientHello(buf: Buffer): HelloDecision | 'need-more' {
  const s = sniffClientHello(buf);
  return s.kind === 'need-more' ? 'need-more' : s;
}

function decideTransportHeader(buf: Buffer): HeaderDecision | 'need-more' {
  const d = decodeTransportHeader(buf);
  return d.kind === 'need-more' ? 'need-more' : d;
}

function decideHttp(buf: Buffer): HttpDetection {
  return detectHttp(buf);
}

function firstByte(buf: Buffer): true | 'need-more' {
  return buf.length > 0 ? true : 'need-more';
}

function noop(): void {}

/** The soft limit on open files (Linux: /proc/self/limits), or undefined. */
function openFileLimit(): number | undefined {
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'latin1'));
    return m === null ? undefined : Number(m[1]);
  } catch {
    return undefined;
  }
}

/** The 4-tuple of a TCP connection: unique among live connections, readable on both the raw and the TLS socket. */
function connectionKey(s: Socket): string {
  return `${s.remoteAddress}|${s.remotePort}|${s.localAddress}|${s.localPort}`;
}

function isTimerMs(ms: number): boolean {
  return ms > 0 && ms <= MAX_TIMER_MS;
}

/** One accepted connection, from accept to close. */
interface Conn {
  readonly raw: Socket;
  /** Accept order: which of two connections is older. */
  readonly seq: number;
  readonly ip: ParsedIp;
  /** Accepted on the mesh port (§4.2). */
  readonly direct: boolean;
  /** The port whose policy applies: the listener's, or the transport header's. */
  port: number;
  /**
   * The pod address the connection arrived on (its local address) — never a redirected
   * connection's original destination address, which the client chooses.
   */
  readonly podIp: string | undefined;
  /** The stream application bytes flow on: `raw`, or the TLS socket once mesh TLS is terminated. */
  front: Socket;
  /** The policy the connection was classified with (its protocol decided the path). */
  policy: CompiledServer | undefined;
  upstream: Socket | undefined;
  /** Key in the pending-handshake map while mesh TLS is negotiated. */
  tlsKey: string | undefined;
  /** In the re-authorization tracker. */
  tracked: boolean;
  /** Releases the hold on the port's policy (transparent mode), once it is taken. */
  release: (() => void) | undefined;
  closed: boolean;
  /** The overload class it is in: unfinished until forwarded or handed to the HTTP stack. */
  load: Set<Conn> | undefined;
}

function oldest(set: Set<Conn>): Conn | undefined {
  for (const c of set) return c;
  return undefined;
}

function older(a: Conn | undefined, b: Conn | undefined): Conn | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return a.seq < b.seq ? a : b;
}

/**
 * The inbound proxy of one pod (local mode). `start()` binds the listeners; `close()` closes them
 * and destroys every connection. Invariants: a connection never reaches the application without a
 * permit from the current policy of its port; a denied one is reset before any byte is forwarded;
 * a forwarded one lives only while every policy update since still admits it; after `close()` no
 * socket, timer or policy subscription of the proxy remains.
 */
export class InboundProxy {
  readonly #identity: string;
  readonly #tls: InboundTlsSettings;
  readonly #policies: InboundPolicies;
  readonly #appHost: string;
  readonly #appPortOf: (port: number) => number;
  readonly #appHostOf: (port: number, podIp: string | undefined) => string;
  readonly #listen: InboundListen;
  readonly #detectTimeoutMs: number;
  readonly #log: Logger;
  readonly #hooks: InboundMetricsHooks;
  readonly #tap: TapHub | undefined;
  readonly #handleHttpFn: InboundHttpHandler;
  readonly #originalDst: OriginalDstReader | undefined;
  readonly #isProxyPort: (port: number) => boolean;
  /** The default HTTP stack (absent with a custom `handleHttp`). */
  readonly #http: InboundHttp | undefined;
  readonly #counter: InboundStatsCounter;
  readonly #conns = new Set<Conn>();
  /** Connections in the mesh TLS handshake, by 4-tuple: `secureConnection` only gives the TLS socket. */
  readonly #handshakes = new Map<string, Conn>();
  readonly #tracker: InboundConnectionTracker<Conn>;
  readonly #servers: Server[] = [];
  #tlsServer: TlsServer | undefined;
  #bound: InboundBoundPorts | undefined;
  #state: 'new' | 'starting' | 'started' | 'closed' = 'new';
  #closing: Promise<void> | undefined;
  readonly #drainWaiters: (() => void)[] = [];
  /** Connections waiting for `discover` (transparent mode). */
  #discovering = 0;
  readonly #maxConnections: number;
  readonly #maxUnfinished: number;
  readonly #tcpIdleTimeoutMs: number;
  /** Overload classes, each in arrival order (see {@link InboundLimits}). */
  readonly #unfinished = new Set<Conn>();
  readonly #plaintext = new Set<Conn>();
  readonly #meshed = new Set<Conn>();

  /** Validates the options; nothing is bound before `start()`. Throws RangeError for a bad timeout, port or HTTP setting. */
  constructor(opts: InboundProxyOptions) {
    const detectTimeoutMs = opts.detectTimeoutMs ?? DETECT_TIMEOUT_MS;
    if (!isTimerMs(detectTimeoutMs)) throw new RangeError(`bad detectTimeoutMs ${detectTimeoutMs}`);
    for (const p of [opts.listen.meshPort, ...opts.listen.appPorts]) {
      if (!Number.isInteger(p) || p < 0 || p > 65_535) throw new RangeError(`bad listen port ${p}`);
    }
    const policyPorts = opts.listen.policyPorts;
    if (policyPorts !== undefined) {
      if (policyPorts.length !== opts.listen.appPorts.length) throw new RangeError('policyPorts must have one entry per app port');
      for (const p of policyPorts) if (!Number.isInteger(p) || p < 1 || p > 65_535) throw new RangeError(`bad policy port ${p}`);
    }
    // SNI host names compare case-insensitively (RFC 6066 §3).
    this.#identity = opts.identity.toLowerCase();
    this.#tls = opts.tls;
    this.#policies = opts.policies;
    this.#appHost = opts.appHost;
    this.#appPortOf = opts.appPortOf ?? ((p) => p);
    const appHost = opts.appHost;
    this.#appHostOf = opts.appHostOf ?? (() => appHost);
    this.#listen = opts.listen;
    this.#detectTimeoutMs = detectTimeoutMs;
    this.#log = opts.logger ?? silentLogger();
    this.#hooks = opts.metrics ?? {};
    this.#tap = opts.tap;
    this.#originalDst = opts.originalDst;
    this.#isProxyPort = opts.isProxyPort ?? (() => false);
    this.#counter = opts.counter ?? new InboundStatsCounter();
    const limits = opts.limits ?? {};
    this.#maxConnections = limits.maxConnections ?? defaultMaxConnections(openFileLimit());
    this.#maxUnfinished = limits.maxUnfinished ?? INBOUND_MAX_UNFINISHED;
    this.#tcpIdleTimeoutMs = limits.tcpIdleTimeoutMs ?? INBOUND_TCP_IDLE_TIMEOUT_MS;
    for (const [name, v] of [
      ['maxConnections', this.#maxConnections],
      ['maxUnfinished', this.#maxUnfinished],
    ] as const) {
      if (!Number.isInteger(v) || v < 1) throw new RangeError(`bad ${name} ${v}`);
    }
    if (!isTimerMs(this.#tcpIdleTimeoutMs)) throw new RangeError(`bad tcpIdleTimeoutMs ${this.#tcpIdleTimeoutMs}`);
    if (opts.handleHttp !== undefined) {
      this.#handleHttpFn = opts.handleHttp;
    } else {
      const http = new InboundHttp({
        ...opts.http,
        policies: this.#policies,
        appHost: this.#appHost,
        appPortOf: this.#appPortOf,
        logger: this.#log,
        metrics: this.#hooks,
        counter: this.#counter,
        tap: opts.tap,
      });
      this.#http = http;
      this.#handleHttpFn = (conn) => http.handle(conn);
    }
    this.#tracker = new InboundConnectionTracker<Conn>(this.#policies, (conn, port, deny, client) => this.#terminate(conn, port, deny, client));
  }

  /** The bound ports once started. */
  get ports(): InboundBoundPorts | undefined {
    return this.#bound;
  }

  /**
   * Builds the mesh TLS server and binds every listener. Rejects (with nothing left bound; the
   * proxy is then closed) with `MeshError` `ERR_INBOUND_LISTEN` when a port cannot be bound,
   * `ERR_INBOUND_TLS` when the TLS settings do not load, `ERR_INBOUND_STATE` when not new.
   */
  async start(): Promise<InboundBoundPorts> {
    if (this.#state !== 'new') throw new MeshError('ERR_INBOUND_STATE', `inbound proxy cannot start: it is ${this.#state}`);
    this.#state = 'starting';
    let tlsServer: TlsServer;
    try {
      tlsServer = createTlsServer({ ...this.#tls.serverOptions(), handshakeTimeout: this.#detectTimeoutMs });
    } catch (e) {
      this.#state = 'closed';
      throw new MeshError('ERR_INBOUND_TLS', `inbound proxy cannot load its mesh TLS settings: ${errorMessage(e)}`, { cause: e });
    }
    tlsServer.on('secureConnection', (t: TLSSocket) => this.#onSecureConnection(t));
    tlsServer.on('tlsClientError', (err: Error, t: TLSSocket) => {
      if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: t.remoteAddress, err: err.message }, 'inbound mesh TLS handshake failed');
      t.destroy();
    });
    this.#tlsServer = tlsServer;

    const { host, meshPort, appPorts, policyPorts } = this.#listen;
    try {
      const mesh = await this.#bind(this.#listen.meshHost ?? host, meshPort, true, undefined);
      const bound: number[] = [];
      for (const [i, p] of appPorts.entries()) bound.push(await this.#bind(host, p, false, policyPorts?.[i]));
      if (this.#state !== 'starting') throw new MeshError('ERR_INBOUND_STATE', 'inbound proxy closed while starting');
      this.#state = 'started';
      this.#bound = { meshPort: mesh, appPorts: bound };
      this.#log.info({ host, meshPort: mesh, appPorts: bound, policyPorts, appHost: this.#appHost }, 'inbound proxy listening');
      return this.#bound;
    } catch (e) {
      await this.close();
      throw e instanceof MeshError ? e : new MeshError('ERR_INBOUND_LISTEN', `inbound proxy cannot listen on ${host}: ${errorMessage(e)}`, { cause: e });
    }
  }

  /** Counters and gauges (see {@link InboundStats}). */
  stats(): InboundStats {
    return this.#counter.snapshot({
      open: this.#conns.size,
      forwarding: this.#tracker.size,
      policySubscriptions: this.#tracker.subscriptions,
      discovering: this.#discovering,
    });
  }

  /** Connections waiting now for the policy of a port nobody declared (see {@link InboundStats.discovering}). */
  get discovering(): number {
    return this.#discovering;
  }

  /**
   * Closes every listener, destroys every connection and drops every policy subscription;
   * resolves once every listener and connection has closed. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#state !== 'closed') {
      this.#state = 'closed';
      const closing = this.#servers.splice(0).map((s) => new Promise<void>((resolve) => s.close(() => resolve())));
      const drained = this.#conns.size === 0 ? Promise.resolve() : new Promise<void>((resolve) => this.#drainWaiters.push(resolve));
      for (const conn of [...this.#conns]) this.#destroy(conn);
      this.#tracker.clear();
      this.#http?.close();
      this.#closing = Promise.all([...closing, drained]).then(noop);
    }
    await this.#closing;
  }

  /** Listens on host:port; resolves with the bound port, which is the policy port of its connections unless `policyPort` is given. */
  #bind(host: string, port: number, direct: boolean, policyPort: number | undefined): Promise<number> {
    // Half-open: a client's FIN must reach the application without closing the reply direction.
    // Paused: no byte may be read before detection takes over.
    // No Nagle: a proxy relays small frames (h2 HEADERS, DATA, trailers) that must not wait for ACKs.
    const server = createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true });
    this.#servers.push(server);
    return new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host, port }, () => {
        server.off('error', reject);
        if (this.#state === 'closed') {
          // close() ran while this listener was being bound.
          server.close();
          reject(new MeshError('ERR_INBOUND_STATE', 'inbound proxy closed while starting'));
          return;
        }
        server.on('error', (err) => this.#log.error({ host, port, err: err.message }, 'inbound listener failed'));
        const bound = (server.address() as AddressInfo).port;
        const connPort = policyPort ?? bound;
        server.on('connection', (raw: Socket) => this.#accept(raw, connPort, direct));
        resolve(bound);
      });
    });
  }

  #accept(raw: Socket, port: number, direct: boolean): void {
    this.#counter.accepted++;
    // Errors surface as 'close'; without a listener an ECONNRESET would crash the process.
    raw.on('error', noop);
    const ip = raw.remoteAddress === undefined ? undefined : parseIp(raw.remoteAddress);
    if (ip === undefined || this.#state === 'closed') {
      raw.destroy();
      return;
    }
    // Transparent mode: a redirected connection belongs to the port it was headed for. Only the
    // port: the original destination's address is whatever the client put in its packets (a packet
    // for another host or 127.0.0.1 sent to the pod's interface is redirected too), while the local
    // address is the pod's own (REDIRECT rewrites to the receiving interface's primary address).
    const target = direct && this.#originalDst !== undefined ? this.#originalDestinationPort(raw) : port;
    const isDirect = direct && target === port;
    const conn: Conn = {
      seq: this.#counter.accepted,
      raw,
      ip,
      direct: isDirect,
      port: target ?? port,
      podIp: raw.localAddress,
      front: raw,
      policy: undefined,
      upstream: undefined,
      tlsKey: undefined,
      tracked: false,
      release: undefined,
      closed: false,
      load: undefined,
    };
    if (!this.#admit(conn)) {
      this.#counter.error('connection limit');
      this.#hooks.onTcpError?.('connection limit', conn.port);
      raw.destroy();
      return;
    }
    this.#conns.add(conn);
    raw.once('close', () => this.#onClosed(conn));
    if (target === undefined) this.#fail(conn, 'original destination unknown');
    else if (isDirect) this.#detectDirectTls(conn);
    else this.#acceptAppConnection(conn);
  }

  /** The original destination port of a connection accepted on the mesh port; undefined when it cannot be read. */
  #originalDestinationPort(raw: Socket): number | undefined {
    const dst = (this.#originalDst as OriginalDstReader)(raw);
    if (dst.ok) return dst.value.port;
    this.#log.warn({ client: raw.remoteAddress, code: dst.code, err: dst.message }, 'inbound connection without a readable original destination');
    return undefined;
  }

  /**
   * Makes room for a new connection by the overload rule (see {@link InboundLimits}) and counts it
   * as unfinished; false when there is no room (every connection held has a verified identity).
   */
  #admit(conn: Conn): boolean {
    if (this.#unfinished.size >= this.#maxUnfinished) this.#shed(oldest(this.#unfinished) as Conn, 'unfinished connection limit');
    if (this.#conns.size >= this.#maxConnections) {
      const victim = older(oldest(this.#unfinished), oldest(this.#plaintext));
      if (victim === undefined) return false;
      this.#shed(victim, 'connection limit');
    }
    this.#moveTo(conn, this.#unfinished);
    return true;
  }

  #moveTo(conn: Conn, set: Set<Conn> | undefined): void {
    conn.load?.delete(conn);
    conn.load = set;
    set?.add(conn);
  }

  /** Established: out of the unfinished class, into the meshed or plaintext one by its client. */
  #established(conn: Conn, client: ClientInfo): void {
    const tls = client.tls;
    this.#moveTo(conn, tls.kind === 'established' && tls.clientId !== undefined ? this.#meshed : this.#plaintext);
  }

  #shed(conn: Conn, reason: InboundErrorReason): void {
    this.#moveTo(conn, undefined);
    if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: conn.raw.remoteAddress, port: conn.port, reason }, 'inbound connection shed');
    this.#fail(conn, reason);
  }

  #onClosed(conn: Conn): void {
    conn.closed = true;
    this.#moveTo(conn, undefined);
    this.#conns.delete(conn);
    if (this.#conns.size === 0) for (const resolve of this.#drainWaiters.splice(0)) resolve();
    if (conn.tlsKey !== undefined) {
      // Closed during the mesh TLS handshake: no or a rejected client certificate, a timeout, an abort.
      this.#handshakes.delete(conn.tlsKey);
      conn.tlsKey = undefined;
      this.#error(conn, 'tls handshake failed');
    }
    if (conn.tracked) {
      conn.tracked = false;
      this.#tracker.delete(conn.port, conn);
    }
    conn.release?.();
    conn.release = undefined;
    if (conn.front !== conn.raw) conn.front.destroy();
    conn.upstream?.destroy();
  }

  /** Still worth working on after an asynchronous step. */
  #isLive(conn: Conn): boolean {
    return !conn.closed && !conn.raw.destroyed && this.#state !== 'closed';
  }

  // -------------------------------------------------------------------------------------------
  // Application ports

  #acceptAppConnection(conn: Conn): void {
    this.#withPolicy(conn, (policy) => this.#onAppPolicy(conn, policy));
  }

  /**
   * Calls `then` with the current policy of the connection's port; in transparent mode, a port
   * without one is discovered first while the connection waits paused (see the module comment).
   * No policy → the connection is closed and `then` is not called.
   */
  #withPolicy(conn: Conn, then: (policy: CompiledServer) => void): void {
    const transparent = this.#originalDst !== undefined;
    const policy = this.#policies.current(conn.port);
    if (policy !== undefined) {
      if (transparent) this.#hold(conn);
      then(policy);
      return;
    }
    const discover = transparent ? this.#policies.discover : undefined;
    if (discover === undefined) {
      this.#fail(conn, 'no policy');
      return;
    }
    if (conn.port === this.#listen.meshPort || conn.port === this.#bound?.meshPort || this.#isProxyPort(conn.port)) {
      this.#fail(conn, 'proxy port');
      return;
    }
    this.#discovering++;
    void discover.call(this.#policies, conn.port).then(
      (discovered) => {
        this.#discovering--;
        if (!this.#isLive(conn)) {
          this.#destroy(conn);
          return;
        }
        this.#hold(conn);
        then(discovered);
      },
      (e: unknown) => {
        this.#discovering--;
        if (!this.#isLive(conn)) {
          this.#destroy(conn);
          return;
        }
        const reason: InboundErrorReason = hasCode(e, 'ERR_POLICY_DISCOVERY_TIMEOUT')
          ? 'policy discovery timeout'
          : hasCode(e, 'ERR_POLICY_DISCOVERY_LIMIT')
            ? 'policy discovery limit'
            : 'no policy';
        this.#fail(conn, reason);
      },
    );
  }

  /** Holds the connection's port while it is open: a discovered port's policy is not dropped under it. */
  #hold(conn: Conn): void {
    if (conn.release === undefined) conn.release = this.#policies.use?.(conn.port);
  }

  #onAppPolicy(conn: Conn, policy: CompiledServer): void {
    conn.policy = policy;
    if (policy.server.protocol.kind === 'opaque') {
      this.#authorizeTcp(conn, { ip: conn.ip, tls: PORT_SKIPPED });
      return;
    }
    void readPrefix(conn.raw, decideClientHello, { timeoutMs: this.#detectTimeoutMs, maxBytes: CLIENT_HELLO_MAX_PREFIX_BYTES }).then(
      (r) => this.#onAppClientHello(conn, r),
      (e: unknown) => this.#bug(conn, e),
    );
  }

  #onAppClientHello(conn: Conn, r: PrefixRead<HelloDecision>): void {
    if (!this.#isLive(conn) || 'closed' in r) {
      this.#destroy(conn);
      return;
    }
    if ('timeout' in r) {
      this.#fail(conn, 'tls detection timeout');
      return;
    }
    // A hello without SNI, a malformed one or an overflow (impossible at this bound) is not mesh
    // TLS, and not passthrough either: the bytes are handled as plaintext.
    const hello = 'result' in r && r.result.kind === 'hello' ? r.result : undefined;
    if (hello?.sni === undefined) this.#classify(conn, NO_TLS);
    else if (this.#isOwnName(hello.sni)) this.#terminateTls(conn);
    else this.#authorizeTcp(conn, { ip: conn.ip, tls: { kind: 'passthrough', sni: hello.sni } });
  }

  /** Routes a non-direct connection whose TLS is settled, by the protocol of the policy it was accepted with. */
  #classify(conn: Conn, tls: TlsState): void {
    const client: ClientInfo = { ip: conn.ip, tls };
    const protocol = (conn.policy as CompiledServer).server.protocol;
    switch (protocol.kind) {
      case 'opaque':
      case 'tls':
        this.#authorizeTcp(conn, client);
        return;
      case 'http2':
      case 'grpc':
        this.#handleHttp(conn, client, 'http2', 'protocol');
        return;
      case 'http1':
        // Peer proxies may upgrade meshed HTTP/1 to HTTP/2, so mesh TLS still detects (§4.4).
        if (tls.kind === 'established') this.#detectHttp(conn, client, this.#detectTimeoutMs, 'http1');
        else this.#handleHttp(conn, client, 'http1', 'protocol');
        return;
      case 'detect':
        this.#detectHttp(conn, client, isTimerMs(protocol.timeoutMs) ? protocol.timeoutMs : DETECT_TIMEOUT_MS, undefined);
        return;
    }
  }

  /** HTTP detection; when it finds no HTTP the stream is `fallback` HTTP, or TCP when that is undefined. */
  #detectHttp(conn: Conn, client: ClientInfo, timeoutMs: number, fallback: InboundHttpVersion | undefined): void {
    void readPrefix(conn.front, decideHttp, { timeoutMs, maxBytes: HTTP1_MAX_REQUEST_LINE_BYTES }).then(
      (r) => {
        if (!this.#isLive(conn) || 'closed' in r) {
          this.#destroy(conn);
          return;
        }
        // Undecided at the deadline or the byte bound: HTTP/1 when the line may still become a
        // request (the strict parser answers 400 / 408 / 431), else TCP (transport/detect-http). Nothing at
        // all by the deadline: a server-speaks-first protocol, TCP.
        const detected = 'result' in r ? r.result : r.buffer.length > 0 ? detectHttpUndecided(r.buffer) : 'not-http';
        if (detected === 'http1' || detected === 'http2') this.#handleHttp(conn, client, detected, 'detect');
        else if (fallback !== undefined) this.#handleHttp(conn, client, fallback, 'protocol');
        else this.#authorizeTcp(conn, client, 'result' in r ? undefined : timeoutMs);
      },
      (e: unknown) => this.#bug(conn, e),
    );
  }

  // -------------------------------------------------------------------------------------------
  // Mesh TLS

  #isOwnName(sni: string): boolean {
    return sni.length === this.#identity.length && sni.toLowerCase() === this.#identity;
  }

  #terminateTls(conn: Conn): void {
    const key = connectionKey(conn.raw);
    conn.tlsKey = key;
    this.#handshakes.set(key, conn);
    // Through the server, not a bare TLSSocket: only a server's sockets enforce rejectUnauthorized.
    (this.#tlsServer as TlsServer).emit('connection', conn.raw);
  }

  #onSecureConnection(t: TLSSocket): void {
    const key = connectionKey(t);
    const conn = this.#handshakes.get(key);
    if (conn === undefined || !this.#isLive(conn)) {
      t.destroy();
      return;
    }
    this.#handshakes.delete(key);
    conn.tlsKey = undefined;
    t.on('error', noop);
    conn.front = t;
    // Read once, now: later the peer certificate may no longer be available (tls/context).
    const clientId = clientIdentityOf(t);
    if (conn.direct) this.#onDirectTls(conn, t, clientId);
    else this.#classify(conn, { kind: 'established', clientId });
  }

  // -------------------------------------------------------------------------------------------
  // Mesh port (direct connections, §4.2)

  #detectDirectTls(conn: Conn): void {
    void readPrefix(conn.raw, decideClientHello, { timeoutMs: this.#detectTimeoutMs, maxBytes: CLIENT_HELLO_MAX_PREFIX_BYTES }).then(
      (r) => {
        if (!this.#isLive(conn) || 'closed' in r) this.#destroy(conn);
        else if ('timeout' in r) this.#fail(conn, 'tls detection timeout');
        else if ('result' in r && r.result.kind === 'hello' && r.result.sni !== undefined && this.#isOwnName(r.result.sni)) this.#terminateTls(conn);
        else this.#fail(conn, 'direct connection not mutually authenticated');
      },
      (e: unknown) => this.#bug(conn, e),
    );
  }

  #onDirectTls(conn: Conn, t: TLSSocket, clientId: string | undefined): void {
    if (clientId === undefined) {
      this.#fail(conn, 'direct connection not mutually authenticated');
      return;
    }
    if (t.alpnProtocol !== TRANSPORT_HEADER_ALPN) {
      this.#fail(conn, 'direct connection without transport header');
      return;
    }
    const client: ClientInfo = { ip: conn.ip, tls: { kind: 'established', clientId } };
    void readPrefix(t, decideTransportHeader, { timeoutMs: this.#detectTimeoutMs, maxBytes: TRANSPORT_HEADER_MAX_PREFIX_BYTES }).then(
      (r) => this.#onTransportHeader(conn, t, client, r),
      (e: unknown) => this.#bug(conn, e),
    );
  }

  #onTransportHeader(conn: Conn, t: TLSSocket, client: ClientInfo, r: PrefixRead<HeaderDecision>): void {
    if (!this.#isLive(conn) || 'closed' in r) {
      this.#destroy(conn);
      return;
    }
    if ('timeout' in r) {
      this.#fail(conn, 'transport header timeout');
      return;
    }
    if ('overflow' in r || r.result.kind === 'invalid') {
      this.#fail(conn, 'invalid transport header');
      return;
    }
    const { header, consumed } = r.result;
    // Drop the header; the application stream starts right after it.
    t.read(consumed);
    conn.port = header.port;
    if (header.name !== undefined) {
      this.#fail(conn, 'gateway not supported');
      return;
    }
    const sessionProtocol = header.sessionProtocol;
    this.#withPolicy(conn, (policy) => {
      conn.policy = policy;
      // Without a session protocol the port's protocol decides, as for a connection on the port
      // itself: an HTTP port is never relayed as opaque bytes (its routes and header hygiene would
      // be skipped), and a `detect` port detects.
      if (sessionProtocol !== undefined) this.#handleHttp(conn, client, sessionProtocol, 'transport-header');
      else this.#classify(conn, client.tls);
    });
  }

  // -------------------------------------------------------------------------------------------
  // Decisions

  /**
   * Connection-level authorization (§4.5) and, on a permit, forwarding to the application. After a
   * silent HTTP detection (`afterSilence`: its timeout; the server may speak first) the client's
   * first bytes are still checked: HTTP then closes the connection, or it would reach the
   * application unchecked.
   */
  #authorizeTcp(conn: Conn, client: ClientInfo, afterSilence?: number): void {
    // The proxy's own ports (the admin port named by a transport header) speak HTTP only, to the
    // proxy: a stream for them is never relayed to whatever listens on the application's host.
    if (this.#isProxyPort(conn.port)) {
      this.#fail(conn, 'proxy port');
      return;
    }
    const policy = this.#policies.current(conn.port);
    if (policy === undefined) {
      this.#fail(conn, 'no policy');
      return;
    }
    // A policy that changed during detection is applied like an update on an open connection
    // (§4.8): e.g. a port that became HTTP-only no longer takes a TCP stream.
    const d = policy === conn.policy ? authorizeConnection(policy, client) : reauthorizeConnection(policy, client);
    const port = conn.port;
    this.#hooks.onTcpOpen?.({ port, server: policy.server.meta, client, socket: conn.raw });
    if (!d.allowed) {
      this.#counter.tcpAuthzDeny++;
      this.#hooks.onTcpDeny?.({ port, client, decision: d });
      if (this.#log.isLevelEnabled('info')) this.#log.info(this.#logFields(conn, client, d), 'inbound TCP connection denied');
      if (this.#tap?.active === true) this.#tap.tcpDenied(port, client, d, false);
      this.#reset(conn);
      return;
    }
    this.#counter.tcpAuthzAllow++;
    this.#hooks.onTcpAllow?.({ port, client, decision: d });
    if (d.isAudit) {
      if (this.#tap?.active === true) this.#tap.tcpAudited(port, client, d);
      // A would-be denial: at info, like an audited request, so `ward status` lists it.
      if (this.#log.isLevelEnabled('info')) {
        this.#log.info(
          { ...this.#logFields(conn, client, d), authz: { group: d.authz.group, kind: d.authz.kind, name: d.authz.name } },
          'inbound TCP connection allowed',
        );
      }
    } else if (this.#log.isLevelEnabled('debug')) {
      this.#log.debug({ ...this.#logFields(conn, client, d), authz: `${d.authz.kind}:${d.authz.name}` }, 'inbound TCP connection allowed');
    }
    conn.tracked = true;
    this.#tracker.add(port, conn, client);
    this.#established(conn, client);
    const gate = afterSilence !== undefined ? this.#notHttpGate(conn, afterSilence) : undefined;
    conn.upstream = forwardTcp(
      conn.front,
      { host: this.#appHostOf(port, conn.podIp), port: this.#appPortOf(port) },
      (err) => this.#error(conn, 'app connect failed', err),
      gate,
    );
    // No byte either way for this long: closed (every byte relayed passes through `front`).
    conn.front.setTimeout(this.#tcpIdleTimeoutMs, () => {
      if (!conn.closed) this.#fail(conn, 'tcp idle timeout');
    });
  }

  /**
   * Resolves true once the client's first bytes rule HTTP out (judged as by `#detectHttp`, within
   * `timeoutMs` of the first byte, which may take as long as the idle timeout); false (the
   * connection failed) when they are HTTP, or none come.
   */
  async #notHttpGate(conn: Conn, timeoutMs: number): Promise<boolean> {
    const first = await readPrefix(conn.front, firstByte, { timeoutMs: this.#tcpIdleTimeoutMs, maxBytes: 1 });
    if (!('result' in first)) {
      if (!('closed' in first) && !conn.closed) this.#fail(conn, 'tcp idle timeout');
      return false;
    }
    const r = await readPrefix(conn.front, decideHttp, { timeoutMs, maxBytes: HTTP1_MAX_REQUEST_LINE_BYTES });
    if ('closed' in r) return false;
    if (('result' in r ? r.result : detectHttpUndecided(r.buffer)) === 'not-http') return true;
    if (!conn.closed) this.#fail(conn, 'http after detect timeout');
    return false;
  }

  /** A policy update revoked a forwarded connection (§4.8). */
  #terminate(conn: Conn, port: number, deny: Deny, client: ClientInfo): void {
    conn.tracked = false;
    this.#counter.tcpAuthzTerminate++;
    this.#hooks.onTcpTerminate?.({ port, client, decision: deny });
    if (this.#tap?.active === true) this.#tap.tcpDenied(port, client, deny, true);
    this.#log.info(this.#logFields(conn, client, deny), 'Connection terminated due to policy change');
    this.#reset(conn);
  }

  /** Hands the connection to the HTTP stack, which authorizes each request (§4.5-4.8). */
  #handleHttp(conn: Conn, client: ClientInfo, version: InboundHttpVersion, source: InboundHttpConnection['source']): void {
    const policy = conn.policy as CompiledServer;
    this.#established(conn, client);
    this.#hooks.onTcpOpen?.({ port: conn.port, server: policy.server.meta, client, socket: conn.raw });
    this.#handleHttpFn({
      socket: conn.front,
      raw: conn.raw,
      port: conn.port,
      policy,
      client,
      version,
      source,
      appHost: this.#appHostOf(conn.port, conn.podIp),
    });
  }

  // -------------------------------------------------------------------------------------------
  // Endings

  #logFields(conn: Conn, client: ClientInfo, d: { readonly server: { readonly kind: string; readonly name: string }; readonly reason?: string }): object {
    const tls = client.tls;
    return {
      client: conn.raw.remoteAddress,
      port: conn.port,
      server: `${d.server.kind}:${d.server.name}`,
      tls: tls.kind === 'established' ? `mtls ${tls.clientId ?? '-'}` : tls.kind === 'passthrough' ? `passthrough ${tls.sni}` : tls.reason,
      reason: d.reason,
    };
  }

  #error(conn: Conn, reason: InboundErrorReason, err?: Error): void {
    this.#counter.error(reason);
    this.#hooks.onTcpError?.(reason, conn.port);
    if (this.#log.isLevelEnabled('debug'))
      this.#log.debug({ client: conn.raw.remoteAddress, port: conn.port, err: err?.message }, `inbound connection closed: ${reason}`);
  }

  /** Counts `reason` and closes the connection. */
  #fail(conn: Conn, reason: InboundErrorReason): void {
    this.#error(conn, reason);
    this.#destroy(conn);
  }

  /** A detector threw: a bug, not bad input. Logged loudly; the connection is closed. */
  #bug(conn: Conn, e: unknown): void {
    this.#log.error({ client: conn.raw.remoteAddress, port: conn.port, err: errorMessage(e) }, 'inbound detection failed');
    this.#destroy(conn);
  }

  /**
   * Closes the connection. Once mesh TLS is terminated only the TLS socket is destroyed (it closes
   * the TCP socket under it): destroying the TCP socket and then, in the same tick, the TLS socket
   * over it crashes Node 20 (free(): invalid pointer / SIGSEGV).
   */
  #destroy(conn: Conn): void {
    if (conn.front === conn.raw) conn.raw.destroy();
    else conn.front.destroy();
    conn.upstream?.destroy();
  }

  /**
   * Closes with a TCP reset, the "refused" of §4.7. A mesh TLS connection is closed instead: its
   * TCP socket cannot be reset safely under a live TLS socket (see {@link #destroy}).
   */
  #reset(conn: Conn): void {
    if (conn.front === conn.raw) {
      try {
        conn.raw.resetAndDestroy();
      } catch {
        // Not a TCP handle (cannot happen for an accepted socket): a plain close will do.
      }
    }
    this.#destroy(conn);
  }
}
