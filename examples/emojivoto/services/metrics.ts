/**
 * A tiny Prometheus endpoint: `GET /metrics` in the text exposition format, built from counters
 * the service keeps itself (no client library for a handful of numbers).
 */
import { createServer } from 'node:http';
import { listenHttp, type ServiceProcess } from './service-process.js';

/** One counter family: name, help text and the current value per label value. */
export interface CounterFamily {
  readonly name: string;
  readonly help: string;
  readonly label: string;
  /** Label value -> count, read at scrape time. */
  readonly values: () => Iterable<readonly [string, number]>;
}

/** Renders `families` in the Prometheus text format (version 0.0.4). */
export function renderMetrics(families: readonly CounterFamily[]): string {
  const lines: string[] = [];
  for (const f of families) {
    lines.push(`# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} counter`);
    for (const [value, count] of f.values()) lines.push(`${f.name}{${f.label}="${value.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"} ${count}`);
  }
  return `${lines.join('\n')}\n`;
}

/** Serves `families` on `host:port` when `PROM_PORT` is set; does nothing otherwise. */
export async function serveMetrics(svc: ServiceProcess, host: string, families: readonly CounterFamily[]): Promise<void> {
  if (svc.optionalEnv('PROM_PORT') === undefined) return;
  const port = svc.port('PROM_PORT');
  const server = createServer((req, res) => {
    if (req.method === 'GET' && new URL(req.url ?? '/', 'http://metrics').pathname === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(renderMetrics(families));
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    }
  });
  await listenHttp(svc, server, host, port, 'PROM_PORT');
  svc.log(`metrics on http://${host}:${port}/metrics`);
}
