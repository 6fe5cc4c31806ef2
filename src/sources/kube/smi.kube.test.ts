/**
 * SMI access policy through a real API server: with the SMI CRDs installed (as OSM installs
 * them: TrafficTarget v1alpha3, specs v1alpha4), the Kubernetes source lists and watches
 * TrafficTargets, HTTPRouteGroups and TCPRoutes, and the index computes for them exactly what the
 * directory source computes from the same manifests; edits and deletions follow.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { parseCidr } from '../../core/index.js';
import { type ClusterConfig, PolicyIndex } from '../../index/index.js';
import { waitFor } from '../../shared/testing/waits.js';
import { DirectorySource } from '../directory-source.js';
import { KubeClient, loadKubeconfig } from './client.js';
import { KubernetesSource } from './kubernetes-source.js';
import { describeWithKubeKit, type KubeKit, startKubeKit } from './testing/kube-kit.js';

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [{ net: parseCidr('10.0.0.0/8') ?? assert.fail(), except: [] }],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

/** The SMI CRDs with OSM's served versions; schemas kept open (the decoders check the fields). */
const crd = (group: string, kind: string, plural: string, version: string) => `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: ${plural}.${group}}
spec:
  group: ${group}
  scope: Namespaced
  names: {kind: ${kind}, plural: ${plural}, singular: ${kind.toLowerCase()}}
  versions:
  - name: ${version}
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
`;
const CRDS =
  crd('access.smi-spec.io', 'TrafficTarget', 'traffictargets', 'v1alpha3') +
  crd('specs.smi-spec.io', 'HTTPRouteGroup', 'httproutegroups', 'v1alpha4') +
  crd('specs.smi-spec.io', 'TCPRoute', 'tcproutes', 'v1alpha4');

const CORE = `apiVersion: v1
kind: Namespace
metadata: {name: smi}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: api, namespace: smi}
---
apiVersion: v1
kind: Pod
metadata: {name: api-0, namespace: smi, labels: {app: api, linkerd.io/control-plane-ns: linkerd}}
spec:
  serviceAccountName: api
  automountServiceAccountToken: false
  containers: [{name: app, image: app, ports: [{name: http, containerPort: 8080}]}]
`;

const POLICY = `apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: http-port, namespace: smi}
spec: {matches: {ports: [8080]}}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: routes, namespace: smi}
spec:
  matches: [{name: api, pathRegex: "/api/.*", methods: [GET]}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: web-api, namespace: smi}
spec:
  destination: {kind: ServiceAccount, name: api, namespace: smi}
  rules: [{kind: TCPRoute, name: http-port}, {kind: HTTPRouteGroup, name: routes, matches: [api]}]
  sources: [{kind: ServiceAccount, name: web, namespace: smi}]
`;

describeWithKubeKit('SMI through the Kubernetes source', () => {
  let kit: KubeKit;
  let client: KubeClient;
  let dir: string;
  const stops: (() => unknown)[] = [];

  before(async () => {
    kit = await startKubeKit();
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
    dir = mkdtempSync(join(tmpdir(), 'ward-smi-kube-'));
    await kit.kubectl(['apply', '-f', '-'], CRDS);
    await kit.kubectl([
      'wait',
      '--for=condition=Established',
      '--timeout=120s',
      'crd/traffictargets.access.smi-spec.io',
      'crd/httproutegroups.specs.smi-spec.io',
      'crd/tcproutes.specs.smi-spec.io',
    ]);
    await kit.kubectl(['apply', '-f', '-'], CORE);
    await kit.kubectl(['apply', '-f', '-'], POLICY);
    writeFileSync(join(dir, 'core.yaml'), CORE);
    writeFileSync(join(dir, 'policy.yaml'), POLICY);
  });
  after(async () => {
    for (const s of stops.splice(0).reverse()) await s();
    client?.close();
    await kit?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('watches the SMI kinds and computes what the directory source computes; a deleted TrafficTarget stops governing', { timeout: 120_000 }, async () => {
    const kubeIndex = new PolicyIndex(CONFIG);
    const dirIndex = new PolicyIndex(CONFIG);
    const kube = new KubernetesSource({ client, sink: kubeIndex });
    stops.push(() => kube.stop());
    const dirSource = new DirectorySource({ dir, config: { controlPlaneNamespace: 'linkerd' }, sink: dirIndex, debounceMs: 20 });
    stops.push(() => dirSource.stop());
    await kube.start();
    await dirSource.start();
    assert.ok(
      kube.types().some((t) => `${t.plural}.${t.group}/${t.version}` === 'traffictargets.access.smi-spec.io/v1alpha3'),
      JSON.stringify(kube.types()),
    );
    const viaKube = kubeIndex.peek('smi', 'api-0', 8080)?.value;
    assert.ok(viaKube);
    assert.deepEqual(viaKube.meta, { group: 'access.smi-spec.io', kind: 'traffictarget', name: 'web-api' });
    assert.deepEqual(viaKube, dirIndex.peek('smi', 'api-0', 8080)?.value);

    const cell = kubeIndex.lookup('smi', 'api-0', 8080);
    assert.ok(cell);
    await kit.kubectl(['-n', 'smi', 'delete', 'traffictarget', 'web-api']);
    await waitFor(() => cell.value.meta.kind === 'default', 'the TrafficTarget deletion to reach the index', 30_000);
  });
});
