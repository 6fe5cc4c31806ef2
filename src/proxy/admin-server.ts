/**
 * The proxy's admin server (upstream port 4191): `/live`, `/ready`, `/metrics` (Prometheus text),
 * `/debug/policies` (JSON) and `/tap` (NDJSON of live request events, tap/tap-hub).
 *
 * `/tap` reveals every request's path, authority and client identity, so the port-4191 policy is
 * not enough for it (a permissive default admits any pod, even over plaintext): as upstream's
 * proxy does with `LINKERD2_PROXY_TAP_SVC_NAME`, it is served only over mesh TLS to the one
 * client identity `tapIdentity` names, after the policy admitted the request; anyone else gets
 * 403, and without `tapIdentity` tap is disabled (403 for everyone).
 *
 * Policy (POLICY-SEMANTICS §4.1): the admin port is not behind the inbound listeners; the admin
 * server applies the inbound HTTP policy of port 4191 itself. Every request — probes included —
 * is authorized with `authorizeRequest` against the port's current policy, like any inbound HTTP
 * request: no route → 404, no authorization → 403, an invalid policy → 500, an opaque/TLS policy
 * → the connection decision (a denial closes the connection). The probes get through where the
 * controller's policy admits them (its automatic probe route for `/live` and `/ready` on the
 * injected proxy container, §3.6) and the proxy-added `default:localhost` admits loopback.
 *
 * Until the controller has answered for port 4191, {@link ADMIN_FALLBACK_SERVER} applies: the
 * `deny` default with the probe route, i.e. `GET /live` and `GET /ready` from anywhere, anything
 * else from localhost only. (Upstream uses the pod's default policy from its environment until the
 * controller answers, §2.3; `deny` is the strictest value that still lets the kubelet see the
 * proxy live and not ready.)
 *
 * Mesh TLS (§4.3), as on any inbound port: with the proxy's `identity` and `tls` settings, the
 * first bytes of a connection are sniffed for a ClientHello. SNI equal to the proxy's identity →
 * mesh TLS is terminated (client certificate required and verified) and requests are authorized
 * as `Established(client id = first SAN)`, so identity-based authorizations admit meshed scrapers;
 * no TLS → plaintext, `None(no_tls_from_remote)` (kubelet probes, unmeshed scrapers); TLS for
 * another name, without SNI or malformed → closed (there is nothing to pass it through to).
 * Within plaintext or mesh TLS the stream is HTTP/1.1, or HTTP/2 when it opens with the HTTP/2
 * preface (or ALPN `h2`). Without `identity` and `tls` the server speaks plaintext only.
 *
 * Meshed clients of ward's outbound reach 4191 through the mesh port, with a transport header
 * naming port 4191: the inbound proxy hands such HTTP streams here ({@link AdminServer.handleHttp},
 * wired by main) with the client identity it verified, and they are served exactly like
 * connections accepted here.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { IncomingHttpHeaders as Http2Headers, Http2Server, Http2ServerRequest, Http2ServerResponse, Http2Session } from 'node:http2';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { createServer as createTlsServer, type TLSSocket, type Server as TlsServer } from 'node:tls';
import {
  ALL_NETWORKS,
  authorizeRequest,
  type ClientInfo,
  type CompiledServer,
  type CompileServerOptions,
  compileServer,
  DEFAULT_HTTP_ROUTE,
  DETECT_TIMEOUT_MS,
  defaultMeta,
  formatIp,
  httpStatusOf,
  type InboundServer,
  parseIp,
  probeRoute,
  type RequestInfo,
  type TlsState,
} from '../core/index.js';
import { errorMessage, type Logger, MeshError, silentLogger } from '../shared/index.js';
import type { InboundHttpConnection } from './inbound/http-connection.js';
import type { MetricsRegistry } from './metrics/cells.js';
import type { InboundMetricsHooks } from './metrics/inbound-stats.js';
import { serveTap, type TapResponse } from './tap/tap-http.js';
import type { TapHub } from './tap/tap-hub.js';
import { clientIdentityOf, type InboundTlsSettings } from './tls/context.js';
import { CLIENT_HELLO_MAX_PREFIX_BYTES, sniffClientHello } from './transport/client-hello.js';
import { HTTP2_PREFACE } from './transport/detect-http.js';
import { type PrefixRead, readPrefix } from './transport/prefix-reader.js';

/** The admin port's number in policies (`PortSpec.port`), whatever port the admin server binds. */
export const ADMIN_POLICY_PORT = 4191;

