/**
 * The pods of a local mesh, kept in line with the manifests directory: the controller's index says
 * which pods exist (meshed or not); a pod whose definition changed is stopped and started again,
 * a removed one stopped. Changes run one at a time (the periodic reconcile and `ward restart`).
 *
 * As a kubelet does, the mesh tells the controller which pods run and whether they are ready
 * (`EndpointsIndex.reportPod`): Destination answers a Service with its ready pods only. A pod is
 * taken out of the answers before it is stopped.
 *
 * A workload's pods are named after its template, so a template edit makes new pods (see the
 * directory source's `podNames`). The mesh then rolls, as a Deployment does: the new pods start,
 * the old pods that were ready keep running (and serving) until every pod of the workload's new
 * template is ready, then they stop. Old pods that were not ready stop at once; a new template
 * whose pods never get ready leaves the old pods running, as a stalled rollout does.
 */
import type { ClusterConfig, Pod, RunningController } from '../controller/index.js';
import { serviceAccountIdentity } from '../core/index.js';
import { errorMessage } from '../shared/index.js';
import type { AddressAllocator } from './addresses.js';
import type { LogSource } from './api-server.js';
import { DenialLog } from './denials.js';
import type { LocalEvent, LocalStatus } from './mesh-types.js';
import { planPod } from './plan.js';
import { LocalPod, type PodDeps, type PodStatus } from './pod.js';

/** A pod of the mesh: running, or failed to start. */
export interface PodEntry {
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

/** What every pod is started with. */
export interface MeshPodsOptions {
  /** The manifests directory (resolved). */
  readonly dir: string;
  readonly controller: RunningController;
  readonly cluster: ClusterConfig;
  /** The allocator the controller asks too (any manifest status.podIP was replaced). */
  readonly allocator: AddressAllocator;
  /** The dependencies all pods share; the denial log, events and log truncation are added per pod. */
  readonly shared: Omit<PodDeps, 'denials' | 'report' | 'onReadyChange' | 'truncateLogs'>;
  readonly emit: (e: LocalEvent) => void;
  /** A pod became ready. */
  readonly onPodReady: () => void;
}

const fingerprintOf = (pod: Pod, meshed: boolean) => JSON.stringify([meshed, pod.spec]);

/** The running pods, by `namespace/name`. */
export class MeshPods {
  readonly denials = new DenialLog(100);
  readonly #o: MeshPodsOptions;
  readonly #pods = new Map<string, PodEntry>();
  /** Old pods of a rollout: no longer defined, running until their workload's new pods are ready. */
  readonly #retiring = new Map<string, PodEntry>();
  /** Pods started before in this run (their logs are appended to, not truncated). */
  readonly #seen = new Set<string>();
  #stopped = false;
  #queue: Promise<void> = Promise.resolve();

  constructor(o: MeshPodsOptions) {
    this.#o = o;
  }

  /** True once the mesh stops: no pod starts any more. */
  get isStopped(): boolean {
    return this.#stopped;
  }

  get size(): number {
    return this.#pods.size;
  }

