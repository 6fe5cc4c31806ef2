import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseCidr } from '../core/index.js';
import { decodeResource, parseManifestText, type Resource } from '../manifest/index.js';
import { lintIndex } from './lint.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const net = (cidr: string) => ({ net: parseCidr(cidr)!, except: [] });
const config = (probe: string): ClusterConfig => ({
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [net('10.0.0.0/8')],
  probeNetworks: [net(probe)],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
});

const pod = (annotations = '') => `apiVersion: v1
kind: Pod
metadata:
  namespace: app
  name: web-0
  labels: {app: web, linkerd.io/control-plane-ns: linkerd}
  annotations: {${annotations}}
spec:
  containers:
  - name: app
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {port: 8080, path: /ready}
`;

/** A Server whose only route is the probe path, authorized for `cidr` only. */
const probeRoute = (cidr: string) => `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {namespace: app, name: web}
spec:
  podSelector: {matchLabels: {app: web}}
  port: http
  proxyProtocol: HTTP/1
---
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {namespace: app, name: probes}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web}]
  rules: [{matches: [{path: {type: Exact, value: /ready}}]}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: NetworkAuthentication
metadata: {namespace: app, name: nodes}
spec:
  networks: [{cidr: ${cidr}}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {namespace: app, name: probes}
spec:
  targetRef: {group: policy.linkerd.io, kind: HTTPRoute, name: probes}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: NetworkAuthentication, name: nodes}]
`;

function probeFindings(cfg: ClusterConfig, ...docs: string[]): string[] {
  const loaded = parseManifestText(docs.join('---\n'), 'p.yaml');
  assert.deepStrictEqual(loaded.diagnostics, []);
  const resources = loaded.documents.map((d) => (decodeResource(d) as { resource: Resource }).resource);
  const index = new PolicyIndex(cfg);
  index.update((tx) => {
    for (const r of resources) tx.apply(r);
  });
  return lintIndex(index, resources)
    .filter((d) => d.code === 'POL106')
    .map((d) => d.message);
}

describe('POL106 puts the kubelet in the probe networks', () => {
  it('--probe-networks outside the cluster networks: the automatic probe route admits the kubelet, no warning', () => {
    assert.deepStrictEqual(probeFindings(config('192.168.0.0/16'), pod('config.linkerd.io/default-inbound-policy: deny')), []);
  });

  it('--probe-networks outside the cluster networks: a probe route authorized for the probe network, no warning', () => {
    assert.deepStrictEqual(probeFindings(config('192.168.0.0/16'), pod(), probeRoute('192.168.0.0/16')), []);
  });

  it('a probe route authorized for the cluster networks only still warns when the kubelet is outside them', () => {
    assert.deepStrictEqual(probeFindings(config('192.168.0.0/16'), pod(), probeRoute('10.0.0.0/8')), [
      'readiness probe GET /ready on port 8080 of pod app/web-0 would be denied (server/web has no authorization admitting the kubelet)',
    ]);
  });

  it('probe networks that contain the cluster networks (the default): the kubelet is a node address inside them', () => {
    assert.deepStrictEqual(probeFindings(config('0.0.0.0/0'), pod(), probeRoute('10.0.0.0/8')), []);
    assert.deepStrictEqual(probeFindings(config('0.0.0.0/0'), pod(), probeRoute('172.16.0.0/12')), [
      'readiness probe GET /ready on port 8080 of pod app/web-0 would be denied (server/web has no authorization admitting the kubelet)',
    ]);
  });

  it('a probe network inside the cluster networks: the kubelet is in it', () => {
    assert.deepStrictEqual(probeFindings(config('10.1.0.0/16'), pod(), probeRoute('10.1.0.0/16')), []);
  });
});
