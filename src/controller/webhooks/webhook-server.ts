/**
 * The admission webhooks' HTTPS server (`ward-webhook` Service, container port 9443): `POST
 * /validate` (policy resources, `handleValidate`) and `POST /inject` (pods, `handleInject`) with
 * admission.k8s.io/v1 AdmissionReview bodies. The serving certificate and key are files (the
 * mounted `ward-webhook-tls` Secret), read again when they change so a renewed certificate is
 * served without a restart. Bad requests (malformed JSON, not a review, too large) get a 4xx
 * with a message; nothing a client sends can stop the server.
 */
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import { createSecureContext } from 'node:tls';
import { errorMessage, type Logger, MeshError } from '../../shared/index.js';
import { type AdmissionRequest, type AdmissionResponse, deny, parseAdmissionReview, reviewOf } from './admission-review.js';
import { handleInject, type InjectOptions } from './inject-handler.js';
import { handleValidate, type ValidateOptions } from './validate-handler.js';

/** Options of `startWebhookServer`. */
export interface WebhookServerOptions {
  /** PEM serving certificate (chain) and key files. */
  readonly certFile: string;
  readonly keyFile: string;
  /** Default 0.0.0.0. */
  readonly host?: string | undefined;
  /** Default 9443; 0 picks a free port. */
  readonly port?: number | undefined;
  readonly validate: ValidateOptions;
  /** Without it, `/inject` answers 404. */
  readonly inject?: InjectOptions | undefined;
  /** Largest request body accepted (default 8 MiB: a review carries the object and the old object). */
  readonly maxBodyBytes?: number | undefined;
  /** How often the certificate files are checked for changes (default 10 s). */
  readonly reloadIntervalMs?: number | undefined;
  readonly logger?: Logger | undefined;
}

/** A running webhook server. */
export interface RunningWebhookServer {
  readonly port: number;
  close(): Promise<void>;
}

/** Thrown when the serving certificate or key cannot be read or do not match (`ERR_WEBHOOK_TLS`). */
export class WebhookTlsError extends MeshError {
  constructor(message: string, cause?: unknown) {
    super('ERR_WEBHOOK_TLS', message, { cause });
    this.name = 'WebhookTlsError';
  }
}

const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;

interface Tls {
  readonly cert: string;
  readonly key: string;
}

function readTls(certFile: string, keyFile: string): Tls {
  let tls: Tls;
  try {
    tls = { cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') };
  } catch (e) {
    throw new WebhookTlsError(`webhook certificate: ${errorMessage(e)}`, e);
  }
  try {
    // Fails when the key does not match the certificate or either is not PEM.
    createSecureContext(tls);
  } catch (e) {
    throw new WebhookTlsError(`webhook certificate ${certFile} / key ${keyFile}: ${errorMessage(e)}`, e);
  }
  return tls;
}

/** Routes one parsed review to its handler. */
export async function handleAdmission(
  path: '/validate' | '/inject',
  request: AdmissionRequest,
  opts: Pick<WebhookServerOptions, 'validate' | 'inject'>,
): Promise<AdmissionResponse> {
  if (path === '/inject' && opts.inject !== undefined) return handleInject(request, opts.inject);
  return handleValidate(request, opts.validate);
}

function reply(res: ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** Reads the body up to `max` bytes; undefined (after answering 413) when it is larger. */
function readBody(req: IncomingMessage, res: ServerResponse, max: number): Promise<Buffer | undefined> {
  const declared = Number(req.headers['content-length']);
  const tooLarge = () => {
    // Close the connection rather than read the rest.
    res.setHeader('connection', 'close');
    reply(res, 413, `request body larger than ${max} bytes\n`);
    res.once('finish', () => req.destroy());
  };
  if (Number.isFinite(declared) && declared > max) {
    tooLarge();
    return Promise.resolve(undefined);
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        req.pause();
        req.removeAllListeners('data');
        tooLarge();
        resolve(undefined);
        return;
      }
      chunks.push(chunk);
    });
    req.once('end', () => resolve(Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

/**
 * Starts the webhook server; resolves once it listens. Throws `WebhookTlsError` when the
 * certificate or key cannot be used.
 */
export async function startWebhookServer(opts: WebhookServerOptions): Promise<RunningWebhookServer> {
  const log = opts.logger;
  const max = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  let tls = readTls(opts.certFile, opts.keyFile);
  const server: Server = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    serve(req, res).catch((e: unknown) => {
      log?.error({ err: errorMessage(e) }, 'webhook request failed');
      if (!res.headersSent) reply(res, 500, 'internal error\n');
      else res.destroy();
    });
  });
  server.on('tlsClientError', (e) => log?.debug({ err: errorMessage(e) }, 'webhook TLS handshake failed'));

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // The API server appends `?timeout=10s`.
    const path = new URL(req.url ?? '/', 'https://webhook').pathname;
    if (path !== '/validate' && path !== '/inject') return reply(res, 404, `no webhook at ${path}; use /validate or /inject\n`);
    if (path === '/inject' && opts.inject === undefined) return reply(res, 404, 'the injector is not enabled\n');
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return reply(res, 405, `${req.method ?? ''} is not allowed; POST an AdmissionReview\n`);
    }
    const body = await readBody(req, res, max);
    if (body === undefined) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch (e) {
      return reply(res, 400, `malformed JSON: ${errorMessage(e)}\n`);
    }
    const review = parseAdmissionReview(parsed);
    if (!review.ok) return reply(res, 400, `not an AdmissionReview: ${review.message}\n`);
    const request = review.request;
    let response: AdmissionResponse;
    try {
      response = await handleAdmission(path, request, opts);
    } catch (e) {
      log?.error({ err: errorMessage(e), kind: request.kind.kind, uid: request.uid }, 'admission handler failed');
      response = deny(request.uid, 500, `ward webhook failed: ${errorMessage(e)}`);
    }
    if (path === '/validate' && !response.allowed) {
      log?.info({ kind: request.kind.kind, namespace: request.namespace, name: request.name, message: response.status?.message }, 'denied');
    }
    reply(res, 200, JSON.stringify(reviewOf(response)), 'application/json');
  }

  // Secret volumes change by swapping a symlink, which file watchers miss: compare the contents.
  const reload = setInterval(() => {
    let next: Tls;
    try {
      next = readTls(opts.certFile, opts.keyFile);
    } catch (e) {
      log?.warn({ err: errorMessage(e) }, 'webhook certificate not reloaded; serving the previous one');
      return;
    }
    if (next.cert === tls.cert && next.key === tls.key) return;
    server.setSecureContext({ cert: next.cert, key: next.key });
    tls = next;
    log?.info({ certFile: opts.certFile }, 'webhook certificate reloaded');
  }, opts.reloadIntervalMs ?? 10_000);
  reload.unref();

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 9443, opts.host ?? '0.0.0.0', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  log?.info({ port }, 'webhook server listening');
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(reload);
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
