/**
 * The Kubernetes source: the cluster's objects, mirrored by one reflector per resource type, fed
 * to a sink (the policy index, the endpoints index) through the same admission pipeline the
 * directory source uses. It plays the directory source's role for a controller running in a
 * cluster.
 *
 * Differences from the directory source, on purpose: pods are real objects, already injected by
 * the webhook when they were created, so there is no workload expansion and no injection here;
 * pods are taken as the API server has them (status.podIP and conditions included).
 *
 * Invariants:
 * - Bad input never loses state: an object that stops decoding or is rejected by admission (it
 *   bypassed the webhook) keeps its last good version in force; it is reported through
 *   `status()` and logged once per resourceVersion.
 * - Changes are applied in sink transactions, batched over a short debounce; the first one holds
 *   every type's initial list (`start()` resolves after it).
 * - An object whose only change is its resourceVersion (e.g. its status was written) is not
 *   applied again.
 */
import { type Diagnostic, deepEqual, GATEWAY_GROUP, POLICY_GROUP } from '../../core/index.js';
import {
  admitDocuments,
  documentFromObject,
  type Resource,
  type ResourceKey,
  resourceKeyOf,
  resourceKeyString,
  SMI_ACCESS_GROUP,
  SMI_SPECS_GROUP,
} from '../../manifest/index.js';
import { Backoff, errorMessage, type Logger, MeshError, silentLogger } from '../../shared/index.js';
import { BatchTimer } from '../batch-timer.js';
import type { ChangeSummary, FileStatus, SourceSink } from '../directory-source.js';
import { KubeApiError, type KubeClient } from './client.js';
import { apiVersionOf, collectionPath, type KubeObject, Reflector, type ReflectorOptions, type ReflectorStats, type ResourceType } from './reflector.js';

// === public types ===

/** What the controller needs of a source, whichever feeds it (a directory, the Kubernetes API). */
export interface PolicySource {
  /** Resolves once the sink holds the initial state. */
  start(): Promise<void>;
  stop(): void | Promise<void>;
  /** Per-input status: problems, objects in force, objects kept from an earlier good version. */
  status(): FileStatus[];
  /** Epoch ms at which the last applied batch began. */
  readonly lastChangeStartedAt: number | undefined;
  /** Re-runs a pod's creation; false when the source cannot (Kubernetes recreates pods itself). */
  recreatePod(namespace: string, name: string): boolean;
}

/** A kind the source watches, with the versions ward decodes, the preferred first. */
export interface WatchedKind {
  readonly kind: string;
  readonly group: string;
  readonly plural: string;
  readonly namespaced: boolean;
  readonly versions: readonly string[];
}

/**
 * The kinds ward reads from a cluster. Workloads are not among them: their pods are. Versions are
 * those ward decodes, newest first (the storage version of Linkerd's current CRDs leads).
 */
