/**
 * Structured logging (pino). Long-running roles log JSON lines to stderr; tests pass their own
 * destination or `silent`.
 */
import { type DestinationStream, type LevelWithSilent, type Logger, pino } from 'pino';

export type { Logger } from 'pino';

/** Logger settings. */
export interface LoggerOptions {
  readonly level?: LevelWithSilent;
  readonly name?: string;
  /** Where lines go (default: stderr, asynchronously). */
  readonly destination?: DestinationStream;
}

/** Creates the root logger of a process. `WARD_LOG` overrides the level. */
export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = (process.env.WARD_LOG as LevelWithSilent | undefined) ?? opts.level ?? 'info';
  const options = { level, base: opts.name !== undefined ? { name: opts.name } : null, timestamp: pino.stdTimeFunctions.isoTime };
  return pino(options, opts.destination ?? pino.destination({ fd: 2, sync: false }));
}

/** A logger that drops everything. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
