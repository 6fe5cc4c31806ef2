/**
 * Starts a grpc-js server for a set of service bindings, insecure or TLS (optionally mutual),
 * with a certificate that can be replaced while running, and a graceful `close`.
 *
 * grpc-js is loaded on the first `startGrpcServer`, not when this module is imported: the proxy
 * imports `api` for its clients (which speak HTTP/2 themselves) and must not carry grpc-js.
 */
import { createRequire } from 'node:module';
import { createSecureContext } from 'node:tls';
import type * as GrpcJs from '@grpc/grpc-js';
import type { experimental, ServerCredentials } from '@grpc/grpc-js';
import { errorMessage, MeshError } from '../shared/index.js';
import type { GrpcServiceBinding } from './grpc-service.js';

/** Server TLS material (PEM). */
export interface GrpcServerTls {
  readonly certPem: string;
  readonly keyPem: string;
  /** Trust roots for client certificates; when set, clients are asked for a certificate. */
  readonly caPem?: string;
  /** Reject clients without a valid certificate (needs `caPem`). */
  readonly requireClientCert?: boolean;
}

/** What to serve and where. */
export interface GrpcServerOptions {
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** Insecure (plaintext HTTP/2) when undefined. */
  readonly tls?: GrpcServerTls;
  readonly services: readonly GrpcServiceBinding[];
}

/** A running server. */
export interface GrpcServerHandle {
  /** The bound port. */
  readonly port: number;
  /**
   * Stops accepting connections and calls, ends open watch streams with status OK, waits up to
   * `graceMs` (default 5000) for calls to finish, then cuts the remaining connections. Idempotent.
   */
  close(graceMs?: number): Promise<void>;
  /**
   * Replaces the certificate (and client trust roots) for new connections; only on TLS servers.
   * Throws `MeshError` `ERR_GRPC_TLS_INVALID` (keeping the current certificate) when the material
   * does not load.
   */
  updateTls?(tls: { readonly certPem: string; readonly keyPem: string; readonly caPem?: string }): void;
}

/**
 * grpc-js stops accepting connections when it is handed material it cannot load, so the
 * material is loaded here first.
 */
function checkTls(tls: { certPem: string; keyPem: string; caPem?: string }): void {
  try {
    createSecureContext({ cert: tls.certPem, key: tls.keyPem, ...(tls.caPem === undefined ? {} : { ca: tls.caPem }) });
  } catch (e) {
    throw new MeshError('ERR_GRPC_TLS_INVALID', `invalid gRPC server TLS material: ${errorMessage(e)}`, { cause: e });
  }
}

/** Holds the current certificate and trust roots and pushes changes to grpc-js. */
class MutableCertificates implements experimental.CertificateProvider {
  #ca: Buffer | undefined;
  #identity: { certificate: Buffer; privateKey: Buffer };
  readonly #caListeners = new Set<experimental.CaCertificateUpdateListener>();
  readonly #identityListeners = new Set<experimental.IdentityCertificateUpdateListener>();

  constructor(tls: { certPem: string; keyPem: string; caPem?: string }) {
    this.#identity = { certificate: Buffer.from(tls.certPem), privateKey: Buffer.from(tls.keyPem) };
    this.#ca = tls.caPem === undefined ? undefined : Buffer.from(tls.caPem);
  }

  update(tls: { certPem: string; keyPem: string; caPem?: string }): void {
    this.#identity = { certificate: Buffer.from(tls.certPem), privateKey: Buffer.from(tls.keyPem) };
    if (tls.caPem !== undefined) this.#ca = Buffer.from(tls.caPem);
    for (const l of this.#caListeners) l(this.#ca === undefined ? null : { caCertificate: this.#ca });
    for (const l of this.#identityListeners) l(this.#identity);
  }

  // Listeners get the current value synchronously on registration (see startGrpcServer).
  addCaCertificateListener(listener: experimental.CaCertificateUpdateListener): void {
    this.#caListeners.add(listener);
    listener(this.#ca === undefined ? null : { caCertificate: this.#ca });
  }

  removeCaCertificateListener(listener: experimental.CaCertificateUpdateListener): void {
    this.#caListeners.delete(listener);
  }

  addIdentityCertificateListener(listener: experimental.IdentityCertificateUpdateListener): void {
    this.#identityListeners.add(listener);
    listener(this.#identity);
  }

  removeIdentityCertificateListener(listener: experimental.IdentityCertificateUpdateListener): void {
    this.#identityListeners.delete(listener);
  }
}

let grpcJs: typeof GrpcJs | undefined;

/** grpc-js, loaded on first use. */
function loadGrpcJs(): typeof GrpcJs {
  grpcJs ??= createRequire(import.meta.url)('@grpc/grpc-js') as typeof GrpcJs;
  return grpcJs;
}

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Binds and starts a server; rejects when the address cannot be bound or the TLS material does not load. */
export async function startGrpcServer(opts: GrpcServerOptions): Promise<GrpcServerHandle> {
  if (opts.tls !== undefined) checkTls(opts.tls);
  const { experimental, Server, ServerCredentials } = loadGrpcJs();
  const server = new Server();
  for (const s of opts.services) server.addService(s.definition, s.implementation);

  let certificates: MutableCertificates | undefined;
  let credentials: ServerCredentials;
  if (opts.tls === undefined) {
    credentials = ServerCredentials.createInsecure();
  } else {
    certificates = new MutableCertificates(opts.tls);
    // The first argument is the identity provider, the second the (optional) client CA provider.
    credentials = experimental.createCertificateProviderServerCredentials(
      certificates,
      opts.tls.caPem === undefined ? null : certificates,
      opts.tls.caPem !== undefined && opts.tls.requireClientCert === true,
    );
    // grpc-js reads the credentials' current TLS options when it creates each listener, but only
    // subscribes to the providers afterwards; a watcher registered up front subscribes them now,
    // so every listener starts with the certificate instead of dropping connections until the
    // first update.
    credentials._addWatcher(() => {});
  }

  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(hostPort(opts.host, opts.port), credentials, (err, bound) => (err === null ? resolve(bound) : reject(err)));
  });

  let closing: Promise<void> | undefined;
  const close = (graceMs = 5000): Promise<void> => {
    closing ??= new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, graceMs);
      timer.unref();
      server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
      // After tryShutdown no new calls are accepted, so ending the streams now leaves none open.
      for (const s of opts.services) s.closeStreams();
    });
    return closing;
  };

  const handle: GrpcServerHandle = { port, close };
  if (certificates !== undefined) {
    const certs = certificates;
    return {
      ...handle,
      updateTls: (tls) => {
        checkTls(tls);
        certs.update(tls);
      },
    };
  }
  return handle;
}
