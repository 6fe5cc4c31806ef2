/**
 * The summary `ward up` prints once the mesh is up: after the initial reconcile, when every pod
 * that started is ready (or at once when asked to: no pods, or pods that take too long).
 */
import type { MeshPods } from './mesh-pods.js';
import type { LocalEvent } from './mesh-types.js';
import type { PodPlan } from './plan.js';

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

/** Emits the `summary` event once. */
export class MeshSummary {
  readonly #pods: MeshPods;
  readonly #emit: (e: LocalEvent) => void;
  readonly #controllerUrl: string;
  #apiUrl = '';
  /** Set once the initial reconcile is done: the summary waits for it. */
  #initialDone = false;
  #done = false;

  constructor(pods: MeshPods, emit: (e: LocalEvent) => void, controllerUrl: string) {
    this.#pods = pods;
    this.#emit = emit;
    this.#controllerUrl = controllerUrl;
  }

  /** The initial reconcile is done, with the local API at `apiUrl`; `force` emits the summary now. */
  initialReconcileDone(apiUrl: string, force: boolean): void {
    this.#apiUrl = apiUrl;
    this.#initialDone = true;
    this.maybeEmit(force);
  }

  /** Emits the summary when every started pod is ready (whatever their state when `force`). */
  maybeEmit(force = false): void {
    // Pods become ready while the initial reconcile still starts others: count them all.
    if (this.#done || this.#pods.isStopped || !this.#initialDone) return;
    const entries = this.#pods.entries();
    if (!force && !entries.every((e) => e.pod === undefined || e.pod.ready)) return;
    this.#done = true;
    this.#emit({
      kind: 'summary',
      rows: entries.map((e) => ({
        namespace: e.key.split('/')[0] as string,
        name: e.key.split('/')[1] as string,
        ip: e.ip,
        ready: e.pod?.ready ?? false,
        meshed: e.meshed,
        urls: e.pod === undefined ? [] : httpPorts(e.pod.plan).map((p) => `http://${e.ip}:${p}`),
      })),
      api: this.#apiUrl,
      controller: this.#controllerUrl,
    });
  }
}
