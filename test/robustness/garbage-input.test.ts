/**
 * Bad input never crashes: arbitrary documents shaped like ward's kinds (wrong types, missing
 * fields, odd values) go through decode, admission, lint, indexing and every decision without an
 * exception, and every rejection carries a code and a position.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { stringify } from 'yaml';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { buildWorkspace } from '../../src/cli/workspace.js';
import { authorizeConnection, authorizeRequest, compileServer, parseIp } from '../../src/core/index.js';
import { documentFromObject, parseManifestText } from '../../src/manifest/index.js';

const KINDS: [string, string][] = [
  ['policy.linkerd.io/v1beta3', 'Server'],
  ['policy.linkerd.io/v1alpha1', 'Server'],
  ['policy.linkerd.io/v1beta1', 'ServerAuthorization'],
  ['policy.linkerd.io/v1alpha1', 'AuthorizationPolicy'],
  ['policy.linkerd.io/v1alpha1', 'MeshTLSAuthentication'],
  ['policy.linkerd.io/v1alpha1', 'NetworkAuthentication'],
  ['policy.linkerd.io/v1beta3', 'HTTPRoute'],
  ['gateway.networking.k8s.io/v1', 'HTTPRoute'],
  ['gateway.networking.k8s.io/v1', 'GRPCRoute'],
  ['v1', 'Pod'],
  ['apps/v1', 'Deployment'],
  ['v1', 'Namespace'],
];

const leaf = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.integer({ min: -5, max: 70000 }),
  fc.boolean(),
  fc.constant(null),
  fc.constantFrom('*', '10.0.0.0/8', '/x', 'HTTP/1', 'gRPC', 'Exists', 'In', 'grpc', 'http', 'deny', 'web'),
);
const keys = fc.constantFrom(
  'podSelector',
  'matchLabels',
  'matchExpressions',
  'port',
  'proxyProtocol',
  'accessPolicy',
  'server',
  'client',
  'networks',
  'cidr',
  'except',
  'unauthenticated',
  'meshTLS',
  'identities',
  'serviceAccounts',
  'targetRef',
  'requiredAuthenticationRefs',
  'kind',
  'name',
  'group',
  'namespace',
  'identityRefs',
  'parentRefs',
  'rules',
  'matches',
  'path',
  'type',
  'value',
  'method',
  'headers',
  'hostnames',
  'filters',
  'containers',
  'ports',
  'containerPort',
  'readinessProbe',
  'httpGet',
  'template',
  'spec',
  'metadata',
  'labels',
  'annotations',
  'replicas',
  'values',
  'operator',
  'key',
);
const value = fc.letrec((tie) => ({
  v: fc.oneof({ depthSize: 'small', withCrossShrink: true }, leaf, fc.array(tie('v'), { maxLength: 3 }), fc.dictionary(keys, tie('v'), { maxKeys: 4 })),
})).v;

const doc = fc.record({
  kind: fc.constantFrom(...KINDS),
  name: fc.constantFrom('web', 'api', 'a'),
  ns: fc.constantFrom('app', 'other'),
  spec: fc.dictionary(keys, value, { maxKeys: 5 }),
  labels: fc.dictionary(fc.constantFrom('app', 'linkerd.io/control-plane-ns'), fc.constantFrom('web', 'linkerd'), { maxKeys: 2 }),
});

describe('garbage input', () => {
  it('never throws from decode to decision', () => {
    const config = clusterConfig({ defaultPolicy: 'deny' });
    const client = { ip: parseIp('10.1.2.3')!, tls: { kind: 'established' as const, clientId: 'web.app.serviceaccount.identity.linkerd.cluster.local' } };
    fc.assert(
      fc.property(fc.array(doc, { minLength: 1, maxLength: 8 }), (docs) => {
        const documents = docs.map((d) =>
          documentFromObject({ apiVersion: d.kind[0], kind: d.kind[1], metadata: { name: d.name, namespace: d.ns, labels: d.labels }, spec: d.spec }),
        );
        const ws = buildWorkspace({ documents }, config);
        for (const d of ws.diagnostics) {
          assert.match(d.code, /^POL\d{3}$/);
          assert.ok(d.message.length > 0);
        }
        for (const p of ws.index.pods()) {
          for (const port of [...ws.index.ports(p.namespace, p.name), 8080]) {
            const cell = ws.index.lookup(p.namespace, p.name, port);
            assert.ok(cell);
            const cs = compileServer(cell.value);
            authorizeConnection(cs, client);
            authorizeRequest(cs, client, { method: 'GET', path: '/x?y=1', headers: { host: 'web' } });
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('arbitrary text as a manifest file gives diagnostics, not exceptions', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 200 }), (text) => {
        const r = parseManifestText(text, 'x.yaml');
        for (const d of r.diagnostics) assert.ok(d.source === undefined || d.source.file === 'x.yaml');
      }),
      { numRuns: 500 },
    );
  });

  it('ward check exits 1 or 0 (never a crash) on mangled real manifests', async () => {
    const base = {
      apiVersion: 'policy.linkerd.io/v1beta3',
      kind: 'Server',
      metadata: { name: 'web', namespace: 'app' },
      spec: { podSelector: {}, port: 8080 },
    };
    const text = `${stringify(base)}---\n${stringify(base).replace('8080', '[oops')}`;
    const io = bufferIo(text);
    const status = await main(['check', '-f', '-'], io);
    assert.equal(status, 1);
    assert.match(io.stdout, /^<stdin>:18:1: error POL001 /m);
    assert.match(io.stdout, /1 resources checked/);
  });
});
