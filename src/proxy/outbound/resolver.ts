/**
 * Service discovery of the outbound proxy (POLICY-SEMANTICS §5.5): what a `host:port` the
 * application asked for resolves to, kept up to date from the controller's Destination API.
 *
 * Names: `svc.ns.svc.<cluster-domain>` is looked up as is; the short forms `svc.ns.svc` and
 * `svc.ns` are expanded to it, and a single label `svc` to the proxy's own namespace (what the
 * Kubernetes DNS search path does for a pod). An IP address is looked up as `ip:port`. Anything
 * else is not a cluster name and resolves to `unknown` without asking the controller.
 *
 * {@link DestinationCache} keeps one `Destination.Get` stream per authority, shared by every
 * request to it, and maintains the endpoint set from its `add` / `remove` / `noEndpoints` events.
 * Invariants:
 * - a broken stream keeps the last endpoint set in force and is re-opened with exponential
 *   backoff; the first event of the new stream replaces the set (a fresh stream starts with the
 *   full state), so endpoints removed while it was down do not linger;
 * - a stream the controller refuses (`INVALID_ARGUMENT`, `NOT_FOUND`) is not retried: the answer
 *   is cached for `negativeTtlMs`, then the next lookup asks again;
 * - lookups wait for the first event at most `lookupTimeoutMs` (one timer per authority, not per
 *   request); after that, lookups of an authority still without an answer fail fast with
 *   `unavailable` until one arrives;
 * - an authority not looked up for `idleTimeoutMs` is forgotten and its stream cancelled;
 * - after `close()` no stream is open and no timer is pending.
 *
 * Outcomes: endpoints; an IP the controller does not know → `direct` (connect to it as is,
 * without mesh TLS); a name it does not know → `unknown`; a known service without endpoints →
 * `no-endpoints`; no answer in time → `unavailable`.
 */
import type { DestinationEndpoint, DestinationEvent, GrpcError, StreamHandlers, WireResult } from '../../api/index.js';
import { formatIp, parseIp } from '../../core/index.js';
import { Backoff, type BackoffOptions, type Logger, silentLogger, type Timers, UNREF_TIMERS } from '../../shared/index.js';
import type { OutboundTarget } from '../transport/outbound-target.js';

/** What the cache needs of a Destination client (structurally, `DestinationClient`). */
export interface DestinationSource {
  /** Opens a `Get` stream for `path`; returns the cancel function (after which no handler is called). */
  get(path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>): () => void;
}

export type { OutboundTarget } from '../transport/outbound-target.js';

/** Result of {@link parseOutboundAuthority}. */
export type OutboundTargetParse = { readonly ok: true; readonly target: OutboundTarget } | { readonly ok: false; readonly reason: string };

/** How names are expanded. */
export interface OutboundNaming {
  /** The cluster domain (default `cluster.local`). */
  readonly clusterDomain?: string;
  /** The proxy's own namespace: single-label names are services in it. Without it they are refused. */
  readonly namespace?: string;
}

/** The resolution of a target. */
export type OutboundResolution =
  | { readonly kind: 'endpoints'; readonly endpoints: readonly DestinationEndpoint[] }
  /** An IP the controller does not know: connect to it directly, without mesh TLS. */
  | { readonly kind: 'direct'; readonly ip: string; readonly port: number }
  | { readonly kind: 'unknown'; readonly reason: string }
  | { readonly kind: 'no-endpoints'; readonly reason: string }
  | { readonly kind: 'unavailable'; readonly reason: string };

/** Options of {@link DestinationCache}. */
export interface DestinationCacheOptions extends OutboundNaming {
  readonly source: DestinationSource;
  /** Delays between reconnects of a stream (default 100 ms doubling to 10 s). */
  readonly backoff?: BackoffOptions;
  /** How long a lookup waits for the first answer about an authority (default 5 s). */
  readonly lookupTimeoutMs?: number;
  /** An authority not looked up for this long is forgotten (default 60 s). */
  readonly idleTimeoutMs?: number;
  /** How long a refusal (`INVALID_ARGUMENT` / `NOT_FOUND`) is believed (default 5 s). */
  readonly negativeTtlMs?: number;
  readonly logger?: Logger;
  /** Timer functions (tests inject their own). Default: real timers, unref'd. */
  readonly timers?: Timers;
  /** Clock in ms (tests inject their own). Default `Date.now`. */
  readonly now?: () => number;
}

