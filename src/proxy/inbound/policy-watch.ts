/**
 * The proxy's view of its inbound policies (POLICY-SEMANTICS §4.8, §5.1): one `WatchPort` stream
 * per inbound port, each message compiled once and published. When a stream breaks, the last
 * policy stays in force and the stream is re-opened with exponential backoff. A port that has
 * never received a policy has none, and the proxy must not admit a connection on it.
 *
 * Declared ports (`ports`, the pod's inbound ports, §2.4 `pod-inbound-ports`) are watched from the
 * start, for good, and are what readiness waits for. Any other port is discovered lazily
 * (`discover`, transparent mode: a connection redirected to a port nobody declared): its stream is
 * opened on first use and the caller waits — shared by every caller for that port — for its first
 * policy, at most `discoveryTimeoutMs`; the controller answers as it would for a declared port
 * (usually the pod's default policy), and from then on the port behaves like a declared one
 * (updates, reconnects, stale retention). Because any client can make the proxy open a stream per
 * port, lazily discovered ports are bounded: at most `maxDiscoveredPorts` are watched at once —
 * at the cap the least recently used one that no connection holds is dropped to make room, so a
 * client touching many ports cannot keep others from being discovered; only when every one is
 * held are further ports refused — and one that no connection has used for `discoveryIdleMs`
 * stops being watched (and would be discovered again on its next connection).
 */
import type { StreamHandlers, WireResult } from '../../api/index.js';
import { type CompiledServer, type CompileServerOptions, compileServer, deepEqual, type InboundServer } from '../../core/index.js';
import { Backoff, type BackoffOptions, errorMessage, type Logger, MeshError, silentLogger, type Timers, UNREF_TIMERS } from '../../shared/index.js';

/** What the watcher needs of an inbound policy client (structurally, `InboundPolicyClient`). */
export interface PolicyWatchClient {
  /** Opens a WatchPort stream; returns the cancel function (after which no handler is called). */
  watchPort(workload: string, port: number, handlers: StreamHandlers<WireResult<InboundServer>>): () => void;
}

/**
 * Called with a port's new compiled policy and the one it replaces (`undefined` for the first).
 * Connection owners re-check their connections with `reauthorizeConnection(next, client)`.
 */
export type PolicyListener = (next: CompiledServer, previous: CompiledServer | undefined) => void;

/** Options of {@link PolicyWatcher}. */
export interface PolicyWatcherOptions extends PolicyDiscoveryOptions {
  readonly client: PolicyWatchClient;
  /** `PortSpec.workload`, e.g. JSON `{"ns":"emojivoto","pod":"web-0"}` (§5.3). */
  readonly workload: string;
  /** The declared inbound ports, watched from the start and for good (more can be added with `watch`). */
  readonly ports: readonly number[];
  /** Delays between reconnects of one port (default 100 ms doubling to 10 s); reset by every message received. */
  readonly backoff?: BackoffOptions;
  readonly logger?: Logger;
  /** Timer functions (tests inject counting ones). Default: real timers, unref'd. */
  readonly timers?: Timers;
  /** Called for every published change on any port, before the port's subscribers. */
  readonly onUpdate?: (port: number, next: CompiledServer, previous: CompiledServer | undefined) => void;
  /** How each policy is compiled (local mode narrows the proxy-added localhost authorization). */
  readonly compile?: CompileServerOptions;
}

/** Bounds of lazy policy discovery (see {@link PolicyWatcher.discover}). */
export interface PolicyDiscoveryOptions {
  /** How long callers of `discover` wait for a port's first policy (default 5 s). */
  readonly discoveryTimeoutMs?: number;
  /** How many lazily discovered ports may be watched at once (default 1,024; 0 disables lazy discovery). */
  readonly maxDiscoveredPorts?: number;
  /**
   * A lazily discovered port that no connection has used for this long stops being watched
   * (default 10 min; checked every half of it, so it goes between 1 and 1.5 times this after its
   * last use). A port held with `use`, subscribed to, or being discovered is kept.
   */
  readonly discoveryIdleMs?: number;
}

const DEFAULT_BACKOFF: BackoffOptions = { minMs: 100, maxMs: 10_000 };
/** Default of {@link PolicyDiscoveryOptions.discoveryTimeoutMs}. */
export const DEFAULT_DISCOVERY_TIMEOUT_MS = 5_000;
/** Default of {@link PolicyDiscoveryOptions.maxDiscoveredPorts}. */
export const DEFAULT_MAX_DISCOVERED_PORTS = 1_024;
/** Default of {@link PolicyDiscoveryOptions.discoveryIdleMs}. */
export const DEFAULT_DISCOVERY_IDLE_MS = 10 * 60_000;
const MAX_TIMER_MS = 0x7fff_ffff;

