/**
 * The controller as a client of pods' proxy admin servers (port 4191: `/metrics`, tap).
 *
 * Mesh TLS as the controller's own identity: the controller's ServiceAccount identity
 * (`ward-controller.<cp-ns>.serviceaccount.identity.<cp-ns>.<td>`, the ServiceAccount `ward install`
 * runs the controller as), with a certificate the controller's CA issues to itself and renews at
 * 70 % of its life. That is the identity a pod's policy on port 4191 must admit (a
 * MeshTLSAuthentication naming it, or an authorization admitting the control plane's namespace).
 * The admin server terminates mesh TLS when the ClientHello's SNI is the pod's own identity, so the
 * SNI is the pod's ServiceAccount identity, and the pod's certificate must carry exactly that name
 * as a DNS SAN, chained to the trust anchors (no wildcard, no CN fallback).
 *
 * Plaintext only for a target without an identity (a proxy running without mesh identity): the
 * admin server then sees `tls="no_identity"`. A meshed target is never retried in plaintext after a
 * TLS failure — that would let anyone on the path downgrade the scrape.
 */
import { type ClientRequest, request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { PeerCertificate } from 'node:tls';
import { CONTROLLER_SERVICE_ACCOUNT as CORE_CONTROLLER_SERVICE_ACCOUNT, controllerIdentity } from '../../core/index.js';
import type { ClusterConfig } from '../../index/index.js';
import { errorMessage, type Logger, MeshError } from '../../shared/index.js';
import { type ControllerIdentity, ServerCertificate } from '../controller-identity.js';
import type { ShutdownStack } from '../shutdown-stack.js';

/** The proxy admin port (upstream's 4191). */
export const PROXY_ADMIN_PORT = 4191;

/** The ServiceAccount the controller runs as (`ward install`'s); its identity is the scraper's. */
export const CONTROLLER_SERVICE_ACCOUNT = CORE_CONTROLLER_SERVICE_ACCOUNT;

/** Codes of {@link ProxyAdminError}. */
export type ProxyAdminErrorCode =
  /** No TCP connection (refused, unreachable, reset before an answer). */
  | 'ERR_PROXY_ADMIN_CONNECT'
  /** The TLS handshake failed or the pod's certificate does not carry its identity. */
  | 'ERR_PROXY_ADMIN_TLS'
  /** No answer within the deadline. */
  | 'ERR_PROXY_ADMIN_TIMEOUT'
  /** The pod's policy on port 4191 refused the controller (403, or the connection closed by policy). */
  | 'ERR_PROXY_ADMIN_DENIED'
  /** Any other non-2xx answer. */
  | 'ERR_PROXY_ADMIN_STATUS'
  /** The answer's body is larger than allowed. */
  | 'ERR_PROXY_ADMIN_TOO_LARGE'
  /** The caller aborted. */
  | 'ERR_PROXY_ADMIN_ABORTED'
  /** The controller has no valid issuer to prove its identity with. */
  | 'ERR_PROXY_ADMIN_NO_IDENTITY';

/** A failed admin request, with a message fit to show per target. */
export class ProxyAdminError extends MeshError {
  declare readonly code: ProxyAdminErrorCode;
  /** The HTTP status, when the pod answered. */
  readonly status: number | undefined;

  constructor(code: ProxyAdminErrorCode, message: string, options?: { cause?: unknown; status?: number }) {
    super(code, message, options);
    this.name = 'ProxyAdminError';
    this.status = options?.status;
  }
}

/** A pod's admin server. */
export interface ProxyAdminTarget {
  /** `ip:port` (IPv6 in brackets). */
  readonly address: string;
  /** The pod's mesh identity (SNI and the name its certificate must carry); null = plaintext. */
  readonly identity: string | null;
}

/** The client side of mesh TLS: what the controller proves and what it trusts. */
export interface ProxyAdminTls {
  /** The identity the controller presents (its certificate's first DNS SAN). */
  readonly clientIdentity: string;
  /** Current credentials (renewed certificates and reloaded anchors are picked up per request). */
  credentials(): { readonly certPem: string; readonly keyPem: string; readonly anchorsPem: string } | undefined;
}

/** Options of one request. */
export interface ProxyAdminRequestOptions {
  readonly signal?: AbortSignal;
  /** Deadline for the answer's headers (default 5000 ms). */
  readonly timeoutMs?: number;
  /** Extra request headers (`accept`…). */
  readonly headers?: Readonly<Record<string, string>>;
  /** The local address to connect from (the kernel's choice by default). */
  readonly localAddress?: string;
}

const DEFAULT_TIMEOUT_MS = 5000;

/** Exact DNS SAN match, as the proxies' mesh TLS checks it. */
function checkIdentity(identity: string, peer: PeerCertificate): Error | undefined {
  const names = (peer.subjectaltname ?? '')
    .split(', ')
    .filter((s) => s.startsWith('DNS:'))
    .map((s) => s.slice(4));
  if (names.includes(identity)) return undefined;
  return Object.assign(new Error(`the pod's certificate does not carry its identity ${identity} (DNS SANs: ${names.join(', ') || 'none'})`), {
    code: 'ERR_TLS_CERT_ALTNAME_INVALID',
  });
}

function splitAddress(address: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(address);
  if (m === null) return undefined;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  return { host: (m[1] ?? m[2]) as string, port };
}

const TLS_ERROR_CODES = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|SELF_SIGNED|DEPTH_ZERO|ERR_OSSL_)/;

