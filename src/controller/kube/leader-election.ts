/**
 * Leader election through a `coordination.k8s.io/v1` Lease, with client-go's semantics
 * (tools/leaderelection): the replicas race to create or take over the Lease, the holder renews
 * it every retry period, and updates carry the observed resourceVersion, so a 409 Conflict means
 * another replica won that round.
 *
 * Expiry follows client-go, not the record's timestamps: a candidate takes over only after it has
 * seen the same record unchanged for `leaseDurationSeconds` of its own monotonic clock, so clock
 * skew between nodes cannot make a live lease look expired.
 *
 * Safety: a leader that has not renewed within the renew deadline (shorter than the lease
 * duration) stops leading, and `isLeader()` turns false at that instant even if no timer ran,
 * counted from when the last successful renewal was sent. A candidate cannot take over before a
 * full lease duration after it saw that renewal, so two replicas never both believe they lead.
 */
import { type Logger, MeshError, silentLogger, type Timers, UNREF_TIMERS } from '../../shared/index.js';
import { KubeApiError, type KubeRequester } from '../../sources/index.js';

/** Timing and identity of one elector. Defaults are client-go's. */
export interface LeaderElectionOptions {
  readonly client: KubeRequester;
  /** Namespace of the Lease (the controller's). */
  readonly namespace: string;
  /** Lease name; default `ward-controller`. */
  readonly name?: string;
  /** This replica's identity, written as `holderIdentity` (the pod name). */
  readonly identity: string;
  /** How long a seen record stays valid for others; default 15 s (whole seconds on the wire). */
  readonly leaseDurationMs?: number;
  /** How long the leader keeps trying to renew before it stops leading; default 10 s. */
  readonly renewDeadlineMs?: number;
  /** Time between attempts; default 2 s. */
  readonly retryPeriodMs?: number;
  /** Give the Lease up on `stop()` (client-go's ReleaseOnCancel); default true. */
  readonly releaseOnStop?: boolean;
  readonly onStartedLeading?: () => void;
  /** Called when leadership ends: renew deadline missed, Lease taken, or stop. */
  readonly onStoppedLeading?: () => void;
  /** Called when the observed holder changes ('' when nobody holds the Lease). */
  readonly onNewLeader?: (identity: string) => void;
  readonly logger?: Logger;
  readonly timers?: Timers;
  /** Monotonic ms (deadlines); default `performance.now`. */
  readonly monotonicMs?: () => number;
  /** Wall-clock ms (timestamps written into the Lease); default `Date.now`. */
  readonly wallMs?: () => number;
}

/** Counters for metrics and tests. */
export interface LeaderElectionStats {
  /** Times this replica became leader. */
  readonly acquired: number;
  readonly renewals: number;
  /** Attempts that failed on an API error (conflicts excluded). */
  readonly errors: number;
  /** Updates that lost a race (409). */
  readonly conflicts: number;
}

/** The Lease spec as the API has it. */
interface LeaseSpec {
  readonly holderIdentity?: string;
  readonly leaseDurationSeconds?: number;
  readonly acquireTime?: string;
  readonly renewTime?: string;
  readonly leaseTransitions?: number;
}

interface LeaseObject {
  readonly metadata: { readonly resourceVersion?: string; readonly [k: string]: unknown };
  readonly spec?: LeaseSpec;
}

/** Bad timing options (a bug in the caller). */
export class LeaderElectionConfigError extends MeshError {
  constructor(message: string) {
    super('ERR_LEADER_ELECTION_CONFIG', message);
    this.name = 'LeaderElectionConfigError';
  }
}

/** client-go's JitterFactor for candidates' retries. */
const JITTER = 1.2;

/** Kubernetes MicroTime: RFC 3339 with exactly six fractional digits. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** Elects one leader among the replicas that share a Lease. */
export class LeaderElection {
  readonly #client: KubeRequester;
  readonly #path: string;
  readonly #namespace: string;
  readonly #name: string;
  readonly #identity: string;
  readonly #leaseMs: number;
  readonly #leaseSeconds: number;
  readonly #renewDeadlineMs: number;
  readonly #retryMs: number;
  readonly #release: boolean;
  readonly #opts: LeaderElectionOptions;
  readonly #log: Logger;
  readonly #timers: Timers;
  readonly #mono: () => number;
  readonly #wall: () => number;

