/**
 * Kubelet-style probes. Each probe is sent the way a kubelet sends it: to the pod's address on
 * the probed port, from the "node" address, so in a meshed pod it goes through the proxy and is
 * authorized like any other client (a deny default without probe authorization keeps the pod
 * unready, as in a cluster).
 *
 * Timing follows the kubelet (`initialDelaySeconds`, `periodSeconds` 10, `timeoutSeconds` 1,
 * `successThreshold` 1, `failureThreshold` 3; readiness starts failed, liveness succeeded), with
 * one shortcut: until a readiness probe first succeeds after a start (for a minute at most) it is
 * repeated every second, since failures cannot change a result that is already "not ready" and a
 * local mesh should not take `periodSeconds` to come up.
 */
import { request as httpRequest } from 'node:http';
import { connect as http2Connect } from 'node:http2';
import { request as httpsRequest } from 'node:https';
import { connect as netConnect } from 'node:net';
import type { ProbeSpec } from '../controller/index.js';
import { errorMessage } from '../shared/index.js';

/** The outcome of one probe. */
export interface ProbeResult {
  readonly ok: boolean;
  /** What happened, for people (`HTTP 403`, `connect ECONNREFUSED`, `timeout after 1000 ms`). */
  readonly detail: string;
}

/** Where probes go and come from. */
export interface ProbeTarget {
  /** The pod's address. */
  readonly host: string;
  /** The address probes come from (the "node"). */
  readonly localAddress: string;
}

/** The three kinds of kubelet probes. */
export type ProbeKind = 'startup' | 'liveness' | 'readiness';

/** A probe's timing with the kubelet's defaults filled in, in ms. */
export interface ProbeTiming {
  readonly initialDelayMs: number;
  readonly periodMs: number;
  readonly timeoutMs: number;
  readonly successThreshold: number;
  readonly failureThreshold: number;
}

/** The probe's timing; `scale` multiplies the initial delay and the period (tests). */
export function probeTiming(spec: ProbeSpec, kind: ProbeKind, scale = 1): ProbeTiming {
  const s = (seconds: number) => Math.max(1, Math.round(seconds * 1000 * scale));
  const period = spec.periodSeconds !== undefined && spec.periodSeconds > 0 ? spec.periodSeconds : 10;
  const timeout = spec.timeoutSeconds !== undefined && spec.timeoutSeconds > 0 ? spec.timeoutSeconds : 1;
  return {
    initialDelayMs: spec.initialDelaySeconds !== undefined && spec.initialDelaySeconds > 0 ? s(spec.initialDelaySeconds) : 0,
    periodMs: s(period),
    timeoutMs: timeout * 1000,
    // Liveness and startup probes must use 1 (the API server rejects anything else).
    successThreshold: kind === 'readiness' && spec.successThreshold !== undefined && spec.successThreshold > 0 ? spec.successThreshold : 1,
    failureThreshold: spec.failureThreshold !== undefined && spec.failureThreshold > 0 ? spec.failureThreshold : 3,
  };
}

/** Runs one probe with a deadline. */
export type ProbeCheck = (timeoutMs: number) => Promise<ProbeResult>;

/**
 * The check of a probe spec: `resolvePort` maps a port (number or the container's port name) to
 * a number. Undefined when the spec has no handler local mode knows (or names an unknown port),
 * with the reason.
 */
export function probeCheck(spec: ProbeSpec, resolvePort: (port: number | string) => number | undefined, target: ProbeTarget): ProbeCheck | string {
  if (spec.httpGet !== undefined) {
    const get = spec.httpGet;
    const port = resolvePort(get.port);
    if (port === undefined) return `httpGet port ${get.port} is not a port of the container`;
    const headers: Record<string, string> = { 'user-agent': 'kube-probe/1.30', accept: '*/*' };
    for (const h of get.httpHeaders ?? []) headers[h.name.toLowerCase()] = h.value;
    const https = (get.scheme ?? 'HTTP').toUpperCase() === 'HTTPS';
    return (timeoutMs) => httpProbe({ ...target, port, path: get.path ?? '/', headers, https, timeoutMs });
  }
  if (spec.tcpSocket !== undefined) {
    const port = resolvePort(spec.tcpSocket.port);
    if (port === undefined) return `tcpSocket port ${spec.tcpSocket.port} is not a port of the container`;
    return (timeoutMs) => tcpProbe({ ...target, port, timeoutMs });
  }
  if (spec.grpc !== undefined) {
    const { port, service } = spec.grpc;
    return (timeoutMs) => grpcProbe({ ...target, port, service: service ?? '', timeoutMs });
  }
  return 'the probe has no httpGet, tcpSocket or grpc handler';
}

