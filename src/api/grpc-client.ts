/**
 * How clients reach a gRPC server: an address and, for TLS, the trust roots, the expected
 * server name (a mesh identity, usually not the DNS name dialled) and an optional client
 * certificate. Shared by the inbound, identity and destination clients (`H2GrpcClient`).
 */

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
   * Use a connection of this client's own, for tools that act as many proxies. Every client has
   * its own HTTP/2 connection (unlike grpc-js, which shared one between clients with equal
   * settings), so this is always the case.
   */
  readonly dedicatedConnection?: boolean;
}
