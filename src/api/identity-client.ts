/**
 * Client of `io.linkerd.proxy.identity.Identity/Certify`: what a workload uses to obtain its
 * certificate.
 */
import { Metadata } from '@grpc/grpc-js';
import { type ClientCallOptions, grpcCallOptions } from './call-options.js';
import { IdentityClient as GeneratedClient } from './gen/identity.js';
import { channelSettings, type GrpcConnectOptions } from './grpc-client.js';
import { grpcErrorFrom } from './grpc-error.js';
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
  readonly #client: GeneratedClient;

  /** Creates the channel (it connects lazily, on the first call). */
  constructor(opts: GrpcConnectOptions) {
    const { credentials, options } = channelSettings(opts);
    this.#client = new GeneratedClient(opts.address, credentials, options);
  }

  /** Requests a certificate; rejects with `GrpcError` (code as chosen by the server, §5.4). */
  certify(req: CertifyInput, opts?: ClientCallOptions): Promise<CertifyResult> {
    return new Promise((resolve, reject) => {
      this.#client.certify(
        { identity: req.identity, token: req.token, certificateSigningRequest: req.csrDer },
        new Metadata(),
        grpcCallOptions(opts),
        (err, res) => {
          if (err !== null) {
            reject(grpcErrorFrom(err));
            return;
          }
          resolve({ leafDer: res.leafCertificate, chainDer: res.intermediateCertificates, validUntilMs: res.validUntil?.getTime() ?? Number.NaN });
        },
      );
    });
  }

  /** Closes the channel. */
  close(): void {
    this.#client.close();
  }
}