interface Dial {
  readonly host: string;
  readonly localAddress: string;
  readonly port: number;
  readonly timeoutMs: number;
}

/** An HTTP GET; 200-399 is a success. Redirects are not followed (a 3xx is a success, as for the kubelet). */
export function httpProbe(o: Dial & { path: string; headers: Record<string, string>; https?: boolean }): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (r: ProbeResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.destroy();
      resolve(r);
    };
    const options = {
      host: o.host,
      port: o.port,
      path: o.path,
      method: 'GET',
      localAddress: o.localAddress,
      headers: { host: `${o.host}:${o.port}`, ...o.headers },
      agent: false as const,
    };
    const req = o.https === true ? httpsRequest({ ...options, rejectUnauthorized: false }) : httpRequest(options);
    const timer = setTimeout(() => finish({ ok: false, detail: `timeout after ${o.timeoutMs} ms` }), o.timeoutMs);
    req.once('response', (res) => {
      const status = res.statusCode ?? 0;
      res.resume();
      const reason = res.headers['l5d-proxy-error'];
      finish({ ok: status >= 200 && status < 400, detail: `HTTP ${status}${typeof reason === 'string' ? ` (${reason})` : ''}` });
    });
    req.once('error', (e) => finish({ ok: false, detail: describeError(e) }));
    req.end();
  });
}

/** A TCP connect; success once connected. */
export function tcpProbe(o: Dial): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let done = false;
    const sock = netConnect({ host: o.host, port: o.port, localAddress: o.localAddress });
    const finish = (r: ProbeResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => finish({ ok: false, detail: `timeout after ${o.timeoutMs} ms` }), o.timeoutMs);
    sock.once('connect', () => finish({ ok: true, detail: 'connected' }));
    sock.once('error', (e) => finish({ ok: false, detail: describeError(e) }));
  });
}

/** The `grpc.health.v1.HealthCheckRequest` for `service`, framed for gRPC. */
export function healthCheckFrame(service: string): Buffer {
  const name = Buffer.from(service, 'utf8');
  const body = name.length === 0 ? Buffer.alloc(0) : Buffer.concat([Buffer.from([0x0a]), varint(name.length), name]);
  const frame = Buffer.alloc(5 + body.length);
  frame.writeUInt8(0, 0);
  frame.writeUInt32BE(body.length, 1);
  body.copy(frame, 5);
  return frame;
}

function varint(n: number): Buffer {
  const out: number[] = [];
  let v = n;
  while (v >= 0x80) {
    out.push((v & 0x7f) | 0x80);
    v >>>= 7;
  }
  out.push(v);
  return Buffer.from(out);
}

/** The `status` of a framed `HealthCheckResponse` (0 = UNKNOWN when absent), or undefined when malformed. */
export function healthCheckStatus(data: Buffer): number | undefined {
  if (data.length < 5) return undefined;
  const len = data.readUInt32BE(1);
  if (data.readUInt8(0) !== 0 || data.length < 5 + len) return undefined;
  const msg = data.subarray(5, 5 + len);
  let i = 0;
  let status = 0;
  while (i < msg.length) {
    const tag = msg[i++] as number;
    const field = tag >>> 3;
    const wire = tag & 7;
    if (wire === 0) {
      let v = 0;
      let shift = 0;
      let b: number;
      do {
        if (i >= msg.length) return undefined;
        b = msg[i++] as number;
        v += (b & 0x7f) * 2 ** shift;
        shift += 7;
      } while (b & 0x80);
      if (field === 1) status = v;
    } else if (wire === 2) {
      let len2 = 0;
      let shift = 0;
      let b: number;
      do {
        if (i >= msg.length) return undefined;
        b = msg[i++] as number;
        len2 += (b & 0x7f) * 2 ** shift;
        shift += 7;
      } while (b & 0x80);
      i += len2;
    } else {
      return undefined;
    }
  }
  return status;
}

const SERVING_STATUS: Record<number, string> = { 0: 'UNKNOWN', 1: 'SERVING', 2: 'NOT_SERVING', 3: 'SERVICE_UNKNOWN' };

