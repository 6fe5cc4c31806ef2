import assert from 'node:assert/strict';
import { generateKeyPairSync, webcrypto } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRegistry } from '../shared/index.js';
import { type Issuer, loadIssuer } from './ca.js';
import { CertificateAuthority, type CertifyRequest, type CertifyResult } from './certify.js';
import { inspectCertificate } from './inspect.js';
import { generateEcKeyPair } from './keys.js';
import { certificatesToPem, encodePem } from './pem.js';
import { idOf, mkCa, mkCsr, mkIdentityDir, mkThreeLevelDir, mustLoadIssuer, openssl, put, TempDirs, tokenFor, tokenKeyOf } from './test-helpers.js';
import { LocalTokenAuthenticator, mintToken } from './token.js';
import { createCsr, generateWorkloadKey } from './workload.js';

const dirs = new TempDirs();
after(() => dirs.cleanup());

const HOUR = 3_600_000;
const WEB = idOf('default', 'web');

let dir: string;
let ca: CertificateAuthority;
let csrWeb: Uint8Array;
let tokenWeb: Uint8Array;

before(async () => {
  dir = await mkIdentityDir(dirs);
  ca = await mkCa(dir);
  csrWeb = await createCsr(WEB, await generateWorkloadKey());
  tokenWeb = tokenFor(dir, 'default', 'web');
});

function mustIssue(res: CertifyResult): Extract<CertifyResult, { ok: true }> {
  if (!res.ok) assert.fail(`refused: ${res.code} ${res.reason} ${res.message}`);
  return res;
}

/** Writes the leaf, verifies it with openssl against ca.crt with the chain as untrusted intermediates. */
function opensslVerify(res: Extract<CertifyResult, { ok: true }>, caDir: string): { status: number; output: string; leafPath: string } {
  const out = dirs.make();
  const leafPath = put(out, 'leaf.pem', encodePem('CERTIFICATE', res.leafDer));
  const chainPath = put(out, 'chain.pem', certificatesToPem(res.chainDer));
  return { ...openssl(['verify', '-CAfile', join(caDir, 'ca.crt'), '-untrusted', chainPath, leafPath]), leafPath };
}