/** Counters of a {@link DestinationCache}. */
export interface DestinationCacheStats {
  /** Authorities currently cached. */
  readonly authorities: number;
  /** Streams currently open. */
  readonly streams: number;
  /** Streams opened since start (first opens and reconnects). */
  readonly streamsOpened: number;
  /** Authorities forgotten for being idle. */
  readonly evicted: number;
}

const DEFAULT_CLUSTER_DOMAIN = 'cluster.local';
const DEFAULT_BACKOFF: BackoffOptions = { minMs: 100, maxMs: 10_000 };
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** Authorities whose parse {@link DestinationCache.parse} remembers, per kind of call (with or without a default port). */
const PARSE_MEMO_MAX = 1024;

/** A remembered parse. */
interface ParsedAuthority {
  readonly defaultPort: number | undefined;
  readonly result: OutboundTargetParse;
}

/**
 * Parses an authority (`host:port`, `[ip6]:port`, or `host` when `defaultPort` is given) into a
 * target. The host may be an IP address or a cluster service name (see the module comment).
 */
export function parseOutboundAuthority(authority: string, naming: OutboundNaming = {}, defaultPort?: number): OutboundTargetParse {
  let host: string;
  let portText: string | undefined;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close === -1) return { ok: false, reason: `invalid authority ${JSON.stringify(authority)}: unterminated [` };
    host = authority.slice(1, close);
    const rest = authority.slice(close + 1);
    if (rest !== '' && !rest.startsWith(':')) return { ok: false, reason: `invalid authority ${JSON.stringify(authority)}` };
    portText = rest === '' ? undefined : rest.slice(1);
    if (!host.includes(':') || parseIp(host) === undefined)
      return { ok: false, reason: `invalid authority ${JSON.stringify(authority)}: not an IPv6 address in brackets` };
  } else {
    const colon = authority.lastIndexOf(':');
    if (colon !== -1 && authority.indexOf(':') !== colon)
      return { ok: false, reason: `invalid authority ${JSON.stringify(authority)}: write IPv6 addresses as [addr]:port` };
    host = colon === -1 ? authority : authority.slice(0, colon);
    portText = colon === -1 ? undefined : authority.slice(colon + 1);
  }
  let port: number;
  if (portText === undefined) {
    if (defaultPort === undefined) return { ok: false, reason: `invalid authority ${JSON.stringify(authority)}: no port` };
    port = defaultPort;
  } else {
    port = /^\d{1,5}$/.test(portText) ? Number(portText) : Number.NaN;
    if (!(port >= 1 && port <= 65_535)) return { ok: false, reason: `invalid authority ${JSON.stringify(authority)}: bad port` };
  }
  const ip = parseIp(host);
  if (ip !== undefined) {
    const text = formatIp(ip);
    return { ok: true, target: { kind: 'ip', host: text, port, path: ip.v === 6 ? `[${text}]:${port}` : `${text}:${port}` } };
  }
  const fqdn = expandServiceName(host, naming);
  if (typeof fqdn !== 'string') return { ok: false, reason: fqdn.reason };
  return { ok: true, target: { kind: 'name', host: fqdn, port, path: `${fqdn}:${port}` } };
}

/** `svc`, `svc.ns`, `svc.ns.svc` or `svc.ns.svc.<domain>` → `svc.ns.svc.<domain>`. */
function expandServiceName(host: string, naming: OutboundNaming): string | { reason: string } {
  const domain = (naming.clusterDomain ?? DEFAULT_CLUSTER_DOMAIN).toLowerCase();
  const name = host.toLowerCase().replace(/\.$/, '');
  const suffix = `.svc.${domain}`;
  let labels: string[];
  if (name.endsWith(suffix)) labels = name.slice(0, -suffix.length).split('.');
  else if (name.endsWith('.svc')) labels = name.slice(0, -'.svc'.length).split('.');
  else labels = name.split('.');
  if (labels.length === 1 && naming.namespace !== undefined) labels.push(naming.namespace);
  const [svc, ns] = labels;
  if (labels.length !== 2 || svc === undefined || ns === undefined || !DNS_LABEL.test(svc) || !DNS_LABEL.test(ns))
    return { reason: `${JSON.stringify(host)} is not a cluster service name (svc.ns.svc.${domain}, svc.ns.svc, svc.ns or svc)` };
  return `${svc}.${ns}${suffix}`;
}

