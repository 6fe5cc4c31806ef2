import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { mkCa, mkIdentityDir, TempDirs } from './test-helpers.js';
import { type ReviewToken, TokenReviewAuthenticator, type TokenReviewStatus } from './token-review.js';
import { createCsr, generateWorkloadKey } from './workload.js';

const enc = (s: string) => new TextEncoder().encode(s);
const AUTHENTICATED: TokenReviewStatus = {
  authenticated: true,
  audiences: ['identity.l5d.io'],
  user: {
    username: 'system:serviceaccount:emojivoto:web',
    uid: '8c1b2f4e-0000-4000-8000-000000000001',
    groups: ['system:serviceaccounts', 'system:serviceaccounts:emojivoto', 'system:authenticated'],
    extra: { 'authentication.kubernetes.io/pod-name': ['web-6f7b'], 'authentication.kubernetes.io/pod-uid': ['1234'] },
  },
};

/** An authenticator whose API server always answers `status`, recording what it was asked. */
function withAnswer(status: TokenReviewStatus) {
  const asked: { token: string; audiences: readonly string[] }[] = [];
  const review: ReviewToken = (token, audiences) => {
    asked.push({ token, audiences });
    return Promise.resolve(status);
  };
  return { auth: new TokenReviewAuthenticator({ review }), asked };
}

const refusal = async (status: TokenReviewStatus, token = 'tok') => {
  const r = await withAnswer(status).auth.authenticate(enc(token));
  return r.ok ? 'accepted' : r.message;
};

describe('TokenReviewAuthenticator', () => {
  it('returns the ServiceAccount and pod of an authenticated review, asking for the identity audience', async () => {
    const { auth, asked } = withAnswer(AUTHENTICATED);
    assert.deepEqual(await auth.authenticate(enc('header.claims.sig\n')), { ok: true, namespace: 'emojivoto', serviceAccount: 'web', pod: 'web-6f7b' });
    assert.deepEqual(asked, [{ token: 'header.claims.sig', audiences: ['identity.l5d.io'] }]);
  });

  it('accepts a token not bound to a pod, without a pod', async () => {
    const { auth } = withAnswer({ ...AUTHENTICATED, user: { username: 'system:serviceaccount:emojivoto:web' } });
    assert.deepEqual(await auth.authenticate(enc('t')), { ok: true, namespace: 'emojivoto', serviceAccount: 'web' });
  });

  it('refuses an unauthenticated review and one that reports an error', async () => {
    assert.equal(await refusal({ authenticated: false }), 'token is not authenticated');
    assert.equal(await refusal({}), 'token is not authenticated');
    assert.equal(
      await refusal({ authenticated: false, error: '[invalid bearer token, token audiences ["api"] is invalid for the target audiences ["identity.l5d.io"]]' }),
      'token review failed: [invalid bearer token, token audiences ["api"] is invalid for the target audiences ["identity.l5d.io"]]',
    );
    // An error wins even if the answer claims success.
    assert.equal(await refusal({ ...AUTHENTICATED, error: 'boom' }), 'token review failed: boom');
  });

  it('refuses a review whose audiences do not include identity.l5d.io', async () => {
    assert.equal(await refusal({ ...AUTHENTICATED, audiences: [] }), 'token audiences [] do not include identity.l5d.io');
    const { audiences: _, ...noAudiences } = AUTHENTICATED;
    assert.equal(await refusal(noAudiences), 'token audiences [] do not include identity.l5d.io');
    assert.equal(
      await refusal({ ...AUTHENTICATED, audiences: ['https://kubernetes.default.svc'] }),
      'token audiences ["https://kubernetes.default.svc"] do not include identity.l5d.io',
    );
  });

  it('refuses users that are not ServiceAccounts', async () => {
    for (const username of [
      'admin',
      'system:node:worker-1',
      'system:serviceaccount:emojivoto',
      'system:serviceaccount:emojivoto:web:x',
      'system:serviceaccount:Emoji:web',
      'system:serviceaccount::web',
    ]) {
      assert.equal(
        await refusal({ ...AUTHENTICATED, user: { username } }),
        `token user ${JSON.stringify(username)} is not system:serviceaccount:<namespace>:<name>`,
        username,
      );
    }
    assert.equal(await refusal({ authenticated: true, audiences: ['identity.l5d.io'] }), 'token user "" is not system:serviceaccount:<namespace>:<name>');
  });

  it('ignores an ambiguous pod-name extra', async () => {
    const { auth } = withAnswer({ ...AUTHENTICATED, user: { ...AUTHENTICATED.user, extra: { 'authentication.kubernetes.io/pod-name': ['a', 'b'] } } });
    assert.deepEqual(await auth.authenticate(enc('t')), { ok: true, namespace: 'emojivoto', serviceAccount: 'web' });
  });

  it('refuses empty and oversized tokens without a review', async () => {
    const { auth, asked } = withAnswer(AUTHENTICATED);
    assert.deepEqual(await auth.authenticate(new Uint8Array()), { ok: false, message: 'empty token' });
    assert.deepEqual(await auth.authenticate(enc('  \n')), { ok: false, message: 'empty token' });
    assert.deepEqual(await auth.authenticate(new Uint8Array(16 * 1024 + 1).fill(0x61)), { ok: false, message: 'token is longer than 16384 bytes' });
    assert.equal(asked.length, 0);
  });

  it('propagates a failed review (the API server unreachable) instead of refusing', async () => {
    const auth = new TokenReviewAuthenticator({ review: () => Promise.reject(new Error('connect ECONNREFUSED 10.0.0.1:443')) });
    await assert.rejects(auth.authenticate(enc('t')), /ECONNREFUSED/);
  });
});

describe('TokenReviewAuthenticator in the CA', () => {
  const dirs = new TempDirs();
  let dir = '';
  before(async () => {
    dir = await mkIdentityDir(dirs);
  });
  after(() => dirs.cleanup());
  const WEB = 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local';

  it('issues for the reviewed ServiceAccount, and answers UNAVAILABLE when the review cannot be made', async () => {
    const csr = await createCsr(WEB, await generateWorkloadKey());
    const ok = await mkCa(dir, { authenticator: withAnswer(AUTHENTICATED).auth });
    assert.equal((await ok.certify({ identity: WEB, token: enc('t'), csrDer: csr })).ok, true);

    const other = await mkCa(dir, { authenticator: withAnswer({ ...AUTHENTICATED, user: { username: 'system:serviceaccount:emojivoto:voting' } }).auth });
    const mismatch = await other.certify({ identity: WEB, token: enc('t'), csrDer: csr });
    assert.deepEqual(mismatch.ok ? 'issued' : [mismatch.code, mismatch.reason], ['FAILED_PRECONDITION', 'identity-mismatch']);

    const refused = await (await mkCa(dir, { authenticator: withAnswer({ authenticated: false }).auth })).certify({
      identity: WEB,
      token: enc('t'),
      csrDer: csr,
    });
    assert.deepEqual(refused.ok ? 'issued' : [refused.code, refused.reason, refused.message], [
      'INVALID_ARGUMENT',
      'bad-token',
      'invalid token: token is not authenticated',
    ]);

    const down = await mkCa(dir, { authenticator: new TokenReviewAuthenticator({ review: () => Promise.reject(new Error('connect ECONNREFUSED')) }) });
    const res = await down.certify({ identity: WEB, token: enc('t'), csrDer: csr });
    assert.deepEqual(res.ok ? 'issued' : [res.code, res.reason, res.message], [
      'UNAVAILABLE',
      'authenticator-error',
      'cannot authenticate the token: connect ECONNREFUSED',
    ]);
  });
});
