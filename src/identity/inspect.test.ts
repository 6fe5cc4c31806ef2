import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { CertificateAuthority } from './certify.js';
import { inspectCertificate } from './inspect.js';
import { certificatesToPem, encodePem } from './pem.js';
import { idOf, mkCa, mkIdentityDir, openssl, put, TempDirs, tokenFor } from './test-helpers.js';
import { createCsr, generateWorkloadKey } from './workload.js';

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