/** The probe paths of the injected proxy container (its readiness and liveness probes). */
export const ADMIN_PROBE_PATHS: readonly string[] = ['/live', '/ready'];

/**
 * The admin port's policy until the controller answers: default `deny` with the default route and
 * the probe route (`GET /live`, `GET /ready` from every network), as the controller computes it
 * for a `deny` pod (§3.4, §3.6). The proxy adds `default:localhost` as to every policy.
 */
export const ADMIN_FALLBACK_SERVER: InboundServer = {
  meta: defaultMeta('deny'),
  protocol: {
    kind: 'detect',
    timeoutMs: DETECT_TIMEOUT_MS,
    httpRoutes: [DEFAULT_HTTP_ROUTE, probeRoute(ADMIN_PROBE_PATHS, ALL_NETWORKS)],
  },
  authorizations: [],
};

/** Options of {@link AdminServer}. */
export interface AdminServerOptions {
  readonly host: string;
  /** 0 = any free port. */
  readonly port: number;
  /** The policy source; the admin server reads the policy of {@link ADMIN_POLICY_PORT} for every request. */
  readonly policies: { current(port: number): CompiledServer | undefined };
  /** `/ready`: 200 when true, 503 otherwise. */
  readonly isReady: () => boolean;
  /** `/metrics` serves this registry. */
  readonly registry: MetricsRegistry;
  /** `/debug/policies` serves this value as JSON. */
  readonly debugPolicies: () => unknown;
  /** `/tap` streams this hub's events (404 without one). */
  readonly tap?: TapHub;
  /** The only mesh identity `/tap` answers (the controller's); without it `/tap` is refused to everyone. */
  readonly tapIdentity?: string;
  /** This proxy's mesh identity: mesh TLS whose SNI names it is terminated (needs `tls`). */
  readonly identity?: string;
  /** The mesh TLS settings (as the inbound proxy's); read once, at `start()`. Without them (or `identity`): plaintext only. */
  readonly tls?: InboundTlsSettings;
  /** Deadline for the ClientHello, the mesh TLS handshake and the HTTP/2 preface (default 10 s, §4.3). */
  readonly detectTimeoutMs?: number;
  /** Decision hooks (the same counters as the inbound proxy's, with port 4191). */
  readonly metrics?: InboundMetricsHooks;
  readonly logger?: Logger;
  /** How the fallback policy is compiled (as the watched policies are). */
  readonly compile?: CompileServerOptions;
}

/** An HTTP stream the admin server serves: plaintext or mesh-TLS-terminated, paused, nothing read past detection. */
export type AdminHttpConnection = Pick<InboundHttpConnection, 'socket' | 'client' | 'version'>;

type Request = IncomingMessage | Http2ServerRequest;
/** What the admin server uses of a response, HTTP/1 or HTTP/2 (their `writeHead` overloads do not unite). */
interface Response {
  writeHead(status: number, headers: Record<string, string>): { end(body: string): unknown };
  end(body: string): unknown;
}

/** What the first bytes of a connection are. */
type Sniffed = { readonly kind: 'plain'; readonly version: 'http1' | 'http2' } | { readonly kind: 'tls'; readonly sni: string | undefined };

const NO_TLS: TlsState = Object.freeze({ kind: 'none', reason: 'no_tls_from_remote' });
const TEXT = 'text/plain; charset=utf-8';
const H2_PREFACE = Buffer.from(HTTP2_PREFACE, 'latin1');
const HTTP1: Sniffed = Object.freeze({ kind: 'plain', version: 'http1' });
const HTTP2: Sniffed = Object.freeze({ kind: 'plain', version: 'http2' });

/** HTTP/2 when the bytes open with the connection preface, HTTP/1 as soon as they cannot. Prefix-stable. */
function decideVersion(buf: Buffer): Sniffed | 'need-more' {
  const n = Math.min(buf.length, H2_PREFACE.length);
  if (buf.compare(H2_PREFACE, 0, n, 0, n) !== 0) return HTTP1;
  return n === H2_PREFACE.length ? HTTP2 : 'need-more';
}