  entries(): PodEntry[] {
    return [...this.#pods.values()];
  }

  /** No pod starts from now on. */
  halt(): void {
    this.#stopped = true;
  }

  /** Brings the running pods in line with DIR, after the changes under way. */
  reconcile(): Promise<void> {
    return this.#serial(() => this.#reconcile());
  }

  status(): LocalStatus {
    const list = [...this.#pods.values(), ...this.#retiring.values()].sort((a, b) => (a.key < b.key ? -1 : 1));
    return {
      pods: list.map((e) => {
        if (e.pod !== undefined) return this.#retiring.get(e.key) === e ? { ...e.pod.status(), replaced: true } : e.pod.status();
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
      denials: this.denials.list(),
    };
  }

  logs(namespace: string, name: string, container: string): LogSource | { notFound: string } {
    const e = this.#pods.get(`${namespace}/${name}`) ?? this.#retiring.get(`${namespace}/${name}`);
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

  /** `ward restart NS/POD`: recreates the pod from its definition and starts it again. */
  restart(namespace: string, name: string): Promise<true | { notFound: string }> {
    return this.#serial(async () => {
      const key = `${namespace}/${name}`;
      const entry = this.#pods.get(key);
      const retiring = this.#retiring.get(key);
      if (retiring !== undefined) return { notFound: `pod ${key} is being replaced by the new pods of ${retiring.owner ?? 'its workload'}` };
      if (entry === undefined || this.#stopped) return { notFound: `no pod ${key} in this mesh` };
      this.#o.controller.recreatePod(namespace, name);
      this.#pods.delete(key);
      if (entry.pod !== undefined) {
        this.#o.emit({ kind: 'pod-stopped', pod: key, why: 'restart requested' });
        await this.#stopPod(entry.pod);
      }
      const w = this.#desired().get(key);
      if (w !== undefined && !this.#stopped) this.#pods.set(key, this.#startPod(key, w.pod, w.meshed, entry.pod));
      else entry.pod?.handOverLogs(undefined, this.#stopped ? 'ward up is stopping' : 'pod removed from the manifests');
      return true as const;
    });
  }

  /** SIGKILLs every pod's processes at once. */
  killAll(): void {
    for (const e of [...this.#pods.values(), ...this.#retiring.values()]) e.pod?.killNow();
  }

  /** After a failed start (pods killed): ends the pods' log followers and closes their logs. */
  async closeLogs(): Promise<void> {
    const startedPods = this.#running();
    for (const p of startedPods) p.handOverLogs(undefined, 'ward up failed to start');
    await Promise.all(startedPods.flatMap((p) => [p.appLog.close(), ...(p.proxyLog !== undefined ? [p.proxyLog.close()] : [])]));
  }

  /** Stops every pod (SIGTERM, SIGKILL after the grace period), then waits for the change under way. */
  async stopAll(): Promise<void> {
    const all = this.#running();
    await Promise.all(all.map((p) => p.stop()));
    for (const p of all) p.handOverLogs(undefined, 'ward up stopped');
    // A reconcile or restart under way stops what it touched itself.
    await this.#queue;
  }

  #running(): LocalPod[] {
    return [...this.#pods.values(), ...this.#retiring.values()].flatMap((e) => (e.pod !== undefined ? [e.pod] : []));
  }

  /** True while `pod` is one of the mesh's (not stopping). */
  #isCurrent(pod: LocalPod): boolean {
    return this.#pods.get(pod.key)?.pod === pod || this.#retiring.get(pod.key)?.pod === pod;
  }

  /** Takes the pod out of Destination's answers, then stops it (callers have removed it from the maps). */
  async #stopPod(pod: LocalPod): Promise<void> {
    this.#o.controller.endpoints.forgetPod(pod.plan.namespace, pod.plan.name);
    await pod.stop();
  }

  /** Tells the controller that `pod` runs, ready or not (with the address it runs on). */
  #reportPod(pod: LocalPod, ready: boolean): void {
    const p = pod.plan.pod;
    this.#o.controller.endpoints.reportPod({ ...p, status: { ...p.status, podIP: pod.plan.ip } }, ready);
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn);
    this.#queue = next.then(
      () => undefined,
      (e: unknown) => this.#o.emit({ kind: 'report', text: `internal error while updating pods: ${errorMessage(e)}` }),
    );
    return next;
  }

  #deps(key: string): PodDeps {
    return {
      ...this.#o.shared,
      denials: this.denials,
      report: (text) => this.#o.emit({ kind: 'report', text }),
      onReadyChange: (pod, ready) => {
        this.#o.emit({ kind: 'pod-ready', pod: pod.key, ready });
        // A stopping pod is out of the answers already (and a recreated one may use its name).
        if (!this.#isCurrent(pod)) return;
        this.#reportPod(pod, ready);
        if (ready) {
          this.#o.onPodReady();
          // A rollout waits for this pod.
          if (this.#retiring.size > 0) void this.reconcile();
        }
      },
      truncateLogs: !this.#seen.has(key),
    };
  }

  /** The pods DIR defines now, with whether they are meshed. */
  #desired(): Map<string, { pod: Pod; meshed: boolean }> {
    const index = this.#o.controller.index;
    const out = new Map<string, { pod: Pod; meshed: boolean }>();
    for (const info of index.pods()) out.set(`${info.namespace}/${info.name}`, { pod: info.pod, meshed: true });
    for (const pod of index.unmeshedPods()) out.set(`${pod.metadata.namespace}/${pod.metadata.name}`, { pod, meshed: false });
    return new Map([...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }

  /**
   * Starts a pod; `previous` is the pod it replaces (stopped already), whose log followers go on
   * with the new one. A pod that cannot start is reported (`pod-invalid`) and kept as failed: the
   * rest of the mesh runs on.
   */
  #startPod(key: string, pod: Pod, meshed: boolean, previous?: LocalPod): PodEntry {
    const { emit, cluster } = this.#o;
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
      ip = this.#o.allocator.addressOf(pod.metadata.namespace, pod.metadata.name);
      const planned = planPod(pod, ip, meshed, { dir: this.#o.dir, inheritedEnv: this.#o.shared.inheritedEnv });
      if (!planned.ok) return failed(planned.problems);
      const identity = meshed ? serviceAccountIdentity(cluster, pod.metadata.namespace, planned.plan.serviceAccount) : null;
      local = new LocalPod(planned.plan, identity, this.#deps(key));
      this.#seen.add(key);
      // Before it starts, so that a follower misses none of its lines.
      previous?.handOverLogs(local, 'pod recreated');
      previous = undefined;
      // The controller hears of the pod before its proxy asks anything: running, not ready.
      this.#reportPod(local, false);
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
  async #reconcile(): Promise<void> {
    if (this.#stopped) return;
    const pods = this.#pods;
    const want = this.#desired();
    const stops: Promise<void>[] = [];
    /** Stopped pods that start again (their definition changed), and pods that are gone. */
    const replaced = new Map<string, LocalPod>();
    const removed: LocalPod[] = [];
    for (const [key, entry] of pods) {
      const w = want.get(key);
      if (w !== undefined && fingerprintOf(w.pod, w.meshed) === entry.fingerprint) continue;
      pods.delete(key);
      if (entry.pod === undefined) continue;
      if (w === undefined && entry.pod.ready && this.#hasSuccessors(entry, want)) {
        this.#retiring.set(key, entry);
        continue;
      }
      this.#o.emit({ kind: 'pod-stopped', pod: key, why: w === undefined ? 'removed from the manifests' : 'its definition changed; restarting it' });
      stops.push(this.#stopPod(entry.pod));
      if (w === undefined) removed.push(entry.pod);
      else replaced.set(key, entry.pod);
    }
    await Promise.all(stops);
    for (const p of removed) p.handOverLogs(undefined, 'pod removed from the manifests');
    if (this.#stopped) {
      for (const p of replaced.values()) p.handOverLogs(undefined, 'ward up is stopping');
      return;
    }
    for (const [key, w] of want) {
      if (pods.has(key)) continue;
      // A template edited back while its old pods still run: they are its pods again.
      const old = this.#retiring.get(key);
      this.#retiring.delete(key);
      if (old !== undefined && old.fingerprint === fingerprintOf(w.pod, w.meshed)) pods.set(key, old);
      else if (old?.pod !== undefined) {
        this.#o.emit({ kind: 'pod-stopped', pod: key, why: 'its definition changed; restarting it' });
        await this.#stopPod(old.pod);
        pods.set(key, this.#startPod(key, w.pod, w.meshed, old.pod));
      } else pods.set(key, this.#startPod(key, w.pod, w.meshed, replaced.get(key)));
    }
    await this.#retire();
  }

  /** True when DIR defines other pods of `entry`'s workload (a rollout, not a removal). */
  #hasSuccessors(entry: PodEntry, want: ReadonlyMap<string, { pod: Pod }>): boolean {
    if (entry.owner === undefined) return false;
    const ns = entry.key.slice(0, entry.key.indexOf('/'));
    for (const { pod } of want.values()) if (pod.owner === entry.owner && pod.metadata.namespace === ns) return true;
    return false;
  }

  /** Stops the old pods of rollouts whose new pods are all ready (or whose workload has none left). */
  async #retire(): Promise<void> {
    const done: PodEntry[] = [];
    for (const entry of this.#retiring.values()) {
      const ns = entry.key.slice(0, entry.key.indexOf('/'));
      const successors = [...this.#pods.values()].filter((e) => e.owner === entry.owner && e.key.startsWith(`${ns}/`));
      if (successors.length > 0 && !successors.every((e) => e.pod?.ready === true)) continue;
      done.push(entry);
    }
    for (const e of done) {
      this.#retiring.delete(e.key);
      this.#o.emit({ kind: 'pod-stopped', pod: e.key, why: `replaced by the new pods of ${e.owner ?? 'its workload'}` });
    }
    await Promise.all(
      done.map(async (e) => {
        if (e.pod === undefined) return;
        await this.#stopPod(e.pod);
        e.pod.handOverLogs(undefined, 'pod replaced by a new pod of its workload');
      }),
    );
  }
}