export const WATCHED_KINDS: readonly WatchedKind[] = [
  { kind: 'Namespace', group: '', plural: 'namespaces', namespaced: false, versions: ['v1'] },
  { kind: 'Pod', group: '', plural: 'pods', namespaced: true, versions: ['v1'] },
  { kind: 'ServiceAccount', group: '', plural: 'serviceaccounts', namespaced: true, versions: ['v1'] },
  { kind: 'Service', group: '', plural: 'services', namespaced: true, versions: ['v1'] },
  { kind: 'Server', group: POLICY_GROUP, plural: 'servers', namespaced: true, versions: ['v1beta3', 'v1beta2', 'v1beta1', 'v1alpha1'] },
  { kind: 'ServerAuthorization', group: POLICY_GROUP, plural: 'serverauthorizations', namespaced: true, versions: ['v1beta1', 'v1alpha1'] },
  { kind: 'AuthorizationPolicy', group: POLICY_GROUP, plural: 'authorizationpolicies', namespaced: true, versions: ['v1alpha1'] },
  { kind: 'MeshTLSAuthentication', group: POLICY_GROUP, plural: 'meshtlsauthentications', namespaced: true, versions: ['v1alpha1'] },
  { kind: 'NetworkAuthentication', group: POLICY_GROUP, plural: 'networkauthentications', namespaced: true, versions: ['v1alpha1'] },
  { kind: 'HTTPRoute', group: POLICY_GROUP, plural: 'httproutes', namespaced: true, versions: ['v1beta3', 'v1beta2', 'v1beta1', 'v1alpha1'] },
  { kind: 'HTTPRoute', group: GATEWAY_GROUP, plural: 'httproutes', namespaced: true, versions: ['v1', 'v1beta1', 'v1alpha2'] },
  { kind: 'GRPCRoute', group: GATEWAY_GROUP, plural: 'grpcroutes', namespaced: true, versions: ['v1', 'v1alpha2'] },
  // SMI access policy: watched when its CRDs exist (OSM serves TrafficTarget v1alpha3 and specs v1alpha4).
  { kind: 'TrafficTarget', group: SMI_ACCESS_GROUP, plural: 'traffictargets', namespaced: true, versions: ['v1alpha3', 'v1alpha2', 'v1alpha1'] },
  { kind: 'HTTPRouteGroup', group: SMI_SPECS_GROUP, plural: 'httproutegroups', namespaced: true, versions: ['v1alpha4', 'v1alpha3', 'v1alpha2', 'v1alpha1'] },
  { kind: 'TCPRoute', group: SMI_SPECS_GROUP, plural: 'tcproutes', namespaced: true, versions: ['v1alpha4', 'v1alpha3', 'v1alpha2', 'v1alpha1'] },
  { kind: 'UDPRoute', group: SMI_SPECS_GROUP, plural: 'udproutes', namespaced: true, versions: ['v1alpha4'] },
];

/** The state of one object (a `FileStatus` whose `file` is the object's API path). */
export interface ObjectStatus extends FileStatus {
  readonly kind: string;
  readonly apiVersion: string;
  readonly namespace: string;
  readonly name: string;
  readonly resourceVersion: string | undefined;
}

/** Settings of a `KubernetesSource`. */
export interface KubernetesSourceOptions {
  readonly client: Pick<KubeClient, 'request' | 'watch'>;
  readonly sink: SourceSink;
  readonly logger?: Logger;
  /** Quiet time after the last event before a batch is applied (default 15 ms). */
  readonly debounceMs?: number;
  /** Longest a batch waits under a continuous stream of events (default 500 ms). */
  readonly maxDelayMs?: number;
  /** The kinds to watch (default WATCHED_KINDS). */
  readonly kinds?: readonly WatchedKind[];
  /** Reflector settings (backoff, page size, retry of types not served). */
  readonly reflector?: Pick<ReflectorOptions, 'backoff' | 'pageSize' | 'notFoundRetryMs' | 'notFoundGraceMs' | 'watchTimeoutSeconds'>;
  /**
   * Called after each batch that saw objects change (also when none of them changed what the
   * sink holds: a status write, a rejected version), and after the initial one.
   */
  readonly onChange?: (summary: ChangeSummary) => void;
  /**
   * Hears every object of a batch as the API has it (generation, status), before it is decoded:
   * `object` undefined when it was deleted. For what needs the objects themselves, not the
   * resources the indexes hold (the status writer).
   */
  readonly onObject?: (type: ResourceType, key: string, object: KubeObject | undefined) => void;
}

// === internal state ===

interface ObjectState {
  readonly path: string;
  readonly type: ResourceType;
  readonly namespace: string;
  readonly name: string;
  rv: string | undefined;
  uid: string | undefined;
  /** The version in force (the last one that decoded and was admitted). */
  resource: Resource | undefined;
  /** The latest version did not make it: `resource` is an earlier one. */
  retained: boolean;
  diagnostics: Diagnostic[];
  ok: boolean;
  lastGoodAt: number | undefined;
  lastErrorAt: number | undefined;
}

function isError(d: Diagnostic): boolean {
  return d.severity === 'error';
}

function formatDiagnostic(d: Diagnostic): string {
  return `${d.severity} ${d.code} ${d.message}`;
}

/** Resource content without what changes on every write of the object (origin, resourceVersion). */
function sameContent(a: Resource, b: Resource): boolean {
  if (a === b) return true;
  const strip = (r: Resource) => {
    const { origin: _origin, metadata, ...rest } = r;
    const { resourceVersion: _rv, ...meta } = metadata;
    return { ...rest, metadata: meta };
  };
  return deepEqual(strip(a), strip(b));
}

