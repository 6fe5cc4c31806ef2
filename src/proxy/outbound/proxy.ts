/**
 * The outbound side of the proxy in local mode (ARCHITECTURE "Deployment modes"): an explicit
 * HTTP forward proxy on `127.0.0.1:4140`, so any client honouring `HTTP_PROXY` / `grpc_proxy`
 * is meshed.
 *
 * - Absolute-form HTTP/1 (`GET http://web-svc.emojivoto:80/path HTTP/1.1`): the authority is
 *   resolved through the {@link DestinationCache}, an endpoint is picked by P2C over the requests
 *   in flight, and the request is forwarded on the endpoint's keep-alive pool (meshed: mesh TLS
 *   plus a transport header with session protocol `http1`; `opaque` when the endpoint's port is
 *   opaque). Hop-by-hop, `proxy-*` and client-sent `l5d-*` headers are dropped; bodies stream
 *   both ways; the endpoint's status, headers and trailers are relayed.
 * - `CONNECT host:port`: resolved the same way, an endpoint picked by P2C over open connections,
 *   connected (meshed: through the handshake and the identity check) *before* answering
 *   `200 Connection Established`, then piped. For a meshed endpoint whose port is not opaque the
 *   tunnel's first bytes choose the transport header's session protocol — HTTP/2 (a gRPC client
 *   behind `grpc_proxy`) → `http2`, an HTTP/1 request line → `http1`, anything else or nothing
 *   within the tunnel detect timeout → none (opaque) — so the server side applies per-request (route)
 *   policy to HTTP in tunnels and connection-level policy to the rest.
 * - HTTP/2 with prior knowledge: served on h2/connection (as the inbound's HTTP/2 is); every
 *   stream's `:authority` is resolved and the stream is relayed (outbound/h2-relay) on the
 *   endpoint's shared HTTP/2 connection (session protocol `http2`), also an h2/connection. Its
 *   request body waits, unconsumed, while the target is resolved and the endpoint connected.
 * - Transparent mode (`originalDst`; POLICY-SEMANTICS §4.1): iptables redirects the application's
 *   outbound connections to this listener. A redirected connection is resolved by its original
 *   destination `ip:port` (SO_ORIGINAL_DST; Destination `ip:port` path) and carried exactly like a
 *   CONNECT tunnel — same balancing, retry, mesh TLS and session-protocol sniffing — except that
 *   there is no status line to answer: a failure closes the connection with a reset. An address
 *   the controller does not know is connected to directly, in plaintext, as it was asked. A
 *   connection that was not redirected (its original destination is this listener) is served as
 *   the forward proxy above, so `HTTP_PROXY` clients keep working. Redirect loops are the
 *   installer's concern: the proxy's own connections must be exempt from the redirect (upstream:
 *   iptables `-m owner --uid-owner` of the proxy's user; a dedicated group with `--gid-owner`
 *   works as well).
 *
 * Errors are answered by the proxy with `l5d-proxy-error: <reason>` (and the reason as a text
 * body; gRPC: a trailers-only `grpc-status` 14 with `grpc-message`): a request target that is not
 * absolute-form `http://` → 400; a name that is not a cluster service or one the controller does
 * not know → 502; a service without endpoints, or no answer from the controller in time → 503;
 * no certificate yet → 503. An IP address the controller does not know is connected to directly,
 * in plaintext. A failure to connect to an endpoint (refused, timeout, TLS failure, identity
 * mismatch) is retried once on another endpoint, then answered 502; since connections are made
 * before any byte of the request is written, a peer that fails the identity check never sees the
 * request. A failure after the request was sent is a 502 (before the response) or an aborted
 * response (after) — requests are never replayed.
 *
 * With `metrics`, every HTTP request (HTTP/1 absolute-form, HTTP/2 stream, HTTP/1 or HTTP/2 in a
 * redirected connection to a meshed endpoint; not CONNECT) is counted
 * in `request_total`, `response_total` and `response_latency_ms` with `direction="outbound"`
 * (metrics/outbound): on the endpoint it was sent to, and the proxy's own answers as failures with
 * their reason in `error`.
 */