  #running = false;
  #leading = false;
  /** Monotonic time the last successful acquire/renew was sent. */
  #renewedAt = Number.NEGATIVE_INFINITY;
  #timer: unknown;
  #deadlineTimer: unknown;
  #inflight: Promise<void> | undefined;
  /** The last Lease this replica wrote or read, for the leader's fast-path update. */
  #lease: LeaseObject | undefined;
  #observed: LeaseSpec | undefined;
  #observedRaw = '';
  #observedAt = Number.NEGATIVE_INFINITY;
  #reportedLeader: string | undefined;
  #wonWhileStopping = false;
  #stats = { acquired: 0, renewals: 0, errors: 0, conflicts: 0 };

  constructor(opts: LeaderElectionOptions) {
    this.#opts = opts;
    this.#client = opts.client;
    this.#namespace = opts.namespace;
    this.#name = opts.name ?? 'ward-controller';
    this.#identity = opts.identity;
    this.#leaseMs = opts.leaseDurationMs ?? 15_000;
    this.#renewDeadlineMs = opts.renewDeadlineMs ?? 10_000;
    this.#retryMs = opts.retryPeriodMs ?? 2_000;
    this.#release = opts.releaseOnStop ?? true;
    this.#log = opts.logger ?? silentLogger();
    this.#timers = opts.timers ?? UNREF_TIMERS;
    this.#mono = opts.monotonicMs ?? (() => performance.now());
    this.#wall = opts.wallMs ?? Date.now;
    if (opts.identity === '') throw new LeaderElectionConfigError('leader election needs a non-empty identity');
    if (this.#leaseMs % 1000 !== 0 || this.#leaseMs < 1000) throw new LeaderElectionConfigError(`lease duration ${this.#leaseMs} ms is not whole seconds`);
    if (!(this.#leaseMs > this.#renewDeadlineMs)) throw new LeaderElectionConfigError('lease duration must be greater than the renew deadline');
    if (!(this.#renewDeadlineMs > JITTER * this.#retryMs)) throw new LeaderElectionConfigError(`renew deadline must exceed ${JITTER} × the retry period`);
    this.#leaseSeconds = this.#leaseMs / 1000;
    this.#path = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(this.#namespace)}/leases`;
  }

  /** True while this replica leads and its last renewal is within the renew deadline. */
  isLeader(): boolean {
    return this.#leading && this.#mono() - this.#renewedAt < this.#renewDeadlineMs;
  }

  /** The holder last seen in the Lease ('' = nobody), or undefined before the first read. */
  get leader(): string | undefined {
    return this.#observed?.holderIdentity;
  }

  get identity(): string {
    return this.#identity;
  }

  get stats(): LeaderElectionStats {
    return { ...this.#stats };
  }

  /** Starts campaigning. */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#schedule(0);
  }

  /**
   * Stops campaigning and, when leading, stops leading (onStoppedLeading runs first, so writers
   * stop before the Lease is given up) and releases the Lease unless `release` is false (false
   * behaves like a crash: the others take over once the lease expires).
   */
  async stop(opts: { readonly release?: boolean } = {}): Promise<void> {
    this.#running = false;
    this.#timers.clearTimeout(this.#timer);
    await this.#inflight;
    const holds = this.#leading || this.#wonWhileStopping;
    this.#wonWhileStopping = false;
    this.#stopLeading('stopping');
    if (holds && (opts.release ?? this.#release)) await this.#tryRelease();
  }

  #schedule(ms: number): void {
    this.#timers.clearTimeout(this.#timer);
    this.#timer = this.#timers.setTimeout(() => {
      this.#inflight = this.#tick();
    }, ms);
  }

  async #tick(): Promise<void> {
    if (!this.#running) return;
    const sentAt = this.#mono();
    let ok = false;
    try {
      ok = await this.#tryAcquireOrRenew();
    } catch (e) {
      // A malformed answer is a failed attempt, never an end to campaigning.
      this.#failed('reading the lease', e);
    }
    if (!this.#running) {
      // stop() raced with this attempt: a lease won now must still be released by stop().
      if (ok) this.#wonWhileStopping = true;
      return;
    }
    if (ok) {
      this.#renewedAt = sentAt;
      this.#armDeadline();
      if (this.#leading) this.#stats.renewals++;
      else {
        this.#leading = true;
        this.#stats.acquired++;
        this.#log.info({ lease: `${this.#namespace}/${this.#name}`, identity: this.#identity }, 'became leader');
        this.#opts.onStartedLeading?.();
      }
    } else if (this.#leading && (this.#observed?.holderIdentity ?? this.#identity) !== this.#identity) {
      this.#stopLeading(`lease taken by ${this.#observed?.holderIdentity || 'nobody'}`);
    } else if (this.#leading && !this.isLeader()) {
      this.#stopLeading('renew deadline passed');
    }
    this.#reportLeader();
    // Candidates retry with jitter so that replicas started together spread out (client-go).
    this.#schedule(this.#leading ? this.#retryMs : this.#retryMs * (1 + Math.random() * (JITTER - 1)));
  }

  /** Ends leadership at the renew deadline even when a request hangs or the retry timer is late. */
  #armDeadline(): void {
    this.#timers.clearTimeout(this.#deadlineTimer);
    const due = this.#renewedAt + this.#renewDeadlineMs - this.#mono();
    this.#deadlineTimer = this.#timers.setTimeout(
      () => {
        if (!this.#leading) return;
        // Timers may fire a little early: then wait again for the real deadline.
        if (this.isLeader()) this.#armDeadline();
        else this.#stopLeading('renew deadline passed');
      },
      Math.max(1, due),
    );
  }

  #stopLeading(why: string): void {
    if (!this.#leading) return;
    this.#leading = false;
    this.#timers.clearTimeout(this.#deadlineTimer);
    const fields = { lease: `${this.#namespace}/${this.#name}`, identity: this.#identity, why };
    if (why === 'stopping') this.#log.info(fields, 'stopped leading');
    else this.#log.warn(fields, 'stopped leading');
    this.#opts.onStoppedLeading?.();
  }

  #reportLeader(): void {
    const holder = this.#observed?.holderIdentity ?? '';
    if (this.#observed === undefined || holder === this.#reportedLeader) return;
    this.#reportedLeader = holder;
    this.#opts.onNewLeader?.(holder);
  }

  #observe(lease: LeaseObject): void {
    const spec = lease.spec ?? {};
    const raw = JSON.stringify([spec.holderIdentity ?? '', spec.leaseDurationSeconds, spec.acquireTime, spec.renewTime, spec.leaseTransitions]);
    this.#lease = lease;
    if (raw !== this.#observedRaw) {
      this.#observedRaw = raw;
      this.#observed = spec;
      this.#observedAt = this.#mono();
    }
  }

  /** Whether the observed record is still within its lease duration, by this replica's clock. */
  #observedValid(): boolean {
    const seconds = this.#observed?.leaseDurationSeconds ?? 0;
    return this.#observedAt + seconds * 1000 > this.#mono();
  }

  #timeoutMs(): number {
    // A leader's request must not outlive its renew deadline; a candidate's is bounded the same.
    const left = this.#leading ? this.#renewedAt + this.#renewDeadlineMs - this.#mono() : this.#renewDeadlineMs;
    return Math.max(1, Math.round(left));
  }

  #record(prev: LeaseSpec | undefined, now: number): LeaseSpec {
    const mine = prev?.holderIdentity === this.#identity;
    return {
      holderIdentity: this.#identity,
      leaseDurationSeconds: this.#leaseSeconds,
      acquireTime: mine && prev?.acquireTime !== undefined ? prev.acquireTime : microTime(now),
      renewTime: microTime(now),
      leaseTransitions: mine ? (prev?.leaseTransitions ?? 0) : (prev?.leaseTransitions ?? -1) + 1,
    };
  }

  async #tryAcquireOrRenew(): Promise<boolean> {
    const now = this.#wall();
    // Fast path: the leader updates the Lease it last wrote without reading it first.
    if (this.#leading && this.#lease !== undefined && this.#observedValid()) {
      const prev = this.#lease;
      if (await this.#update(prev, this.#record(prev.spec, now), true)) return true;
    }
    let current: LeaseObject;
    try {
      current = (await this.#client.request({ method: 'GET', path: `${this.#path}/${this.#name}`, timeoutMs: this.#timeoutMs() })).body as LeaseObject;
    } catch (e) {
      if (e instanceof KubeApiError && e.status === 404) return this.#create(now);
      this.#failed('reading the lease', e);
      return false;
    }
    this.#observe(current);
    const holder = current.spec?.holderIdentity ?? '';
    if (holder !== '' && holder !== this.#identity && this.#observedValid()) return false;
    return this.#update(current, this.#record(current.spec, now), false);
  }

  async #create(now: number): Promise<boolean> {
    const body = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: this.#name, namespace: this.#namespace },
      spec: this.#record(undefined, now),
    };
    try {
      const res = await this.#client.request({ method: 'POST', path: this.#path, body, timeoutMs: this.#timeoutMs() });
      this.#observe(res.body as LeaseObject);
      return true;
    } catch (e) {
      this.#failed('creating the lease', e);
      return false;
    }
  }

  async #update(prev: LeaseObject, spec: LeaseSpec, fastPath: boolean): Promise<boolean> {
    const body = { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: prev.metadata, spec };
    try {
      const res = await this.#client.request({ method: 'PUT', path: `${this.#path}/${this.#name}`, body, timeoutMs: this.#timeoutMs() });
      this.#observe(res.body as LeaseObject);
      return true;
    } catch (e) {
      // The fast path's conflict only means the cached copy is stale: the slow path rereads.
      if (!fastPath) this.#failed('updating the lease', e);
      return false;
    }
  }

