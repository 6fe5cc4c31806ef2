/**
 * Public surface of `identity`: identity material (trust anchor, issuer), the CA's Certify
 * logic, ServiceAccount tokens, issuer hot reload, the workload side (key, CSR, renewal) and
 * certificate inspection. The only module that uses `@peculiar/x509`, and only to create CA
 * certificates (`initIdentity`): it is loaded on first use, never by importing this module
 * (the proxy imports it in every pod; see x509.ts).
 */

export {
  DEFAULT_CA_TTL_MS,
  DEFAULT_TRUST_DOMAIN,
  IDENTITY_FILES,
  type InitIdentityOptions,
  type InitIdentityOutput,
  type Issuer,
  type IssuerMaterial,
  initIdentity,
  isDnsName,
  loadIssuer,
  validateIssuer,
  type WrittenFile,
} from './ca.js';
export {
  CertificateAuthority,
  type CertificateAuthorityOptions,
  type CertifyErrorCode,
  type CertifyRefusalReason,
  type CertifyRequest,
  type CertifyResult,
  type IssuerSource,
  type ServerCredentials,
} from './certify.js';
export type { IdentityDiagnosticCode } from './diagnostics.js';
export { type CertificateReport, type CertificateSummary, inspectCertificate } from './inspect.js';
export { IssuerReloader, type IssuerReloaderOptions } from './issuer-reloader.js';
export {
  DEFAULT_TOKEN_TTL_MS,
  IDENTITY_TOKEN_AUDIENCE,
  isDns1123Label,
  LOCAL_TOKEN_ISSUER,
  LocalTokenAuthenticator,
  type LocalTokenAuthenticatorOptions,
  type MintTokenOptions,
  mintToken,
  parseServiceAccountUsername,
  type TokenAuthenticator,
  type TokenAuthResult,
  type TokenIdentity,
} from './token.js';
export {
  POD_NAME_EXTRA,
  type ReviewToken,
  TokenReviewAuthenticator,
  type TokenReviewAuthenticatorOptions,
  type TokenReviewStatus,
  type TokenReviewUser,
} from './token-review.js';
export {
  type CertifyAnswer,
  createCsr,
  generateWorkloadKey,
  type RenewalFailure,
  type Timers,
  type WorkloadCertificate,
  WorkloadIdentity,
  type WorkloadIdentityOptions,
  type WorkloadKey,
} from './workload.js';
