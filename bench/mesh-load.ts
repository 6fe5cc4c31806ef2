/**
 * The load generator of `npm run bench -- mesh`: clients for the three protocols and two ways
 * of driving them.
 *
 * Clients keep their connections for the whole run: HTTP/1.1 on a keep-alive `http.Agent`
 * (through an HTTP forward proxy with absolute-form targets when the route says so), gRPC-shaped
 * unary calls on one HTTP/2 session (over a CONNECT tunnel through a forward proxy), and opaque
 * TCP as 64-byte ping-pong on a pool of connections (each a CONNECT tunnel through a forward
 * proxy), a request waiting in FIFO order when every connection is busy.
 *
 * - {@link runFixedRate} is open-loop: request i is due at `start + i / rate` whatever happened
 *   to the earlier ones, and its latency is measured from that *scheduled* time, so a stall
 *   shows up in every request it delayed (no coordinated omission). A ticker thread paces the
 *   sends (Node timers have 1 ms granularity). How late requests still go out (the generator's
 *   own thread busy, e.g. collecting HTTP/2 garbage, or short of CPU) is part of the measured
 *   latency on every path and is reported as `lagP99Ms`, so a noisy baseline can be recognised.
 * - {@link runClosedLoop} is saturation: `concurrency` workers each send the next request when
 *   the previous answered; latency from the actual send.
 *
 * Both exclude a warm-up from the samples and call the window hooks at the measured window's
 * start and end (where the caller samples processes).
 */
import { once } from 'node:events';
import { Agent, request as httpRequest, type RequestOptions } from 'node:http';
import { type ClientHttp2Session, connect as http2Connect } from 'node:http2';
import { connect as netConnect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { installLeanAsyncBind } from '../src/shared/index.js';

/** The protocols a client speaks. */
export type Protocol = 'http1' | 'grpc' | 'tcp';

/** How a client reaches its server. */
export type Route =
  /** Straight to `host:port` (HTTP/1 origin-form, HTTP/2 with prior knowledge, plain TCP). */
  | { readonly kind: 'direct'; readonly host: string; readonly port: number }
  /** Through an HTTP forward proxy: absolute-form `http://authority/` for HTTP/1, CONNECT `authority` otherwise. */
  | { readonly kind: 'forward-proxy'; readonly proxyHost: string; readonly proxyPort: number; readonly authority: string };

/** A connected client. */
export interface LoadClient {
  /** Sends one request; resolves once its whole response arrived, rejects on any failure. */
  request(): Promise<void>;
  /** Destroys the connections (pending requests fail). */
  close(): void;
}

/** Called at the measured window's start and end. */
export interface WindowHooks {
  start(): void;
  stop(): void;
}

/** What a run measured. `sortedMs` holds the measured latencies, ascending. */
export interface LoadStats {
  readonly sortedMs: Float64Array;
  /** Responses completed inside the measured window, per second. */
  readonly rps: number;
  /** Failed requests (errors, bad statuses, unanswered at the end) among the measured ones. */
  readonly errors: number;
  /** p99 of how late requests went out after their scheduled time (fixed rate only; 0 otherwise). */
  readonly lagP99Ms: number;
}

const ALL_PROTOCOLS: readonly Protocol[] = ['http1', 'grpc', 'tcp'];

/**
 * The protocols a mesh run measures: `WARD_BENCH_MESH_PROTOCOLS`, comma-separated (`tcp`,
 * `grpc,tcp`), in the usual order; unset or empty: all three. An unknown name is an error rather
 * than a run that silently measures less.
 */
export function selectedProtocols(value = process.env.WARD_BENCH_MESH_PROTOCOLS): readonly Protocol[] {
  const names = (value ?? '')
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '');
  if (names.length === 0) return ALL_PROTOCOLS;
  const unknown = names.filter((n) => !(ALL_PROTOCOLS as readonly string[]).includes(n));
  if (unknown.length > 0) throw new Error(`WARD_BENCH_MESH_PROTOCOLS: unknown protocol ${unknown.join(', ')} (use ${ALL_PROTOCOLS.join(', ')})`);
  return ALL_PROTOCOLS.filter((p) => names.includes(p));
}