/** One cached authority. */
interface Entry {
  readonly target: OutboundTarget;
  readonly backoff: Backoff;
  readonly endpoints: Map<string, DestinationEndpoint>;
  /** Snapshot of `endpoints` handed to lookups; rebuilt lazily after a change. */
  list: readonly DestinationEndpoint[] | undefined;
  /** `pending` until the first answer; `refused` after INVALID_ARGUMENT / NOT_FOUND. */
  status: 'pending' | 'known' | 'refused';
  /** For `known`: whether the controller knows the target (false = `noEndpoints{exists: false}`). */
  exists: boolean;
  /** Why the controller refused the target. */
  refusal: string;
  /** Until when a refusal is believed. */
  refusedUntilMs: number;
  /** The next event starts a fresh stream's state: it replaces the set. */
  resync: boolean;
  /** Lookups past the first-answer deadline fail fast until an answer arrives. */
  failFast: boolean;
  /** Cancels the open stream; undefined while none is open. */
  cancel: (() => void) | undefined;
  /** Bumped whenever the open stream is replaced or dropped. */
  generation: number;
  reconnectTimer: unknown;
  deadlineTimer: unknown;
  readonly waiters: Set<(r: OutboundResolution) => void>;
  lastUsedMs: number;
}

function addrKey(ip: string, port: number): string {
  return `${ip}|${port}`;
}

/** One shared Destination stream per authority; see the module comment. */
export class DestinationCache {
  readonly #source: DestinationSource;
  readonly #naming: OutboundNaming;
  /** Parses by authority: calls with a default port (one per caller in practice) and without one. */
  readonly #parsed = new Map<string, ParsedAuthority>();
  readonly #parsedNoDefault = new Map<string, ParsedAuthority>();
  readonly #backoff: BackoffOptions;
  readonly #lookupTimeoutMs: number;
  readonly #idleTimeoutMs: number;
  readonly #negativeTtlMs: number;
  readonly #log: Logger;
  readonly #timers: Timers;
  readonly #now: () => number;
  readonly #entries = new Map<string, Entry>();
  /** What each endpoint object was announced for (endpoints are parsed per stream, so per target). */
  readonly #targets = new WeakMap<DestinationEndpoint, OutboundTarget>();
  #sweepTimer: unknown;
  #streamsOpened = 0;
  #evicted = 0;
  #closed = false;