  #failed(what: string, e: unknown): void {
    const conflict = e instanceof KubeApiError && e.status === 409;
    if (conflict) this.#stats.conflicts++;
    else this.#stats.errors++;
    const fields = { lease: `${this.#namespace}/${this.#name}`, identity: this.#identity, err: e instanceof Error ? e.message : String(e) };
    if (conflict) this.#log.debug(fields, `${what}: another replica won this round`);
    else this.#log.warn(fields, `${what} failed`);
  }

  /** Gives the Lease up: holder cleared and a 1 s duration (client-go's release), retried on conflict. */
  async #tryRelease(): Promise<void> {
    const deadline = this.#mono() + this.#renewDeadlineMs;
    while (this.#mono() < deadline) {
      let current: LeaseObject;
      try {
        current = (await this.#client.request({ method: 'GET', path: `${this.#path}/${this.#name}`, timeoutMs: this.#renewDeadlineMs })).body as LeaseObject;
      } catch (e) {
        this.#failed('reading the lease to release it', e);
        return;
      }
      if (current.spec?.holderIdentity !== this.#identity) return;
      const now = microTime(this.#wall());
      const spec: LeaseSpec = {
        holderIdentity: '',
        leaseDurationSeconds: 1,
        acquireTime: now,
        renewTime: now,
        leaseTransitions: current.spec.leaseTransitions ?? 0,
      };
      try {
        const res = await this.#client.request({
          method: 'PUT',
          path: `${this.#path}/${this.#name}`,
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: current.metadata, spec },
          timeoutMs: this.#renewDeadlineMs,
        });
        this.#observe(res.body as LeaseObject);
        this.#reportLeader();
        this.#log.info({ lease: `${this.#namespace}/${this.#name}`, identity: this.#identity }, 'released the lease');
        return;
      } catch (e) {
        this.#failed('releasing the lease', e);
        if (!(e instanceof KubeApiError && e.status === 409)) return;
      }
    }
  }
}
