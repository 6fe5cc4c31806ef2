/**
 * The embedded collector: the controller scrapes every meshed pod's proxy admin `/metrics` (mesh
 * TLS as its own identity, proxy-admin-client) on an interval and keeps a rolling window in memory
 * (series-window), answering {@link MetricsBackend} queries — the backend of `ward up` and of
 * clusters small enough that one process can hold their series.
 *
 * Scheduling: a round every `intervalMs`; within it each target starts at a stable offset in the
 * first half of the interval (a hash of its pod key, so pods do not all answer at once and each is
 * scraped at a steady period), at most `concurrency` scrapes in flight, each bounded by
 * `timeoutMs`; a target whose previous scrape is still running is skipped. Targets are read from
 * the policy index at every round: a pod that went away is forgotten with its series.
 *
 * A pod whose policy denies the controller is asked again once a minute rather than every
 * interval: each denied scrape is a denial in its proxy's log and in `ward status`.
 *
 * Bounds: a body larger than `maxBodyBytes` or with more than `maxSeriesPerPod` series fails the
 * scrape; past `maxSeriesTotal` new series are dropped (counted, and reported on the target).
 * Every series gets the pod's `namespace`, `pod`, `workload_kind` and `workload_name`; a pod that
 * exposes labels of those names has them renamed `exported_<name>` (Prometheus's honor_labels
 * false), so no pod can speak for another.
 */
import type { IncomingMessage } from 'node:http';
import { serviceAccountIdentity } from '../../core/index.js';
import type { ClusterConfig, PodInfo, PolicyIndex } from '../../index/index.js';
import { type Counter, errorMessage, type Logger, promClient, type Registry, silentLogger } from '../../shared/index.js';
import type { MetricsBackend, Sample, SeriesQuery, TargetHealth } from './metrics-backend.js';
import { DEFAULT_PROMETHEUS_TEXT_LIMITS, isCumulative, parsePrometheusText } from './prometheus-text.js';
import { PROXY_ADMIN_PORT, ProxyAdminError, type ProxyAdminTls, readProxyAdminBody, requestProxyAdmin } from './proxy-admin-client.js';
import { detachString, histogramQuantile, latestOver, rateOver, type ScrapedSeries, TARGET_LABELS, TargetWindow } from './series-window.js';

/** A pod to scrape. */
export interface CollectorTarget {
  readonly namespace: string;
  readonly pod: string;
  readonly workloadKind: string;
  readonly workloadName: string;
  /** `ip:port` of the admin server. */
  readonly address: string;
  /** The pod's mesh identity; null = plaintext. */
  readonly identity: string | null;
}

/** Settings of {@link EmbeddedCollector}. */
export interface EmbeddedCollectorOptions {
  /** The pods to scrape, read at every round. */
  readonly targets: () => readonly CollectorTarget[];
  /** The controller's client credentials (or a promise of them). */
  readonly tls: ProxyAdminTls | Promise<ProxyAdminTls>;
  /** Scrape period (default 10 s). */
  readonly intervalMs?: number;
  /** Deadline of one scrape, headers and body (default the smaller of 5 s and the interval). */
  readonly timeoutMs?: number;
  /** How long series are kept (default 10 min); the largest window a query can ask for. */
  readonly retentionMs?: number;
  /** Scrapes in flight at most (default 8). */
  readonly concurrency?: number;
  readonly maxBodyBytes?: number;
  readonly maxSeriesPerPod?: number;
  readonly maxSeriesTotal?: number;
  readonly registry?: Registry;
  readonly log?: Logger;
  /** The clock (tests). */
  readonly now?: () => number;
}

/** Defaults of {@link EmbeddedCollectorOptions}. */
export const COLLECTOR_DEFAULTS = {
  intervalMs: 10_000,
  retentionMs: 600_000,
  concurrency: 8,
  maxBodyBytes: 8 * 1024 * 1024,
  maxSeriesPerPod: 20_000,
  maxSeriesTotal: 100_000,
} as const;

/** How long a pod that denied the controller is left alone. */
const DENIED_RETRY_MS = 60_000;

