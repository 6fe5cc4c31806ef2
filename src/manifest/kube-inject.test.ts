import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import { escapeJsonPointer, injectKubePod, injectKubeWorkload, type JsonObject, type JsonPatchOperation, type KubeInjectConfig } from './kube-inject.js';

const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const CFG: KubeInjectConfig = {
  controlPlaneNamespace: 'linkerd',
  image: 'localhost/ward:0.1.0',
  controllerHost: '10.0.0.57',
  trustAnchorsPem: PEM,
  version: '0.1.0',
};

function mkPod(opts: { annotations?: Record<string, string>; labels?: Record<string, string>; spec?: JsonObject } = {}): JsonObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      generateName: 'web-7d9f-',
      namespace: 'app',
      ...(opts.labels !== undefined ? { labels: opts.labels } : {}),
      ...(opts.annotations !== undefined ? { annotations: opts.annotations } : {}),
    },
    spec: opts.spec ?? {
      serviceAccountName: 'web',
      containers: [{ name: 'main', image: 'web:1', ports: [{ containerPort: 8080 }, { containerPort: 3306 }, { containerPort: 53, protocol: 'UDP' }] }],
    },
  };
}

function mkNamespace(annotations: Record<string, string>): JsonObject {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'app', annotations } };
}

const ENABLED = mkNamespace({ 'linkerd.io/inject': 'enabled' });

// === a small RFC 6902 applier (the add operation), independent of the module ===

function unescapeToken(token: string): string {
  return token.replace(/~1/g, '/').replace(/~0/g, '~');
}

function applyPatch(doc: unknown, ops: readonly JsonPatchOperation[]): unknown {
  const root = structuredClone(doc) as JsonObject;
  for (const op of ops) {
    assert.ok(op.path.startsWith('/'), `pointer ${op.path}`);
    const tokens = op.path.slice(1).split('/').map(unescapeToken);
    const last = tokens.pop() as string;
    let parent: unknown = root;
    for (const t of tokens) {
      parent = Array.isArray(parent) ? parent[Number(t)] : (parent as JsonObject)[t];
      assert.ok(typeof parent === 'object' && parent !== null, `${op.path}: no parent at ${t}`);
    }
    if (Array.isArray(parent)) {
      const index = last === '-' ? parent.length : Number(last);
      assert.ok(Number.isInteger(index) && index >= 0 && index <= parent.length, `${op.path}: index out of range`);
      parent.splice(index, 0, structuredClone(op.value));
    } else {
      (parent as JsonObject)[last] = structuredClone(op.value);
    }
  }
  return root;
}

function container(pod: JsonObject, name: string, where: 'containers' | 'initContainers' = 'containers'): JsonObject {
  const list = (pod.spec as JsonObject)[where] as JsonObject[];
  const c = list.find((x) => x.name === name);
  assert.ok(c !== undefined, `${where} has ${name}: ${JSON.stringify(list.map((x) => x.name))}`);
  return c;
}

function argAfter(args: unknown, flag: string): string[] {
  const a = args as string[];
  return a.flatMap((x, i) => (x === flag ? [a[i + 1] as string] : []));
}

