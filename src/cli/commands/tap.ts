/**
 * `ward tap KIND/NAME [-n NS] [--to KIND/NAME] [--path P] [--method M] [--identity ID] [--denied]
 * [--max N] [--seconds S] [-o wide|json]`: live requests from the controller's `/api/v1/tap`,
 * one line per request in the manner of `linkerd viz tap`.
 *
 * ward taps inbound only: each event is what a pod's proxy decided about a request (or connection)
 * arriving at the pod. So `ward tap deploy/web` shows requests *to* web; `ward tap deploy/vote-bot
 * --to deploy/web` taps web's proxies and keeps the requests whose client identity is one of
 * vote-bot's pods' (a client without a mesh identity cannot be told apart, so it never matches).
 *
 * The controller is `--controller URL` or, by default, the local mesh's (`ward up`). The stream
 * ends after `--max` events or `--seconds` (the controller bounds both), or at Ctrl-C.
 */
import type { Command } from '@commander-js/extra-typings';
import { LineDecoder } from '../../sources/index.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { observeController } from './stat.js';

/** Flags of `ward tap`. */
export interface TapFlags {
  readonly namespace?: string;
  readonly to?: string;
  readonly path?: string;
  readonly method?: string;
  readonly identity?: string;
  readonly denied?: boolean;
  readonly max?: string;
  readonly seconds?: string;
  readonly output: string;
  readonly controller?: string;
}

/** A line of the controller's stream, as far as the CLI reads it. */
interface TapLine {
  readonly time?: string;
  readonly namespace?: string;
  readonly pod?: string;
  readonly workload?: { readonly kind: string; readonly name: string };
  readonly port?: number;
  readonly method?: string | null;
  readonly authority?: string | null;
  readonly path?: string | null;
  readonly clientAddr?: string;
  readonly clientId?: string | null;
  readonly tls?: boolean;
  readonly server?: string;
  readonly route?: string | null;
  readonly authz?: string | null;
  readonly decision?: string;
  readonly reason?: string | null;
  readonly status?: number | null;
  readonly grpcStatus?: number | null;
  readonly latencyMs?: number | null;
  readonly error?: { readonly code?: string; readonly message?: string; readonly namespace?: string | null; readonly pod?: string | null } | string | null;
  readonly end?: {
    readonly reason?: string;
    readonly events?: number;
    readonly dropped?: { readonly rate?: number; readonly slow?: number; readonly invalid?: number };
  };
}

/** Registers `ward tap`. */
export function registerTapCommand(program: Command, io: CliIo, result: { status: number }, signals: AbortSignal | undefined): void {
  program
    .command('tap')
    .description('live requests arriving at a workload (inbound), from its proxies through the controller')
    .argument('<resource>', 'KIND/NAME (deploy/web, pod/web-0, sts/db, ns/emojivoto…); with --to, the requests\u2019 source')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--to <resource>', 'destination KIND/NAME: tap its proxies and keep the requests from <resource>\u2019s identities')
    .option('--path <prefix>', 'only requests whose path starts with this (paths are shown without their query string)')
    .option('--method <method>', 'only requests with this method')
    .option('--identity <id>', 'only requests from this client mesh identity')
    .option('--denied', 'only denied requests and connections (and audited ones, which would be denied)')
    .option('--max <n>', 'stop after this many events (default 100, at most 10000)')
    .option('--seconds <s>', 'stop after this many seconds (default 30, at most 600)')
    .option('-o, --output <format>', 'wide (more columns) or json (the NDJSON events)', 'text')
    .option('--controller <url>', "the controller's admin address (default: the local mesh's, when `ward up` runs)")
    .action(async (resource, opts) => {
      result.status = await runTap(resource, opts as TapFlags, io, signals);
    });
}

function checkCount(flag: string, v: string | undefined): void {
  if (v !== undefined && !/^[1-9][0-9]{0,8}$/.test(v)) throw new UsageError(`--${flag} "${v}" is not a positive whole number`);
}

