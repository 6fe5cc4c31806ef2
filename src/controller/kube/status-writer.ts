/**
 * Writes the status the policy index implies (src/index/status.ts) into the objects, with
 * server-side apply on their `status` subresource, only while this replica leads, and only when
 * the computed status differs from what the object already has.
 *
 * The writer is fed the objects as the API has them (`observe`/`forget`, from the source's watch
 * events: generation and current status matter, the index keeps neither) and is told when the
 * index changed (`schedule`). Each reconciliation recomputes every status from one snapshot of
 * the index and compares it, ignoring transition times, with the object's current status: a
 * resync or the echo of its own write changes nothing and writes nothing. A write's response is
 * taken as the object's new current state at once, so the next pass does not write it again
 * before the watch catches up.
 *
 * Failed writes: 429, 5xx, conflicts and transport errors retry with backoff (a new
 * reconciliation recomputes everything, so the retry writes the latest status); other errors
 * (e.g. 404 from a CRD without a status subresource, 422) are logged and not retried until the
 * object or its computed status changes.
 */
import { isDeepStrictEqual } from 'node:util';
import {
  POLICY_CONTROLLER_NAME,
  type PolicyIndex,
  type PolicyStatus,
  PolicyStatusView,
  type RouteParentStatusEntry,
  type ServiceFacts,
  type StatusCondition,
} from '../../index/index.js';
import { Backoff, type BackoffOptions, errorMessage, type Logger, silentLogger, type Timers, UNREF_TIMERS } from '../../shared/index.js';
import { KubeApiError, type KubeRequester } from '../../sources/index.js';

/** The field manager ward's controller writes status with. */
export const STATUS_FIELD_MANAGER = 'ward-controller';

/** Settings of a StatusWriter. */
export interface StatusWriterOptions {
  readonly client: KubeRequester;
  /** The index the controller serves from (the writer only reads it). */
  readonly index: PolicyIndex;
  /** Whether this replica may write now (LeaderElection#isLeader). */
  readonly isLeader: () => boolean;
  /** Default `ward-controller`. */
  readonly fieldManager?: string;
  /** Delay from a change to the reconciliation that covers it (later changes join it); default 250 ms. */
  readonly debounceMs?: number;
  /** Retry backoff after failed writes; default 500 ms .. 30 s. */
  readonly backoff?: BackoffOptions;
  /** Writes in flight at once; default 4. */
  readonly concurrency?: number;
  readonly logger?: Logger;
  readonly timers?: Timers;
  /** Wall-clock ms for lastTransitionTime; default Date.now. */
  readonly wallMs?: () => number;
  /**
   * The objects whose latest version the source refused (it did not decode or pass admission),
   * with why; read once per reconciliation. The index then holds the last good version or
   * nothing; either way the object gets Accepted=False with reason Invalid and that text.
   */
  readonly rejected?: () => Iterable<RejectedObject>;
}

/** An object the source refused, and why. */
export interface RejectedObject extends StatusObjectRef {
  readonly reason: string;
}

/** Identifies an object the writer tracks. */
export interface StatusObjectRef {
  readonly group: string;
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
}

/** Counters for metrics and tests. */
export interface StatusWriterStats {
  /** Successful status patches. */
  readonly writes: number;
  /** Objects compared and found already up to date. */
  readonly skippedUnchanged: number;
  /** Failed patches. */
  readonly errors: number;
  /** Completed reconciliations (while leading). */
  readonly reconciliations: number;
}

/** A Kubernetes condition as written (metav1.Condition). */
interface Condition extends StatusCondition {
  readonly observedGeneration?: number;
  readonly lastTransitionTime: string;
}

type Status = Record<string, unknown>;

interface Tracked {
  readonly apiVersion: string;
  readonly group: string;
  readonly version: string;
  readonly kind: string;
  readonly plural: string;
  readonly namespace: string;
  readonly name: string;
  generation: number | undefined;
  resourceVersion: string | undefined;
  status: Status;
  /** The status a non-retryable write failed with; not tried again until something changes. */
  failed: string | undefined;
}

