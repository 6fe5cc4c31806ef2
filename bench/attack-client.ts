/**
 * The attacker of `npm run bench -- attack`, run as its own process (its connections, descriptors
 * and event loop apart from the healthy client's): opens up to `count` TCP connections to
 * `host:port` from `localAddress`, at most `concurrency` connecting at once and none after
 * `openMs`; on each, once connected, writes `payload` and then stays silent (reading and dropping
 * whatever comes back). `holdMs` after the start every connection is destroyed.
 *
 * Protocol: the options as one JSON argument; prints `ready` once started, begins on a line on
 * stdin, prints one JSON line ({@link AttackReport}) when done, and exits. Exits when stdin closes
 * (the bench died).
 */
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';

/** What the bench asks for. */
export interface AttackOptions {
  readonly host: string;
  readonly port: number;
  readonly localAddress: string;
  readonly count: number;
  readonly concurrency: number;
  /** A file whose bytes are written once on each connection. */
  readonly payloadFile: string;
  /** No new connection after this long from the start. */
  readonly openMs: number;
  /** Every connection is destroyed this long after the start. */
  readonly holdMs: number;
}

/** What the attacker saw. */
export interface AttackReport {
  /** Connections established. */
  readonly opened: number;
  /** Connections that failed before they were established (refused, reset, EMFILE, ...). */
  readonly failed: number;
  /** Established connections the proxy closed before the hold ended. */
  readonly closedByPeer: number;
  /** Of those, closed after the whole payload was written and before the open phase ended. */
  readonly closedWhileOpening: number;
  /** Established connections still open when the hold ended. */
  readonly openAtEnd: number;
  /** The most established connections open at once. */
  readonly peakOpen: number;
  /** Time to establish every connection that was, ms. */
  readonly openedInMs: number;
  /** Why connections failed, by error code. */
  readonly failures: Readonly<Record<string, number>>;
}

const opts = JSON.parse(process.argv[2] ?? '{}') as AttackOptions;
const payload = readFileSync(opts.payloadFile);
const sockets = new Set<Socket>();
let opened = 0;
let failed = 0;
let closedByPeer = 0;
let closedWhileOpening = 0;
let peakOpen = 0;
let openedInMs = 0;
let ending = false;
let opening = true;
const failures: Record<string, number> = {};
const noop = (): void => {};

function openOne(onDone: () => void): void {
  const s = connect({ host: opts.host, port: opts.port, localAddress: opts.localAddress });
  let established = false;
  s.on('error', (e: NodeJS.ErrnoException) => {
    if (established) return;
    failed++;
    const code = e.code ?? 'unknown';
    failures[code] = (failures[code] ?? 0) + 1;
  });
  s.once('connect', () => {
    established = true;
    opened++;
    sockets.add(s);
    peakOpen = Math.max(peakOpen, sockets.size);
    openedInMs = performance.now() - t0;
    s.on('data', noop);
    s.write(payload);
    onDone();
  });
  s.once('close', () => {
    if (!established) {
      onDone();
      return;
    }
    sockets.delete(s);
    if (!ending) {
      closedByPeer++;
      if (opening) closedWhileOpening++;
    }
  });
}

let t0 = 0;

function run(): Promise<AttackReport> {
  t0 = performance.now();
  let started = 0;
  let inFlight = 0;
  return new Promise((resolve) => {
    const next = (): void => {
      while (opening && inFlight < opts.concurrency && started < opts.count) {
        started++;
        inFlight++;
        openOne(() => {
          inFlight--;
          next();
        });
      }
    };
    const stopOpening = setTimeout(() => {
      opening = false;
    }, opts.openMs);
    next();
    setTimeout(() => {
      clearTimeout(stopOpening);
      opening = false;
      ending = true;
      const openAtEnd = sockets.size;
      for (const s of sockets) s.destroy();
      resolve({ opened, failed, closedByPeer, closedWhileOpening, openAtEnd, peakOpen, openedInMs: Math.round(openedInMs), failures });
    }, opts.holdMs);
  });
}

process.stdin.setEncoding('utf8');
process.stdin.once('data', () => {
  void run().then((report) => {
    process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(0));
  });
});
process.stdin.on('end', () => process.exit(0));
process.stdout.write('ready\n');
