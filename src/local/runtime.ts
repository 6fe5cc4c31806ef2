/**
 * `ward up DIR`: a whole mesh on one machine. The controller runs in this process on DIR (the
 * directory source, live edits included), with the pod range as the cluster networks; every pod
 * of DIR runs as local processes on its own loopback address (see `addresses.ts`), meshed pods
 * behind their own `ward proxy`. The runtime follows DIR: new pods start, removed pods stop, a pod
 * whose containers changed is restarted; `ward restart NS/POD` recreates a pod (namespace
 * annotations are copied again, as at pod creation).
 *
 * Local mode does not isolate processes from each other: every pod shares the host's loopback,
 * so an application can reach another pod's private address, or call out without its proxy.
 * Policy holds for traffic that goes through the proxies (the transparent network-namespace mode
 * will close that gap).
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { connect as netConnect, createServer as netCreateServer } from 'node:net';
import { join, resolve } from 'node:path';
import {
  type ClusterConfig,
  type ControllerListen,
  DEFAULT_LISTEN,
  IDENTITY_FILES,
  initIdentity,
  type Pod,
  type RunningController,
  startController,
} from '../controller/index.js';
import { type Network, parseCidr, serviceAccountIdentity } from '../core/index.js';
import { createLogger, errorMessage, MeshError } from '../shared/index.js';
import { AddressAllocator, FIRST_POD_ADDRESS, NODE_ADDRESS, POD_RANGE } from './addresses.js';
import { type LocalApiServer, type LogSource, startLocalApi } from './api-server.js';
import { type Denial, DenialLog } from './denials.js';
import { type PodPlan, planPod } from './plan.js';
import { LocalPod, type PodDeps, type PodStatus } from './pod.js';
import { killSurvivors, type MeshState, meshAnswers, readMeshState, removeMeshState, writeMeshState } from './state.js';
import { LogFile } from './supervisor.js';

/** What `ward status -o json` prints. */
export interface LocalStatus {
  readonly pods: readonly PodStatus[];
  readonly denials: readonly Denial[];
}

/** A row of the summary printed once the mesh is up. */
export interface SummaryRow {
  readonly namespace: string;
  readonly name: string;
  readonly ip: string;
  readonly ready: boolean;
  readonly meshed: boolean;
  /** `http://IP:PORT` of the pod's HTTP ports. */
  readonly urls: readonly string[];
}

/** What happens, for the console of `ward up` (the CLI renders it). */
export type LocalEvent =
  | { readonly kind: 'identity'; readonly dir: string; readonly created: boolean }
  | { readonly kind: 'controller'; readonly adminUrl: string; readonly ports: RunningController['ports'] }
  | { readonly kind: 'pod-started'; readonly pod: string; readonly ip: string; readonly meshed: boolean }
  | { readonly kind: 'pod-ready'; readonly pod: string; readonly ready: boolean }
  | { readonly kind: 'pod-stopped'; readonly pod: string; readonly why: string }
  | { readonly kind: 'pod-invalid'; readonly pod: string; readonly problems: readonly string[] }
  | { readonly kind: 'report'; readonly text: string }
  | { readonly kind: 'manifests'; readonly applied: number; readonly deleted: number }
  | { readonly kind: 'controller-log'; readonly level: 'warn' | 'error'; readonly text: string }
  | { readonly kind: 'summary'; readonly rows: readonly SummaryRow[]; readonly api: string; readonly controller: string }
  | { readonly kind: 'stopping' };

/** Settings of {@link startLocalMesh}. */
export interface LocalMeshOptions {
  /** The manifests directory. */
  readonly dir: string;
  readonly stateDir: string;
  /** Cluster settings; the cluster networks are replaced by the pod range. */
  readonly cluster: ClusterConfig;
  readonly clusterDomain?: string;
  /** The controller's listeners (default: upstream's ports on 127.0.0.1). */
  readonly listen?: Partial<ControllerListen>;
  /** The first pod address (default 127.20.0.1; tests use another to run beside a mesh). */
  readonly firstPodAddress?: string;
  /** Multiplies probes' initial delays and periods (tests; default 1). */
  readonly probePeriodScale?: number;
  /** Restart delay after the first, immediate restart (default 10 s; doubles to 30× that). */
  readonly restartBackoffMs?: number;
  /** Time between SIGTERM and SIGKILL when stopping (default 3 s). */
  readonly graceMs?: number;
  /** The command that runs `ward` (for the proxies). */
  readonly wardArgv: readonly string[];
  /** The environment pods inherit (default this process's). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly onEvent: (e: LocalEvent) => void;
  /** How often the pod set is compared with DIR's (default 1 s). */
  readonly reconcileIntervalMs?: number;
}