describe('injectKubePod', () => {
  it('injects a pod of an annotated namespace: init container, proxy, token volume, label and annotations; the patch yields the same pod', () => {
    const pod = mkPod({ labels: { app: 'web' } });
    const r = injectKubePod(pod, ENABLED, CFG, { namespace: 'app' });
    assert.equal(r.injected, true, r.reason);
    assert.deepEqual(applyPatch(pod, r.patch), r.pod);
    // The input is not changed.
    assert.deepEqual(pod, mkPod({ labels: { app: 'web' } }));

    const meta = r.pod.metadata as JsonObject;
    assert.deepEqual(meta.labels, { app: 'web', 'linkerd.io/control-plane-ns': 'linkerd', 'linkerd.io/workload-ns': 'app' });
    assert.deepEqual(meta.annotations, {
      'config.linkerd.io/opaque-ports': '3306',
      'linkerd.io/proxy-version': '0.1.0',
      'linkerd.io/created-by': 'ward/proxy-injector 0.1.0',
      'linkerd.io/trust-root-sha256': createHash('sha256').update(PEM).digest('hex'),
    });

    const spec = r.pod.spec as JsonObject;
    assert.deepEqual(
      (spec.containers as JsonObject[]).map((c) => c.name),
      ['main', 'linkerd-proxy'],
    );
    assert.deepEqual(
      (spec.initContainers as JsonObject[]).map((c) => c.name),
      ['linkerd-init'],
    );
    assert.deepEqual(spec.volumes, [
      { name: 'linkerd-proxy-init-xtables-lock', emptyDir: {} },
      {
        name: 'linkerd-identity-token',
        projected: { sources: [{ serviceAccountToken: { audience: 'identity.l5d.io', expirationSeconds: 86400, path: 'linkerd-identity-token' } }] },
      },
    ]);

    const proxy = container(r.pod, 'linkerd-proxy');
    // The image's entrypoint runs ward: the arguments are its subcommand and flags.
    assert.equal(proxy.command, undefined);
    assert.deepEqual(proxy.args, [
      'proxy',
      '--transparent',
      '--workload',
      '$(_pod_ns)/$(_pod_name)',
      '--service-account',
      '$(_pod_sa)',
      '--token-file',
      '/var/run/secrets/tokens/linkerd-identity-token',
      '--identity-addr',
      '10.0.0.57:8080',
      '--policy-addr',
      '10.0.0.57:8090',
      '--destination-addr',
      '10.0.0.57:8086',
      '--listen-host',
      '$(_pod_ip)',
      '--admin-addr',
      '0.0.0.0:4191',
      '--control-plane-namespace',
      'linkerd',
      '--trust-domain',
      'cluster.local',
      '--cluster-domain',
      'cluster.local',
      // TCP container ports only (53/UDP is not proxied).
      '--inbound',
      '3306=[$(_pod_ip)]:3306',
      '--inbound',
      '8080=[$(_pod_ip)]:8080',
    ]);
    const env = proxy.env as JsonObject[];
    const fieldOf = (name: string) => ((env.find((e) => e.name === name)?.valueFrom as JsonObject | undefined)?.fieldRef as JsonObject | undefined)?.fieldPath;
    assert.equal(fieldOf('_pod_ns'), 'metadata.namespace');
    assert.equal(fieldOf('_pod_name'), 'metadata.name');
    assert.equal(fieldOf('_pod_ip'), 'status.podIP');
    assert.equal(fieldOf('_pod_sa'), 'spec.serviceAccountName');
    assert.equal(env.find((e) => e.name === 'LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS')?.value, PEM);
    // Tap answers the controller alone, as Linkerd's injector names its tap service.
    assert.equal(env.find((e) => e.name === 'LINKERD2_PROXY_TAP_SVC_NAME')?.value, 'ward-controller.linkerd.serviceaccount.identity.linkerd.cluster.local');
    assert.deepEqual(proxy.ports, [
      { name: 'linkerd-proxy', containerPort: 4143 },
      { name: 'linkerd-admin', containerPort: 4191 },
    ]);
    assert.deepEqual((proxy.readinessProbe as JsonObject).httpGet, { path: '/ready', port: 4191 });
    assert.deepEqual((proxy.livenessProbe as JsonObject).httpGet, { path: '/live', port: 4191 });
    assert.equal((proxy.securityContext as JsonObject).runAsUser, 2102);
    assert.deepEqual(proxy.volumeMounts, [{ name: 'linkerd-identity-token', mountPath: '/var/run/secrets/tokens', readOnly: true }]);
    assert.equal(proxy.resources, undefined);
    assert.equal(proxy.restartPolicy, undefined);

    const init = container(r.pod, 'linkerd-init', 'initContainers');
    assert.equal(init.command, undefined);
    assert.deepEqual(init.args, [
      'proxy-init',
      '--incoming-proxy-port',
      '4143',
      '--outgoing-proxy-port',
      '4140',
      '--proxy-uid',
      '2102',
      '--inbound-ports-to-ignore',
      '4190,4191',
    ]);
    const sc = init.securityContext as JsonObject;
    assert.equal(sc.runAsUser, 0);
    assert.deepEqual(sc.capabilities, { add: ['NET_ADMIN', 'NET_RAW'] });
  });

  it('writes a patch that adds annotations and labels one by one (keys escaped per RFC 6901) when the maps exist, whole when absent', () => {
    const withMaps = injectKubePod(mkPod({ labels: { app: 'web' }, annotations: { 'a~b/c': 'x' } }), ENABLED, CFG);
    const paths = withMaps.patch.map((op) => op.path);
    assert.ok(paths.includes('/metadata/labels/linkerd.io~1control-plane-ns'), paths.join(' '));
    assert.ok(paths.includes('/metadata/annotations/linkerd.io~1proxy-version'), paths.join(' '));
    assert.ok(!paths.includes('/metadata/annotations'), 'the existing map is not replaced');
    assert.equal(escapeJsonPointer('a~b/c'), 'a~0b~1c');

    const bare = mkPod({ spec: { containers: [{ name: 'main' }] } });
    const r = injectKubePod(bare, ENABLED, CFG);
    // No ServiceAccount named: the one Kubernetes defaults to, which the token projection needs.
    assert.deepEqual(
      r.patch.find((op) => op.path === '/spec/serviceAccountName'),
      { op: 'add', path: '/spec/serviceAccountName', value: 'default' },
    );
    const legacySa = injectKubePod(mkPod({ spec: { serviceAccount: 'old', containers: [{ name: 'main' }] } }), ENABLED, CFG);
    assert.equal((legacySa.pod.spec as JsonObject).serviceAccountName, 'old');
    const labelsOp = r.patch.find((op) => op.path === '/metadata/labels');
    assert.deepEqual(labelsOp?.value, { 'linkerd.io/control-plane-ns': 'linkerd', 'linkerd.io/workload-ns': 'app' });
    assert.ok(r.patch.some((op) => op.path === '/spec/volumes'));
    assert.ok(r.patch.some((op) => op.path === '/spec/initContainers'));
    assert.deepEqual(applyPatch(bare, r.patch), r.pod);

    // Existing volumes and init containers are appended to.
    const busy = mkPod({
      spec: {
        containers: [{ name: 'main' }],
        initContainers: [{ name: 'migrate' }],
        volumes: [{ name: 'data', emptyDir: {} }],
      },
    });
    const b = injectKubePod(busy, ENABLED, CFG);
    assert.deepEqual(
      b.patch.map((op) => op.path),
      [
        '/metadata/annotations',
        '/metadata/labels',
        '/spec/serviceAccountName',
        '/spec/volumes/-',
        '/spec/volumes/-',
        '/spec/initContainers/-',
        '/spec/containers/-',
      ],
    );
    assert.deepEqual(applyPatch(busy, b.patch), b.pod);
    assert.deepEqual(
      ((b.pod.spec as JsonObject).initContainers as JsonObject[]).map((c) => c.name),
      ['migrate', 'linkerd-init'],
    );
  });

  it('leaves pods alone that are not meshed, opt out, are injected already or use the host network, and says why', () => {
    const cases: [string, JsonObject, JsonObject | undefined, RegExp][] = [
      ['no annotation anywhere', mkPod(), mkNamespace({}), /neither the namespace nor the pod/],
      ['namespace disabled', mkPod(), mkNamespace({ 'linkerd.io/inject': 'disabled' }), /neither/],
      [
        'pod opts out of an enabled namespace',
        mkPod({ annotations: { 'linkerd.io/inject': 'disabled' } }),
        ENABLED,
        /pod has the annotation "linkerd.io\/inject: disabled"/,
      ],
      ['already injected (label)', mkPod({ labels: { 'linkerd.io/control-plane-ns': 'linkerd' } }), ENABLED, /injected already/],
      ['already injected (version annotation)', mkPod({ annotations: { 'linkerd.io/proxy-version': 'x' } }), ENABLED, /injected already/],
      [
        'already injected (native sidecar)',
        mkPod({ spec: { containers: [{ name: 'main' }], initContainers: [{ name: 'linkerd-proxy', restartPolicy: 'Always' }] } }),
        ENABLED,
        /injected already/,
      ],
      ['host network', mkPod({ spec: { hostNetwork: true, containers: [{ name: 'main' }] } }), ENABLED, /hostNetwork/],
    ];
    for (const [name, pod, ns, reason] of cases) {
      const r = injectKubePod(pod, ns, CFG);
      assert.equal(r.injected, false, name);
      assert.match(r.reason ?? '', reason, name);
      assert.deepEqual(r.patch, [], name);
      assert.deepEqual(r.pod, pod, name);
    }
    // The pod's own annotation is enough without the namespace (ingress too).
    assert.equal(injectKubePod(mkPod({ annotations: { 'linkerd.io/inject': 'enabled' } }), undefined, CFG).injected, true);
    assert.equal(injectKubePod(mkPod({ annotations: { 'linkerd.io/inject': 'ingress' } }), mkNamespace({}), CFG).injected, true);
    // Not a pod at all.
    assert.equal(injectKubePod({ kind: 'Pod' }, ENABLED, CFG).injected, false);
    assert.equal(injectKubePod('nonsense', ENABLED, CFG).injected, false);
  });

  it("copies the namespace's config annotations the pod lacks at creation (the pod's own win); the namespace's opaque ports replace the default", () => {
    const ns = mkNamespace({
      'linkerd.io/inject': 'enabled',
      'config.linkerd.io/default-inbound-policy': 'all-authenticated',
      'config.linkerd.io/opaque-ports': '9000',
      'config.linkerd.io/proxy-cpu-limit': '1',
      'config.alpha.linkerd.io/proxy-wait-before-exit-seconds': '5',
      'example.com/other': 'x',
    });
    const r = injectKubePod(mkPod({ annotations: { 'config.linkerd.io/proxy-cpu-limit': '500m' } }), ns, CFG);
    const ann = (r.pod.metadata as JsonObject).annotations as Record<string, string>;
    assert.equal(ann['config.linkerd.io/default-inbound-policy'], 'all-authenticated');
    assert.equal(ann['config.linkerd.io/opaque-ports'], '9000');
    assert.equal(ann['config.linkerd.io/proxy-cpu-limit'], '500m');
    assert.equal(ann['config.alpha.linkerd.io/proxy-wait-before-exit-seconds'], '5');
    assert.equal(ann['example.com/other'], undefined);
    // A namespace CPU limit copied onto the pod sizes the proxy; the pod's own wins.
    assert.deepEqual(container(r.pod, 'linkerd-proxy').resources, { limits: { cpu: '500m' } });
  });

  it('runs the proxy as a native sidecar when config.alpha.linkerd.io/proxy-enable-native-sidecar is "true" (also from the namespace)', () => {
    const pod = mkPod({
      annotations: { 'config.alpha.linkerd.io/proxy-enable-native-sidecar': 'true' },
      spec: { containers: [{ name: 'main', ports: [{ containerPort: 8080 }] }], initContainers: [{ name: 'migrate' }] },
    });
    const r = injectKubePod(pod, ENABLED, CFG);
    assert.deepEqual(applyPatch(pod, r.patch), r.pod);
    const spec = r.pod.spec as JsonObject;
    assert.deepEqual(
      (spec.initContainers as JsonObject[]).map((c) => c.name),
      ['linkerd-init', 'linkerd-proxy', 'migrate'],
    );
    assert.deepEqual(
      (spec.containers as JsonObject[]).map((c) => c.name),
      ['main'],
    );
    const proxy = container(r.pod, 'linkerd-proxy', 'initContainers');
    assert.equal(proxy.restartPolicy, 'Always');
    assert.deepEqual((proxy.startupProbe as JsonObject).httpGet, { path: '/ready', port: 4191 });

    const fromNs = injectKubePod(mkPod(), mkNamespace({ 'linkerd.io/inject': 'enabled', 'config.alpha.linkerd.io/proxy-enable-native-sidecar': 'true' }), CFG);
    assert.deepEqual(
      ((fromNs.pod.spec as JsonObject).initContainers as JsonObject[]).map((c) => c.name),
      ['linkerd-init', 'linkerd-proxy'],
    );
    const off = injectKubePod(mkPod({ annotations: { 'config.alpha.linkerd.io/proxy-enable-native-sidecar': 'false' } }), ENABLED, CFG);
    assert.deepEqual(
      ((off.pod.spec as JsonObject).containers as JsonObject[]).map((c) => c.name),
      ['main', 'linkerd-proxy'],
    );
  });

  it('passes skip-inbound-ports, skip-outbound-ports (ports and ranges) and skip-subnets to proxy-init; skipped ports are not proxied; bad values are ignored with a warning', () => {
    const r = injectKubePod(
      mkPod({ annotations: { 'config.linkerd.io/skip-inbound-ports': '3306, 9000-9010', 'config.linkerd.io/skip-outbound-ports': '5432,6000-6100' } }),
      ENABLED,
      CFG,
    );
    const init = container(r.pod, 'linkerd-init', 'initContainers');
    assert.deepEqual(argAfter(init.args, '--inbound-ports-to-ignore'), ['4190,4191,3306,9000-9010']);
    assert.deepEqual(argAfter(init.args, '--outbound-ports-to-ignore'), ['5432,6000-6100']);
    assert.deepEqual(argAfter(container(r.pod, 'linkerd-proxy').args, '--inbound'), ['8080=[$(_pod_ip)]:8080']);
    assert.deepEqual(r.warnings, []);

    const nets = injectKubePod(mkPod({ annotations: { 'config.linkerd.io/skip-subnets': '10.0.0.0/8, 192.168.1.0/24' } }), ENABLED, CFG);
    assert.deepEqual(argAfter(container(nets.pod, 'linkerd-init', 'initContainers').args, '--subnets-to-ignore'), ['10.0.0.0/8,192.168.1.0/24']);
    const badNets = injectKubePod(mkPod({ annotations: { 'config.linkerd.io/skip-subnets': '10.0.0.0/8,fd00::/8' } }), ENABLED, CFG);
    assert.deepEqual(argAfter(container(badNets.pod, 'linkerd-init', 'initContainers').args, '--subnets-to-ignore'), []);
    assert.deepEqual(badNets.warnings, ['annotation config.linkerd.io/skip-subnets="10.0.0.0/8,fd00::/8" ignored: "fd00::/8" is not an IPv4 CIDR']);

    const bad = injectKubePod(mkPod({ annotations: { 'config.linkerd.io/skip-inbound-ports': 'http,80' } }), ENABLED, CFG);
    assert.deepEqual(argAfter(container(bad.pod, 'linkerd-init', 'initContainers').args, '--inbound-ports-to-ignore'), ['4190,4191']);
    assert.equal(bad.warnings.length, 1);
    assert.match(bad.warnings[0] as string, /config\.linkerd\.io\/skip-inbound-ports="http,80" ignored: "http" is not a port number or range/);
  });

  it('sizes the proxy from the proxy-cpu/memory request and limit annotations, ignoring values that are not quantities', () => {
    const r = injectKubePod(
      mkPod({
        annotations: {
          'config.linkerd.io/proxy-cpu-request': '100m',
          'config.linkerd.io/proxy-cpu-limit': '1',
          'config.linkerd.io/proxy-memory-request': '20Mi',
          'config.linkerd.io/proxy-memory-limit': 'lots',
        },
      }),
      ENABLED,
      CFG,
    );
    assert.deepEqual(container(r.pod, 'linkerd-proxy').resources, { requests: { cpu: '100m', memory: '20Mi' }, limits: { cpu: '1' } });
    assert.deepEqual(r.warnings, ['annotation config.linkerd.io/proxy-memory-limit="lots" ignored: not a Kubernetes quantity']);
  });

  it('takes the proxy uid from config.linkerd.io/proxy-uid for both containers, brackets an IPv6 controller address, and honours image settings', () => {
    const r = injectKubePod(mkPod({ annotations: { 'config.linkerd.io/proxy-uid': '3000' } }), ENABLED, {
      ...CFG,
      controllerHost: 'fd00::57',
      imagePullPolicy: 'Never',
      image: 'registry.example/ward:9',
    });
    const proxy = container(r.pod, 'linkerd-proxy');
    const init = container(r.pod, 'linkerd-init', 'initContainers');
    assert.equal((proxy.securityContext as JsonObject).runAsUser, 3000);
    assert.deepEqual(argAfter(init.args, '--proxy-uid'), ['3000']);
    assert.deepEqual(argAfter(proxy.args, '--policy-addr'), ['[fd00::57]:8090']);
    assert.deepEqual(
      [proxy.image, proxy.imagePullPolicy, init.image, init.imagePullPolicy],
      ['registry.example/ward:9', 'Never', 'registry.example/ward:9', 'Never'],
    );
    const custom = injectKubePod(mkPod(), ENABLED, { ...CFG, command: ['/usr/bin/node', '/opt/ward/bin/ward.js'] });
    assert.deepEqual(container(custom.pod, 'linkerd-proxy').command, ['/usr/bin/node', '/opt/ward/bin/ward.js']);
    assert.deepEqual(container(custom.pod, 'linkerd-init', 'initContainers').command, ['/usr/bin/node', '/opt/ward/bin/ward.js']);
  });
});