  /** Validates the options; no stream is opened before the first lookup. Throws RangeError for bad timeouts. */
  constructor(opts: DestinationCacheOptions) {
    this.#source = opts.source;
    this.#naming = { clusterDomain: opts.clusterDomain ?? DEFAULT_CLUSTER_DOMAIN, ...(opts.namespace !== undefined ? { namespace: opts.namespace } : {}) };
    this.#backoff = opts.backoff ?? DEFAULT_BACKOFF;
    new Backoff(this.#backoff);
    this.#lookupTimeoutMs = checkMs(opts.lookupTimeoutMs ?? 5_000, 'lookupTimeoutMs');
    this.#idleTimeoutMs = checkMs(opts.idleTimeoutMs ?? 60_000, 'idleTimeoutMs');
    this.#negativeTtlMs = checkMs(opts.negativeTtlMs ?? 5_000, 'negativeTtlMs');
    this.#log = opts.logger ?? silentLogger();
    this.#timers = opts.timers ?? UNREF_TIMERS;
    this.#now = opts.now ?? Date.now;
  }

  /** How authorities are parsed (cluster domain and own namespace). */
  get naming(): OutboundNaming {
    return this.#naming;
  }

  /**
   * Parses `authority` with this cache's naming (see {@link parseOutboundAuthority}). Successful
   * parses are remembered per authority and default port (the parse is pure); the memo is emptied
   * once it holds {@link PARSE_MEMO_MAX} authorities.
   */
  parse(authority: string, defaultPort?: number): OutboundTargetParse {
    const memo = defaultPort === undefined ? this.#parsedNoDefault : this.#parsed;
    const hit = memo.get(authority);
    if (hit !== undefined && hit.defaultPort === defaultPort) return hit.result;
    const result = parseOutboundAuthority(authority, this.#naming, defaultPort);
    // Only what parsed: a valid authority is short (DNS labels, an IP), a refused one can be any size.
    if (!result.ok) return result;
    if (memo.size >= PARSE_MEMO_MAX) memo.clear();
    memo.set(authority, { defaultPort, result });
    return result;
  }

  /**
   * The current resolution of `target`, or undefined while the first answer is awaited (the
   * stream is then opened). Marks the authority as used.
   */
  lookup(target: OutboundTarget): OutboundResolution | undefined {
    if (this.#closed) return { kind: 'unavailable', reason: 'the outbound proxy is closing' };
    const now = this.#now();
    let e = this.#entries.get(target.path);
    if (e === undefined) {
      e = this.#create(target);
      this.#entries.set(target.path, e);
      this.#open(e);
      this.#scheduleSweep();
    } else if (e.status === 'refused' && now >= e.refusedUntilMs) {
      // The refusal has expired: ask again.
      e.status = 'pending';
      e.failFast = false;
      this.#open(e);
    }
    e.lastUsedMs = now;
    return this.#answer(e);
  }

  /** Resolves `target`, waiting at most the lookup timeout for a first answer. */
  resolve(target: OutboundTarget): Promise<OutboundResolution> {
    const now = this.lookup(target);
    if (now !== undefined) return Promise.resolve(now);
    const e = this.#entries.get(target.path) as Entry;
    return new Promise((resolve) => {
      e.waiters.add(resolve);
    });
  }

  /** The target an endpoint of a resolution was announced for (for metric labels); undefined for others. */
  targetOf(endpoint: DestinationEndpoint): OutboundTarget | undefined {
    return this.#targets.get(endpoint);
  }

  /** Counters (see {@link DestinationCacheStats}). */
  stats(): DestinationCacheStats {
    let streams = 0;
    for (const e of this.#entries.values()) if (e.cancel !== undefined) streams++;
    return { authorities: this.#entries.size, streams, streamsOpened: this.#streamsOpened, evicted: this.#evicted };
  }

  /** Cancels every stream and timer; pending lookups get `unavailable`. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#sweepTimer !== undefined) this.#timers.clearTimeout(this.#sweepTimer);
    this.#sweepTimer = undefined;
    for (const e of this.#entries.values()) this.#drop(e, { kind: 'unavailable', reason: 'the outbound proxy is closing' });
    this.#entries.clear();
  }

  #create(target: OutboundTarget): Entry {
    return {
      target,
      backoff: new Backoff(this.#backoff),
      endpoints: new Map(),
      list: undefined,
      status: 'pending',
      exists: false,
      refusal: '',
      refusedUntilMs: 0,
      resync: false,
      failFast: false,
      cancel: undefined,
      generation: 0,
      reconnectTimer: undefined,
      deadlineTimer: undefined,
      waiters: new Set(),
      lastUsedMs: this.#now(),
    };
  }

  /** The answer for an entry's current state; undefined while waiting (arms the first-answer deadline). */
  #answer(e: Entry): OutboundResolution | undefined {
    const t = e.target;
    switch (e.status) {
      case 'pending':
        if (e.failFast) return { kind: 'unavailable', reason: `no answer from the destination service about ${t.path}` };
        if (e.deadlineTimer === undefined) e.deadlineTimer = this.#timers.setTimeout(() => this.#onDeadline(e), this.#lookupTimeoutMs);
        return undefined;
      case 'refused':
        return t.kind === 'ip' ? { kind: 'direct', ip: t.host, port: t.port } : { kind: 'unknown', reason: `unknown service ${t.path}: ${e.refusal}` };
      case 'known':
        if (e.endpoints.size > 0) {
          e.list ??= [...e.endpoints.values()];
          return { kind: 'endpoints', endpoints: e.list };
        }
        if (!e.exists) return t.kind === 'ip' ? { kind: 'direct', ip: t.host, port: t.port } : { kind: 'unknown', reason: `unknown service ${t.path}` };
        return { kind: 'no-endpoints', reason: `service ${t.path} has no endpoints` };
    }
  }

  #onDeadline(e: Entry): void {
    e.deadlineTimer = undefined;
    if (e.status !== 'pending' || this.#entries.get(e.target.path) !== e) return;
    e.failFast = true;
    this.#wake(e);
  }

  /** Hands the current answer to every waiter (when there is one). */
  #wake(e: Entry): void {
    if (e.waiters.size === 0) return;
    const r = this.#answer(e);
    if (r === undefined) return;
    const waiters = [...e.waiters];
    e.waiters.clear();
    for (const w of waiters) w(r);
  }

  #settled(e: Entry): void {
    if (e.deadlineTimer !== undefined) {
      this.#timers.clearTimeout(e.deadlineTimer);
      e.deadlineTimer = undefined;
    }
    e.failFast = false;
    this.#wake(e);
  }

  #open(e: Entry): void {
    e.reconnectTimer = undefined;
    if (this.#closed) return;
    this.#streamsOpened++;
    // Handlers of a stream that was replaced or dropped are ignored.
    const generation = ++e.generation;
    const isCurrent = () => e.generation === generation && !this.#closed;
    const cancel = this.#source.get(e.target.path, {
      onMessage: (m) => {
        if (!isCurrent()) return;
        if (!m.ok) {
          this.#log.warn({ path: e.target.path, err: m.message }, 'invalid destination update ignored');
          return;
        }
        this.#apply(e, m.value);
      },
      onEnd: (err) => {
        if (!isCurrent()) return;
        e.generation++;
        e.cancel = undefined;
        this.#onEnd(e, err);
      },
    });
    // The source may have ended the stream synchronously.
    if (isCurrent()) e.cancel = cancel;
  }

