/**
 * The controller's feed of denials and audited requests, for `/api/v1/denials`: one long-lived
 * `denied=true` tap on every meshed pod's proxy (reopened when the proxy ends it, with backoff
 * when it fails), the events kept in a bounded ring and grouped on demand with `groupDenials`
 * (core/denial-groups), so `ward status`, the dashboard and this API group alike.
 *
 * Decisions:
 * - It starts on the first `/api/v1/denials` request, not with the controller: a controller nobody
 *   asks about denials never holds taps on its pods (each takes one of a proxy's few tap slots, and
 *   a pod whose port-4191 policy does not admit the controller logs each refused attempt as a
 *   denial of its own). Once started it runs until the controller stops; the first answers cover
 *   only what happened since.
 * - Counts cover the last {@link DENIAL_FEED_MAX_EVENTS} events (the ring's bound); a proxy's own
 *   rate cap (100 events/s per tap) samples a flood, and what it dropped is reported per pod.
 * - A pod whose policy refuses the controller (403) is retried slowly (every {@link DENIED_RETRY_MS})
 *   and listed under `unwatched` with the reason, so the gap is visible rather than silent.
 * - The set of pods is re-read from the index every {@link RESYNC_MS}: new pods are tapped,
 *   deleted ones closed.
 */
import { type DenialFilter, type DenialGroup, groupDenials } from '../../core/index.js';
import type { PolicyView } from '../../index/index.js';
import { Backoff, type Logger } from '../../shared/index.js';
import type { ProxyAdminTls } from '../observe/proxy-admin-client.js';
import { readProxyTap } from './proxy-tap-reader.js';
import { type TapEvent, withPod } from './tap-event.js';
import { proxyTapPath } from './tap-query.js';
import { type TapPod, tapPodOf } from './tap-targets.js';

/** Events kept for grouping. */
export const DENIAL_FEED_MAX_EVENTS = 10_000;
/** How often the set of pods is re-read. */
export const RESYNC_MS = 5000;
/** Retry delay for a pod whose policy refuses the controller. */
export const DENIED_RETRY_MS = 60_000;
/** Each long-lived tap: an hour at most (the proxy's bound), then reopened. */
const FEED_PATH = proxyTapPath({ pathPrefix: undefined, identity: undefined, method: undefined, denied: true, max: 1_000_000, seconds: 3600 });

/** A pod the feed cannot watch now. */
export interface UnwatchedPod {
  readonly namespace: string;
  readonly pod: string;
  readonly code: string;
  readonly message: string;
}

/** `/api/v1/denials`'s answer. */
export interface DenialsAnswer {
  readonly groups: readonly DenialGroup[];
  /** Pods tapped now. */
  readonly watched: number;
  readonly unwatched: readonly UnwatchedPod[];
  /** Events the proxies dropped (rate cap, slow reading) since the feed started. */
  readonly dropped: number;
}

/** What the feed needs from the controller. */
export interface DenialFeedDeps {
  readonly view: () => PolicyView;
  readonly tls: () => Promise<ProxyAdminTls>;
  readonly log: Logger;
  readonly localAddress?: string | undefined;
  /** Test knobs. */
  readonly resyncMs?: number;
  readonly maxEvents?: number;
}

interface Watch {
  readonly pod: TapPod;
  readonly abort: AbortController;
  readonly backoff: Backoff;
  timer: NodeJS.Timeout | undefined;
  failure: UnwatchedPod | undefined;
  connected: boolean;
}

/**
 * Longest path or authority the feed keeps. They only show in a group's example request, and a
 * client sending denied requests with 4 KiB paths would otherwise make the full ring hold ~100 MB.
 */
export const DENIAL_FEED_MAX_TEXT = 512;

function cut(text: string | null): string | null {
  return text === null || text.length <= DENIAL_FEED_MAX_TEXT ? text : `${text.slice(0, DENIAL_FEED_MAX_TEXT)}…`;
}

function trimmed(e: TapEvent): TapEvent {
  if ((e.path?.length ?? 0) <= DENIAL_FEED_MAX_TEXT && (e.authority?.length ?? 0) <= DENIAL_FEED_MAX_TEXT) return e;
  return { ...e, path: cut(e.path), authority: cut(e.authority) };
}

/** The feed; {@link start} is idempotent, {@link stop} closes every tap. */
export class DenialFeed {
  readonly #deps: DenialFeedDeps;
  readonly #max: number;
  readonly #ring: TapEvent[] = [];
  #next = 0;
  readonly #watches = new Map<string, Watch>();
  #tls: ProxyAdminTls | undefined;
  #resync: NodeJS.Timeout | undefined;
  #started = false;
  #stopped = false;
  #dropped = 0;

