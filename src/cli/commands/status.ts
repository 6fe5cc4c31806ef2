/**
 * `ward status [-n NS] [--pod NAME] [--kind KIND] [-o text|json] [--controller URL]`: the pods of
 * the running local mesh, its denials grouped (client identity, workload, port, route, reason,
 * with counts and when last seen) and, apart, the requests only the audit default policy let
 * through. With `--controller` it reads the controller's `/api/v1/denials` instead (a cluster).
 */
import type { Command } from '@commander-js/extra-typings';
import { Option } from '@commander-js/extra-typings';
import { DENIAL_KINDS, type DenialEvent, type DenialFilter, type DenialGroup, groupDenials } from '../../core/index.js';
import type { Denial, LocalStatus } from '../../local/index.js';
import { callController, controllerBase } from '../controller-client.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { callLocalApi, requireLocalMesh } from '../local-client.js';
import { json, type Palette, palette, table } from '../output.js';

/** Groups shown per section by the text output (the JSON has them all). */
const SHOWN_GROUPS = 20;

/** Flags of `ward status`. */
export interface StatusFlags {
  readonly output: string;
  readonly stateDir?: string | undefined;
  readonly namespace?: string | undefined;
  readonly pod?: string | undefined;
  readonly kind?: string | undefined;
  readonly controller?: string | undefined;
}

/** `ward status -o json` of a local mesh. */
export interface StatusJson {
  readonly pods: LocalStatus['pods'];
  /** Denials and audited requests grouped, most recently seen first. */
  readonly groups: readonly DenialGroup[];
  /** The recent events the groups were made from (after the filters), oldest first. */
  readonly denials: readonly Denial[];
}

/** Registers `ward status`. */
export function registerStatusCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('status')
    .description('pods of the local mesh (`ward up`) with their address, readiness and identity; denials and audited requests, grouped')
    .addOption(new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text'))
    .option('--state-dir <dir>', 'state directory of the mesh (default as for `ward up`)')
    .option('-n, --namespace <ns>', 'only this namespace (default: all)')
    .option('--pod <name>', 'only denials at this pod (and only this pod in the table)')
    .option('--kind <kind>', `only this kind of denial: ${DENIAL_KINDS.join(', ')}`)
    .option('--controller <url>', "read the denials from a controller's /api/v1/denials (its admin address) instead of the local mesh")
    .action(async (opts) => {
      result.status = await runStatus(opts, io);
    });
}

/** The `--kind` value, checked. */
function kindFilter(kind: string | undefined): string | undefined {
  if (kind === undefined || DENIAL_KINDS.includes(kind)) return kind;
  throw new UsageError(`--kind "${kind}" is not a denial kind: use one of ${DENIAL_KINDS.join(', ')}`);
}

/**
 * A logged denial as an event `groupDenials` reads. `owner` is the pod's workload
 * (`Deployment/web`), null for a pod of its own. A mesh started by an older ward logs no
 * `decision`: its entries are denials.
 */
export function denialEvent(d: Omit<Denial, 'decision'> & { readonly decision?: Denial['decision'] }, owner: string | null): DenialEvent {
  const slash = owner === null ? -1 : owner.indexOf('/');
  const workload = owner === null || slash === -1 ? null : { kind: owner.slice(0, slash), name: owner.slice(slash + 1) };
  return {
    time: d.time,
    namespace: d.namespace,
    pod: d.pod,
    workload,
    port: d.port,
    method: d.method ?? null,
    path: d.path ?? null,
    clientAddr: d.client,
    clientId: d.clientId,
    server: d.server,
    route: d.route,
    decision: d.decision ?? 'deny',
    reason: d.reason,
    kind: d.kind,
  };
}