/** A running local mesh. */
export interface LocalMesh {
  readonly controllerUrl: string;
  readonly apiUrl: string;
  status(): LocalStatus;
  /** Stops every pod (SIGTERM, SIGKILL after the grace period), the controller and the API; removes mesh.json. */
  stop(): Promise<void>;
  /** SIGKILLs every process at once and removes mesh.json (a second Ctrl-C, or exit). */
  killNow(): void;
}

interface PodEntry {
  readonly key: string;
  readonly fingerprint: string;
  readonly pod: LocalPod | undefined;
  /** Set when the pod cannot run (plan problems). */
  readonly problems?: readonly string[];
  readonly ip: string;
  readonly meshed: boolean;
  /** The workload the pod comes from (`Deployment/web`), if any. */
  readonly owner: string | undefined;
}

const HTTP_PORT_NAME = /^(http|web)/i;

/** The pod's ports that speak HTTP, as far as names and probes tell. */
function httpPorts(plan: PodPlan): number[] {
  const out = new Set<number>();
  for (const c of plan.containers) {
    for (const p of c.spec.ports ?? []) if (p.name !== undefined && HTTP_PORT_NAME.test(p.name)) out.add(p.containerPort);
    for (const probe of [c.spec.readinessProbe, c.spec.livenessProbe, c.spec.startupProbe]) {
      const port = probe?.httpGet?.port;
      if (typeof port === 'number') out.add(port);
      else if (port !== undefined) {
        const named = (c.spec.ports ?? []).find((p) => p.name?.toLowerCase() === port.toLowerCase());
        if (named !== undefined) out.add(named.containerPort);
      }
    }
  }
  return [...out].filter((p) => plan.ports.includes(p)).sort((a, b) => a - b);
}

/** A dialable host for a listen host (a wildcard listener is reached on loopback). */
function dialHost(host: string): string {
  return host === '0.0.0.0' || host === '::' || host === '' ? '127.0.0.1' : host;
}

/** Checks that loopback addresses beyond 127.0.0.1 work (they need aliases on macOS). */
async function checkLoopback(podIp: string): Promise<void> {
  const server = netCreateServer((s) => s.destroy());
  try {
    await new Promise<void>((ok, fail) => {
      server.once('error', fail);
      server.listen(0, podIp, () => ok());
    });
    const port = (server.address() as { port: number }).port;
    await new Promise<void>((ok, fail) => {
      const s = netConnect({ host: podIp, port, localAddress: NODE_ADDRESS });
      s.once('connect', () => {
        s.destroy();
        ok();
      });
      s.once('error', fail);
    });
  } catch (e) {
    throw new MeshError(
      'ERR_LOCAL_ADDRESS',
      `cannot use the loopback addresses ${podIp} and ${NODE_ADDRESS}: ${errorMessage(e)}\n  hint: local mode gives every pod its own 127.x address; on macOS add them first, e.g. \`sudo ifconfig lo0 alias ${podIp} up\` and \`sudo ifconfig lo0 alias ${NODE_ADDRESS} up\``,
      { cause: e },
    );
  } finally {
    server.close();
  }
}

/** The identity directory of the state dir: created with a fresh trust anchor on first use, reused after. */
async function ensureIdentity(dir: string, trustDomain: string): Promise<boolean> {
  const files = [IDENTITY_FILES.anchorCert, IDENTITY_FILES.issuerCert, IDENTITY_FILES.issuerKey, IDENTITY_FILES.tokenKey];
  if (files.every((f) => existsSync(join(dir, f)))) return false;
  const r = await initIdentity({ outDir: dir, trustDomain });
  if (!r.ok) {
    throw new MeshError(
      'ERR_IDENTITY',
      `cannot create the identity directory ${dir}:\n${r.diagnostics.map((d) => `  ${d.code} ${d.message}`).join('\n')}\n  hint: remove ${dir} to start over with a new trust anchor`,
    );
  }
  return true;
}

