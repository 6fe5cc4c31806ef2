/**
 * Authentications referenced across namespaces: a change of a MeshTLSAuthentication or a
 * NetworkAuthentication reaches every namespace whose AuthorizationPolicies reference it (by
 * namespace and case-insensitive name), and only those.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type InboundServer, type Network, POLICY_GROUP, parseCidr } from '../core/index.js';
import type { AuthorizationPolicy, MeshTLSAuthentication, NamespacedTargetRef, NetworkAuthentication, Pod, Resource, Server } from '../manifest/index.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const net = (cidr: string): Network => ({ net: parseCidr(cidr) as Network['net'], except: [] });
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [net('10.0.0.0/8')],
  probeNetworks: [net('0.0.0.0/0')],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};
const meta = (namespace: string, name: string, labels: Record<string, string> = {}) => ({ namespace, name, labels, annotations: {} });
const identity = (name: string) => `${name}.shared.serviceaccount.identity.linkerd.cluster.local`;

function mkPod(namespace: string, name: string): Pod {
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: meta(namespace, name, { app: 'web', 'linkerd.io/control-plane-ns': 'linkerd' }),
    spec: { containers: [{ name: 'app', ports: [{ name: 'http', containerPort: 8080 }] }] },
  };
}

function mkServer(namespace: string): Server {
  return {
    kind: 'Server',
    apiVersion: 'policy.linkerd.io/v1beta3',
    metadata: meta(namespace, 'web'),
    spec: { podSelector: { matchLabels: { app: 'web' } }, port: 8080, proxyProtocol: 'opaque' },
  };
}

function mkAuthorizationPolicy(namespace: string, refs: NamespacedTargetRef[]): AuthorizationPolicy {
  return {
    kind: 'AuthorizationPolicy',
    apiVersion: 'policy.linkerd.io/v1alpha1',
    metadata: meta(namespace, 'web-clients'),
    spec: { targetRef: { group: POLICY_GROUP, kind: 'Server', name: 'web' }, requiredAuthenticationRefs: refs },
  };
}

function mkMeshTLS(namespace: string, name: string, identities: string[]): MeshTLSAuthentication {
  return { kind: 'MeshTLSAuthentication', apiVersion: 'policy.linkerd.io/v1alpha1', metadata: meta(namespace, name), spec: { identities } };
}

function mkNetworkAuthentication(namespace: string, name: string, cidr: string): NetworkAuthentication {
  return { kind: 'NetworkAuthentication', apiVersion: 'policy.linkerd.io/v1alpha1', metadata: meta(namespace, name), spec: { networks: [net(cidr)] } };
}

const mtlsRef = (namespace: string, name: string): NamespacedTargetRef => ({ group: POLICY_GROUP, kind: 'MeshTLSAuthentication', namespace, name });
const networkRef = (namespace: string, name: string): NamespacedTargetRef => ({ group: POLICY_GROUP, kind: 'NetworkAuthentication', namespace, name });

/** An index with a pod and a Server in each of `namespaces`, and `resources`. */
function mkIndex(namespaces: readonly string[], resources: readonly Resource[]): PolicyIndex {
  const index = new PolicyIndex(CONFIG);
  index.update((tx) => {
    for (const ns of namespaces) {
      tx.apply(mkPod(ns, 'web-0'));
      tx.apply(mkServer(ns));
    }
    for (const r of resources) tx.apply(r);
  });
  return index;
}

/** The values published on `ns/web-0:8080` from now on. */
function watch(index: PolicyIndex, ns: string): InboundServer[] {
  const cell = index.lookup(ns, 'web-0', 8080);
  assert.ok(cell !== undefined, `${ns}/web-0 is indexed`);
  const seen: InboundServer[] = [];
  cell.subscribe((v) => seen.push(v));
  return seen;
}

const identitiesOf = (s: InboundServer | undefined) =>
  s?.authorizations.map((a) => (a.authentication.kind === 'tlsAuthenticated' ? a.authentication.identities : a.authentication.kind));