function isPort(port: number): boolean {
  return Number.isInteger(port) && port >= 1 && port <= 65535;
}

function isTimerMs(ms: number): boolean {
  return ms > 0 && ms <= MAX_TIMER_MS;
}

function noop(): void {}

/** A lazily discovered port that no connection, subscriber or pending discovery holds: it may be dropped. */
function isUnheld(w: PortWatch): boolean {
  return w.lazy && w.users === 0 && w.listeners.size === 0 && w.discovery === undefined;
}

function stoppedError(): MeshError {
  return new MeshError('ERR_POLICY_WATCH_STOPPED', 'the policy watcher was stopped');
}

/** The shared wait of every caller of `discover` for one port's first policy. */
interface Discovery {
  readonly promise: Promise<CompiledServer>;
  readonly resolve: (policy: CompiledServer) => void;
  readonly reject: (e: unknown) => void;
  timer: unknown;
}

/** The state of one watched port. */
interface PortWatch {
  readonly port: number;
  /** Discovered on demand (`discover`): bounded, evicted when idle, not part of readiness. */
  readonly lazy: boolean;
  readonly backoff: Backoff;
  readonly listeners: Set<PolicyListener>;
  current: CompiledServer | undefined;
  previous: CompiledServer | undefined;
  /** Cancels the open stream; undefined while waiting to reconnect. */
  cancel: (() => void) | undefined;
  timer: unknown;
  /** Connections using the port now (`use`; lazy ports only). */
  users: number;
  /** When the port was last asked for or left by its last user (`performance.now()`; lazy ports only). */
  lastUsedMs: number;
  /** The pending wait for the first policy, if any. */
  discovery: Discovery | undefined;
}

/**
 * Watches the inbound policy of a workload's ports and keeps the latest compiled policy of each.
 *
 * Invariants: a port's policy only ever changes to a newer valid message (invalid messages are
 * logged and ignored; a broken stream keeps the last policy); a message equal to the current
 * policy (the first message after a reconnect, usually) publishes nothing, so connections are
 * not needlessly re-checked; at most `maxDiscoveredPorts` lazily discovered ports are watched at
 * once and declared ports are never dropped; after `stop()` no stream is open, no timer is pending,
 * no listener is called and no `discover` is left pending.
 */
export class PolicyWatcher {
  readonly #client: PolicyWatchClient;
  readonly #workload: string;
  readonly #backoff: BackoffOptions;
  readonly #log: Logger;
  readonly #timers: Timers;
  readonly #onUpdate: PolicyWatcherOptions['onUpdate'];
  readonly #compile: CompileServerOptions | undefined;
  readonly #ports = new Map<number, PortWatch>();
  readonly #readyWaiters = new Set<{ resolve: () => void; reject: (e: unknown) => void }>();
  readonly #discoveryTimeoutMs: number;
  readonly #maxDiscovered: number;
  readonly #idleMs: number;
  /** Lazily discovered ports being watched. */
  #discovered = 0;
  /** Ports refused at the cap, each logged once (until it is discovered after all). */
  readonly #refused = new Set<number>();
  /** The idle sweep, armed while lazily discovered ports exist. */
  #sweepTimer: unknown;
  #stopped = false;