/**
 * The workload a pod belongs to, as `kind/name` (the `owner` the directory source's workload
 * expansion sets): its controller reference, with a ReplicaSet made of a Deployment (named
 * `<deployment>-<pod-template-hash>`) standing for that Deployment, as Linkerd's destination
 * labels endpoints.
 */
export function podOwner(o: KubeObject): string | undefined {
  const refs = o.metadata.ownerReferences;
  if (!Array.isArray(refs)) return undefined;
  const ref = (refs as unknown[]).find(
    (r): r is { kind: string; name: string } =>
      typeof r === 'object' &&
      r !== null &&
      (r as { controller?: unknown }).controller === true &&
      typeof (r as { kind?: unknown }).kind === 'string' &&
      typeof (r as { name?: unknown }).name === 'string',
  );
  if (ref === undefined) return undefined;
  const labels = o.metadata.labels as Record<string, unknown> | undefined;
  const hash = labels?.['pod-template-hash'];
  if (ref.kind === 'ReplicaSet' && typeof hash === 'string' && hash !== '' && ref.name.endsWith(`-${hash}`)) {
    return `Deployment/${ref.name.slice(0, -(hash.length + 1))}`;
  }
  return `${ref.kind}/${ref.name}`;
}

/** Drops what ward never reads and what makes objects big (managedFields). */
function slim(o: KubeObject): KubeObject {
  if (o.metadata.managedFields === undefined) return o;
  const { managedFields: _mf, ...metadata } = o.metadata;
  return { ...o, metadata: metadata as KubeObject['metadata'] };
}

/** The object's API path, e.g. `/apis/policy.linkerd.io/v1beta3/namespaces/demo/servers/web`. */
const objectPath = (t: ResourceType, o: KubeObject) => `${collectionPath(t, o.metadata.namespace)}/${encodeURIComponent(o.metadata.name)}`;

// === the source ===

/** Feeds a sink from the Kubernetes API. See the module comment for the guarantees. */
export class KubernetesSource implements PolicySource {
  readonly #opts: KubernetesSourceOptions;
  readonly #log: Logger;
  readonly #reflectors: Reflector[] = [];
  /** By `<reflector index>|<store key>`. */
  readonly #objects = new Map<string, ObjectState>();
  /** Which object holds each resource key. */
  readonly #holder = new Map<string, string>();
  /** What the sink holds, by resource key string. */
  readonly #applied = new Map<string, Resource>();
  /** Objects changed since the last batch (`<reflector index>|<store key>`). */
  #pending = new Set<string>();
  /** Resource keys the last failed batch did not apply. */
  #retry = new Set<string>();
  #pendingSince: number | undefined;
  readonly #batchTimer: BatchTimer;
  #ready = false;
  /** The initial batch is reported even when it applies nothing. */
  #initialReported = false;
  #started = false;
  #stopped = false;
  #running = false;
  #lastChangeStartedAt: number | undefined;
  /** Ends a `start()` still waiting for the initial lists. */
  #onStop: () => void = () => {};
  /** Aborts the discovery requests of a `start()` when stopped. */
  readonly #abort = new AbortController();
  readonly #sinkBackoff = new Backoff({ minMs: 100, maxMs: 10_000 });
  #batches = 0;

  constructor(opts: KubernetesSourceOptions) {
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger();
    const debounceMs = Math.max(0, opts.debounceMs ?? 15);
    this.#batchTimer = new BatchTimer(debounceMs, Math.max(debounceMs, opts.maxDelayMs ?? 500), () => this.#flush());
  }

  /** Epoch ms at which the last applied batch began (its first watch event). */
  get lastChangeStartedAt(): number | undefined {
    return this.#lastChangeStartedAt;
  }

  /** True once the initial state of every type is in the sink. */
  get synced(): boolean {
    return this.#ready;
  }

  /** Batches applied so far. */
  get batches(): number {
    return this.#batches;
  }

  /** Kubernetes recreates pods itself: never. */
  recreatePod(_namespace: string, _name: string): boolean {
    return false;
  }

  /** The resource types watched (after version discovery), in order. */
  types(): ResourceType[] {
    return this.#reflectors.map((r) => r.type);
  }

