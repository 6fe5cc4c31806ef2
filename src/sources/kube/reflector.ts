/**
 * A reflector: the list+watch loop of one resource type, mirroring it into a store keyed by
 * `namespace/name` (or `name` for cluster-scoped types), as client-go's reflector does.
 *
 * Invariants:
 * - The store only ever changes by a watch event or by a complete LIST replacing it at once; a
 *   relist emits the difference (adds, updates, deletes), so what was known before a disconnect
 *   keeps serving until the API server says otherwise.
 * - After a broken watch it resumes from the last resourceVersion seen (events and BOOKMARKs);
 *   only `410 Gone` (an answer or an ERROR event) makes it relist.
 * - 429 waits as long as the server asks (right after a CRD is Established the storage answers
 *   `retryAfterSeconds: 1`); other failures back off exponentially.
 * - A type the server does not serve (404: CRD not installed) is not fatal: it is reported, counts
 *   as synced with no objects, and is retried slowly. A store that had objects is only emptied
 *   when the 404 lasts (a restarting API server may answer 404 for custom types for a moment).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Backoff, errorMessage, type Logger, silentLogger } from '../../shared/index.js';
import { KubeApiError, type KubeClient, type WatchEvent } from './client.js';

/** The parts of an object the reflector reads. */
export interface KubeObject {
  readonly apiVersion?: string;
  readonly kind?: string;
  readonly metadata: {
    readonly name: string;
    readonly namespace?: string;
    readonly resourceVersion?: string;
    readonly uid?: string;
    readonly [k: string]: unknown;
  };
  readonly [k: string]: unknown;
}

/** One API resource type. */
export interface ResourceType {
  /** API group; '' for the core group. */
  readonly group: string;
  readonly version: string;
  /** Lower-case plural as in the URL (`pods`, `servers`). */
  readonly plural: string;
  /** The kind its objects carry (LIST items omit it; the reflector fills it in). */
  readonly kind: string;
  readonly namespaced: boolean;
}

/** `group/version` as in apiVersion. */
export const apiVersionOf = (t: ResourceType): string => (t.group === '' ? t.version : `${t.group}/${t.version}`);

/** The collection URL of a type, across all namespaces or in one. */
export function collectionPath(t: ResourceType, namespace?: string): string {
  const root = t.group === '' ? `/api/${t.version}` : `/apis/${t.group}/${t.version}`;
  return namespace !== undefined && t.namespaced ? `${root}/namespaces/${encodeURIComponent(namespace)}/${t.plural}` : `${root}/${t.plural}`;
}

/** Store key of an object. */
export const objectKey = (o: KubeObject): string =>
  o.metadata.namespace !== undefined && o.metadata.namespace !== '' ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;

/** One change of the store. */
export type ReflectorChange =
  | { readonly type: 'added'; readonly key: string; readonly object: KubeObject }
  | { readonly type: 'updated'; readonly key: string; readonly object: KubeObject; readonly previous: KubeObject }
  | { readonly type: 'deleted'; readonly key: string; readonly previous: KubeObject };

/** Where the reflector is. */
export type ReflectorState = 'starting' | 'listing' | 'watching' | 'waiting' | 'missing' | 'stopped';

/** Counters and state, for metrics and status. */
export interface ReflectorStats {
  readonly state: ReflectorState;
  readonly synced: boolean;
  /** Complete LISTs done (the first one included). */
  readonly lists: number;
  /** LISTs after the first (410 Gone, a type that came back). */
  readonly relists: number;
  /** Watches opened again after one ended or failed. */
  readonly watchRestarts: number;
  /** Watch events received (BOOKMARKs included). */
  readonly events: number;
  /** 429 answers waited out. */
  readonly throttled: number;
  /** 404 answers (the type not served). */
  readonly notFound: number;
  /** Failures (of any kind). */
  readonly errors: number;
  readonly resourceVersion: string | undefined;
  readonly lastError: string | undefined;
  readonly objects: number;
}