describe('CertificateAuthority.certify: issuing', () => {
  it('issues a leaf that openssl verifies, with the upstream profile', async () => {
    const res = mustIssue(await ca.certify({ identity: WEB, token: tokenWeb, csrDer: csrWeb }));
    const v = opensslVerify(res, dir);
    assert.equal(v.status, 0, v.output);
    assert.match(v.output, /leaf\.pem: OK/);
    const text = openssl(['x509', '-in', v.leafPath, '-noout', '-text']).output;
    assert.match(text, /X509v3 Extended Key Usage: \s+TLS Web Server Authentication, TLS Web Client Authentication/);
    assert.match(text, /X509v3 Key Usage: critical\s+Digital Signature, Key Encipherment/);
    assert.match(text, /X509v3 Basic Constraints: critical\s+CA:FALSE/);
    assert.match(text, /X509v3 Subject Key Identifier/);
    assert.match(text, /X509v3 Authority Key Identifier/);
    assert.match(text, /Signature Algorithm: ecdsa-with-SHA256/);
    // The issued leaf can also be used for client auth (openssl's purpose check).
    const ssl = openssl(['verify', '-purpose', 'sslclient', '-CAfile', join(dir, 'ca.crt'), '-untrusted', join(dir, 'issuer.crt'), v.leafPath]);
    assert.equal(ssl.status, 0, ssl.output);

    const report = inspectCertificate(encodePem('CERTIFICATE', res.leafDer));
    assert.equal(report.subject, `CN=${WEB}`);
    assert.deepEqual(report.sans, [`DNS:${WEB}`]);
    assert.equal(report.isCa, false);
    assert.deepEqual(report.extKeyUsage, ['serverAuth', 'clientAuth']);
    assert.equal(report.issuer, 'CN=identity.linkerd.cluster.local');
    // The chain is the issuer, never the root.
    const issuer = await mustLoadIssuer(dir);
    assert.deepEqual(res.chainDer, issuer.chainDer);
    assert.equal(inspectCertificate(certificatesToPem(res.chainDer)).subject, 'CN=identity.linkerd.cluster.local');
  });

  it('backdates NotBefore by the clock skew and lasts the lifetime plus skew', async () => {
    const now = Math.floor(Date.now() / 1000) * 1000 + 1000;
    const res = mustIssue(await ca.certify({ identity: WEB, token: tokenWeb, csrDer: csrWeb }, now));
    const report = inspectCertificate(encodePem('CERTIFICATE', res.leafDer));
    assert.equal(report.notBefore, new Date(now - 20_000).toISOString());
    assert.equal(report.notAfter, new Date(now + 24 * HOUR + 20_000).toISOString());
    assert.equal(res.validUntilMs, now + 24 * HOUR + 20_000);
  });

  it('honours a configured lifetime and skew', async () => {
    const custom = await mkCa(dir, { issuanceLifetimeMs: HOUR, clockSkewMs: 0 });
    const now = Math.floor(Date.now() / 1000) * 1000;
    const res = mustIssue(await custom.certify({ identity: WEB, token: tokenWeb, csrDer: csrWeb }, now));
    assert.equal(res.validUntilMs, now + HOUR);
  });

  it('clamps NotAfter to the issuer expiry', async () => {
    const now = Date.now();
    const shortDir = await mkIdentityDir(dirs, { now, issuerTtlMs: 2 * HOUR });
    const shortCa = await mkCa(shortDir, {}, now);
    const issuer = await mustLoadIssuer(shortDir, now);
    const res = mustIssue(await shortCa.certify({ identity: WEB, token: tokenFor(shortDir, 'default', 'web', now), csrDer: csrWeb }, now));
    assert.equal(res.validUntilMs, issuer.notAfterMs);
    assert.ok(res.validUntilMs < now + 24 * HOUR);
    const v = opensslVerify(res, shortDir);
    assert.equal(v.status, 0, v.output);
  });

  it('returns the whole issuer chain and clamps to its earliest expiry', async () => {
    const now = Date.now();
    const deep = await mkThreeLevelDir(dirs, { now, intermediateTtlMs: 3 * HOUR });
    const deepCa = await mkCa(deep, {}, now);
    const res = mustIssue(await deepCa.certify({ identity: WEB, token: tokenFor(deep, 'default', 'web', now), csrDer: csrWeb }, now));
    assert.equal(res.chainDer.length, 2);
    assert.equal(res.validUntilMs, Math.floor((now + 3 * HOUR) / 1000) * 1000);
    const v = opensslVerify(res, deep);
    assert.equal(v.status, 0, v.output);
  });

  it('accepts a CSR without a CommonName', async () => {
    const csr = await mkCsr({ sans: [{ type: 'dns', value: WEB }] });
    mustIssue(await ca.certify({ identity: WEB, token: tokenWeb, csrDer: csr }));
  });

  it('uses the issuer current at each request', async () => {
    const other = await mkIdentityDir(dirs);
    const issuers: (Issuer | undefined)[] = [await mustLoadIssuer(dir), await mustLoadIssuer(other), undefined];
    let i = 0;
    const swapping = new CertificateAuthority({
      issuer: { current: () => issuers[i] },
      authenticator: new LocalTokenAuthenticator({ keyPem: tokenKeyOf(dir) }),
      trustDomain: 'cluster.local',
      controlPlaneNamespace: 'linkerd',
    });
    const req = { identity: WEB, token: tokenWeb, csrDer: csrWeb };
    const first = mustIssue(await swapping.certify(req));
    assert.equal(opensslVerify(first, dir).status, 0);
    i = 1;
    const second = mustIssue(await swapping.certify(req));
    assert.equal(opensslVerify(second, other).status, 0);
    assert.notEqual(opensslVerify(second, dir).status, 0);
    i = 2;
    const third = await swapping.certify(req);
    assert.deepEqual(third.ok ? 'issued' : [third.code, third.reason], ['UNAVAILABLE', 'no-issuer']);
  });

  it('issues a server certificate with a fresh key for the given names', async () => {
    const server = await ca.issueServerCertificate(['linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local', 'localhost']);
    const out = dirs.make();
    const certPath = put(out, 'server.pem', server.certPem);
    const v = openssl(['verify', '-purpose', 'sslserver', '-CAfile', join(dir, 'ca.crt'), '-untrusted', put(out, 'chain.pem', server.chainPem), certPath]);
    assert.equal(v.status, 0, v.output);
    const report = inspectCertificate(server.certPem);
    assert.deepEqual(report.sans, ['DNS:linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local', 'DNS:localhost']);
    const keyCheck = openssl(['x509', '-in', certPath, '-noout', '-pubkey']).output;
    const fromKey = openssl(['pkey', '-in', put(out, 'key.pem', server.keyPem), '-pubout']).output;
    assert.equal(keyCheck, fromKey);
    await assert.rejects(
      new CertificateAuthority({
        issuer: undefined,
        authenticator: new LocalTokenAuthenticator({ keyPem: tokenKeyOf(dir) }),
        trustDomain: 't',
        controlPlaneNamespace: 'c',
      }).issueServerCertificate(['x']),
      { code: 'ERR_IDENTITY_NO_ISSUER' },
    );
  });
});

