import assert from 'node:assert/strict';
import { KeyObject, X509Certificate as NodeX509Certificate, webcrypto } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Issuer } from './ca.js';
import { OIDS, parseCsr } from './csr.js';
import { children, decode } from './der.js';
import { createLeafCertificate, createRootCertificate, type LeafSpec, leafSignerOf, randomSerialBytes, type Signer, toCertTime } from './issue.js';
import { generateEcKeyPair } from './keys.js';
import { encodePem } from './pem.js';
import { idOf, mkIdentityDir, mkThreeLevelDir, mustLoadIssuer, openssl, put, TempDirs } from './test-helpers.js';
import { createCsr, generateWorkloadKey } from './workload.js';
import { x509 as loadX509, type X509 } from './x509.js';

/** The library, for reference objects (tests may load it). */
const x509 = loadX509();
const dirs = new TempDirs();
after(() => dirs.cleanup());

const HOUR = 3_600_000;
const WEB = idOf('default', 'web');

/** The `@peculiar/x509` leaf builder the DER encoder replaced, kept as the reference. */
async function referenceLeaf(spec: LeafSpec, publicKey: X509.PublicKey, signer: Signer, serialHex: string): Promise<X509.X509Certificate> {
  const ski = signer.cert.getExtension<X509.SubjectKeyIdentifierExtension>(OIDS.subjectKeyIdentifier);
  const aki = ski !== null ? new x509.AuthorityKeyIdentifierExtension(ski.keyId) : await x509.AuthorityKeyIdentifierExtension.create(signer.cert.publicKey);
  return x509.X509CertificateGenerator.create({
    serialNumber: serialHex,
    subject: [{ CN: [spec.commonName] }],
    issuer: signer.cert.subjectName,
    notBefore: toCertTime(spec.notBeforeMs),
    notAfter: toCertTime(spec.notAfterMs),
    publicKey,
    signingKey: signer.key,
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth], false),
      new x509.SubjectAlternativeNameExtension(
        spec.dnsNames.map((value) => ({ type: 'dns' as const, value })),
        false,
      ),
      await x509.SubjectKeyIdentifierExtension.create(publicKey),
      aki,
    ],
  });
}

const tbsOf = (der: Uint8Array | ArrayBuffer) => Buffer.from((children(decode(new Uint8Array(der)))[0] as { bytes: Uint8Array }).bytes).toString('hex');

let dir: string;
let issuer: Issuer;
let csrDer: Uint8Array;

before(async () => {
  dir = await mkIdentityDir(dirs);
  issuer = await mustLoadIssuer(dir);
  csrDer = await createCsr(WEB, await generateWorkloadKey());
});

const signerOf = (i: Issuer): Signer => ({ cert: new x509.X509Certificate(i.chainDer[0] as Uint8Array), key: i.signingKey });