/** Fixed-rate rounds per path: `WARD_BENCH_MESH_ROUNDS` when set (a positive integer), else `fallback`. */
export function selectedRounds(fallback: number, value = process.env.WARD_BENCH_MESH_ROUNDS): number {
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`WARD_BENCH_MESH_ROUNDS: ${value} is not a positive integer`);
  return n;
}

/** The TCP ping-pong message size. */
export const TCP_MESSAGE_BYTES = 64;
/** The gRPC method the clients call (the apps answer any path). */
const GRPC_PATH = '/bench.Echo/Ping';
/** A gRPC length-prefixed request message: uncompressed, 4-byte length, 4 bytes of payload. */
const GRPC_REQUEST = Buffer.from([0, 0, 0, 0, 4, 0x0a, 0x02, 0x68, 0x69]);
/** How long a run waits for the requests still in flight at its end. */
const DRAIN_MS = 5000;
const noop = (): void => {};

/** The value at quantile `q` (0..1) of ascending `sorted` (nearest rank); NaN when empty. */
export function quantile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

// === clients ===

/** Opens a CONNECT tunnel to `authority` through the forward proxy; resolves with the socket once the proxy answered 200. */
export async function connectTunnel(proxyHost: string, proxyPort: number, authority: string): Promise<Socket> {
  const socket = netConnect({ host: proxyHost, port: proxyPort, noDelay: true });
  socket.on('error', noop);
  await once(socket, 'connect');
  socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  // Paused mode (read on 'readable'), so no byte after the proxy's answer is lost to a 'data' listener.
  let head = Buffer.alloc(0);
  for (;;) {
    const chunk = socket.read() as Buffer | null;
    if (chunk === null) {
      const [event] = await Promise.race([once(socket, 'readable').then(() => ['readable']), once(socket, 'close').then(() => ['close'])]);
      if (event === 'close') throw new Error(`the forward proxy closed the CONNECT ${authority} tunnel`);
      continue;
    }
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end === -1) continue;
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(head.toString('latin1'));
    if (status?.[1] !== '200') {
      socket.destroy();
      throw new Error(`CONNECT ${authority}: ${head.subarray(0, end).toString('latin1').split('\r\n')[0] ?? ''}`);
    }
    if (end + 4 < head.length) socket.unshift(head.subarray(end + 4));
    return socket;
  }
}