interface TargetState {
  target: CollectorTarget;
  readonly window: TargetWindow;
  inFlight: boolean;
  up: boolean;
  lastAttemptMs: number | undefined;
  error: string | undefined;
  /** Code of the last failure, so that each new reason is logged once. */
  reason: string | undefined;
  /** A pod that denied the controller is asked again only from then on. */
  retryAtMs: number | undefined;
}

const NOT_EXPOSED = new Set<string>(TARGET_LABELS);

function targetKey(t: CollectorTarget): string {
  return `${t.namespace}/${t.pod}`;
}

/** FNV-1a of a string, for a stable offset. */
function hash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** The workload owning a pod, as the collector labels its series. */
export function workloadOfPod(pod: { readonly name: string; readonly owner?: string | undefined }): { kind: string; name: string } {
  const owner = pod.owner;
  const slash = owner?.indexOf('/') ?? -1;
  if (owner !== undefined && slash > 0) return { kind: owner.slice(0, slash), name: owner.slice(slash + 1) };
  return { kind: 'Pod', name: pod.name };
}

/** The targets of the policy index's meshed pods that have an address. */
export function targetsFromIndex(index: PolicyIndex, cluster: ClusterConfig, adminPort = PROXY_ADMIN_PORT): CollectorTarget[] {
  const out: CollectorTarget[] = [];
  for (const p of index.pods()) {
    const t = targetOfPod(p, cluster, adminPort);
    if (t !== undefined) out.push(t);
  }
  return out;
}

function targetOfPod(p: PodInfo, cluster: ClusterConfig, adminPort: number): CollectorTarget | undefined {
  const ip = p.pod.status?.podIP;
  if (ip === undefined || ip === '') return undefined;
  const w = workloadOfPod({ name: p.name, owner: p.pod.owner });
  return {
    namespace: p.namespace,
    pod: p.name,
    workloadKind: w.kind,
    workloadName: w.name,
    address: ip.includes(':') ? `[${ip}]:${adminPort}` : `${ip}:${adminPort}`,
    identity: serviceAccountIdentity(cluster, p.namespace, p.serviceAccount),
  };
}

/** Why a scrape failed, for the target's health. */
function describeFailure(e: unknown): { reason: string; message: string } {
  if (e instanceof ProxyAdminError) return { reason: e.code, message: e.message };
  return { reason: 'ERR_SCRAPE', message: errorMessage(e) };
}

/** The embedded backend. `start()` begins scraping; `stop()` ends it (in-flight scrapes are aborted). */
export class EmbeddedCollector implements MetricsBackend {
  readonly kind = 'embedded' as const;
  readonly intervalMs: number;
  readonly retentionMs: number;
  readonly #opts: EmbeddedCollectorOptions;
  readonly #timeoutMs: number;
  readonly #concurrency: number;
  readonly #maxBodyBytes: number;
  readonly #maxSeriesPerPod: number;
  readonly #maxSeriesTotal: number;
  readonly #capacity: number;
  readonly #now: () => number;
  readonly #log: Logger;
  readonly #states = new Map<string, TargetState>();
  readonly #abort = new AbortController();
  #tls: ProxyAdminTls | undefined;
  #round: NodeJS.Timeout | undefined;
  readonly #pending = new Set<NodeJS.Timeout>();
  #inFlight = 0;
  readonly #queue: TargetState[] = [];
  #stopped = false;
  #rounds = 0;
  readonly #metrics: { scrapes: Counter<'result'>; failures: Counter<'reason'>; dropped: Counter } | undefined;

