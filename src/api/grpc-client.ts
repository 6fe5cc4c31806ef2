/**
 * How clients reach a gRPC server: an address and, for TLS, the trust roots, the expected
 * server name (a mesh identity, usually not the DNS name dialled) and an optional client
 * certificate. Shared by the inbound, identity and destination clients.
 */
import { type ChannelCredentials, type ChannelOptions, credentials } from '@grpc/grpc-js';

/** Client TLS material (PEM). */
export interface GrpcClientTls {
  /** Trust roots for the server certificate. */
  readonly caPem: string;
  /** The name the server certificate must carry; also sent as SNI. */
  readonly serverName: string;
  /** Client certificate and key for mutual TLS. */
  readonly certPem?: string;
  readonly keyPem?: string;
}

/** Where and how to connect. */
export interface GrpcConnectOptions {
  /** `host:port` (`[::1]:port` for IPv6). */
  readonly address: string;
  /** Insecure (plaintext HTTP/2) when undefined. */
  readonly tls?: GrpcClientTls;
  /**
   * Use a connection of this client's own instead of grpc-js's process-wide pool (where clients
   * with equal settings share one HTTP/2 connection). For tools that act as many proxies.
   */
  readonly dedicatedConnection?: boolean;
}

/** grpc-js credentials and channel options for a connection. */
export function channelSettings(opts: GrpcConnectOptions): { credentials: ChannelCredentials; options: ChannelOptions } {
  const tls = opts.tls;
  // Proxies must find a restarted controller within seconds, not grpc-js's default of up to 2 min.
  // The controller's APIs are never reached through an HTTP proxy (grpc-js would honour http_proxy/grpc_proxy).
  const reconnect: ChannelOptions = { 'grpc.initial_reconnect_backoff_ms': 250, 'grpc.max_reconnect_backoff_ms': 5000, 'grpc.enable_http_proxy': 0 };
  const pool: ChannelOptions = opts.dedicatedConnection === true ? { ...reconnect, 'grpc.use_local_subchannel_pool': 1 } : reconnect;
  if (tls === undefined) return { credentials: credentials.createInsecure(), options: pool };
  const key = tls.keyPem === undefined ? null : Buffer.from(tls.keyPem);
  const cert = tls.certPem === undefined ? null : Buffer.from(tls.certPem);
  return {
    credentials: credentials.createSsl(Buffer.from(tls.caPem), key, cert),
    // grpc-js then uses `serverName` for SNI and for the certificate name check.
    options: { ...pool, 'grpc.ssl_target_name_override': tls.serverName, 'grpc.default_authority': tls.serverName },
  };
}
