/**
 * The inbound HTTP stack (POLICY-SEMANTICS §4.4-4.9): per-request authorization of HTTP/1.1,
 * HTTP/2 and gRPC against the port's *current* policy, and forwarding of permitted requests to
 * the application. It is the default `handleHttp` of {@link InboundProxy}.
 *
 * HTTP/1: one {@link Http1Server} per proxy (h1/server: node's parser, our own framing), never
 * listening: each HTTP/1 connection is handed to it with its facts (port, client address and TLS
 * state). HTTP/2: each connection gets an {@link H2Connection} of its own
 * (h2/connection; node:http2 costs more CPU per relayed stream than all of ward's own work), whose
 * streams are relayed (inbound/h2-relay) to the application's on another (inbound/http-upstream);
 * a request the application refused unprocessed (its REFUSED_STREAM, its GOAWAY) is sent once more.
 *
 * Per request: the port's current policy → `authorizeRequest` (a port that is no longer HTTP —
 * now opaque or TLS — has no routes: 404; no policy at all → 500, fail closed). Denials are
 * answered by the proxy and never close the connection (§4.4): 403 / 404 / 500 with an empty
 * body; a gRPC request on HTTP/2 gets a trailers-only 200 with `grpc-status` 7 / 5 / 13. Only a
 * meshed client (mesh TLS with a client identity) also gets the reason, in `l5d-proxy-error` (and
 * `grpc-message`) — §4.7. Permits are forwarded with `l5d-client-id: <verified id>` for meshed
 * clients and every client-sent `l5d-*` header removed (relay/http-headers); audit permits are
 * logged at info ("Request allowed", `authz.name=audit`), other permits at debug.
 *
 * Decisions documented here:
 * - Protocol upgrades: `Upgrade: h2c` is ignored (the header is dropped and the request forwarded
 *   as HTTP/1.1, which RFC 9113 §3.1 allows); any other upgrade (WebSocket…) is authorized like
 *   any request and, when permitted, answered 501 — upgraded streams are not proxied yet. CONNECT
 *   gets 501 and the connection is closed.
 * - `Expect: 100-continue` is answered by the proxy, after authorization; the header is not
 *   forwarded. A denied request gets its 403 without a 100 and the connection is then closed
 *   (the client may still be sending a body): the one denial that does not keep the connection.
 * - `l5d-orig-proto`: an HTTP/1 request a client proxy upgraded to HTTP/2 between the proxies (as
 *   linkerd2-proxy does for endpoints hinted `h2`) is authorized as it came and goes to the
 *   application as HTTP/1.1, its response back marked `l5d-orig-proto: HTTP/1.1` (inbound/orig-proto).
 * - HTTP/2 is served whatever ALPN said (the bytes said HTTP/2). The proxy's sockets are
 *   half-open: a FIN from the client closes the connection gracefully (open streams finish).
 * - Request smuggling: node's parser (strict: no lenient flag, whatever the process flags) refuses
 *   Content-Length with Transfer-Encoding, repeated Content-Length and
 *   other malformed framing with 400 before a request exists; a Transfer-Encoding whose final
 *   coding is not chunked (which node refuses only after the headers) is answered 400 by
 *   Http1Server, for the outbound as for the inbound. Such
 *   requests never reach the application and the connection is closed. Bodies are re-framed by
 *   the upstream pool (h1/pool) toward the application, never relayed as raw bytes. A request
 *   that cannot be written as it came (an asterisk-form `OPTIONS *`, two Host headers:
 *   `refusalOf`) is answered 400 and the connection closed. A request whose body the application
 *   may leave unread (a body on GET, HEAD, OPTIONS, DELETE or TRACE: Python's http.server then
 *   runs the body as a second request) goes with `connection: close` on an application
 *   connection that is never reused, so smuggled bytes are never parsed and no response to them
 *   can reach another client.
 * - Targets (core/request-target): the policy sees, and the application receives, the normalized
 *   path; an absolute-form target's authority replaces `Host`; a target that cannot be normalized
 *   safely (a fragment, `%2F`, a backslash…) is answered 400.
 * - Limits: the header block is bounded (`maxHeaderBytes`, 431) and must arrive within
 *   `headersTimeoutMs` of the request's first byte (408; a coarse check over the connections, no
 *   timer per request). An HTTP/2 client's connection preface and first SETTINGS frame must arrive
 *   within `headersTimeoutMs` too, else the connection is
 *   closed. Bodies have no deadline (long-lived streams are legitimate) — except the body of a
 *   request the proxy answers itself (a denial, a 502…): it is read and discarded to keep the
 *   connection, and must end within `headersTimeoutMs` of the answer, else the connection is
 *   closed (a denied client could otherwise hold it forever by dribbling an endless body).
 * - The application is unreachable or fails before responding: 502 (gRPC: `grpc-status` 14); it
 *   fails mid-response: the client's response is aborted (HTTP/1 connection closed, HTTP/2 stream
 *   reset) since a truncated body must not look complete.
 * - Route filters (§4.10, relay/route-filters) run on permitted requests only, before anything is
 *   forwarded: header edits change what the application receives (never `l5d-*`, so
 *   `l5d-client-id` stays the proxy's); a redirect or an injected failure is answered by the proxy
 *   and the application sees nothing.
 * - Request metrics: each permitted request is reported to the recorder `onHttpRequest` returns,
 *   once, when its exchange is over — the relayed status, the `grpc-status` of the headers or the
 *   trailers, or why it failed (`h2(<REASON>)` for an HTTP/2 reset, else the proxy's reason).
 * - Tap (tap/tap-hub): while someone taps, each denial is published when decided and each permitted
 *   request when its exchange ends; otherwise the only cost is reading `tap.active`.
 */