/** Runs `ward status`. */
export async function runStatus(flags: StatusFlags, io: CliIo): Promise<number> {
  const filter: DenialFilter = { namespace: flags.namespace, pod: flags.pod, kind: kindFilter(flags.kind) };
  if (flags.controller !== undefined) return runControllerStatus(controllerBase(flags.controller), filter, flags.output, io);
  const mesh = await requireLocalMesh(flags.stateDir);
  const res = await callLocalApi(mesh, '/api/v1/local/status');
  const status = (await res.json()) as LocalStatus;
  const owners = new Map(status.pods.map((p) => [`${p.namespace}/${p.name}`, p.owner]));
  const pods = status.pods.filter(
    (p) => (filter.namespace === undefined || p.namespace === filter.namespace) && (filter.pod === undefined || p.name === filter.pod),
  );
  const events = status.denials.map((d) => ({ raw: d, event: denialEvent(d, owners.get(`${d.namespace}/${d.pod}`) ?? null) }));
  const groups = groupDenials(
    events.map((e) => e.event),
    filter,
  );
  // The raw events behind the groups: the same filter, applied by grouping each one alone.
  const raw = events.filter((e) => groupDenials([e.event], filter).length === 1).map((e) => e.raw);
  if (flags.output === 'json') {
    io.out(json({ pods, groups, denials: raw } satisfies StatusJson));
    return EXIT.ok;
  }
  const p = palette(io.color);
  io.out(`local mesh of ${mesh.dir} (pid ${mesh.pid}, since ${mesh.started}); controller ${mesh.controller}\n\n`);
  const rows = pods.map((pod) => {
    const total = pod.containers.length + (pod.proxy !== null ? 1 : 0);
    const readyCount = pod.containers.filter((c) => c.ready).length + (pod.proxy?.ready === true ? 1 : 0);
    const ready = total === 0 ? '-' : `${readyCount}/${total}`;
    return [
      pod.namespace,
      pod.name,
      pod.ip,
      pod.ready ? p.green(ready) : p.yellow(ready),
      String(pod.restarts),
      pod.adminAddress ?? p.dim('-'),
      pod.identity ?? p.dim('(not meshed)'),
    ];
  });
  io.out(rows.length === 0 ? 'no pods\n' : table([['NAMESPACE', 'NAME', 'IP', 'READY', 'RESTARTS', 'ADMIN', 'IDENTITY'], ...rows]));
  const notReady = pods.filter((pod) => !pod.ready);
  for (const pod of notReady) {
    const why =
      pod.message ??
      pod.containers.find((c) => c.message !== undefined)?.message ??
      (pod.proxy !== null && !pod.proxy.ready ? 'the proxy is not ready' : undefined);
    if (why !== undefined) io.out(p.dim(`  ${pod.namespace}/${pod.name}: ${why}\n`));
  }
  io.out('\n');
  printGroups(groups, io, p);
  const kept = status.denials.length;
  if (kept > 0) io.out(p.dim(`(grouped from the last ${kept} events the mesh keeps; \`ward status -o json\` lists them)\n`));
  return EXIT.ok;
}

/** `ward status --controller URL`: the controller's grouped denials. */
async function runControllerStatus(base: URL, filter: DenialFilter, output: string, io: CliIo): Promise<number> {
  const q = new URLSearchParams();
  if (filter.namespace !== undefined) q.set('namespace', filter.namespace);
  if (filter.pod !== undefined) q.set('pod', filter.pod);
  if (filter.kind !== undefined) q.set('kind', filter.kind);
  const body = (await callController(base, `/api/v1/denials${q.size > 0 ? `?${q}` : ''}`)) as ControllerDenials;
  if (!Array.isArray(body.groups)) throw new UsageError(`the controller at ${base.origin} answered /api/v1/denials without "groups" (an older controller?)`);
  const bad = body.groups.findIndex((g) => !isDenialGroup(g));
  if (bad !== -1) throw new UsageError(`the controller at ${base.origin} answered /api/v1/denials with a malformed group (groups[${bad}])`);
  if (output === 'json') {
    io.out(json(body));
    return EXIT.ok;
  }
  const p = palette(io.color);
  io.out(`denials seen by the controller at ${base.origin}`);
  if (typeof body.watched === 'number') io.out(` (watching ${body.watched} pods)`);
  io.out('\n\n');
  printGroups(body.groups, io, p);
  for (const u of body.unwatched ?? []) io.out(p.yellow(`not watched: ${u.namespace}/${u.pod}: ${u.message} (${u.code})\n`));
  if ((body.dropped ?? 0) > 0) io.out(p.dim(`(${body.dropped} events were dropped by the proxies' rate caps; counts are a sample)\n`));
  return EXIT.ok;
}

