import assert from 'node:assert/strict';
import { X509Certificate as NodeX509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { CertificateAuthority } from './certify.js';
import { type CertificateSummary, inspectCertificate } from './inspect.js';
import { describeKey, generateEcKeyPair } from './keys.js';
import { certificatesFromPem, certificatesToPem, encodePem } from './pem.js';
import { idOf, mkCa, mkIdentityDir, mkThreeLevelDir, openssl, put, TempDirs, tokenFor } from './test-helpers.js';
import { createCsr, generateWorkloadKey } from './workload.js';
import { type X509, x509 } from './x509.js';

const dirs = new TempDirs();
after(() => dirs.cleanup());

const WEB = idOf('default', 'web');
let dir: string;
let ca: CertificateAuthority;
let chainPem: string;
let anchors: string;
const now = Date.now();

before(async () => {
  dir = await mkIdentityDir(dirs);
  ca = await mkCa(dir);
  const res = await ca.certify({ identity: WEB, token: tokenFor(dir, 'default', 'web'), csrDer: await createCsr(WEB, await generateWorkloadKey()) }, now);
  assert.ok(res.ok);
  chainPem = encodePem('CERTIFICATE', res.leafDer) + certificatesToPem(res.chainDer);
  anchors = readFileSync(join(dir, 'ca.crt'), 'utf8');
});

describe('inspectCertificate', () => {
  it('describes a leaf and its chain', () => {
    const r = inspectCertificate(chainPem);
    assert.equal(r.subject, `CN=${WEB}`);
    assert.equal(r.issuer, 'CN=identity.linkerd.cluster.local');
    assert.deepEqual(r.sans, [`DNS:${WEB}`]);
    assert.equal(r.isCa, false);
    assert.equal(r.keyType, 'ECDSA P-256');
    assert.deepEqual(r.keyUsage, ['digitalSignature', 'keyEncipherment']);
    assert.deepEqual(r.extKeyUsage, ['serverAuth', 'clientAuth']);
    assert.equal(r.notBefore, new Date(Math.floor((now - 20_000) / 1000) * 1000).toISOString());
    assert.equal(r.chain.length, 2);
    assert.equal(r.chain[1]?.subject, 'CN=identity.linkerd.cluster.local');
    assert.equal(r.chain[1]?.isCa, true);
    assert.equal(r.verified, undefined);
    assert.equal('verifyError' in r, false);

    const file = put(dirs.make(), 'leaf.pem', chainPem);
    const fp = openssl(['x509', '-in', file, '-noout', '-fingerprint', '-sha256']).output;
    assert.equal(fp.trim().split('=')[1], r.fingerprintSha256);
    const serial = openssl(['x509', '-in', file, '-noout', '-serial']).output;
    assert.equal(serial.trim().replace(/^serial=/, ''), r.serial);
  });

  it('verifies against anchors', () => {
    assert.equal(inspectCertificate(chainPem, anchors).verified, true);
    // The issuer alone verifies too; the leaf alone does not (its issuer is missing).
    assert.equal(inspectCertificate(readFileSync(join(dir, 'issuer.crt'), 'utf8'), anchors).verified, true);
    assert.equal(inspectCertificate(anchors, anchors).verified, true);
    const leafOnly = inspectCertificate(chainPem.split(/(?<=-----END CERTIFICATE-----\n)/)[0] ?? '', anchors);
    assert.equal(leafOnly.verified, false);
    assert.match(leafOnly.verifyError ?? '', /is not signed by any trust anchor \(issuer CN=identity\.linkerd\.cluster\.local\)/);
  });

  it('reports a chain from other anchors, and expiry', async () => {
    const other = readFileSync(join(await mkIdentityDir(dirs), 'ca.crt'), 'utf8');
    const r = inspectCertificate(chainPem, other);
    assert.equal(r.verified, false);
    assert.match(r.verifyError ?? '', /not signed by any trust anchor/);
    const late = inspectCertificate(chainPem, anchors, now + 25 * 3_600_000);
    assert.equal(late.verified, false);
    assert.match(late.verifyError ?? '', new RegExp(`CN=${WEB.replaceAll('.', '\\.')} expired at `));
  });

  it('throws ERR_IDENTITY_PEM for files without certificates', () => {
    assert.throws(() => inspectCertificate('hello'), { code: 'ERR_IDENTITY_PEM', message: 'no PEM "CERTIFICATE" block found' });
    assert.throws(() => inspectCertificate('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n'), {
      code: 'ERR_IDENTITY_PEM',
      message: /certificate #1 is malformed/,
    });
    assert.throws(() => inspectCertificate(chainPem, 'nope'), { code: 'ERR_IDENTITY_PEM', message: /^trust anchors: / });
  });
});

/** What `inspect` showed when it read certificates with @peculiar/x509 (the code it replaced, as the reference). */
function librarySummary(der: Uint8Array): CertificateSummary {
  const lib = x509();
  const x = new lib.X509Certificate(der);
  const node = new NodeX509Certificate(der);
  const SAN_PREFIX: Record<string, string> = { dns: 'DNS', ip: 'IP', url: 'URI', email: 'email', upn: 'UPN', guid: 'GUID', id: 'RID' };
  const KEY_USAGE_NAMES: [number, string][] = [
    [lib.KeyUsageFlags.digitalSignature, 'digitalSignature'],
    [lib.KeyUsageFlags.nonRepudiation, 'nonRepudiation'],
    [lib.KeyUsageFlags.keyEncipherment, 'keyEncipherment'],
    [lib.KeyUsageFlags.dataEncipherment, 'dataEncipherment'],
    [lib.KeyUsageFlags.keyAgreement, 'keyAgreement'],
    [lib.KeyUsageFlags.keyCertSign, 'keyCertSign'],
    [lib.KeyUsageFlags.cRLSign, 'cRLSign'],
  ];
  const EKU_NAMES: Record<string, string> = {
    [lib.ExtendedKeyUsage.serverAuth]: 'serverAuth',
    [lib.ExtendedKeyUsage.clientAuth]: 'clientAuth',
    [lib.ExtendedKeyUsage.codeSigning]: 'codeSigning',
    [lib.ExtendedKeyUsage.emailProtection]: 'emailProtection',
    [lib.ExtendedKeyUsage.timeStamping]: 'timeStamping',
    [lib.ExtendedKeyUsage.ocspSigning]: 'ocspSigning',
  };
  const ku = x.getExtension<X509.KeyUsagesExtension>('2.5.29.15');
  const eku = x.getExtension<X509.ExtendedKeyUsageExtension>('2.5.29.37');
  const san = x.getExtension<X509.SubjectAlternativeNameExtension>('2.5.29.17');
  return {
    subject: x.subject || '(empty subject)',
    issuer: x.issuer,
    sans: san === null ? [] : san.names.items.map((n) => `${SAN_PREFIX[n.type] ?? n.type}:${n.value}`),
    notBefore: x.notBefore.toISOString(),
    notAfter: x.notAfter.toISOString(),
    serial: node.serialNumber.toUpperCase(),
    isCa: node.ca,
    keyType: describeKey(node.publicKey),
    fingerprintSha256: node.fingerprint256,
    keyUsage: ku === null ? [] : KEY_USAGE_NAMES.filter(([bit]) => (ku.usages & bit) !== 0).map(([, name]) => name),
    extKeyUsage: eku === null ? [] : Array.from(eku.usages, (u) => EKU_NAMES[String(u)] ?? String(u)),
  };
}

describe('inspectCertificate without @peculiar/x509', () => {
  it('shows what the library-based inspect showed', async () => {
    const lib = x509();
    const keys = await generateEcKeyPair();
    const odd = await lib.X509CertificateGenerator.createSelfSigned({
      serialNumber: '00ff01',
      name: 'CN=odd\\, name+OU=Unit, O=Example, C=DE',
      notBefore: new Date('2026-01-02T03:04:05Z'),
      notAfter: new Date('2060-01-02T03:04:05Z'),
      keys,
      signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
      extensions: [
        new lib.KeyUsagesExtension(
          lib.KeyUsageFlags.cRLSign | lib.KeyUsageFlags.nonRepudiation | lib.KeyUsageFlags.keyAgreement | lib.KeyUsageFlags.decipherOnly,
        ),
        new lib.ExtendedKeyUsageExtension(['1.3.6.1.5.5.7.3.9', '1.2.3.4.5', lib.ExtendedKeyUsage.codeSigning, '1.3.6.1.5.5.7.3.4', '1.3.6.1.5.5.7.3.8']),
        new lib.SubjectAlternativeNameExtension([
          { type: 'dns', value: 'a.example' },
          { type: 'ip', value: '192.0.2.1' },
          { type: 'ip', value: '2001:db8::1' },
          { type: 'url', value: 'spiffe://example/a' },
          { type: 'email', value: 'a@example.com' },
          { type: 'dn', value: 'CN=dir' },
          { type: 'id', value: '1.2.3' },
          { type: 'upn', value: 'a@example.com' },
          { type: 'guid', value: '00112233-4455-6677-8899-aabbccddeeff' },
        ]),
      ],
    });
    const three = await mkThreeLevelDir(dirs);
    const pems = [chainPem, anchors, readFileSync(join(three, 'issuer.crt'), 'utf8'), readFileSync(join(three, 'ca.crt'), 'utf8'), odd.toString('pem')];
    for (const pem of pems) {
      assert.deepEqual(inspectCertificate(pem).chain, certificatesFromPem(pem).map(librarySummary));
    }
    const r = inspectCertificate(odd.toString('pem'));
    assert.equal(r.subject, 'CN=odd\\, name+OU=Unit, O=Example, C=DE');
    assert.deepEqual(r.keyUsage, ['nonRepudiation', 'keyAgreement', 'cRLSign']);
    assert.deepEqual(r.extKeyUsage, ['ocspSigning', '1.2.3.4.5', 'codeSigning', 'emailProtection', 'timeStamping']);
    assert.deepEqual(r.sans, [
      'DNS:a.example',
      'IP:192.0.2.1',
      'IP:2001:db8::1',
      'URI:spiffe://example/a',
      'email:a@example.com',
      'dn:CN=dir',
      'RID:1.2.3',
      'UPN:a@example.com',
      'GUID:00112233-4455-6677-8899-aabbccddeeff',
    ]);
  });
});