  constructor(opts: EmbeddedCollectorOptions) {
    this.#opts = opts;
    this.intervalMs = opts.intervalMs ?? COLLECTOR_DEFAULTS.intervalMs;
    this.retentionMs = opts.retentionMs ?? COLLECTOR_DEFAULTS.retentionMs;
    if (!(this.intervalMs >= 50 && this.intervalMs <= 3_600_000)) throw new RangeError(`scrape interval ${this.intervalMs} ms is not within 50 ms..1 h`);
    if (!(this.retentionMs >= 2 * this.intervalMs)) throw new RangeError(`retention ${this.retentionMs} ms must be at least two scrape intervals`);
    this.#timeoutMs = opts.timeoutMs ?? Math.min(5000, this.intervalMs);
    this.#concurrency = Math.max(1, opts.concurrency ?? COLLECTOR_DEFAULTS.concurrency);
    this.#maxBodyBytes = opts.maxBodyBytes ?? COLLECTOR_DEFAULTS.maxBodyBytes;
    this.#maxSeriesPerPod = opts.maxSeriesPerPod ?? COLLECTOR_DEFAULTS.maxSeriesPerPod;
    this.#maxSeriesTotal = opts.maxSeriesTotal ?? COLLECTOR_DEFAULTS.maxSeriesTotal;
    // One slot per scrape over the retention, one for the base before it and one spare.
    this.#capacity = Math.ceil(this.retentionMs / this.intervalMs) + 2;
    this.#now = opts.now ?? Date.now;
    this.#log = opts.log ?? silentLogger();
    this.#metrics = opts.registry === undefined ? undefined : this.#registerMetrics(opts.registry);
  }