/** group/kind -> plural, for the kinds that get status. */
const PLURALS: Record<string, string> = {
  'policy.linkerd.io/Server': 'servers',
  'policy.linkerd.io/ServerAuthorization': 'serverauthorizations',
  'policy.linkerd.io/AuthorizationPolicy': 'authorizationpolicies',
  'policy.linkerd.io/MeshTLSAuthentication': 'meshtlsauthentications',
  'policy.linkerd.io/NetworkAuthentication': 'networkauthentications',
  'policy.linkerd.io/HTTPRoute': 'httproutes',
  'gateway.networking.k8s.io/HTTPRoute': 'httproutes',
  'gateway.networking.k8s.io/GRPCRoute': 'grpcroutes',
};

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function splitApiVersion(apiVersion: string): { group: string; version: string } {
  const i = apiVersion.lastIndexOf('/');
  return i === -1 ? { group: '', version: apiVersion } : { group: apiVersion.slice(0, i), version: apiVersion.slice(i + 1) };
}

/** Numeric resourceVersions compare (etcd revisions); anything else is treated as newer. */
function isOlder(rv: string | undefined, than: string | undefined): boolean {
  if (rv === undefined || than === undefined || !/^\d+$/.test(rv) || !/^\d+$/.test(than)) return false;
  return BigInt(rv) < BigInt(than);
}

function conditionsOf(v: unknown): Record<string, unknown>[] {
  return Array.isArray(v) ? v.filter(isRecord) : [];
}

/** Conditions equal but for lastTransitionTime (as Linkerd compares them). */
function sameConditions(a: readonly Record<string, unknown>[], b: readonly Record<string, unknown>[]): boolean {
  if (a.length !== b.length) return false;
  return a.every((x, i) => {
    const y = b[i] as Record<string, unknown>;
    return ['type', 'status', 'reason', 'message', 'observedGeneration'].every((k) => x[k] === y[k]);
  });
}

function parentOrder(a: Record<string, unknown>, b: Record<string, unknown>): number {
  const key = (p: Record<string, unknown>) => {
    const ref = isRecord(p.parentRef) ? p.parentRef : {};
    return [String(p.controllerName ?? ''), String(ref.name ?? ''), String(ref.namespace ?? '')];
  };
  const ka = key(a);
  const kb = key(b);
  for (let i = 0; i < 3; i++) if (ka[i] !== kb[i]) return (ka[i] as string) < (kb[i] as string) ? -1 : 1;
  return 0;
}

/** Route parent lists equal ignoring order and transition times (Linkerd's eq_time_insensitive_*). */
function sameParents(a: readonly Record<string, unknown>[], b: readonly Record<string, unknown>[]): boolean {
  if (a.length !== b.length) return false;
  const sa = [...a].sort(parentOrder);
  const sb = [...b].sort(parentOrder);
  return sa.every((x, i) => {
    const y = sb[i] as Record<string, unknown>;
    return (
      x.controllerName === y.controllerName &&
      isDeepStrictEqual(x.parentRef, y.parentRef) &&
      sameConditions(conditionsOf(x.conditions), conditionsOf(y.conditions))
    );
  });
}

/** Keeps a condition's lastTransitionTime while its status is unchanged. */
function stamp(c: StatusCondition, previous: readonly Record<string, unknown>[], now: string, generation: number | undefined): Condition {
  const prev = previous.find((p) => p.type === c.type);
  const since = prev !== undefined && prev.status === c.status && typeof prev.lastTransitionTime === 'string' ? prev.lastTransitionTime : now;
  return {
    type: c.type,
    status: c.status,
    reason: c.reason,
    message: c.message,
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
    lastTransitionTime: since,
  };
}

/** One object's state as a Kubernetes source reports it (`KubernetesSource#status()`). */
export interface SourceObjectState {
  readonly apiVersion: string;
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
  readonly ok: boolean;
  readonly diagnostics: readonly { readonly severity: string; readonly code: string; readonly message: string }[];
}

/** The objects a source refused, for `StatusWriterOptions.rejected`: `() => rejectedObjects(source.status())`. */
export function rejectedObjects(states: Iterable<SourceObjectState>): RejectedObject[] {
  const out: RejectedObject[] = [];
  for (const st of states) {
    if (st.ok) continue;
    const errors = st.diagnostics.filter((d) => d.severity === 'error').map((d) => `${d.code} ${d.message}`);
    const { group } = splitApiVersion(st.apiVersion);
    out.push({ group, kind: st.kind, namespace: st.namespace, name: st.name, reason: errors.join('; ') || 'the object is invalid' });
  }
  return out;
}

