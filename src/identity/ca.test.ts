import assert from 'node:assert/strict';
import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { copyFileSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { IDENTITY_FILES, initIdentity, loadIssuer } from './ca.js';
import { inspectCertificate } from './inspect.js';
import { generateEcKeyPair, privateKeyToPem, toSigningKey } from './keys.js';
import { mkCa, mkIdentityDir, mkThreeLevelDir, openssl, put, TempDirs } from './test-helpers.js';
import { type X509, x509 } from './x509.js';

const dirs = new TempDirs();
after(() => dirs.cleanup());

const HOUR = 3_600_000;
const codes = (ds: readonly { code: string }[]) => ds.map((d) => d.code).sort();

describe('initIdentity', () => {
  it('writes anchor, issuer and token key; keys are 0600; the issuer verifies with openssl', async () => {
    const outDir = join(dirs.make(), 'nested', 'identity');
    const res = await initIdentity({ outDir, trustDomain: 'example.org' });
    assert.ok(res.ok, JSON.stringify(!res.ok && res.diagnostics));
    assert.deepEqual(
      res.value.files.map((f) => [f.path, f.mode]),
      [
        [join(outDir, 'ca.crt'), 0o644],
        [join(outDir, 'ca.key'), 0o600],
        [join(outDir, 'issuer.crt'), 0o644],
        [join(outDir, 'issuer.key'), 0o600],
        [join(outDir, 'token.key'), 0o600],
      ],
    );
    for (const name of ['ca.key', 'issuer.key', 'token.key']) {
      assert.equal(statSync(join(outDir, name)).mode & 0o777, 0o600, name);
      assert.match(readFileSync(join(outDir, name), 'utf8'), /^-----BEGIN PRIVATE KEY-----\n/);
    }
    const v = openssl(['verify', '-CAfile', join(outDir, 'ca.crt'), join(outDir, 'issuer.crt')]);
    assert.equal(v.status, 0, v.output);
    assert.match(v.output, /issuer\.crt: OK/);

    const anchor = inspectCertificate(readFileSync(join(outDir, 'ca.crt'), 'utf8'));
    assert.equal(anchor.subject, 'CN=root.linkerd.example.org');
    assert.equal(anchor.issuer, anchor.subject);
    assert.equal(anchor.isCa, true);
    assert.equal(anchor.keyType, 'ECDSA P-256');
    assert.deepEqual(anchor.keyUsage, ['keyCertSign', 'cRLSign']);
    const issuer = inspectCertificate(readFileSync(join(outDir, 'issuer.crt'), 'utf8'));
    assert.equal(issuer.subject, 'CN=identity.linkerd.example.org');
    assert.equal(issuer.issuer, 'CN=root.linkerd.example.org');
    const text = openssl(['x509', '-in', join(outDir, 'issuer.crt'), '-noout', '-text']).output;
    assert.match(text, /X509v3 Basic Constraints: critical\s+CA:TRUE, pathlen:0/);
    assert.match(text, /X509v3 Key Usage: critical\s+Certificate Sign, CRL Sign/);
    assert.match(text, /Authority Key Identifier/);
    assert.match(openssl(['x509', '-in', join(outDir, 'ca.crt'), '-noout', '-text']).output, /X509v3 Basic Constraints: critical\s+CA:TRUE\n/);
  });

  it('uses the TTLs, backdates 20 s, and never lets the issuer outlive the anchor', async () => {
    const now = Date.UTC(2030, 0, 1);
    const outDir = dirs.make();
    const res = await initIdentity({ outDir, now, anchorTtlMs: 2 * HOUR, issuerTtlMs: 5 * HOUR });
    assert.ok(res.ok);
    assert.equal(res.value.anchorNotAfterMs, now + 2 * HOUR);
    assert.equal(res.value.issuerNotAfterMs, now + 2 * HOUR);
    const issuer = inspectCertificate(readFileSync(join(outDir, 'issuer.crt'), 'utf8'));
    assert.equal(issuer.notBefore, new Date(now - 20_000).toISOString());
  });

  it('refuses to overwrite existing files unless forced', async () => {
    const outDir = await mkIdentityDir(dirs);
    const before = readFileSync(join(outDir, 'ca.crt'), 'utf8');
    const res = await initIdentity({ outDir });
    assert.equal(res.ok, false);
    assert.deepEqual(codes(res.diagnostics), ['ID009', 'ID009', 'ID009', 'ID009', 'ID009']);
    assert.match(res.diagnostics[0]?.message ?? '', /ca\.crt already exists; refusing to overwrite it/);
    assert.equal(readFileSync(join(outDir, 'ca.crt'), 'utf8'), before);

    const forced = await initIdentity({ outDir, force: true });
    assert.ok(forced.ok);
    assert.notEqual(readFileSync(join(outDir, 'ca.crt'), 'utf8'), before);
    assert.equal(statSync(join(outDir, 'issuer.key')).mode & 0o777, 0o600);
  });

  it('refuses when only one of the files exists', async () => {
    const outDir = dirs.make();
    put(outDir, 'token.key', 'x');
    const res = await initIdentity({ outDir });
    assert.deepEqual(codes(res.diagnostics), ['ID009']);
  });

  it('rejects a bad trust domain and TTLs', async () => {
    const res = await initIdentity({ outDir: dirs.make(), trustDomain: 'Bad_Domain', anchorTtlMs: 0, issuerTtlMs: Number.NaN });
    assert.deepEqual(codes(res.diagnostics), ['ID012', 'ID012', 'ID012']);
    assert.match(res.diagnostics[0]?.message ?? '', /trustDomain: "Bad_Domain" is not a lower-case DNS name/);
  });
});

describe('loadIssuer', () => {
  it('loads a valid issuer', async () => {
    const dir = await mkIdentityDir(dirs);
    const res = await loadIssuer(dir);
    assert.ok(res.ok);
    assert.equal(res.value.subject, 'CN=identity.linkerd.cluster.local');
    assert.equal(res.value.chainDer.length, 1);
    assert.equal(res.value.anchorsPem, readFileSync(join(dir, 'ca.crt'), 'utf8'));
    assert.ok(res.value.chainNotAfterMs <= res.value.notAfterMs);
  });

  it('names a missing file (ID001)', async () => {
    const dir = dirs.make();
    const res = await loadIssuer(dir);
    assert.deepEqual(codes(res.diagnostics), ['ID001', 'ID001', 'ID001']);
    assert.equal(res.diagnostics[1]?.message, `cannot read ${join(dir, 'issuer.crt')}: no such file`);
    assert.ok(res.diagnostics[0]?.hint?.includes('ward identity init'));
  });

  it('rejects an issuer not signed by the anchor (ID006)', async () => {
    const a = await mkIdentityDir(dirs);
    const b = await mkIdentityDir(dirs);
    copyFileSync(join(b, IDENTITY_FILES.anchorCert), join(a, IDENTITY_FILES.anchorCert));
    const res = await loadIssuer(a);
    assert.deepEqual(codes(res.diagnostics), ['ID006']);
    assert.match(
      res.diagnostics[0]?.message ?? '',
      /issuer\.crt: the issuer certificate CN=identity\.linkerd\.cluster\.local does not chain to the trust anchors in .*ca\.crt: .*not signed by any trust anchor/,
    );
  });

  it('rejects an expired issuer (ID007) and one not yet valid (ID008)', async () => {
    const now = Date.now();
    const dir = await mkIdentityDir(dirs, { now: now - 10 * HOUR, issuerTtlMs: HOUR, anchorTtlMs: 100 * HOUR });
    const expired = await loadIssuer(dir, now);
    assert.deepEqual(codes(expired.diagnostics), ['ID007']);
    assert.match(expired.diagnostics[0]?.message ?? '', /issuer\.crt: certificate CN=identity\.linkerd\.cluster\.local expired at /);
    const early = await loadIssuer(dir, now - 11 * HOUR);
    assert.deepEqual(codes(early.diagnostics), ['ID008', 'ID008']);
    assert.ok((await loadIssuer(dir, now - 9.5 * HOUR)).ok);
  });

  it('rejects an expired anchor (ID007 on ca.crt)', async () => {
    const now = Date.now();
    const dir = await mkIdentityDir(dirs, { now: now - 10 * HOUR, anchorTtlMs: HOUR });
    const res = await loadIssuer(dir, now);
    assert.ok(res.diagnostics.some((d) => d.code === 'ID007' && d.message.includes('ca.crt')));
  });

  it('rejects a key that does not match the certificate (ID005)', async () => {
    const dir = await mkIdentityDir(dirs);
    copyFileSync(join(dir, IDENTITY_FILES.tokenKey), join(dir, IDENTITY_FILES.issuerKey));
    const res = await loadIssuer(dir);
    assert.deepEqual(codes(res.diagnostics), ['ID005']);
    assert.match(res.diagnostics[0]?.message ?? '', /issuer\.key does not match the certificate in .*issuer\.crt \(CN=identity\.linkerd\.cluster\.local\)/);
  });

  it('rejects an issuer that is not a CA (ID004)', async () => {
    const dir = await mkIdentityDir(dirs);
    const ca = await mkCa(dir);
    const server = await ca.issueServerCertificate(['not-a-ca.example']);
    put(dir, 'issuer.crt', server.certPem + server.chainPem);
    put(dir, 'issuer.key', server.keyPem);
    const res = await loadIssuer(dir);
    assert.deepEqual(codes(res.diagnostics), ['ID004']);
    assert.match(res.diagnostics[0]?.message ?? '', /the issuer certificate CN=not-a-ca\.example is not a CA: basicConstraints CA:TRUE is missing/);
  });

  it('reads keyUsage: a CA certificate without keyCertSign is refused (ID004), one without keyUsage may sign', async () => {
    const lib = x509();
    const dir = await mkIdentityDir(dirs);
    const anchor = new lib.X509Certificate(readFileSync(join(dir, IDENTITY_FILES.anchorCert), 'utf8'));
    const anchorKey = await toSigningKey(createPrivateKey(readFileSync(join(dir, IDENTITY_FILES.anchorKey), 'utf8')));
    const now = Date.now();
    const issuerWith = async (keyUsage: X509.KeyUsagesExtension | undefined) => {
      const keys = await generateEcKeyPair();
      const cert = await lib.X509CertificateGenerator.create({
        serialNumber: '01',
        subject: 'CN=odd.issuer',
        issuer: anchor.subjectName,
        notBefore: new Date(now - HOUR),
        notAfter: new Date(now + HOUR),
        publicKey: keys.publicKey,
        signingKey: anchorKey,
        signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
        extensions: [new lib.BasicConstraintsExtension(true, 0, true), ...(keyUsage === undefined ? [] : [keyUsage])],
      });
      put(dir, IDENTITY_FILES.issuerCert, cert.toString('pem'));
      put(dir, IDENTITY_FILES.issuerKey, await privateKeyToPem(keys.privateKey));
      return loadIssuer(dir, now);
    };
    const noSign = await issuerWith(new lib.KeyUsagesExtension(lib.KeyUsageFlags.digitalSignature | lib.KeyUsageFlags.cRLSign, true));
    assert.deepEqual(codes(noSign.diagnostics), ['ID004']);
    // node:crypto's `ca` (OpenSSL's X509_check_ca) already says no when keyUsage lacks keyCertSign.
    assert.match(noSign.diagnostics[0]?.message ?? '', /the issuer certificate CN=odd\.issuer is not a CA: /);
    const onlySign = await issuerWith(new lib.KeyUsagesExtension(lib.KeyUsageFlags.keyCertSign, true));
    assert.ok(onlySign.ok, JSON.stringify(onlySign.diagnostics));
    const noKeyUsage = await issuerWith(undefined);
    assert.ok(noKeyUsage.ok, JSON.stringify(noKeyUsage.diagnostics));
    assert.equal(noKeyUsage.value.subject, 'CN=odd.issuer');
    assert.equal(noKeyUsage.value.chainPem, `${readFileSync(join(dir, IDENTITY_FILES.issuerCert), 'utf8')}\n`);
  });

  it('keeps the issuer chain PEM in the format the library wrote', async () => {
    const res = await loadIssuer(await mkThreeLevelDir(dirs));
    assert.ok(res.ok);
    const lib = x509();
    assert.equal(res.value.chainPem, `${res.value.chainDer.map((der) => new lib.X509Certificate(der).toString('pem')).join('\n')}\n`);
  });

  it('accepts an issuer file that carries further intermediates; leaves never outlive the chain', async () => {
    const now = Date.now();
    const dir = await mkThreeLevelDir(dirs, { now, intermediateTtlMs: 5 * HOUR });
    const res = await loadIssuer(dir, now);
    assert.ok(res.ok, JSON.stringify(!res.ok && res.diagnostics));
    assert.equal(res.value.subject, 'CN=issuer.test');
    assert.equal(res.value.chainDer.length, 2);
    assert.equal(res.value.chainNotAfterMs, Math.floor((now + 5 * HOUR) / 1000) * 1000);
    assert.ok(res.value.notAfterMs > res.value.chainNotAfterMs);
    // The intermediate alone (issuer.crt without it) does not chain to the root.
    put(dir, 'issuer.crt', readFileSync(join(dir, 'issuer.crt'), 'utf8').split(/(?<=-----END CERTIFICATE-----)/)[0] ?? '');
    assert.deepEqual(codes((await loadIssuer(dir, now)).diagnostics), ['ID006']);
  });

  it('reports unreadable certificates and keys (ID002, ID003) and non-ECDSA keys (ID010)', async () => {
    const dir = await mkIdentityDir(dirs);
    put(dir, 'issuer.crt', 'garbage');
    put(dir, 'issuer.key', '-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n');
    const res = await loadIssuer(dir);
    assert.deepEqual(codes(res.diagnostics), ['ID002', 'ID003']);
    assert.match(res.diagnostics.find((d) => d.code === 'ID002')?.message ?? '', /issuer\.crt: no PEM "CERTIFICATE" block found/);

    const dir2 = await mkIdentityDir(dirs);
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' });
    put(dir2, 'issuer.key', rsa);
    const res2 = await loadIssuer(dir2);
    assert.deepEqual(codes(res2.diagnostics), ['ID005', 'ID010']);
    assert.match(res2.diagnostics.find((d) => d.code === 'ID010')?.message ?? '', /the issuer key is RSA 2048/);
  });

  it('rejects a trust anchor that is not a CA (ID011)', async () => {
    const dir = await mkIdentityDir(dirs);
    const ca = await mkCa(dir);
    const server = await ca.issueServerCertificate(['x.example']);
    put(dir, 'ca.crt', server.certPem);
    const res = await loadIssuer(dir);
    assert.ok(codes(res.diagnostics).includes('ID011'));
  });
});