/** GET a JSON document; errors become usage errors with the controller's message. */
async function getJson(base: URL, path: string, signal: AbortSignal): Promise<unknown> {
  const res = await open(base, path, signal);
  return res.json();
}

async function open(base: URL, path: string, signal: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(new URL(path, base), { signal });
  } catch (e) {
    if (signal.aborted) throw e;
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new UsageError(`cannot reach the controller at ${base.origin}: ${cause?.code ?? cause?.message ?? (e as Error).message}`);
  }
  if (res.ok) return res;
  let message = `the controller answered ${res.status}`;
  try {
    const body = (await res.json()) as { error?: { message?: string; hint?: string } };
    if (body.error?.message !== undefined) message = `controller: ${body.error.message}${body.error.hint !== undefined ? `\n  hint: ${body.error.hint}` : ''}`;
  } catch {
    // not JSON: keep the status
  }
  throw new UsageError(message);
}

/** The mesh identities of a resource's pods (for --to). */
async function identitiesOf(base: URL, resource: string, namespace: string, signal: AbortSignal): Promise<Set<string>> {
  const q = new URLSearchParams({ resource, namespace });
  const authz = (await getJson(base, `/api/v1/authz?${q}`, signal)) as { pods?: { namespace: string; name: string }[] };
  if (authz.pods === undefined) throw new UsageError(`${resource} is not a workload (tap a Deployment, StatefulSet, pod… with --to)`);
  const names = new Set(authz.pods.map((p) => `${p.namespace}/${p.name}`));
  const namespaces = new Set(authz.pods.map((p) => p.namespace));
  const ids = new Set<string>();
  for (const ns of namespaces) {
    const { pods } = (await getJson(base, `/api/v1/pods?${new URLSearchParams({ namespace: ns })}`, signal)) as {
      pods: { namespace: string; name: string; identity: string }[];
    };
    for (const p of pods) if (names.has(`${p.namespace}/${p.name}`)) ids.add(p.identity);
  }
  if (ids.size === 0) throw new UsageError(`${resource} has no meshed pods in namespace ${namespace}`);
  return ids;
}