  /** Opens one stream per port in `opts.ports` right away. Throws RangeError for bad discovery bounds. */
  constructor(opts: PolicyWatcherOptions) {
    const timeoutMs = opts.discoveryTimeoutMs ?? DEFAULT_DISCOVERY_TIMEOUT_MS;
    const maxPorts = opts.maxDiscoveredPorts ?? DEFAULT_MAX_DISCOVERED_PORTS;
    const idleMs = opts.discoveryIdleMs ?? DEFAULT_DISCOVERY_IDLE_MS;
    if (!isTimerMs(timeoutMs)) throw new RangeError(`bad discoveryTimeoutMs ${timeoutMs}`);
    if (!Number.isInteger(maxPorts) || maxPorts < 0 || maxPorts > 65535) throw new RangeError(`bad maxDiscoveredPorts ${maxPorts}`);
    if (!isTimerMs(idleMs)) throw new RangeError(`bad discoveryIdleMs ${idleMs}`);
    this.#discoveryTimeoutMs = timeoutMs;
    this.#maxDiscovered = maxPorts;
    this.#idleMs = idleMs;
    this.#client = opts.client;
    this.#workload = opts.workload;
    this.#backoff = opts.backoff ?? DEFAULT_BACKOFF;
    this.#compile = opts.compile;
    // Fail on bad settings here rather than on the first reconnect.
    new Backoff(this.#backoff);
    this.#log = opts.logger ?? silentLogger();
    this.#timers = opts.timers ?? UNREF_TIMERS;
    this.#onUpdate = opts.onUpdate;
    for (const port of opts.ports) this.watch(port);
  }

  /** The ports being watched (declared and lazily discovered), in the order they were added. */
  get ports(): number[] {
    return [...this.#ports.keys()];
  }

  /** How many lazily discovered ports are watched (`discoveredPorts.length`, without the copy). */
  get discoveredCount(): number {
    return this.#discovered;
  }

  /** The lazily discovered ports being watched, in the order they were discovered. */
  get discoveredPorts(): number[] {
    const out: number[] = [];
    for (const w of this.#ports.values()) if (w.lazy) out.push(w.port);
    return out;
  }

  /**
   * Starts watching `port` as a declared port (never evicted, part of readiness). Idempotent (a
   * port already watched keeps its kind); ignored after `stop()`. Throws `RangeError` for a number
   * that is not a TCP port.
   */
  watch(port: number): void {
    if (!isPort(port)) throw new RangeError(`invalid port ${port}`);
    if (this.#stopped || this.#ports.has(port)) return;
    this.#add(port, false);
  }

  /**
   * The port's policy once it has one: at once when it has, else after its first policy arrives.
   * A port not watched yet is discovered lazily: its stream is opened (counted against
   * `maxDiscoveredPorts`) and stays open whatever the outcome of this wait, until the port is
   * idle. Concurrent callers for a port share one wait, bounded by `discoveryTimeoutMs` from its
   * start. Rejects with `MeshError` `ERR_POLICY_DISCOVERY_TIMEOUT` when no policy came in time,
   * `ERR_POLICY_DISCOVERY_LIMIT` when the port is not watched, the cap is reached and every
   * discovered port is held (logged once per port), `ERR_POLICY_WATCH_STOPPED` after `stop()`; with `RangeError` for a bad port number.
   * Callers should hold the port with `use` while they serve a connection with its policy.
   */
  discover(port: number): Promise<CompiledServer> {
    if (!isPort(port)) return Promise.reject(new RangeError(`invalid port ${port}`));
    if (this.#stopped) return Promise.reject(stoppedError());
    let w = this.#ports.get(port);
    if (w === undefined) {
      // At the cap, the least recently used port nothing holds makes room: otherwise any client
      // (even one every policy denies) could keep every slot taken by touching that many ports.
      if (this.#discovered >= this.#maxDiscovered) this.#evictLeastRecentlyUsed();
      if (this.#discovered >= this.#maxDiscovered) {
        if (!this.#refused.has(port)) {
          this.#refused.add(port);
          this.#log.warn(
            { workload: this.#workload, port, maxDiscoveredPorts: this.#maxDiscovered },
            'inbound policy discovery refused: too many undeclared ports watched; failing closed',
          );
        }
        return Promise.reject(
          new MeshError(
            'ERR_POLICY_DISCOVERY_LIMIT',
            `cannot discover the policy of port ${port}: ${this.#maxDiscovered} undeclared ports are watched already`,
          ),
        );
      }
      this.#refused.delete(port);
      this.#log.debug({ workload: this.#workload, port }, 'discovering the inbound policy of an undeclared port');
      w = this.#add(port, true);
    }
    if (w.lazy) w.lastUsedMs = performance.now();
    if (w.current !== undefined) return Promise.resolve(w.current);
    w.discovery ??= this.#startDiscovery(w);
    return w.discovery.promise;
  }

  /**
   * Marks `port` in use (by a connection) until the returned function is called: a lazily
   * discovered port is not evicted while in use, and its idle time counts from its last release.
   * For a declared or unwatched port this does nothing. The release function is idempotent.
   */
  use(port: number): () => void {
    const w = this.#ports.get(port);
    if (w === undefined || !w.lazy) return noop;
    w.users++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      w.users--;
      w.lastUsedMs = performance.now();
    };
  }

  /**
   * The port's latest policy; `undefined` (never received, or not watched) means no connection may
   * be admitted on it (in transparent mode the proxy first waits for `discover`).
   */
  current(port: number): CompiledServer | undefined {
    return this.#ports.get(port)?.current;
  }

  /** The policy the port's latest policy replaced (`undefined` before the second one). */
  previous(port: number): CompiledServer | undefined {
    return this.#ports.get(port)?.previous;
  }

  /** True when every declared port has a policy (lazily discovered ports do not count). */
  isReady(): boolean {
    for (const w of this.#ports.values()) if (w.current === undefined && !w.lazy) return false;
    return true;
  }

  /**
   * Resolves once every declared port (including ports added meanwhile) has a policy; rejects
   * with `MeshError` `ERR_POLICY_WATCH_STOPPED` if `stop()` comes first. Callers bound the wait.
   */
  ready(): Promise<void> {
    if (this.#stopped) return Promise.reject(stoppedError());
    if (this.isReady()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#readyWaiters.add({ resolve, reject });
    });
  }

  /**
   * Calls `listener(next, previous)` for each later change of `port`'s policy (not for the
   * current one; read that with `current`). Starts watching `port` (as a declared port) if it is
   * not watched yet. A lazily discovered port with subscribers is not evicted.
   * Returns the unsubscribe function; after `stop()` nothing is subscribed.
   */
  subscribe(port: number, listener: PolicyListener): () => void {
    if (this.#stopped) return () => {};
    let w = this.#ports.get(port);
    if (w === undefined) {
      this.watch(port);
      w = this.#ports.get(port);
    }
    if (w === undefined) return () => {};
    const listeners = w.listeners;
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
    };
  }

  /**
   * Cancels every stream, pending reconnect and idle sweep, drops all listeners and rejects pending
   * `discover` and `ready` calls. Policies stay readable. Idempotent.
   */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    const err = stoppedError();
    for (const w of this.#ports.values()) {
      this.#close(w);
      const d = w.discovery;
      if (d !== undefined) {
        w.discovery = undefined;
        this.#timers.clearTimeout(d.timer);
        d.reject(err);
      }
    }
    if (this.#sweepTimer !== undefined) this.#timers.clearTimeout(this.#sweepTimer);
    this.#sweepTimer = undefined;
    for (const waiter of this.#readyWaiters) waiter.reject(err);
    this.#readyWaiters.clear();
  }

  #add(port: number, lazy: boolean): PortWatch {
    const w: PortWatch = {
      port,
      lazy,
      backoff: new Backoff(this.#backoff),
      listeners: new Set(),
      current: undefined,
      previous: undefined,
      cancel: undefined,
      timer: undefined,
      users: 0,
      lastUsedMs: performance.now(),
      discovery: undefined,
    };
    this.#ports.set(port, w);
    if (lazy) {
      this.#discovered++;
      this.#armSweep();
    }
    this.#open(w);
    return w;
  }

  /** Cancels the port's stream and pending reconnect and drops its listeners. */
  #close(w: PortWatch): void {
    w.cancel?.();
    w.cancel = undefined;
    if (w.timer !== undefined) this.#timers.clearTimeout(w.timer);
    w.timer = undefined;
    w.listeners.clear();
  }

  #startDiscovery(w: PortWatch): Discovery {
    let resolve!: (policy: CompiledServer) => void;
    let reject!: (e: unknown) => void;
    const promise = new Promise<CompiledServer>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const d: Discovery = { promise, resolve, reject, timer: undefined };
    d.timer = this.#timers.setTimeout(() => {
      if (w.discovery !== d) return;
      // The stream stays open (and keeps reconnecting): the next connection waits again, and
      // finds the policy at once if it arrives meanwhile.
      w.discovery = undefined;
      this.#log.warn(
        { workload: this.#workload, port: w.port, timeoutMs: this.#discoveryTimeoutMs },
        'no inbound policy in time for a connection; failing closed',
      );
      d.reject(new MeshError('ERR_POLICY_DISCOVERY_TIMEOUT', `no inbound policy for port ${w.port} within ${this.#discoveryTimeoutMs} ms`));
    }, this.#discoveryTimeoutMs);
    return d;
  }

  #armSweep(): void {
    if (this.#sweepTimer !== undefined || this.#stopped || this.#discovered === 0) return;
    this.#sweepTimer = this.#timers.setTimeout(
      () => {
        this.#sweepTimer = undefined;
        this.#sweep();
        this.#armSweep();
      },
      Math.ceil(this.#idleMs / 2),
    );
  }

  /** Stops watching the lazily discovered ports that nothing has used for `discoveryIdleMs`. */
  #sweep(): void {
    if (this.#stopped) return;
    const now = performance.now();
    for (const w of [...this.#ports.values()]) {
      if (!isUnheld(w) || now - w.lastUsedMs < this.#idleMs) continue;
      this.#drop(w);
      this.#log.info({ workload: this.#workload, port: w.port, idleMs: this.#idleMs }, 'stopped watching the inbound policy of an idle undeclared port');
    }
  }

  /** Stops watching the lazily discovered port that nothing holds and was used least recently, if any. */
  #evictLeastRecentlyUsed(): void {
    let oldest: PortWatch | undefined;
    for (const w of this.#ports.values()) if (isUnheld(w) && (oldest === undefined || w.lastUsedMs < oldest.lastUsedMs)) oldest = w;
    if (oldest === undefined) return;
    this.#drop(oldest);
    this.#log.info(
      { workload: this.#workload, port: oldest.port, maxDiscoveredPorts: this.#maxDiscovered },
      'stopped watching the inbound policy of the least recently used undeclared port, to discover another',
    );
  }

  #drop(w: PortWatch): void {
    this.#close(w);
    this.#ports.delete(w.port);
    this.#discovered--;
  }

  #open(w: PortWatch): void {
    if (this.#stopped) return;
    // A stream that ended must not deliver anything once its successor is open (or the
    // watcher stopped), whatever the client does: each stream gets its own `live` flag.
    let live = true;
    const handlers: StreamHandlers<WireResult<InboundServer>> = {
      onMessage: (m) => {
        if (live && !this.#stopped) this.#receive(w, m);
      },
      onEnd: (error) => {
        if (!live || this.#stopped) return;
        live = false;
        w.cancel = undefined;
        this.#reconnect(w, error === undefined ? 'stream ended' : errorMessage(error), error?.code);
      },
    };
    let cancel: () => void;
    try {
      cancel = this.#client.watchPort(this.#workload, w.port, handlers);
    } catch (e) {
      live = false;
      this.#reconnect(w, errorMessage(e), undefined);
      return;
    }
    // The client may have ended the stream synchronously (then a reconnect is already scheduled).
    if (!live || this.#stopped) {
      cancel();
      return;
    }
    w.cancel = () => {
      live = false;
      cancel();
    };
  }

  #reconnect(w: PortWatch, reason: string, code: string | undefined): void {
    if (this.#stopped) return;
    const retryInMs = w.backoff.next();
    this.#log.warn(
      { workload: this.#workload, port: w.port, code, err: reason, retryInMs, keeping: w.current !== undefined },
      'inbound policy stream ended; reconnecting',
    );
    w.timer = this.#timers.setTimeout(() => {
      w.timer = undefined;
      this.#open(w);
    }, retryInMs);
  }

  #receive(w: PortWatch, m: WireResult<InboundServer>): void {
    // The stream works: the next break starts the backoff over.
    w.backoff.reset();
    if (!m.ok) {
      this.#log.warn({ workload: this.#workload, port: w.port, err: m.message, keeping: w.current !== undefined }, 'ignoring an invalid inbound policy');
      return;
    }
    const prev = w.current;
    if (prev !== undefined && deepEqual(prev.server, m.value)) return;
    const next = compileServer(m.value, this.#compile);
    if (next.invalid !== undefined) this.#log.warn({ workload: this.#workload, port: w.port, err: next.invalid }, 'inbound policy is unusable; failing closed');
    w.previous = prev;
    w.current = next;
    const d = w.discovery;
    if (d !== undefined) {
      w.discovery = undefined;
      this.#timers.clearTimeout(d.timer);
      d.resolve(next);
    }
    this.#log.debug({ workload: this.#workload, port: w.port, server: `${m.value.meta.kind}:${m.value.meta.name}` }, 'inbound policy updated');
    this.#notify(() => this.#onUpdate?.(w.port, next, prev));
    // A listener may unsubscribe itself (or stop the watcher) while we iterate.
    for (const l of [...w.listeners]) {
      if (this.#stopped) return;
      this.#notify(() => l(next, prev));
    }
    if (this.#readyWaiters.size > 0 && this.isReady()) {
      for (const waiter of this.#readyWaiters) waiter.resolve();
      this.#readyWaiters.clear();
    }
  }

  #notify(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.#log.error({ workload: this.#workload, err: errorMessage(e) }, 'policy listener failed');
    }
  }
}