  #registerMetrics(registry: Registry): { scrapes: Counter<'result'>; failures: Counter<'reason'>; dropped: Counter } {
    const { Counter, Gauge } = promClient();
    const registers = [registry];
    const states = this.#states;
    new Gauge({
      name: 'ward_observe_series',
      help: 'Series the embedded collector holds in memory',
      registers,
      collect() {
        let n = 0;
        for (const s of states.values()) n += s.window.size;
        this.set(n);
      },
    });
    new Gauge({
      name: 'ward_observe_targets',
      help: 'Pods the embedded collector scrapes, by whether their last scrape succeeded',
      labelNames: ['state'] as const,
      registers,
      collect() {
        let up = 0;
        let down = 0;
        for (const s of states.values()) {
          if (s.lastAttemptMs === undefined) continue;
          if (s.up) up++;
          else down++;
        }
        this.set({ state: 'up' }, up);
        this.set({ state: 'down' }, down);
      },
    });
    return {
      scrapes: new Counter({
        name: 'ward_observe_scrapes_total',
        help: 'Scrapes of proxy admin /metrics by result',
        labelNames: ['result'] as const,
        registers,
      }),
      failures: new Counter({
        name: 'ward_observe_scrape_failures_total',
        help: 'Failed scrapes by reason (ERR_PROXY_ADMIN_DENIED: the pod refuses the controller on 4191)',
        labelNames: ['reason'] as const,
        registers,
      }),
      dropped: new Counter({ name: 'ward_observe_series_dropped_total', help: 'New series refused because the collector holds its limit', registers }),
    };
  }

  /** Starts scraping (the first round at once). */
  start(): void {
    if (this.#round !== undefined || this.#stopped) return;
    void Promise.resolve(this.#opts.tls).then(
      (tls) => {
        this.#tls = tls;
        if (this.#stopped) return;
        this.#startRound();
        this.#round = setInterval(() => this.#startRound(), this.intervalMs);
        this.#round.unref();
      },
      (e: unknown) => this.#log.error({ err: errorMessage(e) }, 'the metrics collector has no client certificate; not scraping'),
    );
  }

  /** Stops scraping; in-flight scrapes are aborted. Idempotent. */
  stop(): void {
    this.#stopped = true;
    if (this.#round !== undefined) clearInterval(this.#round);
    for (const t of this.#pending) clearTimeout(t);
    this.#pending.clear();
    this.#queue.length = 0;
    this.#abort.abort();
  }

  /** Rounds started so far (tests wait on it). */
  get rounds(): number {
    return this.#rounds;
  }

  #startRound(): void {
    if (this.#stopped) return;
    this.#rounds++;
    const seen = new Set<string>();
    const spreadMs = this.intervalMs / 2;
    for (const target of this.#opts.targets()) {
      const key = targetKey(target);
      seen.add(key);
      let state = this.#states.get(key);
      if (state === undefined || state.target.address !== target.address || state.target.identity !== target.identity) {
        // A new pod, or the same name at a new address (recreated): a fresh window.
        state = {
          target,
          window: new TargetWindow(this.#capacity),
          inFlight: false,
          up: false,
          lastAttemptMs: undefined,
          error: undefined,
          reason: undefined,
          retryAtMs: undefined,
        };
        this.#states.set(key, state);
      } else state.target = target;
      const s = state;
      if (s.retryAtMs !== undefined && this.#now() < s.retryAtMs) continue;
      const delay = hash(key) % Math.max(1, Math.floor(spreadMs));
      const timer = setTimeout(() => {
        this.#pending.delete(timer);
        this.#enqueue(s);
      }, delay);
      timer.unref();
      this.#pending.add(timer);
    }
    for (const key of this.#states.keys()) if (!seen.has(key)) this.#states.delete(key);
  }

  #enqueue(s: TargetState): void {
    if (this.#stopped || s.inFlight || this.#states.get(targetKey(s.target)) !== s) return;
    s.inFlight = true;
    this.#queue.push(s);
    this.#drain();
  }

  #drain(): void {
    while (this.#inFlight < this.#concurrency && this.#queue.length > 0) {
      const s = this.#queue.shift() as TargetState;
      this.#inFlight++;
      void this.#scrape(s).finally(() => {
        this.#inFlight--;
        s.inFlight = false;
        this.#drain();
      });
    }
  }

  /** Scrapes one target now (also used by tests through `scrapeAll`). */
  async #scrape(s: TargetState): Promise<void> {
    const tls = this.#tls;
    if (tls === undefined) return;
    const t = s.target;
    const started = this.#now();
    s.lastAttemptMs = started;
    const signal = this.#abort.signal;
    let res: IncomingMessage | undefined;
    try {
      res = await requestProxyAdmin(tls, t, '/metrics', { signal, timeoutMs: this.#timeoutMs, headers: { accept: 'text/plain; version=0.0.4' } });
      const body = await readProxyAdminBody(
        res,
        this.#maxBodyBytes,
        Math.max(1, this.#timeoutMs - (this.#now() - started)),
        `${t.namespace}/${t.pod} /metrics`,
      );
      const parsed = parsePrometheusText(body, { ...DEFAULT_PROMETHEUS_TEXT_LIMITS, maxBodyLength: this.#maxBodyBytes, maxSeries: this.#maxSeriesPerPod });
      if (!parsed.ok) {
        const first = parsed.problems[0];
        throw new ProxyAdminError(
          'ERR_PROXY_ADMIN_STATUS',
          `the pod's /metrics is not valid exposition text: line ${first?.line}: ${first?.code} ${first?.message}`,
        );
      }
      if (this.#stopped || this.#states.get(targetKey(t)) !== s) return;
      const podLabels: Record<string, string> = { namespace: t.namespace, pod: t.pod, workload_kind: t.workloadKind, workload_name: t.workloadName };
      const series: ScrapedSeries[] = [];
      for (const sample of parsed.samples) {
        series.push({
          name: sample.name,
          key: sample.key,
          // Built only for a series the window does not hold yet.
          get labels() {
            const labels = Object.create(null) as Record<string, string>;
            for (const k in sample.labels) labels[detachString(NOT_EXPOSED.has(k) ? `exported_${k}` : k)] = detachString(sample.labels[k] as string);
            return Object.freeze(Object.assign(labels, podLabels));
          },
          value: sample.value,
          cumulative: isCumulative(sample.name, parsed.types),
        });
      }
      let total = 0;
      for (const other of this.#states.values()) if (other !== s) total += other.window.size;
      const update = s.window.record(this.#now(), series, this.#maxSeriesTotal - total - s.window.size);
      s.up = true;
      s.reason = undefined;
      s.retryAtMs = undefined;
      s.error = update.dropped > 0 ? `${update.dropped} new series dropped: the collector holds its limit of ${this.#maxSeriesTotal} series` : undefined;
      if (update.dropped > 0) this.#metrics?.dropped.inc(update.dropped);
      this.#metrics?.scrapes.inc({ result: 'success' });
    } catch (e) {
      res?.destroy();
      if (this.#stopped) return;
      const f = describeFailure(e);
      const newReason = s.up || s.reason !== f.reason;
      s.up = false;
      s.error = f.message;
      s.reason = f.reason;
      // Every denied scrape is a denial in the pod's log and `ward status`: ask again once a minute
      // (a policy that starts admitting the controller is seen within that).
      s.retryAtMs = f.reason === 'ERR_PROXY_ADMIN_DENIED' ? this.#now() + Math.max(DENIED_RETRY_MS, this.intervalMs) : undefined;
      this.#metrics?.scrapes.inc({ result: 'failure' });
      this.#metrics?.failures.inc({ reason: f.reason });
      // A denial needs the operator (the pod's policy must admit the controller); a pod that is
      // starting or going away does not, and `ward up` shows warnings on its console.
      if (newReason) {
        // `err` names the pod: ward up prints a warning's message and `err` alone.
        const fields = { pod: `${t.namespace}/${t.pod}`, address: t.address, reason: f.reason, err: `${t.namespace}/${t.pod}: ${f.message}` };
        if (f.reason === 'ERR_PROXY_ADMIN_DENIED') this.#log.warn(fields, 'metrics scrape denied');
        else this.#log.debug(fields, 'metrics scrape failed');
      }
    }
  }

  /** Scrapes every target once, now, and resolves when done (tests and `ward up` start-up). */
  async scrapeAll(): Promise<void> {
    if (this.#tls === undefined) this.#tls = await this.#opts.tls;
    const states: TargetState[] = [];
    for (const target of this.#opts.targets()) {
      const key = targetKey(target);
      let s = this.#states.get(key);
      if (s === undefined) {
        s = {
          target,
          window: new TargetWindow(this.#capacity),
          inFlight: false,
          up: false,
          lastAttemptMs: undefined,
          error: undefined,
          reason: undefined,
          retryAtMs: undefined,
        };
        this.#states.set(key, s);
      }
      states.push(s);
    }
    await Promise.all(states.map((s) => this.#scrape(s)));
  }

  #windows(): TargetWindow[] {
    return [...this.#states.values()].map((s) => s.window);
  }

  #range(windowSeconds: number): { from: number; to: number } {
    const to = this.#now();
    return { from: to - Math.min(windowSeconds * 1000, this.retentionMs), to };
  }

  rate(q: SeriesQuery, windowSeconds: number): Promise<readonly Sample[]> {
    const { from, to } = this.#range(windowSeconds);
    return Promise.resolve(rateOver(this.#windows(), q, from, to));
  }

  latest(q: SeriesQuery): Promise<readonly Sample[]> {
    // Stale after three missed scrapes, as a pod that stopped answering no longer holds connections we know of.
    return Promise.resolve(latestOver(this.#windows(), q, this.#now() - 3 * this.intervalMs - this.#timeoutMs));
  }

  quantile(quantile: number, q: SeriesQuery, windowSeconds: number): Promise<readonly Sample[]> {
    const { from, to } = this.#range(windowSeconds);
    const buckets = rateOver(this.#windows(), q, from, to, `${q.metric}_bucket`, true);
    return Promise.resolve(histogramQuantile(quantile, buckets, q.by));
  }

  targets(): Promise<readonly TargetHealth[]> {
    const out: TargetHealth[] = [];
    for (const s of this.#states.values()) {
      out.push({
        namespace: s.target.namespace,
        pod: s.target.pod,
        address: s.target.address,
        up: s.up,
        lastScrape: s.lastAttemptMs === undefined ? null : new Date(s.lastAttemptMs).toISOString(),
        ...(s.error !== undefined ? { error: s.error } : {}),
      });
    }
    out.sort((a, b) => (a.namespace === b.namespace ? (a.pod < b.pod ? -1 : 1) : a.namespace < b.namespace ? -1 : 1));
    return Promise.resolve(out);
  }
}