/**
 * Starts a local mesh. Throws `MeshError`: `ERR_LOCAL_RUNNING` (a mesh runs from this state
 * directory already), `ERR_LOCAL_ADDRESS` (loopback aliases missing), `ERR_IDENTITY`,
 * `ERR_LISTEN` (a controller port is taken), `ERR_SOURCE_DIR`.
 */
export async function startLocalMesh(opts: LocalMeshOptions): Promise<LocalMesh> {
  const dir = resolve(opts.dir);
  const stateDir = resolve(opts.stateDir);
  const emit = opts.onEvent;
  const env = opts.env ?? process.env;
  const graceMs = opts.graceMs ?? 3000;
  const firstPodAddress = opts.firstPodAddress ?? FIRST_POD_ADDRESS;
  const allocator = new AddressAllocator(firstPodAddress);

  const running = readMeshState(stateDir);
  if (running !== undefined && running.pid !== process.pid && (await meshAnswers(running))) {
    throw new MeshError(
      'ERR_LOCAL_RUNNING',
      `a local mesh is already running from ${stateDir} (pid ${running.pid}, ${running.dir})\n  hint: stop it first (Ctrl-C in its terminal), or give another --state-dir`,
    );
  }
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  try {
    // It holds the identity keys and, in mesh.json, the local API's token.
    chmodSync(stateDir, 0o700);
  } catch {
    // not ours to change: mesh.json and the keys are private files all the same
  }
  // A ward up that could not clean up (SIGKILL) may have left pods running.
  const survivors = killSurvivors(stateDir);
  if (survivors.length > 0)
    emit({
      kind: 'report',
      text: `killed ${survivors.length} process groups left running by an earlier ward up from ${stateDir} (${survivors.join(', ')})`,
    });
  await checkLoopback(firstPodAddress);

  const identityDir = join(stateDir, 'identity');
  const created = await ensureIdentity(identityDir, opts.cluster.trustDomain);
  emit({ kind: 'identity', dir: identityDir, created });
  const tokenKeyPem = readFileSync(join(identityDir, IDENTITY_FILES.tokenKey), 'utf8');

  // === the controller, in this process ===
  const controllerLog = new LogFile(join(stateDir, 'controller.log'), true);
  let started = false;
  const logger = createLogger({
    name: 'controller',
    level: 'info',
    destination: {
      write(line: string) {
        controllerLog.write(line.replace(/\n$/, ''));
        consoleFromControllerLog(line);
      },
    },
  });
  function consoleFromControllerLog(line: string): void {
    let o: { level?: number; msg?: string; applied?: number; deleted?: number; diagnostics?: unknown; file?: string; err?: unknown };
    try {
      o = JSON.parse(line) as typeof o;
    } catch {
      return;
    }
    if (o.msg === 'manifests applied' && started) {
      emit({ kind: 'manifests', applied: o.applied ?? 0, deleted: o.deleted ?? 0 });
      return;
    }
    if ((o.level ?? 0) < 40) return;
    const details = Array.isArray(o.diagnostics) ? o.diagnostics.filter((d): d is string => typeof d === 'string') : [];
    const err = typeof o.err === 'string' ? `: ${o.err}` : '';
    const file = typeof o.file === 'string' && details.length === 0 ? ` (${o.file})` : '';
    emit({
      kind: 'controller-log',
      level: (o.level ?? 0) >= 50 ? 'error' : 'warn',
      text: [`${o.msg ?? ''}${err}${file}`, ...details.map((d) => `  ${d}`)].join('\n'),
    });
  }
  const podNet = parseCidr(POD_RANGE) as Network['net'];
  const cluster: ClusterConfig = { ...opts.cluster, clusterNetworks: [{ net: podNet, except: [] }], localhostIsPodAddress: true };
  const listen: ControllerListen = { ...DEFAULT_LISTEN, ...opts.listen };
  let controller: RunningController;
  try {
    controller = await startController({
      manifestsDir: dir,
      identityDir,
      cluster,
      ...(opts.clusterDomain !== undefined ? { clusterDomain: opts.clusterDomain } : {}),
      listen,
      logger,
      // Every pod gets a local address, whatever status.podIP its manifest carries (kubectl get -o yaml writes one).
      podAddress: (namespace, name) => allocator.addressOf(namespace, name),
      replacePodAddresses: true,
    });
  } catch (e) {
    logger.flush();
    await controllerLog.close();
    throw e;
  }
  const cp = controller.ports;
  const dial = (a: { host: string }, port: number) => `${dialHost(a.host)}:${port}`;
  const controllerUrl = `http://${dial(listen.admin, cp.admin)}`;
  emit({ kind: 'controller', adminUrl: controllerUrl, ports: cp });

  // === pods ===
  const denials = new DenialLog(100);
  const pods = new Map<string, PodEntry>();
  /** Pods started before in this run (their logs are appended to, not truncated). */
  const seen = new Set<string>();
  let stopped = false;
  /** Set once the initial reconcile is done: the summary waits for it. */
  let initialDone = false;
  let summaryDone = false;
  const inheritedEnv = { ...env };
  const deps = (key: string): PodDeps => ({
    stateDir,
    wardArgv: opts.wardArgv,
    controller: { identity: dial(listen.identity, cp.identity), policy: dial(listen.policy, cp.policy), destination: dial(listen.destination, cp.destination) },
    trustAnchorsFile: join(identityDir, IDENTITY_FILES.anchorCert),
    tokenKeyPem,
    trustDomain: cluster.trustDomain,
    controlPlaneNamespace: cluster.controlPlaneNamespace,
    clusterDomain: opts.clusterDomain ?? 'cluster.local',
    inheritedEnv,
    probePeriodScale: opts.probePeriodScale ?? 1,
    restartBackoff: { minMs: opts.restartBackoffMs ?? 10_000, maxMs: (opts.restartBackoffMs ?? 10_000) * 30 },
    graceMs,
    denials,
    report: (text) => emit({ kind: 'report', text }),
    onReadyChange: (pod, ready) => {
      emit({ kind: 'pod-ready', pod: pod.key, ready });
      if (ready) maybeSummary();
    },
    truncateLogs: !seen.has(key),
  });

  /** The pods DIR defines now, with whether they are meshed. */
  function desired(): Map<string, { pod: Pod; meshed: boolean }> {
    const out = new Map<string, { pod: Pod; meshed: boolean }>();
    for (const info of controller.index.pods()) out.set(`${info.namespace}/${info.name}`, { pod: info.pod, meshed: true });
    for (const pod of controller.index.unmeshedPods()) out.set(`${pod.metadata.namespace}/${pod.metadata.name}`, { pod, meshed: false });
    return new Map([...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }

  const fingerprintOf = (pod: Pod, meshed: boolean) => JSON.stringify([meshed, pod.spec]);

  /**
   * Starts a pod; `previous` is the pod it replaces (stopped already), whose log followers go on
   * with the new one. A pod that cannot start is reported (`pod-invalid`) and kept as failed: the
   * rest of the mesh runs on.
   */
  function startPod(key: string, pod: Pod, meshed: boolean, previous?: LocalPod): PodEntry {
    const fingerprint = fingerprintOf(pod, meshed);
    let ip = '';
    let local: LocalPod | undefined;
    const failed = (problems: string[]): PodEntry => {
      previous?.handOverLogs(undefined, 'pod cannot run');
      emit({ kind: 'pod-invalid', pod: key, problems });
      return { key, fingerprint, pod: undefined, problems, ip, meshed, owner: pod.owner };
    };
    try {
      // The controller asked the same allocator (any manifest status.podIP was replaced).
      ip = allocator.addressOf(pod.metadata.namespace, pod.metadata.name);
      const planned = planPod(pod, ip, meshed, { dir, inheritedEnv });
      if (!planned.ok) return failed(planned.problems);
      const identity = meshed ? serviceAccountIdentity(cluster, pod.metadata.namespace, planned.plan.serviceAccount) : null;
      local = new LocalPod(planned.plan, identity, deps(key));
      seen.add(key);
      // Before it starts, so that a follower misses none of its lines.
      previous?.handOverLogs(local, 'pod recreated');
      previous = undefined;
      local.start();
    } catch (e) {
      if (local !== undefined) {
        local.killNow();
        local.handOverLogs(undefined, 'pod cannot run');
        void local.appLog.close();
        void local.proxyLog?.close();
      }
      return failed([`cannot start: ${errorMessage(e)}`]);
    }
    emit({ kind: 'pod-started', pod: key, ip, meshed });
    return { key, fingerprint, pod: local, ip, meshed, owner: pod.owner };
  }

  /** Brings the running pods in line with DIR. */
  async function reconcile(): Promise<void> {
    if (stopped) return;
    const want = desired();
    const stops: Promise<void>[] = [];
    /** Stopped pods that start again (their definition changed), and pods that are gone. */
    const replaced = new Map<string, LocalPod>();
    const removed: LocalPod[] = [];
    for (const [key, entry] of pods) {
      const w = want.get(key);
      if (w !== undefined && fingerprintOf(w.pod, w.meshed) === entry.fingerprint) continue;
      pods.delete(key);
      if (entry.pod !== undefined) {
        emit({ kind: 'pod-stopped', pod: key, why: w === undefined ? 'removed from the manifests' : 'its definition changed; restarting it' });
        stops.push(entry.pod.stop());
        if (w === undefined) removed.push(entry.pod);
        else replaced.set(key, entry.pod);
      }
    }
    await Promise.all(stops);
    for (const p of removed) p.handOverLogs(undefined, 'pod removed from the manifests');
    if (stopped) {
      for (const p of replaced.values()) p.handOverLogs(undefined, 'ward up is stopping');
      return;
    }
    for (const [key, w] of want) if (!pods.has(key)) pods.set(key, startPod(key, w.pod, w.meshed, replaced.get(key)));
  }

  // Pod changes run one at a time: the periodic reconcile and `ward restart`.
  let queue: Promise<void> = Promise.resolve();
  const serial = <T>(fn: () => Promise<T>): Promise<T> => {
    const next = queue.then(fn);
    queue = next.then(
      () => undefined,
      (e: unknown) => emit({ kind: 'report', text: `internal error while updating pods: ${errorMessage(e)}` }),
    );
    return next;
  };

  function maybeSummary(force = false): void {
    // Pods become ready while the initial reconcile still starts others: count them all.
    if (summaryDone || stopped || !initialDone) return;
    const entries = [...pods.values()];
    if (!force && !entries.every((e) => e.pod === undefined || e.pod.ready)) return;
    summaryDone = true;
    emit({
      kind: 'summary',
      rows: entries.map((e) => ({
        namespace: e.key.split('/')[0] as string,
        name: e.key.split('/')[1] as string,
        ip: e.ip,
        ready: e.pod?.ready ?? false,
        meshed: e.meshed,
        urls: e.pod === undefined ? [] : httpPorts(e.pod.plan).map((p) => `http://${e.ip}:${p}`),
      })),
      api: apiUrl,
      controller: controllerUrl,
    });
  }

  function status(): LocalStatus {
    const list = [...pods.values()].sort((a, b) => (a.key < b.key ? -1 : 1));
    return {
      pods: list.map((e) => {
        if (e.pod !== undefined) return e.pod.status();
        const [namespace, name] = e.key.split('/') as [string, string];
        return {
          namespace,
          name,
          owner: e.owner ?? null,
          ip: e.ip,
          ready: false,
          restarts: 0,
          adminAddress: null,
          identity: null,
          meshed: e.meshed,
          phase: 'Failed',
          startedAt: '',
          containers: [],
          proxy: null,
          message: (e.problems ?? []).join('; '),
        } satisfies PodStatus;
      }),
      denials: denials.list(),
    };
  }

  function logs(namespace: string, name: string, container: string): LogSource | { notFound: string } {
    const e = pods.get(`${namespace}/${name}`);
    if (e === undefined) return { notFound: `no pod ${namespace}/${name} in this mesh` };
    if (e.pod === undefined) return { notFound: `pod ${namespace}/${name} did not start: ${(e.problems ?? []).join('; ')}` };
    const p = e.pod;
    if (container === 'proxy') {
      if (p.proxyLog === undefined) return { notFound: `pod ${namespace}/${name} is not meshed: it has no proxy` };
      return { file: p.proxyLog };
    }
    if (container === 'app') return { file: p.appLog };
    const names = p.containerNames();
    if (!names.includes(container))
      return { notFound: `pod ${namespace}/${name} has no container ${container} (containers: ${['app', 'proxy', ...names].join(', ')})` };
    if (names.length === 1) return { file: p.appLog };
    const prefix = `[${container}] `;
    return { file: p.appLog, filter: (l) => (l.startsWith(prefix) ? l.slice(prefix.length) : undefined) };
  }

  function restart(namespace: string, name: string): Promise<true | { notFound: string }> {
    return serial(async () => {
      const key = `${namespace}/${name}`;
      const entry = pods.get(key);
      if (entry === undefined || stopped) return { notFound: `no pod ${key} in this mesh` };
      controller.recreatePod(namespace, name);
      pods.delete(key);
      if (entry.pod !== undefined) {
        emit({ kind: 'pod-stopped', pod: key, why: 'restart requested' });
        await entry.pod.stop();
      }
      const w = desired().get(key);
      if (w !== undefined && !stopped) pods.set(key, startPod(key, w.pod, w.meshed, entry.pod));
      else entry.pod?.handOverLogs(undefined, stopped ? 'ward up is stopping' : 'pod removed from the manifests');
      return true as const;
    });
  }

  let timer: NodeJS.Timeout | undefined;
  const killNow = () => {
    stopped = true;
    clearInterval(timer);
    for (const e of pods.values()) e.pod?.killNow();
    removeMeshState(stateDir);
  };
  // Whatever ends this process, no pod outlives it: registered before any pod starts.
  process.once('exit', killNow);

  const token = randomBytes(32).toString('base64url');
  let api: LocalApiServer | undefined;
  let apiUrl = '';
  try {
    api = await startLocalApi({ status, logs, restart }, { token });
    apiUrl = `http://127.0.0.1:${api.port}`;
    const meshState: MeshState = { pid: process.pid, dir, stateDir, controller: controllerUrl, api: apiUrl, token, started: new Date().toISOString() };
    writeMeshState(stateDir, meshState);
    await serial(reconcile);
    started = true;
    initialDone = true;
    maybeSummary(pods.size === 0);
  } catch (e) {
    // Nothing of this mesh outlives a failed start: its pods, the API, the controller, mesh.json.
    killNow();
    process.off('exit', killNow);
    const startedPods = [...pods.values()].flatMap((x) => (x.pod !== undefined ? [x.pod] : []));
    for (const p of startedPods) p.handOverLogs(undefined, 'ward up failed to start');
    await Promise.all(startedPods.flatMap((p) => [p.appLog.close(), ...(p.proxyLog !== undefined ? [p.proxyLog.close()] : [])]));
    await api?.close();
    await controller.close();
    logger.flush();
    await controllerLog.close();
    throw e;
  }
  const runningApi = api;
  // Pods that never get ready (unauthorized probes, crashing apps) must not hold the summary back for long.
  const summaryTimer = setTimeout(() => maybeSummary(true), 20_000);
  summaryTimer.unref();
  timer = setInterval(() => void serial(reconcile), opts.reconcileIntervalMs ?? 1000);
  timer.unref();

  let stopping: Promise<void> | undefined;
  return {
    controllerUrl,
    apiUrl,
    status,
    killNow,
    stop: () => {
      stopping ??= (async () => {
        stopped = true;
        clearInterval(timer);
        clearTimeout(summaryTimer);
        emit({ kind: 'stopping' });
        const all = [...pods.values()].flatMap((e) => (e.pod !== undefined ? [e.pod] : []));
        await Promise.all(all.map((p) => p.stop()));
        for (const p of all) p.handOverLogs(undefined, 'ward up stopped');
        // A reconcile or restart under way stops what it touched itself.
        await queue;
        await runningApi.close();
        await controller.close();
        logger.flush();
        await controllerLog.close();
        removeMeshState(stateDir);
        process.off('exit', killNow);
      })();
      return stopping;
    },
  };
}
