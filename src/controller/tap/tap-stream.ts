/**
 * `GET /api/v1/tap`: fans a tap out to the proxies of the selected pods and merges their streams
 * into one NDJSON response, each event with its pod added.
 *
 * Bounds, server-side: `max` events and `seconds` seconds per tap (capped, tap-query), at most
 * {@link TAP_MAX_PODS} pods per tap and {@link TAP_MAX_STREAMS} taps at once (503 beyond), and a
 * client that reads slower than the events come gets them dropped, not queued (counted in the last
 * line). Each pod's proxy applies the filters and its own bounds (a proxy serves few taps at once:
 * a busy pod is reported as an error line, the others still stream).
 *
 * The response's head is sent once every pod's proxy has accepted the tap or failed (within the
 * client's connect deadline): a client that got the head knows every event from then on is seen.
 *
 * Lines: TapEvents; `{"error":{"code","message","namespace","pod"}}` for a pod that cannot be
 * tapped (no address, denied by its policy on port 4191, unreachable, busy); the last line is
 * `{"end":{"reason","events","pods","dropped":{"rate","slow","invalid"}}}` (`rate` and `slow`
 * summed over the proxies' own drops and the controller's). The client going away closes every
 * upstream stream at once.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type PolicyView, parseResourceArg, podsOf, QueryError } from '../../index/index.js';
import type { Logger } from '../../shared/index.js';
import type { ProxyAdminTls } from '../observe/proxy-admin-client.js';
import { readProxyTap } from './proxy-tap-reader.js';
import { type TapEvent, withPod } from './tap-event.js';
import { parseTapQuery, proxyTapPath } from './tap-query.js';
import { type TapPod, tapPodOf } from './tap-targets.js';

/** The most pods one tap fans out to. */
export const TAP_MAX_PODS = 64;
/** The most controller taps open at once. */
export const TAP_MAX_STREAMS = 16;
/** Unflushed bytes for a client beyond which its events are dropped. */
export const TAP_MAX_BUFFERED_BYTES = 256 * 1024;

/** What the tap stream needs from the controller. */
export interface TapStreamDeps {
  readonly view: () => PolicyView;
  /** The controller's client credentials for proxies' admin servers. */
  readonly tls: () => Promise<ProxyAdminTls>;
  readonly log: Logger;
  /** Local address to connect to proxies from (the kernel's choice by default). */
  readonly localAddress?: string | undefined;
}

/** Why a controller tap ended. */
export type TapStreamEnd = 'max' | 'seconds' | 'upstreams' | 'closed';

function writeJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
  res.end(`${JSON.stringify(body)}\n`);
}

/** The stream handler with its count of open taps. */
export class TapStreams {
  readonly #deps: TapStreamDeps;
  #open = 0;

  constructor(deps: TapStreamDeps) {
    this.#deps = deps;
  }

  /** Taps open now. */
  get open(): number {
    return this.#open;
  }

  /** Serves one `/api/v1/tap` request. Never throws. */
  handle(req: IncomingMessage, res: ServerResponse, url: URL): void {
    if (req.method !== 'GET') {
      res.writeHead(405, { allow: 'GET', 'content-type': 'application/json; charset=utf-8' });
      res.end(`${JSON.stringify({ error: { code: 'METHOD_NOT_ALLOWED', message: `${req.method ?? ''} is not allowed here; use GET` } })}\n`);
      return;
    }
    const q = parseTapQuery(url.searchParams);
    if (!q.ok) {
      writeJson(res, 400, { error: q.error });
      return;
    }
    let pods: TapPod[];
    try {
      const view = this.#deps.view();
      const arg = parseResourceArg(q.value.resource);
      pods = podsOf(view, arg, q.value.namespace).map((p) => tapPodOf(view.config, p));
    } catch (e) {
      if (!(e instanceof QueryError)) throw e;
      writeJson(res, 400, { error: { code: 'INVALID_ARGUMENT', message: e.message, hint: 'resource=deploy/web (or pod/NAME, sts/NAME, ns/NAME…)' } });
      return;
    }
    if (pods.length === 0) {
      const where = q.value.namespace === undefined ? 'any namespace' : `namespace ${q.value.namespace}`;
      writeJson(res, 404, {
        error: { code: 'NOT_FOUND', message: `no meshed pod of ${q.value.resource} in ${where}`, hint: 'ward authz or /api/v1/pods lists the meshed pods' },
      });
      return;
    }
    if (pods.length > TAP_MAX_PODS) {
      writeJson(res, 400, {
        error: {
          code: 'TOO_MANY_PODS',
          message: `${q.value.resource} selects ${pods.length} pods; a tap reaches at most ${TAP_MAX_PODS}`,
          hint: 'tap one workload or pod',
        },
      });
      return;
    }
    if (this.#open >= TAP_MAX_STREAMS) {
      res.setHeader('retry-after', '5');
      writeJson(res, 503, {
        error: { code: 'UNAVAILABLE', message: `the controller serves ${TAP_MAX_STREAMS} taps at once, all open`, hint: 'retry once one ends' },
      });
      return;
    }
    this.#open++;
    this.#run(res, pods, proxyTapPath(q.value), q.value.max, q.value.seconds);
  }

