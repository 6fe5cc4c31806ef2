/**
 * The identity CA's Certify logic (POLICY-SEMANTICS §5.4, §7), transport-free: the gRPC service
 * maps {@link CertifyResult} onto `CertifyResponse` / a status code.
 */

import { createPublicKey, KeyObject, verify } from 'node:crypto';
import { type IdentityDomain, serviceAccountIdentity } from '../core/index.js';
import { type Counter, errorMessage, MeshError, promClient, type Registry } from '../shared/index.js';
import type { Issuer } from './ca.js';
import { CURVE_NAMES, ECDSA_SIGNATURE_HASHES, KEY_ALGORITHM_NAMES, OIDS, type ParsedCsr, parseCsr } from './csr.js';
import { createLeafCertificate } from './issue.js';
import { generateEcKeyPair, privateKeyToPem } from './keys.js';
import { certificatesToPem, encodePem, isDerSequence } from './pem.js';
import type { TokenAuthenticator, TokenAuthResult } from './token.js';

/** Certify's input (`io.linkerd.proxy.identity.CertifyRequest`). */
export interface CertifyRequest {
  readonly identity: string;
  readonly token: Uint8Array;
  /** DER PKCS#10 (the proto comment says PEM; the server parses DER). */
  readonly csrDer: Uint8Array;
}

/** gRPC status codes Certify answers with. */
export type CertifyErrorCode = 'INVALID_ARGUMENT' | 'FAILED_PRECONDITION' | 'UNAVAILABLE' | 'INTERNAL';

/**
 * Stable reasons for refusals (the `reason` label of `identity_cert_refused_total`).
 * INVALID_ARGUMENT: missing-field, bad-csr, bad-token. UNAVAILABLE: no-issuer, issuer-expired,
 * authenticator-error. FAILED_PRECONDITION: not-ecdsa, bad-curve, bad-csr-signature, bad-san,
 * bad-cn, identity-mismatch. INTERNAL: internal.
 */
export type CertifyRefusalReason =
  | 'missing-field'
  | 'bad-csr'
  | 'bad-token'
  | 'no-issuer'
  | 'issuer-expired'
  | 'authenticator-error'
  | 'not-ecdsa'
  | 'bad-curve'
  | 'bad-csr-signature'
  | 'bad-san'
  | 'bad-cn'
  | 'identity-mismatch'
  | 'internal';

/** Certify's outcome: the issued leaf and issuer chain, or a refusal. */
export type CertifyResult =
  | {
      readonly ok: true;
      readonly leafDer: Uint8Array;
      /** The issuer chain (issuer first; never the root), DER. */
      readonly chainDer: readonly Uint8Array[];
      /** The leaf's NotAfter (CertifyResponse.valid_until). */
      readonly validUntilMs: number;
    }
  | { readonly ok: false; readonly code: CertifyErrorCode; readonly reason: CertifyRefusalReason; readonly message: string };

/** Supplies the issuer current at each request (the reloader implements it). */
export interface IssuerSource {
  current(): Issuer | undefined;
}

/** Configuration of {@link CertificateAuthority}. */
export interface CertificateAuthorityOptions {
  /** A loaded issuer, a source that may swap it (hot reload), or none yet (requests get UNAVAILABLE). */
  readonly issuer: Issuer | IssuerSource | undefined;
  readonly authenticator: TokenAuthenticator;
  readonly trustDomain: string;
  readonly controlPlaneNamespace: string;
  /** Leaf lifetime (upstream `issuanceLifetime`, default 24 h). */
  readonly issuanceLifetimeMs?: number;
  /** Backdating of NotBefore and extension of NotAfter (default 20 s). */
  readonly clockSkewMs?: number;
  /**
   * Where to register the CA's metrics (none: metrics are kept but not exported). The issuer
   * gauges read 0 while no issuer is loaded, so expiry alerts fire. One CA per registry.
   */
  readonly registry?: Registry;
}

/** PEM credentials for a TLS server (the controller's own certificate). */
export interface ServerCredentials {
  readonly certPem: string;
  readonly keyPem: string;
  /** Intermediates (issuer chain, no root), PEM; serve `certPem + chainPem`. */
  readonly chainPem: string;
  readonly notAfterMs: number;
}

const HOUR_MS = 3_600_000;

function isIssuerSource(v: Issuer | IssuerSource): v is IssuerSource {
  return typeof (v as Partial<IssuerSource>).current === 'function';
}

const refuse = (code: CertifyErrorCode, reason: CertifyRefusalReason, message: string): CertifyResult => ({ ok: false, code, reason, message });

/**
 * Issues workload certificates. Each request uses the issuer current at that moment, so a
 * reloaded issuer takes effect for the next request; in-flight requests finish with the old one.
 */
export class CertificateAuthority {
  readonly #issuer: () => Issuer | undefined;
  readonly #authenticator: TokenAuthenticator;
  readonly #domain: IdentityDomain;
  readonly #lifetimeMs: number;
  readonly #skewMs: number;
  readonly #issued: Counter;
  readonly #refused: Counter<'reason'>;

