/**
 * `io.linkerd.proxy.identity.Identity/Certify` (POLICY-SEMANTICS §5.4) over a certify function
 * supplied by the identity module: the request is handed over as plain bytes, the outcome mapped
 * to a `CertifyResponse` or to the status code the function chose.
 */
import type { ServerUnaryCall, sendUnaryData } from '@grpc/grpc-js';
import { errorMessage } from '../shared/index.js';
import { type CertifyRequest, type CertifyResponse, IdentityDefinition } from './gen/identity.js';
import { statusCode } from './grpc-error.js';
import { type GrpcServiceBinding, grpcJsDefinition } from './grpc-service.js';

/** A certificate signing request as received. */
export interface CertifyInput {
  /** The requested DNS-like identity. */
  readonly identity: string;
  /** The ServiceAccount token proving it. */
  readonly token: Uint8Array;
  /** DER PKCS#10. */
  readonly csrDer: Uint8Array;
}

/** Status codes a certify function may answer with (§5.4). */
export type CertifyErrorCode = 'INVALID_ARGUMENT' | 'FAILED_PRECONDITION' | 'UNAVAILABLE' | 'PERMISSION_DENIED' | 'INTERNAL';

/** The outcome of a certify function. */
export type CertifyOutcome =
  | {
      readonly ok: true;
      /** DER leaf certificate. */
      readonly leafDer: Uint8Array;
      /** DER issuer chain (intermediates), leaf issuer first. */
      readonly chainDer: readonly Uint8Array[];
      /** The leaf's NotAfter, epoch milliseconds. */
      readonly validUntilMs: number;
    }
  | { readonly ok: false; readonly code: CertifyErrorCode; readonly message: string };

/** Issues a certificate for a request; rejections become INTERNAL. */
export type CertifyFunction = (req: CertifyInput) => Promise<CertifyOutcome>;

/** The service binding (unary only, so `closeStreams` does nothing). */
export function identityService(certify: CertifyFunction): GrpcServiceBinding {
  const certifyHandler = (call: ServerUnaryCall<CertifyRequest, CertifyResponse>, callback: sendUnaryData<CertifyResponse>): void => {
    const req = call.request;
    let result: Promise<CertifyOutcome>;
    try {
      result = certify({ identity: req.identity, token: req.token, csrDer: req.certificateSigningRequest });
    } catch (e) {
      callback({ code: statusCode('INTERNAL'), details: errorMessage(e) });
      return;
    }
    result.then(
      (out) => {
        if (!out.ok) {
          callback({ code: statusCode(out.code), details: out.message });
          return;
        }
        callback(null, { leafCertificate: out.leafDer, intermediateCertificates: [...out.chainDer], validUntil: new Date(out.validUntilMs) });
      },
      (e: unknown) => callback({ code: statusCode('INTERNAL'), details: errorMessage(e) }),
    );
  };
  return {
    serviceName: IdentityDefinition.fullName,
    definition: grpcJsDefinition(IdentityDefinition),
    implementation: { certify: certifyHandler } satisfies Record<keyof typeof IdentityDefinition.methods, unknown>,
    closeStreams: () => {},
  };
}
