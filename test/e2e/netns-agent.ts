/**
 * A helper process for tests that need applications and clients inside a network namespace (run
 * as `ip netns exec NS node --import tsx test/e2e/netns-agent.ts`; see {@link NetnsAgent} in
 * netns.ts). It reads one JSON command per line on stdin and answers one JSON line on stdout with
 * the same `id`:
 * - `{op: 'http-serve', host, port}`: an HTTP server answering every request with JSON
 *   `{path, clientId (l5d-client-id or null), remote (the peer address it saw)}`;
 * - `{op: 'echo-serve', host, port}`: a TCP echo server;
 * - `{op: 'http-get', host, port, path}`: one GET → `{status, body}` or `{error}` (reset/refused);
 * - `{op: 'echo', host, port, data}`: writes `data` → `{echoed}` once it came back, or
 *   `{closed: true, received}` when the peer closed first.
 * Every client operation is bounded by `timeoutMs` (default 10 s). It exits when stdin closes.
 */
import { createServer as createHttpServer, request as httpRequest } from 'node:http';
import { createServer as createNetServer, connect as netConnect, type Server } from 'node:net';
import { createInterface } from 'node:readline';

/** A command to the agent. */
export type AgentCommand =
  | { readonly op: 'http-serve'; readonly host: string; readonly port: number }
  | { readonly op: 'echo-serve'; readonly host: string; readonly port: number }
  | { readonly op: 'http-get'; readonly host: string; readonly port: number; readonly path: string; readonly timeoutMs?: number }
  | { readonly op: 'echo'; readonly host: string; readonly port: number; readonly data: string; readonly timeoutMs?: number };

/** The agent's answer (besides `id`). */
export interface AgentReply {
  readonly status?: number;
  readonly body?: string;
  readonly echoed?: string;
  readonly closed?: boolean;
  readonly received?: string;
  readonly error?: string;
}

const servers: Server[] = [];

function listen(server: Server, host: string, port: number): Promise<AgentReply> {
  servers.push(server);
  return new Promise((resolve) => {
    server.once('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
    server.listen({ host, port }, () => resolve({}));
  });
}

function httpGet(host: string, port: number, path: string, timeoutMs: number): Promise<AgentReply> {
  return new Promise((resolve) => {
    const req = httpRequest({ host, port, path, agent: false, headers: { connection: 'close' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
    });
    req.on('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
    req.setTimeout(timeoutMs, () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })));
    req.end();
  });
}

function echo(host: string, port: number, data: string, timeoutMs: number): Promise<AgentReply> {
  return new Promise((resolve) => {
    const s = netConnect({ host, port });
    let received = '';
    const timer = setTimeout(() => {
      s.destroy();
      resolve({ error: 'ETIMEDOUT', received });
    }, timeoutMs);
    s.setEncoding('utf8');
    s.on('error', () => {});
    s.on('data', (c: string) => {
      received += c;
      if (received === data) {
        clearTimeout(timer);
        s.destroy();
        resolve({ echoed: received });
      }
    });
    s.once('close', () => {
      clearTimeout(timer);
      resolve({ closed: true, received });
    });
    s.write(data);
  });
}

function run(cmd: AgentCommand): Promise<AgentReply> {
  switch (cmd.op) {
    case 'http-serve': {
      const server = createHttpServer((req, res) => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ path: req.url, clientId: req.headers['l5d-client-id'] ?? null, remote: req.socket.remoteAddress ?? null }));
      });
      return listen(server, cmd.host, cmd.port);
    }
    case 'echo-serve': {
      const server = createNetServer((s) => {
        s.on('error', () => {});
        s.pipe(s);
      });
      return listen(server, cmd.host, cmd.port);
    }
    case 'http-get':
      return httpGet(cmd.host, cmd.port, cmd.path, cmd.timeoutMs ?? 10_000);
    case 'echo':
      return echo(cmd.host, cmd.port, cmd.data, cmd.timeoutMs ?? 10_000);
  }
}

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const { id, ...cmd } = JSON.parse(line) as AgentCommand & { id: number };
  void run(cmd as AgentCommand).then((reply) => process.stdout.write(`${JSON.stringify({ id, ...reply })}\n`));
});
lines.once('close', () => {
  for (const s of servers) s.close();
  process.exit(0);
});
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
