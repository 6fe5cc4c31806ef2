import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect, createServer } from 'node:tls';
import { parseAllDocuments } from 'yaml';
import { IDENTITY_FILES, initIdentity, validateIssuer } from '../../identity/index.js';
import { CRD_KINDS } from '../../manifest/index.js';
import { bufferIo } from '../io.js';
import { main } from '../main.js';

type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> } } & Record<string, unknown>;
type Rule = { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] };

async function ward(args: string[]) {
  const io = bufferIo();
  const status = await main(args, io);
  return { status, stdout: io.stdout, stderr: io.stderr };
}

const parseYaml = (text: string): Obj[] =>
  parseAllDocuments(text)
    .map((d) => d.toJS() as Obj | null)
    .filter((o): o is Obj => o !== null);
const ids = (objs: readonly Obj[]) => objs.map((o) => `${o.kind}/${o.metadata.namespace === undefined ? '' : `${o.metadata.namespace}/`}${o.metadata.name}`);
const find = (objs: readonly Obj[], kind: string, name: string) => {
  const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(o, `${kind}/${name}`);
  return o;
};
const unb64 = (s: unknown) => Buffer.from(s as string, 'base64').toString('utf8');
const dig = (o: unknown, ...path: (string | number)[]): unknown => path.reduce<unknown>((v, k) => (v as Record<string | number, unknown> | undefined)?.[k], o);

const CRDS = CRD_KINDS.map((k) => `CustomResourceDefinition/${k.plural}.${k.group}`);
const CONTROL_PLANE = (ns: string) => [
  `Namespace/${ns}`,
  `ServiceAccount/${ns}/ward-controller`,
  `ClusterRole/ward-controller-${ns}`,
  `ClusterRoleBinding/ward-controller-${ns}`,
  `Role/${ns}/ward-controller`,
  `RoleBinding/${ns}/ward-controller`,
  `Secret/${ns}/linkerd-identity-issuer`,
  `ConfigMap/${ns}/linkerd-identity-trust-roots`,
  `Secret/${ns}/ward-webhook-tls`,
  `Deployment/${ns}/ward-controller`,
  `Service/${ns}/ward-controller`,
  `Service/${ns}/ward-webhook`,
  'ValidatingWebhookConfiguration/ward-policy-validator',
  'MutatingWebhookConfiguration/ward-proxy-injector',
];

/** Everything but the generated keys and certificates. */
function withoutGenerated(objs: readonly Obj[]): unknown[] {
  return objs.map((o) => {
    const copy = structuredClone(o) as Record<string, unknown>;
    if (o.kind === 'Secret' || o.kind === 'ConfigMap') delete copy.data;
    for (const w of (copy.webhooks ?? []) as { clientConfig: { caBundle?: string } }[]) delete w.clientConfig.caBundle;
    return copy;
  });
}

