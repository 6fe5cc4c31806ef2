/**
 * `ward identity inspect`: what a PEM file holds (a certificate or a chain), and whether it
 * verifies against trust anchors.
 */
import { MeshError } from '../shared/index.js';
import { type ParsedCertificate, parseCertificatesPem, sansOf, verifyChain } from './chain.js';
import { describeKey } from './keys.js';
import { OID, x509 } from './x509.js';

/** One certificate, described. */
export interface CertificateSummary {
  readonly subject: string;
  readonly issuer: string;
  /** `DNS:name`, `IP:addr`, `URI:uri`, `email:addr`, … */
  readonly sans: readonly string[];
  /** ISO 8601. */
  readonly notBefore: string;
  readonly notAfter: string;
  /** Hex, upper case, as openssl prints it without colons. */
  readonly serial: string;
  readonly isCa: boolean;
  /** `ECDSA P-256`, `RSA 2048`, … */
  readonly keyType: string;
  /** `AB:CD:…` */
  readonly fingerprintSha256: string;
  readonly keyUsage: readonly string[];
  readonly extKeyUsage: readonly string[];
}

/** {@link inspectCertificate}'s report: the first certificate's fields, every certificate of the file, and the verification outcome. */
export interface CertificateReport extends CertificateSummary {
  /** Every certificate in the file, in order (the first is the one described above). */
  readonly chain: readonly CertificateSummary[];
  /** Present when anchors were given. */
  readonly verified?: boolean;
  readonly verifyError?: string;
}

const SAN_PREFIX: Readonly<Record<string, string>> = { dns: 'DNS', ip: 'IP', url: 'URI', email: 'email', upn: 'UPN', guid: 'GUID', id: 'RID' };
const KEY_USAGE_NAMES: readonly [number, string][] = [
  [x509.KeyUsageFlags.digitalSignature, 'digitalSignature'],
  [x509.KeyUsageFlags.nonRepudiation, 'nonRepudiation'],
  [x509.KeyUsageFlags.keyEncipherment, 'keyEncipherment'],
  [x509.KeyUsageFlags.dataEncipherment, 'dataEncipherment'],
  [x509.KeyUsageFlags.keyAgreement, 'keyAgreement'],
  [x509.KeyUsageFlags.keyCertSign, 'keyCertSign'],
  [x509.KeyUsageFlags.cRLSign, 'cRLSign'],
];
const EKU_NAMES: Readonly<Record<string, string>> = {
  [x509.ExtendedKeyUsage.serverAuth]: 'serverAuth',
  [x509.ExtendedKeyUsage.clientAuth]: 'clientAuth',
  [x509.ExtendedKeyUsage.codeSigning]: 'codeSigning',
  [x509.ExtendedKeyUsage.emailProtection]: 'emailProtection',
  [x509.ExtendedKeyUsage.timeStamping]: 'timeStamping',
  [x509.ExtendedKeyUsage.ocspSigning]: 'ocspSigning',
};

function summarize(c: ParsedCertificate): CertificateSummary {
  const ku = c.x.getExtension<x509.KeyUsagesExtension>(OID.keyUsage);
  const eku = c.x.getExtension<x509.ExtendedKeyUsageExtension>(OID.extKeyUsage);
  return {
    subject: c.subject,
    issuer: c.x.issuer,
    sans: sansOf(c).map((n) => `${SAN_PREFIX[n.type] ?? n.type}:${n.value}`),
    notBefore: new Date(c.notBeforeMs).toISOString(),
    notAfter: new Date(c.notAfterMs).toISOString(),
    serial: c.node.serialNumber.toUpperCase(),
    isCa: c.node.ca,
    keyType: describeKey(c.node.publicKey),
    fingerprintSha256: c.node.fingerprint256,
    keyUsage: ku === null ? [] : KEY_USAGE_NAMES.filter(([bit]) => (ku.usages & bit) !== 0).map(([, name]) => name),
    extKeyUsage: eku === null ? [] : Array.from(eku.usages, (u) => EKU_NAMES[String(u)] ?? String(u)),
  };
}

/**
 * Describes the certificates of a PEM text (a leaf, possibly followed by its chain). With
 * `anchorsPem`, also verifies the chain (signatures and validity at `nowMs`) against those
 * anchors. Throws `MeshError` `ERR_IDENTITY_PEM` when the text holds no readable certificate.
 */
export function inspectCertificate(pem: string, anchorsPem?: string, nowMs: number = Date.now()): CertificateReport {
  const parsed = parseCertificatesPem(pem);
  if (!parsed.ok) throw new MeshError('ERR_IDENTITY_PEM', parsed.detail);
  const chain = parsed.certs.map(summarize);
  const first = chain[0] as CertificateSummary;
  if (anchorsPem === undefined) return { ...first, chain };
  const anchors = parseCertificatesPem(anchorsPem);
  if (!anchors.ok) throw new MeshError('ERR_IDENTITY_PEM', `trust anchors: ${anchors.detail}`);
  const problem = verifyChain(parsed.certs, anchors.certs, nowMs);
  return problem === undefined ? { ...first, chain, verified: true } : { ...first, chain, verified: false, verifyError: problem };
}