import type { Duplex } from 'node:stream';
import {
  authorizeRequest,
  type ClientInfo,
  type CompiledServer,
  type Decision,
  type Deny,
  httpStatusOf,
  isGrpcRequest,
  type Meta,
  normalizeRequestTarget,
  type Permit,
  type RequestInfo,
  type TlsState,
} from '../../core/index.js';
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
import { type Logger, silentLogger } from '../../shared/index.js';
import { grpcStatusValue, HttpExchange, isGrpcContentType } from '../metrics/http.js';
import { type InboundHttpErrorReason, type InboundMetricsHooks, InboundStatsCounter } from '../metrics/inbound-stats.js';
import { filterHttp1Request, grpcMessage, isL5dHeader, L5D_CLIENT_ID, L5D_PROXY_ERROR, safeHeaderValue } from '../relay/http-headers.js';
import { headerValue, relayHttp1 } from '../relay/http-relay.js';
import { editHttp1Headers, editHttp2Headers, type FilterOutcome, runRouteFilters } from '../relay/route-filters.js';
import type { TapHub } from '../tap/tap-hub.js';
import { H2Relay, type H2RelayHost, withoutL5d } from './h2-relay.js';
import type { InboundHttpConnection } from './http-connection.js';
import { AppUpstream } from './http-upstream.js';
import { http1RequestOf, L5D_ORIG_PROTO, type OrigProto, type OrigProtoHost, OrigProtoRelay, parseOrigProto } from './orig-proto.js';

/** Tunables of the HTTP stack (every one optional). */
export interface InboundHttpSettings {
  /**
   * Deadline for a request's whole header block from its first byte (HTTP/1; default 10 s): 408,
   * closed. Also bounds an HTTP/2 connection preface, an HTTP/2 header block spread over
   * CONTINUATION frames, and the discarded body of a request the proxy answered itself (all: closed).
   */
  readonly headersTimeoutMs?: number;
  /** How often header deadlines are checked (default 1 s). */
  readonly timeoutCheckIntervalMs?: number;
  /** An idle HTTP/1 keep-alive connection, or an HTTP/2 connection without a stream, is closed after this (default 60 s; HTTP/2 with GOAWAY). */
  readonly keepAliveTimeoutMs?: number;
  /** Bound on an HTTP/1 request's header block in bytes (default 16 KiB, as node's): 431, closed. */
  readonly maxHeaderBytes?: number;
  /** Concurrent HTTP/1 connections to each application port (default 256; more requests queue). */
  readonly maxAppSocketsPerPort?: number;
}

/** Options of {@link InboundHttp}. */
export interface InboundHttpOptions extends InboundHttpSettings {
  /** The policy source: each request reads the port's current compiled policy. */
  readonly policies: { current(port: number): CompiledServer | undefined };
  /** Where the application listens. */
  readonly appHost: string;
  /** The application port behind an inbound port (default: the same number). */
  readonly appPortOf?: (port: number) => number;
  readonly logger?: Logger;
  readonly metrics?: InboundMetricsHooks;
  /** Where the counters go (the proxy passes its own); default: a private one. */
  readonly counter?: InboundStatsCounter;
  /** Randomness of failure injection, in [0, 1) (default `Math.random`). */
  readonly random?: () => number;
  /** Where decisions are published while someone taps. */
  readonly tap?: TapHub | undefined;
}

/** Default of {@link InboundHttpSettings.headersTimeoutMs}. */
export const HTTP_HEADERS_TIMEOUT_MS = 10_000;
/** Default of {@link InboundHttpSettings.keepAliveTimeoutMs}. */
export const HTTP_KEEP_ALIVE_TIMEOUT_MS = 60_000;
/** Default of {@link InboundHttpSettings.maxHeaderBytes}. */
export const HTTP_MAX_HEADER_BYTES = 16 * 1024;

/** gRPC status codes the proxy answers with. */
const GRPC_PERMISSION_DENIED = 7;
const GRPC_NOT_FOUND = 5;
const GRPC_INTERNAL = 13;
const GRPC_UNAVAILABLE = 14;

/** Server metadata for a request on a port without a policy (there is no server to name). */
const NO_SERVER: Meta = Object.freeze({ group: '', kind: 'default', name: 'none' });
const APP_UNREACHABLE = 'connection to the application failed';
const UPGRADE_NOT_SUPPORTED = 'protocol upgrades are not supported';

function noop(): void {}

