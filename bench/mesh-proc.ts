/**
 * Processes of `npm run bench -- mesh`: starting a child with its output in a log file (so the
 * bench's own event loop, which is the load generator, never reads their logs), bounded waits,
 * stopping, and their resource use read from Linux `/proc`: resident
 * memory (`VmRSS` of `/proc/PID/status`) and CPU time (`utime + stime` of `/proc/PID/stat`, in
 * clock ticks). A {@link ProcessProbe} samples RSS every {@link RSS_SAMPLE_MS} during a window
 * and reports each process's peak RSS and its CPU time over the window's wall time
 * (`cpuPct` = CPU time / wall time × 100; 100 = one core busy), and the CPU time the hypervisor
 * took from this machine (`steal` of `/proc/stat`); {@link OtherProcesses} measures what all
 * other processes used.
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

/** Resident memory of a process in MB (MiB), from `/proc/PID/status`. */
export interface ResidentMb {
  readonly rss: number;
  /**
   * Pages of this process alone (`RssAnon + RssShmem`): its heaps and stacks, what each more
   * process costs the machine.
   */
  readonly private: number;
  /**
   * File pages mapped (`RssFile`): for node mostly its own binary (code, the built-in modules'
   * sources, ICU data), which every node process on the machine shares.
   */
  readonly file: number;
}

/** {@link ResidentMb} of `pid`; NaN figures when the process is gone. */
export function residentMb(pid: number): ResidentMb {
  let status = '';
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    // gone: NaN below
  }
  const kb = (field: string): number => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status);
    return m === null ? Number.NaN : Number(m[1]);
  };
  return { rss: kb('VmRSS') / 1024, private: (kb('RssAnon') + kb('RssShmem')) / 1024, file: kb('RssFile') / 1024 };
}

/**
 * The fields of `/proc/PID/stat` after the command name (field 3 on, so `utime` is index 11), or
 * undefined when the process is gone. The command name may contain spaces; what follows its
 * closing parenthesis is fixed.
 */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** User + system CPU seconds `pid` used so far, or NaN when the process is gone. */
export function cpuSeconds(pid: number): number {
  const f = statFields(pid);
  return f === undefined ? Number.NaN : (Number(f[11]) + Number(f[12])) / CLK_TCK;
}

/**
 * The CPU that every process outside the bench used between {@link OtherProcesses.take} and
 * {@link OtherProcesses.since}. Summing processes rather than reading the machine's busy time from
 * `/proc/stat` keeps out what is no process's: the softirq time of the bench's own loopback
 * traffic, and on a virtual machine the ticks its accounting adds under load (here the machine's
 * busy time exceeded the processes' sum by half a core during a run whose other processes used
 * under 2 %). Each process counts its reaped children too (`cutime + cstime`), so a build of
 * short-lived compilers shows in its parent; processes are told apart by pid and start time, so
 * a reused pid never subtracts. Reading every `/proc/PID/stat` takes milliseconds: take it
 * before a run and after it, never inside the measured window (the load generator would stall).
 */
export class OtherProcesses {
  readonly #cpu: ReadonlyMap<string, number>;
  readonly #at: number;
  readonly #exclude: ReadonlySet<number>;

  private constructor(exclude: ReadonlySet<number>) {
    this.#exclude = exclude;
    this.#cpu = OtherProcesses.#read(exclude);
    this.#at = performance.now();
  }

  /** A snapshot of every process but `exclude` (the bench's). */
  static take(exclude: readonly number[]): OtherProcesses {
    return new OtherProcesses(new Set(exclude));
  }

  /** Their CPU since the snapshot, in percent of one core over the wall time since. */
  since(): number {
    const now = OtherProcesses.#read(this.#exclude);
    const wallSeconds = (performance.now() - this.#at) / 1000;
    let used = 0;
    // A process started since counts whole; one that ended is gone from the sum (its parent's
    // cutime has it, if the parent reaped it and is still there).
    for (const [key, seconds] of now) used += Math.max(0, seconds - (this.#cpu.get(key) ?? 0));
    return (used / wallSeconds) * 100;
  }

  /** `pid:starttime` → user + system CPU seconds of the process and its reaped children. */
  static #read(exclude: ReadonlySet<number>): Map<string, number> {
    const out = new Map<string, number>();
    let entries: string[];
    try {
      entries = readdirSync('/proc');
    } catch {
      return out;
    }
    for (const e of entries) {
      const pid = Number(e);
      if (!Number.isInteger(pid) || exclude.has(pid)) continue;
      const f = statFields(pid);
      // Gone meanwhile: left out.
      if (f !== undefined) out.set(`${pid}:${f[19] ?? ''}`, (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / CLK_TCK);
    }
    return out;
  }
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
  #steal0 = 0;
  #t0 = 0;
  #peak: number[] = [];
  #timer: NodeJS.Timeout | undefined;
  #usage: Map<number, ProcessUsage> | undefined;
  #stealPct = Number.NaN;

  constructor(pids: readonly number[]) {
    this.#pids = pids;
  }

  /** Opens the window: CPU baselines now, RSS sampling from now on. */
  start(): void {
    this.#t0 = performance.now();
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
