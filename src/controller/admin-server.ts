/**
 * The admin HTTP server: a thin node:http shell around `handleAdminRequest`.
 *
 * Who may ask what: /live, /ready and /metrics answer anyone (kubelet probes, Prometheus); every
 * other path — the JSON API, tap and the other streams, the dashboard — answers only a caller
 * whose TCP peer is loopback, unless started with `apiFrom: 'any'`. In Kubernetes the port is on
 * the controller's ClusterIP Service for the probes and the scraper, and the controller taps every
 * proxy with its own mesh identity, which the pods' policies admit: served to any pod, tap would
 * let that pod read every workload's requests past the policy on its 4191. `kubectl port-forward`
 * connects from the pod's own loopback, so it still reaches the API. Nothing else can: the
 * control-plane namespace is never injected (`ward install` labels it so), so no sidecar sits in
 * the controller's pod to relay other pods' traffic from loopback.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isLoopbackAddress, isLoopbackHostHeader, type Logger } from '../shared/index.js';
import { ADMIN_MAX_BODY_BYTES, type AdminState, apiError, handleAdminRequest } from './admin-api.js';

/** A listening admin server. */
export interface AdminServer {
  readonly port: number;
  close(): Promise<void>;
}

/**
 * A route that answers on the raw request and response (streams such as tap, static files of the
 * dashboard): tried before the JSON API, by path prefix.
 */
export interface AdminStreamRoute {
  /** Paths this route answers: exactly `prefix`, or below it when it ends with `/`. */
  readonly prefix: string;
  handle(req: IncomingMessage, res: ServerResponse, url: URL): void;
}

/** Who the JSON API, the streams and the dashboard answer: loopback peers only, or anyone. */
export type AdminApiFrom = 'loopback' | 'any';

/** Settings of {@link startAdminServer}. */
export interface AdminServerOptions {
  /** Default `loopback`. `any` serves tap and the JSON API to every peer that reaches the port. */
  readonly apiFrom?: AdminApiFrom;
  /** Named in the refusal's port-forward hint (default `<control-plane-namespace>`). */
  readonly controlPlaneNamespace?: string;
}

/** The paths every peer may read: probes and the scraper. Compared after the same parse the routers use. */
const PUBLIC_PATHS: ReadonlySet<string> = new Set(['/live', '/ready', '/metrics']);

/** Whether `address` (a socket's `remoteAddress`; undefined once the socket is gone) is loopback. */
export function isLoopbackPeer(address: string | undefined): boolean {
  return isLoopbackAddress(address);
}

/**
 * Whether the request's path is one every peer may read. The path is parsed exactly as
 * `handleAdminRequest` and the stream routes parse it (WHATWG URL: dot segments resolved, percent
 * escapes kept, `//host/…` read as an authority), so a path that passes here is the path that is
 * answered; anything unparsable is not public.
 */
export function isPublicAdminPath(rawUrl: string): boolean {
  let url: URL;
  try {
    url = new URL(rawUrl, 'http://controller.invalid');
  } catch {
    return false;
  }
  return PUBLIC_PATHS.has(url.pathname.replace(/\/+$/, '') || '/');
}

function refuse(res: ServerResponse, namespace: string, port: number): void {
  const r = apiError(
    403,
    'FORBIDDEN',
    'the controller serves its API, tap and dashboard only to loopback peers; ' +
      `reach it with \`kubectl port-forward -n ${namespace} deploy/ward-controller ${port}:${port}\`, ` +
      `then pass \`--controller http://127.0.0.1:${port}\` (or run \`ward dashboard --controller http://127.0.0.1:${port}\`)`,
  );
  res.writeHead(r.status, { 'content-type': r.contentType, 'cache-control': 'no-store', connection: 'close' });
  res.end(r.body);
}

function refuseHost(res: ServerResponse, host: string, port: number): void {
  const r = apiError(
    403,
    'FORBIDDEN',
    `Host ${JSON.stringify(host)} does not name this machine's loopback: the API, tap and dashboard answer only ` +
      `http://127.0.0.1:${port}, http://localhost:${port} or http://[::1]:${port} (a web page that points its own name at 127.0.0.1 must not read them)`,
  );
  res.writeHead(r.status, { 'content-type': r.contentType, 'cache-control': 'no-store', connection: 'close' });
  res.end(r.body);
}

function streamRouteOf(routes: readonly AdminStreamRoute[], rawUrl: string): { route: AdminStreamRoute; url: URL } | undefined {
  if (routes.length === 0) return undefined;
  let url: URL;
  try {
    url = new URL(rawUrl, 'http://controller.invalid');
  } catch {
    return undefined;
  }
  const route = routes.find((r) => (r.prefix.endsWith('/') ? url.pathname.startsWith(r.prefix) : url.pathname === r.prefix));
  return route === undefined ? undefined : { route, url };
}

/** Starts the admin server on `host:port` (0 = any free port). */
export async function startAdminServer(
  state: AdminState,
  host: string,
  port: number,
  logger: Logger,
  streams: readonly AdminStreamRoute[] = [],
  options: AdminServerOptions = {},
): Promise<AdminServer> {
  const apiFrom = options.apiFrom ?? 'loopback';
  const namespace = options.controlPlaneNamespace ?? '<control-plane-namespace>';
  let listeningPort = port;
  const server: Server = createServer((req, res) => {
    // Decided on the socket's peer: no header (X-Forwarded-For, Forwarded) can widen it. `Host`
    // only narrows it, against DNS rebinding (see src/shared/loopback.ts).
    if (apiFrom !== 'any' && !isPublicAdminPath(req.url ?? '/')) {
      if (!isLoopbackPeer(req.socket.remoteAddress)) {
        refuse(res, namespace, listeningPort);
        return;
      }
      if (!isLoopbackHostHeader(req.headers.host)) {
        refuseHost(res, req.headers.host ?? '', listeningPort);
        return;
      }
    }
    const stream = streamRouteOf(streams, req.url ?? '/');
    if (stream !== undefined) {
      try {
        stream.route.handle(req, res, stream.url);
      } catch (e) {
        logger.error({ err: e, url: req.url }, 'admin stream request failed');
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
        res.end('internal error (see the controller log)\n');
      }
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > ADMIN_MAX_BODY_BYTES) tooLarge = true;
      else chunks.push(c);
    });
    req.on('error', () => res.destroy());
    req.on('end', () => {
      const answer = tooLarge
        ? Promise.resolve(apiError(413, 'INVALID_ARGUMENT', `body larger than ${ADMIN_MAX_BODY_BYTES} bytes`))
        : handleAdminRequest(state, req.method ?? 'GET', req.url ?? '/', Buffer.concat(chunks).toString('utf8'));
      answer
        .then((r) => {
          res.writeHead(r.status, { 'content-type': r.contentType, 'cache-control': 'no-store' });
          res.end(req.method === 'HEAD' ? undefined : r.body);
        })
        .catch((e: unknown) => {
          logger.error({ err: e, url: req.url }, 'admin API request failed');
          const r = apiError(500, 'INTERNAL', 'internal error (see the controller log)');
          if (!res.headersSent) res.writeHead(r.status, { 'content-type': r.contentType });
          res.end(r.body);
        });
    });
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  listeningPort = (server.address() as AddressInfo).port;
  return {
    port: listeningPort,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