describe('ward install', () => {
  let objs: Obj[] = [];
  before(async () => {
    const r = await ward(['install']);
    assert.equal(r.status, 0, r.stderr);
    objs = parseYaml(r.stdout);
  });

  it('prints the CRDs and then the control plane, in apply order', () => {
    assert.deepEqual(ids(objs), [...CRDS, ...CONTROL_PLANE('linkerd')]);
    for (const o of objs) assert.equal(o.metadata.labels?.['app.kubernetes.io/part-of'], 'ward', ids([o])[0]);
  });

  it('is deterministic apart from the generated keys and certificates', async () => {
    const again = parseYaml((await ward(['install'])).stdout);
    assert.deepEqual(withoutGenerated(again), withoutGenerated(objs));
    assert.notEqual(
      unb64(dig(find(again, 'Secret', 'linkerd-identity-issuer'), 'data', 'key.pem')),
      unb64(dig(find(objs, 'Secret', 'linkerd-identity-issuer'), 'data', 'key.pem')),
    );
  });

  it('grants least privilege: no wildcard, reads with list/watch, writes only status, reviews tokens', () => {
    const cluster = find(objs, 'ClusterRole', 'ward-controller-linkerd').rules as Rule[];
    const ns = find(objs, 'Role', 'ward-controller').rules as Rule[];
    for (const r of [...cluster, ...ns]) {
      for (const v of [...r.apiGroups, ...r.resources, ...r.verbs]) assert.ok(!v.includes('*'), JSON.stringify(r));
    }
    const grants = (rules: Rule[]) =>
      rules
        .flatMap((r) =>
          r.apiGroups.flatMap((g) =>
            r.resources.map((res) => `${g}/${res}${r.resourceNames ? `[${r.resourceNames.join(',')}]` : ''}: ${[...r.verbs].sort().join(',')}`),
          ),
        )
        .sort();
    const policy = CRD_KINDS.map((k) => `${k.group}/${k.plural}`);
    assert.deepEqual(
      grants(cluster),
      [
        '/namespaces: list,watch',
        '/pods: list,watch',
        '/serviceaccounts: list,watch',
        '/services: list,watch',
        'authentication.k8s.io/tokenreviews: create',
        'discovery.k8s.io/endpointslices: list,watch',
        ...policy.map((p) => `${p}: list,watch`),
        ...policy.map((p) => `${p}/status: patch,update`),
        // SMI is read, never written.
        'access.smi-spec.io/traffictargets: list,watch',
        'specs.smi-spec.io/httproutegroups: list,watch',
        'specs.smi-spec.io/tcproutes: list,watch',
        'specs.smi-spec.io/udproutes: list,watch',
      ].sort(),
    );
    assert.deepEqual(grants(ns), ['/services[ward-controller]: get', 'coordination.k8s.io/leases: create,get,update'].sort());
    const binding = find(objs, 'ClusterRoleBinding', 'ward-controller-linkerd');
    assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: 'ward-controller', namespace: 'linkerd' }]);
    assert.deepEqual(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'ward-controller-linkerd' });
  });

  it('lays out the identity as Linkerd does, and the issuer chains to the trust anchor', async () => {
    const issuer = find(objs, 'Secret', 'linkerd-identity-issuer');
    const roots = find(objs, 'ConfigMap', 'linkerd-identity-trust-roots');
    assert.deepEqual(Object.keys(issuer.data as object).sort(), ['crt.pem', 'key.pem']);
    assert.deepEqual(Object.keys(roots.data as object), ['ca-bundle.crt']);
    const res = await validateIssuer({
      anchorsPem: dig(roots, 'data', 'ca-bundle.crt') as string,
      certPem: unb64(dig(issuer, 'data', 'crt.pem')),
      keyPem: unb64(dig(issuer, 'data', 'key.pem')),
    });
    assert.ok(res.ok, JSON.stringify(!res.ok && res.diagnostics));
    assert.equal(res.value.subject, 'CN=identity.linkerd.cluster.local');
    // The trust anchor's key never leaves the machine.
    assert.doesNotMatch(JSON.stringify(objs), new RegExp(IDENTITY_FILES.anchorKey.replace('.', '\\.')));
  });

  it('runs the controller from that identity and the webhook Secret, as non-root with a read-only root', () => {
    const deploy = find(objs, 'Deployment', 'ward-controller');
    const pod = dig(deploy, 'spec', 'template', 'spec') as Record<string, unknown>;
    const c = dig(pod, 'containers', 0) as Record<string, unknown>;
    assert.equal(dig(deploy, 'spec', 'replicas'), 2);
    assert.equal(c.image, 'localhost/ward:0.1.0');
    assert.equal(c.imagePullPolicy, 'IfNotPresent');
    assert.deepEqual(c.args, [
      'controller',
      '--kubernetes',
      '--control-plane-namespace=linkerd',
      '--trust-domain=cluster.local',
      '--identity-dir=/var/run/ward/identity',
      '--webhook-cert=/var/run/ward/webhook/tls.crt',
      '--webhook-key=/var/run/ward/webhook/tls.key',
      '--webhook-addr=0.0.0.0:9443',
      '--proxy-image=localhost/ward:0.1.0',
      '--proxy-image-pull-policy=IfNotPresent',
      '--policy-addr=0.0.0.0:8090',
      '--identity-addr=0.0.0.0:8080',
      '--destination-addr=0.0.0.0:8086',
      '--admin-addr=0.0.0.0:9990',
    ]);
    assert.deepEqual(
      (c.env as { name: string; valueFrom: unknown }[]).map((e) => [e.name, dig(e.valueFrom, 'fieldRef', 'fieldPath')]),
      [
        ['POD_NAME', 'metadata.name'],
        ['POD_NAMESPACE', 'metadata.namespace'],
      ],
    );
    assert.deepEqual(dig(c, 'readinessProbe', 'httpGet'), { path: '/ready', port: 9990 });
    assert.deepEqual(dig(c, 'livenessProbe', 'httpGet'), { path: '/live', port: 9990 });
    assert.equal(dig(c, 'securityContext', 'readOnlyRootFilesystem'), true);
    assert.equal(dig(c, 'securityContext', 'allowPrivilegeEscalation'), false);
    assert.equal(dig(pod, 'securityContext', 'runAsNonRoot'), true);
    assert.notEqual(dig(pod, 'securityContext', 'runAsUser'), 0);
    assert.notEqual(dig(pod, 'securityContext', 'runAsUser'), 2102, 'not the proxy uid proxy-init exempts');
    assert.equal(pod.serviceAccountName, 'ward-controller');
    // The identity directory holds exactly the files loadIssuer reads, from Linkerd's keys.
    const sources = dig(pod, 'volumes', 0, 'projected', 'sources') as Record<string, { name: string; items: { key: string; path: string }[] }>[];
    assert.deepEqual(
      sources.flatMap((s) => Object.entries(s).flatMap(([kind, src]) => src.items.map((i) => `${kind}:${src.name}:${i.key}->${i.path}`))),
      [
        `secret:linkerd-identity-issuer:crt.pem->${IDENTITY_FILES.issuerCert}`,
        `secret:linkerd-identity-issuer:key.pem->${IDENTITY_FILES.issuerKey}`,
        `configMap:linkerd-identity-trust-roots:ca-bundle.crt->${IDENTITY_FILES.anchorCert}`,
      ],
    );
    assert.deepEqual(dig(pod, 'volumes', 1, 'secret', 'secretName'), 'ward-webhook-tls');
    const mounts = Object.fromEntries((c.volumeMounts as { name: string; mountPath: string }[]).map((m) => [m.name, m.mountPath]));
    assert.deepEqual(mounts, { identity: '/var/run/ward/identity', 'webhook-tls': '/var/run/ward/webhook', tmp: '/tmp' });
  });

  it('exposes the controller and the webhook on the agreed ports', () => {
    const ports = (name: string) =>
      (dig(find(objs, 'Service', name), 'spec', 'ports') as { name: string; port: number; targetPort: number }[]).map(
        (p) => `${p.name} ${p.port}->${p.targetPort}`,
      );
    assert.deepEqual(ports('ward-controller'), ['policy 8090->8090', 'identity 8080->8080', 'destination 8086->8086', 'admin 9990->9990']);
    assert.deepEqual(ports('ward-webhook'), ['webhook 443->9443']);
    const selector = dig(find(objs, 'Deployment', 'ward-controller'), 'spec', 'template', 'metadata', 'labels') as Record<string, string>;
    for (const svc of ['ward-controller', 'ward-webhook']) {
      for (const [k, v] of Object.entries(dig(find(objs, 'Service', svc), 'spec', 'selector') as object)) assert.equal(selector[k], v);
    }
    // The controller has no proxy: a pod label saying "meshed" would make clients' proxies dial it with mesh TLS.
    assert.equal(selector['linkerd.io/control-plane-ns'], undefined);
  });

  it('validates every policy kind (Fail) and injects pods (Ignore), never in the control plane', () => {
    const v = dig(find(objs, 'ValidatingWebhookConfiguration', 'ward-policy-validator'), 'webhooks', 0) as Record<string, unknown>;
    assert.equal(v.failurePolicy, 'Fail');
    assert.deepEqual(dig(v, 'clientConfig', 'service'), { name: 'ward-webhook', namespace: 'linkerd', path: '/validate', port: 443 });
    const covered = (v.rules as { apiGroups: string[]; resources: string[]; operations: string[]; apiVersions: string[] }[]).flatMap((r) => {
      assert.deepEqual(r.operations, ['CREATE', 'UPDATE']);
      return r.apiGroups.flatMap((g) => r.resources.map((res) => `${g}/${res}`));
    });
    assert.deepEqual(covered.sort(), CRD_KINDS.map((k) => `${k.group}/${k.plural}`).sort());
    assert.deepEqual(dig(v, 'namespaceSelector', 'matchExpressions'), [{ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['linkerd'] }]);

    const m = dig(find(objs, 'MutatingWebhookConfiguration', 'ward-proxy-injector'), 'webhooks', 0) as Record<string, unknown>;
    assert.equal(m.failurePolicy, 'Ignore');
    assert.deepEqual(m.rules, [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'], scope: 'Namespaced' }]);
    assert.deepEqual(dig(m, 'clientConfig', 'service'), { name: 'ward-webhook', namespace: 'linkerd', path: '/inject', port: 443 });
    assert.deepEqual(dig(m, 'namespaceSelector', 'matchExpressions'), [
      { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['linkerd'] },
      { key: 'config.linkerd.io/admission-webhooks', operator: 'NotIn', values: ['disabled'] },
    ]);
    assert.equal(dig(m, 'clientConfig', 'caBundle'), dig(v, 'clientConfig', 'caBundle'));
  });

  it('serves TLS the API server accepts for ward-webhook.<ns>.svc with the CA in the caBundle', async () => {
    const secret = find(objs, 'Secret', 'ward-webhook-tls');
    assert.equal(secret.type, 'kubernetes.io/tls');
    const ca = unb64(dig(find(objs, 'ValidatingWebhookConfiguration', 'ward-policy-validator'), 'webhooks', 0, 'clientConfig', 'caBundle'));
    const server = createServer({ cert: unb64(dig(secret, 'data', 'tls.crt')), key: unb64(dig(secret, 'data', 'tls.key')) }, (s) => s.end('ok'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    after(() => server.close());
    const port = (server.address() as AddressInfo).port;
    const handshake = (servername: string) =>
      new Promise<string>((resolve) => {
        const s = connect({ host: '127.0.0.1', port, ca, servername }, () => {
          s.end();
          resolve('ok');
        });
        s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
      });
    assert.equal(await handshake('ward-webhook.linkerd.svc'), 'ok');
    assert.equal(await handshake('ward-controller.linkerd.svc'), 'ERR_TLS_CERT_ALTNAME_INVALID');
    const leaf = new X509Certificate(unb64(dig(secret, 'data', 'tls.crt')));
    assert.ok(leaf.validToDate.getTime() - Date.now() > 300 * 86_400_000, 'valid for about a year');
  });

  it('takes the namespace, image, pull policy, replicas and trust domain from flags', async () => {
    const r = await ward([
      'install',
      '--control-plane-namespace',
      'mesh',
      '--image',
      'registry.example/ward:1',
      '--image-pull-policy',
      'Always',
      '--replicas',
      '3',
      '--trust-domain',
      'example.org',
    ]);
    assert.equal(r.status, 0, r.stderr);
    const o = parseYaml(r.stdout);
    assert.deepEqual(ids(o), [...CRDS, ...CONTROL_PLANE('mesh')]);
    const c = dig(find(o, 'Deployment', 'ward-controller'), 'spec', 'template', 'spec', 'containers', 0) as Record<string, unknown>;
    assert.deepEqual([c.image, c.imagePullPolicy, dig(find(o, 'Deployment', 'ward-controller'), 'spec', 'replicas')], ['registry.example/ward:1', 'Always', 3]);
    assert.ok((c.args as string[]).includes('--trust-domain=example.org'));
    assert.ok((c.args as string[]).includes('--control-plane-namespace=mesh'));
    assert.ok((c.args as string[]).includes('--proxy-image=registry.example/ward:1'));
    assert.ok((c.args as string[]).includes('--proxy-image-pull-policy=Always'));
    const cert = new X509Certificate(unb64(dig(find(o, 'Secret', 'linkerd-identity-issuer'), 'data', 'crt.pem')));
    assert.equal(cert.subject, 'CN=identity.linkerd.example.org');
    assert.match(
      new X509Certificate(unb64(dig(find(o, 'Secret', 'ward-webhook-tls'), 'data', 'tls.crt'))).subjectAltName ?? '',
      /DNS:ward-webhook\.mesh\.svc\b/,
    );
  });

  it('prints only the CRDs with --crds, and leaves the Gateway API out on request', async () => {
    assert.deepEqual(ids(parseYaml((await ward(['install', '--crds'])).stdout)), CRDS);
    const skipped = ids(parseYaml((await ward(['install', '--skip-gateway-api-crds'])).stdout));
    assert.deepEqual(skipped, [...CRDS.filter((c) => !c.endsWith('.gateway.networking.k8s.io')), ...CONTROL_PLANE('linkerd')]);
  });

  it('prints a v1 List with -o json', async () => {
    const r = await ward(['install', '-o', 'json']);
    const list = JSON.parse(r.stdout) as { apiVersion: string; kind: string; items: Obj[] };
    assert.deepEqual([list.apiVersion, list.kind], ['v1', 'List']);
    assert.deepEqual(ids(list.items), [...CRDS, ...CONTROL_PLANE('linkerd')]);
  });

  describe('with identity files', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ward-install-test-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const a = join(dir, 'a');
    const b = join(dir, 'b');
    before(async () => {
      for (const outDir of [a, b]) assert.ok((await initIdentity({ outDir })).ok);
    });
    const flags = (anchors: string, issuer: string) => [
      '--identity-trust-anchors-file',
      join(anchors, IDENTITY_FILES.anchorCert),
      '--identity-issuer-certificate-file',
      join(issuer, IDENTITY_FILES.issuerCert),
      '--identity-issuer-key-file',
      join(issuer, IDENTITY_FILES.issuerKey),
    ];

    it('installs the given trust anchors and issuer', async () => {
      const r = await ward(['install', ...flags(a, a)]);
      assert.equal(r.status, 0, r.stderr);
      const o = parseYaml(r.stdout);
      assert.equal(
        dig(find(o, 'ConfigMap', 'linkerd-identity-trust-roots'), 'data', 'ca-bundle.crt'),
        readFileSync(join(a, IDENTITY_FILES.anchorCert), 'utf8'),
      );
      assert.equal(unb64(dig(find(o, 'Secret', 'linkerd-identity-issuer'), 'data', 'crt.pem')), readFileSync(join(a, IDENTITY_FILES.issuerCert), 'utf8'));
      assert.equal(unb64(dig(find(o, 'Secret', 'linkerd-identity-issuer'), 'data', 'key.pem')), readFileSync(join(a, IDENTITY_FILES.issuerKey), 'utf8'));
    });

    it('refuses an issuer that does not chain to the anchors, with the diagnostic', async () => {
      const r = await ward(['install', ...flags(a, b)]);
      assert.equal(r.status, 2);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, /ID006/);
    });

    it('refuses some identity files without the others', async () => {
      const r = await ward(['install', ...flags(a, a).slice(0, 2)]);
      assert.equal(r.status, 2);
      assert.match(r.stderr, /give all of --identity-trust-anchors-file, --identity-issuer-certificate-file and --identity-issuer-key-file, or none/);
    });
  });

  it('refuses bad flags with exit 2 and prints nothing', async () => {
    for (const [args, message] of [
      [['--replicas', '0'], /invalid --replicas "0"/],
      [['--replicas', '2x'], /invalid --replicas "2x"/],
      [['--control-plane-namespace', 'Bad_NS'], /invalid --control-plane-namespace "Bad_NS"/],
      [['--trust-domain', 'UPPER'], /invalid --trust-domain "UPPER"/],
      [['--image-pull-policy', 'Sometimes'], /Allowed choices are Always, IfNotPresent, Never/],
    ] as const) {
      const r = await ward(['install', ...args]);
      assert.equal(r.status, 2, args.join(' '));
      assert.equal(r.stdout, '');
      assert.match(r.stderr, message);
    }
  });
});