/** Events of a stream the proxy answered itself: whatever else arrives on it is dropped. */
const IGNORE_STREAM: H2StreamEvents = {
  headers: noop,
  data: (s, chunk) => s.consumed(chunk.length),
  closed: noop,
};

/** A header object (pseudo-headers first, as HTTP/2 wants them) as flat pairs; arrays become repeated fields. */
function headerPairs(headers: Readonly<Record<string, string | string[] | number | undefined>>): string[] {
  const pseudo: string[] = [];
  const regular: string[] = [];
  for (const name in headers) {
    const v = headers[name];
    if (v === undefined) continue;
    const into = name.charCodeAt(0) === 0x3a ? pseudo : regular;
    if (Array.isArray(v)) for (const x of v) into.push(name, x);
    else into.push(name, String(v));
  }
  return pseudo.concat(regular);
}

/** One HTTP connection's facts, fixed for its lifetime. */
interface HttpConn {
  readonly port: number;
  readonly appHost: string;
  readonly appPort: number;
  readonly client: ClientInfo;
  /** The verified mesh identity (mesh TLS with a client certificate): `l5d-client-id`, error details. */
  readonly meshedId: string | undefined;
  readonly remote: string | undefined;
  /** HTTP/2: what relays of this connection's requests need of the stack (gRPC and not), made on first use. */
  relayHost?: H2RelayHost;
  grpcRelayHost?: H2RelayHost;
  origProtoHost?: OrigProtoHost;
}

/** An HTTP/1 request target split into the origin-form path and an absolute-form authority. */
function splitTarget(url: string): { readonly path: string; readonly authority: string | undefined } {
  if (url.charCodeAt(0) === 0x2f /* / */ || url === '*') return { path: url, authority: undefined };
  const m = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/([^/?#]*)(.*)$/.exec(url);
  if (m === null) return { path: url, authority: undefined };
  const rest = m[2] ?? '';
  return { path: rest === '' ? '/' : rest.startsWith('/') ? rest : `/${rest}`, authority: m[1] };
}

/**
 * Methods whose request body has no defined meaning (RFC 9110 §9.3), so an application may leave
 * it unread and parse it as the next request on the connection: such a request with a body goes
 * with `connection: close` on a connection that is never reused. Refusing it instead would break
 * real APIs (Elasticsearch searches with GET bodies, Kubernetes deletes with DELETE bodies).
 */
const BODY_MAY_BE_IGNORED: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'DELETE', 'TRACE']);

/** What an absolute-form target's authority may be: `host[:port]`, no userinfo (RFC 9110 §4.2.4), not empty. */
const AUTHORITY = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]+)(?::[0-9]{0,5})?$/;

/**
 * Header pairs with every `Host` replaced by one holding `authority` (an absolute-form target's
 * authority replaces `Host`, RFC 9112 §3.2.2): the application reads the authority that was authorized.
 */
function withHost(pairs: readonly string[], authority: string): string[] {
  const out: string[] = ['host', authority];
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const name = pairs[i] as string;
    if (name.length === 4 && name.toLowerCase() === 'host') continue;
    out.push(name, pairs[i + 1] as string);
  }
  return out;
}

/** Header pairs with the `:path` value replaced by `path`. */
function withPath(pairs: readonly string[], path: string): string[] {
  const out = pairs.slice();
  for (let i = 0; i + 1 < out.length; i += 2) if (out[i] === ':path') out[i + 1] = path;
  return out;
}

/** True when every protocol in an `Upgrade` header is h2c (ignorable, RFC 9113 §3.1). */
function isOnlyH2c(upgrade: string): boolean {
  for (const p of upgrade.split(',')) if (p.trim().toLowerCase() !== 'h2c') return false;
  return true;
}

function first(v: string | readonly string[] | undefined): string | undefined {
  return typeof v === 'string' ? v : v?.[0];
}

function metaFields(m: Meta): { group: string; kind: string; name: string } {
  return { group: m.group, kind: m.kind, name: m.name };
}

function tlsLabel(tls: TlsState): string {
  return tls.kind === 'established' ? `mtls ${tls.clientId ?? '-'}` : tls.kind === 'passthrough' ? `passthrough ${tls.sni}` : tls.reason;
}

function grpcStatusOf(d: Deny): number {
  switch (d.kind) {
    case 'http403':
    case 'grpc7':
      return GRPC_PERMISSION_DENIED;
    case 'http404':
    case 'grpc5':
      return GRPC_NOT_FOUND;
    case 'http500':
    case 'tcp-refuse':
      return GRPC_INTERNAL;
  }
}

function isPositiveInt32(ms: number): boolean {
  return Number.isInteger(ms) && ms > 0 && ms <= 0x7fff_ffff;
}

/**
 * The HTTP stack of one inbound proxy. {@link handle} takes over connections; {@link close}
 * destroys what is left (servers, application connections). Invariants: a request reaches the
 * application only with a permit from the port's policy current at the time of the request; it
 * carries no client-sent `l5d-*` header; a denial never closes the connection.
 */
