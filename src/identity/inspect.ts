/**
 * `ward identity inspect`: what a PEM file holds (a certificate or a chain), and whether it
 * verifies against trust anchors.
 */
import { MeshError } from '../shared/index.js';
import { extensionOf, hasKeyUsageBit, KEY_USAGE_BITS, type ParsedCertificate, parseCertificatesPem, sansOf, verifyChain } from './chain.js';
import { OIDS } from './csr.js';
import { decode, expectChildren, readOid } from './der.js';
import { describeKey } from './keys.js';

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
/** The keyUsage bits shown, in this order (encipherOnly and decipherOnly are not). */
const KEY_USAGE_NAMES = ['digitalSignature', 'nonRepudiation', 'keyEncipherment', 'dataEncipherment', 'keyAgreement', 'keyCertSign', 'cRLSign'] as const;
const EKU_NAMES: Readonly<Record<string, string>> = {
  [OIDS.serverAuth]: 'serverAuth',
  [OIDS.clientAuth]: 'clientAuth',
  '1.3.6.1.5.5.7.3.3': 'codeSigning',
  '1.3.6.1.5.5.7.3.4': 'emailProtection',
  '1.3.6.1.5.5.7.3.8': 'timeStamping',
  '1.3.6.1.5.5.7.3.9': 'ocspSigning',
};

/** The purposes of an extKeyUsage extension value (SEQUENCE OF OID), in order; unknown ones as dotted OIDs. */
function extKeyUsageNames(valueDer: Uint8Array): string[] {
  return expectChildren(decode(valueDer), 'extKeyUsage', 0, Number.MAX_SAFE_INTEGER).map((el) => {
    const oid = readOid(el, 'extKeyUsage purpose');
    return EKU_NAMES[oid] ?? oid;
  });
}

function summarize(c: ParsedCertificate): CertificateSummary {
  const ku = extensionOf(c, OIDS.keyUsage);
  const eku = extensionOf(c, OIDS.extKeyUsage);
  return {
    subject: c.subject,
    issuer: c.issuer,
    sans: sansOf(c).map((n) => `${SAN_PREFIX[n.type] ?? n.type}:${n.value}`),
    notBefore: new Date(c.notBeforeMs).toISOString(),
    notAfter: new Date(c.notAfterMs).toISOString(),
    serial: c.node.serialNumber.toUpperCase(),
    isCa: c.node.ca,
    keyType: describeKey(c.node.publicKey),
    fingerprintSha256: c.node.fingerprint256,
    keyUsage: ku === undefined ? [] : KEY_USAGE_NAMES.filter((name) => hasKeyUsageBit(ku.value, KEY_USAGE_BITS[name])),
    extKeyUsage: eku === undefined ? [] : extKeyUsageNames(eku.value),
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
