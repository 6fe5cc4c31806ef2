/**
 * The CLI's view of the terminal, injectable so commands run in-process in tests.
 */
import { readFileSync } from 'node:fs';

/** Where a command writes and what it knows about the terminal. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /** True when colour and alignment for people are wanted on stdout. */
  readonly color: boolean;
  /** Reads all of standard input (for `-f -`). */
  stdin(): string;
}

/** The process's terminal. Colour follows picocolors' rules (TTY, NO_COLOR, FORCE_COLOR). */
export function processIo(color: boolean): CliIo {
  return {
    out: (t) => process.stdout.write(t),
    err: (t) => process.stderr.write(t),
    color,
    stdin: () => readFileSync(0, 'utf8'),
  };
}

/** An in-memory IO for tests: collects output. */
export function bufferIo(stdin = ''): CliIo & { stdout: string; stderr: string } {
  const io = {
    stdout: '',
    stderr: '',
    color: false,
    out(t: string) {
      io.stdout += t;
    },
    err(t: string) {
      io.stderr += t;
    },
    stdin: () => stdin,
  };
  return io;
}

/**
 * Resolves when a long-running command should stop: when `signals` aborts (at once if it already
 * has), or, when undefined, at the process's first SIGINT or SIGTERM.
 */
export function untilStopped(signals: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signals !== undefined) {
      if (signals.aborted) resolve();
      else signals.addEventListener('abort', () => resolve(), { once: true });
      return;
    }
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}

/** Exit statuses (CLI.md): 0 success, 1 a check or test failed, 2 bad usage or unreadable input. */
export const EXIT = { ok: 0, failed: 1, usage: 2 } as const;

/**
 * A usage or input error that ends the command with exit status 2. Query errors from the index
 * (unknown pod, malformed probe) end it the same way. (Not a `QueryError` subclass, so the
 * proxy's entry point does not load the index.)
 */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** Parses `HOST:PORT` (`[::1]:8090` for IPv6; `:8090` = loopback). */
export function parseListenAddress(text: string, flag: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(text);
  const port = m !== null ? Number(m[3]) : Number.NaN;
  if (m === null || !(port >= 0 && port <= 65535)) throw new UsageError(`${flag} "${text}" is not HOST:PORT (e.g. 127.0.0.1:8090, [::1]:8090, 0.0.0.0:8090)`);
  const host = m[1] ?? (m[2] === '' ? '127.0.0.1' : (m[2] as string));
  return { host, port };
}