import { STATUS_CODES } from 'node:http';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import type { DestinationEndpoint } from '../../api/index.js';
import { DETECT_TIMEOUT_MS } from '../../core/index.js';
import type { HeaderBlock } from '../../http/index.js';
import {
  H2_INTERNAL_ERROR,
  H2Connection,
  type H2Stream,
  type H2StreamEvents,
  Http1Server,
  type Http1ServerRequest,
  type Http1ServerResponse,
} from '../../http/index.js';
import { errorMessage, type Logger, MeshError, silentLogger } from '../../shared/index.js';
import { grpcStatusValue, isGrpcContentType } from '../metrics/http.js';
import type { OutboundExchange, OutboundMetrics } from '../metrics/outbound.js';
import { grpcMessage, L5D_PROXY_ERROR, safeHeaderValue } from '../relay/http-headers.js';
import { headerValue, relayHttp1 } from '../relay/http-relay.js';
import { detectHttp, HTTP1_MAX_REQUEST_LINE_BYTES } from '../transport/detect-http.js';
import { pipeBoth } from '../transport/forward.js';
import type { OriginalDst, OriginalDstReader } from '../transport/original-dst.js';
import { readPrefix } from '../transport/prefix-reader.js';
import { EndpointLoad, pickP2C } from './balancer.js';
import type { OutboundConnectError, OutboundConnectFailure, OutboundConnector, OutboundProtocol } from './connector.js';
import { OutboundH2Relay, type OutboundH2RelayHost } from './h2-relay.js';
import { filterOutboundRequest1, parseAbsoluteForm } from './http-headers.js';
import { tapHttp1 } from './http1-tap.js';
import { tapHttp2 } from './http2-tap.js';
import type { OutboundResolution, OutboundTarget, OutboundTargetParse } from './resolver.js';

/** What the proxy needs of the resolver (structurally, `DestinationCache`). */
export interface OutboundResolver {
  /** Parses an authority (`host:port`, or `host` with `defaultPort`). */
  parse(authority: string, defaultPort?: number): OutboundTargetParse;
  /** Resolves a target (bounded wait for a first answer). */
  resolve(target: OutboundTarget): Promise<OutboundResolution>;
}

/** Why the outbound proxy answered a request or tunnel itself, or gave up on it. */
export type OutboundErrorReason =
  /** The request target is not absolute-form `http://` (or a CONNECT target is not host:port): 400. */
  | 'bad request'
  /** Not a cluster service name, or one the controller does not know: 502. */
  | 'unknown service'
  /** A known service without endpoints: 503. */
  | 'no endpoints'
  /** No answer from the destination service in time: 503. */
  | 'destination unavailable'
  /** Connecting to the endpoint(s) failed (after the one retry): 502 (no certificate: 503). */
  | OutboundConnectFailure
  /** The endpoint failed after the request was sent, before responding: 502. */
  | 'endpoint failed'
  /** The endpoint failed in the middle of a response: the client's response is aborted. */
  | 'response aborted'
  /** A connection to the proxy that is not HTTP (or sent nothing within the detect timeout): closed. */
  | 'not http'
  /** HTTP/2 CONNECT (extended or not): 501. */
  | 'upgrade not supported'
  /** Transparent mode: the original destination of a redirected connection could not be read: closed. */
  | 'original destination unknown';

/** Counters of an {@link OutboundProxy}. */
export interface OutboundStats {
  /** HTTP requests received (HTTP/1 and HTTP/2 streams; CONNECTs excluded). */
  readonly requests: number;
  /** CONNECT requests received. */
  readonly tunnels: number;
  /** Connections redirected to the proxy (transparent mode), each carried to its original destination. */
  readonly redirected: number;
  /** Requests and tunnels sent to a second endpoint after a connect failure. */
  readonly retries: number;
  readonly errors: Readonly<Partial<Record<OutboundErrorReason, number>>>;
  /** Mesh TLS handshakes completed by the connector. */
  readonly handshakes: number;
  /** Client connections open now. */
  readonly open: number;
}

/** Options of {@link OutboundProxy}. */
export interface OutboundProxyOptions {
  /** Where to listen (upstream `127.0.0.1:4140`; port 0 = any free port). */
  readonly listen: { readonly host: string; readonly port: number };
  readonly resolver: OutboundResolver;
  readonly connector: OutboundConnector;
  /** Randomness of the balancer, in [0, 1) (default `Math.random`). */
  readonly random?: () => number;
  /** Deadline for a new client connection's request line or HTTP/2 preface (default 10 s): closed after. */
  readonly detectTimeoutMs?: number;
  /**
   * Deadline for a meshed tunnel's first bytes (default 2 s): opaque after. Kept well below the
   * far side's deadline for the transport header (10 s), which waits on this decision.
   */
  readonly tunnelDetectTimeoutMs?: number;
  /** Deadline for an HTTP/1 request's header block (default 10 s): 408, closed. */
  readonly headersTimeoutMs?: number;
  /** An idle HTTP/1 keep-alive client connection is closed after this (default 60 s). */
  readonly keepAliveTimeoutMs?: number;
  /**
   * Transparent mode: reads the original destination of each accepted connection; redirected
   * ones are carried to it (see the module comment). Without it the listener is the forward proxy only.
   */
  readonly originalDst?: OriginalDstReader;
  /** HTTP request metrics (`request_total`… with `direction="outbound"`); none without. */
  readonly metrics?: OutboundMetrics;
  readonly logger?: Logger;
}

const GRPC_UNAVAILABLE = 14;
const GRPC_UNIMPLEMENTED = 12;
const GRPC_INVALID_ARGUMENT = 3;
/** How often idle HTTP/1 pools of endpoints are dropped. */
const PRUNE_INTERVAL_MS = 60_000;
/** Bound on an HTTP/1 request's header block in bytes (as node's default): 431, closed. */
const MAX_HEADER_BYTES = 16 * 1024;

