/**
 * Parsed certificates (node:crypto for verification, the strict DER reader for validity,
 * names and extensions) and chain verification against trust anchors.
 */
import { X509Certificate as NodeX509Certificate } from 'node:crypto';
import { errorMessage } from '../shared/index.js';
import { type CsrExtension, OIDS, readExtension, readGeneralNames } from './csr.js';
import { children, type DerElement, DerError, decode, expectChildren, expectTag, readOid, readTime, TAG } from './der.js';
import { attributeValueText, formatName } from './name.js';
import { certificatesFromPem } from './pem.js';

/** One extension of a certificate: its OID, criticality and the DER of its value. */
export type CertificateExtension = CsrExtension;

/** One certificate, parsed once. */
export interface ParsedCertificate {
  readonly der: Uint8Array;
  readonly node: NodeX509Certificate;
  /** The subject as text (`CN=identity.linkerd.cluster.local`; `(empty subject)` when empty). */
  readonly subject: string;
  /** The issuer as text, same format (empty when the name is). */
  readonly issuer: string;
  readonly notBeforeMs: number;
  readonly notAfterMs: number;
  /** The extensions, in order. */
  readonly extensions: readonly CertificateExtension[];
}

/** Parses one DER certificate; throws on malformed input (node:crypto's error, or `DerError` for non-DER framing). */
export function parseCertificate(der: Uint8Array): ParsedCertificate {
  const node = new NodeX509Certificate(der);
  const [tbs] = expectChildren(decode(der), 'certificate', 3);
  const fields = children(expectTag(tbs, TAG.SEQUENCE, 'tbsCertificate'));
  // [0] version (absent for v1), serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, [1], [2], [3] extensions
  const at = fields[0]?.tag === 0xa0 ? 1 : 0;
  const [notBefore, notAfter] = expectChildren(fields[at + 3], 'validity', 2);
  const extensionsField = fields.slice(at + 6).find((f) => f.tag === 0xa3);
  let extensions: CertificateExtension[] = [];
  if (extensionsField !== undefined) {
    const [list] = expectChildren(extensionsField, 'extensions', 1, 1, 0xa3);
    // RFC 5280 says SIZE (1..MAX), but builders (@peculiar/x509 among them) write an empty list.
    extensions = expectChildren(list, 'extensions', 0, Number.MAX_SAFE_INTEGER).map(readExtension);
  }
  return {
    der,
    node,
    subject: formatName(expectTag(fields[at + 4], TAG.SEQUENCE, 'subject')) || '(empty subject)',
    issuer: formatName(expectTag(fields[at + 2], TAG.SEQUENCE, 'issuer')),
    notBeforeMs: readTime(notBefore, 'notBefore'),
    notAfterMs: readTime(notAfter, 'notAfter'),
    extensions,
  };
}

/** The first extension of `cert` with this OID (as `@peculiar/x509`'s `getExtension`), or undefined. */
export function extensionOf(cert: ParsedCertificate, oid: string): CertificateExtension | undefined {
  return cert.extensions.find((e) => e.oid === oid);
}

/** Every certificate of a PEM text, or why not. */
export function parseCertificatesPem(text: string): { ok: true; certs: ParsedCertificate[] } | { ok: false; detail: string } {
  const ders = certificatesFromPem(text);
  if (ders.length === 0) return { ok: false, detail: 'no PEM "CERTIFICATE" block found' };
  const certs: ParsedCertificate[] = [];
  for (const [i, der] of ders.entries()) {
    try {
      certs.push(parseCertificate(der));
    } catch (e) {
      return { ok: false, detail: `certificate #${i + 1} is malformed (${errorMessage(e)})` };
    }
  }
  return { ok: true, certs };
}

/** The DNS SANs of a certificate, in order. */
export function dnsNamesOf(cert: ParsedCertificate): string[] {
  return sansOf(cert)
    .filter((n) => n.type === 'dns')
    .map((n) => n.value);
}

/** KeyUsage bits (RFC 5280 4.2.1.3): bit 0, digitalSignature, is the first bit of the BIT STRING. */
export const KEY_USAGE_BITS = {
  digitalSignature: 0,
  nonRepudiation: 1,
  keyEncipherment: 2,
  dataEncipherment: 3,
  keyAgreement: 4,
  keyCertSign: 5,
  cRLSign: 6,
  encipherOnly: 7,
  decipherOnly: 8,
} as const;

/**
 * Whether bit `n` of a keyUsage extension value (the DER of a BIT STRING) is set. Bits past the
 * end are clear; like `@peculiar/x509`, unused trailing bits are ignored whatever their value.
 */
export function hasKeyUsageBit(valueDer: Uint8Array, n: number): boolean {
  const c = expectTag(decode(valueDer), TAG.BIT_STRING, 'keyUsage').content;
  const unusedBits = c[0];
  if (unusedBits === undefined || unusedBits > 7 || (c.length === 1 && unusedBits !== 0)) throw new DerError('keyUsage: malformed BIT STRING');
  return n < (c.length - 1) * 8 - unusedBits && (((c[1 + (n >> 3)] as number) >> (7 - (n & 7))) & 1) === 1;
}