describe('createLeafCertificate', () => {
  it('encodes exactly the TBSCertificate the @peculiar/x509 builder did', async () => {
    const now = Date.now();
    const spki = parseCsr(csrDer).spkiDer;
    const publicKey = new x509.Pkcs10CertificateRequest(csrDer).publicKey;
    const longName = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.svc.cluster.local`;
    const specs: LeafSpec[] = [
      { commonName: WEB, dnsNames: [WEB], notBeforeMs: now - 20_000, notAfterMs: now + 24 * HOUR },
      // Names long enough for long-form lengths everywhere.
      { commonName: longName, dnsNames: [longName, WEB, 'localhost'], notBeforeMs: now, notAfterMs: now + HOUR },
      // Past 2049: GeneralizedTime.
      { commonName: WEB, dnsNames: [WEB], notBeforeMs: Date.parse('2049-12-31T23:59:59.5Z'), notAfterMs: Date.parse('2050-01-01T00:00:00Z') },
      // Not a PrintableString: UTF8String.
      { commonName: 'under_score é', dnsNames: ['x'], notBeforeMs: now, notAfterMs: now + HOUR },
    ];
    const deep = await mustLoadIssuer(await mkThreeLevelDir(dirs));
    for (const i of [issuer, deep]) {
      for (const spec of specs) {
        const serial = randomSerialBytes();
        const leaf = createLeafCertificate(spec, spki, i.leafSigner, serial);
        const reference = await referenceLeaf(spec, publicKey, signerOf(i), Buffer.from(serial).toString('hex'));
        assert.equal(tbsOf(leaf.der), tbsOf(reference.rawData), spec.commonName);
        assert.equal(leaf.notAfterMs, reference.notAfter.getTime());
        assert.equal(leaf.notBeforeMs, reference.notBefore.getTime());
      }
    }
  });

  it('takes the AKI from the issuer key when the issuer has no SKI', async () => {
    const keys = await generateEcKeyPair();
    const now = Date.now();
    // A CA without SKI/AKI extensions.
    const bare = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: '01',
      name: 'CN=bare, O=ward test',
      notBefore: new Date(now - HOUR),
      notAfter: new Date(now + HOUR),
      keys,
      signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
      extensions: [new x509.BasicConstraintsExtension(true, undefined, true)],
    });
    const signer = leafSignerOf(new Uint8Array(bare.rawData), KeyObject.from(keys.privateKey));
    const spec = { commonName: WEB, dnsNames: [WEB], notBeforeMs: now, notAfterMs: now + HOUR };
    const serial = randomSerialBytes();
    const leaf = createLeafCertificate(spec, parseCsr(csrDer).spkiDer, signer, serial);
    const reference = await referenceLeaf(
      spec,
      new x509.Pkcs10CertificateRequest(csrDer).publicKey,
      { cert: bare, key: keys.privateKey },
      Buffer.from(serial).toString('hex'),
    );
    assert.equal(tbsOf(leaf.der), tbsOf(reference.rawData));
    assert.ok(new NodeX509Certificate(leaf.der).verify(new NodeX509Certificate(new Uint8Array(bare.rawData)).publicKey));
  });

  it('issues a leaf node:crypto parses and verifies against the issuer', () => {
    const now = Math.floor(Date.now() / 1000) * 1000;
    const leaf = createLeafCertificate(
      { commonName: WEB, dnsNames: [WEB], notBeforeMs: now - 20_000, notAfterMs: now + HOUR },
      parseCsr(csrDer).spkiDer,
      issuer.leafSigner,
    );
    const cert = new NodeX509Certificate(leaf.der);
    const issuerCert = new NodeX509Certificate(issuer.chainDer[0] as Uint8Array);
    assert.equal(cert.subject, `CN=${WEB}`);
    assert.equal(cert.issuer, issuerCert.subject);
    assert.equal(cert.subjectAltName, `DNS:${WEB}`);
    assert.deepEqual(cert.keyUsage, ['1.3.6.1.5.5.7.3.1', '1.3.6.1.5.5.7.3.2']);
    assert.equal(cert.ca, false);
    assert.equal(Date.parse(cert.validFrom), now - 20_000);
    assert.equal(Date.parse(cert.validTo), now + HOUR);
    assert.ok(cert.checkIssued(issuerCert));
    assert.ok(cert.verify(issuerCert.publicKey));
    assert.match(cert.serialNumber, /^[0-7][0-9A-F]{31}$/);
  });

  it('shows the same extensions in openssl as the reference builder, and openssl verifies it', async () => {
    const now = Date.now();
    const spec = { commonName: WEB, dnsNames: [WEB], notBeforeMs: now - 20_000, notAfterMs: now + HOUR };
    const serial = randomSerialBytes();
    const out = dirs.make();
    const leafPath = put(out, 'leaf.pem', encodePem('CERTIFICATE', createLeafCertificate(spec, parseCsr(csrDer).spkiDer, issuer.leafSigner, serial).der));
    const reference = await referenceLeaf(spec, new x509.Pkcs10CertificateRequest(csrDer).publicKey, signerOf(issuer), Buffer.from(serial).toString('hex'));
    const refPath = put(out, 'ref.pem', reference.toString('pem'));
    const exts = ['basicConstraints', 'keyUsage', 'extendedKeyUsage', 'subjectAltName', 'subjectKeyIdentifier', 'authorityKeyIdentifier'].join(',');
    const shown = openssl(['x509', '-in', leafPath, '-noout', '-ext', exts]);
    assert.equal(shown.status, 0, shown.output);
    assert.equal(shown.output, openssl(['x509', '-in', refPath, '-noout', '-ext', exts]).output);
    const text = openssl(['x509', '-in', leafPath, '-noout', '-text']).output;
    assert.match(text, /X509v3 Basic Constraints: critical\s+CA:FALSE/);
    assert.match(text, /X509v3 Key Usage: critical\s+Digital Signature, Key Encipherment/);
    assert.match(text, /X509v3 Extended Key Usage: \s+TLS Web Server Authentication, TLS Web Client Authentication/);
    assert.match(text, new RegExp(`X509v3 Subject Alternative Name: \\s+DNS:${WEB.replaceAll('.', '\\.')}\\s`));
    assert.match(text, /X509v3 Subject Key Identifier: \s+([0-9A-F]{2}:){19}[0-9A-F]{2}/);
    assert.match(text, /X509v3 Authority Key Identifier: \s+([0-9A-F]{2}:){19}[0-9A-F]{2}/);
    assert.match(text, /Signature Algorithm: ecdsa-with-SHA256/);
    for (const purpose of [[], ['-purpose', 'sslserver'], ['-purpose', 'sslclient']]) {
      const v = openssl(['verify', ...purpose, '-CAfile', join(dir, 'ca.crt'), '-untrusted', join(dir, 'issuer.crt'), leafPath]);
      assert.equal(v.status, 0, v.output);
      assert.match(v.output, /leaf\.pem: OK/);
    }
  });

  it('signs with a P-384 issuer key as the reference builder did (ecdsa-with-SHA256)', async () => {
    const now = Date.now();
    const p384 = await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-384' }, true, ['sign', 'verify']);
    const root = await createRootCertificate({ commonName: 'root.p384', notBeforeMs: now - HOUR, notAfterMs: now + HOUR }, p384);
    const spec = { commonName: WEB, dnsNames: [WEB], notBeforeMs: now, notAfterMs: now + HOUR };
    const serial = randomSerialBytes();
    const leaf = createLeafCertificate(spec, parseCsr(csrDer).spkiDer, leafSignerOf(new Uint8Array(root.rawData), KeyObject.from(p384.privateKey)), serial);
    const reference = await referenceLeaf(
      spec,
      new x509.Pkcs10CertificateRequest(csrDer).publicKey,
      { cert: root, key: p384.privateKey },
      Buffer.from(serial).toString('hex'),
    );
    assert.equal(tbsOf(leaf.der), tbsOf(reference.rawData));
    assert.ok(new NodeX509Certificate(leaf.der).verify(new NodeX509Certificate(new Uint8Array(root.rawData)).publicKey));
  });

  it('copies the issuer name verbatim from the issuer certificate', () => {
    const subject = new NodeX509Certificate(readFileSync(join(dir, 'issuer.crt'), 'utf8')).subject;
    const leaf = new NodeX509Certificate(
      createLeafCertificate({ commonName: 'x', dnsNames: ['x'], notBeforeMs: 0, notAfterMs: 1000 }, parseCsr(csrDer).spkiDer, issuer.leafSigner).der,
    );
    assert.equal(leaf.issuer, subject);
  });
});