function noop(): void {}

/** Events of a stream the proxy could not take on: whatever arrives on it is dropped. */
const IGNORE_STREAM: H2StreamEvents = {
  headers: noop,
  data: (s, chunk) => s.consumed(chunk.length),
  closed: noop,
};

function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** Whether `dst` is the socket's own local address: the connection came to the proxy itself, not redirected. */
function isOwnAddress(socket: Socket, dst: OriginalDst): boolean {
  if (!dst.redirected) return true;
  const local = socket.localAddress?.startsWith('::ffff:') === true ? socket.localAddress.slice('::ffff:'.length) : socket.localAddress;
  return dst.port === socket.localPort && dst.address === local;
}

/**
 * Who a tunnel answers: a CONNECT client gets a status line (`200 Connection Established` or the
 * failure); a redirected connection (transparent mode) gets nothing but the bytes, or a reset.
 */
type TunnelKind = 'connect' | 'redirected';

/** A failed resolution or connection, as the proxy answers it. */
interface Failure {
  readonly status: number;
  readonly reason: OutboundErrorReason;
  readonly detail: string;
}

function connectFailure(e: OutboundConnectError): Failure {
  return { status: e.reason === 'no certificate' ? 503 : 502, reason: e.reason, detail: e.message };
}

function isConnectError(e: unknown): e is OutboundConnectError {
  return e instanceof MeshError && e.code === 'ERR_OUTBOUND_CONNECT';
}

/** Endpoints to balance over, or the failure to answer. */
function endpointsOf(r: OutboundResolution): { readonly endpoints: readonly DestinationEndpoint[] } | { readonly failure: Failure } {
  switch (r.kind) {
    case 'endpoints':
      return { endpoints: r.endpoints };
    case 'direct':
      // Unknown to the controller: plain TCP to the address as given.
      return { endpoints: [{ ip: r.ip, port: r.port, weight: 1, labels: {} }] };
    case 'unknown':
      return { failure: { status: 502, reason: 'unknown service', detail: r.reason } };
    case 'no-endpoints':
      return { failure: { status: 503, reason: 'no endpoints', detail: r.reason } };
    case 'unavailable':
      return { failure: { status: 503, reason: 'destination unavailable', detail: r.reason } };
  }
}

/**
 * The outbound forward proxy of one pod. `start()` binds the listener; `close()` closes it and
 * every client connection (the resolver and the connector belong to the caller). Invariants: no
 * byte of a request reaches an endpoint before the connection to it passed the handshake and the
 * identity check; client-sent `l5d-*` and `proxy-*` headers never reach an endpoint; a request is
 * sent at most once.
 */