/** Mesh TLS or not (§4.3); then, for plaintext, the HTTP version. */
function decideFirstBytes(buf: Buffer): Sniffed | 'need-more' {
  const hello = sniffClientHello(buf);
  switch (hello.kind) {
    case 'need-more':
      return 'need-more';
    case 'hello':
      return { kind: 'tls', sni: hello.sni };
    case 'malformed':
      return { kind: 'tls', sni: undefined };
    case 'not-tls':
      return decideVersion(buf);
  }
}

function noop(): void {}

/** The 4-tuple of a TCP connection, readable on both the accepted and the TLS socket. */
function connectionKey(s: Socket): string {
  return `${s.remoteAddress}|${s.remotePort}|${s.localAddress}|${s.localPort}`;
}

function describeTls(tls: TlsState): string {
  return tls.kind === 'established' ? `mtls ${tls.clientId ?? '-'}` : tls.kind === 'passthrough' ? `passthrough ${tls.sni}` : tls.reason;
}

/**
 * The admin server of one proxy. `start()` binds it; `close()` closes it and every connection.
 * Invariant: no admin endpoint answers a request the port-4191 policy (or, before the first one,
 * the fallback) does not permit, judged with the client's address and TLS state (its verified
 * mesh identity when mesh TLS was terminated).
 */
export class AdminServer {
  readonly #opts: AdminServerOptions;
  readonly #log: Logger;
  readonly #hooks: InboundMetricsHooks;
  readonly #identity: string | undefined;
  readonly #detectTimeoutMs: number;
  readonly #listener: NetServer;
  /** HTTP/1 and HTTP/2 servers that never listen: connections are fed to them once classified. */
  readonly #h1: Server;
  /** Made on the first HTTP/2 connection: node:http2 is loaded only by a proxy that is scraped over HTTP/2. */
  #h2: Http2Server | undefined;
  #tlsServer: TlsServer | undefined;
  readonly #fallback: CompiledServer;
  /** Client of each HTTP/1 stream (the accepted or the TLS socket) and each HTTP/2 session. */
  readonly #clients = new WeakMap<Socket | Http2Session, ClientInfo>();
  /** The client of the HTTP/2 connection being handed to the server (its session is made synchronously). */
  #nextSessionClient: ClientInfo | undefined;
  /** Open streams (the accepted socket, or the TLS socket over it once terminated): destroyed on close. */
  readonly #streams = new Set<Socket>();
  /** Accepted sockets in the mesh TLS handshake, by 4-tuple: `secureConnection` only gives the TLS socket. */
  readonly #handshakes = new Map<string, Socket>();
  readonly #sessions = new Set<Http2Session>();
  #port: number | undefined;
  #closed = false;

