import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type Diagnostic, parseCidr } from '../core/index.js';
import { decodeResource, parseManifestText, type Resource } from '../manifest/index.js';
import { lintIndex } from './lint.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const net = (cidr: string) => ({ net: parseCidr(cidr)!, except: [] });
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [net('10.0.0.0/8')],
  probeNetworks: [net('0.0.0.0/0')],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

// === a small cluster: namespaces emojivoto and bad, declared, with their ServiceAccounts and pods ===

const CLUSTER = `apiVersion: v1
kind: Namespace
metadata: {name: emojivoto}
---
apiVersion: v1
kind: Namespace
metadata: {name: bad}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: emojivoto}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: vote-bot, namespace: bad}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: emojivoto, labels: {app: web, linkerd.io/control-plane-ns: linkerd}}
spec:
  serviceAccountName: web
  containers: [{name: app, ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: vote-bot-0, namespace: bad, labels: {app: vote-bot, linkerd.io/control-plane-ns: linkerd}}
spec:
  serviceAccountName: vote-bot
  containers: [{name: app}]
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web-http, namespace: emojivoto, labels: {app: web}}
spec:
  podSelector: {matchLabels: {app: web}}
  port: http
`;

const mtls = (identities: string) => `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: emojivoto}
spec:
  identities: [${identities}]
`;

const mtlsRefs = (refs: string) => `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: emojivoto}
spec:
  identityRefs: [${refs}]
`;

const saz = (meshTLS: string) => `apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {name: web-saz, namespace: emojivoto}
spec:
  server: {selector: {matchLabels: {app: web}}}
  client:
    meshTLS: {${meshTLS}}
`;

/** Lints `docs` appended to `base`; the file is p.yaml, each appended document after the base. */
function lint(base: string, ...docs: string[]): Diagnostic[] {
  const text = [base, ...docs].filter((d) => d !== '').join('---\n');
  const loaded = parseManifestText(text, 'p.yaml');
  assert.deepStrictEqual(loaded.diagnostics, []);
  const resources: Resource[] = loaded.documents.map((d) => {
    const r = decodeResource(d);
    assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
    return (r as { resource: Resource }).resource;
  });
  const index = new PolicyIndex(CONFIG);
  index.update((tx) => {
    for (const r of resources) tx.apply(r);
  });
  return lintIndex(index, resources).filter((d) => ['POL114', 'POL115', 'POL116', 'POL102'].includes(d.code));
}

/** Line of the first appended document's first line, for positions. */
const FIRST_DOC_LINE = CLUSTER.split('\n').length + 1;
const full = (ds: readonly Diagnostic[]) => ds.map((d) => `${d.source?.file}:${d.source?.line}:${d.source?.col}: ${d.code} ${d.message} | ${d.hint ?? ''}`);

