import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Diagnostic } from '../core/index.js';
import { decodeResource } from './decode.js';
import { lintResource } from './lint-resource.js';
import { parseManifestText } from './load.js';

/** Lints every document of an inline YAML file; returns `code@line:col` and the diagnostics. */
function lint(text: string): { at: string[]; diagnostics: Diagnostic[] } {
  const diagnostics = parseManifestText(text, 'l.yaml').documents.flatMap((doc) => {
    const r = decodeResource(doc);
    assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
    return r.status === 'ok' ? lintResource(r.resource) : [];
  });
  return { at: diagnostics.map((d) => `${d.code}@${d.source?.line}:${d.source?.col}`), diagnostics };
}

describe('lintResource', () => {
  it('warns about a quoted numeric Server port (POL100), not about names or numbers', () => {
    const srv = (port: string) => `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web, namespace: app}
spec:
  podSelector: {}
  port: ${port}
`;
    const r = lint(srv('"8080"'));
    assert.deepEqual(r.at, ['POL100@6:9']);
    assert.equal(r.diagnostics[0]?.severity, 'warning');
    assert.equal(r.diagnostics[0]?.message, 'spec.port "8080" is quoted, so it is a port name, not the number 8080');
    assert.equal(r.diagnostics[0]?.hint, 'write port: 8080 without quotes to bind the port number');
    assert.deepEqual(lint(srv('8080')).at, []);
    assert.deepEqual(lint(srv('http')).at, []);
  });

  it('warns about ServerAuthorizations and MeshTLSAuthentications that grant nothing (POL101)', () => {
    const saz = (client: string) => `apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {name: saz, namespace: app}
spec:
  server: {name: web}
  client:
    ${client}
`;
    const none = lint(saz('networks: [{cidr: 10.0.0.0/8}]'));
    assert.deepEqual(none.at, ['POL101@7:5']);
    assert.match(none.diagnostics[0]?.message ?? '', /^ServerAuthorization saz grants nothing: neither spec.client.unauthenticated nor spec.client.meshTLS/);
    assert.deepEqual(lint(saz('meshTLS: {identities: []}')).at, ['POL101@7:14']);
    assert.deepEqual(lint(saz('meshTLS: {unauthenticatedTLS: true}')).at, []);
    assert.deepEqual(lint(saz('meshTLS: {serviceAccounts: [{name: web}]}')).at, []);
    assert.deepEqual(lint(saz('unauthenticated: true')).at, []);
    const mtls = lint(`apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: m, namespace: app}
spec:
  identities: []
`);
    assert.deepEqual(mtls.at, ['POL101@5:3']);
    assert.match(mtls.diagnostics[0]?.message ?? '', /^MeshTLSAuthentication m grants nothing/);
  });

  it('warns about annotations the controller ignores (POL109) on pods, namespaces and templates', () => {
    const r = lint(`apiVersion: v1
kind: Namespace
metadata:
  name: app
  annotations:
    config.linkerd.io/default-inbound-policy: allow
---
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    config.linkerd.io/opaque-ports: "3306,mysql"
    config.linkerd.io/proxy-require-identity-inbound-ports: "8080"
spec: {containers: [{name: c}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cj}
spec:
  jobTemplate:
    spec:
      template:
        metadata:
          annotations:
            config.linkerd.io/proxy-require-identity-inbound-ports: 9000-8000
        spec: {containers: [{name: c}]}
`);
    assert.deepEqual(r.at, ['POL109@6:47', 'POL109@13:37', 'POL109@26:69']);
    assert.deepEqual(
      r.diagnostics.map((d) => d.message),
      [
        'annotation config.linkerd.io/default-inbound-policy="allow" is ignored: it is not a default policy, so the cluster default applies',
        'annotation config.linkerd.io/opaque-ports="3306,mysql" is ignored: "mysql" is a port name, which the policy controller does not resolve, so it ignores the whole annotation',
        'annotation config.linkerd.io/proxy-require-identity-inbound-ports="9000-8000" is ignored: "9000-8000" is not a port 1-65535 or an increasing range, so the policy controller ignores the whole annotation',
      ],
    );
    assert.match(r.diagnostics[0]?.hint ?? '', /^use one of all-unauthenticated, /);
    assert.deepEqual(r.diagnostics[2]?.resource, { kind: 'CronJob', namespace: 'default', name: 'cj' });
  });
});