export class InboundHttp {
  readonly #policies: InboundHttpOptions['policies'];
  readonly #appPortOf: (port: number) => number;
  readonly #appHost: string;
  readonly #log: Logger;
  readonly #hooks: InboundMetricsHooks;
  readonly #counter: InboundStatsCounter;
  readonly #upstream: AppUpstream;
  readonly #headersTimeoutMs: number;
  readonly #keepAliveTimeoutMs: number;
  readonly #random: () => number;
  readonly #tap: TapHub | undefined;
  readonly #h1: Http1Server<HttpConn>;
  readonly #h2Conns = new Set<H2Connection>();
  #closed = false;

  /** Builds the servers and the application pools; throws RangeError for a bad setting. */
  constructor(opts: InboundHttpOptions) {
    const headersTimeoutMs = opts.headersTimeoutMs ?? HTTP_HEADERS_TIMEOUT_MS;
    const keepAliveTimeoutMs = opts.keepAliveTimeoutMs ?? HTTP_KEEP_ALIVE_TIMEOUT_MS;
    const checkMs = opts.timeoutCheckIntervalMs ?? Math.min(1000, headersTimeoutMs);
    const maxHeaderBytes = opts.maxHeaderBytes ?? HTTP_MAX_HEADER_BYTES;
    const maxSockets = opts.maxAppSocketsPerPort ?? 256;
    for (const [name, v] of Object.entries({
      headersTimeoutMs,
      keepAliveTimeoutMs,
      timeoutCheckIntervalMs: checkMs,
      maxHeaderBytes,
      maxAppSocketsPerPort: maxSockets,
    })) {
      if (!isPositiveInt32(v)) throw new RangeError(`bad ${name} ${v}`);
    }
    this.#policies = opts.policies;
    this.#appPortOf = opts.appPortOf ?? ((p) => p);
    this.#appHost = opts.appHost;
    this.#log = opts.logger ?? silentLogger();
    this.#hooks = opts.metrics ?? {};
    this.#counter = opts.counter ?? new InboundStatsCounter();
    this.#upstream = new AppUpstream({ maxSocketsPerPort: maxSockets });
    this.#headersTimeoutMs = headersTimeoutMs;
    this.#keepAliveTimeoutMs = keepAliveTimeoutMs;
    this.#random = opts.random ?? Math.random;
    this.#tap = opts.tap;

    // No deadline on whole requests: a long upload or stream is not an attack by itself.
    this.#h1 = new Http1Server<HttpConn>({
      headersTimeoutMs,
      keepAliveTimeoutMs,
      checkIntervalMs: checkMs,
      maxHeaderBytes,
      requireHost: true,
      events: {
        request: (req, res, ctx) => this.#onRequest(req, res, ctx),
        connect: (_req, socket, _head, ctx) => this.#onConnectMethod(socket, ctx),
        clientError: (code, _status, ctx) => this.#onClientError(code, ctx),
        failed: (err, ctx) => this.#log.error({ client: ctx.remote, port: ctx.port, err }, 'inbound HTTP request failed in the proxy'),
      },
    });
  }

  /** Serves one HTTP connection (an {@link InboundHttpHandler}). Never throws. */
  handle(conn: InboundHttpConnection): void {
    const socket = conn.socket;
    if (this.#closed) {
      socket.destroy();
      return;
    }
    const tls = conn.client.tls;
    const ctx: HttpConn = {
      port: conn.port,
      appHost: conn.appHost ?? this.#appHost,
      appPort: this.#appPortOf(conn.port),
      client: conn.client,
      meshedId: tls.kind === 'established' ? tls.clientId : undefined,
      remote: conn.raw.remoteAddress,
    };
    if (conn.version === 'http1') {
      this.#h1.serve(socket, ctx);
      return;
    }
    // HTTP/2 (prior knowledge, detection, ALPN or a transport header): our own framing. A FIN
    // from the client ends the connection gracefully (open streams finish).
    const conn2: H2Connection = new H2Connection(socket, {
      role: 'server',
      headerBlockTimeoutMs: this.#headersTimeoutMs,
      idleTimeoutMs: this.#keepAliveTimeoutMs,
      onStream: (stream, block) => {
        try {
          this.#onStream(stream, block, ctx);
        } catch (err) {
          // A defect of ours must not take the connection (or the process) down: this stream fails.
          this.#log.error({ client: ctx.remote, port: ctx.port, err }, 'inbound HTTP/2 request failed in the proxy');
          stream.events ??= IGNORE_STREAM;
          stream.reset(H2_INTERNAL_ERROR);
        }
      },
      onReady: () => clearTimeout(timer),
      onClose: (code, reason) => {
        clearTimeout(timer);
        this.#h2Conns.delete(conn2);
        if (code === H2_INTERNAL_ERROR) this.#log.error({ client: ctx.remote, port: ctx.port, reason }, 'inbound HTTP/2 connection failed in the proxy');
        else if (reason !== undefined && this.#log.isLevelEnabled('debug'))
          this.#log.debug({ client: ctx.remote, port: ctx.port, code, reason }, 'inbound HTTP/2 connection failed');
      },
    });
    this.#h2Conns.add(conn2);
    // The client's connection preface and first SETTINGS must arrive within the headers deadline.
    const timer = setTimeout(() => {
      this.#error(ctx, 'request headers timeout');
      if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: ctx.remote, port: ctx.port }, 'inbound HTTP/2 connection preface timed out');
      conn2.destroy();
    }, this.#headersTimeoutMs);
    timer.unref();
  }

  /** Stops serving: destroys every HTTP connection and every application connection. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#h1.close();
    for (const c of [...this.#h2Conns]) c.destroy();
    this.#h2Conns.clear();
    this.#upstream.close();
  }

  // -------------------------------------------------------------------------------------------
  // Decisions

  /** Authorizes a request against the port's current policy; counts, logs and reports it. */
  #decide(ctx: HttpConn, req: RequestInfo, grpc: boolean): Decision {
    const policy = this.#policies.current(ctx.port);
    let d: Decision;
    if (policy === undefined) {
      d = { allowed: false, level: 'http', kind: 'http500', server: NO_SERVER, route: undefined, reason: 'no policy for the port' };
    } else if (policy.httpRoutes === undefined && policy.grpcRoutes === undefined) {
      // The port stopped being HTTP (opaque, TLS) while this connection was open: no HTTP routes.
      d =
        policy.invalid !== undefined
          ? { allowed: false, level: 'http', kind: 'http500', server: policy.server.meta, route: undefined, reason: `invalid policy: ${policy.invalid}` }
          : {
              allowed: false,
              level: 'http',
              kind: grpc ? 'grpc5' : 'http404',
              server: policy.server.meta,
              route: undefined,
              reason: 'no route found for request',
            };
    } else {
      d = authorizeRequest(policy, ctx.client, req);
    }
    const port = ctx.port;
    if (d.allowed) {
      this.#counter.httpAuthz('allow', port, d);
      this.#hooks.onHttpAllow?.({ port, client: ctx.client, decision: d, request: req });
      if (d.isAudit) this.#log.info(this.#logFields(ctx, req, d), 'Request allowed');
      else if (this.#log.isLevelEnabled('debug')) this.#log.debug(this.#logFields(ctx, req, d), 'inbound HTTP request allowed');
      return d;
    }
    switch (d.kind) {
      case 'http403':
      case 'grpc7':
        this.#counter.httpAuthz('deny', port, d);
        this.#hooks.onHttpDeny?.({ port, client: ctx.client, decision: d, request: req });
        break;
      case 'http404':
      case 'grpc5':
        this.#counter.httpAuthz('route_not_found', port, d);
        this.#hooks.onHttpRouteNotFound?.({ port, client: ctx.client, decision: d, request: req });
        break;
      case 'http500':
      case 'tcp-refuse':
        this.#error(ctx, policy === undefined ? 'no policy' : 'invalid policy');
        break;
    }
    if (this.#log.isLevelEnabled('info')) this.#log.info(this.#logFields(ctx, req, d), 'Request denied');
    if (this.#tap?.active === true) this.#tap.httpDenied(port, ctx.client, req, d, grpc);
    return d;
  }

  #logFields(ctx: HttpConn, req: RequestInfo, d: Decision): object {
    return {
      client: ctx.remote,
      port: ctx.port,
      tls: tlsLabel(ctx.client.tls),
      server: metaFields(d.server),
      route: d.route === undefined ? undefined : metaFields(d.route),
      authz: d.allowed ? metaFields(d.authz) : undefined,
      method: req.method,
      path: req.path,
      reason: d.allowed ? undefined : d.reason,
      kind: d.allowed ? undefined : d.kind,
    };
  }

  #error(ctx: HttpConn, reason: InboundHttpErrorReason): void {
    this.#counter.httpError(reason);
    this.#hooks.onHttpError?.(reason, ctx.port);
  }

  /** Reports a permitted request (`request_total`); its exchange, when its end is to be reported. */
  #exchange(ctx: HttpConn, d: Permit, req: RequestInfo): HttpExchange | undefined {
    const onRequest = this.#hooks.onHttpRequest;
    const tap = this.#tap?.active === true ? this.#tap : undefined;
    if (onRequest === undefined && tap === undefined) return undefined;
    let recorder = onRequest?.({ port: ctx.port, client: ctx.client, decision: d, request: req });
    if (tap !== undefined) recorder = tap.httpPermitted(ctx.port, ctx.client, req, d, recorder);
    if (recorder === undefined) return undefined;
    const ex = new HttpExchange(recorder);
    ex.isGrpc = isGrpcContentType(req.headers['content-type']);
    return ex;
  }

  /** Runs a permit's route filters; a filter that answers or fails is logged and counted here. */
  #filters(ctx: HttpConn, d: Permit, req: RequestInfo, ex: HttpExchange | undefined): FilterOutcome | undefined {
    const filters = d.filters;
    if (filters === undefined || filters.length === 0) return undefined;
    const grpcRoutes = this.#policies.current(ctx.port)?.grpcRoutes !== undefined;
    const out = runRouteFilters(filters, d.pathMatch, grpcRoutes, { authority: req.authority, path: req.path }, this.#random);
    if (out.kind === 'invalid') {
      this.#error(ctx, 'invalid route filter');
      ex?.fail('invalid route filter');
      if (this.#log.isLevelEnabled('info')) this.#log.info({ ...this.#logFields(ctx, req, d), err: out.reason }, 'inbound HTTP route filter cannot be applied');
    } else if (out.kind === 'respond' && this.#log.isLevelEnabled('debug')) {
      this.#log.debug({ ...this.#logFields(ctx, req, d), filter: out.filter, status: out.response.status }, 'inbound HTTP request answered by a route filter');
    }
    return out;
  }

  // -------------------------------------------------------------------------------------------
  // HTTP/1

  #onRequest(req: Http1ServerRequest, res: Http1ServerResponse, ctx: HttpConn): void {
    // A Transfer-Encoding not ending in chunked never gets here: Http1Server answers it 400.
    const headers = filterHttp1Request(req.rawHeaders);
    const target = splitTarget(req.url);
    const method = req.method;
    // The policy decides on the normalized path and the authority the application will read, and
    // the application gets exactly those (request-target, RFC 9112 §3.2.2).
    const normalized = normalizeRequestTarget(target.path);
    const authority = target.authority;
    const badAuthority = authority !== undefined && !AUTHORITY.test(authority);
    if (!normalized.ok || badAuthority) {
      this.#error(ctx, 'bad request');
      res.keepAlive = false;
      this.#respond1(res, ctx, 400, normalized.ok ? 'invalid authority in the request target' : normalized.reason);
      return;
    }
    let byName = headers.byName;
    let forward = headers.forward;
    if (authority !== undefined) {
      forward = withHost(forward, authority);
      byName = { ...byName, host: authority };
    }
    const path = normalized.target;
    const info: RequestInfo = { method, path, authority: authority ?? first(byName.host), headers: byName };
    const d = this.#decide(ctx, info, false);
    if (!d.allowed) {
      this.#respond1(res, ctx, httpStatusOf(d), d.reason);
      return;
    }
    const ex = this.#exchange(ctx, d, info);
    if (ex !== undefined) {
      res.onClose((finished) => {
        if (!finished) ex.fail('client disconnected');
        ex.end();
      });
    }
    const filtered = this.#filters(ctx, d, info, ex);
    if (filtered !== undefined) {
      if (filtered.kind === 'invalid') {
        this.#respond1(res, ctx, 500, filtered.reason);
        return;
      }
      if (filtered.kind === 'respond') {
        const r = filtered.response;
        ex?.head(r.status, -1);
        this.#respond1(res, ctx, r.status, r.message, r.location);
        return;
      }
      if (filtered.edits.length > 0) forward = editHttp1Headers(forward, filtered.edits);
    }
    if (headers.upgrade !== undefined && !isOnlyH2c(headers.upgrade)) {
      this.#error(ctx, 'upgrade not supported');
      ex?.fail('upgrade not supported');
      this.#respond1(res, ctx, 501, UPGRADE_NOT_SUPPORTED);
      return;
    }
    if (req.expectsContinue) res.writeContinue();
    if (ctx.meshedId !== undefined) forward.push(L5D_CLIENT_ID, ctx.meshedId);
    this.#forward1(req, res, ctx, method, path, forward, ex);
  }

  /** A response of the proxy's own: empty body, the reason for meshed clients only (and a redirect's `location`). */
  #respond1(res: Http1ServerResponse, ctx: HttpConn, status: number, reason: string, location?: string): void {
    if (res.finished || res.destroyed) return;
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const headers = ['content-length', '0'];
    if (location !== undefined) headers.push('location', location);
    if (ctx.meshedId !== undefined) headers.push(L5D_PROXY_ERROR, safeHeaderValue(reason));
    res.writeHead(status, undefined, headers);
    res.end();
  }

  #forward1(
    req: Http1ServerRequest,
    res: Http1ServerResponse,
    ctx: HttpConn,
    method: string,
    path: string,
    headers: readonly string[],
    ex: HttpExchange | undefined,
  ): void {
    relayHttp1(
      this.#upstream.pool1(ctx.appHost, ctx.appPort),
      req,
      res,
      { method, path, headers, closeAfter: req.body !== null && BODY_MAY_BE_IGNORED.has(method) },
      {
        head: (status, h) => ex?.head(status, grpcStatusValue(headerValue(h, 'grpc-status'))),
        trailers: (t) => ex?.trailers(grpcStatusValue(headerValue(t, 'grpc-status'))),
        refused: (reason) => {
          this.#error(ctx, 'bad request');
          ex?.fail('bad request');
          if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: ctx.remote, port: ctx.port, reason }, 'inbound HTTP request cannot be forwarded');
          res.keepAlive = false;
          this.#respond1(res, ctx, 400, reason);
        },
        failed: (err) => {
          this.#error(ctx, 'app unreachable');
          ex?.fail('app unreachable');
          if (this.#log.isLevelEnabled('debug'))
            this.#log.debug({ port: ctx.port, appPort: ctx.appPort, err: err.message }, 'inbound HTTP request to the application failed');
          this.#respond1(res, ctx, 502, APP_UNREACHABLE);
        },
        unrelayable: (err) => {
          this.#error(ctx, 'app unreachable');
          ex?.fail('app unreachable');
          if (this.#log.isLevelEnabled('debug')) this.#log.debug({ port: ctx.port, err: err.message }, 'inbound HTTP response not relayable');
          this.#respond1(res, ctx, 502, APP_UNREACHABLE);
        },
        aborted: () => {
          this.#error(ctx, 'app response aborted');
          ex?.fail('app response aborted');
        },
      },
    );
  }

  #onConnectMethod(socket: Duplex, ctx: HttpConn): void {
    this.#error(ctx, 'upgrade not supported');
    socket.on('error', noop);
    socket.end('HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n', () => socket.destroy());
  }

  /** Parse errors, header limits and deadlines (answered by the server when it can, then closed): counted. */
  #onClientError(code: string, ctx: HttpConn): void {
    let reason: InboundHttpErrorReason | undefined;
    if (code === 'HPE_HEADER_OVERFLOW') reason = 'request headers too large';
    else if (code === 'ERR_HTTP_REQUEST_TIMEOUT') reason = 'request headers timeout';
    else if (code.startsWith('HPE_')) reason = 'bad request';
    if (reason === undefined) return;
    this.#error(ctx, reason);
    if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: ctx.remote, port: ctx.port, err: code }, `inbound HTTP connection closed: ${reason}`);
  }

  // -------------------------------------------------------------------------------------------
  // HTTP/2

  #onStream(stream: H2Stream, block: HeaderBlock, ctx: HttpConn): void {
    // The policy's view: pseudo-headers included, client-sent l5d-* removed, repeats as arrays.
    const pairs = block.pairs;
    const headers: Record<string, string | string[]> = Object.create(null) as Record<string, string | string[]>;
    let l5d = false;
    let origProto: string | undefined;
    let path: string | undefined;
    let authority: string | undefined;
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const name = pairs[i] as string;
      const value = pairs[i + 1] as string;
      if (isL5dHeader(name)) {
        l5d = true;
        if (name === L5D_ORIG_PROTO) origProto = value;
        continue;
      }
      const prev = headers[name];
      if (prev === undefined) headers[name] = value;
      else if (Array.isArray(prev)) prev.push(value);
      else headers[name] = [prev, value];
      if (name === ':path') path = value;
      else if (name === ':authority') authority = value;
    }
    const grpc = isGrpcRequest({ method: stream.method, path: '', headers });
    if (path === undefined) {
      // CONNECT (the only request without :path).
      this.#error(ctx, 'upgrade not supported');
      this.#respond2(stream, ctx, grpc, 501, GRPC_INTERNAL, UPGRADE_NOT_SUPPORTED);
      return;
    }
    // The policy decides on the normalized path, and the application gets that one.
    const normalized = normalizeRequestTarget(path);
    if (!normalized.ok) {
      this.#error(ctx, 'bad request');
      this.#respond2(stream, ctx, grpc, 400, GRPC_INTERNAL, normalized.reason);
      return;
    }
    const rewritten = normalized.target !== path;
    if (rewritten) {
      path = normalized.target;
      headers[':path'] = path;
    }
    const info: RequestInfo = { method: stream.method, path, authority: authority ?? first(headers.host), headers };
    const d = this.#decide(ctx, info, grpc);
    if (!d.allowed) {
      this.#respond2(stream, ctx, grpc, httpStatusOf(d), grpcStatusOf(d), d.reason);
      return;
    }
    const ex = this.#exchange(ctx, d, info);
    try {
      const upgraded = origProto === undefined ? undefined : parseOrigProto(origProto);
      this.#permitted2(stream, ctx, d, info, ex, rewritten ? { ...block, pairs: withPath(block.pairs, path) } : block, headers, l5d, grpc, upgraded);
    } catch (err) {
      // Reported as failed here; the caller resets the stream.
      ex?.fail('proxy error');
      ex?.end();
      throw err;
    }
  }

  /** A permitted request: route filters, then on to the application. */
  #permitted2(
    stream: H2Stream,
    ctx: HttpConn,
    d: Permit,
    info: RequestInfo,
    ex: HttpExchange | undefined,
    block: HeaderBlock,
    headers: Record<string, string | string[]>,
    l5d: boolean,
    grpc: boolean,
    upgraded: OrigProto | undefined,
  ): void {
    const pairs = block.pairs;
    let upstream: readonly string[] = pairs;
    const filtered = this.#filters(ctx, d, info, ex);
    if (filtered !== undefined) {
      if (filtered.kind === 'invalid') {
        ex?.end();
        this.#respond2(stream, ctx, grpc, 500, GRPC_INTERNAL, filtered.reason);
        return;
      }
      if (filtered.kind === 'respond') {
        const r = filtered.response;
        ex?.head(grpc ? 200 : r.status, grpc ? r.grpcStatus : -1);
        ex?.end();
        this.#respond2(stream, ctx, grpc, r.status, r.grpcStatus, r.message, r.location);
        return;
      }
      if (filtered.edits.length > 0) upstream = headerPairs(editHttp2Headers(headers, filtered.edits));
      else if (l5d) upstream = withoutL5d(pairs);
    } else if (l5d) {
      upstream = withoutL5d(pairs);
    }
    if (ctx.meshedId !== undefined) upstream = [...upstream, L5D_CLIENT_ID, ctx.meshedId];
    if (upgraded !== undefined) {
      // An HTTP/1 request a client proxy carried as HTTP/2: HTTP/1 again for the application (inbound/orig-proto).
      const req = http1RequestOf(upstream);
      const closeAfter = !stream.remoteEnded && BODY_MAY_BE_IGNORED.has(req.method);
      new OrigProtoRelay(this.#origProtoHost(ctx), stream, ex).start(this.#upstream.pool1(ctx.appHost, ctx.appPort), { ...req, closeAfter });
      return;
    }
    // Relayed to the application, and its response back (inbound/h2-relay).
    new H2Relay(this.#relayHost(ctx, grpc), stream, upstream, block.sensitive, ex).start();
  }

  /**
   * A response of the proxy's own, ending the stream: `status` with an empty body, or for gRPC a
   * trailers-only 200 with `grpcStatus`. The reason only for meshed clients. A request still
   * sending its body is then reset with NO_ERROR (h2/connection), so its body stops.
   */
  #respond2(stream: H2Stream, ctx: HttpConn, grpc: boolean, status: number, grpcStatus: number, reason: string, location?: string): void {
    if (stream.closed) return;
    if (stream.headersDone) {
      stream.reset(H2_INTERNAL_ERROR);
      return;
    }
    stream.events ??= IGNORE_STREAM;
    const h: string[] = grpc
      ? [':status', '200', 'content-type', 'application/grpc', 'grpc-status', String(grpcStatus)]
      : [':status', String(status), 'content-length', '0'];
    if (location !== undefined && !grpc) h.push('location', location);
    if (ctx.meshedId !== undefined) {
      h.push(L5D_PROXY_ERROR, safeHeaderValue(reason));
      if (grpc) h.push('grpc-message', grpcMessage(reason));
    }
    stream.respond(h, true);
  }

  /** The relay's view of this stack for a connection (one per connection and kind, made once). */
  #relayHost(ctx: HttpConn, grpc: boolean): H2RelayHost {
    const cached = grpc ? ctx.grpcRelayHost : ctx.relayHost;
    if (cached !== undefined) return cached;
    const host: H2RelayHost = {
      open: (relay, endStream) => this.#open2(relay, ctx, grpc, endStream),
      unreachable: (relay, err) => this.#unreachable2(relay.down, ctx, grpc, err),
      aborted: () => this.#error(ctx, 'app response aborted'),
      retried: () => {
        if (this.#log.isLevelEnabled('debug'))
          this.#log.debug({ port: ctx.port, appPort: ctx.appPort }, 'inbound HTTP/2 request refused by the application, sent again');
      },
    };
    if (grpc) ctx.grpcRelayHost = host;
    else ctx.relayHost = host;
    return host;
  }

  /** What downgraded requests of a connection need of the stack (made once per connection). */
  #origProtoHost(ctx: HttpConn): OrigProtoHost {
    if (ctx.origProtoHost !== undefined) return ctx.origProtoHost;
    const host: OrigProtoHost = {
      refused: (relay, reason) => {
        this.#error(ctx, 'bad request');
        if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: ctx.remote, port: ctx.port, reason }, 'inbound HTTP request cannot be forwarded');
        this.#respond2(relay.down, ctx, false, 400, GRPC_INTERNAL, reason);
      },
      unreachable: (relay, err) => this.#unreachable2(relay.down, ctx, false, err),
      aborted: () => this.#error(ctx, 'app response aborted'),
    };
    ctx.origProtoHost = host;
    return host;
  }

  /** A stream to the application for `relay`'s request; undefined when it failed (answered 502 / UNAVAILABLE then). */
  #open2(relay: H2Relay, ctx: HttpConn, grpc: boolean, endStream: boolean): H2Stream | undefined {
    const { down, ex } = relay;
    let up: H2Stream | undefined;
    let err = 'the proxy is closing, or too many requests wait for the application';
    try {
      up = this.#upstream.request2(ctx.appHost, ctx.appPort, relay.pairs, endStream, relay.sensitive);
    } catch (e) {
      // net.connect refusing the address, say.
      err = (e as Error).message;
    }
    if (up !== undefined && !up.closed) return up;
    // Closed already: the connection failed while the headers were being sent.
    ex?.fail('app unreachable');
    ex?.end();
    this.#unreachable2(down, ctx, grpc, up === undefined ? err : 'connection failed');
    return undefined;
  }

  #unreachable2(stream: H2Stream, ctx: HttpConn, grpc: boolean, err: string): void {
    this.#error(ctx, 'app unreachable');
    if (this.#log.isLevelEnabled('debug')) {
      this.#log.debug({ port: ctx.port, appPort: ctx.appPort, err }, 'inbound HTTP/2 request to the application failed');
    }
    this.#respond2(stream, ctx, grpc, 502, GRPC_UNAVAILABLE, APP_UNREACHABLE);
  }
}
