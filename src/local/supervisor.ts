/**
 * Supervised processes: each runs in its own process group (so a stop reaches whatever it
 * started too), its stdout and stderr go line by line to a log file, to a ring buffer of recent
 * lines and to subscribers; when it ends it is restarted per the pod's `restartPolicy` with the
 * kubelet's back-off: the first restart at once, then 10 s doubling to 5 min; reset after 10 min
 * of running. A run the runtime ended (a failed liveness probe) is restarted unless the policy is
 * `Never`, whatever its exit code.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { dirname } from 'node:path';
import { Backoff, errorMessage } from '../shared/index.js';

/** The kubelet's restart policies. */
export type RestartPolicy = 'Always' | 'OnFailure' | 'Never';

/** Longest line kept whole; longer output is cut into lines of this size. */
const MAX_LINE = 64 * 1024;

/** A reader of a {@link LogFile}'s new lines (`ward logs -f`). */
export interface LogSubscriber {
  /** A line written to the file. */
  line(line: string): void;
  /** The pod was recreated: the lines that follow are the new pod's (`text` says so, for people). */
  notice?(text: string): void;
  /** No more lines will come (the pod is gone); `text` says why. */
  end?(text: string): void;
}

/**
 * An append-only log file shared by the processes of a pod (`app.log`, `proxy.log`), with live
 * subscribers. Closing the file keeps its subscribers: when the pod is recreated they are handed
 * over to the new pod's file ({@link LogFile.handOver}), else ended.
 */
export class LogFile {
  readonly path: string;
  #out: WriteStream;
  readonly #subscribers = new Set<{ readonly s: LogSubscriber; owner: LogFile }>();

