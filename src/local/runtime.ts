/**
 * `ward up DIR`: a whole mesh on one machine. The controller runs in this process on DIR (the
 * directory source, live edits included), with the pod range as the cluster networks; every pod
 * of DIR runs as local processes on its own loopback address (see `addresses.ts`), meshed pods
 * behind their own `ward proxy`. The runtime follows DIR: new pods start, removed pods stop, a pod
 * whose containers changed is restarted; a workload whose template changed rolls to new pods
 * (named after the template, as in a cluster); `ward restart NS/POD` recreates a pod (namespace
 * annotations are copied again, as at pod creation). Like a kubelet, the runtime tells the
 * controller which pods run and which are ready: Destination answers with ready pods only.
 *
 * Local mode does not isolate processes from each other: every pod shares the host's loopback,
 * so an application can reach another pod's private address, or call out without its proxy.
 * Policy holds for traffic that goes through the proxies (the transparent network-namespace mode
 * will close that gap).
 */
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';
import { IDENTITY_FILES } from '../controller/index.js';
import { AddressAllocator, FIRST_POD_ADDRESS } from './addresses.js';
import { type LocalApiHandlers, type LocalApiServer, startLocalApi } from './api-server.js';
import { type LocalController, startLocalController } from './mesh-controller.js';
import { MeshPods, type MeshPodsOptions } from './mesh-pods.js';
import { claimStateDir, type MeshIdentity, prepareIdentity } from './mesh-preflight.js';
import { MeshSummary } from './mesh-summary.js';
import type { LocalMesh, LocalMeshOptions } from './mesh-types.js';
import { removeMeshState, writeMeshState } from './state.js';

export type { LocalEvent, LocalMesh, LocalMeshOptions, LocalStatus, SummaryRow } from './mesh-types.js';

/**
 * Starts a local mesh. Throws `MeshError`: `ERR_LOCAL_RUNNING` (a mesh runs from this state
 * directory already), `ERR_LOCAL_ADDRESS` (loopback aliases missing), `ERR_IDENTITY`,
 * `ERR_LISTEN` (a controller port is taken), `ERR_SOURCE_DIR`.
 */
export async function startLocalMesh(opts: LocalMeshOptions): Promise<LocalMesh> {
  const dir = resolve(opts.dir);
  const stateDir = resolve(opts.stateDir);
  const emit = opts.onEvent;
  const firstPodAddress = opts.firstPodAddress ?? FIRST_POD_ADDRESS;
  const allocator = new AddressAllocator(firstPodAddress);

  await claimStateDir(stateDir, firstPodAddress, emit);
  const identity = await prepareIdentity(stateDir, opts.cluster.trustDomain, emit);
  const control = await startLocalController(opts, { dir, stateDir, identityDir: identity.dir, allocator });
  const pods = new MeshPods({
    dir,
    controller: control.controller,
    cluster: control.cluster,
    allocator,
    shared: sharedPodDeps(opts, stateDir, identity, control),
    emit,
    onPodReady: () => summary.maybeEmit(),
  });
  const summary = new MeshSummary(pods, emit, control.url);

  let timer: NodeJS.Timeout | undefined;
  const killNow = () => {
    pods.halt();
    clearInterval(timer);
    pods.killAll();
    removeMeshState(stateDir);
  };
  // Whatever ends this process, no pod outlives it: registered before any pod starts.
  process.once('exit', killNow);

  const token = randomBytes(32).toString('base64url');
  let api: LocalApiServer | undefined;
  let apiUrl = '';
  try {
    api = await startLocalApi(apiHandlers(pods), { token });
    apiUrl = `http://127.0.0.1:${api.port}`;
    writeMeshState(stateDir, { pid: process.pid, dir, stateDir, controller: control.url, api: apiUrl, token, started: new Date().toISOString() });
    await pods.reconcile();
    control.reportManifestChanges();
    summary.initialReconcileDone(apiUrl, pods.size === 0);
  } catch (e) {
    // Nothing of this mesh outlives a failed start: its pods, the API, the controller, mesh.json.
    killNow();
    process.off('exit', killNow);
    await pods.closeLogs();
    await api?.close();
    await control.close();
    throw e;
  }
  const runningApi = api;
  // Pods that never get ready (unauthorized probes, crashing apps) must not hold the summary back for long.
  const summaryTimer = setTimeout(() => summary.maybeEmit(true), 20_000);
  summaryTimer.unref();
  timer = setInterval(() => void pods.reconcile(), opts.reconcileIntervalMs ?? 1000);
  timer.unref();

  let stopping: Promise<void> | undefined;
  return {
    controllerUrl: control.url,
    apiUrl,
    status: () => pods.status(),
    killNow,
    stop: () => {
      stopping ??= (async () => {
        pods.halt();
        clearInterval(timer);
        clearTimeout(summaryTimer);
        emit({ kind: 'stopping' });
        await pods.stopAll();
        await runningApi.close();
        await control.close();
        removeMeshState(stateDir);
        process.off('exit', killNow);
      })();
      return stopping;
    },
  };
}

/** What every pod of the mesh is started with. */
function sharedPodDeps(opts: LocalMeshOptions, stateDir: string, identity: MeshIdentity, control: LocalController): MeshPodsOptions['shared'] {
  const restartBackoffMs = opts.restartBackoffMs ?? 10_000;
  return {
    stateDir,
    wardArgv: opts.wardArgv,
    controller: control.apis,
    trustAnchorsFile: join(identity.dir, IDENTITY_FILES.anchorCert),
    tokenKeyPem: identity.tokenKeyPem,
    trustDomain: control.cluster.trustDomain,
    controlPlaneNamespace: control.cluster.controlPlaneNamespace,
    clusterDomain: opts.clusterDomain ?? 'cluster.local',
    inheritedEnv: { ...(opts.env ?? process.env) },
    probePeriodScale: opts.probePeriodScale ?? 1,
    restartBackoff: { minMs: restartBackoffMs, maxMs: restartBackoffMs * 30 },
    graceMs: opts.graceMs ?? 3000,
  };
}

/** The local API (`ward status`, `ward logs`, `ward restart`) on the mesh's pods. */
function apiHandlers(pods: MeshPods): LocalApiHandlers {
  return {
    status: () => pods.status(),
    logs: (namespace, name, container) => pods.logs(namespace, name, container),
    restart: (namespace, name) => pods.restart(namespace, name),
  };
}