describe('PolicyIndex: authentications referenced from other namespaces', () => {
  it('a MeshTLSAuthentication change reaches the namespaces that reference it, and only those', () => {
    const index = mkIndex(
      ['a', 'b', 'c'],
      [
        mkMeshTLS('shared', 'clients', [identity('one')]),
        mkMeshTLS('c', 'clients', [identity('own')]),
        mkAuthorizationPolicy('a', [mtlsRef('shared', 'clients')]),
        mkAuthorizationPolicy('b', [mtlsRef('shared', 'clients')]),
        mkAuthorizationPolicy('c', [mtlsRef('c', 'clients')]),
      ],
    );
    const [a, b, c] = [watch(index, 'a'), watch(index, 'b'), watch(index, 'c')];
    index.apply(mkMeshTLS('shared', 'clients', [identity('two')]));
    assert.deepEqual(identitiesOf(a.at(-1)), [[identity('two')]]);
    assert.deepEqual(identitiesOf(b.at(-1)), [[identity('two')]]);
    assert.equal(a.length, 1);
    assert.equal(c.length, 0);
    assert.deepEqual(identitiesOf(index.lookup('c', 'web-0', 8080)?.value), [[identity('own')]]);
  });

  it('resolves the reference whatever the case of its name, as lookups do', () => {
    const index = mkIndex(['a'], [mkMeshTLS('shared', 'clients', [identity('one')]), mkAuthorizationPolicy('a', [mtlsRef('shared', 'CLIENTS')])]);
    const a = watch(index, 'a');
    index.apply(mkMeshTLS('shared', 'clients', [identity('two')]));
    assert.deepEqual(identitiesOf(a.at(-1)), [[identity('two')]]);
  });

  it('fails closed when the referenced MeshTLSAuthentication is deleted, and opens when it comes back', () => {
    const index = mkIndex(['a'], [mkMeshTLS('shared', 'clients', [identity('one')]), mkAuthorizationPolicy('a', [mtlsRef('shared', 'clients')])]);
    const a = watch(index, 'a');
    index.delete({ kind: 'MeshTLSAuthentication', group: POLICY_GROUP, namespace: 'shared', name: 'clients' });
    assert.deepEqual(a.at(-1)?.authorizations, []);
    index.apply(mkMeshTLS('shared', 'clients', [identity('three')]));
    assert.deepEqual(identitiesOf(a.at(-1)), [[identity('three')]]);
  });

  it('a NetworkAuthentication change reaches the namespaces that reference it, and only those', () => {
    const index = mkIndex(
      ['a', 'b'],
      [
        mkNetworkAuthentication('shared', 'nets', '10.1.0.0/16'),
        mkNetworkAuthentication('b', 'nets', '10.2.0.0/16'),
        mkAuthorizationPolicy('a', [networkRef('shared', 'nets')]),
        mkAuthorizationPolicy('b', [networkRef('b', 'nets')]),
      ],
    );
    const [a, b] = [watch(index, 'a'), watch(index, 'b')];
    index.apply(mkNetworkAuthentication('shared', 'nets', '10.3.0.0/16'));
    assert.deepEqual(a.at(-1)?.authorizations[0]?.networks, [net('10.3.0.0/16')]);
    assert.equal(b.length, 0);
    index.delete({ kind: 'NetworkAuthentication', group: POLICY_GROUP, namespace: 'shared', name: 'nets' });
    assert.deepEqual(a.at(-1)?.authorizations, []);
  });

  it('a policy and the authentication it references, applied in one transaction in either order', () => {
    for (const order of ['policy first', 'authentication first'] as const) {
      const index = mkIndex(['a'], []);
      const a = watch(index, 'a');
      const ap = mkAuthorizationPolicy('a', [mtlsRef('shared', 'clients')]);
      const authn = mkMeshTLS('shared', 'clients', [identity('one')]);
      index.update((tx) => {
        for (const r of order === 'policy first' ? [ap, authn] : [authn, ap]) tx.apply(r);
      });
      assert.deepEqual(identitiesOf(a.at(-1)), [[identity('one')]], order);
    }
  });
});
