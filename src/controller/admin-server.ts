/**
 * The admin HTTP server: a thin node:http shell around `handleAdminRequest`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../shared/index.js';
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
): Promise<AdminServer> {
  const server: Server = createServer((req, res) => {
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
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