describe('CertificateAuthority.certify: refusals', () => {
  const refusal = async (req: Partial<CertifyRequest>, authority = ca, now?: number) => {
    const res = await authority.certify({ identity: WEB, token: tokenWeb, csrDer: csrWeb, ...req }, now);
    return res.ok ? 'issued' : `${res.code} ${res.reason}`;
  };

  it('refuses with UNAVAILABLE while no issuer is loaded', async () => {
    const none = new CertificateAuthority({
      issuer: undefined,
      authenticator: new LocalTokenAuthenticator({ keyPem: tokenKeyOf(dir) }),
      trustDomain: 'cluster.local',
      controlPlaneNamespace: 'linkerd',
    });
    assert.equal(await refusal({}, none), 'UNAVAILABLE no-issuer');
    assert.equal(await refusal({ csrDer: new Uint8Array() }, none), 'UNAVAILABLE no-issuer');
  });

  it('refuses with UNAVAILABLE once the issuer has expired', async () => {
    const issuer = await mustLoadIssuer(dir);
    assert.equal(await refusal({}, ca, issuer.chainNotAfterMs + 1000), 'UNAVAILABLE issuer-expired');
  });

  it('refuses missing fields with INVALID_ARGUMENT', async () => {
    assert.equal(await refusal({ identity: '' }), 'INVALID_ARGUMENT missing-field');
    assert.equal(await refusal({ token: new Uint8Array() }), 'INVALID_ARGUMENT missing-field');
    assert.equal(await refusal({ csrDer: new Uint8Array() }), 'INVALID_ARGUMENT missing-field');
    const res = await ca.certify({ identity: '', token: new Uint8Array(), csrDer: new Uint8Array() });
    assert.equal(!res.ok && res.message, 'missing identity, token, certificate_signing_request');
  });

  it('refuses CSRs that are not DER PKCS#10 with INVALID_ARGUMENT', async () => {
    const pem = new TextEncoder().encode(encodePem('CERTIFICATE REQUEST', csrWeb));
    assert.equal(await refusal({ csrDer: pem }), 'INVALID_ARGUMENT bad-csr');
    assert.equal(await refusal({ csrDer: new Uint8Array([1, 2, 3, 4]) }), 'INVALID_ARGUMENT bad-csr');
    assert.equal(await refusal({ csrDer: new Uint8Array([...csrWeb, 0]) }), 'INVALID_ARGUMENT bad-csr');
    assert.equal(await refusal({ csrDer: new Uint8Array([0x30, 0x03, 0x02, 0x01, 0x01]) }), 'INVALID_ARGUMENT bad-csr');
    // A certificate is DER but not a CSR.
    const issuer = await mustLoadIssuer(dir);
    assert.equal(await refusal({ csrDer: issuer.chainDer[0] as Uint8Array }), 'INVALID_ARGUMENT bad-csr');
  });

  it('refuses non-ECDSA and non-P-256 keys with FAILED_PRECONDITION', async () => {
    const rsa = await webcrypto.subtle.generateKey(
      { name: 'RSASSA-PKCS1-v1_5', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' },
      true,
      ['sign', 'verify'],
    );
    const rsaCsr = await mkCsr({ cn: WEB, sans: [{ type: 'dns', value: WEB }], keys: rsa, signingAlgorithm: { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' } });
    assert.equal(await refusal({ csrDer: rsaCsr }), 'FAILED_PRECONDITION not-ecdsa');
    const p384 = await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-384' }, true, ['sign', 'verify']);
    const p384Csr = await mkCsr({ cn: WEB, sans: [{ type: 'dns', value: WEB }], keys: p384, signingAlgorithm: { name: 'ECDSA', hash: 'SHA-384' } });
    assert.equal(await refusal({ csrDer: p384Csr }), 'FAILED_PRECONDITION bad-curve');
  });

  it('refuses a CSR whose self-signature does not verify', async () => {
    const tampered = csrWeb.slice();
    tampered[tampered.length - 3] = (tampered[tampered.length - 3] as number) ^ 0x55;
    assert.equal(await refusal({ csrDer: tampered }), 'FAILED_PRECONDITION bad-csr-signature');
  });

  it('refuses SANs other than exactly one DNS name equal to the identity', async () => {
    const cases: [string, { type: 'dns' | 'ip' | 'url' | 'email'; value: string }[]][] = [
      ['none', []],
      [
        'two DNS',
        [
          { type: 'dns', value: WEB },
          { type: 'dns', value: 'other.example' },
        ],
      ],
      ['other DNS', [{ type: 'dns', value: idOf('default', 'api') }]],
      [
        'IP',
        [
          { type: 'dns', value: WEB },
          { type: 'ip', value: '10.0.0.1' },
        ],
      ],
      [
        'URI',
        [
          { type: 'dns', value: WEB },
          { type: 'url', value: 'spiffe://cluster.local/ns/default/sa/web' },
        ],
      ],
      [
        'email',
        [
          { type: 'dns', value: WEB },
          { type: 'email', value: 'web@example.com' },
        ],
      ],
    ];
    for (const [name, sans] of cases) {
      assert.equal(await refusal({ csrDer: await mkCsr({ cn: WEB, sans }) }), 'FAILED_PRECONDITION bad-san', name);
    }
    const res = await ca.certify({ identity: WEB, token: tokenWeb, csrDer: await mkCsr({ cn: WEB, sans: cases[3]?.[1] ?? [] }) });
    assert.equal(!res.ok && res.message, 'cannot validate IP addresses in the CSR');
  });

  it('refuses a CommonName other than the identity', async () => {
    assert.equal(await refusal({ csrDer: await mkCsr({ cn: 'evil', sans: [{ type: 'dns', value: WEB }] }) }), 'FAILED_PRECONDITION bad-cn');
  });

  it("refuses a CSR for another ServiceAccount's identity with a valid token", async () => {
    const api = idOf('default', 'api');
    const csrApi = await createCsr(api, await generateWorkloadKey());
    const res = await ca.certify({ identity: api, token: tokenWeb, csrDer: csrApi });
    assert.ok(!res.ok);
    assert.equal(`${res.code} ${res.reason}`, 'FAILED_PRECONDITION identity-mismatch');
    assert.equal(res.message, `requested identity did not match provided token: requested=${api}; found=${WEB}`);
    // The same with the wrong control-plane namespace or trust domain in the request.
    const foreign = WEB.replace('cluster.local', 'example.org');
    assert.equal(await refusal({ identity: foreign, csrDer: await createCsr(foreign, await generateWorkloadKey()) }), 'FAILED_PRECONDITION identity-mismatch');
  });

  it('refuses forged and expired tokens with INVALID_ARGUMENT', async () => {
    const otherKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const forged = new TextEncoder().encode(mintToken({ signerKeyPem: otherKey, namespace: 'default', serviceAccount: 'web' }));
    assert.equal(await refusal({ token: forged }), 'INVALID_ARGUMENT bad-token');
    const old = tokenFor(dir, 'default', 'web', Date.now() - 3 * HOUR);
    assert.equal(await refusal({ token: old }), 'INVALID_ARGUMENT bad-token');
    assert.equal(await refusal({ token: new TextEncoder().encode('garbage') }), 'INVALID_ARGUMENT bad-token');
  });

  it('refuses with UNAVAILABLE when the authenticator fails', async () => {
    const broken = new CertificateAuthority({
      issuer: await mustLoadIssuer(dir),
      authenticator: { authenticate: () => Promise.reject(new Error('apiserver unreachable')) },
      trustDomain: 'cluster.local',
      controlPlaneNamespace: 'linkerd',
    });
    const res = await broken.certify({ identity: WEB, token: tokenWeb, csrDer: csrWeb });
    assert.deepEqual(res.ok ? 'issued' : [res.code, res.reason, res.message], [
      'UNAVAILABLE',
      'authenticator-error',
      'cannot authenticate the token: apiserver unreachable',
    ]);
  });
});

describe('CertificateAuthority metrics', () => {
  it('counts issued and refused certificates and exports the issuer expiry', async () => {
    const registry = createRegistry();
    const issuer = await mustLoadIssuer(dir);
    const measured = await mkCa(dir, { registry });
    await measured.certify({ identity: WEB, token: tokenWeb, csrDer: csrWeb });
    await measured.certify({ identity: WEB, token: tokenWeb, csrDer: new Uint8Array([1]) });
    await measured.certify({ identity: WEB, token: tokenWeb, csrDer: new Uint8Array([2]) });
    await measured.certify({ identity: '', token: tokenWeb, csrDer: csrWeb });
    const text = await registry.metrics();
    assert.match(text, /^identity_cert_issued_total 1$/m);
    assert.match(text, /^identity_cert_refused_total\{reason="bad-csr"\} 2$/m);
    assert.match(text, /^identity_cert_refused_total\{reason="missing-field"\} 1$/m);
    assert.match(text, new RegExp(`^identity_issuer_expiry_timestamp_seconds ${issuer.notAfterMs / 1000}$`, 'm'));
    const ttl = Number(/^issuer_cert_ttl_seconds (\d+)$/m.exec(text)?.[1]);
    assert.ok(Math.abs(ttl - (issuer.notAfterMs - Date.now()) / 1000) < 60, String(ttl));
  });

  it('exports 0 for the issuer expiry and TTL while none is loaded (so expiry alerts fire)', async () => {
    const registry = createRegistry();
    new CertificateAuthority({
      issuer: undefined,
      authenticator: new LocalTokenAuthenticator({ keyPem: tokenKeyOf(dir) }),
      trustDomain: 't',
      controlPlaneNamespace: 'c',
      registry,
    });
    const text = await registry.metrics();
    assert.match(text, /^issuer_cert_ttl_seconds 0$/m);
    assert.match(text, /^identity_issuer_expiry_timestamp_seconds 0$/m);
  });
});

describe('loadIssuer + CertificateAuthority: keys', () => {
  it('issues for a fresh workload key and a reused one alike', async () => {
    const key = await generateEcKeyPair();
    const csr = await createCsr(WEB, { ...key });
    mustIssue(await ca.certify({ identity: WEB, token: tokenWeb, csrDer: csr }));
    mustIssue(await ca.certify({ identity: WEB, token: tokenWeb, csrDer: csr }));
    assert.ok((await loadIssuer(dir)).ok);
  });
});