describe('ward uninstall', () => {
  it('prints the kinds and names of everything install creates: webhooks first, CRDs last', async () => {
    const installed = parseYaml((await ward(['install', '--control-plane-namespace', 'mesh'])).stdout);
    const r = await ward(['uninstall', '--control-plane-namespace', 'mesh']);
    assert.equal(r.status, 0, r.stderr);
    const objs = parseYaml(r.stdout);
    assert.deepEqual([...ids(objs)].sort(), [...ids(installed)].sort());
    for (const o of objs) assert.deepEqual(Object.keys(o).sort(), ['apiVersion', 'kind', 'metadata']);
    assert.deepEqual(ids(objs).slice(0, 2), ['ValidatingWebhookConfiguration/ward-policy-validator', 'MutatingWebhookConfiguration/ward-proxy-injector']);
    assert.deepEqual(ids(objs).slice(-CRDS.length - 1), ['Namespace/mesh', ...CRDS]);
  });

  it('keeps the Gateway API CRDs with --skip-gateway-api-crds', async () => {
    const objs = ids(parseYaml((await ward(['uninstall', '--skip-gateway-api-crds'])).stdout));
    assert.ok(!objs.some((o) => o.includes('gateway.networking.k8s.io')));
    assert.ok(objs.includes('CustomResourceDefinition/servers.policy.linkerd.io'));
  });
});
