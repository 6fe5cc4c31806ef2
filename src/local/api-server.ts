/**
 * The local API of `ward up`, on 127.0.0.1 (its URL is in `mesh.json`), for `ward status`,
 * `ward logs` and `ward restart`:
 *
 *   GET  /api/v1/local/status                                   pods and recent denials (JSON)
 *   GET  /api/v1/local/logs/NS/POD?container=app|proxy|NAME&tail=N&follow=1   text; follow streams
 *   POST /api/v1/local/restart/NS/POD                           recreate the pod (JSON)
 *
 * Every request needs `Authorization: Bearer TOKEN` (the token of `mesh.json`; 401 otherwise). A
 * request with an `Origin` header (a browser page's) or whose `Host` is not `127.0.0.1:PORT` (DNS
 * rebinding) is refused (403).
 *
 * Errors are `{"error": {"code", "message"}}` like the controller's API.
 */
import { timingSafeEqual } from 'node:crypto';
import { open } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LogFile } from './supervisor.js';

/** Where the lines of one `ward logs` request come from. */
export interface LogSource {
  readonly file: LogFile;
  /** Keeps (and may rewrite) a line; undefined drops it (another container's line). */
  readonly filter?: (line: string) => string | undefined;
}

/** What the API serves. */
export interface LocalApiHandlers {
  status(): unknown;
  /** The log of a container of a pod; a string says why there is none (unknown pod or container). */
  logs(namespace: string, pod: string, container: string): LogSource | { readonly notFound: string };
  /** Recreates the pod; a string says why not. */
  restart(namespace: string, pod: string): Promise<true | { readonly notFound: string }>;
}

/** A running local API. */
export interface LocalApiServer {
  readonly port: number;
  close(): Promise<void>;
}

/** Where the API listens and what it requires. */
export interface LocalApiOptions {
  /** The bearer token every request must carry. */
  readonly token: string;
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0 (any free port). */
  readonly port?: number;
}

/** Largest piece of a log file read for `tail`. */
const MAX_TAIL_BYTES = 8 * 1024 * 1024;

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = `${JSON.stringify(value, null, 2)}\n`;
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) }).end(body);
}

function sendError(res: ServerResponse, status: number, code: string, message: string): void {
  sendJson(res, status, { error: { code, message } });
}

/** The last `n` lines of a file (all when `n` is undefined), reading at most the last 8 MiB. */
export async function tailFile(path: string, n: number | undefined): Promise<string[]> {
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    fh = await open(path, 'r');
  } catch {
    return [];
  }
  try {
    const { size } = await fh.stat();
    const start = Math.max(0, size - MAX_TAIL_BYTES);
    const buf = Buffer.alloc(size - start);
    await fh.read(buf, 0, buf.length, start);
    let text = buf.toString('utf8');
    if (start > 0) text = text.slice(text.indexOf('\n') + 1);
    const lines = text.split('\n');
    if (lines[lines.length - 1] === '') lines.pop();
    return n === undefined ? lines : lines.slice(Math.max(0, lines.length - n));
  } finally {
    await fh.close();
  }
}