/** Marks a status Invalid when the source refused the object's latest version. */
function withRejection(why: string | undefined, st: PolicyStatus | undefined): PolicyStatus | undefined {
  if (why === undefined) return st;
  const message = st === undefined ? why : `${why}; the previous version stays in force`;
  const accepted: StatusCondition = { type: 'Accepted', status: 'False', reason: 'Invalid', message };
  if (st !== undefined) return { ...st, conditions: [accepted, st.conditions[1]] };
  const resolved: StatusCondition = { type: 'ResolvedRefs', status: 'Unknown', reason: 'Invalid', message: 'not evaluated: the object is invalid' };
  return { conditions: [accepted, resolved], selectedPods: 0, selectedPorts: 0 };
}

/** Computes and writes status while this replica leads. See the module comment. */
export class StatusWriter {
  readonly #client: KubeRequester;
  readonly #index: PolicyIndex;
  readonly #isLeader: () => boolean;
  readonly #manager: string;
  readonly #debounceMs: number;
  readonly #concurrency: number;
  readonly #backoff: Backoff;
  readonly #log: Logger;
  readonly #timers: Timers;
  readonly #wall: () => number;
  readonly #rejected: (() => Iterable<RejectedObject>) | undefined;
  readonly #objects = new Map<string, Tracked>();
  readonly #services = new Map<string, ServiceFacts>();
  #timer: unknown;
  #timerIsRetry = false;
  #running: Promise<unknown> | undefined;
  #again = false;
  #stopped = false;
  #stats = { writes: 0, skippedUnchanged: 0, errors: 0, reconciliations: 0 };

  constructor(opts: StatusWriterOptions) {
    this.#client = opts.client;
    this.#index = opts.index;
    this.#isLeader = opts.isLeader;
    this.#manager = opts.fieldManager ?? STATUS_FIELD_MANAGER;
    this.#debounceMs = opts.debounceMs ?? 250;
    this.#concurrency = Math.max(1, opts.concurrency ?? 4);
    this.#backoff = new Backoff(opts.backoff ?? { minMs: 500, maxMs: 30_000 });
    this.#log = opts.logger ?? silentLogger();
    this.#timers = opts.timers ?? UNREF_TIMERS;
    this.#wall = opts.wallMs ?? Date.now;
    this.#rejected = opts.rejected;
  }