describe('injectKubeWorkload', () => {
  const deployment = (annotations?: Record<string, string>): JsonObject => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', namespace: 'app' },
    spec: {
      selector: { matchLabels: { app: 'web' } },
      template: {
        metadata: { labels: { app: 'web' }, ...(annotations !== undefined ? { annotations } : {}) },
        spec: { containers: [{ name: 'main', ports: [{ containerPort: 8080 }] }] },
      },
    },
  });

  it('by default only adds linkerd.io/inject: enabled to the pod template', () => {
    const r = injectKubeWorkload(deployment(), undefined, { manual: false });
    assert.equal(r.outcome, 'annotated');
    assert.deepEqual(r.templatePath, ['spec', 'template']);
    assert.deepEqual(r.template?.metadata, { labels: { app: 'web' }, annotations: { 'linkerd.io/inject': 'enabled' } });
    assert.deepEqual(r.template?.spec, ((deployment().spec as JsonObject).template as JsonObject).spec);
  });

  it('with manual, injects the template whatever its namespace says; opting out and non-workloads are left alone', () => {
    const r = injectKubeWorkload(deployment(), CFG, { manual: true });
    assert.equal(r.outcome, 'injected');
    const template = r.template as JsonObject;
    assert.deepEqual(
      ((template.spec as JsonObject).containers as JsonObject[]).map((c) => c.name),
      ['main', 'linkerd-proxy'],
    );
    assert.equal(((template.metadata as JsonObject).labels as JsonObject)['linkerd.io/workload-ns'], 'app');

    const cron = injectKubeWorkload(
      {
        apiVersion: 'batch/v1',
        kind: 'CronJob',
        metadata: { name: 'c' },
        spec: { jobTemplate: { spec: { template: { spec: { containers: [{ name: 'x' }] } } } } },
      },
      CFG,
      { manual: true },
    );
    assert.equal(cron.outcome, 'injected');
    assert.deepEqual(cron.templatePath, ['spec', 'jobTemplate', 'spec', 'template']);

    const optOut = injectKubeWorkload(deployment({ 'linkerd.io/inject': 'disabled' }), CFG, { manual: true });
    assert.equal(optOut.outcome, 'skipped');
    assert.match(optOut.reason ?? '', /disabled/);
    assert.equal(injectKubeWorkload({ apiVersion: 'v1', kind: 'Service', metadata: { name: 's' } }, CFG, { manual: true }).outcome, 'unsupported');
  });
});