/** Whether a controller's group has the fields the text output reads, with their types. */
function isDenialGroup(g: unknown): g is DenialGroup {
  if (typeof g !== 'object' || g === null) return false;
  const o = g as Record<string, unknown>;
  const strOrNull = (v: unknown) => v === null || typeof v === 'string';
  const w = o.workload as Record<string, unknown> | null | undefined;
  const ex = o.example as Record<string, unknown> | null | undefined;
  return (
    typeof o.namespace === 'string' &&
    typeof w === 'object' &&
    w !== null &&
    typeof w.kind === 'string' &&
    typeof w.name === 'string' &&
    typeof o.port === 'number' &&
    typeof o.client === 'string' &&
    strOrNull(o.clientId) &&
    strOrNull(o.server) &&
    strOrNull(o.route) &&
    strOrNull(o.reason) &&
    typeof o.kind === 'string' &&
    (o.decision === 'deny' || o.decision === 'audit') &&
    typeof o.count === 'number' &&
    typeof o.lastSeen === 'string' &&
    typeof ex === 'object' &&
    ex !== null &&
    strOrNull(ex.method) &&
    strOrNull(ex.path) &&
    typeof ex.clientAddr === 'string'
  );
}

/** `/api/v1/denials`'s answer (the fields `ward status` reads). */
interface ControllerDenials {
  readonly groups: readonly DenialGroup[];
  readonly watched?: number;
  readonly unwatched?: readonly { readonly namespace: string; readonly pod: string; readonly code: string; readonly message: string }[];
  readonly dropped?: number;
}

/** `emojivoto/deploy/web`: a workload as people type it. */
const SHORT_KINDS: Readonly<Record<string, string>> = {
  Deployment: 'deploy',
  StatefulSet: 'sts',
  DaemonSet: 'ds',
  ReplicaSet: 'rs',
  Job: 'job',
  CronJob: 'cj',
  Pod: 'pod',
};

function workloadText(g: DenialGroup): string {
  return `${g.namespace}/${SHORT_KINDS[g.workload.kind] ?? g.workload.kind.toLowerCase()}/${g.workload.name}`;
}

/** HH:MM:SS of an ISO time (UTC), or the text itself when it is not one. */
function clock(time: string): string {
  return /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/.test(time) ? time.slice(11, 19) : time;
}

function groupTable(groups: readonly DenialGroup[], p: Palette, audit: boolean): string {
  return table([
    ['LAST SEEN', 'COUNT', 'WORKLOAD', 'PORT', 'CLIENT', ...(audit ? [] : ['KIND']), 'SERVER', 'ROUTE', ...(audit ? [] : ['REASON']), 'LAST REQUEST'],
    ...groups.map((g) => {
      const ex = g.example;
      const request = ex.method !== null ? `${ex.method} ${ex.path ?? ''} from ${ex.clientAddr}` : `connection from ${ex.clientAddr}`;
      return [
        clock(g.lastSeen),
        String(g.count),
        workloadText(g),
        String(g.port),
        g.clientId ?? p.dim(g.client),
        ...(audit ? [] : [p.red(g.kind)]),
        g.server ?? p.dim('-'),
        g.route ?? p.dim('-'),
        ...(audit ? [] : [g.reason ?? '']),
        request,
      ];
    }),
  ]);
}

function printGroups(groups: readonly DenialGroup[], io: CliIo, p: Palette): void {
  const denials = groups.filter((g) => g.decision === 'deny');
  const audits = groups.filter((g) => g.decision === 'audit');
  const section = (title: string, list: readonly DenialGroup[], audit: boolean) => {
    io.out(`${title}\n`);
    if (list.length === 0) {
      io.out(p.dim('none\n'));
      return;
    }
    io.out(groupTable(list.slice(0, SHOWN_GROUPS), p, audit));
    if (list.length > SHOWN_GROUPS) io.out(p.dim(`(${list.length - SHOWN_GROUPS} more groups not shown; -o json lists them all)\n`));
  };
  section('RECENT DENIALS', denials, false);
  io.out('\n');
  section('AUDITED (allowed only by the audit default policy: denied once the default is deny)', audits, true);
}
