/**
 * `ward controller --kubernetes` against a real kube-apiserver (the apiserver kit: no kubelet, so
 * the test writes the pods' status itself), with ward's own CRDs from `ward install --crds`, and
 * real `ward proxy` processes on loopback:
 * - the controller is ready once its lists are applied, and serves the policy of a pod created
 *   through the API to a proxy that proves who it is with a real projected-style token
 *   (TokenRequest, audience identity.l5d.io, bound to the pod), authenticated by TokenReview;
 * - a token of another ServiceAccount never buys the pod's identity;
 * - as the Lease holder, it writes the Server's status (Accepted, selected pods and ports);
 * - a policy change through the API reaches the index (the Server's authorizations).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { describeWithKubeKit, type KubeKit, startKubeKit } from '../../src/sources/kube/testing/kube-kit.js';
import { metricSum, proxyPorts, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const WAIT_MS = 60_000;

const OBJECTS = `
apiVersion: v1
kind: Namespace
metadata: {name: linkerd}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: other, namespace: demo}
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: demo
  # As the injector leaves a pod: the index serves meshed pods only.
  labels: {app: web, linkerd.io/control-plane-ns: linkerd}
  annotations: {linkerd.io/proxy-version: ward}
spec:
  serviceAccountName: web
  containers:
  - name: app
    image: localhost/none:1
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: other
  namespace: demo
  labels: {app: other, linkerd.io/control-plane-ns: linkerd}
  annotations: {linkerd.io/proxy-version: ward}
spec:
  serviceAccountName: other
  containers:
  - {name: app, image: localhost/none:1}
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web-http, namespace: demo}
spec:
  podSelector: {matchLabels: {app: web}}
  port: http
  proxyProtocol: HTTP/1
`;

const POLICY = `
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: other-sa, namespace: demo}
spec:
  identityRefs: [{kind: ServiceAccount, name: other}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: web-from-other, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-http}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: other-sa}]
`;

describeWithKubeKit('e2e: ward controller --kubernetes against a real API server', () => {
  let kit: KubeKit;
  let dir: string;
  let idDir: string;
  let ctl: WardProcess;
  let admin = 0;
  let identityPort = 0;
  let policyPort = 0;
  const proxies: WardProcess[] = [];

  /** A TokenRequest for demo/<sa>, audience identity.l5d.io, bound to pod demo/<pod>, in a file. */
  async function tokenFile(sa: string, pod: string): Promise<string> {
    const token = await kit.kubectl([
      'create',
      'token',
      sa,
      '-n',
      'demo',
      '--audience',
      'identity.l5d.io',
      '--bound-object-kind',
      'Pod',
      '--bound-object-name',
      pod,
    ]);
    const file = join(dir, `${sa}-${pod}.token`);
    writeFileSync(file, `${token.trim()}\n`);
    return file;
  }

  function proxy(pod: string, sa: string, token: string): WardProcess {
    const p = wardSpawn([
      'proxy',
      '--workload',
      `demo/${pod}`,
      '--service-account',
      sa,
      '--trust-anchors',
      join(idDir, 'ca.crt'),
      '--token-file',
      token,
      '--identity-addr',
      `127.0.0.1:${identityPort}`,
      '--policy-addr',
      `127.0.0.1:${policyPort}`,
      '--inbound',
      '8080@0=127.0.0.1:1',
      '--mesh-addr',
      '127.0.0.1:0',
      '--admin-addr',
      '127.0.0.1:0',
    ]);
    proxies.push(p);
    return p;
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-ctl-kube-'));
    kit = await startKubeKit(join(dir, 'api'));
    const crds = wardSync(['install', '--crds']);
    assert.equal(crds.status, 0, crds.stderr);
    await kit.kubectl(['apply', '--server-side', '-f', '-'], crds.stdout);
    await kit.kubectl([
      'wait',
      '--for=condition=Established',
      '--timeout=120s',
      'crd/servers.policy.linkerd.io',
      'crd/authorizationpolicies.policy.linkerd.io',
    ]);
    await kit.kubectl(['apply', '-f', '-'], OBJECTS);
    // No kubelet here: the pods' addresses and readiness are written as a kubelet would.
    for (const [pod, ip] of [
      ['web', '10.88.7.2'],
      ['other', '10.88.7.3'],
    ] as const) {
      const status = { status: { phase: 'Running', podIP: ip, podIPs: [{ ip }], conditions: [{ type: 'Ready', status: 'True' }] } };
      await kit.kubectl(['patch', 'pod', pod, '-n', 'demo', '--subresource=status', '--type=merge', '-p', JSON.stringify(status)]);
    }
    idDir = join(dir, 'id');
    const init = wardSync(['identity', 'init', '--out', idDir]);
    assert.equal(init.status, 0, init.stderr);
    ctl = wardSpawn(
      [
        'controller',
        '--kubernetes',
        '--kubeconfig',
        kit.kubeconfigPath,
        '--identity-dir',
        idDir,
        '--controller-host',
        '127.0.0.1',
        '--policy-addr',
        '127.0.0.1:0',
        '--identity-addr',
        '127.0.0.1:0',
        '--destination-addr',
        '127.0.0.1:0',
        '--admin-addr',
        '127.0.0.1:0',
      ],
      { POD_NAME: 'ward-controller-test', POD_NAMESPACE: 'linkerd' },
    );
    const ports = await waitFor(
      `the controller's ready line (stderr so far: ${ctl.stderr().slice(-800)})`,
      () => {
        if (ctl.child.exitCode !== null) throw new Error(`controller exited with ${ctl.child.exitCode}: ${ctl.stderr()}`);
        const m = /ward controller ready: policy :(\d+), identity :(\d+), destination :(\d+), admin http:\/\/[^:]+:(\d+)/.exec(ctl.stderr());
        return m === null ? undefined : { policy: Number(m[1]), identity: Number(m[2]), admin: Number(m[4]) };
      },
      WAIT_MS,
    );
    ({ policy: policyPort, identity: identityPort, admin } = ports);
  });

  after(async () => {
    await Promise.all(proxies.map((p) => p.stop()));
    await ctl?.stop();
    await kit?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('is ready with the objects listed, and certifies a proxy whose token TokenReview vouches for', async () => {
    const resources = (await (await fetch(`http://127.0.0.1:${admin}/api/v1/resources`)).json()) as { resources: { kind: string; name: string }[] };
    assert.ok(
      resources.resources.some((r) => r.kind === 'Server' && r.name === 'web-http'),
      JSON.stringify(resources),
    );
    const p = proxy('web', 'web', await tokenFile('web', 'web'));
    const ready = await proxyPorts(p, '127.0.0.1', WAIT_MS);
    assert.equal(ready.identity, 'web.demo.serviceaccount.identity.linkerd.cluster.local');
  });

  it("never certifies a proxy with another ServiceAccount's token", async () => {
    const before = metricSum(await (await fetch(`http://127.0.0.1:${admin}/metrics`)).text(), 'identity_cert_refused_total', {});
    const p = proxy('web', 'web', await tokenFile('other', 'other'));
    await waitFor(
      `the refusal to be counted (proxy stderr: ${p.stderr().slice(-800)})`,
      async () => {
        const text = await (await fetch(`http://127.0.0.1:${admin}/metrics`)).text();
        return metricSum(text, 'identity_cert_refused_total', { reason: 'identity-mismatch' }) > 0 ? true : undefined;
      },
      WAIT_MS,
      200,
    );
    const after = metricSum(await (await fetch(`http://127.0.0.1:${admin}/metrics`)).text(), 'identity_cert_refused_total', {});
    assert.ok(after > before);
    // The proxy listens, but without a certificate it is not ready.
    const proxyAdmin = Number(/^ward proxy ready: .* admin :(\d+)/m.exec(p.stderr())?.[1]);
    assert.ok(proxyAdmin > 0, p.stderr());
    assert.equal((await fetch(`http://127.0.0.1:${proxyAdmin}/ready`)).status, 503);
    assert.match(p.stderr(), /requested identity did not match provided token/);
  });

  it("writes the Server's status as the Lease holder", async () => {
    const status = await waitFor(
      `the Server's status (controller stderr: ${ctl.stderr().slice(-800)})`,
      async () => {
        const s = JSON.parse(await kit.kubectl(['get', 'server', 'web-http', '-n', 'demo', '-o', 'json'])) as {
          status?: { conditions?: { type: string; status: string }[]; selectedPods?: number; selectedPorts?: number };
        };
        return s.status?.conditions?.some((c) => c.type === 'Accepted' && c.status === 'True') === true ? s.status : undefined;
      },
      WAIT_MS,
      250,
    );
    assert.equal(status.selectedPods, 1);
    assert.equal(status.selectedPorts, 1);
    const lease = JSON.parse(await kit.kubectl(['get', 'lease', 'ward-controller', '-n', 'linkerd', '-o', 'json'])) as { spec: { holderIdentity: string } };
    assert.equal(lease.spec.holderIdentity, 'ward-controller-test');
  });

  it('applies a policy created through the API to the pod the Server selects', async () => {
    await kit.kubectl(['apply', '-f', '-'], POLICY);
    await waitFor(
      'the policy to reach the index',
      async () => {
        const authz = (await (await fetch(`http://127.0.0.1:${admin}/api/v1/authz?namespace=demo&resource=pod/web`)).text()).toString();
        return authz.includes('web-from-other') ? true : undefined;
      },
      WAIT_MS,
      200,
    );
  });
});
