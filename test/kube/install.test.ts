/**
 * `ward install` and `ward uninstall` against a real API server: the printed objects apply
 * (server-side dry run, then for real), the CRDs accept what Linkerd users write and show ward's
 * status columns, the RBAC is enough and no more, and uninstall removes it all.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { CRD_KINDS } from '../../src/manifest/index.js';
import { describeWithKubeKit, type KubeKit, startKubeKit } from '../../src/sources/kube/testing/kube-kit.js';

const EXAMPLES = join(import.meta.dirname, '../../examples');
const SA = 'system:serviceaccount:linkerd:ward-controller';

/** Gateway API routes as other implementations use them too, with fields ward does not interpret. */
const GATEWAY_ROUTES = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web-mirror, namespace: emojivoto}
spec:
  parentRefs: [{kind: Service, group: core, name: web-svc, port: 80}]
  hostnames: [web.example.com]
  rules:
  - name: mirror
    matches: [{path: {type: PathPrefix, value: /api}, headers: [{name: x-canary, value: "1"}], method: GET}]
    filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: web-shadow, port: 80}, percent: 10}
    - type: URLRewrite
      urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}}
    backendRefs: [{name: web-svc, port: 80, weight: 90}, {name: web-canary, port: 80, weight: 10}]
    timeouts: {request: 10s, backendRequest: 2s}
    retry: {codes: [503], attempts: 2, backoff: 100ms}
    sessionPersistence: {sessionName: s, type: Cookie}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: GRPCRoute
metadata: {name: emoji, namespace: emojivoto}
spec:
  parentRefs: [{kind: Service, group: core, name: emoji-svc, port: 8080}]
  rules:
  - matches: [{method: {service: emojivoto.v1.EmojiService, method: ListAll}}]
    backendRefs: [{name: emoji-svc, port: 8080}]
