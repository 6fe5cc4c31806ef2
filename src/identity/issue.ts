/**
 * Certificate building: self-signed roots, intermediate CAs and end-entity certificates, all
 * ECDSA with SHA-256. CA certificates (rare) are built with `@peculiar/x509`, loaded on first
 * use (x509.ts); end-entity certificates (the CA's hot path) with the DER encoder in `der.ts`
 * and signed synchronously by node:crypto, from parts precomputed once per issuer
 * ({@link LeafSigner}).
 */
import { createHash, type KeyObject, randomBytes, sign } from 'node:crypto';
import { OIDS, readSpki } from './csr.js';
import {
  bitString,
  boolean,
  children,
  decode,
  directoryString,
  expectChildren,
  expectTag,
  explicit,
  ia5Content,
  implicitPrimitive,
  integer,
  octetString,
  oid,
  readOid,
  sequence,
  set,
  TAG,
  time,
} from './der.js';
import type { CryptoKey } from './keys.js';
import { type X509, x509 } from './x509.js';

/**
 * A signer: its certificate (for the issuer name and key identifier) and private key. For a
 * loaded `Issuer`: `x509().X509Certificate` of `chainDer[0]`, and `signingKey`.
 */
export interface Signer {
  readonly cert: X509.X509Certificate;
  readonly key: CryptoKey;
}

const SIGNING = { name: 'ECDSA', hash: 'SHA-256' } as const;

/** A random positive 128-bit serial in minimal DER form (first byte 0x01–0x7f). */
export function randomSerial(): string {
  return Buffer.from(randomSerialBytes()).toString('hex');
}

/** {@link randomSerial} as bytes: the content octets of the serial's DER INTEGER. */
export function randomSerialBytes(): Uint8Array {
  const bytes = randomBytes(16);
  bytes[0] = ((bytes[0] as number) & 0x7f) | 0x01;
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
}

/** Certificate validity is encoded in whole seconds; round down so the encoded time is what we report. */
export function toCertTime(ms: number): Date {
  return new Date(Math.floor(ms / 1000) * 1000);
}

async function authorityKeyId(signer: X509.X509Certificate): Promise<X509.AuthorityKeyIdentifierExtension> {
  const lib = x509();
  // Reuse the signer's own SKI when it has one: OpenSSL matches AKI against it byte for byte.
  const ski = signer.getExtension<X509.SubjectKeyIdentifierExtension>(OIDS.subjectKeyIdentifier);
  if (ski !== null) return new lib.AuthorityKeyIdentifierExtension(ski.keyId);
  return lib.AuthorityKeyIdentifierExtension.create(signer.publicKey);
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
export async function createRootCertificate(spec: CaSpec, keys: { privateKey: CryptoKey; publicKey: CryptoKey }): Promise<X509.X509Certificate> {
  const lib = x509();
  const ski = await lib.SubjectKeyIdentifierExtension.create(keys.publicKey);
  return lib.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: [{ CN: [spec.commonName] }],
    notBefore: toCertTime(spec.notBeforeMs),
    notAfter: toCertTime(spec.notAfterMs),
    keys,
    signingAlgorithm: SIGNING,
    extensions: [
      new lib.BasicConstraintsExtension(true, spec.pathLength, true),
      new lib.KeyUsagesExtension(lib.KeyUsageFlags.keyCertSign | lib.KeyUsageFlags.cRLSign, true),
      ski,
      new lib.AuthorityKeyIdentifierExtension(ski.keyId),
    ],
  });
}

