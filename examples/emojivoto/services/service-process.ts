/**
 * What every emojivoto service does the same way as a process: read its environment (failing
 * loudly when something required is missing), log one line per event to stdout, bind its ports
 * (failing loudly when it cannot) and stop cleanly on SIGTERM.
 */
import type { Server as HttpServer } from 'node:http';
import { type Server as GrpcServer, ServerCredentials } from '@grpc/grpc-js';

/** How long a service may take to stop before it exits anyway. */
const SHUTDOWN_BUDGET_MS = 900;

/** The process-level helpers of one service. */
export interface ServiceProcess {
  readonly name: string;
  /** Writes one line to stdout. */
  log(message: string): void;
  /** Writes `<name>: fatal: <message>` to stderr and exits with status 1. */
  fatal(message: string): never;
  /** A required, non-empty environment variable. */
  env(name: string): string;
  /** An optional environment variable (`undefined` when unset or empty). */
  optionalEnv(name: string): string | undefined;
  /** A required environment variable holding a TCP port (1-65535). */
  port(name: string): number;
  /** A positive integer from the environment, or `fallback` when unset. */
  positiveInt(name: string, fallback: number): number;
  /**
   * Registers what to close on SIGTERM/SIGINT. On the first signal every closer runs; the
   * process exits 0 when they are done or after ~1 s, whichever comes first. A second signal exits at once.
   */
  onShutdown(close: () => Promise<void> | void): void;
}

/** The helpers for the service called `name` (used in fatal messages). */
export function serviceProcess(name: string): ServiceProcess {
  const closers: (() => Promise<void> | void)[] = [];
  let stopping = false;

  const self: ServiceProcess = {
    name,
    log: (message) => {
      process.stdout.write(`${message}\n`);
    },
    fatal: (message) => {
      process.stderr.write(`${name}: fatal: ${message}\n`);
      process.exit(1);
    },
    optionalEnv: (key) => {
      const value = process.env[key];
      return value === undefined || value === '' ? undefined : value;
    },
    env: (key) => self.optionalEnv(key) ?? self.fatal(`environment variable ${key} is required but not set`),
    port: (key) => {
      const raw = self.env(key);
      const port = Number(raw);
      if (!/^\d+$/.test(raw) || port < 1 || port > 65535) self.fatal(`${key}=${JSON.stringify(raw)} is not a TCP port (1-65535)`);
      return port;
    },
    positiveInt: (key, fallback) => {
      const raw = self.optionalEnv(key);
      if (raw === undefined) return fallback;
      const value = Number(raw);
      if (!/^\d+$/.test(raw) || value < 1) self.fatal(`${key}=${JSON.stringify(raw)} is not a positive integer`);
      return value;
    },
    onShutdown: (close) => {
      closers.push(close);
    },
  };

  const stop = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(0);
    stopping = true;
    self.log(`${signal}: shutting down`);
    setTimeout(() => {
      self.log('shutdown took too long; exiting');
      process.exit(0);
    }, SHUTDOWN_BUDGET_MS);
    void Promise.allSettled(closers.map(async (c) => c())).then(() => {
      self.log('stopped');
      process.exit(0);
    });
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  return self;
}

/** `host:port`, with brackets for an IPv6 host. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Starts `server` on `host:port` (`portVar` names the setting for the error message) and closes it
 * on shutdown: idle keep-alive connections at once, busy ones after half the shutdown budget.
 * Exits through `fatal` when the address cannot be bound.
 */
export async function listenHttp(svc: ServiceProcess, server: HttpServer, host: string, port: number, portVar: string): Promise<void> {
  await new Promise<void>((resolve) => {
    server.once('error', (e) => svc.fatal(`cannot listen on ${joinHostPort(host, port)} (${portVar}): ${e.message}`));
    server.listen(port, host, resolve);
  });
  svc.onShutdown(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), SHUTDOWN_BUDGET_MS / 2).unref();
      }),
  );
}

/**
 * Binds `server` (plaintext HTTP/2: the mesh adds TLS) on `host:port` and closes it on shutdown:
 * calls in flight get half the shutdown budget, then the server is forced down. Exits through
 * `fatal` when the address cannot be bound.
 */
export async function listenGrpc(svc: ServiceProcess, server: GrpcServer, host: string, port: number, portVar: string): Promise<void> {
  const address = joinHostPort(host, port);
  await new Promise<void>((resolve) => {
    server.bindAsync(address, ServerCredentials.createInsecure(), (e) => {
      if (e !== null) svc.fatal(`cannot listen on ${address} (${portVar}): ${e.message}`);
      resolve();
    });
  });
  svc.onShutdown(
    () =>
      new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, SHUTDOWN_BUDGET_MS / 2);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      }),
  );
}