  /** Opens `path`, truncating it when `truncate` (each `ward up` starts a pod's logs afresh). */
  constructor(path: string, truncate: boolean) {
    this.path = path;
    mkdirSync(dirname(path), { recursive: true });
    this.#out = createWriteStream(path, { flags: truncate ? 'w' : 'a' });
    this.#out.on('error', () => {
      // A full disk must not stop the mesh; the ring buffers still hold recent lines.
    });
  }

  /** Appends one line (without its newline) and hands it to subscribers. */
  write(line: string): void {
    this.#out.write(`${line}\n`);
    for (const e of this.#subscribers) e.s.line(line);
  }

  /** Hands every line written from now on to `s` (a function: lines only); returns the unsubscribe function. */
  subscribe(s: LogSubscriber | ((line: string) => void)): () => void {
    // The entry follows hand-overs, so unsubscribing reaches whichever file has it then.
    const entry = { s: typeof s === 'function' ? { line: s } : s, owner: this as LogFile };
    this.#subscribers.add(entry);
    return () => {
      entry.owner.#subscribers.delete(entry);
    };
  }

  /** Flushes and closes the file (subscribers stay until {@link handOver} or {@link endSubscribers}). */
  close(): Promise<void> {
    return new Promise((resolve) => this.#out.end(() => resolve()));
  }

  /** Moves the subscribers to `next` (the recreated pod's file), telling each with `notice`. */
  handOver(next: LogFile, text: string): void {
    const all = [...this.#subscribers];
    this.#subscribers.clear();
    for (const e of all) {
      e.owner = next;
      next.#subscribers.add(e);
      e.s.notice?.(text);
    }
  }

  /** Ends every subscriber (no more lines will come), telling why. */
  endSubscribers(text: string): void {
    const all = [...this.#subscribers];
    this.#subscribers.clear();
    for (const e of all) e.s.end?.(text);
  }
}

/** How a run of the process ended. */
export interface ExitInfo {
  /** Exit code, or undefined when a signal ended it or it never started. */
  readonly code: number | undefined;
  readonly signal: string | undefined;
  /** Why it could not be started (spawn error), if so. */
  readonly error?: string | undefined;
  /** Last lines of its output. */
  readonly lastLines: readonly string[];
  /** Delay before the next start, or undefined when it stays down (restart policy, or stopping). */
  readonly restartInMs: number | undefined;
  /** True when the runtime ended it (liveness failure, restart). */
  readonly killed: boolean;
}

/** Settings of a supervised process. */
export interface SupervisedOptions {
  /** `argv[0]` is looked up in `env.PATH` (relative paths are relative to `cwd`). */
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd: string;
  readonly log: LogFile;
  /** Prepended to each log line (e.g. `[web] ` in a pod of several containers). */
  readonly linePrefix?: string;
  readonly restartPolicy?: RestartPolicy;
  /** Back-off between restarts after the first, immediate one (default 10 s doubling to 300 s). */
  readonly backoff?: { readonly minMs: number; readonly maxMs: number };
  /** A run this long resets the back-off (default 10 min). */
  readonly stableMs?: number;
  /** Lines of the current run kept for exit reports (default 200). */
  readonly ringLines?: number;
  /** Every output line, unprefixed (the proxy's log lines feed the denial list). */
  readonly onLine?: (line: string) => void;
  readonly onStart?: (pid: number) => void;
  readonly onExit?: (info: ExitInfo) => void;
}

/** Where a supervised process is in its life. */
export type SupervisedState = 'idle' | 'running' | 'waiting' | 'stopped';

/** One supervised process (see the module comment). */
export class Supervised {
  readonly #opts: SupervisedOptions;
  readonly #backoff: Backoff;
  readonly #ring: string[] = [];
  #child: ChildProcess | undefined;
  /** Process group of the current run (its leader's pid). */
  #pgid: number | undefined;
  #state: SupervisedState = 'idle';
  #restarts = 0;
  /** Restarts since the back-off was last reset (the first is immediate). */
  #crashes = 0;
  #startedAt = 0;
  #timer: NodeJS.Timeout | undefined;
  #killing = false;
  #closed: Promise<void> = Promise.resolve();
  #lastExit: ExitInfo | undefined;

  constructor(opts: SupervisedOptions) {
    this.#opts = opts;
    const b = opts.backoff ?? { minMs: 10_000, maxMs: 300_000 };
    this.#backoff = new Backoff({ minMs: b.minMs, maxMs: b.maxMs, jitter: 0 });
  }

  get state(): SupervisedState {
    return this.#state;
  }

  /** True while a run is alive. */
  get running(): boolean {
    return this.#state === 'running';
  }

  /** The current run's pid. */
  get pid(): number | undefined {
    return this.#state === 'running' ? this.#child?.pid : undefined;
  }

  /** Runs started after the first one. */
  get restarts(): number {
    return this.#restarts;
  }

  /** Epoch ms of the current run's start. */
  get startedAt(): number {
    return this.#startedAt;
  }

  get lastExit(): ExitInfo | undefined {
    return this.#lastExit;
  }

  /** The last `n` output lines (default all kept). */
  lastLines(n = this.#ring.length): string[] {
    return this.#ring.slice(Math.max(0, this.#ring.length - n));
  }

  /** Starts the first run. */
  start(): void {
    if (this.#state !== 'idle') return;
    this.#spawn();
  }

  /**
   * Ends the current run because the runtime decided so (a failed liveness probe): SIGTERM, then
   * SIGKILL after `graceMs`; the restart policy then applies as for any exit.
   */
  async kill(graceMs: number): Promise<void> {
    if (this.#state !== 'running') return;
    this.#killing = true;
    await this.#terminate(graceMs);
  }

  /** Stops for good: no restart; SIGTERM to the process group, SIGKILL after `graceMs`. */
  async stop(graceMs: number): Promise<void> {
    const wasRunning = this.#state === 'running';
    this.#state = 'stopped';
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (wasRunning) await this.#terminate(graceMs);
  }

  /** SIGKILL to the process group at once, synchronously (the last resort at exit). */
  killNow(): void {
    this.#state = 'stopped';
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#signalGroup('SIGKILL');
  }

  async #terminate(graceMs: number): Promise<void> {
    const closed = this.#closed;
    this.#signalGroup('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs);
    });
    await Promise.race([closed, graceOver]);
    clearTimeout(timer);
    // Also reaches what the process left behind in its group.
    this.#signalGroup('SIGKILL');
    await closed;
  }

  #signalGroup(signal: NodeJS.Signals): void {
    if (this.#pgid === undefined) return;
    try {
      process.kill(-this.#pgid, signal);
    } catch {
      // ESRCH: the group is gone already.
    }
  }

  #spawn(): void {
    const [command, ...args] = this.#opts.argv;
    if (command === undefined) throw new RangeError('empty argv');
    this.#state = 'running';
    this.#startedAt = Date.now();
    this.#killing = false;
    // Exit reports show this run's output only.
    this.#ring.length = 0;
    let child: ChildProcess;
    let finished = false;
    let resolveClosed: () => void = () => {};
    this.#closed = new Promise((r) => {
      resolveClosed = r;
    });
    const finish = (code: number | null, signal: NodeJS.Signals | null, error?: string) => {
      if (finished) return;
      finished = true;
      resolveClosed();
      this.#onEnd(code ?? undefined, signal ?? undefined, error);
    };
    try {
      child = spawn(command, args, { cwd: this.#opts.cwd, env: this.#opts.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      // Synchronous spawn failures (bad cwd type, …) are reported like asynchronous ones.
      queueMicrotask(() => finish(null, null, errorMessage(e)));
      return;
    }
    this.#child = child;
    this.#pgid = child.pid;
    if (child.pid !== undefined) this.#opts.onStart?.(child.pid);
    let exited = false;
    let exitCode: number | null = null;
    let exitSignal: NodeJS.Signals | null = null;
    const streams = [child.stdout, child.stderr].filter((s) => s !== null);
    let open = streams.length;
    // The run is over when the process exited and its output is read to the end.
    const ended = () => {
      open--;
      if (open <= 0 && exited) finish(exitCode, exitSignal);
    };
    for (const s of streams) this.#readLines(s, ended);
    child.once('error', (err) => {
      if (child.pid !== undefined) return; // spawned fine: the exit event reports the end
      this.#line(`ward: cannot start ${command}: ${err.message}`);
      finish(null, null, err.message);
    });
    child.once('exit', (code, signal) => {
      exited = true;
      exitCode = code;
      exitSignal = signal;
      // The container is gone as a whole: whatever it started goes too (this also closes the pipes).
      this.#signalGroup('SIGKILL');
      if (open <= 0) finish(code, signal);
      // Pipes held open by a process that escaped the group: do not wait for them forever.
      else setTimeout(() => finish(code, signal), 2000).unref();
    });
  }

  #readLines(stream: NodeJS.ReadableStream, onEnd: () => void): void {
    let partial = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      partial += chunk;
      let nl = partial.indexOf('\n');
      while (nl !== -1) {
        this.#line(partial.slice(0, nl).replace(/\r$/, ''));
        partial = partial.slice(nl + 1);
        nl = partial.indexOf('\n');
      }
      while (partial.length > MAX_LINE) {
        this.#line(partial.slice(0, MAX_LINE));
        partial = partial.slice(MAX_LINE);
      }
    });
    stream.once('end', () => {
      if (partial !== '') this.#line(partial);
      partial = '';
      onEnd();
    });
    stream.once('error', () => onEnd());
  }

  #line(line: string): void {
    this.#ring.push(line);
    if (this.#ring.length > (this.#opts.ringLines ?? 200)) this.#ring.shift();
    this.#opts.log.write((this.#opts.linePrefix ?? '') + line);
    this.#opts.onLine?.(line);
  }

  #onEnd(code: number | undefined, signal: string | undefined, error: string | undefined): void {
    this.#child = undefined;
    // The group was killed at exit; its id may be reused by an unrelated process from now on.
    this.#pgid = undefined;
    const stopping = this.#state === 'stopped';
    const policy = this.#opts.restartPolicy ?? 'Always';
    // The kubelet restarts a container it killed for a failed liveness probe unless the policy is Never.
    const restart = !stopping && (policy === 'Always' || (policy === 'OnFailure' && (code !== 0 || this.#killing)));
    if (Date.now() - this.#startedAt >= (this.#opts.stableMs ?? 600_000)) {
      this.#backoff.reset();
      this.#crashes = 0;
    }
    // As the kubelet: the first restart at once, then the back-off (10 s, 20 s, … 5 min).
    const delay = restart ? (this.#crashes++ === 0 ? 0 : this.#backoff.next()) : undefined;
    const info: ExitInfo = { code, signal, error, lastLines: this.lastLines(), restartInMs: delay, killed: this.#killing };
    this.#lastExit = info;
    if (!stopping) this.#state = restart ? 'waiting' : 'stopped';
    if (restart) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        if (this.#state !== 'waiting') return;
        this.#restarts++;
        this.#spawn();
      }, delay);
    }
    if (!stopping) this.#opts.onExit?.(info);
  }
}
