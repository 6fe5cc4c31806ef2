import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { type CertificateExtension, extensionOf, hasKeyUsageBit, KEY_USAGE_BITS, type ParsedCertificate, parseCertificate, sansOf } from './chain.js';
import { formatIp, OIDS, readExtension } from './csr.js';
import { bitString, decode, explicit, ia5Content, implicitPrimitive, octetString, oid, sequence, utf8String } from './der.js';
import { generateEcKeyPair } from './keys.js';
import { certificatesFromPem } from './pem.js';
import { idOf, mkCa, mkIdentityDir, TempDirs, tokenFor } from './test-helpers.js';
import { createCsr, generateWorkloadKey } from './workload.js';
import { type X509, x509 } from './x509.js';

const dirs = new TempDirs();
after(() => dirs.cleanup());

const WEB = idOf('default', 'web');
const hex = (b: Uint8Array | ArrayBuffer) => Buffer.from(b instanceof ArrayBuffer ? new Uint8Array(b) : b).toString('hex');

/** A self-signed certificate built by the library, with the given names and extensions. */
async function libraryCert(opts: { subject: string | X509.JsonName; extensions?: X509.Extension[]; notBefore?: Date; notAfter?: Date }) {
  const lib = x509();
  return lib.X509CertificateGenerator.createSelfSigned({
    serialNumber: '0a1b',
    name: opts.subject,
    notBefore: opts.notBefore ?? new Date('2026-01-02T03:04:05Z'),
    notAfter: opts.notAfter ?? new Date('2051-06-07T08:09:10Z'),
    keys: await generateEcKeyPair(),
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    ...(opts.extensions === undefined ? {} : { extensions: opts.extensions }),
  });
}

/** What the library read from the same DER: the fields ParsedCertificate replaces. */
function libraryView(der: Uint8Array) {
  const c = new (x509().X509Certificate)(der);
  return {
    subject: c.subject || '(empty subject)',
    issuer: c.issuer,
    notBeforeMs: c.notBefore.getTime(),
    notAfterMs: c.notAfter.getTime(),
    extensions: Array.from(c.extensions, (e) => ({ oid: e.type, critical: e.critical, value: hex(e.value) })),
  };
}

const ourView = (p: ParsedCertificate) => ({
  subject: p.subject,
  issuer: p.issuer,
  notBeforeMs: p.notBeforeMs,
  notAfterMs: p.notAfterMs,
  extensions: p.extensions.map((e) => ({ oid: e.oid, critical: e.critical, value: hex(e.value) })),
});

/** `cert` with other extensions (to read extension values the library does not write). */
const withExtensions = (cert: ParsedCertificate, extensions: CertificateExtension[]): ParsedCertificate => ({ ...cert, extensions });
const sanExtension = (...names: Uint8Array[]): CertificateExtension => ({ oid: OIDS.subjectAltName, critical: false, value: sequence(...names) });
/** The SANs the library reads from a subjectAltName value. */
const librarySans = (value: Uint8Array) => new (x509().SubjectAlternativeNameExtension)(sequence(oid(OIDS.subjectAltName), octetString(value))).names.toJSON();

let dir: string;
let plain: ParsedCertificate;
before(async () => {
  dir = await mkIdentityDir(dirs);
  plain = parseCertificate(new Uint8Array((await libraryCert({ subject: 'CN=plain' })).rawData));
});

