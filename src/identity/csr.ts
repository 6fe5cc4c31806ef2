/**
 * PKCS#10 certification requests (RFC 2986), read with the strict DER reader: just the parts
 * Certify checks, each a view of the request's own bytes.
 */
import {
  children,
  type DerElement,
  DerError,
  decode,
  expectChildren,
  expectTag,
  readBoolean,
  readIntegerBytes,
  readOctetAlignedBitString,
  readOid,
  readString,
  TAG,
} from './der.js';

/** OIDs the CA reads or writes. */
export const OIDS = {
  ecPublicKey: '1.2.840.10045.2.1',
  rsaEncryption: '1.2.840.113549.1.1.1',
  rsaPss: '1.2.840.113549.1.1.10',
  dsa: '1.2.840.10040.4.1',
  ed25519: '1.3.101.112',
  ed448: '1.3.101.113',
  p256: '1.2.840.10045.3.1.7',
  p384: '1.3.132.0.34',
  p521: '1.3.132.0.35',
  secp256k1: '1.3.132.0.10',
  ecdsaWithSha1: '1.2.840.10045.4.1',
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  ecdsaWithSha384: '1.2.840.10045.4.3.3',
  ecdsaWithSha512: '1.2.840.10045.4.3.4',
  extensionRequest: '1.2.840.113549.1.9.14',
  commonName: '2.5.4.3',
  subjectKeyIdentifier: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  extKeyUsage: '2.5.29.37',
  authorityKeyIdentifier: '2.5.29.35',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
} as const;

/** Key algorithms by OID, for messages. */
export const KEY_ALGORITHM_NAMES: Readonly<Record<string, string>> = {
  [OIDS.ecPublicKey]: 'ECDSA',
  [OIDS.rsaEncryption]: 'RSA',
  [OIDS.rsaPss]: 'RSA-PSS',
  [OIDS.dsa]: 'DSA',
  [OIDS.ed25519]: 'Ed25519',
  [OIDS.ed448]: 'Ed448',
};

/** Named curves by OID (WebCrypto names where there is one). */
export const CURVE_NAMES: Readonly<Record<string, string>> = {
  [OIDS.p256]: 'P-256',
  [OIDS.p384]: 'P-384',
  [OIDS.p521]: 'P-521',
  [OIDS.secp256k1]: 'secp256k1',
};

/** ECDSA signature algorithms a request may be signed with, and their digests. */
export const ECDSA_SIGNATURE_HASHES: Readonly<Record<string, string>> = {
  [OIDS.ecdsaWithSha1]: 'sha1',
  [OIDS.ecdsaWithSha256]: 'sha256',
  [OIDS.ecdsaWithSha384]: 'sha384',
  [OIDS.ecdsaWithSha512]: 'sha512',
};

/** One subjectAltName entry; `value` is set for the string-typed kinds (dns, email, uri) and for ip (see {@link formatIp}). */
export interface GeneralName {
  readonly type: GeneralNameType;
  readonly value?: string;
}

/** GeneralName alternatives (RFC 5280 4.2.1.6) by context tag number. */
export type GeneralNameType = 'other' | 'email' | 'dns' | 'x400' | 'dn' | 'edi' | 'uri' | 'ip' | 'rid';
const GENERAL_NAME_TYPES: readonly GeneralNameType[] = ['other', 'email', 'dns', 'x400', 'dn', 'edi', 'uri', 'ip', 'rid'];
/** Alternatives encoded constructed ([0] otherName, [3] ORAddress, [4] Name, [5] EDIPartyName); the rest are primitive. */
const CONSTRUCTED_NAMES = new Set([0, 3, 4, 5]);

/** One extension of the request's extensionRequest attribute. */
export interface CsrExtension {
  readonly oid: string;
  readonly critical: boolean;
  /** extnValue's content (the DER of the extension value). */
  readonly value: Uint8Array;
}

