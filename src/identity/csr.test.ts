import assert from 'node:assert/strict';
import { createPublicKey, KeyObject, verify, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import type { CertificateAuthority, CertifyResult } from './certify.js';
import { OIDS, parseCsr, readGeneralNames } from './csr.js';
import { children, type DerElement, DerError, decode, implicitPrimitive, oid, sequence } from './der.js';
import { ECDSA_P256_SHA256, generateEcKeyPair } from './keys.js';
import { idOf, mkCa, mkCsr, mkIdentityDir, openssl, TempDirs, tokenFor } from './test-helpers.js';
import { createCsr, generateWorkloadKey } from './workload.js';
import { x509 as loadX509 } from './x509.js';

/** The library, for reference objects (tests may load it). */
const x509 = loadX509();
const dirs = new TempDirs();
after(() => dirs.cleanup());

const WEB = idOf('default', 'web');

let ca: CertificateAuthority;
let token: Uint8Array;
let csrDer: Uint8Array;

before(async () => {
  const dir = await mkIdentityDir(dirs);
  ca = await mkCa(dir);
  token = tokenFor(dir, 'default', 'web');
  csrDer = await createCsr(WEB, await generateWorkloadKey());
});

const certify = (csr: Uint8Array): Promise<CertifyResult> => ca.certify({ identity: WEB, token, csrDer: csr });

describe('parseCsr', () => {
  it('reads what Certify checks from a workload CSR', async () => {
    const keys = await generateEcKeyPair();
    const der = await createCsr(WEB, keys);
    const csr = parseCsr(der);
    assert.equal(csr.keyAlgorithm, OIDS.ecPublicKey);
    assert.equal(csr.curve, OIDS.p256);
    assert.equal(csr.signatureAlgorithm, OIDS.ecdsaWithSha256);
    assert.deepEqual(csr.commonNames, [WEB]);
    assert.deepEqual(csr.subjectAltNames, [[{ type: 'dns', value: WEB }]]);
    const spki = KeyObject.from(keys.publicKey).export({ type: 'spki', format: 'der' });
    assert.deepEqual(Buffer.from(csr.spkiDer), spki);
    // The signed part and the signature, as the key signed them.
    assert.ok(verify('sha256', csr.infoDer, { key: KeyObject.from(keys.publicKey), dsaEncoding: 'der' }, csr.signature));
  });

  it('reads every kind of subjectAltName', async () => {
    const der = await mkCsr({
      sans: [
        { type: 'dns', value: WEB },
        { type: 'ip', value: '10.0.0.1' },
        { type: 'ip', value: '::1' },
        { type: 'url', value: 'spiffe://cluster.local/ns/default/sa/web' },
        { type: 'email', value: 'web@example.com' },
      ],
    });
    assert.deepEqual(
      parseCsr(der).subjectAltNames[0]?.map((n) => n.type),
      ['dns', 'ip', 'ip', 'uri', 'email'],
    );
    const other = sequence(implicitPrimitive(8, oid('1.2.3').subarray(2)));
    assert.deepEqual(readGeneralNames(other), [{ type: 'rid' }]);
    assert.throws(() => readGeneralNames(sequence(implicitPrimitive(7, Uint8Array.of(1, 2, 3)))), /IP address length/);
    assert.throws(() => readGeneralNames(sequence(implicitPrimitive(4, Uint8Array.of()))), /bad encoding/);
    assert.throws(() => readGeneralNames(sequence(implicitPrimitive(2, Uint8Array.of(0xc3, 0xa9)))), /IA5String/);
  });

  it('refuses anything but exactly one DER CertificationRequest', () => {
    assert.throws(() => parseCsr(new Uint8Array([...csrDer, 0])), DerError);
    assert.throws(() => parseCsr(csrDer.subarray(0, csrDer.length - 1)), DerError);
    assert.throws(() => parseCsr(sequence(decode(csrDer).content.subarray(0, 10))), DerError);
  });
});

describe('Certify with unusual but valid CSRs', () => {
  it('accepts a P-256 request signed with ECDSA-SHA384 (as before)', async () => {
    const csr = await mkCsr({ cn: WEB, sans: [{ type: 'dns', value: WEB }], signingAlgorithm: { ...ECDSA_P256_SHA256, hash: 'SHA-384' } });
    const res = await certify(csr);
    assert.ok(res.ok, res.ok ? '' : res.message);
  });

  it('accepts CSRs made by openssl, with uncompressed and compressed points', async () => {
    const out = dirs.make();
    for (const form of ['uncompressed', 'compressed']) {
      const key = join(out, `${form}.key`);
      const csr = join(out, `${form}.csr`);
      for (const args of [
        ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key],
        ['ec', '-in', key, '-conv_form', form, '-out', key],
        ['req', '-new', '-key', key, '-subj', `/CN=${WEB}`, '-addext', `subjectAltName=DNS:${WEB}`, '-outform', 'DER', '-out', csr],
      ]) {
        const r = openssl(args);
        assert.equal(r.status, 0, r.output);
      }
      const der = new Uint8Array(readFileSync(csr));
      assert.equal(parseCsr(der).publicKey.length, form === 'compressed' ? 33 : 65);
      const res = await certify(der);
      assert.ok(res.ok, res.ok ? '' : res.message);
      // The leaf certifies the key from the request (its SPKI copied verbatim).
      const leaf = new X509Certificate(res.leafDer);
      assert.deepEqual(leaf.publicKey.export({ format: 'jwk' }), createPublicKey(readFileSync(key, 'utf8')).export({ format: 'jwk' }));
      assert.ok(Buffer.from(res.leafDer).includes(Buffer.from(parseCsr(der).spkiDer)));
    }
  });

  it('accepts extra attributes and extensions next to the SAN', async () => {
    const keys = await generateEcKeyPair();
    const req = await x509.Pkcs10CertificateRequestGenerator.create({
      name: [{ CN: [WEB] }, { O: ['ward'] }],
      keys,
      signingAlgorithm: ECDSA_P256_SHA256,
      extensions: [
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: WEB }]),
      ],
      attributes: [new x509.ChallengePasswordAttribute('secret')],
    });
    const res = await certify(new Uint8Array(req.rawData));
    assert.ok(res.ok, res.ok ? '' : res.message);
  });
});