describe('parseCertificate', () => {
  it('reads names, validity and extensions as @peculiar/x509 did', async () => {
    const lib = x509();
    const ca = await mkCa(dir);
    const subjects: (string | X509.JsonName)[] = [
      'CN=a\\, b+OU=x, O=Example \\"Q\\", C=DE',
      'E=ops@example.com, DC=example, DC=com, 2.5.4.5=1234',
      // Not a PrintableString: the library writes a UTF8String.
      [{ CN: ['one', 'two'], O: ['org'] }, { OU: ['Ünit'] }],
      [],
    ];
    const issued = await ca.certify({ identity: WEB, token: tokenFor(dir, 'default', 'web'), csrDer: await createCsr(WEB, await generateWorkloadKey()) });
    assert.ok(issued.ok);
    const ders = [
      ...certificatesFromPem(readFileSync(join(dir, 'ca.crt'), 'utf8')),
      ...certificatesFromPem(readFileSync(join(dir, 'issuer.crt'), 'utf8')),
      issued.leafDer,
      ...(await Promise.all(subjects.map(async (subject) => new Uint8Array((await libraryCert({ subject })).rawData)))),
      // GeneralizedTime on both ends, and before 1970.
      new Uint8Array(
        (await libraryCert({ subject: 'CN=old', notBefore: new Date('1960-01-01T00:00:00Z'), notAfter: new Date('2160-01-01T00:00:00Z') })).rawData,
      ),
      new Uint8Array(
        (
          await libraryCert({
            subject: 'CN=extensions',
            extensions: [
              new lib.BasicConstraintsExtension(true, 3, true),
              new lib.KeyUsagesExtension(lib.KeyUsageFlags.keyCertSign | lib.KeyUsageFlags.digitalSignature, false),
              new lib.ExtendedKeyUsageExtension(['1.3.6.1.5.5.7.3.1', '1.2.3.4']),
            ],
          })
        ).rawData,
      ),
    ];
    for (const der of ders) assert.deepEqual(ourView(parseCertificate(der)), libraryView(der));
    assert.equal(parseCertificate(ders[0] as Uint8Array).subject, 'CN=root.linkerd.cluster.local');
    assert.equal(parseCertificate(issued.leafDer).issuer, 'CN=identity.linkerd.cluster.local');
    assert.equal(parseCertificate(ders[5] as Uint8Array).subject, 'CN=one+CN=two+O=org, OU=Ünit');
    assert.equal(parseCertificate(ders[6] as Uint8Array).subject, '(empty subject)');
  });

  it('throws for what is not a strict DER certificate', () => {
    assert.throws(() => parseCertificate(Uint8Array.of(1, 2, 3)));
    const trailing = new Uint8Array([...plain.der, 0]);
    assert.throws(() => parseCertificate(trailing));
  });
});