  /** Builds the server; nothing is bound before `start()`. Throws RangeError for a bad `detectTimeoutMs`. */
  constructor(opts: AdminServerOptions) {
    const detectTimeoutMs = opts.detectTimeoutMs ?? DETECT_TIMEOUT_MS;
    if (!(detectTimeoutMs > 0 && detectTimeoutMs <= 0x7fff_ffff)) throw new RangeError(`bad detectTimeoutMs ${detectTimeoutMs}`);
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger();
    this.#hooks = opts.metrics ?? {};
    // SNI host names compare case-insensitively (RFC 6066 §3).
    this.#identity = opts.tls !== undefined ? opts.identity?.toLowerCase() : undefined;
    this.#detectTimeoutMs = detectTimeoutMs;
    this.#fallback = compileServer(ADMIN_FALLBACK_SERVER, opts.compile);
    this.#h1 = createServer({
      headersTimeout: 10_000,
      requestTimeout: 30_000,
      keepAliveTimeout: 5_000,
      maxHeaderSize: 16 * 1024,
      insecureHTTPParser: false,
    });
    this.#h1.on('request', (req: IncomingMessage, res: ServerResponse) => this.#onRequest(req, res));
    // Header and request deadlines are enforced by a check node starts only for a listening
    // server; this one never listens (streams are fed to it), so start it by hand (unref'd,
    // stopped by close()).
    this.#h1.emit('listening');
    this.#listener = createNetServer({ pauseOnConnect: true, noDelay: true }, (raw) => this.#accept(raw));
  }

  /** The bound port once started. */
  get port(): number | undefined {
    return this.#port;
  }

  /**
   * Builds the mesh TLS server (with `identity` and `tls`) and binds host:port; rejects with
   * `MeshError` `ERR_ADMIN_LISTEN` (the server is then closed).
   */
  async start(): Promise<number> {
    const { host, port } = this.#opts;
    try {
      if (this.#identity !== undefined && this.#opts.tls !== undefined) {
        const tlsServer = createTlsServer({ ...this.#opts.tls.serverOptions(), handshakeTimeout: this.#detectTimeoutMs });
        tlsServer.on('secureConnection', (t: TLSSocket) => this.#onSecureConnection(t));
        tlsServer.on('tlsClientError', (err: Error, t: TLSSocket) => {
          if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: t.remoteAddress, err: err.message }, 'admin mesh TLS handshake failed');
          t.destroy();
        });
        this.#tlsServer = tlsServer;
      }
      await new Promise<void>((resolve, reject) => {
        this.#listener.once('error', reject);
        this.#listener.listen({ host, port }, () => {
          this.#listener.off('error', reject);
          resolve();
        });
      });
    } catch (e) {
      await this.close();
      throw new MeshError('ERR_ADMIN_LISTEN', `admin server cannot listen on ${host}:${port}: ${errorMessage(e)}`, { cause: e });
    }
    this.#listener.on('error', (err) => this.#log.error({ err: err.message }, 'admin listener failed'));
    this.#port = (this.#listener.address() as AddressInfo).port;
    return this.#port;
  }

  /**
   * Serves an HTTP stream classified elsewhere — the inbound proxy's for a transport header naming
   * port 4191 — as if accepted here: every request is authorized with `conn.client`. Never throws.
   */
  handleHttp(conn: AdminHttpConnection): void {
    if (this.#closed) {
      conn.socket.destroy();
      return;
    }
    this.#track(conn.socket);
    this.#serveHttp(conn.socket, conn.client, conn.version);
  }

  /** Stops listening and closes every connection. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const closed = new Promise<void>((resolve) => {
      if (!this.#listener.listening) resolve();
      else this.#listener.close(() => resolve());
    });
    // Not listening: close() only stops the deadline check (and reports that it was not running).
    this.#h1.close(noop);
    this.#h1.closeAllConnections();
    for (const s of [...this.#sessions]) s.destroy();
    for (const s of [...this.#streams]) s.destroy();
    await closed;
  }

  #track(stream: Socket): void {
    stream.on('error', noop);
    this.#streams.add(stream);
    stream.once('close', () => this.#streams.delete(stream));
  }

  #accept(raw: Socket): void {
    raw.on('error', noop);
    const ip = raw.remoteAddress === undefined ? undefined : parseIp(raw.remoteAddress);
    if (ip === undefined || this.#closed) {
      raw.destroy();
      return;
    }
    this.#track(raw);
    void readPrefix(raw, decideFirstBytes, { timeoutMs: this.#detectTimeoutMs, maxBytes: CLIENT_HELLO_MAX_PREFIX_BYTES }).then(
      (r) => this.#onFirstBytes(raw, { ip, tls: NO_TLS }, r),
      (e: unknown) => {
        this.#log.error({ client: raw.remoteAddress, err: errorMessage(e) }, 'admin detection failed');
        raw.destroy();
      },
    );
  }

  #onFirstBytes(raw: Socket, plain: ClientInfo, r: PrefixRead<Sniffed>): void {
    if (this.#closed || raw.destroyed || !('result' in r)) {
      // Closed, nothing decisive within the deadline, or (impossible at this bound) too long.
      if (this.#log.isLevelEnabled('debug') && 'timeout' in r) this.#log.debug({ client: raw.remoteAddress }, 'admin connection closed: detection timeout');
      raw.destroy();
      return;
    }
    const s = r.result;
    if (s.kind === 'plain') {
      this.#serveHttp(raw, plain, s.version);
      return;
    }
    const sni = s.sni;
    if (this.#tlsServer === undefined || sni === undefined || sni.length !== this.#identity?.length || sni.toLowerCase() !== this.#identity) {
      if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: raw.remoteAddress, sni }, 'admin connection closed: TLS not for this proxy');
      raw.destroy();
      return;
    }
    const key = connectionKey(raw);
    this.#handshakes.set(key, raw);
    raw.once('close', () => this.#handshakes.delete(key));
    // Through the server, not a bare TLSSocket: only a server's sockets enforce rejectUnauthorized.
    this.#tlsServer.emit('connection', raw);
  }

  #onSecureConnection(t: TLSSocket): void {
    const key = connectionKey(t);
    const raw = this.#handshakes.get(key);
    this.#handshakes.delete(key);
    const ip = t.remoteAddress === undefined ? undefined : parseIp(t.remoteAddress);
    if (this.#closed || raw === undefined || ip === undefined) {
      t.destroy();
      return;
    }
    // Once terminated, the TLS socket is the stream: destroying it closes the TCP socket under it,
    // and destroying both in one tick crashes Node 20 (see inbound/proxy).
    this.#streams.delete(raw);
    this.#track(t);
    // Read once, now: later the peer certificate may no longer be available (tls/context).
    const client: ClientInfo = { ip, tls: { kind: 'established', clientId: clientIdentityOf(t) } };
    if (t.alpnProtocol === 'h2') {
      this.#serveHttp(t, client, 'http2');
      return;
    }
    if (t.alpnProtocol !== false && t.alpnProtocol !== 'http/1.1') {
      // A transport header (or anything else) is not for the admin port.
      if (this.#log.isLevelEnabled('debug')) this.#log.debug({ client: t.remoteAddress, alpn: t.alpnProtocol }, 'admin connection closed: unsupported ALPN');
      t.destroy();
      return;
    }
    // No ALPN: peer proxies may still speak HTTP/2 with prior knowledge.
    void readPrefix(t, decideVersion, { timeoutMs: this.#detectTimeoutMs, maxBytes: H2_PREFACE.length }).then(
      (r) => {
        if (this.#closed || t.destroyed || !('result' in r) || r.result.kind !== 'plain') t.destroy();
        else this.#serveHttp(t, client, r.result.version);
      },
      (e: unknown) => {
        this.#log.error({ client: t.remoteAddress, err: errorMessage(e) }, 'admin detection failed');
        t.destroy();
      },
    );
  }

  #http2Server(): Http2Server {
    if (this.#h2 !== undefined) return this.#h2;
    const h2 = (process.getBuiltinModule('node:http2') as typeof import('node:http2')).createServer();
    h2.on('session', (session: Http2Session) => {
      const client = this.#nextSessionClient;
      this.#nextSessionClient = undefined;
      if (client === undefined) {
        session.destroy();
        return;
      }
      this.#clients.set(session, client);
      this.#sessions.add(session);
      session.on('error', noop);
      session.once('close', () => this.#sessions.delete(session));
    });
    h2.on('request', (req: Http2ServerRequest, res: Http2ServerResponse) => this.#onRequest(req, res));
    this.#h2 = h2;
    return h2;
  }

  /** Hands a paused stream (bytes read for detection put back) to the HTTP/1 or HTTP/2 server. */
  #serveHttp(stream: Socket, client: ClientInfo, version: 'http1' | 'http2'): void {
    if (version === 'http2') {
      this.#nextSessionClient = client;
      this.#http2Server().emit('connection', stream);
      this.#nextSessionClient = undefined;
      return;
    }
    this.#clients.set(stream, client);
    this.#h1.emit('connection', stream);
    stream.resume();
  }

  #clientOf(req: Request): ClientInfo | undefined {
    return 'stream' in req ? this.#clients.get(req.stream.session as Http2Session) : this.#clients.get(req.socket);
  }

  /** Closes the connection a request came on. */
  #drop(req: Request): void {
    if ('stream' in req) req.stream.session?.destroy();
    else req.socket.destroy();
  }

  #onRequest(req: Request, res: Response): void {
    const client = this.#clientOf(req);
    if (client === undefined) {
      this.#drop(req);
      return;
    }
    const path = req.url ?? '/';
    const authority = 'stream' in req ? ((req.headers as Http2Headers)[':authority'] ?? req.headers.host) : req.headers.host;
    const request: RequestInfo = { method: req.method ?? 'GET', path, authority, headers: req.headers };
    const policy = this.#opts.policies.current(ADMIN_POLICY_PORT) ?? this.#fallback;
    const d = authorizeRequest(policy, client, request);
    const port = ADMIN_POLICY_PORT;
    if (!d.allowed) {
      switch (d.kind) {
        case 'http403':
        case 'grpc7':
          this.#hooks.onHttpDeny?.({ port, client, decision: d, request });
          break;
        case 'http404':
        case 'grpc5':
          this.#hooks.onHttpRouteNotFound?.({ port, client, decision: d, request });
          break;
        case 'http500':
          this.#hooks.onHttpError?.('invalid policy', port);
          break;
        case 'tcp-refuse':
          this.#hooks.onTcpDeny?.({ port, client, decision: d });
          break;
      }
      if (this.#log.isLevelEnabled('info')) {
        this.#log.info(
          {
            client: formatIp(client.ip),
            port,
            server: `${d.server.kind}:${d.server.name}`,
            tls: describeTls(client.tls),
            method: request.method,
            path,
            reason: d.reason,
          },
          'admin request denied',
        );
      }
      if (d.kind === 'tcp-refuse') {
        this.#drop(req);
        return;
      }
      res.writeHead(httpStatusOf(d), { 'content-length': '0' }).end('');
      return;
    }
    if (d.level === 'http') this.#hooks.onHttpAllow?.({ port, client, decision: d, request });
    else this.#hooks.onTcpAllow?.({ port, client, decision: d });
    this.#serve(req, res, path, client);
  }

  /** Why `client` may not tap, or undefined when it may (its verified mesh identity is the tap identity). */
  #tapRefusal(client: ClientInfo): string | undefined {
    const want = this.#opts.tapIdentity;
    if (want === undefined) return 'tap disabled: this proxy has no tap identity (LINKERD2_PROXY_TAP_SVC_NAME / --tap-identity)';
    if (client.tls.kind !== 'established' || client.tls.clientId === undefined) return 'tap needs mesh TLS as the tap identity';
    if (client.tls.clientId !== want) return 'tap is served to the tap identity only';
    return undefined;
  }

  #serve(req: Request, res: Response, target: string, client: ClientInfo): void {
    const q = target.indexOf('?');
    const path = q === -1 ? target : target.slice(0, q);
    if (path === '/tap' && this.#opts.tap !== undefined && req.method === 'GET') {
      const refusal = this.#tapRefusal(client);
      if (refusal !== undefined) {
        if (this.#log.isLevelEnabled('info'))
          this.#log.info(
            { client: formatIp(client.ip), port: ADMIN_POLICY_PORT, tls: describeTls(client.tls), method: req.method, path, reason: refusal },
            'admin request denied',
          );
        res.writeHead(403, { 'content-type': TEXT }).end(`${refusal}\n`);
        return;
      }
      serveTap(this.#opts.tap, new URL(target, 'http://admin.invalid'), res as unknown as TapResponse);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': TEXT }).end('method not allowed\n');
      return;
    }
    switch (path) {
      case '/live':
        res.writeHead(200, { 'content-type': TEXT }).end('live\n');
        return;
      case '/ready': {
        const ready = this.#opts.isReady();
        res.writeHead(ready ? 200 : 503, { 'content-type': TEXT }).end(ready ? 'ready\n' : 'not ready\n');
        return;
      }
      case '/metrics':
        this.#opts.registry.metrics().then(
          (text) => res.writeHead(200, { 'content-type': this.#opts.registry.contentType }).end(text),
          (e: unknown) => {
            this.#log.error({ err: errorMessage(e) }, 'collecting metrics failed');
            res.writeHead(500, { 'content-type': TEXT }).end('collecting metrics failed\n');
          },
        );
        return;
      case '/debug/policies': {
        let body: string;
        try {
          body = `${JSON.stringify(this.#opts.debugPolicies(), null, 2)}\n`;
        } catch (e) {
          this.#log.error({ err: errorMessage(e) }, 'rendering /debug/policies failed');
          res.writeHead(500, { 'content-type': TEXT }).end('rendering failed\n');
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end(body);
        return;
      }
      default:
        res.writeHead(404, { 'content-type': TEXT }).end('not found\n');
    }
  }
}
