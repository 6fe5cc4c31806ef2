import assert from 'node:assert/strict';
import { createHmac, createPublicKey, generateKeyPairSync, sign } from 'node:crypto';
import { describe, it } from 'node:test';
import { LocalTokenAuthenticator, mintToken, parseServiceAccountUsername } from './token.js';

const pem = (k: ReturnType<typeof generateKeyPairSync>['privateKey']) => k.export({ type: 'pkcs8', format: 'pem' }) as string;
const KEY = pem(generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey);
const OTHER_KEY = pem(generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey);
const NOW = Date.UTC(2030, 0, 1, 12);
const enc = (s: string) => new TextEncoder().encode(s);
const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

const auth = new LocalTokenAuthenticator({ keyPem: KEY });
const check = async (token: string | Uint8Array, now = NOW) => auth.authenticate(typeof token === 'string' ? enc(token) : token, now);
const reason = async (token: string | Uint8Array, now = NOW) => {
  const r = await check(token, now);
  return r.ok ? 'accepted' : r.message;
};

/** A JWT with arbitrary header and claims, ES256-signed with `keyPem`. */
function signed(header: object, claims: object, keyPem = KEY): string {
  const input = `${b64(header)}.${b64(claims)}`;
  return `${input}.${sign('sha256', Buffer.from(input), { key: keyPem, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`;
}

const nowS = NOW / 1000;
const CLAIMS = {
  iss: 'ward',
  aud: ['identity.l5d.io'],
  sub: 'system:serviceaccount:default:web',
  'kubernetes.io': { namespace: 'default', serviceaccount: { name: 'web' } },
  iat: nowS,
  nbf: nowS,
  exp: nowS + 3600,
};
const HEADER = { alg: 'ES256', typ: 'JWT' };

