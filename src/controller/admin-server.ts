/**
 * The admin HTTP server: a thin node:http shell around `handleAdminRequest`.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../shared/index.js';
import { ADMIN_MAX_BODY_BYTES, type AdminState, apiError, handleAdminRequest } from './admin-api.js';

/** A listening admin server. */
export interface AdminServer {
  readonly port: number;
  close(): Promise<void>;
}

/** Starts the admin server on `host:port` (0 = any free port). */
export async function startAdminServer(state: AdminState, host: string, port: number, logger: Logger): Promise<AdminServer> {
  const server: Server = createServer((req, res) => {
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