/** What Certify needs of a PKCS#10 request. */
export interface ParsedCsr {
  /** certificationRequestInfo, as signed. */
  readonly infoDer: Uint8Array;
  /** subjectPKInfo, verbatim. */
  readonly spkiDer: Uint8Array;
  /** The key algorithm OID. */
  readonly keyAlgorithm: string;
  /** The named curve OID of an EC key (undefined when the parameters are not a named curve). */
  readonly curve: string | undefined;
  /** The subjectPublicKey bits (an EC point for EC keys). */
  readonly publicKey: Uint8Array;
  /** The signature algorithm OID. */
  readonly signatureAlgorithm: string;
  /** The signature BIT STRING's octets (a DER Ecdsa-Sig-Value for ECDSA). */
  readonly signature: Uint8Array;
  /** Every CN attribute of the subject, in order (non-string values as `#<hex DER>`). */
  readonly commonNames: readonly string[];
  readonly extensions: readonly CsrExtension[];
  /** The parsed names of each subjectAltName extension (normally at most one). */
  readonly subjectAltNames: readonly (readonly GeneralName[])[];
}

/**
 * Parses a DER PKCS#10 request strictly: one CertificationRequest with nothing after it, DER
 * framing throughout, at most one extensionRequest attribute, well-formed subjectAltNames.
 * Throws {@link DerError} naming what is wrong. Does not check the signature.
 */
export function parseCsr(der: Uint8Array): ParsedCsr {
  const [info, sigAlg, sig] = expectChildren(decode(der), 'CertificationRequest', 3) as [DerElement, DerElement, DerElement];
  const infoParts = expectChildren(info, 'certificationRequestInfo', 3, 4);
  const [version, subject, spki, attributes] = infoParts as [DerElement, DerElement, DerElement, DerElement | undefined];
  readIntegerBytes(version, 'version');
  const commonNames = readCommonNames(subject);
  const key = readSpki(spki);
  const [sigOid, sigParams] = expectChildren(sigAlg, 'signatureAlgorithm', 1, 2);
  const signatureAlgorithm = readOid(sigOid, 'signatureAlgorithm');
  if (sigParams !== undefined && (sigParams.tag !== TAG.NULL || sigParams.content.length !== 0)) {
    throw new DerError('signatureAlgorithm: unexpected parameters');
  }
  const signature = readOctetAlignedBitString(sig, 'signature');
  const extensions = attributes === undefined ? [] : readExtensionRequest(attributes);
  const subjectAltNames = extensions.filter((e) => e.oid === OIDS.subjectAltName).map((e) => readGeneralNames(e.value));
  return {
    infoDer: info.bytes,
    spkiDer: spki.bytes,
    ...key,
    signatureAlgorithm,
    signature,
    commonNames,
    extensions,
    subjectAltNames,
  };
}

/** An X.501 Name's CN values (RDNSequence of non-empty SETs of AttributeTypeAndValue). */
function readCommonNames(name: DerElement): string[] {
  const cns: string[] = [];
  for (const rdn of expectChildren(name, 'subject', 0, Number.MAX_SAFE_INTEGER)) {
    for (const atv of expectChildren(rdn, 'subject RDN', 1, Number.MAX_SAFE_INTEGER, TAG.SET)) {
      const [type, value] = expectChildren(atv, 'subject attribute', 2) as [DerElement, DerElement];
      if (readOid(type, 'subject attribute type') !== OIDS.commonName) continue;
      cns.push(readString(value, 'subject CN') ?? `#${Buffer.from(value.bytes).toString('hex')}`);
    }
  }
  return cns;
}

/** SubjectPublicKeyInfo: the algorithm, an EC key's named curve, the key bits. */
export function readSpki(spki: DerElement | undefined): { keyAlgorithm: string; curve: string | undefined; publicKey: Uint8Array } {
  const [alg, bits] = expectChildren(spki, 'subjectPublicKeyInfo', 2);
  const [algOid, params] = expectChildren(alg, 'subjectPublicKeyInfo algorithm', 1, 2);
  const keyAlgorithm = readOid(algOid, 'key algorithm');
  const curve = keyAlgorithm === OIDS.ecPublicKey && params?.tag === TAG.OID ? readOid(params, 'named curve') : undefined;
  return { keyAlgorithm, curve, publicKey: readOctetAlignedBitString(bits, 'subjectPublicKey') };
}