  #apply(e: Entry, ev: DestinationEvent): void {
    if (e.resync) {
      e.resync = false;
      e.endpoints.clear();
    }
    e.backoff.reset();
    switch (ev.kind) {
      case 'add':
        for (const ep of ev.endpoints) {
          e.endpoints.set(addrKey(ep.ip, ep.port), ep);
          this.#targets.set(ep, e.target);
        }
        e.exists = true;
        break;
      case 'remove':
        for (const a of ev.addrs) e.endpoints.delete(addrKey(a.ip, a.port));
        break;
      case 'noEndpoints':
        e.endpoints.clear();
        e.exists = ev.exists;
        break;
    }
    e.list = undefined;
    e.status = 'known';
    if (this.#log.isLevelEnabled('debug')) this.#log.debug({ path: e.target.path, event: ev.kind, endpoints: e.endpoints.size }, 'destination update');
    this.#settled(e);
  }

  #onEnd(e: Entry, err: GrpcError | undefined): void {
    if (err !== undefined && (err.code === 'INVALID_ARGUMENT' || err.code === 'NOT_FOUND')) {
      // A definite answer: no reconnect; believed for a while, then asked again on use.
      e.status = 'refused';
      e.refusal = err.details === '' ? err.code : err.details;
      e.refusedUntilMs = this.#now() + this.#negativeTtlMs;
      e.endpoints.clear();
      e.list = undefined;
      this.#settled(e);
      return;
    }
    // Keep the last set in force; the reconnected stream's first event replaces it.
    e.resync = true;
    const delay = e.backoff.next();
    this.#log.warn({ path: e.target.path, err: err?.message ?? 'stream closed by the server', retryInMs: delay }, 'destination stream ended; reconnecting');
    e.reconnectTimer = this.#timers.setTimeout(() => this.#open(e), delay);
  }

  /** Forgets an entry: cancels its stream and timers, answers its waiters with `answer`. */
  #drop(e: Entry, answer: OutboundResolution): void {
    e.generation++;
    const cancel = e.cancel;
    e.cancel = undefined;
    cancel?.();
    if (e.reconnectTimer !== undefined) this.#timers.clearTimeout(e.reconnectTimer);
    if (e.deadlineTimer !== undefined) this.#timers.clearTimeout(e.deadlineTimer);
    e.reconnectTimer = undefined;
    e.deadlineTimer = undefined;
    const waiters = [...e.waiters];
    e.waiters.clear();
    for (const w of waiters) w(answer);
  }

  #scheduleSweep(): void {
    if (this.#sweepTimer !== undefined || this.#closed) return;
    this.#sweepTimer = this.#timers.setTimeout(() => this.#sweep(), Math.max(1, Math.floor(this.#idleTimeoutMs / 2)));
  }

  #sweep(): void {
    this.#sweepTimer = undefined;
    const cutoff = this.#now() - this.#idleTimeoutMs;
    for (const [key, e] of this.#entries) {
      if (e.lastUsedMs > cutoff || e.waiters.size > 0) continue;
      this.#entries.delete(key);
      this.#drop(e, { kind: 'unavailable', reason: 'evicted' });
      this.#evicted++;
    }
    if (this.#entries.size > 0) this.#scheduleSweep();
  }
}

function checkMs(ms: number, what: string): number {
  if (!(ms > 0 && ms <= 0x7fff_ffff)) throw new RangeError(`bad ${what} ${ms}`);
  return ms;
}
