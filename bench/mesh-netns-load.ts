/**
 * The load generator of bench/mesh-linkerd.ts, run as a child inside a client pod's network
 * namespace (a transparent proxy only sees connections made inside its pod). It runs the same
 * rounds as the loopback paths (bench/mesh-load.ts) on commands read as JSON lines from stdin,
 * one at a time, and answers with JSON lines on stdout: `{"window": "start" | "stop"}` at the
 * measured window's edges (so that the parent samples the proxies over exactly that window),
 * then the result. Exits when stdin closes.
 */
import { createInterface } from 'node:readline';
import {
  grpcClient,
  http1Client,
  type LoadClient,
  type LoadStats,
  type Protocol,
  quantile,
  type Route,
  runClosedLoop,
  runFixedRate,
  tcpClient,
  type WindowHooks,
} from './mesh-load.js';

/** A command of the parent. */
export type NetnsLoadCommand =
  | { readonly op: 'connect'; readonly protocol: Protocol; readonly host: string; readonly port: number; readonly connections: number }
  | { readonly op: 'fixed'; readonly protocol: Protocol; readonly ratePerSec: number; readonly warmupMs: number; readonly measureMs: number }
  | { readonly op: 'max'; readonly protocol: Protocol; readonly concurrency: number; readonly warmupMs: number; readonly measureMs: number }
  | { readonly op: 'close'; readonly protocol: Protocol };

/** The answer to a `fixed` or `max` command (latencies in ms). */
export interface NetnsLoadStats {
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly rps: number;
  readonly errors: number;
  readonly lagP99Ms: number;
  readonly samples: number;
}

const say = (v: unknown): void => {
  process.stdout.write(`${JSON.stringify(v)}\n`);
};
const hooks: WindowHooks = { start: () => say({ window: 'start' }), stop: () => say({ window: 'stop' }) };
const summary = (s: LoadStats): NetnsLoadStats => ({
  p50Ms: quantile(s.sortedMs, 0.5),
  p99Ms: quantile(s.sortedMs, 0.99),
  rps: s.rps,
  errors: s.errors,
  lagP99Ms: s.lagP99Ms,
  samples: s.sortedMs.length,
});

const clients = new Map<Protocol, LoadClient>();
const clientOf = (protocol: Protocol): LoadClient => {
  const c = clients.get(protocol);
  if (c === undefined) throw new Error(`no ${protocol} client: connect first`);
  return c;
};

async function handle(cmd: NetnsLoadCommand): Promise<unknown> {
  switch (cmd.op) {
    case 'connect': {
      const route: Route = { kind: 'direct', host: cmd.host, port: cmd.port };
      const client =
        cmd.protocol === 'http1'
          ? http1Client(route, cmd.connections)
          : cmd.protocol === 'grpc'
            ? await grpcClient(route)
            : await tcpClient(route, cmd.connections);
      clients.set(cmd.protocol, client);
      await client.request();
      return { ok: true };
    }
    case 'fixed':
      return summary(await runFixedRate(clientOf(cmd.protocol), { ...cmd, hooks }));
    case 'max':
      return summary(await runClosedLoop(clientOf(cmd.protocol), { ...cmd, hooks }));
    case 'close':
      clients.get(cmd.protocol)?.close();
      clients.delete(cmd.protocol);
      return { ok: true };
  }
}

// One command at a time: the parent waits for each answer before sending the next.
let queue = Promise.resolve();
createInterface({ input: process.stdin })
  .on('line', (line) => {
    queue = queue.then(async () => {
      try {
        say({ result: await handle(JSON.parse(line) as NetnsLoadCommand) });
      } catch (e) {
        say({ error: e instanceof Error ? e.message : String(e) });
      }
    });
  })
  .on('close', () => {
    void queue.then(() => process.exit(0));
  });
say({ ready: true });