  #run(res: ServerResponse, pods: readonly TapPod[], path: string, max: number, seconds: number): void {
    const abort = new AbortController();
    let events = 0;
    let droppedRate = 0;
    let droppedSlow = 0;
    let invalid = 0;
    let pending = pods.length;
    let opening = pods.length;
    let ended = false;
    /** Lines before the head is sent (bounded: `max` events and one error line per pod). */
    let early: string[] | undefined = [];
    const sendHead = (): void => {
      if (early === undefined) return;
      res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
      res.flushHeaders();
      for (const l of early) res.write(l);
      early = undefined;
    };
    const opened = (): void => {
      opening--;
      // Once ended, finish() has sent the head (or the client is gone).
      if (opening === 0 && !ended) sendHead();
    };
    const finish = (reason: TapStreamEnd): void => {
      if (ended) return;
      ended = true;
      this.#open--;
      clearTimeout(timer);
      abort.abort();
      if (reason === 'closed') return;
      sendHead();
      res.end(`${JSON.stringify({ end: { reason, events, pods: pods.length, dropped: { rate: droppedRate, slow: droppedSlow, invalid } } })}\n`);
    };
    const timer = setTimeout(() => finish('seconds'), seconds * 1000);
    timer.unref();
    res.once('close', () => finish('closed'));
    const write = (text: string): boolean => {
      if (early !== undefined) {
        early.push(text);
        return true;
      }
      if (res.writableLength > TAP_MAX_BUFFERED_BYTES) {
        droppedSlow++;
        return false;
      }
      res.write(text);
      return true;
    };
    const line = (v: unknown): void => {
      write(`${JSON.stringify(v)}\n`);
    };
    const upstreamDone = (): void => {
      pending--;
      if (pending === 0) finish('upstreams');
    };
    void this.#deps.tls().then(
      (tls) => {
        for (const pod of pods) {
          if (ended) return;
          if (pod.target === undefined) {
            line({ error: { code: 'NO_ADDRESS', message: 'the pod has no address yet', namespace: pod.namespace, pod: pod.name } });
            opened();
            upstreamDone();
            continue;
          }
          let isOpen = false;
          readProxyTap(
            tls,
            pod.target,
            path,
            abort.signal,
            {
              opened: () => {
                isOpen = true;
                opened();
              },
              event: (e) => {
                if (ended) return;
                const ev: TapEvent = withPod(e, pod.namespace, pod.name, pod.workload);
                if (!write(`${JSON.stringify(ev)}\n`)) return;
                events++;
                if (events >= max) finish('max');
              },
              invalid: () => {
                invalid++;
              },
              done: (o) => {
                if (!isOpen) opened();
                if (ended) return;
                if (o.kind === 'ended' && o.end !== undefined) {
                  droppedRate += o.end.dropped.rate;
                  droppedSlow += o.end.dropped.slow;
                } else if (o.kind === 'failed') {
                  line({ error: { code: o.code, message: o.message, namespace: pod.namespace, pod: pod.name } });
                }
                upstreamDone();
              },
            },
            { localAddress: this.#deps.localAddress },
          );
        }
      },
      (e: unknown) => {
        this.#deps.log.error({ err: e }, 'tap: the controller has no client identity for proxies');
        line({
          error: {
            code: 'ERR_PROXY_ADMIN_NO_IDENTITY',
            message: 'the controller has no client certificate for proxies (see its log)',
            namespace: null,
            pod: null,
          },
        });
        finish('upstreams');
      },
    );
  }
}