/** Which error an `error` event of the request stands for. */
function classify(e: unknown, target: ProxyAdminTarget, tls: boolean, sentBytes: boolean): ProxyAdminError {
  const code = (e as { code?: unknown }).code;
  const msg = errorMessage(e);
  if (typeof code === 'string' && TLS_ERROR_CODES.test(code)) {
    return new ProxyAdminError('ERR_PROXY_ADMIN_TLS', `mesh TLS with ${target.address} as ${target.identity ?? '-'} failed: ${msg}`, { cause: e });
  }
  if (code === 'ECONNRESET' || code === 'EPIPE' || msg === 'socket hang up') {
    // The admin server closes the connection for a TLS name that is not the pod's and for a
    // connection-level denial (an opaque policy on 4191): neither answers with a status.
    const why = tls
      ? `closed the connection during mesh TLS as ${target.identity} (the pod's identity differs, or its policy on port ${PROXY_ADMIN_PORT} refuses the connection)`
      : sentBytes
        ? `closed the connection without an answer (its policy on port ${PROXY_ADMIN_PORT} may refuse plaintext connections)`
        : 'closed the connection';
    return new ProxyAdminError(tls ? 'ERR_PROXY_ADMIN_TLS' : 'ERR_PROXY_ADMIN_CONNECT', `${target.address} ${why}: ${msg}`, { cause: e });
  }
  return new ProxyAdminError('ERR_PROXY_ADMIN_CONNECT', `cannot reach the proxy admin server at ${target.address}: ${msg}`, { cause: e });
}

/**
 * GET `path` from a pod's admin server. Resolves with the response once its headers arrived and
 * its status is 2xx (the caller reads, or destroys, the body; the timeout then no longer applies);
 * rejects with a {@link ProxyAdminError} otherwise — a 403 as `ERR_PROXY_ADMIN_DENIED` naming the
 * identity to authorize.
 */
export function requestProxyAdmin(tls: ProxyAdminTls, target: ProxyAdminTarget, path: string, opts: ProxyAdminRequestOptions = {}): Promise<IncomingMessage> {
  return new Promise<IncomingMessage>((resolve, reject) => {
    const at = splitAddress(target.address);
    if (at === undefined) {
      reject(new ProxyAdminError('ERR_PROXY_ADMIN_CONNECT', `bad admin address ${JSON.stringify(target.address)} (want ip:port)`));
      return;
    }
    if (opts.signal?.aborted === true) {
      reject(new ProxyAdminError('ERR_PROXY_ADMIN_ABORTED', `request to ${target.address} aborted`));
      return;
    }
    const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const headers = { 'user-agent': 'ward-controller', ...opts.headers, host: target.address };
    const meshed = target.identity !== null;
    const from = opts.localAddress !== undefined ? { localAddress: opts.localAddress } : {};
    let req: ClientRequest;
    if (meshed) {
      const creds = tls.credentials();
      if (creds === undefined) {
        reject(new ProxyAdminError('ERR_PROXY_ADMIN_NO_IDENTITY', 'the controller has no valid issuer to prove its identity with'));
        return;
      }
      const identity = target.identity as string;
      req = httpsRequest({
        host: at.host,
        port: at.port,
        ...from,
        path,
        method: 'GET',
        headers,
        agent: false,
        servername: identity,
        ca: creds.anchorsPem,
        cert: creds.certPem,
        key: creds.keyPem,
        rejectUnauthorized: true,
        checkServerIdentity: (_host, peer) => checkIdentity(identity, peer),
      });
    } else {
      req = httpRequest({ host: at.host, port: at.port, ...from, path, method: 'GET', headers, agent: false });
    }
    let settled = false;
    const fail = (e: ProxyAdminError): void => {
      if (settled) return;
      settled = true;
      cleanup();
      req.destroy();
      reject(e);
    };
    const onAbort = (): void => fail(new ProxyAdminError('ERR_PROXY_ADMIN_ABORTED', `request to ${target.address} aborted`));
    const timer = setTimeout(
      () => fail(new ProxyAdminError('ERR_PROXY_ADMIN_TIMEOUT', `no answer from the proxy admin server at ${target.address} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const cleanup = (): void => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    req.on('error', (e) => fail(classify(e, target, meshed, req.socket?.bytesWritten !== undefined && req.socket.bytesWritten > 0)));
    req.on('response', (res) => {
      if (settled) {
        res.destroy();
        return;
      }
      const status = res.statusCode ?? 0;
      if (status >= 200 && status < 300) {
        settled = true;
        cleanup();
        // Errors after this point reach the caller through the response stream.
        req.on('error', () => {});
        resolve(res);
        return;
      }
      res.resume();
      if (status === 403) {
        fail(
          new ProxyAdminError(
            'ERR_PROXY_ADMIN_DENIED',
            meshed
              ? `denied by the pod's policy on port ${PROXY_ADMIN_PORT}: authorize the identity ${tls.clientIdentity} on the pod's admin Server (port ${PROXY_ADMIN_PORT})`
              : `denied by the pod's policy on port ${PROXY_ADMIN_PORT}: the pod has no mesh identity, so the controller scrapes it in plaintext from its own address; authorize that network on port ${PROXY_ADMIN_PORT}`,
            { status },
          ),
        );
        return;
      }
      fail(new ProxyAdminError('ERR_PROXY_ADMIN_STATUS', `the proxy admin server at ${target.address} answered ${status} to GET ${path}`, { status }));
    });
    req.end();
  });
}

