/**
 * `ward stat [-n NS | -A] KIND[/NAME] [-o wide|json] [--window 1m]`: traffic per workload, as
 * `linkerd viz stat` shows it — request rate, success rate (application errors only: requests
 * denied by policy are counted apart, in DENIED), latency percentiles, open TCP connections;
 * `-o wide` adds a row per port. `ward stat authz KIND[/NAME]`: allowed and denied rates per
 * Server, route and authorization, denied rows flagged UNAUTHORIZED (`linkerd viz authz`).
 *
 * Online only: from `--controller URL`, or by default the local mesh's controller (`ward up`),
 * through `/api/v1/stat` and `/api/v1/stat/authz`. An empty window says why (the collector has
 * not scraped yet, or cannot scrape some pods) rather than printing an empty table.
 */
import type { Command } from '@commander-js/extra-typings';
import { controllerBase } from '../controller-client.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { localController } from '../local-client.js';
import { json, type Palette, palette, table } from '../output.js';

const TIMEOUT_MS = 15_000;

/** Flags of `ward stat` and `ward edges`. */
export interface ObserveFlags {
  readonly namespace?: string;
  readonly allNamespaces?: boolean;
  readonly output: string;
  readonly window: string;
  readonly controller?: string;
}

/** The controller to ask: `--controller`, else the local mesh's; a usage error when neither. */
export async function observeController(flag: string | undefined, command: string): Promise<URL> {
  if (flag !== undefined) return controllerBase(flag);
  const local = await localController();
  if (local === undefined) {
    throw new UsageError(`ward ${command} reads traffic from a controller: give --controller URL, or start a local mesh with \`ward up DIR\``);
  }
  return controllerBase(local);
}

/** GET a JSON document of the admin API; every failure becomes a usage error with the reason. */
export async function getObserveJson<T>(base: URL, path: string): Promise<T> {
  let res: Response;
  try {
    res = await fetch(new URL(path, base), { signal: AbortSignal.timeout(TIMEOUT_MS) });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new UsageError(
      `cannot reach the controller at ${base.origin}: ${cause?.code ?? cause?.message ?? (e as Error).message} (is \`ward controller\` or \`ward up\` running, and is this its admin address?)`,
    );
  }
  const text = await res.text();
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UsageError(`the controller at ${base.origin} answered ${res.status} with something that is not JSON (is this its admin port?)`);
  }
  if (!res.ok) {
    const err = (value as { error?: { message?: string } }).error;
    if (res.status === 404 && err?.message?.startsWith('no such endpoint') === true) {
      throw new UsageError(`the controller at ${base.origin} does not serve traffic views (an older ward?)`);
    }
    throw new UsageError(err?.message !== undefined ? `controller: ${err.message}` : `the controller answered ${res.status}`);
  }
  return value as T;
}

/** Checks `--window` (seconds or 30s, 5m, 1h) and gives it as the API's parameter. */
export function windowParam(text: string): string {
  if (!/^\d{1,6}(ms|s|m|h)?$/.test(text)) throw new UsageError(`--window "${text}" is not a duration (e.g. 30s, 1m, 10m)`);
  return text;
}

/** The namespace query parameters of `-n` / `-A`. */
export function namespaceParams(flags: ObserveFlags, q: URLSearchParams): void {
  if (flags.allNamespaces === true) {
    if (flags.namespace !== undefined) throw new UsageError('give either -n NAMESPACE or -A, not both');
    q.set('allNamespaces', 'true');
  } else q.set('namespace', flags.namespace ?? 'default');
}

/** `1m`, `30s`… for a window in seconds. */
export function formatWindow(seconds: number): string {
  if (seconds % 3600 === 0) return `${seconds / 3600}h`;
  if (seconds % 60 === 0) return `${seconds / 60}m`;
  return `${seconds}s`;
}

/** A rate as linkerd viz prints it. */
export function formatRps(rps: number): string {
  return `${rps < 0.05 && rps > 0 ? rps.toFixed(2) : rps.toFixed(1)}rps`;
}

function formatMs(ms: number | null): string {
  if (ms === null) return '-';
  return ms >= 10 ? `${Math.round(ms)}ms` : `${Math.round(ms * 10) / 10}ms`;
}