/** The extensions of the `[0] IMPLICIT SET OF Attribute`'s extensionRequest, if any. */
function readExtensionRequest(attributes: DerElement): CsrExtension[] {
  let found: CsrExtension[] | undefined;
  for (const attr of expectChildren(attributes, 'attributes', 0, Number.MAX_SAFE_INTEGER, 0xa0)) {
    const [type, values] = expectChildren(attr, 'attribute', 2) as [DerElement, DerElement];
    const valueList = expectChildren(values, 'attribute values', 1, Number.MAX_SAFE_INTEGER, TAG.SET);
    if (readOid(type, 'attribute type') !== OIDS.extensionRequest) continue;
    if (found !== undefined) throw new DerError('more than one extensionRequest attribute');
    if (valueList.length !== 1) throw new DerError('extensionRequest must have exactly one value');
    found = expectChildren(valueList[0], 'extensionRequest', 0, Number.MAX_SAFE_INTEGER).map(readExtension);
  }
  return found ?? [];
}

/** One Extension (`SEQUENCE { extnID, critical DEFAULT FALSE, extnValue }`) of a request or a certificate. */
export function readExtension(ext: DerElement): CsrExtension {
  const parts = expectChildren(ext, 'extension', 2, 3);
  const oid = readOid(parts[0], 'extension id');
  const critical = parts.length === 3 ? readBoolean(parts[1], `extension ${oid} critical`) : false;
  const value = expectTag(parts[parts.length - 1], TAG.OCTET_STRING, `extension ${oid} value`).content;
  return { oid, critical, value };
}

/** GeneralNames (a subjectAltName value): SEQUENCE OF GeneralName, exactly filling `der`. */
export function readGeneralNames(der: Uint8Array): GeneralName[] {
  return expectChildren(decode(der), 'subjectAltName', 0, Number.MAX_SAFE_INTEGER).map((n) => {
    const number = n.tag & 0x1f;
    const type = GENERAL_NAME_TYPES[number];
    if ((n.tag & 0xc0) !== 0x80 || type === undefined) throw new DerError(`subjectAltName: unexpected tag 0x${n.tag.toString(16)}`);
    const constructed = (n.tag & 0x20) !== 0;
    if (constructed !== CONSTRUCTED_NAMES.has(number)) throw new DerError(`subjectAltName: bad encoding of a ${type} name`);
    if (constructed) {
      children(n); // framing only
      return { type };
    }
    if (type === 'dns' || type === 'email' || type === 'uri') {
      const value = readString({ tag: TAG.IA5_STRING, bytes: n.bytes, content: n.content }, `subjectAltName ${type}`) as string;
      return { type, value };
    }
    if (type === 'ip') {
      if (n.content.length !== 4 && n.content.length !== 16) throw new DerError('subjectAltName: bad IP address length');
      return { type, value: formatIp(n.content) };
    }
    if (type === 'rid') readOid({ tag: TAG.OID, bytes: n.bytes, content: n.content }, 'subjectAltName registeredID');
    return { type };
  });
}

/**
 * An IP address as `@peculiar/x509` printed it (and `ward identity inspect` still does): IPv4
 * dotted, IPv6 as eight lower-case hex groups without leading zeros, the first longest run of
 * two or more zero groups compressed to `::` (RFC 5952, except that IPv4-mapped addresses stay hex).
 */
export function formatIp(bytes: Uint8Array): string {
  if (bytes.length === 4) return Array.from(bytes).join('.');
  if (bytes.length !== 16) throw new RangeError(`an IP address has 4 or 16 octets, not ${bytes.length}`);
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((((bytes[i] as number) << 8) | (bytes[i + 1] as number)).toString(16));
  let bestAt = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    let end = i;
    while (groups[end] === '0') end++;
    if (end - i > bestLength) {
      bestAt = i;
      bestLength = end - i;
    }
    i = end > i ? end : i + 1;
  }
  if (bestAt < 0) return groups.join(':');
  return `${groups.slice(0, bestAt).join(':')}::${groups.slice(bestAt + bestLength).join(':')}`;
}