/** An intermediate CA signed by `signer`. */
export async function createIntermediateCertificate(spec: CaSpec, publicKey: CryptoKey, signer: Signer): Promise<X509.X509Certificate> {
  const lib = x509();
  return lib.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: [{ CN: [spec.commonName] }],
    issuer: signer.cert.subjectName,
    notBefore: toCertTime(spec.notBeforeMs),
    notAfter: toCertTime(spec.notAfterMs),
    publicKey,
    signingKey: signer.key,
    signingAlgorithm: SIGNING,
    extensions: [
      new lib.BasicConstraintsExtension(true, spec.pathLength, true),
      new lib.KeyUsagesExtension(lib.KeyUsageFlags.keyCertSign | lib.KeyUsageFlags.cRLSign, true),
      await lib.SubjectKeyIdentifierExtension.create(publicKey),
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
 * What signing end-entity certificates needs of an issuer, precomputed once: the issuer Name
 * (the issuer certificate's subject, verbatim), the AuthorityKeyIdentifier extension (the
 * issuer's own SKI, else the SHA-1 of its key) and the private key as a node:crypto KeyObject.
 */
export interface LeafSigner {
  /** DER Name. */
  readonly issuerName: Uint8Array;
  /** DER Extension (authorityKeyIdentifier, keyIdentifier only, not critical). */
  readonly authorityKeyIdExtension: Uint8Array;
  readonly key: KeyObject;
}

/** A DER Extension (`id`: the encoded OID). */
function extension(id: Uint8Array, critical: boolean, valueDer: Uint8Array): Uint8Array {
  return critical ? sequence(id, boolean(true), octetString(valueDer)) : sequence(id, octetString(valueDer));
}

const sha1 = (data: Uint8Array): Uint8Array => new Uint8Array(createHash('sha1').update(data).digest());

/**
 * The {@link LeafSigner} of an issuer certificate (DER) and its private key. Throws `DerError`
 * when the certificate is not strict DER.
 */
export function leafSignerOf(issuerCertDer: Uint8Array, key: KeyObject): LeafSigner {
  const [tbs] = expectChildren(decode(issuerCertDer), 'certificate', 3);
  const fields = children(expectTag(tbs, TAG.SEQUENCE, 'tbsCertificate'));
  // [0] version (absent for v1), serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, [1], [2], [3] extensions
  const at = fields[0]?.tag === 0xa0 ? 1 : 0;
  const subject = expectTag(fields[at + 4], TAG.SEQUENCE, 'issuer subject');
  const spki = readSpki(fields[at + 5]);
  let keyId: Uint8Array | undefined;
  const extensions = fields.slice(at + 6).find((f) => f.tag === 0xa3);
  if (extensions !== undefined) {
    const [list] = expectChildren(extensions, 'extensions', 1, 1, 0xa3);
    for (const ext of expectChildren(list, 'extensions', 1, Number.MAX_SAFE_INTEGER)) {
      const parts = expectChildren(ext, 'extension', 2, 3);
      if (readOid(parts[0], 'extension id') !== OIDS.subjectKeyIdentifier) continue;
      const value = expectTag(parts[parts.length - 1], TAG.OCTET_STRING, 'subjectKeyIdentifier').content;
      keyId = expectTag(decode(value), TAG.OCTET_STRING, 'subjectKeyIdentifier').content;
    }
  }
  // As OpenSSL matches AKI against the issuer's SKI byte for byte, reuse it when there is one.
  keyId ??= sha1(spki.publicKey);
  return {
    issuerName: subject.bytes.slice(),
    authorityKeyIdExtension: extension(oid(OIDS.authorityKeyIdentifier), false, sequence(implicitPrimitive(0, keyId))),
    key,
  };
}

const VERSION_V3 = explicit(0, integer(2));
const ECDSA_WITH_SHA256 = sequence(oid(OIDS.ecdsaWithSha256));
const COMMON_NAME = oid(OIDS.commonName);
const SUBJECT_ALT_NAME = oid(OIDS.subjectAltName);
const SUBJECT_KEY_IDENTIFIER = oid(OIDS.subjectKeyIdentifier);
const LEAF_BASIC_CONSTRAINTS = extension(oid(OIDS.basicConstraints), true, sequence());
/** digitalSignature (bit 0) + keyEncipherment (bit 2): 0b101 in the top bits, 5 unused bits. */
const LEAF_KEY_USAGE = extension(oid(OIDS.keyUsage), true, bitString(Uint8Array.of(0xa0), 5));
const LEAF_EXT_KEY_USAGE = extension(oid(OIDS.extKeyUsage), false, sequence(oid(OIDS.serverAuth), oid(OIDS.clientAuth)));

/** An issued end-entity certificate. */
export interface IssuedLeaf {
  readonly der: Uint8Array;
  /** The encoded validity (whole seconds). */
  readonly notBeforeMs: number;
  readonly notAfterMs: number;
}

/**
 * An end-entity certificate as upstream issues them: basicConstraints CA:FALSE (critical),
 * keyUsage digitalSignature+keyEncipherment (critical), extKeyUsage serverAuth+clientAuth, DNS
 * SANs, SKI (SHA-1 of the subject key) and AKI; subject CN=`commonName`; the subject public key
 * info is copied verbatim from `spkiDer`. Signed ECDSA with SHA-256. Throws `DerError` for a
 * malformed `spkiDer`, `RangeError` for names that cannot be encoded.
 */
export function createLeafCertificate(spec: LeafSpec, spkiDer: Uint8Array, signer: LeafSigner, serial: Uint8Array = randomSerialBytes()): IssuedLeaf {
  const spki = readSpki(decode(spkiDer));
  const notBefore = toCertTime(spec.notBeforeMs).getTime();
  const notAfter = toCertTime(spec.notAfterMs).getTime();
  const tbs = sequence(
    VERSION_V3,
    integer(serial),
    ECDSA_WITH_SHA256,
    signer.issuerName,
    sequence(time(notBefore), time(notAfter)),
    sequence(set(sequence(COMMON_NAME, directoryString(spec.commonName)))),
    spkiDer,
    explicit(
      3,
      sequence(
        LEAF_BASIC_CONSTRAINTS,
        LEAF_KEY_USAGE,
        LEAF_EXT_KEY_USAGE,
        extension(SUBJECT_ALT_NAME, false, sequence(...spec.dnsNames.map((n) => implicitPrimitive(2, ia5Content(n))))),
        extension(SUBJECT_KEY_IDENTIFIER, false, octetString(sha1(spki.publicKey))),
        signer.authorityKeyIdExtension,
      ),
    ),
  );
  const signature = sign('sha256', tbs, { key: signer.key, dsaEncoding: 'der' });
  return { der: sequence(tbs, ECDSA_WITH_SHA256, bitString(signature)), notBeforeMs: notBefore, notAfterMs: notAfter };
}
