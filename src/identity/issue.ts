/**
 * Certificate building: self-signed roots, intermediate CAs and end-entity certificates, all
 * ECDSA with SHA-256.
 */
import { randomBytes } from 'node:crypto';
import { type CryptoKey, OID, x509 } from './x509.js';

/** A signer: its certificate (for the issuer name and key identifier) and private key. */
export interface Signer {
  readonly cert: x509.X509Certificate;
  readonly key: CryptoKey;
}

const SIGNING = { name: 'ECDSA', hash: 'SHA-256' } as const;

/** A random positive 128-bit serial in minimal DER form (first byte 0x01–0x7f). */
export function randomSerial(): string {
  const bytes = randomBytes(16);
  bytes[0] = ((bytes[0] as number) & 0x7f) | 0x01;
  return bytes.toString('hex');
}

/** Certificate validity is encoded in whole seconds; round down so the encoded time is what we report. */
export function toCertTime(ms: number): Date {
  return new Date(Math.floor(ms / 1000) * 1000);
}

async function authorityKeyId(signer: x509.X509Certificate): Promise<x509.AuthorityKeyIdentifierExtension> {
  // Reuse the signer's own SKI when it has one: OpenSSL matches AKI against it byte for byte.
  const ski = signer.getExtension<x509.SubjectKeyIdentifierExtension>(OID.subjectKeyIdentifier);
  if (ski !== null) return new x509.AuthorityKeyIdentifierExtension(ski.keyId);
  return x509.AuthorityKeyIdentifierExtension.create(signer.publicKey);
}

/** Parameters of a CA certificate. */
export interface CaSpec {
  readonly commonName: string;
  readonly notBeforeMs: number;
  readonly notAfterMs: number;
  /** Max intermediates below this CA; undefined = unlimited (roots). */
  readonly pathLength?: number | undefined;
}

/** A self-signed root CA (basicConstraints CA critical, keyUsage keyCertSign+cRLSign critical). */
export async function createRootCertificate(spec: CaSpec, keys: { privateKey: CryptoKey; publicKey: CryptoKey }): Promise<x509.X509Certificate> {
  const ski = await x509.SubjectKeyIdentifierExtension.create(keys.publicKey);
  return x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: [{ CN: [spec.commonName] }],
    notBefore: toCertTime(spec.notBeforeMs),
    notAfter: toCertTime(spec.notAfterMs),
    keys,
    signingAlgorithm: SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(true, spec.pathLength, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      ski,
      new x509.AuthorityKeyIdentifierExtension(ski.keyId),
    ],
  });
}

/** An intermediate CA signed by `signer`. */
export async function createIntermediateCertificate(spec: CaSpec, publicKey: CryptoKey, signer: Signer): Promise<x509.X509Certificate> {
  return x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: [{ CN: [spec.commonName] }],
    issuer: signer.cert.subjectName,
    notBefore: toCertTime(spec.notBeforeMs),
    notAfter: toCertTime(spec.notAfterMs),
    publicKey,
    signingKey: signer.key,
    signingAlgorithm: SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(true, spec.pathLength, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(publicKey),
      await authorityKeyId(signer.cert),
    ],
  });
}

/** Parameters of an end-entity certificate. */
export interface LeafSpec {
  readonly commonName: string;
  readonly dnsNames: readonly string[];
  readonly notBeforeMs: number;
  readonly notAfterMs: number;
}

/**
 * An end-entity certificate as upstream issues them: basicConstraints CA:FALSE, keyUsage
 * digitalSignature+keyEncipherment, extKeyUsage serverAuth+clientAuth, DNS SANs, SKI/AKI.
 */
export async function createLeafCertificate(spec: LeafSpec, publicKey: x509.PublicKey | CryptoKey, signer: Signer): Promise<x509.X509Certificate> {
  return x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: [{ CN: [spec.commonName] }],
    issuer: signer.cert.subjectName,
    notBefore: toCertTime(spec.notBeforeMs),
    notAfter: toCertTime(spec.notAfterMs),
    publicKey,
    signingKey: signer.key,
    signingAlgorithm: SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth], false),
      new x509.SubjectAlternativeNameExtension(
        spec.dnsNames.map((value) => ({ type: 'dns' as const, value })),
        false,
      ),
      await x509.SubjectKeyIdentifierExtension.create(publicKey),
      await authorityKeyId(signer.cert),
    ],
  });
}