function v(x: string | number | null | undefined): string {
  if (x === null || x === undefined || x === '') return '-';
  const s = String(x);
  return /[\s"]/.test(s) ? JSON.stringify(s) : s;
}

/** One event as a line, `linkerd viz tap` style. */
export function formatTapEvent(e: TapLine, id: number, wide: boolean): string {
  const http = e.method !== null && e.method !== undefined;
  const parts = [
    http ? 'req' : 'conn',
    `id=${id}`,
    'proxy=in',
    `src=${v(e.clientAddr)}`,
    `dst=${v(e.namespace)}/${v(e.pod)}:${v(e.port)}`,
    `tls=${e.tls === true}`,
    `identity=${v(e.clientId)}`,
  ];
  if (http) {
    parts.push(`:method=${v(e.method)}`, `:authority=${v(e.authority)}`, `:path=${v(e.path)}`, `:status=${v(e.status)}`);
    if (e.grpcStatus !== null && e.grpcStatus !== undefined) parts.push(`grpc-status=${e.grpcStatus}`);
    parts.push(`latency=${e.latencyMs === null || e.latencyMs === undefined ? '-' : `${e.latencyMs}ms`}`);
  }
  if (e.decision === 'deny') parts.push(`denied=${v(e.reason)}`);
  else parts.push(`${e.decision === 'audit' ? 'audit=would-deny ' : ''}authz=${v(e.authz)}`);
  if (typeof e.error === 'string') parts.push(`error=${v(e.error)}`);
  if (wide)
    parts.push(
      `workload=${e.workload === undefined ? '-' : `${e.workload.kind}/${e.workload.name}`}`,
      `server=${v(e.server)}`,
      `route=${v(e.route)}`,
      `time=${v(e.time)}`,
    );
  return `${parts.join(' ')}\n`;
}

/** Runs `ward tap`. */
export async function runTap(resource: string, flags: TapFlags, io: CliIo, signals: AbortSignal | undefined): Promise<number> {
  if (!['text', 'wide', 'json'].includes(flags.output)) throw new UsageError(`-o "${flags.output}": use wide or json (or leave it out)`);
  checkCount('max', flags.max);
  checkCount('seconds', flags.seconds);
  const namespace = flags.namespace ?? 'default';
  const base = await observeController(flags.controller, 'tap');
  const abort = new AbortController();
  const onSignal = (): void => abort.abort();
  if (signals !== undefined) signals.addEventListener('abort', onSignal, { once: true });
  else {
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  }
  try {
    let from: Set<string> | undefined;
    if (flags.to !== undefined) {
      from = await identitiesOf(base, resource, namespace, abort.signal);
      if (flags.identity !== undefined && !from.has(flags.identity)) throw new UsageError(`--identity ${flags.identity} is not an identity of ${resource}`);
    }
    const q = new URLSearchParams({ resource: flags.to ?? resource, namespace });
    const identity = flags.identity ?? (from?.size === 1 ? [...from][0] : undefined);
    if (identity !== undefined) q.set('identity', identity);
    if (flags.path !== undefined) q.set('path', flags.path);
    if (flags.method !== undefined) q.set('method', flags.method);
    if (flags.denied === true) q.set('denied', 'true');
    if (flags.max !== undefined) q.set('max', flags.max);
    if (flags.seconds !== undefined) q.set('seconds', flags.seconds);
    const res = await open(base, `/api/v1/tap?${q}`, abort.signal);
    // The controller answers once every pod's proxy has the tap open: requests from now on show.
    io.err(`tapping ${flags.to ?? resource} in ${namespace}${from !== undefined ? ` (requests from ${resource})` : ''}; Ctrl-C to stop\n`);
    return await print(res, from, flags.output, io);
  } catch (e) {
    // Ctrl-C ends the tap; that is success.
    if (abort.signal.aborted) return EXIT.ok;
    throw e;
  } finally {
    signals?.removeEventListener('abort', onSignal);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** Longest line read from the controller: its events are a few KiB at most. */
const MAX_TAP_LINE_BYTES = 1024 * 1024;

async function print(res: Response, from: Set<string> | undefined, output: string, io: CliIo): Promise<number> {
  const lines = new LineDecoder(MAX_TAP_LINE_BYTES);
  let id = 0;
  let failed = 0;
  const onLine = (raw: string): void => {
    if (raw === '') return;
    let line: TapLine;
    try {
      line = JSON.parse(raw) as TapLine;
    } catch {
      io.err(`ward tap: skipped a line that is not JSON\n`);
      return;
    }
    if (line.end !== undefined) {
      if (output === 'json') io.out(`${raw}\n`);
      const d = line.end.dropped;
      const dropped = (d?.rate ?? 0) + (d?.slow ?? 0);
      if (dropped > 0 && output !== 'json') {
        io.err(`ward tap: ${dropped} events not shown (${d?.rate ?? 0} over the proxies' rate cap, ${d?.slow ?? 0} while the reader was behind)\n`);
      }
      return;
    }
    if (typeof line.error === 'object' && line.error !== null) {
      failed++;
      if (output === 'json') io.out(`${raw}\n`);
      else
        io.err(`ward tap: cannot tap ${line.error.namespace ?? '-'}/${line.error.pod ?? '-'}: ${line.error.message ?? line.error.code ?? 'unknown error'}\n`);
      return;
    }
    if (from !== undefined && (line.clientId === null || line.clientId === undefined || !from.has(line.clientId))) return;
    if (output === 'json') io.out(`${raw}\n`);
    else io.out(formatTapEvent(line, id, output === 'wide'));
    id++;
  };
  if (res.body !== null) {
    for await (const chunk of res.body) {
      let got: string[];
      try {
        const bytes = chunk as Uint8Array;
        got = lines.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
      } catch {
        throw new UsageError(`the controller sent a tap line longer than ${MAX_TAP_LINE_BYTES} bytes; is this ward's controller?`);
      }
      for (const l of got) onLine(l);
    }
  }
  onLine(lines.end() ?? '');
  return failed > 0 && id === 0 ? EXIT.failed : EXIT.ok;
}