describe('Certify on mutated CSRs', () => {
  /** Mutations of a valid CSR: bit flips, byte overwrites, insertions, deletions, truncations. */
  const mutated = (base: () => Uint8Array) =>
    fc
      .array(
        fc.oneof(
          fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
          fc.record({ kind: fc.constant('set' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
          fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
          fc.record({ kind: fc.constant('delete' as const), at: fc.nat() }),
          fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
        ),
        { minLength: 1, maxLength: 4 },
      )
      .map((ops) => {
        let b = Array.from(base());
        for (const op of ops) {
          const at = op.at % (b.length + 1);
          if (op.kind === 'flip' && at < b.length) b[at] = (b[at] as number) ^ (1 << op.bit);
          else if (op.kind === 'set' && at < b.length) b[at] = op.value;
          else if (op.kind === 'insert') b.splice(at, 0, op.value);
          else if (op.kind === 'delete') b.splice(at, 1);
          else if (op.kind === 'truncate') b = b.slice(0, at);
        }
        return new Uint8Array(b);
      });

  it('never fails internally and never issues for a CSR whose signature does not verify', async () => {
    let issued = 0;
    await fc.assert(
      fc.asyncProperty(
        mutated(() => csrDer),
        async (bytes) => {
          const res = await certify(bytes);
          if (!res.ok) {
            assert.notEqual(res.reason, 'internal', res.message);
            return;
          }
          issued++;
          // An independent parser and verifier (asn1js + WebCrypto) must agree the request is signed.
          const reference = new x509.Pkcs10CertificateRequest(bytes);
          assert.ok(await reference.verify(), 'issued for a CSR whose signature does not verify');
          const leaf = new x509.X509Certificate(res.leafDer);
          assert.deepEqual(Buffer.from(leaf.publicKey.rawData), Buffer.from(reference.publicKey.rawData));
        },
      ),
      { numRuns: 1500 },
    );
    // Mutations that leave the request intact (a flip undone by another) are the only way through.
    assert.ok(issued < 100, `issued ${issued}`);
  });

  it('refuses every single-byte change to the request', async () => {
    const reasons = new Map<string, number>();
    for (let i = 0; i < csrDer.length; i++) {
      for (const mask of [0x01, 0x80, 0xff]) {
        const bytes = csrDer.slice();
        bytes[i] = (bytes[i] as number) ^ mask;
        const res = await certify(bytes);
        assert.ok(!res.ok, `issued with byte ${i} ^ ${mask}`);
        assert.notEqual(res.reason, 'internal', res.message);
        reasons.set(res.reason, (reasons.get(res.reason) ?? 0) + 1);
      }
    }
    // Most changes hit the signed part and are caught by the signature check or the parser.
    assert.ok((reasons.get('bad-csr-signature') ?? 0) > csrDer.length, JSON.stringify([...reasons]));
  });

  it('refuses a well-formed CSR re-signed over different bytes (signature from another request)', async () => {
    const [info, alg] = children(decode(csrDer)) as [DerElement, DerElement];
    const [, , otherSig] = children(decode(await createCsr(WEB, await generateWorkloadKey()))) as [DerElement, DerElement, DerElement];
    const spliced = sequence(info.bytes, alg.bytes, otherSig.bytes);
    assert.ok(parseCsr(spliced));
    const res = await certify(spliced);
    assert.deepEqual(res.ok ? 'issued' : res.reason, 'bad-csr-signature');
  });
});