describe('mintToken + LocalTokenAuthenticator', () => {
  it('round-trips a token, with and without a pod', async () => {
    const t = mintToken({ signerKeyPem: KEY, namespace: 'default', serviceAccount: 'web', now: NOW });
    assert.deepEqual(await check(t), { ok: true, namespace: 'default', serviceAccount: 'web' });
    const withPod = mintToken({ signerKeyPem: KEY, namespace: 'emojivoto', serviceAccount: 'web-svc', pod: 'web-5d8f-abc12', now: NOW });
    assert.deepEqual(await check(withPod), { ok: true, namespace: 'emojivoto', serviceAccount: 'web-svc', pod: 'web-5d8f-abc12' });
    // Verification works from the public key alone.
    const pub = createPublicKey(KEY).export({ type: 'spki', format: 'pem' }) as string;
    assert.equal((await new LocalTokenAuthenticator({ keyPem: pub }).authenticate(enc(t), NOW)).ok, true);
  });

  it('writes Kubernetes-shaped claims', () => {
    const t = mintToken({ signerKeyPem: KEY, namespace: 'default', serviceAccount: 'web', pod: 'web-1', ttlMs: 600_000, now: NOW });
    const [h, p] = t.split('.') as [string, string];
    assert.deepEqual(JSON.parse(Buffer.from(h, 'base64url').toString()), { alg: 'ES256', typ: 'JWT' });
    assert.deepEqual(JSON.parse(Buffer.from(p, 'base64url').toString()), {
      iss: 'ward',
      aud: ['identity.l5d.io'],
      sub: 'system:serviceaccount:default:web',
      'kubernetes.io': { namespace: 'default', serviceaccount: { name: 'web' }, pod: { name: 'web-1' } },
      iat: nowS,
      nbf: nowS,
      exp: nowS + 600,
    });
  });

  it('accepts a hand-built token with the same claims (the fixture is right)', async () => {
    assert.equal(await reason(signed(HEADER, CLAIMS)), 'accepted');
  });

  it('rejects a token signed with another key', async () => {
    assert.equal(await reason(mintToken({ signerKeyPem: OTHER_KEY, namespace: 'default', serviceAccount: 'web', now: NOW })), 'JWT signature does not verify');
  });

  it('rejects alg none, HMAC (keyed with the public key) and other algorithms', async () => {
    assert.equal(await reason(`${b64({ alg: 'none', typ: 'JWT' })}.${b64(CLAIMS)}.`), 'JWT algorithm "none" is not accepted (want ES256)');
    const pub = createPublicKey(KEY).export({ type: 'spki', format: 'pem' }) as string;
    const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(CLAIMS)}`;
    const hs = `${input}.${createHmac('sha256', pub).update(input).digest('base64url')}`;
    assert.equal(await reason(hs), 'JWT algorithm "HS256" is not accepted (want ES256)');
    assert.match(await reason(signed({ alg: 'ES384' }, CLAIMS)), /algorithm "ES384" is not accepted/);
    assert.match(await reason(signed({ typ: 'JWT' }, CLAIMS)), /algorithm undefined is not accepted/);
    assert.match(await reason(signed({ alg: 'ES256', crit: ['exp'] }, CLAIMS)), /crit/);
  });

  it('rejects a payload swapped for another ServiceAccount', async () => {
    const [h, , s] = mintToken({ signerKeyPem: KEY, namespace: 'default', serviceAccount: 'web', now: NOW }).split('.') as [string, string, string];
    const other = b64({ ...CLAIMS, sub: 'system:serviceaccount:default:admin', 'kubernetes.io': { namespace: 'default', serviceaccount: { name: 'admin' } } });
    assert.equal(await reason(`${h}.${other}.${s}`), 'JWT signature does not verify');
  });

  it('rejects expired and not-yet-valid tokens, allowing 30 s of skew', async () => {
    const t = mintToken({ signerKeyPem: KEY, namespace: 'default', serviceAccount: 'web', ttlMs: 60_000, now: NOW });
    assert.equal(await reason(t, NOW + 60_000 + 29_000), 'accepted');
    assert.equal(await reason(t, NOW + 60_000 + 31_000), 'token expired at 2030-01-01T12:01:00.000Z');
    assert.equal(await reason(t, NOW - 29_000), 'accepted');
    assert.equal(await reason(t, NOW - 31_000), 'token is not valid yet (nbf)');
    assert.match(await reason(signed(HEADER, { ...CLAIMS, nbf: undefined, iat: nowS + 120 })), /issued in the future/);
    assert.equal(await reason(signed(HEADER, { ...CLAIMS, exp: undefined })), 'token has no exp');
    assert.equal(await reason(signed(HEADER, { ...CLAIMS, exp: String(nowS + 60) })), 'token has no exp');
  });

  it('rejects a wrong audience or issuer', async () => {
    const t = mintToken({ signerKeyPem: KEY, namespace: 'default', serviceAccount: 'web', now: NOW, audience: 'kubernetes.default.svc' });
    assert.equal(await reason(t), 'token audience ["kubernetes.default.svc"] does not include identity.l5d.io');
    assert.equal(await reason(signed(HEADER, { ...CLAIMS, aud: 'identity.l5d.io' })), 'accepted');
    assert.match(await reason(signed(HEADER, { ...CLAIMS, aud: undefined })), /audience undefined/);
    assert.equal(await reason(signed(HEADER, { ...CLAIMS, iss: 'kubernetes/serviceaccount' })), 'token issuer "kubernetes/serviceaccount" is not ward');
  });

  it('rejects subjects that are not system:serviceaccount:<ns>:<sa> of DNS-1123 labels', async () => {
    for (const sub of [
      'system:serviceaccount:Default:web',
      'system:serviceaccount:default',
      'system:node:worker-1',
      'system:serviceaccount:default:web:x',
      'system:serviceaccount:a.b:web',
      42,
    ]) {
      assert.match(
        await reason(signed(HEADER, { ...CLAIMS, sub, 'kubernetes.io': undefined })),
        /is not system:serviceaccount:<namespace>:<name>/,
        String(sub),
      );
    }
    assert.equal(
      await reason(signed(HEADER, { ...CLAIMS, 'kubernetes.io': { namespace: 'default', serviceaccount: { name: 'admin' } } })),
      'token kubernetes.io claims disagree with its subject',
    );
  });

  it('rejects garbage and empty tokens', async () => {
    assert.equal(await reason(new Uint8Array()), 'empty token');
    assert.equal(await reason('garbage'), 'not a JWT (want three base64url parts)');
    assert.equal(await reason('a.b.c.d'), 'not a JWT (want three base64url parts)');
    assert.equal(await reason('a+b.c/d.e=f'), 'not a JWT (want three base64url parts)');
    assert.equal(await reason(`${b64('[1]')}.${b64(CLAIMS)}.AAAA`), 'JWT header is not a JSON object');
    assert.equal(await reason(`${b64(HEADER)}.${b64(CLAIMS)}.AAAA`), 'JWT signature has the wrong length for ES256');
    assert.match(await reason(new Uint8Array(20_000).fill(0x41)), /longer than/);
    assert.equal(await reason(new Uint8Array([0xff, 0xfe, 0x00])), 'not a JWT (want three base64url parts)');
    // A signed payload that is not JSON.
    const input = `${b64(HEADER)}.${Buffer.from('not json').toString('base64url')}`;
    const sig = sign('sha256', Buffer.from(input), { key: KEY, dsaEncoding: 'ieee-p1363' }).toString('base64url');
    assert.equal(await reason(`${input}.${sig}`), 'JWT payload is not a JSON object');
  });

  it('tolerates a trailing newline (tokens read from files)', async () => {
    assert.equal(await reason(`${mintToken({ signerKeyPem: KEY, namespace: 'default', serviceAccount: 'web', now: NOW })}\n`), 'accepted');
  });

  it('mintToken refuses names that are not DNS-1123 labels and non-P-256 keys', () => {
    assert.throws(() => mintToken({ signerKeyPem: KEY, namespace: 'Default', serviceAccount: 'web' }), /namespace "Default"/);
    assert.throws(() => mintToken({ signerKeyPem: KEY, namespace: 'default', serviceAccount: 'web:x' }), /service account "web:x"/);
    const rsa = pem(generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey);
    assert.throws(() => mintToken({ signerKeyPem: rsa, namespace: 'default', serviceAccount: 'web' }), /ECDSA P-256/);
    assert.throws(() => new LocalTokenAuthenticator({ keyPem: rsa }), /ECDSA P-256/);
  });
});

describe('parseServiceAccountUsername', () => {
  it('parses upstream usernames', () => {
    assert.deepEqual(parseServiceAccountUsername('system:serviceaccount:emojivoto:web-svc'), { namespace: 'emojivoto', serviceAccount: 'web-svc' });
    for (const bad of [
      '',
      'system:serviceaccount::web',
      'system:serviceaccount:ns:-web',
      `system:serviceaccount:ns:${'a'.repeat(64)}`,
      'user:serviceaccount:ns:web',
    ]) {
      assert.equal(parseServiceAccountUsername(bad), undefined, bad);
    }
  });
});