  constructor(opts: CertificateAuthorityOptions) {
    const issuer = opts.issuer;
    this.#issuer = issuer === undefined ? () => undefined : isIssuerSource(issuer) ? () => issuer.current() : () => issuer;
    this.#authenticator = opts.authenticator;
    this.#domain = { trustDomain: opts.trustDomain, controlPlaneNamespace: opts.controlPlaneNamespace };
    this.#lifetimeMs = opts.issuanceLifetimeMs ?? 24 * HOUR_MS;
    this.#skewMs = opts.clockSkewMs ?? 20_000;
    const registers = opts.registry !== undefined ? [opts.registry] : [];
    const { Counter, Gauge } = promClient();
    this.#issued = new Counter({ name: 'identity_cert_issued_total', help: 'Workload certificates issued', registers });
    this.#refused = new Counter({
      name: 'identity_cert_refused_total',
      help: 'Certify requests refused, by reason',
      labelNames: ['reason'] as const,
      registers,
    });
    const current = this.#issuer;
    new Gauge({
      name: 'identity_issuer_expiry_timestamp_seconds',
      help: 'NotAfter of the current issuer certificate (Unix seconds)',
      registers,
      collect() {
        const i = current();
        if (i === undefined) this.reset();
        else this.set(i.notAfterMs / 1000);
      },
    });
    new Gauge({
      name: 'issuer_cert_ttl_seconds',
      help: 'Seconds until the current issuer certificate expires',
      registers,
      collect() {
        const i = current();
        if (i === undefined) this.reset();
        else this.set(Math.floor((i.notAfterMs - Date.now()) / 1000));
      },
    });
  }

  /** The identity a ServiceAccount gets in this mesh. */
  identityOf(namespace: string, serviceAccount: string): string {
    return serviceAccountIdentity(this.#domain, namespace, serviceAccount);
  }

  /** Handles one Certify request (never throws; unexpected failures are `INTERNAL`). */
  async certify(req: CertifyRequest, now: number = Date.now()): Promise<CertifyResult> {
    let result: CertifyResult;
    try {
      result = await this.#certify(req, now);
    } catch (e) {
      result = refuse('INTERNAL', 'internal', `cannot issue a certificate: ${errorMessage(e)}`);
    }
    if (result.ok) this.#issued.inc();
    else this.#refused.inc({ reason: result.reason });
    return result;
  }

  async #certify(req: CertifyRequest, now: number): Promise<CertifyResult> {
    // Order as upstream: issuer, request fields, CSR, token, identity match.
    const issuer = this.#issuer();
    if (issuer === undefined) return refuse('UNAVAILABLE', 'no-issuer', 'Certify: issuer not initialized');
    if (now > issuer.chainNotAfterMs)
      return refuse('UNAVAILABLE', 'issuer-expired', `Certify: the issuer chain expired at ${new Date(issuer.chainNotAfterMs).toISOString()}`);

    const missing = [req.identity === '' && 'identity', req.token.length === 0 && 'token', req.csrDer.length === 0 && 'certificate_signing_request'].filter(
      (f) => f !== false,
    );
    if (missing.length > 0) return refuse('INVALID_ARGUMENT', 'missing-field', `missing ${missing.join(', ')}`);
    if (!isDerSequence(req.csrDer)) return refuse('INVALID_ARGUMENT', 'bad-csr', 'certificate_signing_request is not a DER PKCS#10 request');
    let csr: ParsedCsr;
    try {
      csr = parseCsr(req.csrDer);
    } catch (e) {
      return refuse('INVALID_ARGUMENT', 'bad-csr', `certificate_signing_request is not a DER PKCS#10 request: ${errorMessage(e)}`);
    }

    const csrProblem = checkCsr(csr, req.identity);
    if (csrProblem !== undefined) return csrProblem;

    let who: TokenAuthResult;
    try {
      who = await this.#authenticator.authenticate(req.token, now);
    } catch (e) {
      return refuse('UNAVAILABLE', 'authenticator-error', `cannot authenticate the token: ${errorMessage(e)}`);
    }
    if (!who.ok) return refuse('INVALID_ARGUMENT', 'bad-token', `invalid token: ${who.message}`);
    const tokenIdentity = this.identityOf(who.namespace, who.serviceAccount);
    if (tokenIdentity !== req.identity) {
      return refuse(
        'FAILED_PRECONDITION',
        'identity-mismatch',
        `requested identity did not match provided token: requested=${req.identity}; found=${tokenIdentity}`,
      );
    }

    const leaf = createLeafCertificate({ commonName: req.identity, dnsNames: [req.identity], ...this.#validity(issuer, now) }, csr.spkiDer, issuer.leafSigner);
    return { ok: true, leafDer: leaf.der, chainDer: issuer.chainDer, validUntilMs: leaf.notAfterMs };
  }

  #validity(issuer: Issuer, now: number): { notBeforeMs: number; notAfterMs: number } {
    return { notBeforeMs: now - this.#skewMs, notAfterMs: Math.min(now + this.#lifetimeMs + this.#skewMs, issuer.chainNotAfterMs) };
  }

  /**
   * A server certificate with a fresh ECDSA P-256 key for `dnsNames` (the controller's own TLS
   * identity), same profile and lifetime as workload leaves. Throws `MeshError`
   * `ERR_IDENTITY_NO_ISSUER` when no usable issuer is loaded.
   */
  async issueServerCertificate(dnsNames: readonly string[], now: number = Date.now()): Promise<ServerCredentials> {
    const first = dnsNames[0];
    if (first === undefined) throw new TypeError('issueServerCertificate needs at least one DNS name');
    const issuer = this.#issuer();
    if (issuer === undefined || now > issuer.chainNotAfterMs) throw new MeshError('ERR_IDENTITY_NO_ISSUER', 'no valid issuer is loaded');
    const keys = await generateEcKeyPair();
    const spki = KeyObject.from(keys.publicKey).export({ type: 'spki', format: 'der' });
    const leaf = createLeafCertificate({ commonName: first, dnsNames, ...this.#validity(issuer, now) }, new Uint8Array(spki), issuer.leafSigner);
    return {
      certPem: encodePem('CERTIFICATE', leaf.der),
      keyPem: await privateKeyToPem(keys.privateKey),
      chainPem: certificatesToPem(issuer.chainDer),
      notAfterMs: leaf.notAfterMs,
    };
  }
}

const SAN_KINDS: Readonly<Record<string, string>> = {
  email: 'email addresses',
  ip: 'IP addresses',
  uri: 'URIs',
  other: 'other names',
  x400: 'X.400 addresses',
  dn: 'directory names',
  edi: 'EDI party names',
  rid: 'registered IDs',
};

/** The §5.4 CSR rules; returns the refusal, or undefined when the CSR is acceptable. */
function checkCsr(csr: ParsedCsr, identity: string): CertifyResult | undefined {
  const fail = (reason: CertifyRefusalReason, message: string) => refuse('FAILED_PRECONDITION', reason, message);
  if (csr.keyAlgorithm !== OIDS.ecPublicKey) {
    return fail('not-ecdsa', `CSR must contain an ECDSA public key (got ${KEY_ALGORITHM_NAMES[csr.keyAlgorithm] ?? `key algorithm ${csr.keyAlgorithm}`})`);
  }
  if (csr.curve !== OIDS.p256) {
    const got = csr.curve === undefined ? 'an unknown curve' : (CURVE_NAMES[csr.curve] ?? csr.curve);
    return fail('bad-curve', `CSR key must be on curve P-256 (got ${got})`);
  }
  if (!selfSigned(csr)) return fail('bad-csr-signature', 'CSR signature does not verify with its own public key');

  if (csr.subjectAltNames.length > 1) return fail('bad-san', 'CSR has more than one subjectAltName extension');
  const names = csr.subjectAltNames[0] ?? [];
  const dns = names.filter((n) => n.type === 'dns');
  if (dns.length !== 1) return fail('bad-san', `CSR must have exactly one DNS name (has ${dns.length})`);
  if (dns[0]?.value !== identity) return fail('bad-san', `CSR name does not match requested identity: csr=${dns[0]?.value}; req=${identity}`);
  const other = names.filter((n) => n.type !== 'dns');
  if (other.length > 0) {
    const kinds = [...new Set(other.map((n) => SAN_KINDS[n.type] ?? `${n.type} names`))];
    return fail('bad-san', `cannot validate ${kinds.join(', ')} in the CSR`);
  }
  const cns = csr.commonNames;
  if (cns.length > 1 || (cns.length === 1 && cns[0] !== '' && cns[0] !== identity)) return fail('bad-cn', `invalid CommonName: ${cns.join(', ')}`);
  return undefined;
}

/** True when the request's ECDSA signature verifies with its own (P-256) key. */
function selfSigned(csr: ParsedCsr): boolean {
  const hash = ECDSA_SIGNATURE_HASHES[csr.signatureAlgorithm];
  if (hash === undefined) return false;
  try {
    return verify(hash, csr.infoDer, { key: p256PublicKey(csr), dsaEncoding: 'der' }, csr.signature);
  } catch {
    // Not a valid point on the curve, or a signature node:crypto cannot parse.
    return false;
  }
}

const b64url = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('base64url');

/**
 * The request's P-256 key as a KeyObject. An uncompressed point goes in as a JWK, which OpenSSL
 * imports at about half the cost of decoding the SPKI, with the same checks (coordinates in
 * range, point on the curve and in the group); other encodings go in as the SPKI.
 */
function p256PublicKey(csr: ParsedCsr): KeyObject {
  const point = csr.publicKey;
  if (point.length === 65 && point[0] === 0x04) {
    return createPublicKey({ key: { kty: 'EC', crv: 'P-256', x: b64url(point.subarray(1, 33)), y: b64url(point.subarray(33)) }, format: 'jwk' });
  }
  return createPublicKey({ key: Buffer.from(csr.spkiDer.buffer, csr.spkiDer.byteOffset, csr.spkiDer.length), format: 'der', type: 'spki' });
}
