/**
 * Processes of `npm run bench -- mesh`: starting a child with its output in a log file (so the
 * bench's own event loop, which is the load generator, never reads their logs), bounded waits,
 * stopping, and their resource use read from Linux `/proc`: resident
 * memory (`VmRSS` of `/proc/PID/status`) and CPU time (`utime + stime` of `/proc/PID/stat`, in
 * clock ticks). A {@link ProcessProbe} samples RSS every {@link RSS_SAMPLE_MS} during a window
 * and reports each process's peak RSS and its CPU time over the window's wall time
 * (`cpuPct` = CPU time / wall time × 100; 100 = one core busy), what all other processes used
 * over the same window (kernel threads included), and the CPU time the hypervisor took from
 * this machine (`steal` of `/proc/stat`).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { performance } from 'node:perf_hooks';

const RSS_SAMPLE_MS = 250;

/** Clock ticks per second (`getconf CLK_TCK`; 100 on Linux when getconf is missing). */
const CLK_TCK = ((): number => {
  try {
    const n = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(n) && n > 0 ? n : 100;
  } catch {
    return 100;
  }
})();

/** Resident set size of `pid` in MB (MiB), or NaN when the process is gone. */
export function rssMb(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m === null ? Number.NaN : Number(m[1]) / 1024;
  } catch {
    return Number.NaN;
  }
}

/** User + system CPU seconds `pid` used so far, or NaN when the process is gone. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces; fields after its closing parenthesis are fixed.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  } catch {
    return Number.NaN;
  }
}

/**
 * CPU seconds used so far by every process but `exclude`, by pid. Summing the processes rather
 * than reading the machine's busy time from `/proc/stat` keeps out what is no process's: the
 * softirq time of the bench's own loopback traffic, and on a virtual machine the ticks its
 * accounting adds under load (here the machine's busy time exceeded the processes' sum by half
 * a core during a run whose other processes used under 2 %).
 */
export function otherProcessesCpuSeconds(exclude: ReadonlySet<number>): Map<number, number> {
  const out = new Map<number, number>();
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const e of entries) {
    const pid = Number(e);
    if (!Number.isInteger(pid) || exclude.has(pid)) continue;
    const s = cpuSeconds(pid);
    if (!Number.isNaN(s)) out.set(pid, s);
  }
  return out;
}

/** CPU seconds the hypervisor took from this machine's cores so far (`steal` of `/proc/stat`), NaN when unknown. */
export function machineStealSeconds(): number {
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]?.trim().split(/\s+/) ?? [];
    const steal = Number(cpu[8]);
    return Number.isFinite(steal) ? steal / CLK_TCK : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** One process's use over a window. */
export interface ProcessUsage {
  readonly peakRssMb: number;
  readonly cpuPct: number;
}

/**
 * Samples a set of processes between {@link ProcessProbe.start} and {@link ProcessProbe.stop},
 * and the whole machine's busy CPU (so that what other processes used can be told apart).
 */
export class ProcessProbe {
  readonly #pids: readonly number[];
  #cpu0: number[] = [];
  #others0 = new Map<number, number>();
  #steal0 = 0;
  #t0 = 0;
  #peak: number[] = [];
  #timer: NodeJS.Timeout | undefined;
  #usage: Map<number, ProcessUsage> | undefined;
  #otherCpuPct = Number.NaN;
  #stealPct = Number.NaN;

  constructor(pids: readonly number[]) {
    this.#pids = pids;
  }

  /** Opens the window: CPU baselines now, RSS sampling from now on. */
  start(): void {
    this.#t0 = performance.now();
    this.#others0 = otherProcessesCpuSeconds(new Set(this.#pids));
    this.#steal0 = machineStealSeconds();
    this.#cpu0 = this.#pids.map(cpuSeconds);
    this.#peak = this.#pids.map(rssMb);
    this.#timer = setInterval(() => this.#sample(), RSS_SAMPLE_MS);
    this.#timer.unref();
  }

  /** Closes the window. */
  stop(): void {
    clearInterval(this.#timer);
    this.#sample();
    const wallSeconds = (performance.now() - this.#t0) / 1000;
    let other = 0;
    // A process that started during the window counts whole; one that ended is gone from the sum.
    for (const [pid, seconds] of otherProcessesCpuSeconds(new Set(this.#pids))) other += seconds - (this.#others0.get(pid) ?? 0);
    this.#otherCpuPct = (other / wallSeconds) * 100;
    this.#stealPct = ((machineStealSeconds() - this.#steal0) / wallSeconds) * 100;
    this.#usage = new Map(
      this.#pids.map((pid, i) => [pid, { peakRssMb: this.#peak[i] as number, cpuPct: ((cpuSeconds(pid) - (this.#cpu0[i] as number)) / wallSeconds) * 100 }]),
    );
  }

  /** Usage of `pid` over the window; throws when the window was never closed or `pid` was not probed. */
  usage(pid: number): ProcessUsage {
    const u = this.#usage?.get(pid);
    if (u === undefined) throw new Error(`ProcessProbe: no usage of ${pid} (window not closed, or not probed)`);
    return u;
  }

  /** Sum of the probed processes' CPU over the window (percent of one core). */
  totalCpuPct(): number {
    return this.#pids.reduce((sum, pid) => sum + this.usage(pid).cpuPct, 0);
  }

  /** What all processes but the probed ones used over the window, percent of one core. */
  otherCpuPct(): number {
    return this.#otherCpuPct;
  }

  /** CPU the hypervisor took from this machine over the window, percent of one core. */
  stealPct(): number {
    return this.#stealPct;
  }

  #sample(): void {
    this.#peak = this.#pids.map((pid, i) => Math.max(this.#peak[i] as number, rssMb(pid)));
  }
}

// === children ===

/** A started child process whose stdout and stderr go to `logFile`. */
export interface LoggedChild {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  readonly logFile: string;
  /** The log so far. */
  log(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once it exited. */
  stop(graceMs?: number): Promise<void>;
}

/** Starts `command args` with stdin ignored and stdout + stderr appended to `logFile`. */
export function spawnLogged(name: string, command: string, args: readonly string[], logFile: string, env: NodeJS.ProcessEnv = {}): LoggedChild {
  const fd = openSync(logFile, 'a');
  const child = spawn(command, args, { stdio: ['ignore', fd, fd], env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0', ...env } });
  closeSync(fd);
  if (child.pid === undefined) throw new Error(`cannot start ${name} (${command})`);
  const pid = child.pid;
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  child.on('error', () => {});
  return {
    name,
    child,
    pid,
    logFile,
    log: () => {
      try {
        return readFileSync(logFile, 'utf8');
      } catch {
        return '';
      }
    },
    async stop(graceMs = 5000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Polls `check` every `intervalMs` until it returns a value other than undefined; throws after `timeoutMs`. */
export async function waitFor<T>(what: string, check: () => T | undefined | Promise<T | undefined>, timeoutMs: number, intervalMs = 50): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Waits until `child`'s log matches `pattern`; throws when the child exits first or after `timeoutMs`. */
export async function waitForLog(child: LoggedChild, pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray> {
  return waitFor(
    `${child.name} to log ${pattern.source}`,
    () => {
      const m = pattern.exec(child.log());
      if (m !== null) return m;
      if (child.child.exitCode !== null || child.child.signalCode !== null)
        throw new Error(`${child.name} exited (${child.child.exitCode ?? child.child.signalCode}); log ${child.logFile}:\n${child.log().slice(-2000)}`);
      return undefined;
    },
    timeoutMs,
  );
}

/** Resolves true once `host:port` accepts a TCP connection. */
export function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = netConnect({ host, port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