/**
 * Reads a response body as UTF-8 text, at most `maxBytes` (rejects with `ERR_PROXY_ADMIN_TOO_LARGE`
 * past it, destroying the stream) and within `timeoutMs` (`ERR_PROXY_ADMIN_TIMEOUT`).
 */
export function readProxyAdminBody(res: IncomingMessage, maxBytes: number, timeoutMs: number, what: string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const declared = Number(res.headers['content-length']);
    if (Number.isFinite(declared) && declared > maxBytes) {
      res.destroy();
      reject(new ProxyAdminError('ERR_PROXY_ADMIN_TOO_LARGE', `${what}: body of ${declared} bytes is larger than the limit of ${maxBytes}`));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (e?: ProxyAdminError): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (e !== undefined) {
        res.destroy();
        reject(e);
      } else resolve(Buffer.concat(chunks, size).toString('utf8'));
    };
    const timer = setTimeout(() => finish(new ProxyAdminError('ERR_PROXY_ADMIN_TIMEOUT', `${what}: body not read within ${timeoutMs} ms`)), timeoutMs);
    res.on('data', (c: Buffer) => {
      size += c.length;
      if (size > maxBytes) finish(new ProxyAdminError('ERR_PROXY_ADMIN_TOO_LARGE', `${what}: body larger than the limit of ${maxBytes} bytes`));
      else chunks.push(c);
    });
    res.on('end', () => finish());
    res.on('error', (e) => finish(new ProxyAdminError('ERR_PROXY_ADMIN_CONNECT', `${what}: ${errorMessage(e)}`, { cause: e })));
    res.on('close', () => {
      if (!res.complete) finish(new ProxyAdminError('ERR_PROXY_ADMIN_CONNECT', `${what}: connection closed before the body ended`));
    });
  });
}

/** The controller's identity as a client of proxies' admin servers. */
export function controllerClientIdentity(cluster: ClusterConfig): string {
  return controllerIdentity(cluster);
}

/** Credentials made from a certificate (kept current) and the issuer's trust anchors. */
export function proxyAdminTlsOf(
  clientIdentity: string,
  cert: { readonly current: { certPem: string; chainPem: string; keyPem: string } },
  anchors: () => string | undefined,
): ProxyAdminTls {
  return {
    clientIdentity,
    credentials: () => {
      const anchorsPem = anchors();
      if (anchorsPem === undefined) return undefined;
      const c = cert.current;
      return { certPem: c.certPem + c.chainPem, keyPem: c.keyPem, anchorsPem };
    },
  };
}

const shared = new WeakMap<ControllerIdentity, Promise<ProxyAdminTls>>();

/**
 * The controller's admin-client TLS: a certificate for {@link controllerClientIdentity} issued by
 * the controller's CA and renewed like the serving certificate (stopped by `cleanups`). One per
 * controller: the collector and tap share it.
 */
export function controllerProxyAdminTls(ctx: {
  readonly cluster: ClusterConfig;
  readonly identity: ControllerIdentity;
  readonly log: Logger;
  readonly cleanups: ShutdownStack;
}): Promise<ProxyAdminTls> {
  let p = shared.get(ctx.identity);
  if (p === undefined) {
    const clientIdentity = controllerClientIdentity(ctx.cluster);
    p = ServerCertificate.issue(ctx.identity.ca, [clientIdentity], ctx.log).then((cert) => {
      cert.scheduleRenewal();
      ctx.cleanups.push(() => cert.stop());
      return proxyAdminTlsOf(clientIdentity, cert, () => ctx.identity.reloader.current()?.anchorsPem);
    });
    shared.set(ctx.identity, p);
  }
  return p;
}
