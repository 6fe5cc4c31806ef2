/**
 * The proxy's admin server (upstream port 4191): `/live`, `/ready`, `/metrics` (Prometheus text)
 * and `/debug/policies` (JSON).
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
 * The admin server speaks plaintext HTTP/1.1 only: clients are `None(no_tls_from_remote)`, so a
 * 4191 policy that requires mesh identities admits nobody but localhost.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
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
  type InboundServer,
  parseIp,
  probeRoute,
  type RequestInfo,
  type TlsState,
} from '../core/index.js';
import { errorMessage, type Logger, MeshError, silentLogger } from '../shared/index.js';
import { httpStatusOf } from './inbound-http.js';
import type { InboundMetricsHooks } from './inbound-stats.js';
import type { MetricsRegistry } from './metric-cells.js';

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
  /** Decision hooks (the same counters as the inbound proxy's, with port 4191). */
  readonly metrics?: InboundMetricsHooks;
  readonly logger?: Logger;
  /** How the fallback policy is compiled (as the watched policies are). */
  readonly compile?: CompileServerOptions;
}

const NO_TLS: TlsState = Object.freeze({ kind: 'none', reason: 'no_tls_from_remote' });
const TEXT = 'text/plain; charset=utf-8';

/**
 * The admin HTTP server of one proxy. `start()` binds it; `close()` closes it and every connection.
 * Invariant: no admin endpoint answers a request the port-4191 policy (or, before the first one,
 * the fallback) does not permit.
 */
export class AdminServer {
  readonly #opts: AdminServerOptions;
  readonly #log: Logger;
  readonly #hooks: InboundMetricsHooks;
  readonly #server: Server;
  readonly #fallback: CompiledServer;
  readonly #clients = new WeakMap<Socket, ClientInfo>();
  #port: number | undefined;
  #closed = false;

  /** Builds the server; nothing is bound before `start()`. */
  constructor(opts: AdminServerOptions) {
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger();
    this.#hooks = opts.metrics ?? {};
    this.#fallback = compileServer(ADMIN_FALLBACK_SERVER, opts.compile);
    this.#server = createServer({
      headersTimeout: 10_000,
      requestTimeout: 30_000,
      keepAliveTimeout: 5_000,
      maxHeaderSize: 16 * 1024,
      insecureHTTPParser: false,
    });
    this.#server.on('connection', (socket: Socket) => {
      const ip = socket.remoteAddress === undefined ? undefined : parseIp(socket.remoteAddress);
      if (ip === undefined) socket.destroy();
      else this.#clients.set(socket, { ip, tls: NO_TLS });
    });
    this.#server.on('request', (req: IncomingMessage, res: ServerResponse) => this.#onRequest(req, res));
  }

  /** The bound port once started. */
  get port(): number | undefined {
    return this.#port;
  }

  /** Binds host:port; rejects with `MeshError` `ERR_ADMIN_LISTEN` (the server is then closed). */
  async start(): Promise<number> {
    const { host, port } = this.#opts;
    try {
      await new Promise<void>((resolve, reject) => {
        this.#server.once('error', reject);
        this.#server.listen({ host, port }, () => {
          this.#server.off('error', reject);
          resolve();
        });
      });
    } catch (e) {
      await this.close();
      throw new MeshError('ERR_ADMIN_LISTEN', `admin server cannot listen on ${host}:${port}: ${errorMessage(e)}`, { cause: e });
    }
    this.#server.on('error', (err) => this.#log.error({ err: err.message }, 'admin listener failed'));
    this.#port = (this.#server.address() as AddressInfo).port;
    return this.#port;
  }

  /** Stops listening and closes every connection. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const closed = new Promise<void>((resolve) => {
      if (!this.#server.listening) resolve();
      else this.#server.close(() => resolve());
    });
    this.#server.closeAllConnections();
    await closed;
  }

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    const client = this.#clients.get(req.socket);
    if (client === undefined) {
      req.socket.destroy();
      return;
    }
    const path = req.url ?? '/';
    const request: RequestInfo = { method: req.method ?? 'GET', path, authority: req.headers.host, headers: req.headers };
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
          { client: req.socket.remoteAddress, port, server: `${d.server.kind}:${d.server.name}`, method: request.method, path, reason: d.reason },
          'admin request denied',
        );
      }
      if (d.kind === 'tcp-refuse') {
        req.socket.destroy();
        return;
      }
      res.writeHead(httpStatusOf(d), { 'content-length': '0' }).end();
      return;
    }
    if (d.level === 'http') this.#hooks.onHttpAllow?.({ port, client, decision: d, request });
    else this.#hooks.onTcpAllow?.({ port, client, decision: d });
    this.#serve(req, res, path);
  }

  #serve(req: IncomingMessage, res: ServerResponse, target: string): void {
    const q = target.indexOf('?');
    const path = q === -1 ? target : target.slice(0, q);
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
