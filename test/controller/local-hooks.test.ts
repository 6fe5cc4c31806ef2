/**
 * The controller's hooks for the local runtime (`ward up`): `podAddress` gives pods without a
 * `status.podIP` an address (in `namespace/name` order for a batch; the indexes and the
 * Destination API see it), and `recreatePod` creates a pod again, so a namespace annotation added
 * since it was created reaches it (the pod-creation rule). In-process controller on loopback.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { type RunningController, startController } from '../../src/controller/index.js';
import { initIdentity } from '../../src/identity/index.js';

const LOOPBACK = { host: '127.0.0.1', port: 0 };
const LISTEN = { policy: LOOPBACK, identity: LOOPBACK, destination: LOOPBACK, admin: LOOPBACK };

const ns = (policy: string | undefined) => `apiVersion: v1
kind: Namespace
metadata:
  name: app
  annotations:
    linkerd.io/inject: enabled${policy === undefined ? '' : `\n    config.linkerd.io/default-inbound-policy: ${policy}`}
`;

const PODS = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: app}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: api, namespace: app, labels: {app: api}}
spec:
  containers: [{name: api, ports: [{containerPort: 9090}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: fixed, namespace: app}
spec:
  containers: [{name: fixed}]
status: {podIP: 10.1.2.3}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`;

async function waitFor<T>(what: string, check: () => T | undefined, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('controller hooks for the local runtime', () => {
  let dir: string;
  let manifests: string;
  let ctl: RunningController;
  const asked: string[] = [];
  let next = 1;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-local-hooks-'));
    manifests = join(dir, 'manifests');
    mkdirSync(manifests);
    writeFileSync(join(manifests, 'ns.yaml'), ns(undefined));
    writeFileSync(join(manifests, 'pods.yaml'), PODS);
    assert.ok((await initIdentity({ outDir: join(dir, 'identity') })).ok);
    ctl = await startController({
      manifestsDir: manifests,
      identityDir: join(dir, 'identity'),
      cluster: clusterConfig({}),
      listen: LISTEN,
      grpcPlaintext: true,
      podAddress: (namespace, name) => {
        asked.push(`${namespace}/${name}`);
        return `127.20.0.${next++}`;
      },
    });
  });

  after(async () => {
    await ctl.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('asks for the pods without an address, in namespace/name order, and the indexes see the answers', () => {
    assert.deepEqual(asked, ['app/api', 'app/web-0', 'app/web-1']);
    const ips = Object.fromEntries(ctl.index.pods().map((p) => [p.name, p.pod.status?.podIP]));
    assert.deepEqual(ips, { api: '127.20.0.1', 'web-0': '127.20.0.2', 'web-1': '127.20.0.3', fixed: '10.1.2.3' });
    const w = ctl.endpoints.watch('web.app.svc.cluster.local:80', () => {});
    assert.ok(w.ok);
    const addrs = w.initial.flatMap((e) => (e.kind === 'add' ? e.endpoints.map((x) => `${x.ip}:${x.port}`) : [])).sort();
    w.unsubscribe();
    assert.deepEqual(addrs, ['127.20.0.2:8080', '127.20.0.3:8080']);
  });

  it('recreatePod copies the namespace annotations anew; other pods keep theirs', async () => {
    writeFileSync(join(manifests, 'ns.yaml'), ns('deny'));
    const policyOf = (name: string) => ctl.index.pod('app', name)?.defaultPolicy;
    // Existing pods were created before the annotation: they keep the cluster default.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(policyOf('web-0'), undefined);
    assert.equal(ctl.recreatePod('app', 'web-0'), true);
    assert.equal(policyOf('web-0'), 'deny');
    assert.equal(policyOf('web-1'), undefined);
    assert.equal(ctl.recreatePod('app', 'nope'), false);
    // The address stays: the allocator answers for the recreated pod (once more) and it is reused.
    await waitFor('the recreated pod indexed', () => ctl.index.pod('app', 'web-0')?.pod.status?.podIP);
    assert.equal(asked.at(-1), 'app/web-0');
  });
});

describe('controller hook replacePodAddresses (ward up)', () => {
  it("asks for every pod's address, replacing a manifest's status.podIP", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ward-local-hooks-replace-'));
    const manifests = join(dir, 'manifests');
    mkdirSync(manifests);
    writeFileSync(join(manifests, 'ns.yaml'), ns(undefined));
    writeFileSync(join(manifests, 'pods.yaml'), PODS);
    assert.ok((await initIdentity({ outDir: join(dir, 'identity') })).ok);
    const asked: string[] = [];
    const ctl = await startController({
      manifestsDir: manifests,
      identityDir: join(dir, 'identity'),
      cluster: clusterConfig({}),
      listen: LISTEN,
      grpcPlaintext: true,
      podAddress: (namespace, name) => {
        asked.push(`${namespace}/${name}`);
        return `127.20.0.${asked.length}`;
      },
      replacePodAddresses: true,
    });
    try {
      assert.deepEqual(asked, ['app/api', 'app/fixed', 'app/web-0', 'app/web-1']);
      const ips = Object.fromEntries(ctl.index.pods().map((p) => [p.name, p.pod.status?.podIP]));
      assert.deepEqual(ips, { api: '127.20.0.1', fixed: '127.20.0.2', 'web-0': '127.20.0.3', 'web-1': '127.20.0.4' });
    } finally {
      await ctl.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