interface TargetsJson {
  readonly backend: string;
  readonly scrapeIntervalSeconds?: number;
  readonly targets: readonly { namespace: string; pod: string; up: boolean; lastScrape: string | null; error?: string }[];
}

/**
 * Why a window holds nothing: how often the collector scrapes and which pods it cannot scrape
 * (each with its reason), or that the backend is Prometheus.
 */
export async function noTrafficMessage(base: URL, windowSeconds: number): Promise<string> {
  const lead = `no traffic observed in the last ${formatWindow(windowSeconds)}`;
  let t: TargetsJson;
  try {
    t = await getObserveJson<TargetsJson>(base, '/api/v1/observe/targets');
  } catch {
    return `${lead}\n`;
  }
  if (t.backend !== 'embedded') return `${lead} (metrics from ${t.backend})\n`;
  const every = t.scrapeIntervalSeconds === undefined ? '' : `: the collector scrapes every ${formatWindow(t.scrapeIntervalSeconds)}`;
  const failing = t.targets.filter((x) => !x.up && x.lastScrape !== null);
  const lines = [`${lead}${every}${t.targets.length === 0 ? ' and knows no meshed pod' : ''}`];
  if (failing.length > 0) {
    lines.push(`${failing.length} of ${t.targets.length} pods cannot be scraped:`);
    for (const f of failing.slice(0, 10)) lines.push(`  ${f.namespace}/${f.pod}: ${f.error ?? 'no answer'}`);
    if (failing.length > 10) lines.push(`  … and ${failing.length - 10} more`);
  }
  return `${lines.join('\n')}\n`;
}

/** A row of `/api/v1/stat`. */
interface StatRowJson {
  readonly namespace: string;
  readonly kind: string;
  readonly name: string;
  readonly port: number | null;
  readonly meshed: boolean;
  readonly pods: number;
  readonly meshedPods?: number;
  readonly rps: number;
  readonly successRate: number | null;
  readonly deniedRps: number;
  readonly p50Ms: number | null;
  readonly p95Ms: number | null;
  readonly p99Ms: number | null;
  readonly tcpConnections: number;
}

interface StatJson {
  readonly window: number;
  readonly backend: string;
  readonly rows: readonly StatRowJson[];
}

interface AuthzRowJson {
  readonly namespace: string;
  readonly kind: string;
  readonly name: string;
  readonly port: number;
  readonly server: string;
  readonly route: string | null;
  readonly authz: string | null;
  readonly allowedRps: number;
  readonly deniedRps: number;
}

interface AuthzJson {
  readonly window: number;
  readonly backend: string;
  readonly rows: readonly AuthzRowJson[];
}

function hasTraffic(r: StatRowJson): boolean {
  return r.rps > 0 || r.deniedRps > 0 || r.tcpConnections > 0 || r.successRate !== null;
}

/** Renders `ward stat` rows. */
export function formatStat(view: StatJson, wide: boolean, allNamespaces: boolean, c: Palette): string {
  const head = [
    ...(allNamespaces ? ['NAMESPACE'] : []),
    'NAME',
    ...(wide ? ['PORT'] : []),
    'MESHED',
    'SUCCESS',
    'RPS',
    'DENIED',
    'LATENCY_P50',
    'LATENCY_P95',
    'LATENCY_P99',
    'TCP_CONN',
  ];
  const rows: string[][] = [head.map(c.bold)];
  for (const r of view.rows) {
    if (!wide && r.port !== null) continue;
    const traffic = hasTraffic(r);
    const dash = c.dim('-');
    const name = r.kind === 'Namespace' || r.port === null ? r.name : c.dim(`  ${r.name}`);
    rows.push([
      ...(allNamespaces ? [r.namespace] : []),
      name,
      ...(wide ? [r.port === null ? c.dim('*') : String(r.port)] : []),
      `${r.meshedPods ?? (r.meshed ? r.pods : 0)}/${r.pods}`,
      r.successRate === null ? dash : `${(r.successRate * 100).toFixed(2)}%`,
      traffic ? formatRps(r.rps) : dash,
      !traffic ? dash : r.deniedRps > 0 ? c.red(formatRps(r.deniedRps)) : formatRps(0),
      formatMs(r.p50Ms),
      formatMs(r.p95Ms),
      formatMs(r.p99Ms),
      traffic ? String(Math.round(r.tcpConnections)) : dash,
    ]);
  }
  return table(rows);
}