/** Settings of a reflector. */
export interface ReflectorOptions {
  readonly client: Pick<KubeClient, 'request' | 'watch'>;
  readonly type: ResourceType;
  /** Only this namespace (default: all). */
  readonly namespace?: string;
  /** `labelSelector` / `fieldSelector` of the LIST and WATCH. */
  readonly labelSelector?: string;
  readonly fieldSelector?: string;
  /** Called with every change batch (one per watch event, one per relist diff), in order. */
  readonly onChange?: (changes: readonly ReflectorChange[]) => void;
  /** Applied to every object before it is stored (e.g. to drop managedFields). */
  readonly transform?: (o: KubeObject) => KubeObject;
  readonly logger?: Logger;
  /** LIST page size (default 500). */
  readonly pageSize?: number;
  /** Backoff after failures (default 200 ms doubling to 30 s). */
  readonly backoff?: { readonly minMs: number; readonly maxMs: number };
  /** Retry period while the type is not served (default 5 s). */
  readonly notFoundRetryMs?: number;
  /** How long a 404 must last before a non-empty store is emptied (default 30 s). */
  readonly notFoundGraceMs?: number;
  /** Server-side watch timeout range in seconds; each watch picks one at random (default 300-600). */
  readonly watchTimeoutSeconds?: readonly [number, number];
}

interface ListPage {
  readonly metadata?: { readonly resourceVersion?: string; readonly continue?: string };
  readonly items?: unknown[];
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function isKubeObject(v: unknown): v is KubeObject {
  return isRecord(v) && isRecord(v.metadata) && typeof v.metadata.name === 'string';
}

/** The list+watch loop of one type. Call `start()` once, `stop()` to end it. */
export class Reflector {
  readonly type: ResourceType;
  readonly #opts: ReflectorOptions;
  readonly #log: Logger;
  readonly #store = new Map<string, KubeObject>();
  readonly #backoff: Backoff;
  readonly #abort = new AbortController();
  #rv: string | undefined;
  #state: ReflectorState = 'starting';
  #synced = false;
  #resolveSynced!: () => void;
  /** Resolves after the first complete LIST (or the first 404 of a type not served). */
  readonly synced: Promise<void>;
  #loop: Promise<void> | undefined;
  #notFoundSince: number | undefined;
  #counters = { lists: 0, relists: 0, watchRestarts: 0, events: 0, throttled: 0, notFound: 0, errors: 0 };
  #lastError: string | undefined;

  constructor(opts: ReflectorOptions) {
    this.type = opts.type;
    this.#opts = opts;
    this.#log = (opts.logger ?? silentLogger()).child({ resource: `${opts.type.plural}.${apiVersionOf(opts.type)}` });
    this.#backoff = new Backoff(opts.backoff ?? { minMs: 200, maxMs: 30_000 });
    this.synced = new Promise((r) => {
      this.#resolveSynced = r;
    });
  }

  /** True after the first complete LIST. */
  get isSynced(): boolean {
    return this.#synced;
  }

  /** The object stored under `key` (`namespace/name` or `name`). */
  get(key: string): KubeObject | undefined {
    return this.#store.get(key);
  }