/** HTTP/1.1 GETs on keep-alive connections (at most `maxSockets`). */
export function http1Client(route: Route, maxSockets: number): LoadClient {
  const agent = new Agent({ keepAlive: true, maxSockets, scheduling: 'lifo' });
  const options: RequestOptions =
    route.kind === 'direct'
      ? { host: route.host, port: route.port, path: '/ping', agent }
      : { host: route.proxyHost, port: route.proxyPort, path: `http://${route.authority}/ping`, agent, headers: { host: route.authority } };
  return {
    request: () =>
      new Promise<void>((resolve, reject) => {
        const req = httpRequest(options, (res) => {
          res.on('data', noop);
          res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode ?? 0}`))));
          res.on('error', reject);
        });
        req.on('error', reject);
        req.end();
      }),
    close: () => agent.destroy(),
  };
}

/** gRPC-shaped unary calls (POST, `application/grpc`, 5-byte-prefixed message, `grpc-status` trailer) on one HTTP/2 session. */
export async function grpcClient(route: Route): Promise<LoadClient> {
  // The generator's own HTTP/2 client binds an AsyncResource per request, like the proxy's: made
  // lean the same way, its old-generation garbage (and the full GCs that stall every path's
  // measurement alike) goes down (src/shared/async-bind.ts).
  installLeanAsyncBind();
  let session: ClientHttp2Session;
  if (route.kind === 'direct') {
    session = http2Connect(`http://${route.host}:${route.port}`);
  } else {
    const tunnel = await connectTunnel(route.proxyHost, route.proxyPort, route.authority);
    session = http2Connect(`http://${route.authority}`, { createConnection: () => tunnel });
  }
  session.on('error', noop);
  await Promise.race([
    once(session, 'connect'),
    once(session, 'close').then(() => {
      throw new Error('the HTTP/2 session closed before it connected');
    }),
  ]);
  const headers = { ':method': 'POST', ':path': GRPC_PATH, 'content-type': 'application/grpc', te: 'trailers' };
  return {
    request: () =>
      new Promise<void>((resolve, reject) => {
        const stream = session.request(headers);
        let grpcStatus: string | undefined;
        stream.on('response', (h) => {
          // A trailers-only answer (an error) carries grpc-status in the headers.
          if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
        });
        stream.on('trailers', (t) => {
          grpcStatus = String(t['grpc-status']);
        });
        stream.on('data', noop);
        stream.on('end', () => (grpcStatus === '0' ? resolve() : reject(new Error(`grpc-status ${grpcStatus ?? 'missing'}`))));
        stream.on('error', reject);
        stream.end(GRPC_REQUEST);
      }),
    close: () => session.destroy(),
  };
}

interface Job {
  readonly resolve: () => void;
  readonly reject: (e: Error) => void;
}

interface PingConnection {
  readonly socket: Socket;
  job: Job | undefined;
  received: number;
}

/** 64-byte ping-pong over `connections` TCP connections; a request waits (FIFO) when all are busy. */
export async function tcpClient(route: Route, connections: number): Promise<LoadClient> {
  const message = Buffer.alloc(TCP_MESSAGE_BYTES, 0x61);
  const idle: PingConnection[] = [];
  const queue: Job[] = [];
  let closed = false;
  const start = (c: PingConnection, job: Job): void => {
    c.job = job;
    c.socket.write(message);
  };
  const open = async (): Promise<PingConnection> => {
    const socket =
      route.kind === 'direct'
        ? netConnect({ host: route.host, port: route.port, noDelay: true })
        : await connectTunnel(route.proxyHost, route.proxyPort, route.authority);
    socket.on('error', noop);
    if (route.kind === 'direct') await once(socket, 'connect');
    const c: PingConnection = { socket, job: undefined, received: 0 };
    socket.on('data', (chunk: Buffer) => {
      c.received += chunk.length;
      if (c.received < TCP_MESSAGE_BYTES) return;
      c.received -= TCP_MESSAGE_BYTES;
      const job = c.job;
      c.job = undefined;
      const next = queue.shift();
      if (next !== undefined) start(c, next);
      else idle.push(c);
      job?.resolve();
    });
    socket.on('close', () => {
      const i = idle.indexOf(c);
      if (i !== -1) idle.splice(i, 1);
      c.job?.reject(new Error('the TCP connection closed'));
      c.job = undefined;
    });
    return c;
  };
  const all = await Promise.all(Array.from({ length: connections }, open));
  idle.push(...all);
  return {
    request: () =>
      new Promise<void>((resolve, reject) => {
        if (closed) {
          reject(new Error('client closed'));
          return;
        }
        const job = { resolve, reject };
        const c = idle.pop();
        if (c !== undefined) start(c, job);
        else queue.push(job);
      }),
    close: () => {
      closed = true;
      for (const job of queue.splice(0)) job.reject(new Error('client closed'));
      for (const c of all) c.socket.destroy();
    },
  };
}

// === runs ===

/** Options of {@link runFixedRate}. */
export interface FixedRateOptions {
  readonly ratePerSec: number;
  readonly warmupMs: number;
  readonly measureMs: number;
  readonly hooks?: WindowHooks;
}

/**
 * The ticker thread of {@link runFixedRate} (CommonJS, evaluated): sleeps on `Atomics.wait`,
 * which takes fractional milliseconds, until the next request is due, then posts how many are
 * due by now. The main thread's timers have 1 ms granularity (a request would go out ~0.5 ms
 * late on average, ~1 ms at p99, more under load); woken by a message it is ~0.1 ms late.
 */
const TICKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { performance } = require('node:perf_hooks');
parentPort.once('message', ({ startMs, intervalMs, total }) => {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const now = () => performance.timeOrigin + performance.now();
  let due = 0;
  while (due < total) {
    const waitMs = startMs + due * intervalMs - now();
    if (waitMs > 0) Atomics.wait(cell, 0, 0, waitMs);
    due = Math.min(total, Math.max(due + 1, Math.floor((now() - startMs) / intervalMs) + 1));
    parentPort.postMessage(due);
  }
});
`;

/** Wall-clock milliseconds comparable across threads (each thread has its own `performance.timeOrigin`). */
const clock = (): number => performance.timeOrigin + performance.now();

/**
 * Open loop at a fixed rate for `warmupMs + measureMs`, paced by a ticker thread; latency of the
 * requests scheduled in the measured window, from their scheduled send time. Waits at most
 * {@link DRAIN_MS} for the last answers (unanswered requests count as errors).
 */
export async function runFixedRate(client: LoadClient, opts: FixedRateOptions): Promise<LoadStats> {
  const intervalMs = 1000 / opts.ratePerSec;
  const total = Math.floor((opts.warmupMs + opts.measureMs) / intervalMs);
  const firstMeasured = Math.ceil(opts.warmupMs / intervalMs);
  const latencies = new Float64Array(total - firstMeasured);
  const lags = new Float64Array(total - firstMeasured);
  const ticker = new Worker(TICKER_SOURCE, { eval: true });
  await once(ticker, 'online');
  const t0 = clock() + 20;
  const measureFrom = t0 + opts.warmupMs;
  const end = measureFrom + opts.measureMs;
  let answered = 0;
  let completedInWindow = 0;
  let inFlight = 0;
  let next = 0;
  let drained: (() => void) | undefined;

  const settle = (i: number, ok: boolean): void => {
    const done = clock();
    inFlight--;
    if (ok && done >= measureFrom && done <= end) completedInWindow++;
    if (ok && i >= firstMeasured) latencies[answered++] = done - (t0 + i * intervalMs);
    if (inFlight === 0 && next >= total) drained?.();
  };
  try {
    await new Promise<void>((resolve, reject) => {
      ticker.on('error', reject);
      ticker.on('message', (due: number) => {
        const now = clock();
        if (next <= firstMeasured && due > firstMeasured) opts.hooks?.start();
        for (; next < due; next++) {
          const i = next;
          if (i >= firstMeasured) lags[i - firstMeasured] = now - (t0 + i * intervalMs);
          inFlight++;
          client.request().then(
            () => settle(i, true),
            () => settle(i, false),
          );
        }
        if (next >= total) resolve();
      });
      ticker.postMessage({ startMs: t0, intervalMs, total });
    });
  } finally {
    await ticker.terminate();
  }
  await new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, end - clock())));
  opts.hooks?.stop();
  if (inFlight > 0) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, DRAIN_MS);
      drained = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
  return {
    sortedMs: latencies.slice(0, answered).sort(),
    rps: (completedInWindow * 1000) / opts.measureMs,
    // Failed plus never answered.
    errors: total - firstMeasured - answered,
    lagP99Ms: quantile(lags.sort(), 0.99),
  };
}

/** Options of {@link runClosedLoop}. */
export interface ClosedLoopOptions {
  readonly concurrency: number;
  readonly warmupMs: number;
  readonly measureMs: number;
  readonly hooks?: WindowHooks;
}

/** Closed loop (saturation): `concurrency` workers back to back; latency from the actual send. */
export async function runClosedLoop(client: LoadClient, opts: ClosedLoopOptions): Promise<LoadStats> {
  const t0 = performance.now();
  const measureFrom = t0 + opts.warmupMs;
  const end = measureFrom + opts.measureMs;
  const latencies: number[] = [];
  let completedInWindow = 0;
  let errors = 0;
  let phase: 'warm-up' | 'measuring' | 'done' = 'warm-up';
  const startWindow = (): void => {
    if (phase !== 'warm-up') return;
    phase = 'measuring';
    opts.hooks?.start();
  };
  const stopWindow = (): void => {
    startWindow();
    if (phase !== 'measuring') return;
    phase = 'done';
    opts.hooks?.stop();
  };
  const startTimer = setTimeout(startWindow, opts.warmupMs);
  const stopTimer = setTimeout(stopWindow, opts.warmupMs + opts.measureMs);
  const worker = async (): Promise<void> => {
    while (performance.now() < end) {
      const sent = performance.now();
      try {
        await client.request();
      } catch {
        if (sent >= measureFrom) errors++;
        // A failing path must not turn into a busy loop.
        await new Promise((r) => setTimeout(r, 10));
        continue;
      }
      const done = performance.now();
      if (done < measureFrom || done > end) continue;
      completedInWindow++;
      if (sent >= measureFrom) latencies.push(done - sent);
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  clearTimeout(startTimer);
  clearTimeout(stopTimer);
  stopWindow();
  const rps = opts.measureMs > 0 ? (completedInWindow * 1000) / opts.measureMs : 0;
  return { sortedMs: Float64Array.from(latencies).sort(), rps, errors, lagP99Ms: 0 };
}
