/**
 * The proxy's view of its inbound policies (POLICY-SEMANTICS §4.8, §5.1): one `WatchPort` stream
 * per inbound port, each message compiled once and published. When a stream breaks, the last
 * policy stays in force and the stream is re-opened with exponential backoff; a port that has
 * never received a policy has none, and the proxy must fail closed on it.
 */
import type { StreamHandlers, WireResult } from '../api/index.js';
import { type CompiledServer, type CompileServerOptions, compileServer, deepEqual, type InboundServer } from '../core/index.js';
import { Backoff, type BackoffOptions, errorMessage, type Logger, MeshError, silentLogger, type Timers, UNREF_TIMERS } from '../shared/index.js';

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
export interface PolicyWatcherOptions {
  readonly client: PolicyWatchClient;
  /** `PortSpec.workload`, e.g. JSON `{"ns":"emojivoto","pod":"web-0"}` (§5.3). */
  readonly workload: string;
  /** The inbound ports watched from the start (more can be added with `watch`). */
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

const DEFAULT_BACKOFF: BackoffOptions = { minMs: 100, maxMs: 10_000 };

/** The state of one watched port. */
interface PortWatch {
  readonly port: number;
  readonly backoff: Backoff;
  readonly listeners: Set<PolicyListener>;
  current: CompiledServer | undefined;
  previous: CompiledServer | undefined;
  /** Cancels the open stream; undefined while waiting to reconnect. */
  cancel: (() => void) | undefined;
  timer: unknown;
}

/**
 * Watches the inbound policy of a workload's ports and keeps the latest compiled policy of each.
 *
 * Invariants: a port's policy only ever changes to a newer valid message (invalid messages are
 * logged and ignored; a broken stream keeps the last policy); a message equal to the current
 * policy (the first message after a reconnect, usually) publishes nothing, so connections are
 * not needlessly re-checked; after `stop()` no stream is open, no timer is pending and no
 * listener is called.
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
  #stopped = false;

  /** Opens one stream per port in `opts.ports` right away. */
  constructor(opts: PolicyWatcherOptions) {
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

  /** The ports being watched, in the order they were added. */
  get ports(): number[] {
    return [...this.#ports.keys()];
  }

  /**
   * Starts watching `port` (a port learned at runtime, e.g. from a transport header). Idempotent;
   * ignored after `stop()`. Throws `RangeError` for a number that is not a TCP port.
   */
  watch(port: number): void {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`invalid port ${port}`);
    if (this.#stopped || this.#ports.has(port)) return;
    const w: PortWatch = {
      port,
      backoff: new Backoff(this.#backoff),
      listeners: new Set(),
      current: undefined,
      previous: undefined,
      cancel: undefined,
      timer: undefined,
    };
    this.#ports.set(port, w);
    this.#open(w);
  }

  /** The port's latest policy; `undefined` (never received, or not watched) means fail closed. */
  current(port: number): CompiledServer | undefined {
    return this.#ports.get(port)?.current;
  }

  /** The policy the port's latest policy replaced (`undefined` before the second one). */
  previous(port: number): CompiledServer | undefined {
    return this.#ports.get(port)?.previous;
  }

  /** True when every watched port has a policy. */
  isReady(): boolean {
    for (const w of this.#ports.values()) if (w.current === undefined) return false;
    return true;
  }

  /**
   * Resolves once every watched port (including ports added meanwhile) has a policy; rejects
   * with `MeshError` `ERR_POLICY_WATCH_STOPPED` if `stop()` comes first. Callers bound the wait.
   */
  ready(): Promise<void> {
    if (this.#stopped) return Promise.reject(new MeshError('ERR_POLICY_WATCH_STOPPED', 'the policy watcher was stopped'));
    if (this.isReady()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#readyWaiters.add({ resolve, reject });
    });
  }

  /**
   * Calls `listener(next, previous)` for each later change of `port`'s policy (not for the
   * current one; read that with `current`). Starts watching `port` if it is not watched yet.
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

  /** Cancels every stream and pending reconnect and drops all listeners. Policies stay readable. Idempotent. */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    for (const w of this.#ports.values()) {
      w.cancel?.();
      w.cancel = undefined;
      if (w.timer !== undefined) this.#timers.clearTimeout(w.timer);
      w.timer = undefined;
      w.listeners.clear();
    }
    const err = new MeshError('ERR_POLICY_WATCH_STOPPED', 'the policy watcher was stopped');
    for (const waiter of this.#readyWaiters) waiter.reject(err);
    this.#readyWaiters.clear();
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