/** Renders `ward stat authz` rows; denied rows read UNAUTHORIZED. */
export function formatAuthzStat(view: AuthzJson, wide: boolean, c: Palette): string {
  const workloads = new Set(view.rows.map((r) => `${r.namespace}/${r.kind}/${r.name}`));
  const named = wide || workloads.size > 1;
  const head = [...(wide ? ['NAMESPACE'] : []), ...(named ? ['NAME'] : []), ...(wide ? ['PORT'] : []), 'SERVER', 'ROUTE', 'AUTHORIZATION', 'ALLOWED', 'DENIED'];
  const rows: string[][] = [head.map(c.bold)];
  for (const r of view.rows) {
    rows.push([
      ...(wide ? [r.namespace] : []),
      ...(named ? [r.name] : []),
      ...(wide ? [String(r.port)] : []),
      r.server,
      r.route ?? c.dim('-'),
      r.authz ?? c.red('UNAUTHORIZED'),
      formatRps(r.allowedRps),
      r.deniedRps > 0 ? c.red(formatRps(r.deniedRps)) : formatRps(0),
    ]);
  }
  return table(rows);
}

/** Runs `ward stat` (or `ward stat authz` when the first argument is `authz`). */
export async function runStat(args: readonly string[], flags: ObserveFlags, io: CliIo): Promise<number> {
  if (!['text', 'wide', 'json'].includes(flags.output)) throw new UsageError(`-o "${flags.output}": use wide or json (or leave it out)`);
  const authz = args[0] === 'authz';
  const resource = authz ? args[1] : args[0];
  if (resource === undefined || resource === '')
    throw new UsageError(authz ? 'ward stat authz needs KIND[/NAME] (e.g. deploy/web)' : 'ward stat needs KIND[/NAME] (e.g. deploy or deploy/web)');
  if (args.length > (authz ? 2 : 1)) throw new UsageError(`unexpected argument "${args[authz ? 2 : 1]}"`);
  const q = new URLSearchParams({ resource, window: windowParam(flags.window) });
  namespaceParams(flags, q);
  const base = await observeController(flags.controller, authz ? 'stat authz' : 'stat');
  const c = palette(io.color);
  if (authz) {
    const view = await getObserveJson<AuthzJson>(base, `/api/v1/stat/authz?${q}`);
    if (flags.output === 'json') io.out(json(view));
    else if (view.rows.length === 0) io.out(await noTrafficMessage(base, view.window));
    else io.out(formatAuthzStat(view, flags.output === 'wide', c));
    return EXIT.ok;
  }
  const view = await getObserveJson<StatJson>(base, `/api/v1/stat?${q}`);
  if (flags.output === 'json') {
    io.out(json(view));
    return EXIT.ok;
  }
  if (view.rows.length === 0) {
    io.out(`no ${resource} found${flags.allNamespaces === true ? '' : ` in namespace ${flags.namespace ?? 'default'}`}\n`);
    return EXIT.ok;
  }
  io.out(formatStat(view, flags.output === 'wide', flags.allNamespaces === true, c));
  if (!view.rows.some(hasTraffic)) io.err(await noTrafficMessage(base, view.window));
  return EXIT.ok;
}

/** Registers `ward stat`. */
export function registerStatCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('stat')
    .description('traffic per workload: request and success rates (policy denials apart), latency, TCP connections; `stat authz` per authorization')
    .argument('<resource...>', 'KIND[/NAME] (deploy, deploy/web, po, ns…), or `authz KIND[/NAME]`')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('-A, --all-namespaces', 'every namespace')
    .option('-o, --output <format>', 'wide (a row per port) or json', 'text')
    .option('--window <duration>', 'the time window rates are computed over', '1m')
    .option('--controller <url>', "the controller's admin address (default: the local mesh's, when `ward up` runs)")
    .action(async (resource, opts) => {
      result.status = await runStat(resource, opts as ObserveFlags, io);
    });
}
