import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_OPAQUE_PORTS, type InjectConfig, injectPod, isMeshedPod } from './inject.js';
import type { ContainerSpec, Namespace, Pod } from './types.js';

const CP: InjectConfig = { controlPlaneNamespace: 'linkerd' };

function mkPod(opts: { labels?: Record<string, string>; annotations?: Record<string, string>; containers?: ContainerSpec[] } = {}): Pod {
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: { namespace: 'app', name: 'web-0', labels: opts.labels ?? { app: 'web' }, annotations: opts.annotations ?? {} },
    spec: { containers: opts.containers ?? [{ name: 'main', ports: [{ containerPort: 8080 }, { containerPort: 3306 }] }] },
  };
}

function mkNamespace(annotations: Record<string, string>): Namespace {
  return { kind: 'Namespace', apiVersion: 'v1', metadata: { namespace: '', name: 'app', labels: {}, annotations }, spec: {} };
}

const PROXY: ContainerSpec = {
  name: 'linkerd-proxy',
  ports: [
    { name: 'linkerd-proxy', containerPort: 4143 },
    { name: 'linkerd-admin', containerPort: 4191 },
  ],
  readinessProbe: { httpGet: { port: 4191, path: '/ready' } },
  livenessProbe: { httpGet: { port: 4191, path: '/live' } },
};

describe('isMeshedPod', () => {
  it('follows the label, the pod annotation, then the namespace annotation', () => {
    const enabled = mkNamespace({ 'linkerd.io/inject': 'enabled' });
    assert.equal(isMeshedPod(mkPod(), undefined), false);
    assert.equal(isMeshedPod(mkPod({ labels: { 'linkerd.io/control-plane-ns': 'linkerd' } }), undefined), true);
    assert.equal(isMeshedPod(mkPod({ annotations: { 'linkerd.io/inject': 'ingress' } }), undefined), true);
    assert.equal(isMeshedPod(mkPod(), enabled), true);
    assert.equal(isMeshedPod(mkPod({ annotations: { 'linkerd.io/inject': 'disabled' } }), enabled), false);
    assert.equal(isMeshedPod(mkPod(), mkNamespace({ 'linkerd.io/inject': 'disabled' })), false);
  });
});

describe('injectPod', () => {
  it('injects a pod: copies namespace config annotations it lacks, adds opaque ports, label, version and proxy', () => {
    const ns = mkNamespace({
      'linkerd.io/inject': 'enabled',
      'config.linkerd.io/default-inbound-policy': 'deny',
      'config.alpha.linkerd.io/proxy-wait-before-exit-seconds': '5',
      'config.linkerd.io/proxy-cpu-limit': '1',
      'other.io/x': 'y',
    });
    const pod = mkPod({ annotations: { 'config.linkerd.io/proxy-cpu-limit': '2' } });
    const injected = injectPod(pod, ns, CP);
    assert.deepEqual(injected.metadata, {
      namespace: 'app',
      name: 'web-0',
      labels: { app: 'web', 'linkerd.io/control-plane-ns': 'linkerd' },
      annotations: {
        'config.linkerd.io/proxy-cpu-limit': '2',
        'config.linkerd.io/default-inbound-policy': 'deny',
        'config.alpha.linkerd.io/proxy-wait-before-exit-seconds': '5',
        'config.linkerd.io/opaque-ports': '3306',
        'linkerd.io/proxy-version': 'ward',
      },
    });
    assert.deepEqual(injected.spec.containers, [...pod.spec.containers, PROXY]);
    assert.deepEqual(pod.metadata.annotations, { 'config.linkerd.io/proxy-cpu-limit': '2' }, 'the input is not mutated');
  });

  it('leaves an already-injected pod unchanged: a later namespace annotation does not reach it', () => {
    const ns = mkNamespace({ 'linkerd.io/inject': 'enabled', 'config.linkerd.io/default-inbound-policy': 'deny' });
    const byAnnotation = mkPod({ labels: { 'linkerd.io/control-plane-ns': 'linkerd' }, annotations: { 'linkerd.io/proxy-version': 'stable' } });
    const byContainer = mkPod({ labels: { 'linkerd.io/control-plane-ns': 'linkerd' }, containers: [{ name: 'main' }, PROXY] });
    assert.equal(injectPod(byAnnotation, ns, CP), byAnnotation);
    assert.equal(injectPod(byContainer, ns, CP), byContainer);
    // Injecting twice is the same as injecting once.
    const once = injectPod(mkPod(), ns, CP);
    assert.equal(injectPod(once, ns, CP), once);
  });

  it('leaves an unmeshed pod unchanged (no label, so it is not indexed)', () => {
    const pod = mkPod();
    assert.equal(injectPod(pod, mkNamespace({ 'config.linkerd.io/default-inbound-policy': 'deny' }), CP), pod);
  });

  it('adds opaque-ports only when neither pod nor namespace sets it and the pod declares one', () => {
    const enabled = { 'linkerd.io/inject': 'enabled' };
    const opaque = (pod: Pod, ns?: Namespace, cfg = CP) => injectPod(pod, ns, cfg).metadata.annotations['config.linkerd.io/opaque-ports'];
    const ports = (...n: number[]): ContainerSpec[] => [{ name: 'main', ports: n.map((containerPort) => ({ containerPort })) }];
    assert.equal(opaque(mkPod({ annotations: enabled, containers: ports(6379, 8080, 25, 5432) })), '25,5432,6379');
    assert.equal(opaque(mkPod({ annotations: enabled, containers: ports(8080) })), undefined);
    assert.equal(opaque(mkPod({ annotations: { ...enabled, 'config.linkerd.io/opaque-ports': '' }, containers: ports(3306) })), '');
    assert.equal(opaque(mkPod({ annotations: enabled, containers: ports(3306) }), mkNamespace({ 'config.linkerd.io/opaque-ports': '4000' })), '4000');
    assert.equal(opaque(mkPod({ annotations: enabled, containers: ports(3306, 4000) }), undefined, { ...CP, opaquePorts: [4000] }), '4000');
    assert.deepEqual(DEFAULT_OPAQUE_PORTS, [25, 587, 3306, 4444, 5432, 6379, 9300, 11211]);
  });

  it('takes a pod with the control-plane-ns label as already created: nothing is added or copied', () => {
    const pod = mkPod({ labels: { 'linkerd.io/control-plane-ns': 'mesh' }, containers: [{ name: 'main', ports: [{ containerPort: 3306 }] }] });
    const out = injectPod(pod, mkNamespace({ 'config.linkerd.io/default-inbound-policy': 'deny', 'linkerd.io/inject': 'enabled' }), CP);
    assert.equal(out, pod);
  });
});
