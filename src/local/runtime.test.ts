/**
 * `startLocalMesh` in process, on loopback: a pod exported with a `status.podIP` (kubectl get -o
 * yaml), a pod that cannot start beside pods that run, an unmeshed pod ready at once (the
 * summary), a host with a proxy configured, `ward logs -f` across `ward restart`, and a start
 * that fails after pods started.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { ClusterConfig } from '../controller/index.js';
import { type Network, parseCidr } from '../core/index.js';
import { type LocalEvent, type LocalMesh, startLocalMesh } from './runtime.js';
import { MESH_MARKER_ENV, readMeshState } from './state.js';

const WARD = fileURLToPath(new URL('../../bin/ward.js', import.meta.url));
const ALL = parseCidr('0.0.0.0/0') as Network['net'];
const CLUSTER: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [],
  probeNetworks: [{ net: ALL, except: [] }],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};
const ANY_PORT = { host: '127.0.0.1', port: 0 };
const LISTEN = { policy: ANY_PORT, identity: ANY_PORT, destination: ANY_PORT, admin: ANY_PORT };
/** A proxy no one listens on: a process that uses it reaches nothing. */
const DEAD_PROXY = 'http://127.0.0.1:9';

const PODS = `apiVersion: v1
kind: Namespace
metadata: {name: demo, annotations: {linkerd.io/inject: enabled}}
---
apiVersion: v1
kind: Pod
metadata: {name: aaa, namespace: demo, annotations: {linkerd.io/inject: disabled}}
spec:
  containers:
  - name: main
    command: [node, -e, "console.log('started ' + process.pid); setInterval(() => {}, 1000)"]
---
apiVersion: v1
kind: Pod
metadata: {name: broken, namespace: demo, annotations: {linkerd.io/inject: disabled}}
spec:
  containers:
  - name: main
    command: [node, -e, "setInterval(() => {}, 1000)"]
---
apiVersion: v1
kind: Pod
metadata: {name: exported, namespace: demo}
spec:
  containers:
  - name: web
    command: [node, -e, "require('node:http').createServer((q, r) => r.end('ok')).listen(8080, process.env.WARD_APP_HOST)"]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1}
status: {podIP: 10.1.2.3, hostIP: 10.0.0.1}
`;

async function until<T>(what: string, check: () => T | undefined | Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The environment of a process, as a map. */
function environ(pid: number): Map<string, string> {
  const out = new Map<string, string>();
  for (const kv of readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')) {
    const i = kv.indexOf('=');
    if (i > 0) out.set(kv.slice(0, i), kv.slice(i + 1));
  }
  return out;
}

/** Pids of processes marked as the mesh of `state`. */
function markedProcesses(state: string): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      if (environ(Number(p)).get(MESH_MARKER_ENV) === state && !readFileSync(`/proc/${p}/stat`, 'utf8').includes(') Z')) out.push(Number(p));
    } catch {
      // gone, or not ours
    }
  }
  return out;
}

function hostEnv(): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  return env;
}