  /** Every stored object (a snapshot). */
  list(): KubeObject[] {
    return [...this.#store.values()];
  }

  /** Counters and state. */
  stats(): ReflectorStats {
    return { state: this.#state, synced: this.#synced, ...this.#counters, resourceVersion: this.#rv, lastError: this.#lastError, objects: this.#store.size };
  }

  /** Starts the loop (idempotent). */
  start(): void {
    this.#loop ??= this.#run();
  }

  /** Ends the loop and any open request; resolves when it has stopped. */
  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#loop;
    this.#state = 'stopped';
  }

  async #run(): Promise<void> {
    const signal = this.#abort.signal;
    let watched = false;
    while (!signal.aborted) {
      try {
        if (this.#rv === undefined) await this.#list(signal);
        if (signal.aborted) break;
        if (watched) this.#counters.watchRestarts++;
        watched = true;
        const began = Date.now();
        const eventsBefore = this.#counters.events;
        await this.#watch(signal);
        // A watch the server ends at once, again and again, must not become a busy loop.
        if (Date.now() - began < 1000 && this.#counters.events === eventsBefore && !signal.aborted) {
          this.#state = 'waiting';
          await sleep(this.#backoff.next(), undefined, { signal }).catch(() => undefined);
        }
      } catch (e) {
        if (signal.aborted) break;
        await this.#recover(e, signal);
      }
    }
    this.#state = 'stopped';
  }

  /** Decides what a failure means and waits accordingly. */
  async #recover(e: unknown, signal: AbortSignal): Promise<void> {
    this.#counters.errors++;
    this.#lastError = errorMessage(e);
    let delayMs: number;
    if (e instanceof KubeApiError && e.status === 410) {
      this.#log.info({ err: this.#lastError }, 'resource version expired; relisting');
      this.#rv = undefined;
      delayMs = 0;
    } else if (e instanceof KubeApiError && e.status === 429) {
      this.#counters.throttled++;
      delayMs = (e.retryAfterSeconds ?? 1) * 1000;
      this.#log.debug({ err: this.#lastError, delayMs }, 'throttled; retrying as told');
    } else if (e instanceof KubeApiError && e.status === 404) {
      this.#counters.notFound++;
      this.#notFound();
      this.#rv = undefined;
      delayMs = this.#store.size > 0 ? Math.min(this.#backoff.next(), this.#opts.notFoundRetryMs ?? 5000) : (this.#opts.notFoundRetryMs ?? 5000);
    } else {
      delayMs = this.#backoff.next();
      this.#log.warn({ err: this.#lastError, delayMs }, 'list/watch failed; retrying');
    }
    if (delayMs > 0) {
      this.#state = 'waiting';
      try {
        await sleep(delayMs, undefined, { signal });
      } catch {
        // Aborted: the loop ends.
      }
    }
  }

  /** A LIST answered 404: the type is not served (CRD missing or not yet visible). */
  #notFound(): void {
    const now = Date.now();
    const first = this.#notFoundSince === undefined;
    this.#notFoundSince ??= now;
    if (this.#state !== 'missing')
      this.#log.warn(`${this.type.plural}.${this.type.group || 'core'} is not served by the API server (CRD not installed?); retrying`);
    this.#state = 'missing';
    if (this.#store.size === 0) {
      this.#markSynced();
      return;
    }
    // Objects of a type that stays gone are gone (deleting a CRD deletes them); a brief 404 is not.
    if (!first && now - this.#notFoundSince >= (this.#opts.notFoundGraceMs ?? 30_000)) this.#replace([]);
  }

  #markSynced(): void {
    if (this.#synced) return;
    this.#synced = true;
    this.#resolveSynced();
  }

  async #list(signal: AbortSignal): Promise<void> {
    this.#state = 'listing';
    const items: KubeObject[] = [];
    let cont: string | undefined;
    let rv: string | undefined;
    const path = collectionPath(this.type, this.#opts.namespace);
    do {
      const query: Record<string, string> = { limit: String(this.#opts.pageSize ?? 500), ...this.#selectors() };
      if (cont !== undefined) query.continue = cont;
      const res = await this.#opts.client.request({ method: 'GET', path, query, signal, timeoutMs: 60_000 });
      const page = (isRecord(res.body) ? res.body : {}) as ListPage;
      for (const item of page.items ?? []) {
        if (!isKubeObject(item)) continue;
        // LIST items carry no apiVersion/kind; the decoders downstream need them.
        items.push(this.#transform({ ...item, apiVersion: apiVersionOf(this.type), kind: this.type.kind }));
      }
      rv = page.metadata?.resourceVersion;
      cont = page.metadata?.continue !== undefined && page.metadata.continue !== '' ? page.metadata.continue : undefined;
    } while (cont !== undefined && !signal.aborted);
    if (signal.aborted) return;
    if (this.#counters.lists > 0) this.#counters.relists++;
    this.#counters.lists++;
    this.#notFoundSince = undefined;
    this.#replace(items);
    this.#rv = rv;
    this.#markSynced();
    this.#backoff.reset();
  }

  #transform(o: KubeObject): KubeObject {
    return this.#opts.transform !== undefined ? this.#opts.transform(o) : o;
  }

  #selectors(): Record<string, string> {
    const q: Record<string, string> = {};
    if (this.#opts.labelSelector !== undefined) q.labelSelector = this.#opts.labelSelector;
    if (this.#opts.fieldSelector !== undefined) q.fieldSelector = this.#opts.fieldSelector;
    return q;
  }

  /** Replaces the store with `items` at once and emits the difference. */
  #replace(items: readonly KubeObject[]): void {
    const changes: ReflectorChange[] = [];
    const next = new Map<string, KubeObject>();
    for (const object of items) next.set(objectKey(object), object);
    for (const [key, previous] of this.#store) if (!next.has(key)) changes.push({ type: 'deleted', key, previous });
    for (const [key, object] of next) {
      const previous = this.#store.get(key);
      if (previous === undefined) changes.push({ type: 'added', key, object });
      else if (previous.metadata.resourceVersion !== object.metadata.resourceVersion || previous.metadata.uid !== object.metadata.uid) {
        changes.push({ type: 'updated', key, object, previous });
      }
    }
    this.#store.clear();
    for (const [k, v] of next) this.#store.set(k, v);
    if (changes.length > 0) this.#emit(changes);
  }

  #emit(changes: readonly ReflectorChange[]): void {
    try {
      this.#opts.onChange?.(changes);
    } catch (e) {
      // A consumer's bug must not stop the mirror; it is logged loudly.
      this.#log.error({ err: errorMessage(e) }, 'change handler threw');
    }
  }

  async #watch(signal: AbortSignal): Promise<void> {
    const [lo, hi] = this.#opts.watchTimeoutSeconds ?? [300, 600];
    const timeoutSeconds = Math.round(lo + Math.random() * (hi - lo));
    const query: Record<string, string> = {
      allowWatchBookmarks: 'true',
      timeoutSeconds: String(timeoutSeconds),
      resourceVersion: this.#rv ?? '',
      ...this.#selectors(),
    };
    const inner = new AbortController();
    const onAbort = () => inner.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    let failure: Error | undefined;
    this.#state = 'watching';
    try {
      await this.#opts.client.watch(
        collectionPath(this.type, this.#opts.namespace),
        query,
        (event) => {
          try {
            this.#apply(event);
          } catch (e) {
            failure = e instanceof Error ? e : new Error(String(e));
            inner.abort();
          }
        },
        inner.signal,
        { idleTimeoutMs: (timeoutSeconds + 60) * 1000 },
      );
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
    if (failure !== undefined) throw failure;
  }

  #apply(event: WatchEvent): void {
    this.#counters.events++;
    if (event.type === 'ERROR') {
      const status = isRecord(event.object) && typeof event.object.code === 'number' ? event.object.code : 500;
      throw KubeApiError.fromStatus(status, event.object, undefined, 'watch: ');
    }
    if (!isKubeObject(event.object)) return;
    const rv = event.object.metadata.resourceVersion;
    if (event.type === 'BOOKMARK') {
      if (rv !== undefined) this.#rv = rv;
      return;
    }
    // The watch is healthy: the next failure starts the backoff from its minimum again.
    this.#backoff.reset();
    const object = this.#transform({
      ...event.object,
      apiVersion: event.object.apiVersion ?? apiVersionOf(this.type),
      kind: event.object.kind ?? this.type.kind,
    });
    const key = objectKey(object);
    const previous = this.#store.get(key);
    if (event.type === 'DELETED') {
      this.#store.delete(key);
      if (previous !== undefined) this.#emit([{ type: 'deleted', key, previous }]);
    } else {
      this.#store.set(key, object);
      this.#emit([previous === undefined ? { type: 'added', key, object } : { type: 'updated', key, object, previous }]);
    }
    if (rv !== undefined) this.#rv = rv;
  }
}