describe('sansOf', () => {
  it('reads every kind of SAN the library read, with the same types and texts', async () => {
    const lib = x509();
    const names: X509.JsonGeneralNames = [
      { type: 'dns', value: WEB },
      { type: 'ip', value: '10.0.0.1' },
      { type: 'ip', value: '::1' },
      { type: 'ip', value: '2001:db8::8:800:200c:417a' },
      { type: 'ip', value: '2001:db8:0:1:1:1:1:1' },
      // IPv4-mapped (the library's parser takes only hex groups).
      { type: 'ip', value: '::ffff:a00:1' },
      { type: 'url', value: 'spiffe://cluster.local/ns/default/sa/web' },
      { type: 'email', value: 'web@example.com' },
      { type: 'dn', value: 'CN=dir, O=Example' },
      { type: 'id', value: '1.2.3.4' },
      { type: 'upn', value: 'user@example.com' },
      { type: 'guid', value: '00112233-4455-6677-8899-aabbccddeeff' },
    ];
    const cert = parseCertificate(
      new Uint8Array((await libraryCert({ subject: 'CN=sans', extensions: [new lib.SubjectAlternativeNameExtension(names)] })).rawData),
    );
    const ours = sansOf(cert);
    assert.deepEqual(ours, new lib.X509Certificate(cert.der).getExtension(lib.SubjectAlternativeNameExtension)?.names.toJSON());
    assert.deepEqual(
      ours.map((n) => n.value),
      [
        WEB,
        '10.0.0.1',
        '::1',
        '2001:db8::8:800:200c:417a',
        '2001:db8:0:1:1:1:1:1',
        '::ffff:a00:1',
        'spiffe://cluster.local/ns/default/sa/web',
        'web@example.com',
        'CN=dir, O=Example',
        '1.2.3.4',
        'user@example.com',
        '00112233-4455-6677-8899-aabbccddeeff',
      ],
    );
    assert.deepEqual(sansOf(plain), []);
  });

  it('prints IP addresses as the library did', () => {
    const group = fc.oneof(fc.constant(0), fc.constant(0), fc.constant(1), fc.integer({ min: 0, max: 0xffff }));
    const address = fc.oneof(
      fc.uint8Array({ minLength: 4, maxLength: 4 }),
      fc.array(group, { minLength: 8, maxLength: 8 }).map((groups) => Uint8Array.from(groups.flatMap((g) => [g >> 8, g & 0xff]))),
    );
    fc.assert(
      fc.property(address, (bytes) => {
        const value = sequence(implicitPrimitive(7, bytes));
        assert.deepEqual(sansOf(withExtensions(plain, [sanExtension(implicitPrimitive(7, bytes))])), librarySans(value));
        assert.equal(sansOf(withExtensions(plain, [sanExtension(implicitPrimitive(7, bytes))]))[0]?.value, formatIp(bytes));
      }),
      { numRuns: 500 },
    );
    assert.equal(formatIp(new Uint8Array(16)), '::');
    assert.equal(formatIp(Uint8Array.of(0xfe, 0x80, ...new Array<number>(14).fill(0))), 'fe80::');
    // A single zero group is not compressed; of two equally long runs, the first is.
    assert.equal(formatIp(Uint8Array.of(0, 1, 0, 0, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7)), '1:0:2:3:4:5:6:7');
    assert.equal(formatIp(Uint8Array.of(0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4)), '1::2:0:0:3:4');
  });

  it('names otherNames the library refused by their type, and X.400 names by their kind', () => {
    const other = explicit(0, oid('1.2.3.4'), explicit(0, utf8String('x')));
    const x400 = explicit(3);
    assert.deepEqual(sansOf(withExtensions(plain, [sanExtension(implicitPrimitive(2, ia5Content('a.example')), other, x400)])), [
      { type: 'dns', value: 'a.example' },
      { type: 'other', value: '1.2.3.4' },
      { type: 'x400', value: '' },
    ]);
  });

  it('uses the first subjectAltName extension, and throws for a malformed one', () => {
    const first = sanExtension(implicitPrimitive(2, ia5Content('first.example')));
    const second = sanExtension(implicitPrimitive(2, ia5Content('second.example')));
    assert.deepEqual(sansOf(withExtensions(plain, [first, second])), [{ type: 'dns', value: 'first.example' }]);
    assert.equal(extensionOf(withExtensions(plain, [first, second]), OIDS.subjectAltName), first);
    assert.throws(() => sansOf(withExtensions(plain, [sanExtension(implicitPrimitive(7, Uint8Array.of(1, 2, 3)))])), /IP address length/);
  });
});

describe('hasKeyUsageBit', () => {
  it('reads every keyUsage bit as the library did', () => {
    const lib = x509();
    for (let flags = 0; flags < 512; flags++) {
      const raw = new Uint8Array(new lib.KeyUsagesExtension(flags).rawData);
      const ext = readExtension(decode(raw));
      // What the library read back from that DER (as ca.ts and inspect.ts did).
      const usages = new lib.KeyUsagesExtension(raw).usages;
      for (const bit of Object.values(KEY_USAGE_BITS)) assert.equal(hasKeyUsageBit(ext.value, bit), (usages & (1 << bit)) !== 0, `flags ${flags} bit ${bit}`);
    }
  });

  it('counts bits from the first one (RFC 5280 4.2.1.3) and ignores unused bits', () => {
    // keyCertSign alone: 0b00000100, 2 unused bits.
    assert.equal(hasKeyUsageBit(bitString(Uint8Array.of(0x04), 2), KEY_USAGE_BITS.keyCertSign), true);
    assert.equal(hasKeyUsageBit(bitString(Uint8Array.of(0x04), 2), KEY_USAGE_BITS.cRLSign), false);
    assert.equal(hasKeyUsageBit(Uint8Array.of(0x03, 0x02, 0x07, 0x81), KEY_USAGE_BITS.digitalSignature), true);
    assert.equal(hasKeyUsageBit(Uint8Array.of(0x03, 0x02, 0x07, 0x81), KEY_USAGE_BITS.decipherOnly), false);
    assert.throws(() => hasKeyUsageBit(octetString(Uint8Array.of(4)), 5), /keyUsage/);
    assert.throws(() => hasKeyUsageBit(Uint8Array.of(0x03, 0x01, 0x01), 5), /malformed BIT STRING/);
  });
});
