/**
 * Starts a grpc-js server for a set of service bindings, insecure or TLS (optionally mutual),
 * with a certificate that can be replaced while running, and a graceful `close`.
 *
 * grpc-js is loaded on the first `startGrpcServer`, not when this module is imported: the proxy
 * imports `api` for its clients (which speak HTTP/2 themselves) and must not carry grpc-js.
 */
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { createSecureContext, createServer as createTlsServer, type TLSSocket, type Server as TlsServer } from 'node:tls';
import type * as GrpcJs from '@grpc/grpc-js';
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

/** The material loads (and the key matches the certificate); throws `ERR_GRPC_TLS_INVALID` otherwise. */
function checkTls(tls: { certPem: string; keyPem: string; caPem?: string }): void {
  try {
    createSecureContext({ cert: tls.certPem, key: tls.keyPem, ...(tls.caPem === undefined ? {} : { ca: tls.caPem }) });
  } catch (e) {
    throw new MeshError('ERR_GRPC_TLS_INVALID', `invalid gRPC server TLS material: ${errorMessage(e)}`, { cause: e });
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

/**
 * Listens for TLS on `host:port` and hands each decrypted connection to `server` as HTTP/2.
 *
 * Clients that offer ALPN `h2` and clients that offer none at all (HTTP/2 with prior knowledge
 * inside TLS, as linkerd2-proxy's control-plane client does) are both served; node's HTTP/2 TLS
 * server — what grpc-js binds — refuses the latter, so the TLS is terminated here instead.
 */
async function listenTls(server: GrpcJs.Server, opts: GrpcServerOptions & { tls: GrpcServerTls }, isClosing: () => boolean): Promise<TlsServer> {
  const { ServerCredentials } = loadGrpcJs();
  const injector = server.createConnectionInjector(ServerCredentials.createInsecure());
  const tlsServer = createTlsServer(
    {
      cert: opts.tls.certPem,
      key: opts.tls.keyPem,
      ...(opts.tls.caPem === undefined ? {} : { ca: opts.tls.caPem, requestCert: true, rejectUnauthorized: opts.tls.requireClientCert === true }),
      // A client offering only other protocols fails the handshake (no_application_protocol).
      ALPNProtocols: ['h2'],
    },
    (socket: TLSSocket) => {
      // A handshake that completes after close() started must not open a session.
      if (isClosing()) {
        socket.destroy();
        return;
      }
      // node's HTTP/2 server takes a TLS socket whose ALPN is `false` for HTTP/1; without ALPN the
      // client speaks HTTP/2 anyway (it is a gRPC server's only protocol), so say so.
      if (socket.alpnProtocol !== 'h2') socket.alpnProtocol = 'h2';
      injector.injectConnection(socket);
    },
  );
  // A failed handshake is the client's problem; the server goes on.
  tlsServer.on('tlsClientError', () => {});
  await new Promise<void>((resolve, reject) => {
    tlsServer.once('error', reject);
    tlsServer.listen({ host: opts.host, port: opts.port }, () => {
      tlsServer.off('error', reject);
      resolve();
    });
  });
  return tlsServer;
}

/** Binds and starts a server; rejects when the address cannot be bound or the TLS material does not load. */
export async function startGrpcServer(opts: GrpcServerOptions): Promise<GrpcServerHandle> {
  const tls = opts.tls;
  if (tls !== undefined) checkTls(tls);
  const { Server, ServerCredentials } = loadGrpcJs();
  const server = new Server();
  for (const s of opts.services) server.addService(s.definition, s.implementation);

  let tlsServer: TlsServer | undefined;
  let port: number;
  let closing: Promise<void> | undefined;
  if (tls === undefined) {
    port = await new Promise<number>((resolve, reject) => {
      server.bindAsync(hostPort(opts.host, opts.port), ServerCredentials.createInsecure(), (err, bound) => (err === null ? resolve(bound) : reject(err)));
    });
  } else {
    tlsServer = await listenTls(server, { ...opts, tls }, () => closing !== undefined);
    port = (tlsServer.address() as AddressInfo).port;
  }

  const close = (graceMs = 5000): Promise<void> => {
    closing ??= new Promise<void>((resolve) => {
      tlsServer?.close();
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
  if (tlsServer !== undefined && tls !== undefined) {
    const listener = tlsServer;
    let ca = tls.caPem;
    return {
      ...handle,
      updateTls: (next) => {
        checkTls(next);
        ca = next.caPem ?? ca;
        listener.setSecureContext({ cert: next.certPem, key: next.keyPem, ...(ca === undefined ? {} : { ca }) });
      },
    };
  }
  return handle;
}
