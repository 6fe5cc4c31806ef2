/**
 * The admission webhooks behind a real kube-apiserver (the kit in /work/shared/kube): the test
 * registers a ValidatingWebhookConfiguration and a MutatingWebhookConfiguration pointing at a
 * webhook server on 127.0.0.1 (serving certificate signed by the kit's CA), scoped to this test's
 * namespaces by a label, and drives them with kubectl: an invalid Server is refused with ward
 * check's text, a valid one is stored, and a Pod created in an annotated namespace is stored
 * injected (so the API server accepted the patch and the pod it makes). The configurations are
 * deleted in teardown.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import type { KubeInjectConfig } from '../../manifest/index.js';
import { applyLinkerdCrds, describeWithKubeKit, type KubeKit, startKubeKit } from '../../sources/kube/testing/kube-kit.js';
import { type RunningWebhookServer, startWebhookServer } from './webhook-server.js';

const LABEL = `ward-webhook-test-${process.pid}`;
const VALIDATING = `ward-test-policy-validator-${process.pid}`;
const MUTATING = `ward-test-proxy-injector-${process.pid}`;
const MESHED_NS = 'h2-meshed';
const PLAIN_NS = 'h2-plain';

describeWithKubeKit('admission webhooks behind a real API server', () => {
  let kit: KubeKit;
  let server: RunningWebhookServer | undefined;
  let dir: string;
  let config: KubeInjectConfig;
  const fetched: string[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-webhook-kube-'));
    kit = await startKubeKit();
    await applyLinkerdCrds(kit);
    // A serving certificate for 127.0.0.1 signed by the kit's CA (the API server trusts it through caBundle).
    const key = join(dir, 'tls.key');
    const csr = join(dir, 'tls.csr');
    const crt = join(dir, 'tls.crt');
    const ext = join(dir, 'ext.cnf');
    writeFileSync(ext, 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
    execFileSync(
      'openssl',
      ['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=ward-webhook', '-keyout', key, '-out', csr],
      {
        stdio: 'ignore',
      },
    );
    execFileSync(
      'openssl',
      [
        'x509',
        '-req',
        '-in',
        csr,
        '-CA',
        kit.env.KUBE_CA_FILE ?? '',
        '-CAkey',
        kit.env.KUBE_CA_KEY_FILE ?? '',
        '-CAcreateserial',
        '-days',
        '1',
        '-extfile',
        ext,
        '-out',
        crt,
      ],
      { stdio: 'ignore' },
    );
    config = {
      controlPlaneNamespace: 'linkerd',
      image: 'localhost/ward:0.1.0',
      controllerHost: '10.0.0.57',
      trustAnchorsPem: readFileSync(kit.env.KUBE_CA_FILE ?? '', 'utf8'),
      version: '0.1.0',
    };
    server = await startWebhookServer({
      certFile: crt,
      keyFile: key,
      host: '127.0.0.1',
      port: 0,
      validate: {},
      inject: {
        config,
        // An empty cache: every namespace is read from the API server.
        lookupNamespace: () => undefined,
        fetchNamespace: async (name) => {
          fetched.push(name);
          const r = await kit.kubectlResult(['get', 'namespace', name, '-o', 'json']);
          return r.code === 0 ? (JSON.parse(r.stdout) as unknown) : undefined;
        },
      },
    });
    const caBundle = readFileSync(kit.env.KUBE_CA_FILE ?? '').toString('base64');
    const hook = (name: string, path: string, rules: unknown, failurePolicy: string) => ({
      name,
      admissionReviewVersions: ['v1'],
      sideEffects: 'None',
      failurePolicy,
      timeoutSeconds: 10,
      namespaceSelector: { matchLabels: { [LABEL]: 'true' } },
      clientConfig: { url: `https://127.0.0.1:${server?.port}${path}`, caBundle },
      rules,
    });
    const configs = [
      {
        apiVersion: 'admissionregistration.k8s.io/v1',
        kind: 'ValidatingWebhookConfiguration',
        metadata: { name: VALIDATING },
        webhooks: [
          hook(
            'policy-validator.ward.test',
            '/validate',
            [{ apiGroups: ['policy.linkerd.io'], apiVersions: ['*'], operations: ['CREATE', 'UPDATE'], resources: ['*'] }],
            'Fail',
          ),
        ],
      },
      {
        apiVersion: 'admissionregistration.k8s.io/v1',
        kind: 'MutatingWebhookConfiguration',
        metadata: { name: MUTATING },
        webhooks: [
          hook('proxy-injector.ward.test', '/inject', [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] }], 'Ignore'),
        ],
      },
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: MESHED_NS, labels: { [LABEL]: 'true' }, annotations: { 'linkerd.io/inject': 'enabled' } } },
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: PLAIN_NS, labels: { [LABEL]: 'true' } } },
    ];
    await kit.kubectl(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: configs }));
    // The configurations take effect shortly after they are stored: probe until a refusal comes back.
    const deadline = Date.now() + 30_000;
    for (;;) {
      const probe = await kit.kubectlResult(['apply', '--dry-run=server', '-f', '-'], serverYaml('probe', 'Bad_Port'));
      if (probe.code !== 0 && probe.stderr.includes('policy-validator.ward.test')) break;
      if (Date.now() > deadline) throw new Error(`the validating webhook never answered: ${probe.stderr}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  });

  after(async () => {
    // Without the server a failurePolicy Fail configuration would block writes: delete them first.
    await kit?.kubectlResult(['delete', 'validatingwebhookconfiguration', VALIDATING, '--ignore-not-found']);
    await kit?.kubectlResult(['delete', 'mutatingwebhookconfiguration', MUTATING, '--ignore-not-found']);
    await server?.close();
    await kit?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  function serverYaml(name: string, port: string | number): string {
    return `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: ${name}, namespace: ${MESHED_NS}}
spec:
  podSelector: {matchLabels: {app: web}}
  port: ${typeof port === 'string' ? JSON.stringify(port) : port}
  proxyProtocol: HTTP/1
`;
  }

  it("refuses an invalid Server with ward check's message, the field path and the code", async () => {
    const r = await kit.kubectlResult(['apply', '-f', '-'], serverYaml('bad', 'Bad_Port'));
    assert.notEqual(r.code, 0);
    assert.match(
      r.stderr,
      /admission webhook "policy-validator\.ward\.test" denied the request: error POL025 port name "Bad_Port" is not a valid port name \[Server h2-meshed\/bad\] at spec\.port/,
    );
    const got = await kit.kubectlResult(['get', 'servers.policy.linkerd.io', 'bad', '-n', MESHED_NS]);
    assert.notEqual(got.code, 0, 'nothing was stored');
  });

  it('refuses an object that does not decode (a CIDR the schema cannot parse), naming the field', async () => {
    const r = await kit.kubectlResult(
      ['apply', '-f', '-'],
      `apiVersion: policy.linkerd.io/v1alpha1
kind: NetworkAuthentication
metadata: {name: nets, namespace: ${MESHED_NS}}
spec:
  networks: [{cidr: 10.0.0.0/33}]
`,
    );
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /denied the request: error POL\d+ .*\[NetworkAuthentication h2-meshed\/nets\] at spec\.networks\[0\]\.cidr/);
  });

  it('stores a valid Server, and lets it be deleted', async () => {
    await kit.kubectl(['apply', '-f', '-'], serverYaml('web', 8080));
    const stored = JSON.parse(await kit.kubectl(['get', 'servers.policy.linkerd.io', 'web', '-n', MESHED_NS, '-o', 'json'])) as { spec: { port: number } };
    assert.equal(stored.spec.port, 8080);
    await kit.kubectl(['delete', 'servers.policy.linkerd.io', 'web', '-n', MESHED_NS]);
  });

  it('stores a Pod created in an annotated namespace injected: init container, proxy, token volume, label and annotations', async () => {
    const created = JSON.parse(
      await kit.kubectl(
        ['create', '-o', 'json', '-f', '-'],
        `apiVersion: v1
kind: Pod
metadata: {generateName: web-, namespace: ${MESHED_NS}, labels: {app: web}}
spec:
  serviceAccountName: web
  containers:
  - name: app
    image: localhost/web:1
    ports: [{containerPort: 8080}, {containerPort: 3306}]
`,
      ),
    ) as { metadata: { name: string; labels: Record<string, string>; annotations: Record<string, string> }; spec: Record<string, unknown> };
    assert.ok(fetched.includes(MESHED_NS), 'the namespace was read from the API server');
    const stored = JSON.parse(await kit.kubectl(['get', 'pod', created.metadata.name, '-n', MESHED_NS, '-o', 'json'])) as typeof created;
    const { metadata, spec } = stored;
    assert.equal(metadata.labels['linkerd.io/control-plane-ns'], 'linkerd');
    assert.equal(metadata.annotations['linkerd.io/proxy-version'], '0.1.0');
    assert.equal(metadata.annotations['config.linkerd.io/opaque-ports'], '3306');
    const names = (list: unknown) => (list as { name: string }[]).map((c) => c.name);
    assert.deepEqual(names(spec.containers), ['app', 'linkerd-proxy']);
    assert.deepEqual(names(spec.initContainers), ['linkerd-init']);
    const volume = (spec.volumes as { name: string; projected?: { sources: { serviceAccountToken?: Record<string, unknown> }[] } }[]).find(
      (v) => v.name === 'linkerd-identity-token',
    );
    assert.deepEqual(volume?.projected?.sources[0]?.serviceAccountToken, {
      audience: 'identity.l5d.io',
      expirationSeconds: 86400,
      path: 'linkerd-identity-token',
    });
    const proxy = (spec.containers as { name: string; args: string[]; env: { name: string; value?: string }[] }[]).find((c) => c.name === 'linkerd-proxy');
    assert.ok(proxy?.args.includes('--transparent'));
    assert.equal(proxy?.env.find((e) => e.name === 'LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS')?.value, config.trustAnchorsPem);
  });

  it('leaves pods of other namespaces alone, and answers dry-run creations with the injected pod', async () => {
    const pod = (ns: string) => `apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: ${ns}}
spec:
  containers: [{name: app, image: localhost/web:1}]
`;
    const plain = JSON.parse(await kit.kubectl(['create', '-o', 'json', '-f', '-'], pod(PLAIN_NS))) as { spec: { containers: { name: string }[] } };
    assert.deepEqual(
      plain.spec.containers.map((c) => c.name),
      ['app'],
    );
    const dry = JSON.parse(await kit.kubectl(['create', '--dry-run=server', '-o', 'json', '-f', '-'], pod(MESHED_NS))) as {
      spec: { containers: { name: string }[] };
    };
    assert.deepEqual(
      dry.spec.containers.map((c) => c.name),
      ['app', 'linkerd-proxy'],
    );
    const absent = await kit.kubectlResult(['get', 'pod', 'plain', '-n', MESHED_NS]);
    assert.notEqual(absent.code, 0, 'the dry run stored nothing');
  });
});