describe('startLocalMesh', { skip: process.platform !== 'linux' && 'needs the 127.0.0.0/8 loopback and /proc', timeout: 120_000 }, () => {
  let work: string;
  let state: string;
  let mesh: LocalMesh | undefined;
  const events: LocalEvent[] = [];

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'ward-runtime-'));
    state = join(work, 'state');
    mkdirSync(join(work, 'mesh'));
    writeFileSync(join(work, 'mesh', 'pods.yaml'), PODS);
    // demo/broken cannot start: its log directory cannot be created.
    mkdirSync(join(state, 'pods', 'demo'), { recursive: true });
    writeFileSync(join(state, 'pods', 'demo', 'broken'), 'not a directory');
    mesh = await startLocalMesh({
      dir: join(work, 'mesh'),
      stateDir: state,
      cluster: CLUSTER,
      listen: LISTEN,
      firstPodAddress: '127.20.210.1',
      probePeriodScale: 0.3,
      restartBackoffMs: 200,
      graceMs: 500,
      wardArgv: [process.execPath, WARD],
      // A host with a corporate proxy configured: the proxies must still reach the controller.
      env: { ...hostEnv(), http_proxy: DEAD_PROXY, HTTPS_PROXY: DEAD_PROXY, grpc_proxy: DEAD_PROXY, ALL_PROXY: DEAD_PROXY },
      onEvent: (e) => events.push(e),
    });
  });

  after(async () => {
    await mesh?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  it('gives a pod exported with a status.podIP a local address, and runs the others beside a pod that cannot start', async () => {
    const pods = mesh?.status().pods ?? [];
    assert.deepEqual(
      pods.map((p) => [p.name, p.ip, p.phase === 'Failed' ? 'Failed' : 'ok']),
      [
        ['aaa', '127.20.210.1', 'ok'],
        ['broken', '127.20.210.2', 'Failed'],
        ['exported', '127.20.210.3', 'ok'],
      ],
    );
    assert.match(pods[1]?.message ?? '', /^cannot start: /);
    // The controller (policy, Destination) knows the pod at its local address too.
    const view = (await (await fetch(`${mesh?.controllerUrl}/api/v1/pods?namespace=demo`)).json()) as { pods: { name: string; podIP: string | null }[] };
    assert.equal(view.pods.find((p) => p.name === 'exported')?.podIP, '127.20.210.3');
    const invalid = events.find((e) => e.kind === 'pod-invalid');
    assert.deepEqual(invalid?.kind === 'pod-invalid' && invalid.pod, 'demo/broken');
  });

  it('prints the summary once every pod is ready, counting them all (an unmeshed pod is ready as soon as it starts)', async () => {
    const summary = await until('the summary', () => events.find((e) => e.kind === 'summary'), 40_000);
    assert.ok(summary.kind === 'summary');
    assert.deepEqual(
      summary.rows.map((r) => [r.name, r.ready]),
      [
        ['aaa', true],
        ['broken', false],
        ['exported', true],
      ],
      'the meshed pod became ready: its proxy reached the controller although the host has a proxy configured',
    );
  });

  it("keeps the host's proxy settings out of the proxies' environment, and marks every process as this mesh's", () => {
    const exported = mesh?.status().pods.find((p) => p.name === 'exported');
    const proxyPid = exported?.proxy?.pid as number;
    const appPid = exported?.containers[0]?.pid as number;
    const proxyEnv = environ(proxyPid);
    for (const k of ['http_proxy', 'HTTPS_PROXY', 'grpc_proxy', 'ALL_PROXY']) assert.equal(proxyEnv.get(k), undefined, k);
    assert.equal(proxyEnv.get(MESH_MARKER_ENV), state);
    assert.equal(environ(appPid).get(MESH_MARKER_ENV), state);
    // The process groups are recorded for a later ward up (pids are their groups' ids).
    const pgids = readFileSync(join(state, 'pods', 'demo', 'exported', 'pgids'), 'utf8')
      .trim()
      .split('\n')
      .map(Number)
      .sort();
    assert.deepEqual(pgids, [proxyPid, appPid].sort());
  });

  it('ward logs -f goes on with the recreated pod after ward restart', async () => {
    const meshJson = readMeshState(state);
    assert.ok(meshJson !== undefined && meshJson.token.length >= 43);
    const auth = { authorization: `Bearer ${meshJson.token}` };
    const before = mesh?.status().pods.find((p) => p.name === 'aaa')?.containers[0]?.pid;
    const res = await fetch(`${meshJson.api}/api/v1/local/logs/demo/aaa?follow=1`, { headers: auth });
    assert.equal(res.status, 200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = '';
    const readUntil = async (re: RegExp) => {
      while (!re.test(text)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the stream ended: ${text}`);
        text += decoder.decode(value, { stream: true });
      }
    };
    await readUntil(new RegExp(`^started ${before}\\n`, 'm'));
    const r = await fetch(`${meshJson.api}/api/v1/local/restart/demo/aaa`, { method: 'POST', headers: auth });
    assert.equal(r.status, 200);
    const after = await until('aaa running again', () => {
      const pid = mesh?.status().pods.find((p) => p.name === 'aaa')?.containers[0]?.pid;
      return pid !== undefined && pid !== before ? pid : undefined;
    });
    await readUntil(new RegExp(`--- pod recreated ---\\nstarted ${after}\\n`));
    await reader.cancel();
    assert.equal((await fetch(`${meshJson.api}/api/v1/local/status`)).status, 401, 'the API wants the token');
  });

  it('stops every process of the mesh', async () => {
    await mesh?.stop();
    mesh = undefined;
    await until('no process of the mesh left', () => (markedProcesses(state).length === 0 ? true : undefined), 5000);
    assert.equal(readMeshState(state), undefined);
  });
});

describe('startLocalMesh failing after pods started', { skip: process.platform !== 'linux' && 'needs /proc' }, () => {
  it('leaves nothing behind: no pod, no API, no controller, no mesh.json', async () => {
    const work = mkdtempSync(join(tmpdir(), 'ward-runtime-fail-'));
    const state = join(work, 'state');
    try {
      mkdirSync(join(work, 'mesh'));
      writeFileSync(
        join(work, 'mesh', 'pod.yaml'),
        `apiVersion: v1
kind: Pod
metadata: {name: lone, namespace: default}
spec:
  containers: [{name: main, command: [node, -e, "setInterval(() => {}, 1000)"]}]
`,
      );
      const exitListeners = process.listenerCount('exit');
      let guardedBeforeStart = false;
      let adminUrl = '';
      let apiUrl = '';
      await assert.rejects(
        startLocalMesh({
          dir: join(work, 'mesh'),
          stateDir: state,
          cluster: CLUSTER,
          listen: LISTEN,
          firstPodAddress: '127.20.211.1',
          graceMs: 500,
          wardArgv: [process.execPath, WARD],
          env: hostEnv(),
          onEvent: (e) => {
            if (e.kind === 'controller') adminUrl = e.adminUrl;
            // The kill at exit is in place before any pod starts.
            if (e.kind === 'pod-started') guardedBeforeStart = process.listenerCount('exit') > exitListeners;
            if (e.kind === 'summary') {
              apiUrl = e.api;
              throw new Error('the console is gone');
            }
          },
        }),
        /the console is gone/,
      );
      assert.equal(guardedBeforeStart, true);
      assert.equal(process.listenerCount('exit'), exitListeners);
      assert.equal(readMeshState(state), undefined);
      await until('the pod gone', () => (markedProcesses(state).length === 0 ? true : undefined), 5000);
      await assert.rejects(fetch(`${apiUrl}/api/v1/local/status`), /fetch failed/);
      await assert.rejects(fetch(`${adminUrl}/`), /fetch failed/);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});
