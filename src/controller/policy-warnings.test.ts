import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseCidr } from '../core/index.js';
import { type ClusterConfig, PolicyIndex } from '../index/index.js';
import { decodeResource, parseManifestText, type Resource } from '../manifest/index.js';
import { createLogger } from '../shared/index.js';
import { PolicyWarnings } from './policy-warnings.js';

const net = (cidr: string) => ({ net: parseCidr(cidr)!, except: [] });
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [net('10.0.0.0/8')],
  probeNetworks: [net('0.0.0.0/0')],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const BASE = `apiVersion: v1
kind: Namespace
metadata: {name: app}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: app, labels: {linkerd.io/control-plane-ns: linkerd}}
spec:
  containers: [{name: app, ports: [{containerPort: 8080}]}]
`;
const mtls = (id: string) => `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: app}
spec:
  identities: ["${id}"]
`;

function decode(text: string, file: string): Resource[] {
  return parseManifestText(text, file).documents.map((d) => (decodeResource(d) as { resource: Resource }).resource);
}

describe('PolicyWarnings', () => {
  it('logs a new warning once at warn, keeps it current, and forgets it when fixed', () => {
    const lines: { level: number; msg: string; diagnostics?: string[] }[] = [];
    const log = createLogger({ level: 'debug', destination: { write: (l: string) => void lines.push(JSON.parse(l) as (typeof lines)[number]) } });
    const index = new PolicyIndex(CONFIG);
    const inForce = new Map<string, Resource>();
    const apply = (rs: Resource[]) => {
      for (const r of rs) inForce.set(`${r.kind}|${r.metadata.namespace}|${r.metadata.name}`, r);
      index.update((tx) => {
        for (const r of rs) tx.apply(r);
      });
    };
    const w = new PolicyWarnings(index, inForce, log);
    apply(decode(BASE, 'base.yaml'));
    w.refresh();
    assert.deepStrictEqual(w.current(), []);
    apply(decode(mtls('web.ap.serviceaccount.identity.linkerd.cluster.local'), 'policy.yaml'));
    w.refresh();
    w.refresh();
    const warned = lines.filter((l) => l.level === 40);
    assert.deepStrictEqual(
      warned.map((l) => [l.msg, l.diagnostics]),
      [
        [
          'policy warnings',
          [
            'policy.yaml:5:16: warning POL114 identity "web.ap.serviceaccount.identity.linkerd.cluster.local" names namespace ap, which is not among the loaded resources [MeshTLSAuthentication app/clients]',
          ],
        ],
      ],
    );
    assert.deepStrictEqual(
      w.current().map((d) => d.code),
      ['POL114'],
    );
    apply(decode(mtls('web.app.serviceaccount.identity.linkerd.cluster.local'), 'policy.yaml'));
    w.refresh();
    assert.deepStrictEqual(w.current(), []);
    assert.equal(lines.filter((l) => l.level === 40).length, 1);
  });
});