`;

async function ward(args: string[]): Promise<string> {
  const io = bufferIo();
  const status = await main(args, io);
  assert.equal(status, 0, io.stderr);
  return io.stdout;
}

describeWithKubeKit('ward install on a real API server', () => {
  let kit: KubeKit;
  let installed = '';
  before(async () => {
    kit = await startKubeKit();
    installed = await ward(['install']);
  });
  after(async () => {
    // A leftover Fail webhook would block writes (kit gotcha 4); the kit goes anyway, but stop clean.
    await kit?.kubectlResult([
      'delete',
      'validatingwebhookconfiguration,mutatingwebhookconfiguration',
      '-l',
      'app.kubernetes.io/part-of=ward',
      '--ignore-not-found',
    ]);
    await kit?.stop();
  });

  it('installs CRDs that take the policy Linkerd users write, with ward status columns', async () => {
    await kit.kubectl(['apply', '-f', '-'], await ward(['install', '--crds']));
    await kit.kubectl(['wait', '--for=condition=Established', '--timeout=120s', 'crd', '-l', 'app.kubernetes.io/part-of=ward']);
    await kit.kubectl(['create', 'namespace', 'emojivoto']);
    const files = [
      ...readdirSync(join(EXAMPLES, 'emojivoto/policy')).map((f) => join(EXAMPLES, 'emojivoto/policy', f)),
      join(EXAMPLES, 'emojivoto-legacy-policy/policy.yaml'),
    ];
    // Strict field validation: a field the CRD does not know fails the apply instead of vanishing.
    for (const f of files) await kit.kubectl(['apply', '--validate=strict', '-f', f]);
    await kit.kubectl(['apply', '--validate=strict', '-f', '-'], GATEWAY_ROUTES);
    const unknown = await kit.kubectlResult(
      ['apply', '--validate=strict', '-f', '-'],
      'apiVersion: policy.linkerd.io/v1beta1\nkind: Server\nmetadata: {name: x, namespace: emojivoto}\nspec: {port: 80, podSelector: {}, accessPolicy: deny}\n',
    );
    assert.notEqual(unknown.code, 0);
    assert.match(unknown.stderr, /unknown field "spec.accessPolicy"/);

    await kit.kubectl([
      'patch',
      'server.policy.linkerd.io/web-http',
      '-n',
      'emojivoto',
      '--subresource=status',
      '--type=merge',
      '-p',
      JSON.stringify({
        status: {
          conditions: [
            { type: 'Accepted', status: 'True', reason: 'Accepted', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' },
            { type: 'ResolvedRefs', status: 'False', reason: 'NoPods', message: 'no pod selected', lastTransitionTime: '2026-01-01T00:00:00Z' },
          ],
          selectedPods: 2,
          selectedPorts: 3,
        },
      }),
    ]);
    const table = await kit.kubectl(['get', 'servers.policy.linkerd.io', 'web-http', '-n', 'emojivoto', '-o', 'wide']);
    // Columns by the header's offsets: an empty cell leaves only spaces.
    const [head = '', row = ''] = table.split('\n');
    const starts = [...head.matchAll(/\S+(?: \S+)*/g)].map((m) => [m[0], m.index] as const);
    const cols = Object.fromEntries(starts.map(([name, at], i) => [name, row.slice(at, starts[i + 1]?.[1]).trim()]));
    assert.deepEqual([cols.ACCEPTED, cols.PODS, cols.PORTS, cols.RESOLVED], ['True', '2', '3', 'False'], table);
    const narrow = await kit.kubectl(['get', 'servers.policy.linkerd.io', '-n', 'emojivoto']);
    assert.match(narrow, /ACCEPTED\s+PODS\s+PORTS\s+AGE/);
    assert.doesNotMatch(narrow, /RESOLVED/);
  });

  it('applies: a server-side dry run, then for real', async () => {
    const docs = parseAllDocuments(installed).map((d) => d.toJS() as { kind: string });
    const namespace = docs.find((d) => d.kind === 'Namespace');
    // The dry run cannot create the namespace its other objects go into.
    await kit.kubectl(['apply', '-f', '-'], JSON.stringify(namespace));
    const dry = await kit.kubectl(['apply', '--dry-run=server', '-f', '-'], installed);
    assert.equal(dry.trim().split('\n').length, docs.length, dry);
    await kit.kubectl(['apply', '-f', '-'], installed);
    await kit.kubectl(['wait', '--for=condition=Established', '--timeout=120s', 'crd', '-l', 'app.kubernetes.io/part-of=ward']);
    const crds = (await kit.kubectl(['get', 'crd', '-l', 'app.kubernetes.io/part-of=ward', '-o', 'name'])).trim().split('\n').sort();
    assert.deepEqual(crds, CRD_KINDS.map((k) => `customresourcedefinition.apiextensions.k8s.io/${k.plural}.${k.group}`).sort());
    assert.equal(
      (await kit.kubectl(['get', 'validatingwebhookconfiguration', 'ward-policy-validator', '-o', 'name'])).trim(),
      'validatingwebhookconfiguration.admissionregistration.k8s.io/ward-policy-validator',
    );
    assert.equal(
      (await kit.kubectl(['get', 'mutatingwebhookconfiguration', 'ward-proxy-injector', '-o', 'name'])).trim(),
      'mutatingwebhookconfiguration.admissionregistration.k8s.io/ward-proxy-injector',
    );
    assert.equal((await kit.kubectl(['get', 'deployment', 'ward-controller', '-n', 'linkerd', '-o', 'jsonpath={.spec.replicas}'])).trim(), '2');
  });

  it("grants the controller's ServiceAccount what it needs and nothing more", async () => {
    const can = async (...args: string[]) => (await kit.kubectlResult(['auth', 'can-i', `--as=${SA}`, ...args])).stdout.trim();
    const allowed = [
      ['list', 'pods', '-A'],
      ['watch', 'endpointslices.discovery.k8s.io', '-A'],
      ['watch', 'namespaces'],
      ['list', 'servers.policy.linkerd.io', '-A'],
      ['watch', 'httproutes.gateway.networking.k8s.io', '-A'],
      ['patch', 'servers.policy.linkerd.io', '--subresource=status', '-n', 'emojivoto'],
      ['update', 'grpcroutes.gateway.networking.k8s.io', '--subresource=status', '-n', 'emojivoto'],
      ['create', 'tokenreviews.authentication.k8s.io'],
      ['create', 'leases.coordination.k8s.io', '-n', 'linkerd'],
      ['update', 'leases.coordination.k8s.io', '-n', 'linkerd'],
      ['get', 'services/ward-controller', '-n', 'linkerd'],
    ];
    const denied = [
      ['get', 'secrets', '-n', 'linkerd'],
      ['list', 'secrets', '-A'],
      ['create', 'pods', '-n', 'emojivoto'],
      ['patch', 'servers.policy.linkerd.io', '-n', 'emojivoto'],
      ['delete', 'servers.policy.linkerd.io', '-n', 'emojivoto'],
      ['create', 'leases.coordination.k8s.io', '-n', 'emojivoto'],
      ['delete', 'leases.coordination.k8s.io', '-n', 'linkerd'],
      ['get', 'services/other', '-n', 'linkerd'],
      ['update', 'mutatingwebhookconfigurations'],
    ];
    for (const a of allowed) assert.equal(await can(...a), 'yes', a.join(' '));
    for (const a of denied) assert.equal(await can(...a), 'no', a.join(' '));
  });

  it('ward uninstall | kubectl delete -f - removes everything', async () => {
    const out = await kit.kubectl(['delete', '-f', '-', '--wait=false'], await ward(['uninstall']));
    assert.ok(out.includes('validatingwebhookconfiguration.admissionregistration.k8s.io "ward-policy-validator" deleted'), out);
    // CRDs go once the API server has deleted their objects.
    await kit.kubectl(['wait', '--for=delete', '--timeout=120s', 'crd', '-l', 'app.kubernetes.io/part-of=ward']);
    assert.equal((await kit.kubectl(['get', 'crd', '-l', 'app.kubernetes.io/part-of=ward', '-o', 'name'])).trim(), '');
    assert.equal(
      (
        await kit.kubectl([
          'get',
          'validatingwebhookconfiguration,mutatingwebhookconfiguration,clusterrole,clusterrolebinding',
          '-l',
          'app.kubernetes.io/part-of=ward',
          '-o',
          'name',
        ])
      ).trim(),
      '',
    );
    // No namespace controller here: the namespace stays Terminating, but its objects are gone.
    assert.equal(
      (
        await kit.kubectl([
          'get',
          'deployment,service,secret,configmap,serviceaccount,role,rolebinding',
          '-n',
          'linkerd',
          '-l',
          'app.kubernetes.io/part-of=ward',
          '-o',
          'name',
        ])
      ).trim(),
      '',
    );
  });
});
