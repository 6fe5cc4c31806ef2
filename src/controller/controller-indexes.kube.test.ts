/**
 * The controller's indexes in Kubernetes mode, on a real API server: the source's reflector
 * metrics (ward_kube_*) are on the controller's registry, so /metrics tells whether each type is
 * synced and how many objects it mirrors.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import type { ClusterConfig } from '../index/index.js';
import { createRegistry, silentLogger } from '../shared/index.js';
import { KubeClient, loadKubeconfig } from '../sources/index.js';
import { describeWithKubeKit, type KubeKit, startKubeKit } from '../sources/kube/testing/kube-kit.js';
import { startIndexes } from './controller-indexes.js';
import { ShutdownStack } from './shutdown-stack.js';

const CLUSTER: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const POD = `
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: app, labels: {app: web, linkerd.io/control-plane-ns: linkerd}}
spec:
  containers: [{name: app, image: example.invalid/web, ports: [{name: http, containerPort: 8080}]}]
`;

describeWithKubeKit('controller indexes: Kubernetes mode', () => {
  let kit: KubeKit;
  let client: KubeClient;
  const log = silentLogger();
  const cleanups = new ShutdownStack(log);
  const registry = createRegistry();

  before(async () => {
    kit = await startKubeKit();
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
    await kit.kubectl(['create', 'namespace', 'app']);
    await kit.kubectl(['apply', '-f', '-'], POD);
  });

  after(async () => {
    await cleanups.closeAll();
    client?.close();
    await kit?.stop();
  });

  it("registers the source's reflector metrics on the controller's registry", async () => {
    const indexes = await startIndexes(
      { kubernetes: { client, namespace: 'linkerd', podName: 'ward-controller-0', proxyImage: 'localhost/ward:test' }, identityDir: '', cluster: CLUSTER },
      registry,
      log,
      cleanups,
    );
    assert.ok(indexes.kubernetes !== undefined);
    const text = await registry.metrics();
    assert.match(text, /^ward_kube_synced\{resource="pods\.v1"\} 1$/m);
    assert.match(text, /^ward_kube_objects\{resource="pods\.v1"\} 1$/m);
    assert.match(text, /^ward_kube_lists_total\{resource="namespaces\.v1"\} 1$/m);
    // The CRDs are not installed here: the types are known, synced as empty.
    assert.match(text, /^ward_kube_synced\{resource="servers\.policy\.linkerd\.io\/v1beta3"\} 1$/m);
  });
});