describe('identity lint', () => {
  it('a namespace typo: POL114 at the identity, with the fix', () => {
    const ds = lint(CLUSTER, mtls('"*.emojivto.serviceaccount.identity.linkerd.cluster.local"'));
    assert.deepStrictEqual(full(ds), [
      `p.yaml:${FIRST_DOC_LINE + 4}:16: POL114 identity "*.emojivto.serviceaccount.identity.linkerd.cluster.local" names namespace emojivto, which is not among the loaded resources (did you mean namespace emojivoto?) | a mesh identity is <serviceaccount>.<namespace>.serviceaccount.identity.linkerd.cluster.local; write "*.emojivoto.serviceaccount.identity.linkerd.cluster.local"`,
    ]);
    assert.deepStrictEqual(ds[0]?.resource, { kind: 'MeshTLSAuthentication', namespace: 'emojivoto', name: 'clients' });
    assert.deepStrictEqual(ds[0]?.path, ['spec', 'identities', 0]);
    assert.equal(ds[0]?.severity, 'warning');
  });

  it('a ServiceAccount that is not there, typo or in another namespace', () => {
    assert.deepStrictEqual(
      lint(
        CLUSTER,
        mtls('"webb.emojivoto.serviceaccount.identity.linkerd.cluster.local", "vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local"'),
      ).map((d) => `${d.code} ${d.message} | ${d.hint}`),
      [
        'POL114 identity "webb.emojivoto.serviceaccount.identity.linkerd.cluster.local" names ServiceAccount emojivoto/webb, which is not among the loaded resources (did you mean ServiceAccount emojivoto/web?) | a mesh identity is <serviceaccount>.<namespace>.serviceaccount.identity.linkerd.cluster.local; write "web.emojivoto.serviceaccount.identity.linkerd.cluster.local"',
        'POL114 identity "vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local" names ServiceAccount emojivoto/vote-bot, which is not among the loaded resources (ServiceAccount vote-bot exists in namespace bad) | a mesh identity is <serviceaccount>.<namespace>.serviceaccount.identity.linkerd.cluster.local; write "vote-bot.bad.serviceaccount.identity.linkerd.cluster.local"',
      ],
    );
  });

  it('a Service DNS name is not an identity: POL115 says so and what to write', () => {
    const ds = lint(CLUSTER, mtls('"web.emojivoto.svc.cluster.local"'));
    assert.deepStrictEqual(
      ds.map((d) => `${d.code} ${d.message} | ${d.hint}`),
      [
        'POL115 identity "web.emojivoto.svc.cluster.local" is not a mesh identity of this cluster: it is the DNS name of Service web in namespace emojivoto, not an identity: clients are identified by the ServiceAccount they run as | write "<serviceaccount>.emojivoto.serviceaccount.identity.linkerd.cluster.local", e.g. "web.emojivoto.serviceaccount.identity.linkerd.cluster.local", or use identityRefs',
      ],
    );
  });

  it('another trust domain: POL115 with the identity in this one', () => {
    const ds = lint(CLUSTER, saz('identities: ["web.emojivoto.serviceaccount.identity.linkerd.example.org"]'));
    assert.deepStrictEqual(full(ds), [
      `p.yaml:${FIRST_DOC_LINE + 6}:28: POL115 identity "web.emojivoto.serviceaccount.identity.linkerd.example.org" is not a mesh identity of this cluster: it ends in "identity.linkerd.example.org", but this mesh's identities end in "identity.linkerd.cluster.local" (another control plane namespace or trust domain), so no client has it | write "web.emojivoto.serviceaccount.identity.linkerd.cluster.local" (or change --trust-domain if the mesh's trust domain is wrong)`,
    ]);
  });

  it('identityRefs to a missing ServiceAccount or Namespace: POL102', () => {
    const ds = lint(
      CLUSTER,
      mtlsRefs('{kind: ServiceAccount, name: webs}, {kind: ServiceAccount, name: vote-bot, namespace: badd}, {kind: Namespace, name: emojivot}'),
    );
    assert.deepStrictEqual(
      ds.map((d) => `${d.source?.line}:${d.source?.col} ${d.code} ${d.message}`),
      [
        `${FIRST_DOC_LINE + 4}:18 POL102 identityRefs ServiceAccount emojivoto/webs does not resolve to anything (did you mean web?); no workload runs as it, so it admits nobody`,
        `${FIRST_DOC_LINE + 4}:54 POL102 identityRefs ServiceAccount badd/vote-bot does not resolve to anything (did you mean namespace bad?); no workload runs as it, so it admits nobody`,
        `${FIRST_DOC_LINE + 4}:111 POL102 identityRefs Namespace emojivot does not resolve to anything (did you mean emojivoto?); no workload runs there, so it admits nobody`,
      ],
    );
  });

  it('a serviceAccounts entry without a namespace says which ServiceAccount it means', () => {
    const ds = lint(CLUSTER, saz('serviceAccounts: [{name: vote-bot}, {name: web}]'));
    assert.deepStrictEqual(full(ds), [
      `p.yaml:${FIRST_DOC_LINE + 6}:33: POL116 serviceAccounts entry "vote-bot" has no namespace, so it means ServiceAccount emojivoto/vote-bot, which is not among the loaded resources; a ServiceAccount vote-bot exists in namespace bad | add namespace: bad to the entry`,
    ]);
    // With its namespace, the same entry is fine; a wrong one is a POL102.
    assert.deepStrictEqual(lint(CLUSTER, saz('serviceAccounts: [{name: vote-bot, namespace: bad}]')), []);
    assert.deepStrictEqual(
      lint(CLUSTER, saz('serviceAccounts: [{name: vote-bot, namespace: emojivoto}]')).map((d) => d.code),
      ['POL102'],
    );
  });

  it('an AuthorizationPolicy requiring a missing ServiceAccount: POL102', () => {
    const ap = `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: web-ap, namespace: emojivoto}
spec:
  targetRef: {group: core, kind: Namespace, name: emojivoto}
  requiredAuthenticationRefs: [{kind: ServiceAccount, name: vote-bott, namespace: bad}]
`;
    assert.deepStrictEqual(
      lint(CLUSTER, ap).map((d) => `${d.code} ${d.message}`),
      [
        'POL102 requiredAuthenticationRefs ServiceAccount bad/vote-bott does not resolve to anything (did you mean vote-bot?); no workload runs as it, so it admits nobody',
      ],
    );
  });

  it('silent on the correct forms', () => {
    assert.deepStrictEqual(
      lint(
        CLUSTER,
        mtls(
          '"web.emojivoto.serviceaccount.identity.linkerd.cluster.local", "*.bad.serviceaccount.identity.linkerd.cluster.local", "*", "default.emojivoto.serviceaccount.identity.linkerd.cluster.local", "spiffe://cluster.local/ns/x/sa/y"',
        ),
        saz('serviceAccounts: [{name: web}, {name: vote-bot, namespace: bad}], identities: ["*.serviceaccount.identity.linkerd.cluster.local"]'),
      ),
      [],
    );
    assert.deepStrictEqual(
      lint(CLUSTER, mtlsRefs('{kind: ServiceAccount, name: web}, {kind: ServiceAccount, name: vote-bot, namespace: bad}, {kind: Namespace, name: bad}')),
      [],
    );
  });

  it('silent when the referenced object is only absent from a partial set', () => {
    // Policy only: nothing says which namespaces or ServiceAccounts exist.
    assert.deepStrictEqual(
      lint('', mtls('"vote-bot.bad.serviceaccount.identity.linkerd.cluster.local", "web.emojivoto.serviceaccount.identity.linkerd.cluster.local"')),
      [],
    );
    const server = CLUSTER.split('---\n').find((d) => d.includes('kind: Server')) as string;
    assert.deepStrictEqual(lint(server, saz('serviceAccounts: [{name: vote-bot}]')), []);
    // Pods without ServiceAccount objects or Namespace objects: a client elsewhere is normal.
    const podsOnly = CLUSTER.split('---\n')
      .filter((d) => d.includes('kind: Pod'))
      .join('---\n');
    assert.deepStrictEqual(
      lint(podsOnly, mtls('"client.emojivoto.serviceaccount.identity.linkerd.cluster.local", "x.elsewhere.serviceaccount.identity.linkerd.cluster.local"')),
      [],
    );
    // ...but a close misspelling of a loaded namespace still is one.
    assert.deepStrictEqual(
      lint(podsOnly, mtls('"web.emojivoot.serviceaccount.identity.linkerd.cluster.local"')).map((d) => d.code),
      ['POL114'],
    );
    // A whole cluster (every namespace declared, pods): a namespace it does not have is reported.
    assert.deepStrictEqual(
      lint(CLUSTER, mtls('"x.elsewhere.serviceaccount.identity.linkerd.cluster.local"')).map((d) => d.message),
      ['identity "x.elsewhere.serviceaccount.identity.linkerd.cluster.local" names namespace elsewhere, which is not among the loaded resources'],
    );
  });
});