/** A `grpc.health.v1.Health/Check` over h2c; success when the answer is SERVING. */
export function grpcProbe(o: Dial & { service: string }): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let done = false;
    const session = http2Connect(`http://${o.host}:${o.port}`, {
      createConnection: () => netConnect({ host: o.host, port: o.port, localAddress: o.localAddress }),
    });
    const finish = (r: ProbeResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      session.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => finish({ ok: false, detail: `timeout after ${o.timeoutMs} ms` }), o.timeoutMs);
    session.once('error', (e) => finish({ ok: false, detail: describeError(e) }));
    const stream = session.request({
      ':method': 'POST',
      ':path': '/grpc.health.v1.Health/Check',
      'content-type': 'application/grpc',
      te: 'trailers',
      'user-agent': 'kube-probe/1.30',
    });
    const chunks: Buffer[] = [];
    let grpcStatus: string | undefined;
    let grpcMessage: string | undefined;
    const take = (h: Record<string, unknown>) => {
      if (typeof h['grpc-status'] === 'string') grpcStatus = h['grpc-status'];
      if (typeof h['grpc-message'] === 'string') grpcMessage = decodeURIComponent(h['grpc-message']);
    };
    stream.on('response', (h) => {
      take(h);
      const status = h[':status'];
      if (status !== 200) finish({ ok: false, detail: `HTTP ${status}` });
    });
    stream.on('trailers', (h) => take(h));
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.once('error', (e) => finish({ ok: false, detail: describeError(e) }));
    stream.once('end', () => {
      if (grpcStatus !== undefined && grpcStatus !== '0') {
        finish({ ok: false, detail: `grpc-status ${grpcStatus}${grpcMessage !== undefined ? ` (${grpcMessage})` : ''}` });
        return;
      }
      const serving = healthCheckStatus(Buffer.concat(chunks));
      if (serving === undefined) finish({ ok: false, detail: 'malformed health check response' });
      else finish({ ok: serving === 1, detail: SERVING_STATUS[serving] ?? `status ${serving}` });
    });
    stream.end(healthCheckFrame(o.service));
  });
}

function describeError(e: unknown): string {
  // A cancelled HTTP/2 stream carries the session's error (connection refused, reset).
  const cause = (e as { cause?: unknown }).cause;
  if ((e as { code?: unknown }).code === 'ERR_HTTP2_STREAM_CANCEL' && cause !== undefined) return describeError(cause);
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' ? `${code}` : errorMessage(e);
}

/** How long after its start a readiness probe that never passed is repeated every second (at most). */
const WARM_UP_MS = 60_000;

/** A probe's result: startup probes begin `unknown`, readiness `failure`, liveness `success`. */
export type ProbeState = 'unknown' | 'success' | 'failure';

/** Settings of a {@link ProbeWorker}. */
export interface ProbeWorkerOptions {
  readonly kind: ProbeKind;
  readonly timing: ProbeTiming;
  readonly check: ProbeCheck;
  /** Called after every probe; `changed` when the result flipped (the thresholds were reached). */
  readonly onResult: (state: ProbeState, result: ProbeResult, changed: boolean) => void;
}

/** The kubelet's per-probe worker: periodic checks with success and failure thresholds. */
export class ProbeWorker {
  readonly #o: ProbeWorkerOptions;
  #state: ProbeState;
  #successes = 0;
  #failures = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #last: ProbeResult | undefined;
  #startedAt = 0;

  constructor(o: ProbeWorkerOptions) {
    this.#o = o;
    this.#state = o.kind === 'liveness' ? 'success' : o.kind === 'readiness' ? 'failure' : 'unknown';
  }

  /** The current result. */
  get state(): ProbeState {
    return this.#state;
  }

  /** The last probe's outcome. */
  get last(): ProbeResult | undefined {
    return this.#last;
  }

  /** Starts probing after the initial delay. */
  start(): void {
    this.#startedAt = Date.now();
    this.#schedule(this.#o.timing.initialDelayMs);
  }

  /** Stops probing (no callback after this returns). */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => void this.#run(), ms);
    this.#timer.unref();
  }

  async #run(): Promise<void> {
    this.#timer = undefined;
    const t = this.#o.timing;
    let r: ProbeResult;
    try {
      r = await this.#o.check(t.timeoutMs);
    } catch (e) {
      r = { ok: false, detail: errorMessage(e) };
    }
    if (this.#stopped) return;
    this.#last = r;
    const was = this.#state;
    if (r.ok) {
      this.#successes++;
      this.#failures = 0;
      if (this.#successes >= t.successThreshold) this.#state = 'success';
    } else {
      this.#failures++;
      this.#successes = 0;
      if (this.#failures >= t.failureThreshold) this.#state = 'failure';
    }
    this.#o.onResult(this.#state, r, this.#state !== was);
    if (this.#stopped) return;
    const warmingUp = this.#o.kind === 'readiness' && this.#state !== 'success' && this.#successes === 0 && Date.now() - this.#startedAt < WARM_UP_MS;
    this.#schedule(warmingUp ? Math.min(t.periodMs, 1000) : t.periodMs);
  }
}