  constructor(deps: DenialFeedDeps) {
    this.#deps = deps;
    this.#max = deps.maxEvents ?? DENIAL_FEED_MAX_EVENTS;
  }

  /** Starts watching (once); resolves when the first taps are opening. */
  async start(): Promise<void> {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    try {
      this.#tls = await this.#deps.tls();
    } catch (e) {
      this.#deps.log.error({ err: e }, 'denial feed: the controller has no client identity for proxies');
      return;
    }
    if (this.#stopped) return;
    this.#sync();
    this.#resync = setInterval(() => this.#sync(), this.#deps.resyncMs ?? RESYNC_MS);
    this.#resync.unref();
  }

  /** Closes every tap. */
  stop(): void {
    this.#stopped = true;
    clearInterval(this.#resync);
    for (const w of this.#watches.values()) this.#close(w);
    this.#watches.clear();
  }

  /** Whether {@link start} was called. */
  get started(): boolean {
    return this.#started;
  }

  /** Records one event (the taps call it; tests may too). */
  record(event: TapEvent): void {
    const e = trimmed(event);
    if (this.#ring.length < this.#max) this.#ring.push(e);
    else this.#ring[this.#next] = e;
    this.#next = (this.#next + 1) % this.#max;
  }

  /** The groups of the kept events that pass `filter`, with the feed's health. */
  answer(filter: DenialFilter): DenialsAnswer {
    const unwatched: UnwatchedPod[] = [];
    let watched = 0;
    for (const w of this.#watches.values()) {
      if (w.failure !== undefined) unwatched.push(w.failure);
      else if (w.connected) watched++;
    }
    unwatched.sort((a, b) => (a.namespace + a.pod < b.namespace + b.pod ? -1 : 1));
    return { groups: groupDenials(this.#ring, filter), watched, unwatched, dropped: this.#dropped };
  }

  #sync(): void {
    if (this.#stopped) return;
    const view = this.#deps.view();
    const seen = new Set<string>();
    for (const p of view.index.pods()) {
      const pod = tapPodOf(view.config, p);
      const key = `${pod.namespace}/${pod.name}|${pod.target?.address ?? ''}|${pod.target?.identity ?? ''}`;
      seen.add(key);
      if (this.#watches.has(key)) continue;
      const w: Watch = {
        pod,
        abort: new AbortController(),
        backoff: new Backoff({ minMs: 500, maxMs: 30_000 }),
        timer: undefined,
        failure: undefined,
        connected: false,
      };
      this.#watches.set(key, w);
      this.#open(w);
    }
    for (const [key, w] of this.#watches) {
      if (seen.has(key)) continue;
      this.#close(w);
      this.#watches.delete(key);
    }
  }

  #close(w: Watch): void {
    clearTimeout(w.timer);
    w.abort.abort();
  }

  #open(w: Watch): void {
    const tls = this.#tls;
    const target = w.pod.target;
    if (tls === undefined || w.abort.signal.aborted) return;
    if (target === undefined) {
      w.failure = { namespace: w.pod.namespace, pod: w.pod.name, code: 'NO_ADDRESS', message: 'the pod has no address yet' };
      return;
    }
    w.connected = true;
    readProxyTap(
      tls,
      target,
      FEED_PATH,
      w.abort.signal,
      {
        event: (e) => {
          w.failure = undefined;
          w.backoff.reset();
          this.record(withPod(e, w.pod.namespace, w.pod.name, w.pod.workload));
        },
        done: (o) => {
          w.connected = false;
          if (o.kind === 'aborted' || this.#stopped) return;
          let delay: number;
          if (o.kind === 'ended') {
            if (o.end !== undefined) this.#dropped += o.end.dropped.rate + o.end.dropped.slow;
            w.failure = undefined;
            w.backoff.reset();
            delay = 100;
          } else {
            const first = w.failure === undefined;
            w.failure = { namespace: w.pod.namespace, pod: w.pod.name, code: o.code, message: o.message };
            delay = o.code === 'ERR_PROXY_ADMIN_DENIED' ? DENIED_RETRY_MS : w.backoff.next();
            if (first) this.#deps.log.info({ pod: `${w.pod.namespace}/${w.pod.name}`, code: o.code, err: o.message }, 'denial feed: cannot tap the pod');
          }
          w.timer = setTimeout(() => this.#open(w), delay);
          w.timer.unref();
        },
      },
      { localAddress: this.#deps.localAddress },
    );
  }
}
