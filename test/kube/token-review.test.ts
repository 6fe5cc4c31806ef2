/**
 * TokenReviewAuthenticator against a real API server: real TokenRequests (pod-bound projected
 * tokens, as kubelet mounts them) and real TokenReviews.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import {
  CertificateAuthority,
  createCsr,
  generateWorkloadKey,
  type ReviewToken,
  TokenReviewAuthenticator,
  type TokenReviewStatus,
} from '../../src/identity/index.js';
import { mkIdentityDir, mustLoadIssuer, TempDirs } from '../../src/identity/test-helpers.js';
import { KubeClient, loadKubeconfig } from '../../src/sources/index.js';
import { describeWithKubeKit, type KubeKit, startKubeKit } from '../../src/sources/kube/testing/kube-kit.js';

/** The function the controller passes: POST a TokenReview, answer its status. */
function reviewWith(client: KubeClient): ReviewToken {
  return async (token, audiences) => {
    const res = await client.request({
      method: 'POST',
      path: '/apis/authentication.k8s.io/v1/tokenreviews',
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token, audiences } },
    });
    return ((res.body as { status?: TokenReviewStatus }).status ?? {}) as TokenReviewStatus;
  };
}

const enc = (s: string) => new TextEncoder().encode(s);
const podYaml = (name: string, sa: string) => `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: tr}
spec:
  serviceAccountName: ${sa}
  containers: [{name: app, image: example.invalid/app:1}]
`;

describeWithKubeKit('TokenReviewAuthenticator with a real API server', () => {
  let kit: KubeKit;
  let client: KubeClient;
  let auth: TokenReviewAuthenticator;
  const dirs = new TempDirs();
  const token = async (sa: string, audience: string | undefined, pod?: string) =>
    (
      await kit.kubectl([
        'create',
        'token',
        sa,
        '-n',
        'tr',
        ...(audience !== undefined ? ['--audience', audience] : []),
        ...(pod !== undefined ? ['--bound-object-kind', 'Pod', '--bound-object-name', pod] : []),
      ])
    ).trim();

  before(async () => {
    kit = await startKubeKit();
    await kit.kubectl(['create', 'namespace', 'tr']);
    await kit.kubectl(['create', 'serviceaccount', 'a', '-n', 'tr']);
    await kit.kubectl(['create', 'serviceaccount', 'b', '-n', 'tr']);
    // A pod-bound token needs the pod, with that ServiceAccount.
    await kit.kubectl(['apply', '-f', '-'], `${podYaml('pa', 'a')}---\n${podYaml('pb', 'b')}`);
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
    auth = new TokenReviewAuthenticator({ review: reviewWith(client) });
  });
  after(async () => {
    client?.close();
    await kit?.stop();
    dirs.cleanup();
  });

  it("returns the pod's ServiceAccount and pod for a pod-bound identity token", async () => {
    assert.deepEqual(await auth.authenticate(enc(await token('a', 'identity.l5d.io', 'pa'))), { ok: true, namespace: 'tr', serviceAccount: 'a', pod: 'pa' });
    assert.deepEqual(await auth.authenticate(enc(await token('b', 'identity.l5d.io', 'pb'))), { ok: true, namespace: 'tr', serviceAccount: 'b', pod: 'pb' });
    assert.deepEqual(await auth.authenticate(enc(await token('a', 'identity.l5d.io'))), { ok: true, namespace: 'tr', serviceAccount: 'a' });
  });

  it("never gives ServiceAccount a's token b's identity", async () => {
    const dir = await mkIdentityDir(dirs);
    const ca = new CertificateAuthority({
      issuer: await mustLoadIssuer(dir),
      authenticator: auth,
      trustDomain: 'cluster.local',
      controlPlaneNamespace: 'linkerd',
    });
    const idOf = (sa: string) => `${sa}.tr.serviceaccount.identity.linkerd.cluster.local`;
    const tokenA = enc(await token('a', 'identity.l5d.io', 'pa'));
    const asB = await ca.certify({ identity: idOf('b'), token: tokenA, csrDer: await createCsr(idOf('b'), await generateWorkloadKey()) });
    assert.deepEqual(asB.ok ? 'issued' : [asB.code, asB.reason], ['FAILED_PRECONDITION', 'identity-mismatch']);
    const asA = await ca.certify({ identity: idOf('a'), token: tokenA, csrDer: await createCsr(idOf('a'), await generateWorkloadKey()) });
    assert.equal(asA.ok, true);
  });

  it('refuses a token for another audience, an API server token, and garbage', async () => {
    const other = await auth.authenticate(enc(await token('a', 'vault', 'pa')));
    assert.equal(other.ok, false);
    assert.match(other.ok ? '' : other.message, /^token review failed: .*audience/);
    // Without --audience the token is for the API server itself: no mesh identity.
    const apiToken = await auth.authenticate(enc(await token('a', undefined, 'pa')));
    assert.equal(apiToken.ok, false);
    const garbage = await auth.authenticate(enc('not-a-token'));
    assert.equal(garbage.ok, false);
  });

  it('refuses the token of a deleted pod', async () => {
    await kit.kubectl(['apply', '-f', '-'], podYaml('gone', 'a'));
    const t = await token('a', 'identity.l5d.io', 'gone');
    assert.equal((await auth.authenticate(enc(t))).ok, true);
    await kit.kubectl(['delete', 'pod', 'gone', '-n', 'tr', '--wait=false']);
    assert.equal(await kit.kubectl(['get', 'pods', '-n', 'tr', '--field-selector=metadata.name=gone', '-o', 'name']), '');
    // The API server caches a successful authentication for about 10 s.
    let last: Awaited<ReturnType<typeof auth.authenticate>> | undefined;
    for (let i = 0; i < 100; i++) {
      last = await auth.authenticate(enc(t));
      if (!last.ok) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(last?.ok, false);
  });

  it('fails (does not refuse) when the API server cannot be reached', async () => {
    const config = loadKubeconfig(kit.kubeconfigPath);
    const down = new KubeClient({ ...config, server: 'https://127.0.0.1:1' }, { requestTimeoutMs: 5000 });
    try {
      await assert.rejects(new TokenReviewAuthenticator({ review: reviewWith(down) }).authenticate(enc(await token('a', 'identity.l5d.io', 'pa'))));
    } finally {
      down.close();
    }
  });
});
