/**
 * `ward dashboard [--controller URL] [--port P] [--no-open]`: where the dashboard of the running
 * local mesh (or of the given controller) is. The controller's admin port serves it; this command
 * checks that it answers, prints the URL and opens a browser when there is a display.
 *
 * With `--port P` it also forwards 127.0.0.1:P to the controller's admin port until Ctrl-C, for a
 * controller reached some other way than the browser's machine (an SSH tunnel's end, a
 * port-forward): the dashboard uses only same-origin requests, so it works through the forward.
 */
import { spawn } from 'node:child_process';
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Command } from '@commander-js/extra-typings';
import { isLoopbackHostHeader } from '../../shared/index.js';
import { type CliIo, EXIT, UsageError, untilStopped } from '../io.js';
import { observeController } from './stat.js';

/** Flags of `ward dashboard`. */
export interface DashboardFlags {
  readonly controller?: string;
  readonly port?: string;
  /** Commander's `--no-open`: false when given. */
  readonly open: boolean;
}

/** Registers `ward dashboard`. */
export function registerDashboardCommand(program: Command, io: CliIo, result: { status: number }, signals: AbortSignal | undefined): void {
  program
    .command('dashboard')
    .description("print the URL of the dashboard (workloads, policy, who-can-talk graph, tap, explain) the controller's admin port serves")
    .option('--controller <url>', 'the controller (its admin address); default: the local mesh of `ward up`')
    .option('--port <port>', 'also serve it on 127.0.0.1:PORT, forwarded to the controller, until Ctrl-C (0: any free port)')
    .option('--no-open', 'do not open a browser')
    .action(async (opts) => {
      result.status = await runDashboard(opts as DashboardFlags, io, signals);
    });
}

/** Checks that the controller serves the dashboard; a usage error with the reason when not. */
async function checkServed(base: URL): Promise<void> {
  let res: Response;
  try {
    res = await fetch(new URL('/dashboard/', base), { method: 'HEAD', signal: AbortSignal.timeout(15_000) });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new UsageError(`cannot reach the controller at ${base.origin}: ${cause?.code ?? cause?.message ?? (e as Error).message}`);
  }
  if (res.status === 503) throw new UsageError(`the controller at ${base.origin} has no dashboard built: run \`npm run build\` in ward's checkout`);
  if (!res.ok)
    throw new UsageError(
      `the controller at ${base.origin} answered ${res.status} for /dashboard/ (is this its admin address, and is it this version of ward?)`,
    );
}

/** Opens `url` in the desktop's browser when there is a display; never fails the command. */
function openBrowser(url: string, io: CliIo): void {
  const hasDisplay =
    process.platform === 'darwin' || process.platform === 'win32' || process.env.DISPLAY !== undefined || process.env.WAYLAND_DISPLAY !== undefined;
  if (!hasDisplay || process.stdout.isTTY !== true) return;
  const cmd = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer' : 'xdg-open';
  try {
    const child = spawn(cmd, [url], { stdio: 'ignore', detached: true });
    child.on('error', () => io.err(`(could not start ${cmd}: open the URL yourself)\n`));
    child.unref();
  } catch {
    // No opener installed: the URL is printed already.
  }
}

/** Forwards every request to `base`, streaming both ways. */
function forward(base: URL, req: IncomingMessage, res: ServerResponse): void {
  const send = base.protocol === 'https:' ? httpsRequest : httpRequest;
  const headers = { ...req.headers, host: base.host };
  const up = send(new URL(req.url ?? '/', base), { method: req.method ?? 'GET', headers }, (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.headers);
    answer.pipe(res);
  });
  up.on('error', (e) => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain; charset=utf-8' });
    res.end(`cannot reach the controller at ${base.origin}: ${e.message}\n`);
  });
  res.on('close', () => up.destroy());
  req.pipe(up);
}

/** Runs `ward dashboard`. */
export async function runDashboard(flags: DashboardFlags, io: CliIo, signals: AbortSignal | undefined): Promise<number> {
  const port = flags.port === undefined ? undefined : /^\d{1,5}$/.test(flags.port) && Number(flags.port) <= 65535 ? Number(flags.port) : Number.NaN;
  if (Number.isNaN(port)) throw new UsageError(`--port "${flags.port}" is not a port number (0-65535)`);
  const base = await observeController(flags.controller, 'dashboard');
  await checkServed(base);
  if (port === undefined) {
    const url = new URL('/dashboard/', base).href;
    io.out(`${url}\n`);
    if (flags.open) openBrowser(url, io);
    return EXIT.ok;
  }
  const server = createServer((req, res) => {
    // The forwarder rewrites Host for the controller, so it must refuse a rebinding page itself.
    if (!isLoopbackHostHeader(req.headers.host)) {
      res.writeHead(403, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' });
      res.end(`Host ${JSON.stringify(req.headers.host)} does not name loopback: open http://127.0.0.1:${req.socket.localPort}/dashboard/\n`);
      return;
    }
    forward(base, req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(e.code === 'EADDRINUSE' ? new UsageError(`--port ${port}: 127.0.0.1:${port} is in use`) : new UsageError(`--port ${port}: ${e.message}`)),
    );
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/dashboard/`;
  io.out(`${url}\n`);
  io.err(`forwarding to the controller at ${base.origin}; Ctrl-C stops\n`);
  if (flags.open) openBrowser(url, io);
  await untilStopped(signals);
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return EXIT.ok;
}