  get stats(): StatusWriterStats {
    return { ...this.#stats };
  }

  /**
   * Records an object as the API has it (a list item or watch event object): the kinds that get
   * status, and core/v1 Services (route parents and backends). Other objects are ignored.
   * Schedules a reconciliation when something that matters changed.
   */
  observe(obj: unknown): void {
    if (!isRecord(obj) || !isRecord(obj.metadata) || typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string') return;
    const { group, version } = splitApiVersion(obj.apiVersion);
    const namespace = typeof obj.metadata.namespace === 'string' ? obj.metadata.namespace : '';
    const name = typeof obj.metadata.name === 'string' ? obj.metadata.name : '';
    const key = `${group}/${obj.kind}/${namespace}/${name}`;
    if (group === '' && obj.kind === 'Service') {
      const spec = isRecord(obj.spec) ? obj.spec : {};
      const facts: ServiceFacts = {
        clusterIP: typeof spec.clusterIP === 'string' ? spec.clusterIP : undefined,
        type: typeof spec.type === 'string' ? spec.type : undefined,
      };
      if (!isDeepStrictEqual(this.#services.get(key), facts)) {
        this.#services.set(key, facts);
        this.schedule();
      }
      return;
    }
    const plural = PLURALS[`${group}/${obj.kind}`];
    if (plural === undefined) return;
    const generation = typeof obj.metadata.generation === 'number' ? obj.metadata.generation : undefined;
    const resourceVersion = typeof obj.metadata.resourceVersion === 'string' ? obj.metadata.resourceVersion : undefined;
    const status = isRecord(obj.status) ? obj.status : {};
    const prev = this.#objects.get(key);
    // A watch event older than the response of this writer's own patch must not undo it.
    if (prev !== undefined && isOlder(resourceVersion, prev.resourceVersion)) return;
    if (prev !== undefined && prev.generation === generation && isDeepStrictEqual(prev.status, status) && prev.apiVersion === obj.apiVersion) {
      prev.resourceVersion = resourceVersion;
      return;
    }
    this.#objects.set(key, {
      apiVersion: obj.apiVersion,
      group,
      version,
      kind: obj.kind,
      plural,
      namespace,
      name,
      generation,
      resourceVersion,
      status,
      failed: undefined,
    });
    this.schedule();
  }

  /** Drops a deleted object (the object, or its apiVersion/kind/metadata). */
  forget(obj: unknown): void {
    if (!isRecord(obj) || !isRecord(obj.metadata) || typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string') return;
    const { group } = splitApiVersion(obj.apiVersion);
    this.#forgetKey(`${group}/${obj.kind}/${String(obj.metadata.namespace ?? '')}/${String(obj.metadata.name ?? '')}`);
  }

  /**
   * KubernetesSource's `onObject` hook: `key` is `namespace/name`, `object` the object as the API
   * has it, or undefined once deleted.
   */
  onObject(type: { readonly group: string; readonly kind: string }, key: string, object: unknown): void {
    if (object !== undefined) {
      this.observe(object);
      return;
    }
    const slash = key.indexOf('/');
    this.#forgetKey(`${type.group}/${type.kind}/${slash === -1 ? '' : key.slice(0, slash)}/${key.slice(slash + 1)}`);
  }

  #forgetKey(key: string): void {
    if (this.#services.delete(key)) this.schedule();
    this.#objects.delete(key);
  }

  /** Asks for a reconciliation after the debounce (call after every index change and on becoming leader). */
  schedule(): void {
    if (this.#stopped) return;
    if (this.#running !== undefined) {
      this.#again = true;
      return;
    }
    if (this.#timer !== undefined && !this.#timerIsRetry) return;
    this.#arm(this.#debounceMs, false);
  }

  /** Reconciles now and resolves when done (tests; a fresh leader that wants status at once). */
  async flush(): Promise<void> {
    this.#timers.clearTimeout(this.#timer);
    this.#timer = undefined;
    while (this.#running !== undefined) await this.#running;
    await this.#run();
  }

  /** Stops scheduling and waits for the writes in flight. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#timers.clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  #arm(ms: number, isRetry: boolean): void {
    this.#timers.clearTimeout(this.#timer);
    this.#timerIsRetry = isRetry;
    this.#timer = this.#timers.setTimeout(() => {
      this.#timer = undefined;
      void this.#run();
    }, ms);
  }

  #run(): Promise<void> {
    const p = this.#reconcile()
      .catch((e: unknown) => {
        // A bug in the computation must not stop status for good: log it and try again later.
        this.#stats.errors++;
        this.#log.error({ err: errorMessage(e) }, 'status reconciliation failed');
        return this.#backoff.next();
      })
      .finally(() => {
        this.#running = undefined;
      });
    this.#running = p;
    return p.then((retryMs) => {
      if (this.#stopped) return;
      if (this.#again) {
        this.#again = false;
        this.#arm(this.#debounceMs, false);
      } else if (retryMs !== undefined) this.#arm(retryMs, true);
    });
  }

  /** One pass; resolves with a retry delay when a retryable write failed. */
  async #reconcile(): Promise<number | undefined> {
    if (!this.#isLeader()) return undefined;
    const view = new PolicyStatusView(this.#index, (ns, name) => this.#services.get(`/Service/${ns}/${name}`));
    const now = new Date(this.#wall()).toISOString().replace(/\.\d{3}Z$/, 'Z');
    const rejected = new Map<string, string>();
    for (const r of this.#rejected?.() ?? []) rejected.set(`${r.group}/${r.kind}/${r.namespace}/${r.name}`, r.reason);
    const pending: { obj: Tracked; status: Status; text: string }[] = [];
    for (const obj of this.#objects.values()) {
      const desired = this.#desired(obj, view, now, rejected);
      if (desired === undefined) continue;
      if (desired.same) {
        this.#stats.skippedUnchanged++;
        continue;
      }
      const text = JSON.stringify(desired.status);
      if (obj.failed === text) continue;
      pending.push({ obj, status: desired.status, text });
    }
    let retryMs: number | undefined;
    const work = async () => {
      for (let item = pending.shift(); item !== undefined; item = pending.shift()) {
        // Leadership can end mid-pass: no write after that.
        if (!this.#isLeader() || this.#stopped) return;
        const r = await this.#write(item.obj, item.status, item.text);
        if (r !== undefined) retryMs = Math.max(retryMs ?? 0, r);
      }
    };
    await Promise.all(Array.from({ length: this.#concurrency }, work));
    this.#stats.reconciliations++;
    if (retryMs === undefined) this.#backoff.reset();
    return retryMs;
  }

  #desired(obj: Tracked, view: PolicyStatusView, now: string, rejected: ReadonlyMap<string, string>): { status: Status; same: boolean } | undefined {
    const ref = { kind: obj.kind, group: obj.group, namespace: obj.namespace, name: obj.name };
    if (obj.kind === 'HTTPRoute' || obj.kind === 'GRPCRoute') {
      const ours = view.routeParents(ref);
      if (ours === undefined) return undefined;
      const current = conditionsOf(obj.status.parents);
      const unowned = current.filter((p) => p.controllerName !== POLICY_CONTROLLER_NAME);
      const mine = ours.map((e: RouteParentStatusEntry) => {
        const prev = current.find((p) => p.controllerName === POLICY_CONTROLLER_NAME && isDeepStrictEqual(p.parentRef, e.parentRef));
        return { ...e, conditions: e.conditions.map((c) => stamp(c, conditionsOf(prev?.conditions), now, undefined)) };
      });
      const parents = [...unowned, ...mine] as Record<string, unknown>[];
      return { status: { parents }, same: sameParents(parents, current) };
    }
    const st = withRejection(rejected.get(`${obj.group}/${obj.kind}/${obj.namespace}/${obj.name}`), view.policyStatus(ref));
    if (st === undefined) return undefined;
    const current = conditionsOf(obj.status.conditions);
    const conditions = st.conditions.map((c) => stamp(c, current, now, obj.generation));
    const ours = current.filter((c) => c.type === 'Accepted' || c.type === 'ResolvedRefs');
    const same =
      obj.status.selectedPods === st.selectedPods &&
      obj.status.selectedPorts === st.selectedPorts &&
      sameConditions(ours, conditions as unknown as Record<string, unknown>[]);
    return { status: { conditions, selectedPods: st.selectedPods, selectedPorts: st.selectedPorts }, same };
  }

  /** One server-side apply of `status`; resolves with a retry delay when it should be retried. */
  async #write(obj: Tracked, status: Status, text: string): Promise<number | undefined> {
    const path = `/apis/${obj.group}/${obj.version}/namespaces/${encodeURIComponent(obj.namespace)}/${obj.plural}/${encodeURIComponent(obj.name)}/status`;
    const body = { apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.name, namespace: obj.namespace }, status };
    const fields = { kind: obj.kind, namespace: obj.namespace, name: obj.name };
    try {
      const res = await this.#client.request({
        method: 'PATCH',
        path,
        query: { fieldManager: this.#manager, force: 'true' },
        contentType: 'application/apply-patch+yaml',
        body,
      });
      this.#stats.writes++;
      this.#log.debug(fields, 'status written');
      // The response is the object as stored: current from now on.
      const stored = res.body;
      const key = `${obj.group}/${obj.kind}/${obj.namespace}/${obj.name}`;
      if (isRecord(stored) && isRecord(stored.metadata) && this.#objects.get(key) === obj) {
        obj.status = isRecord(stored.status) ? stored.status : status;
        obj.resourceVersion = typeof stored.metadata.resourceVersion === 'string' ? stored.metadata.resourceVersion : obj.resourceVersion;
        obj.generation = typeof stored.metadata.generation === 'number' ? stored.metadata.generation : obj.generation;
      }
      return undefined;
    } catch (e) {
      this.#stats.errors++;
      const status = e instanceof KubeApiError ? e.status : 0;
      const retryable = status === 0 || status === 409 || status === 429 || status >= 500;
      this.#log.warn({ ...fields, err: errorMessage(e), retry: retryable }, 'status write failed');
      if (!retryable) {
        obj.failed = text;
        return undefined;
      }
      const after = e instanceof KubeApiError && e.retryAfterSeconds !== undefined ? e.retryAfterSeconds * 1000 : 0;
      return Math.max(after, this.#backoff.next());
    }
  }
}