  /** Each reflector's counters, by `plural.group/version`. */
  reflectorStats(): Record<string, ReflectorStats> {
    const out: Record<string, ReflectorStats> = {};
    for (const r of this.#reflectors) out[`${r.type.plural}.${apiVersionOf(r.type)}`] = r.stats();
    return out;
  }

  /**
   * Picks each kind's version, starts the reflectors, and resolves once their initial lists are
   * applied to the sink in one transaction. Rejects (ERR_SOURCE_STOPPED) when stopped before that.
   */
  async start(): Promise<void> {
    if (this.#started) throw new MeshError('ERR_SOURCE_STARTED', 'the Kubernetes source was already started');
    this.#started = true;
    const types = await this.#discover(this.#opts.kinds ?? WATCHED_KINDS);
    if (this.#stopped) throw new MeshError('ERR_SOURCE_STOPPED', 'the Kubernetes source was stopped before its initial sync');
    for (const [i, type] of types.entries()) {
      const r = new Reflector({
        ...this.#opts.reflector,
        client: this.#opts.client,
        type,
        logger: this.#log,
        transform: slim,
        onChange: (changes) => {
          for (const c of changes) this.#pending.add(`${i}|${c.key}`);
          this.#pendingSince ??= Date.now();
          this.#schedule();
        },
      });
      this.#reflectors.push(r);
    }
    for (const r of this.#reflectors) r.start();
    let stoppedEarly: () => void = () => {};
    const stopped = new Promise<void>((r) => {
      stoppedEarly = r;
    });
    this.#onStop = stoppedEarly;
    await Promise.race([Promise.all(this.#reflectors.map((r) => r.synced)), stopped]);
    if (this.#stopped) throw new MeshError('ERR_SOURCE_STOPPED', 'the Kubernetes source was stopped before its initial sync');
    this.#ready = true;
    this.#pendingSince ??= Date.now();
    this.#flush();
    this.#log.info(
      { types: this.#reflectors.map((r) => `${r.type.plural}.${apiVersionOf(r.type)}`), objects: this.#objects.size, applied: this.#applied.size },
      'Kubernetes source synced',
    );
  }

  /** Stops every reflector; pending changes are dropped. The sink keeps what it has. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#abort.abort();
    this.#onStop();
    this.#batchTimer.cancel();
    await Promise.all(this.#reflectors.map((r) => r.stop()));
  }

  /** The object of `kind` (`Namespace`, `Pod`, ...; core group first) at `namespace/name` as last seen, if any. */
  lookup(kind: string, namespace: string, name: string): KubeObject | undefined {
    const r = this.#reflectors.find((x) => x.type.kind === kind);
    return r?.get(namespace === '' ? name : `${namespace}/${name}`);
  }

  /** Per-object status (every object of a kind ward reads), sorted by API path. */
  status(): ObjectStatus[] {
    return this.#statuses(() => true);
  }

  /**
   * The status of the objects whose latest version was refused (`ok` false), sorted by API path:
   * what `status()` reports of them, without building the status of every other object (the
   * status writer asks at each reconciliation, and a cluster has thousands of good objects).
   */
  rejected(): ObjectStatus[] {
    return this.#statuses((st) => !st.ok);
  }

  #statuses(wanted: (st: ObjectState) => boolean): ObjectStatus[] {
    const out: ObjectStatus[] = [];
    for (const st of this.#objects.values()) {
      if (!wanted(st)) continue;
      const key = st.resource !== undefined ? resourceKeyOf(st.resource) : undefined;
      out.push({
        file: st.path,
        kind: st.type.kind,
        apiVersion: apiVersionOf(st.type),
        namespace: st.namespace,
        name: st.name,
        resourceVersion: st.rv,
        ok: st.ok,
        diagnostics: st.diagnostics,
        resources: key !== undefined ? [key] : [],
        retained: key !== undefined && st.retained ? [key] : [],
        ...(st.lastGoodAt !== undefined ? { lastGoodAt: st.lastGoodAt } : {}),
        ...(st.lastErrorAt !== undefined ? { lastErrorAt: st.lastErrorAt } : {}),
      });
    }
    return out.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0));
  }

  // === versions ===

  /** For each kind, the first of its versions the API server serves (the first one when none is). */
  async #discover(kinds: readonly WatchedKind[]): Promise<ResourceType[]> {
    const served = new Map<string, Promise<Set<string> | undefined>>();
    const resourcesOf = (gv: string): Promise<Set<string> | undefined> => {
      let p = served.get(gv);
      if (p === undefined) {
        p = this.#opts.client
          .request({ method: 'GET', path: gv.includes('/') ? `/apis/${gv}` : `/api/${gv}`, timeoutMs: 30_000, signal: this.#abort.signal })
          .then(
            (res) => {
              const list = (res.body as { resources?: { name?: unknown }[] } | undefined)?.resources ?? [];
              return new Set(list.map((r) => r.name).filter((n): n is string => typeof n === 'string'));
            },
            (e: unknown) => {
              // Not served (404), or not reachable now: the reflector finds out and retries.
              if (!(e instanceof KubeApiError && e.status === 404)) this.#log.debug({ groupVersion: gv, err: errorMessage(e) }, 'API discovery failed');
              return undefined;
            },
          );
        served.set(gv, p);
      }
      return p;
    };
    // All at once: an unreachable server costs one timeout, not one per group version.
    const candidates = kinds.filter((k) => k.group !== '' && k.versions.length > 1);
    await Promise.all(candidates.flatMap((k) => k.versions.map((v) => resourcesOf(`${k.group}/${v}`))));
    const out: ResourceType[] = [];
    for (const k of kinds) {
      let version = k.versions[0] as string;
      if (candidates.includes(k)) {
        for (const v of k.versions) {
          if ((await resourcesOf(`${k.group}/${v}`))?.has(k.plural) === true) {
            version = v;
            break;
          }
        }
      }
      out.push({ group: k.group, version, plural: k.plural, kind: k.kind, namespaced: k.namespaced });
    }
    return out;
  }

  // === batches ===

  #schedule(): void {
    if (this.#stopped || !this.#ready) return;
    this.#batchTimer.arm(this.#pendingSince);
  }

  #flush(): void {
    if (this.#stopped) return;
    if (this.#running) {
      this.#schedule();
      return;
    }
    this.#running = true;
    try {
      this.#runBatch();
    } catch (err) {
      // A bug, not bad input: keep serving what is applied.
      this.#log.error({ err: errorMessage(err) }, 'applying Kubernetes changes failed');
    } finally {
      this.#running = false;
    }
  }

  #runBatch(): void {
    const startedAtMs = this.#pendingSince ?? Date.now();
    const ids = this.#pending;
    this.#pending = new Set();
    this.#pendingSince = undefined;
    const dirty = new Set(this.#retry);
    const paths: string[] = [];
    const now = Date.now();
    for (const id of ids) {
      const bar = id.indexOf('|');
      const reflector = this.#reflectors[Number(id.slice(0, bar))];
      if (reflector === undefined) continue;
      const obj = reflector.get(id.slice(bar + 1));
      this.#notifyObject(reflector.type, id.slice(bar + 1), obj);
      const st = this.#objects.get(id);
      if (obj === undefined) {
        if (st === undefined) continue;
        this.#objects.delete(id);
        paths.push(st.path);
        if (st.resource !== undefined) this.#release(id, st.resource, dirty);
        continue;
      }
      if (st !== undefined && st.rv === obj.metadata.resourceVersion && st.uid === obj.metadata.uid) continue;
      paths.push(this.#process(id, reflector.type, obj, st, now, dirty));
    }
    this.#apply(dirty, startedAtMs, paths.sort());
  }

  #notifyObject(type: ResourceType, key: string, obj: KubeObject | undefined): void {
    if (this.#opts.onObject === undefined) return;
    try {
      this.#opts.onObject(type, key, obj);
    } catch (err) {
      // A listener's bug must not cost the indexes this batch.
      this.#log.error({ err: errorMessage(err) }, 'object listener threw');
    }
  }

  /** Forgets that object `id` holds resource `r` (it was deleted). */
  #release(id: string, r: Resource, dirty: Set<string>): void {
    const k = resourceKeyString(resourceKeyOf(r));
    if (this.#holder.get(k) === id) this.#holder.delete(k);
    dirty.add(k);
  }

  /** Decodes and admits a new version of an object; returns its path. */
  #process(id: string, type: ResourceType, obj: KubeObject, prev: ObjectState | undefined, now: number, dirty: Set<string>): string {
    const path = prev?.path ?? objectPath(type, obj);
    const st: ObjectState = prev ?? {
      path,
      type,
      namespace: obj.metadata.namespace ?? '',
      name: obj.metadata.name,
      rv: undefined,
      uid: undefined,
      resource: undefined,
      retained: false,
      diagnostics: [],
      ok: true,
      lastGoodAt: undefined,
      lastErrorAt: undefined,
    };
    // A new uid at the same name is a new object: nothing of the old one stays in force.
    if (prev !== undefined && prev.uid !== obj.metadata.uid && prev.resource !== undefined) {
      this.#release(id, prev.resource, dirty);
      st.resource = undefined;
    }
    st.rv = obj.metadata.resourceVersion;
    st.uid = obj.metadata.uid;
    const wasOk = st.ok;
    const admission = admitDocuments([documentFromObject(obj, path)]);
    const doc = admission.documents[0];
    st.diagnostics = admission.diagnostics;
    let fresh = doc?.resource;
    if (fresh?.kind === 'Pod') {
      const owner = podOwner(obj);
      if (owner !== undefined) fresh = { ...fresh, owner };
    }
    if (fresh !== undefined) {
      st.ok = !st.diagnostics.some(isError);
      const k = resourceKeyString(resourceKeyOf(fresh));
      if (st.resource === undefined || !sameContent(st.resource, fresh)) {
        st.resource = fresh;
        this.#holder.set(k, id);
        dirty.add(k);
      }
      st.retained = false;
    } else {
      st.ok = false;
      st.retained = st.resource !== undefined;
    }
    if (st.ok) st.lastGoodAt = now;
    else st.lastErrorAt = now;
    this.#objects.set(id, st);
    if (!st.ok) {
      // Once per resourceVersion: only a new version is processed again.
      this.#log.warn(
        { object: path, resourceVersion: st.rv, diagnostics: st.diagnostics.filter(isError).map(formatDiagnostic) },
        st.retained ? 'object rejected; its last good version stays in force' : 'object rejected',
      );
    } else if (!wasOk) {
      this.#log.info({ object: path }, 'object is valid again');
    }
    return path;
  }

  /** Applies the resource keys in `dirty` to the sink, as one transaction. */
  #apply(dirty: Set<string>, startedAtMs: number, paths: string[]): void {
    const applies: Resource[] = [];
    const deletes: ResourceKey[] = [];
    for (const k of dirty) {
      const holder = this.#holder.get(k);
      const desired = holder !== undefined ? this.#objects.get(holder)?.resource : undefined;
      const applied = this.#applied.get(k);
      if (desired !== undefined && desired !== applied) applies.push(desired);
      else if (desired === undefined && applied !== undefined) deletes.push(resourceKeyOf(applied));
    }
    this.#lastChangeStartedAt = startedAtMs;
    if (applies.length + deletes.length > 0) {
      try {
        this.#opts.sink.update((tx) => {
          for (const k of deletes) tx.delete(k);
          for (const r of applies) tx.apply(r);
        });
      } catch (err) {
        // The sink keeps what it last accepted: retry the same keys with the next batch.
        this.#retry = dirty;
        const delayMs = this.#sinkBackoff.next();
        this.#log.error({ err: errorMessage(err), delayMs }, 'the sink failed to apply Kubernetes changes; retrying');
        setTimeout(() => {
          this.#pendingSince ??= Date.now();
          this.#flush();
        }, delayMs).unref();
        return;
      }
      this.#sinkBackoff.reset();
      this.#batches++;
    }
    this.#retry = new Set();
    for (const r of applies) this.#applied.set(resourceKeyString(resourceKeyOf(r)), r);
    for (const k of deletes) this.#applied.delete(resourceKeyString(k));
    if (applies.length + deletes.length > 0 || paths.length > 0 || !this.#initialReported) {
      this.#initialReported = true;
      this.#opts.onChange?.({ applied: applies.length, deleted: deletes.length, files: paths, startedAtMs });
    }
  }
}