/** True when `header` is `Bearer TOKEN` (compared in constant time). */
function hasToken(header: string | undefined, token: string): boolean {
  const m = /^Bearer (\S+)$/i.exec(header ?? '');
  if (m === null || token === '') return false;
  const given = Buffer.from(m[1] as string);
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

/**
 * Writes lines of `ward logs -f` to `res` without ever buffering without bound: when the client
 * does not keep up (`write` returns false), lines are dropped until 'drain', and then a line
 * says how many.
 */
function followWriter(res: ServerResponse): (text: string) => void {
  let waiting = false;
  let dropped = 0;
  res.on('drain', () => {
    waiting = false;
    if (dropped === 0) return;
    const n = dropped;
    dropped = 0;
    if (!res.write(`--- ${n} lines dropped ---\n`)) waiting = true;
  });
  return (text) => {
    if (text === '') return;
    if (waiting) {
      dropped += text.split('\n').length - 1;
      return;
    }
    if (!res.write(text)) waiting = true;
  };
}

/** Starts the API on `host:port` (port 0 = any free port). */
export function startLocalApi(handlers: LocalApiHandlers, opts: LocalApiOptions): Promise<LocalApiServer> {
  const host = opts.host ?? '127.0.0.1';
  const following = new Set<ServerResponse>();
  let expectedHost = '';
  const server = createServer((req, res) => {
    void handle(req, res).catch((e: unknown) => {
      if (!res.headersSent) sendError(res, 500, 'INTERNAL', e instanceof Error ? e.message : String(e));
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.headers.origin !== undefined) return sendError(res, 403, 'FORBIDDEN', 'requests from web pages are refused');
    if (req.headers.host !== expectedHost) return sendError(res, 403, 'FORBIDDEN', `Host must be ${expectedHost}`);
    if (!hasToken(req.headers.authorization, opts.token))
      return sendError(res, 401, 'UNAUTHENTICATED', 'missing or wrong bearer token (the token is in the mesh.json of the state directory)');
    const url = new URL(req.url ?? '/', 'http://local.invalid');
    const parts = url.pathname.split('/').filter((p) => p !== '');
    const [api, v1, local, what, ns, pod, ...rest] = parts;
    if (api !== 'api' || v1 !== 'v1' || local !== 'local' || rest.length > 0) {
      sendError(res, 404, 'NOT_FOUND', `no route ${url.pathname}`);
      return;
    }
    if (what === 'status' && ns === undefined) {
      if (req.method !== 'GET') return sendError(res, 405, 'METHOD_NOT_ALLOWED', 'use GET');
      sendJson(res, 200, handlers.status());
      return;
    }
    if (ns === undefined || pod === undefined) {
      sendError(res, 404, 'NOT_FOUND', `no route ${url.pathname}`);
      return;
    }
    if (what === 'restart') {
      if (req.method !== 'POST') return sendError(res, 405, 'METHOD_NOT_ALLOWED', 'use POST');
      const r = await handlers.restart(ns, pod);
      if (r === true) sendJson(res, 200, { restarted: `${ns}/${pod}` });
      else sendError(res, 404, 'NOT_FOUND', r.notFound);
      return;
    }
    if (what === 'logs') {
      if (req.method !== 'GET') return sendError(res, 405, 'METHOD_NOT_ALLOWED', 'use GET');
      const container = url.searchParams.get('container') ?? 'app';
      const tailText = url.searchParams.get('tail');
      const tail = tailText === null || tailText === '' || tailText === '-1' ? undefined : Number(tailText);
      if (tail !== undefined && !(Number.isInteger(tail) && tail >= 0))
        return sendError(res, 400, 'INVALID_ARGUMENT', `tail "${tailText}" is not a line count`);
      const source = handlers.logs(ns, pod, container);
      if ('notFound' in source) return sendError(res, 404, 'NOT_FOUND', source.notFound);
      const keep = source.filter ?? ((l: string) => l);
      const follow = url.searchParams.get('follow') === '1' || url.searchParams.get('follow') === 'true';
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' });
      // A follower hears the status at once, before any line.
      if (follow) res.flushHeaders();
      const out = followWriter(res);
      // Subscribe before reading the file, so no line falls between the two.
      const buffered: string[] = [];
      let live = false;
      let ended = false;
      const unsubscribe = follow
        ? source.file.subscribe({
            line: (line) => {
              const kept = keep(line);
              if (kept === undefined) return;
              if (live) out(`${kept}\n`);
              else buffered.push(kept);
            },
            // The pod was recreated: its new log file goes on (LogFile.handOver).
            notice: (text) => {
              if (live) out(`--- ${text} ---\n`);
              else buffered.push(`--- ${text} ---`);
            },
            // The pod is gone: following ends (the last line is written whatever the back-pressure).
            end: (text) => {
              ended = true;
              if (live) res.end(`--- ${text} ---\n`);
              else buffered.push(`--- ${text} ---`);
            },
          })
        : undefined;
      const all = (await tailFile(source.file.path, undefined)).flatMap((l) => {
        const kept = keep(l);
        return kept === undefined ? [] : [kept];
      });
      // Lines written while the file was read may be in both: skip the longest overlap at the seam.
      let overlap = Math.min(buffered.length, all.length);
      while (overlap > 0 && all.slice(all.length - overlap).join('\n') !== buffered.slice(0, overlap).join('\n')) overlap--;
      const fromFile = tail === undefined ? all : all.slice(Math.max(0, all.length - tail));
      if (unsubscribe === undefined) {
        res.end(fromFile.map((l) => `${l}\n`).join(''));
        return;
      }
      out(fromFile.map((l) => `${l}\n`).join(''));
      out(
        buffered
          .slice(overlap)
          .map((l) => `${l}\n`)
          .join(''),
      );
      if (ended) {
        res.end();
        return;
      }
      live = true;
      following.add(res);
      const done = () => {
        unsubscribe();
        following.delete(res);
      };
      res.once('close', done);
      req.once('close', done);
      return;
    }
    sendError(res, 404, 'NOT_FOUND', `no route ${url.pathname}`);
  }

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      const port = (server.address() as AddressInfo).port;
      expectedHost = `${host.includes(':') ? `[${host}]` : host}:${port}`;
      resolve({
        port,
        close: () =>
          new Promise<void>((r) => {
            for (const res of following) res.end();
            following.clear();
            server.close(() => r());
            server.closeAllConnections();
          }),
      });
    });
  });
}
