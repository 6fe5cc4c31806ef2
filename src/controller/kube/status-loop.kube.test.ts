import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { type ClusterConfig, PolicyIndex } from '../../index/index.js';
import { customResourceDefinitions } from '../../manifest/index.js';
import { createRegistry } from '../../shared/index.js';
import { KubeClient, KubernetesSource, loadKubeconfig } from '../../sources/index.js';
import { describeWithKubeKit, type KubeKit, startKubeKit } from '../../sources/kube/testing/kube-kit.js';
import { createStatusLoop, type StatusLoop } from './status-loop.js';
import { rejectedObjects } from './status-writer.js';

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const MANIFESTS = `
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: app, labels: {app: web, linkerd.io/control-plane-ns: linkerd}}
spec:
  containers:
  - name: app
    image: example.invalid/web
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web-http, namespace: app}
spec:
  podSelector: {matchLabels: {app: web}}
  port: http
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: allow-web, namespace: app}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web}
  requiredAuthenticationRefs: []
---
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {name: web-get, namespace: app}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-http}]
  rules: [{matches: [{method: GET}]}]
`;

type Obj = { metadata: { resourceVersion: string; generation: number }; status?: { conditions?: Record<string, unknown>[]; parents?: unknown[] } };

/** The controller's status loop as it runs in a cluster: the Kubernetes source feeds the index and the writer, the Lease decides who writes. */
describeWithKubeKit('status loop: Kubernetes source, index, leader, writer', () => {
  let kit: KubeKit;
  let client: KubeClient;
  let source: KubernetesSource;
  let loop: StatusLoop;
  const registry = createRegistry();
  const index = new PolicyIndex(CONFIG);

  const get = async (plural: string, name: string, group = 'policy.linkerd.io', version = 'v1alpha1') =>
    (await client.request({ method: 'GET', path: `/apis/${group}/${version}/namespaces/app/${plural}/${name}` })).body as Obj;
  const resolved = async () => (await get('authorizationpolicies', 'allow-web')).status?.conditions?.find((c) => c.type === 'ResolvedRefs');
  const accepted = async () => (await get('authorizationpolicies', 'allow-web')).status?.conditions?.find((c) => c.type === 'Accepted');

  async function eventually(cond: () => Promise<boolean>, what: string): Promise<void> {
    const deadline = Date.now() + 60_000;
    while (!(await cond())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  before(async () => {
    kit = await startKubeKit();
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
    const crds = customResourceDefinitions();
    await kit.kubectl(['apply', '--server-side', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: crds }));
    await kit.kubectl(['wait', '--for=condition=Established', '--timeout=120s', ...crds.map((c) => `crd/${c.metadata.name}`)]);
    await kit.kubectl(['create', 'namespace', 'app']);
    await kit.kubectl(['create', 'namespace', 'linkerd']);
    await kit.kubectl(['apply', '-f', '-'], MANIFESTS);

    loop = createStatusLoop({
      client,
      index,
      namespace: 'linkerd',
      identity: 'ward-controller-0',
      rejected: () => rejectedObjects(source.status()),
      registry,
      election: { retryPeriodMs: 500 },
    });
    source = new KubernetesSource({ client, sink: index, onObject: loop.onObject, onChange: loop.onChange });
    await source.start();
    loop.start();
  });

  after(async () => {
    await source?.stop();
    await loop?.stop();
    client?.close();
    await kit?.stop();
  });

  it('the leader writes status from the watched objects, and its own writes coming back write nothing', async () => {
    await eventually(async () => (await resolved())?.reason === 'TargetNotFound', 'the policy status');
    await eventually(async () => ((await get('httproutes', 'web-get', 'policy.linkerd.io', 'v1beta3')).status?.parents?.length ?? 0) === 1, 'route status');
    assert.equal((await resolved())?.message, 'Server web not found in namespace app');
    // The writes come back as watch events; once they have, nothing more is written.
    const writes = loop.writer.stats.writes;
    const rv = (await get('authorizationpolicies', 'allow-web')).metadata.resourceVersion;
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(loop.writer.stats.writes, writes);
    assert.equal((await get('authorizationpolicies', 'allow-web')).metadata.resourceVersion, rv);
    assert.equal(loop.writer.stats.errors, 0);
    assert.match(await registry.metrics(), /^ward_leader 1$/m);
  });

  it('an edit is followed: the reference fixed, then an update the source refuses', async () => {
    await kit.kubectl(['patch', 'authorizationpolicy', '-n', 'app', 'allow-web', '--type=merge', '-p', '{"spec":{"targetRef":{"name":"web-http"}}}']);
    await eventually(async () => (await resolved())?.status === 'True', 'ResolvedRefs True');
    assert.equal((await get('authorizationpolicies', 'allow-web')).status?.conditions?.[0]?.observedGeneration, 2);

    // Admission refuses this target kind (no webhook in the kit): the previous version stays in force.
    await kit.kubectl(['patch', 'authorizationpolicy', '-n', 'app', 'allow-web', '--type=merge', '-p', '{"spec":{"targetRef":{"group":"","kind":"Pod"}}}']);
    await eventually(async () => (await accepted())?.status === 'False', 'Accepted False');
    const acc = await accepted();
    assert.equal(acc?.reason, 'Invalid');
    assert.match(String(acc?.message), /; the previous version stays in force$/);
    assert.equal(acc?.observedGeneration, 3);
    assert.equal((await resolved())?.status, 'True', 'the version in force still resolves');
  });

  it('stopping the loop gives the Lease up', async () => {
    await loop.stop();
    assert.equal(loop.election.isLeader(), false);
    const lease = (await client.request({ method: 'GET', path: '/apis/coordination.k8s.io/v1/namespaces/linkerd/leases/ward-controller' })).body as {
      spec: { holderIdentity?: string };
    };
    assert.equal(lease.spec.holderIdentity ?? '', '');
  });
});
