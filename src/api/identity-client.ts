/**
 * Client of `io.linkerd.proxy.identity.Identity/Certify`: what a workload uses to obtain its
 * certificate.
 */
import type { ClientCallOptions } from './call-options.js';
import { IdentityDefinition } from './gen/identity.js';
import type { GrpcConnectOptions } from './grpc-client.js';
import { H2GrpcClient } from './h2-grpc-client.js';
import type { CertifyInput } from './identity-service.js';

/** An issued certificate. */
export interface CertifyResult {
  /** DER leaf certificate. */
  readonly leafDer: Uint8Array;
  /** DER issuer chain. */
  readonly chainDer: readonly Uint8Array[];
  /** The leaf's NotAfter, epoch milliseconds (NaN when the server did not send it). */
  readonly validUntilMs: number;
}

/** A connection to an identity server. */
export class IdentityClient {
  readonly #client: H2GrpcClient;

  /** Creates the client (it connects lazily, on the first call). */
  constructor(opts: GrpcConnectOptions) {
    this.#client = new H2GrpcClient(opts);
  }

  /** Requests a certificate; rejects with `GrpcError` (code as chosen by the server, §5.4). */
  async certify(req: CertifyInput, opts?: ClientCallOptions): Promise<CertifyResult> {
    const res = await this.#client.unary(
      IdentityDefinition,
      IdentityDefinition.methods.certify,
      { identity: req.identity, token: req.token, certificateSigningRequest: req.csrDer },
      opts,
    );
    return { leafDer: res.leafCertificate, chainDer: res.intermediateCertificates, validUntilMs: res.validUntil?.getTime() ?? Number.NaN };
  }

  /** Closes the connection; an open call fails with CANCELLED. */
  close(): void {
    this.#client.close();
  }
}
