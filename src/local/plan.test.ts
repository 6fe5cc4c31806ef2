import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { ContainerSpec, Pod } from '../controller/index.js';
import { checkLocalPods, declaredPorts, planPod } from './plan.js';

const dir = mkdtempSync(join(tmpdir(), 'ward-plan-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A pod from a Deployment template (positions are reported as `line = path length`). */
function mkPod(containers: ContainerSpec[], extra: Partial<Pod['spec']> = {}): Pod {
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: { namespace: 'demo', name: 'web-0', labels: {}, annotations: {} },
    spec: { serviceAccountName: 'web', containers: [...containers, { name: 'linkerd-proxy', ports: [{ containerPort: 4191 }] }], ...extra },
    origin: { source: { file: 'app.yaml', line: 1, col: 1 }, positionOf: (path) => ({ file: 'app.yaml', line: path.length, col: Number(path[2] ?? 0) + 1 }) },
  };
}

describe('checkLocalPods', () => {
  it('reports containers without a command, unknown env sources, proxy ports and missing working directories, positioned', () => {
    const pod = mkPod([
      { name: 'web', image: 'web:1', ports: [{ containerPort: 4143 }, { containerPort: 8080 }] },
      {
        name: 'side',
        command: ['x'],
        workingDir: 'nope',
        env: [
          { name: 'S', valueFrom: {} },
          { name: 'IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
        ],
      },
    ]);
    const ds = checkLocalPods([pod], () => true, { dir });
    assert.deepEqual(
      ds.map((d) => [d.code, d.severity, d.message, d.source?.line, d.path?.join('.')]),
      [
        ['LOC001', 'error', 'container web of pod demo/web-0 has no command', 3, 'spec.containers.0'],
        ['LOC003', 'error', 'container web of pod demo/web-0 declares port 4143, which its local proxy uses', 6, 'spec.containers.0.ports.0.containerPort'],
        ['LOC004', 'error', `workingDir of container side in pod demo/web-0 is not a directory: ${join(dir, 'nope')}`, 4, 'spec.containers.1.workingDir'],
        [
          'LOC002',
          'warning',
          'env S of container side in pod demo/web-0: valueFrom other than fieldRef; local mode leaves it unset',
          6,
          'spec.containers.1.env.0.valueFrom',
        ],
      ],
    );
    assert.equal(ds[0]?.hint, "local mode runs a container's command/args; image is ignored");
    assert.deepEqual(
      checkLocalPods([pod], () => false, { dir }).map((d) => d.code),
      ['LOC001', 'LOC004', 'LOC002'],
      'unmeshed pods have no proxy ports',
    );
  });
});

describe('LOC005', () => {
  it('reports a probe that names a port its container does not declare, positioned; numbers and declared names pass', () => {
    const pod = mkPod([
      {
        name: 'web',
        command: ['web'],
        ports: [{ name: 'http', containerPort: 8080 }],
        readinessProbe: { httpGet: { path: '/ready', port: 'HTTP' } },
        livenessProbe: { httpGet: { path: '/live', port: 'admin' } },
        startupProbe: { tcpSocket: { port: 'grpc' } },
      },
      { name: 'side', command: ['side'], livenessProbe: { tcpSocket: { port: 9000 } }, readinessProbe: { tcpSocket: { port: '9001' } } },
    ]);
    const ds = checkLocalPods([pod], () => false, { dir });
    assert.deepEqual(
      ds.map((d) => [d.code, d.severity, d.message, d.path?.join('.')]),
      [
        [
          'LOC005',
          'error',
          'liveness probe of container web in pod demo/web-0 names port admin, which the container does not declare',
          'spec.containers.0.livenessProbe.httpGet.port',
        ],
        [
          'LOC005',
          'error',
          'startup probe of container web in pod demo/web-0 names port grpc, which the container does not declare',
          'spec.containers.0.startupProbe.tcpSocket.port',
        ],
      ],
    );
    assert.equal(ds[0]?.source?.file, 'app.yaml');
    // planPod refuses such a pod (a live edit that adds one does not start it).
    const r = planPod(pod, '127.20.0.9', false, { dir, inheritedEnv: {} });
    assert.equal(r.ok, false);
  });
});

describe('planPod', () => {
  it('plans the containers (not the injected proxy) with their env, argv and working directory', () => {
    const pod = mkPod(
      [
        {
          name: 'web',
          command: ['node', 'web.mjs'],
          args: ['$(POD_IP)'],
          ports: [
            { name: 'http', containerPort: 8080 },
            { containerPort: 53, protocol: 'UDP' },
          ],
        },
      ],
      { initContainers: [{ name: 'init', command: ['true'], workingDir: '.' }], restartPolicy: 'OnFailure' },
    );
    const r = planPod(pod, '127.20.0.9', true, { dir, inheritedEnv: { PATH: '/bin' } });
    assert.ok(r.ok);
    const plan = r.plan;
    assert.deepEqual([plan.ip, plan.appHost, plan.meshed, plan.serviceAccount, plan.restartPolicy], ['127.20.0.9', '127.21.0.9', true, 'web', 'OnFailure']);
    assert.deepEqual(plan.ports, [8080]);
    assert.deepEqual(
      plan.containers.map((c) => [c.name, c.argv, c.cwd, c.env.WARD_APP_HOST, c.env.PATH]),
      [['web', ['node', 'web.mjs', '127.20.0.9'], dir, '127.21.0.9', '/bin']],
    );
    assert.deepEqual(
      plan.initContainers.map((c) => [c.name, c.cwd]),
      [['init', dir]],
    );
    assert.deepEqual(declaredPorts(pod), [8080]);
  });

  it('refuses a pod local mode cannot run', () => {
    const r = planPod(mkPod([{ name: 'web' }]), '127.20.0.9', false, { dir, inheritedEnv: {} });
    assert.deepEqual(r, { ok: false, problems: ['container web of pod demo/web-0 has no command'] });
  });
});