export class OutboundProxy {
  readonly #listen: { readonly host: string; readonly port: number };
  readonly #resolver: OutboundResolver;
  readonly #connector: OutboundConnector;
  readonly #random: () => number;
  readonly #detectTimeoutMs: number;
  readonly #tunnelDetectTimeoutMs: number;
  readonly #originalDst: OriginalDstReader | undefined;
  readonly #metrics: OutboundMetrics | undefined;
  readonly #log: Logger;
  readonly #load = new EndpointLoad();
  readonly #keys = new WeakMap<DestinationEndpoint, string>();
  readonly #h1: Http1Server<undefined>;
  readonly #h2Conns = new Set<H2Connection>();
  /** How HTTP/2 relays report the endpoint's failures (one object for all of them). */
  readonly #relayHost: OutboundH2RelayHost = {
    failed: (relay, detail) =>
      this.#reply2(relay, { status: 502, reason: 'endpoint failed', detail: `the endpoint failed before responding: ${detail}` }, GRPC_UNAVAILABLE),
    aborted: () => this.#error('response aborted'),
  };
  readonly #clients = new Set<Socket>();
  readonly #errors: Partial<Record<OutboundErrorReason, number>> = {};
  #server: Server | undefined;
  #pruneTimer: NodeJS.Timeout | undefined;
  #port: number | undefined;
  #requests = 0;
  #tunnels = 0;
  #redirected = 0;
  #retries = 0;
  #state: 'new' | 'started' | 'closed' = 'new';

  /** Builds the HTTP servers; nothing is bound before `start()`. Throws RangeError for a bad timeout or port. */
  constructor(opts: OutboundProxyOptions) {
    const { port } = opts.listen;
    if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new RangeError(`bad outbound listen port ${port}`);
    const detectTimeoutMs = opts.detectTimeoutMs ?? DETECT_TIMEOUT_MS;
    const tunnelDetectTimeoutMs = opts.tunnelDetectTimeoutMs ?? 2_000;
    const headersTimeoutMs = opts.headersTimeoutMs ?? 10_000;
    const keepAliveTimeoutMs = opts.keepAliveTimeoutMs ?? 60_000;
    for (const [name, v] of Object.entries({ detectTimeoutMs, tunnelDetectTimeoutMs, headersTimeoutMs, keepAliveTimeoutMs })) {
      if (!(Number.isInteger(v) && v > 0 && v <= 0x7fff_ffff)) throw new RangeError(`bad ${name} ${v}`);
    }
    this.#listen = opts.listen;
    this.#resolver = opts.resolver;
    this.#connector = opts.connector;
    this.#random = opts.random ?? Math.random;
    this.#detectTimeoutMs = detectTimeoutMs;
    this.#tunnelDetectTimeoutMs = tunnelDetectTimeoutMs;
    this.#originalDst = opts.originalDst;
    this.#metrics = opts.metrics;
    this.#log = opts.logger ?? silentLogger();

    // No deadline on whole requests: long uploads and streams are legitimate.
    this.#h1 = new Http1Server<undefined>({
      headersTimeoutMs,
      keepAliveTimeoutMs,
      maxHeaderBytes: MAX_HEADER_BYTES,
      events: {
        request: (req, res) => this.#onRequest(req, res),
        connect: (req, socket, head) => this.#onConnect(req, socket as Socket, head),
        clientError: (_code, status) => {
          if (status !== undefined) this.#error('bad request');
        },
        failed: (err) => this.#log.error({ err }, 'outbound HTTP request failed in the proxy'),
      },
    });
  }

  /** The bound port once started. */
  get port(): number | undefined {
    return this.#port;
  }

  /**
   * Binds the listener. Rejects with `MeshError` `ERR_OUTBOUND_LISTEN` when it cannot (the proxy
   * is then closed), `ERR_OUTBOUND_STATE` when not new.
   */
  async start(): Promise<number> {
    if (this.#state !== 'new') throw new MeshError('ERR_OUTBOUND_STATE', `outbound proxy cannot start: it is ${this.#state}`);
    this.#state = 'started';
    // Paused: detection reads the first bytes. Half-open: a tunnel relays each direction's FIN.
    const server = createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true });
    this.#server = server;
    const { host, port } = this.#listen;
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen({ host, port }, () => {
          server.off('error', reject);
          resolve();
        });
      });
    } catch (e) {
      await this.close();
      throw new MeshError('ERR_OUTBOUND_LISTEN', `outbound proxy cannot listen on ${host}:${port}: ${errorMessage(e)}`, { cause: e });
    }
    if (this.#state !== 'started') {
      server.close();
      throw new MeshError('ERR_OUTBOUND_STATE', 'outbound proxy closed while starting');
    }
    server.on('error', (err) => this.#log.error({ host, port, err: err.message }, 'outbound listener failed'));
    server.on('connection', (s: Socket) => this.#accept(s));
    this.#pruneTimer = setInterval(() => this.#connector.prune(), PRUNE_INTERVAL_MS);
    this.#pruneTimer.unref();
    this.#port = (server.address() as AddressInfo).port;
    this.#log.info({ host, port: this.#port }, 'outbound proxy listening');
    return this.#port;
  }

  /** Counters (see {@link OutboundStats}). */
  stats(): OutboundStats {
    return {
      requests: this.#requests,
      tunnels: this.#tunnels,
      redirected: this.#redirected,
      retries: this.#retries,
      errors: { ...this.#errors },
      handshakes: this.#connector.stats().handshakes,
      open: this.#clients.size,
    };
  }

  /** Closes the listener and every client connection (tunnels included). Idempotent. */
  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    if (this.#pruneTimer !== undefined) clearInterval(this.#pruneTimer);
    const server = this.#server;
    const closed = server === undefined || !server.listening ? Promise.resolve() : new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of this.#clients) s.destroy();
    this.#clients.clear();
    for (const c of [...this.#h2Conns]) c.destroy();
    this.#h2Conns.clear();
    this.#h1.close();
    await closed;
  }

  #error(reason: OutboundErrorReason): void {
    this.#errors[reason] = (this.#errors[reason] ?? 0) + 1;
  }

  #key(e: DestinationEndpoint): string {
    let k = this.#keys.get(e);
    if (k === undefined) {
      k = `${e.ip}|${e.port}`;
      this.#keys.set(e, k);
    }
    return k;
  }

  #pick(
    endpoints: readonly DestinationEndpoint[],
    by: 'requests' | 'connections',
    exclude?: ReadonlySet<DestinationEndpoint>,
  ): DestinationEndpoint | undefined {
    const load = by === 'requests' ? (e: DestinationEndpoint) => this.#load.inFlight(this.#key(e)) : (e: DestinationEndpoint) => this.#load.open(this.#key(e));
    return pickP2C(endpoints, load, this.#random, exclude);
  }

  /** The protocol an endpoint's connection carries for an HTTP request of version `version`. */
  #protocolFor(e: DestinationEndpoint, version: 'http1' | 'http2'): OutboundProtocol {
    return this.#connector.isMeshed(e) && e.protocolHint === 'opaque' ? 'opaque' : version;
  }

  // -------------------------------------------------------------------------------------------
  // Accepting

  #accept(raw: Socket): void {
    raw.on('error', noop);
    if (this.#state === 'closed') {
      raw.destroy();
      return;
    }
    this.#clients.add(raw);
    raw.once('close', () => this.#clients.delete(raw));
    if (this.#originalDst !== undefined) {
      const dst = this.#originalDst(raw);
      if (!dst.ok) {
        this.#error('original destination unknown');
        this.#log.warn({ client: raw.remoteAddress, code: dst.code, err: dst.message }, 'outbound connection without a readable original destination');
        raw.resetAndDestroy();
        return;
      }
      if (!isOwnAddress(raw, dst.value)) {
        this.#onRedirected(raw, dst.value);
        return;
      }
      // Addressed to the proxy itself: an HTTP_PROXY client, served as the forward proxy.
    }
    void readPrefix(raw, detectHttp, { timeoutMs: this.#detectTimeoutMs, maxBytes: HTTP1_MAX_REQUEST_LINE_BYTES }).then(
      (r) => {
        if (!('result' in r)) {
          if (!('closed' in r)) this.#error('not http');
          raw.destroy();
          return;
        }
        if (r.result === 'http1') {
          this.#h1.serve(raw, undefined);
        } else if (r.result === 'http2') {
          this.#serve2(raw);
        } else {
          this.#error('not http');
          raw.destroy();
        }
      },
      (e: unknown) => {
        this.#log.error({ err: errorMessage(e) }, 'outbound detection failed');
        raw.destroy();
      },
    );
  }

  // -------------------------------------------------------------------------------------------
  // HTTP/1 absolute-form requests

  #onRequest(req: Http1ServerRequest, res: Http1ServerResponse): void {
    this.#requests++;
    const ex = this.#metrics?.exchange();
    if (ex !== undefined) {
      ex.isGrpc = isGrpcContentType(headerValue(req.rawHeaders, 'content-type'));
      res.onClose((finished) => {
        if (!finished) ex.fail('client disconnected');
        ex.end();
      });
    }
    const target = parseAbsoluteForm(req.url);
    if (typeof target === 'string') {
      this.#reply1(res, { status: 400, reason: 'bad request', detail: target }, ex);
      return;
    }
    const parsed = this.#resolver.parse(target.authority, 80);
    if (!parsed.ok) {
      this.#reply1(res, { status: 502, reason: 'unknown service', detail: parsed.reason }, ex);
      return;
    }
    ex?.to(parsed.target);
    const headers = filterOutboundRequest1(req.rawHeaders, target.authority);
    this.#resolver.resolve(parsed.target).then(
      (r) => {
        if (res.destroyed || res.finished) return;
        const e = endpointsOf(r);
        if ('failure' in e) this.#reply1(res, e.failure, ex);
        else this.#send1(req, res, e.endpoints, target.path, headers, undefined, ex);
      },
      (e: unknown) => this.#reply1(res, { status: 502, reason: 'destination unavailable', detail: errorMessage(e) }, ex),
    );
  }

  /** Sends the request to an endpoint; on a connect failure, once more to another one. */
  #send1(
    req: Http1ServerRequest,
    res: Http1ServerResponse,
    endpoints: readonly DestinationEndpoint[],
    path: string,
    headers: string[],
    failed: Set<DestinationEndpoint> | undefined,
    ex: OutboundExchange | undefined,
  ): void {
    const ep = this.#pick(endpoints, 'requests', failed);
    if (ep === undefined) {
      this.#reply1(res, { status: 502, reason: 'connect failed', detail: 'no endpoint left to try' }, ex);
      return;
    }
    ex?.attempt(ep);
    const done = this.#load.startRequest(this.#key(ep));
    const protocol = this.#protocolFor(ep, 'http1') === 'opaque' ? 'opaque' : 'http1';
    const pool = this.#connector.pool1(ep, protocol);
    // The client waits for this before its body (the endpoint's own 100 is not relayed).
    if (req.expectsContinue) res.writeContinue();
    relayHttp1(
      pool,
      req,
      res,
      { method: req.method, path, headers, upstreamIsProxy: protocol === 'http1' && this.#connector.isMeshed(ep) },
      {
        sent: () => ex?.sent(),
        head: (status, h) => ex?.head(status, grpcStatusValue(headerValue(h, 'grpc-status'))),
        trailers: (t) => ex?.trailers(grpcStatusValue(headerValue(t, 'grpc-status'))),
        settled: done,
        refused: (reason) => this.#reply1(res, { status: 400, reason: 'bad request', detail: reason }, ex),
        failed: (err, connected) => {
          if (!connected && isConnectError(err)) {
            if (this.#retryAfter(ep, err, endpoints, failed)) {
              this.#send1(req, res, endpoints, path, headers, new Set([ep]), ex);
              return;
            }
            this.#reply1(res, connectFailure(err), ex);
            return;
          }
          this.#reply1(res, { status: 502, reason: 'endpoint failed', detail: `the endpoint failed before responding: ${err.message}` }, ex);
        },
        unrelayable: (err) => this.#reply1(res, { status: 502, reason: 'endpoint failed', detail: `unrelayable response headers: ${err.message}` }, ex),
        aborted: () => {
          this.#error('response aborted');
          ex?.fail('response aborted');
        },
      },
    );
  }

  /** A response of the proxy's own: `status`, the reason in `l5d-proxy-error` and as the body. */
  #reply1(res: Http1ServerResponse, f: Failure, ex: OutboundExchange | undefined): void {
    this.#error(f.reason);
    ex?.fail(f.reason);
    if (this.#log.isLevelEnabled('debug')) this.#log.debug({ status: f.status, reason: f.reason, detail: f.detail }, 'outbound request failed');
    if (res.destroyed || res.finished) return;
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = Buffer.from(`${f.detail}\n`, 'utf8');
    res.writeHead(f.status, undefined, [
      'content-type',
      'text/plain; charset=utf-8',
      'content-length',
      String(body.length),
      L5D_PROXY_ERROR,
      safeHeaderValue(f.detail),
    ]);
    res.write(body);
    res.end();
  }

  /**
   * Logs a failure to connect to `ep`; true (counted as a retry) when the request or tunnel goes
   * to another endpoint: once, not for a missing certificate, and only when there is another one.
   */
  #retryAfter(
    ep: DestinationEndpoint,
    err: OutboundConnectError,
    endpoints: readonly DestinationEndpoint[],
    failed: ReadonlySet<DestinationEndpoint> | undefined,
  ): boolean {
    this.#logConnectFailure(ep, err);
    if (failed !== undefined || err.reason === 'no certificate' || endpoints.length <= 1) return false;
    this.#retries++;
    return true;
  }

  #logConnectFailure(ep: DestinationEndpoint, err: OutboundConnectError): void {
    if (err.reason === 'identity mismatch')
      this.#log.warn({ endpoint: this.#key(ep), identity: ep.identity, err: err.message }, 'outbound endpoint failed the identity check');
    else if (this.#log.isLevelEnabled('debug')) this.#log.debug({ endpoint: this.#key(ep), err: err.message }, 'outbound connect failed');
  }

  // -------------------------------------------------------------------------------------------
  // CONNECT tunnels

  #onConnect(req: Http1ServerRequest, client: Socket, head: Buffer): void {
    this.#tunnels++;
    client.on('error', noop);
    const parsed = this.#resolver.parse(req.url);
    if (!parsed.ok) {
      this.#refuseTunnel(client, 'connect', { status: 400, reason: 'bad request', detail: parsed.reason });
      return;
    }
    this.#resolveTunnel(client, head, parsed.target, 'connect');
  }

  /** Transparent mode: a redirected connection, carried to its original destination as a tunnel. */
  #onRedirected(client: Socket, dst: OriginalDst): void {
    this.#redirected++;
    const parsed = this.#resolver.parse(hostPort(dst.address, dst.port));
    if (!parsed.ok) {
      this.#refuseTunnel(client, 'redirected', { status: 400, reason: 'bad request', detail: parsed.reason });
      return;
    }
    this.#resolveTunnel(client, Buffer.alloc(0), parsed.target, 'redirected');
  }

  #resolveTunnel(client: Socket, head: Buffer, target: OutboundTarget, kind: TunnelKind): void {
    this.#resolver.resolve(target).then(
      (r) => {
        const e = endpointsOf(r);
        if ('failure' in e) this.#refuseTunnel(client, kind, e.failure);
        else void this.#tunnel(client, head, e.endpoints, kind, target);
      },
      (e: unknown) => this.#refuseTunnel(client, kind, { status: 502, reason: 'destination unavailable', detail: errorMessage(e) }),
    );
  }

  async #tunnel(client: Socket, head: Buffer, endpoints: readonly DestinationEndpoint[], kind: TunnelKind, target: OutboundTarget): Promise<void> {
    let failed: Set<DestinationEndpoint> | undefined;
    for (;;) {
      const ep = this.#pick(endpoints, 'connections', failed);
      if (ep === undefined) {
        this.#refuseTunnel(client, kind, { status: 502, reason: 'connect failed', detail: 'no endpoint left to try' });
        return;
      }
      // Counted from the attempt, so that concurrent tunnels spread while connecting.
      const closed = this.#load.openConnection(this.#key(ep));
      let link: Awaited<ReturnType<OutboundConnector['open']>>;
      try {
        link = await this.#connector.open(ep);
      } catch (e) {
        closed();
        if (!isConnectError(e)) {
          this.#refuseTunnel(client, kind, { status: 502, reason: 'connect failed', detail: errorMessage(e) });
          return;
        }
        if (this.#retryAfter(ep, e, endpoints, failed)) {
          failed = new Set([ep]);
          continue;
        }
        this.#refuseTunnel(client, kind, connectFailure(e));
        return;
      }
      const upstream = link.socket;
      upstream.once('close', closed);
      if (client.destroyed || this.#state === 'closed') {
        upstream.destroy();
        return;
      }
      if (kind === 'connect') client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) client.unshift(head);
      let protocol: OutboundProtocol = 'opaque';
      if (link.meshed && ep.protocolHint !== 'opaque') {
        const r = await readPrefix(client, detectHttp, { timeoutMs: this.#tunnelDetectTimeoutMs, maxBytes: HTTP1_MAX_REQUEST_LINE_BYTES });
        if ('closed' in r) {
          upstream.destroy();
          client.destroy();
          return;
        }
        if ('result' in r && r.result !== 'not-http') protocol = r.result;
      }
      link.start(protocol);
      if (this.#log.isLevelEnabled('debug')) this.#log.debug({ endpoint: this.#key(ep), meshed: link.meshed, protocol, kind }, 'outbound tunnel open');
      const metrics = this.#metrics;
      if (metrics !== undefined && kind === 'redirected' && protocol !== 'opaque') {
        // Its requests counted as the forward proxy's are (outbound/http1-tap, outbound/http2-tap).
        const start = (): OutboundExchange => {
          const ex = metrics.exchange();
          ex.to(target);
          ex.attempt(ep);
          ex.sent();
          return ex;
        };
        if (protocol === 'http1') tapHttp1(client, upstream, start);
        else tapHttp2(client, upstream, start);
      }
      pipeBoth(client, upstream);
      return;
    }
  }

  /** A tunnel that cannot be made: a CONNECT is answered with the failure's status; a redirected connection is reset. */
  #refuseTunnel(client: Socket, kind: TunnelKind, f: Failure): void {
    this.#error(f.reason);
    if (this.#log.isLevelEnabled('debug')) this.#log.debug({ status: f.status, reason: f.reason, detail: f.detail, kind }, 'outbound tunnel refused');
    if (kind === 'redirected') {
      if (!client.destroyed) client.resetAndDestroy();
      return;
    }
    if (client.destroyed || !client.writable) {
      client.destroy();
      return;
    }
    const body = `${f.detail}\n`;
    client.end(
      `HTTP/1.1 ${f.status} ${STATUS_CODES[f.status] ?? ''}\r\ncontent-type: text/plain; charset=utf-8\r\n${L5D_PROXY_ERROR}: ${safeHeaderValue(f.detail)}\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      () => client.destroy(),
    );
  }

  // -------------------------------------------------------------------------------------------
  // HTTP/2 prior knowledge

  /** Serves an HTTP/2 connection (prior knowledge: detection saw the preface, which it put back). */
  #serve2(raw: Socket): void {
    // No idle deadline: a client's channel to its own sidecar may sit idle for long, and is cheap.
    const conn: H2Connection = new H2Connection(raw, {
      role: 'server',
      idleTimeoutMs: 0,
      onStream: (stream, block) => {
        try {
          this.#onStream(stream, block);
        } catch (err) {
          // A defect of ours must not take the connection (or the process) down: this stream fails.
          this.#log.error({ err }, 'outbound HTTP/2 request failed in the proxy');
          stream.events ??= IGNORE_STREAM;
          stream.reset(H2_INTERNAL_ERROR);
        }
      },
      onClose: (code, reason) => {
        this.#h2Conns.delete(conn);
        if (code === H2_INTERNAL_ERROR) this.#log.error({ client: raw.remoteAddress, reason }, 'outbound HTTP/2 connection failed in the proxy');
        else if (reason !== undefined && this.#log.isLevelEnabled('debug'))
          this.#log.debug({ client: raw.remoteAddress, code, reason }, 'outbound HTTP/2 connection failed');
      },
    });
    this.#h2Conns.add(conn);
  }

  #onStream(stream: H2Stream, block: HeaderBlock): void {
    this.#requests++;
    const pairs = block.pairs;
    let path: string | undefined;
    let scheme: string | undefined;
    let authority: string | undefined;
    let host: string | undefined;
    let grpc = false;
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const name = pairs[i] as string;
      if (name === ':path') path = pairs[i + 1];
      else if (name === ':scheme') scheme = pairs[i + 1];
      else if (name === ':authority') authority = pairs[i + 1];
      else if (name === 'host') host ??= pairs[i + 1];
      else if (name === 'content-type') grpc ||= (pairs[i + 1] as string).startsWith('application/grpc');
    }
    // From here the relay is the stream's events: it holds the request body until there is an endpoint.
    const relay = new OutboundH2Relay(stream, block, grpc, this.#metrics?.exchange());
    const ex = relay.ex;
    if (path === undefined) {
      this.#reply2(relay, { status: 501, reason: 'upgrade not supported', detail: 'CONNECT over HTTP/2 is not supported' }, GRPC_UNIMPLEMENTED);
      return;
    }
    authority ??= host;
    if (scheme !== 'http' || authority === undefined) {
      const detail = authority === undefined ? 'no :authority' : `unsupported scheme ${JSON.stringify(scheme)}: use CONNECT for anything but http`;
      this.#reply2(relay, { status: 400, reason: 'bad request', detail }, GRPC_INVALID_ARGUMENT);
      return;
    }
    const parsed = this.#resolver.parse(authority, 80);
    if (!parsed.ok) {
      this.#reply2(relay, { status: 502, reason: 'unknown service', detail: parsed.reason }, GRPC_UNAVAILABLE);
      return;
    }
    ex?.to(parsed.target);
    this.#resolver.resolve(parsed.target).then(
      (r) => {
        if (relay.over) return;
        const e = endpointsOf(r);
        if ('failure' in e) this.#reply2(relay, e.failure, GRPC_UNAVAILABLE);
        else this.#send2(relay, e.endpoints, undefined);
      },
      (e: unknown) => this.#reply2(relay, { status: 502, reason: 'destination unavailable', detail: errorMessage(e) }, GRPC_UNAVAILABLE),
    );
  }

  /** Sends the request to an endpoint (`failed`: the one whose connect failed, for the one retry). */
  #send2(relay: OutboundH2Relay, endpoints: readonly DestinationEndpoint[], failed: Set<DestinationEndpoint> | undefined): void {
    const ep = this.#pick(endpoints, 'requests', failed);
    if (ep === undefined) {
      this.#reply2(relay, { status: 502, reason: 'connect failed', detail: 'no endpoint left to try' }, GRPC_UNAVAILABLE);
      return;
    }
    relay.ex?.attempt(ep);
    const protocol = this.#protocolFor(ep, 'http2') === 'opaque' ? 'opaque' : 'http2';
    const live = this.#connector.liveSession2(ep, protocol);
    if (live !== undefined) {
      this.#open2(relay, ep, live, protocol, true);
      return;
    }
    this.#connector.session2(ep, protocol).then(
      (session) => this.#open2(relay, ep, session, protocol, true),
      (e: unknown) => {
        if (relay.over) return;
        if (!isConnectError(e)) {
          this.#reply2(relay, { status: 502, reason: 'connect failed', detail: errorMessage(e) }, GRPC_UNAVAILABLE);
          return;
        }
        if (this.#retryAfter(ep, e, endpoints, failed)) {
          this.#send2(relay, endpoints, new Set([ep]));
          return;
        }
        this.#reply2(relay, connectFailure(e), GRPC_UNAVAILABLE);
      },
    );
  }

  /** Opens the endpoint's stream on `session` and relays; a session that went away meanwhile is replaced once (`again`). */
  #open2(relay: OutboundH2Relay, ep: DestinationEndpoint, session: H2Connection, protocol: 'http2' | 'opaque', again: boolean): void {
    if (relay.over) return;
    const up = session.request(relay.pairs, relay.headersOnly, relay.sensitive);
    if (up === undefined) {
      if (again && !session.usable) {
        // It went away between uses (GOAWAY, closing, stream ids spent): a new one.
        this.#connector.session2(ep, protocol).then(
          (s) => this.#open2(relay, ep, s, protocol, false),
          (e: unknown) =>
            this.#reply2(relay, isConnectError(e) ? connectFailure(e) : { status: 502, reason: 'connect failed', detail: errorMessage(e) }, GRPC_UNAVAILABLE),
        );
        return;
      }
      const detail = session.usable ? 'too many requests wait for the endpoint' : 'the connection to the endpoint closed';
      this.#reply2(relay, { status: 502, reason: 'endpoint failed', detail }, GRPC_UNAVAILABLE);
      return;
    }
    relay.ex?.sent();
    if (!relay.send(up, this.#relayHost, this.#load.startRequest(this.#key(ep)))) {
      // Closed already: the connection failed while the headers were being sent.
      this.#reply2(relay, { status: 502, reason: 'endpoint failed', detail: 'the connection to the endpoint failed' }, GRPC_UNAVAILABLE);
    }
  }

  /** A response of the proxy's own on an HTTP/2 stream (gRPC: trailers-only with `grpcStatus`). */
  #reply2(relay: OutboundH2Relay, f: Failure, grpcStatus: number): void {
    this.#error(f.reason);
    relay.ex?.fail(f.reason);
    if (this.#log.isLevelEnabled('debug')) this.#log.debug({ status: f.status, reason: f.reason, detail: f.detail }, 'outbound request failed');
    const stream = relay.down;
    relay.answer();
    if (stream.closed) return;
    if (stream.headersDone) {
      stream.reset(H2_INTERNAL_ERROR);
      return;
    }
    const h = relay.grpc
      ? [':status', '200', 'content-type', 'application/grpc', 'grpc-status', String(grpcStatus), 'grpc-message', grpcMessage(f.detail)]
      : [':status', String(f.status), 'content-type', 'text/plain; charset=utf-8'];
    h.push(L5D_PROXY_ERROR, safeHeaderValue(f.detail));
    // A request still sending its body is then reset with NO_ERROR (h2/connection), so its body stops.
    if (relay.grpc) {
      stream.respond(h, true);
    } else {
      stream.respond(h, false);
      stream.write(Buffer.from(`${f.detail}\n`, 'utf8'));
      stream.end();
    }
  }
}