/**
 * All SANs as `{type, value}`, with the type names and value texts `@peculiar/x509` used (and
 * `ward identity inspect` shows): `dns`, `email`, `url`, `ip` (see `formatIp`), `id` (a dotted
 * OID), `dn` (a Name as text), `upn` and `guid` (Microsoft otherNames). Other otherNames, which
 * the library refused, are `other` with the type OID as value; X.400 and EDI names, `x400` and
 * `edi` with an empty value. Throws `DerError` for a malformed extension.
 */
export function sansOf(cert: ParsedCertificate): { type: string; value: string }[] {
  const ext = extensionOf(cert, OIDS.subjectAltName);
  if (ext === undefined) return [];
  const elements = children(decode(ext.value));
  return readGeneralNames(ext.value).map((n, i) => {
    const el = elements[i] as DerElement;
    switch (n.type) {
      case 'uri':
        return { type: 'url', value: n.value ?? '' };
      case 'rid':
        return { type: 'id', value: readOid({ tag: TAG.OID, bytes: el.bytes, content: el.content }, 'subjectAltName registeredID') };
      case 'dn':
        return { type: 'dn', value: formatName(expectChildren(el, 'subjectAltName directoryName', 1, 1, el.tag)[0] as DerElement) };
      case 'other':
        return otherName(el);
      default:
        return { type: n.type, value: n.value ?? '' };
    }
  });
}

const UPN = '1.3.6.1.4.1.311.20.2.3';
const GUID = '1.3.6.1.4.1.311.25.1';

/** An otherName (`[0] { type-id OID, [0] EXPLICIT value }`): a UPN or GUID as the library printed them. */
function otherName(el: DerElement): { type: string; value: string } {
  const [typeId, wrapped] = children(el);
  const oid = readOid(typeId, 'otherName type-id');
  const [value] = expectChildren(wrapped, 'otherName value', 1, 1, 0xa0) as [DerElement];
  if (oid === UPN) {
    const text = attributeValueText(value);
    if (text === undefined) throw new DerError('otherName UPN: not a string');
    return { type: 'upn', value: text };
  }
  if (oid === GUID) {
    const hex = Buffer.from(expectTag(value, TAG.OCTET_STRING, 'otherName GUID').content).toString('hex');
    const m = /^([0-9a-f]{8})([0-9a-f]{4})([0-9a-f]{4})([0-9a-f]{4})([0-9a-f]{12})$/.exec(hex);
    if (m === null) throw new DerError('otherName GUID: not 16 octets');
    // The first three fields are little-endian in the encoding.
    const swap = (h: string) => Buffer.from(h, 'hex').reverse().toString('hex');
    return { type: 'guid', value: [swap(m[1] as string), swap(m[2] as string), swap(m[3] as string), m[4], m[5]].join('-') };
  }
  return { type: 'other', value: oid };
}

const iso = (ms: number) => new Date(ms).toISOString();

/** Why `cert` is not valid at `nowMs`, or undefined when it is. */
export function validityProblem(cert: ParsedCertificate, nowMs: number): string | undefined {
  if (nowMs < cert.notBeforeMs) return `${cert.subject} is not valid before ${iso(cert.notBeforeMs)}`;
  if (nowMs > cert.notAfterMs) return `${cert.subject} expired at ${iso(cert.notAfterMs)}`;
  return undefined;
}

function signedBy(child: ParsedCertificate, parent: ParsedCertificate): boolean {
  try {
    return parent.node.ca && child.node.checkIssued(parent.node) && child.node.verify(parent.node.publicKey);
  } catch {
    return false;
  }
}

/**
 * Verifies that `chain[0]` is signed by `chain[1]` … and the last one by (or is) one of the
 * `anchors`; every signer must be a CA. With `nowMs`, every certificate used (anchor included)
 * must also be valid at that time. Returns why not, or undefined when the chain verifies.
 */
export function verifyChain(chain: readonly ParsedCertificate[], anchors: readonly ParsedCertificate[], nowMs?: number): string | undefined {
  if (chain.length === 0) return 'no certificate';
  if (anchors.length === 0) return 'no trust anchors';
  for (const [i, cert] of chain.entries()) {
    if (nowMs !== undefined) {
      const problem = validityProblem(cert, nowMs);
      if (problem !== undefined) return problem;
    }
    const parent = chain[i + 1];
    if (parent !== undefined && !signedBy(cert, parent)) return `${cert.subject} is not signed by the next certificate in the chain (${parent.subject})`;
  }
  const last = chain[chain.length - 1] as ParsedCertificate;
  const fp = last.node.fingerprint256;
  const candidates = anchors.filter((a) => a.node.fingerprint256 === fp || signedBy(last, a));
  if (candidates.length === 0) return `${last.subject} is not signed by any trust anchor (issuer ${last.issuer})`;
  if (nowMs === undefined) return undefined;
  const valid = candidates.find((a) => validityProblem(a, nowMs) === undefined);
  if (valid === undefined) return `trust anchor ${validityProblem(candidates[0] as ParsedCertificate, nowMs)}`;
  return undefined;
}

/** The anchor that signed (or is) the last certificate of a verified chain. */
export function anchorOf(chain: readonly ParsedCertificate[], anchors: readonly ParsedCertificate[]): ParsedCertificate | undefined {
  const last = chain[chain.length - 1];
  if (last === undefined) return undefined;
  return anchors.find((a) => a.node.fingerprint256 === last.node.fingerprint256 || signedBy(last, a));
}
