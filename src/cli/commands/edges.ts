/**
 * `ward edges [KIND] [-n NS | -A] [-o wide|json] [--window 1m]`: who talks to whom, secured how —
 * `linkerd viz edges`: source and destination workloads and namespaces, the client's and the
 * server's identity, SECURED (a green √ for mesh TLS, else in red why not: `not meshed`,
 * `destination not meshed`…), open connections and requests per second. The client identity is
 * the one the destination's proxy verified; a source shown as `a|b?` is an identity several
 * workloads share (the metrics cannot tell which of them called).
 *
 * Online only, from `/api/v1/edges` of `--controller URL` or the local mesh's controller.
 */
import type { Command } from '@commander-js/extra-typings';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { json, type Palette, palette, table } from '../output.js';
import { formatRps, getObserveJson, namespaceParams, noTrafficMessage, type ObserveFlags, observeController, windowParam } from './stat.js';

interface Ref {
  readonly namespace: string;
  readonly kind: string;
  readonly name: string;
}

/** An edge of `/api/v1/edges`. */
interface EdgeJson {
  readonly src: Ref | null;
  readonly srcIdentity: string | null;
  readonly srcCandidates?: readonly Ref[];
  readonly dst: Ref;
  readonly dstIdentity: string | null;
  readonly port: number | null;
  readonly secured: boolean;
  readonly reason: string | null;
  readonly connections: number;
  readonly rps: number;
  readonly deniedRps: number;
}

interface EdgesJson {
  readonly window: number;
  readonly backend: string;
  readonly edges: readonly EdgeJson[];
}

/** `sa.ns` of `sa.ns.serviceaccount.identity.…`, as linkerd viz edges shortens identities. */
export function shortIdentity(id: string | null): string | null {
  if (id === null) return null;
  const m = /^([^.]+)\.([^.]+)\.serviceaccount\.identity\./.exec(id);
  return m === null ? id : `${m[1]}.${m[2]}`;
}

function srcName(e: EdgeJson): string | null {
  if (e.src !== null) return e.src.name;
  if (e.srcCandidates !== undefined && e.srcCandidates.length > 0) return `${e.srcCandidates.map((r) => r.name).join('|')}?`;
  return null;
}

function srcNamespace(e: EdgeJson): string | null {
  if (e.src !== null) return e.src.namespace;
  const first = e.srcCandidates?.[0];
  if (first !== undefined) return first.namespace;
  const m = e.srcIdentity === null ? null : /^[^.]+\.([^.]+)\.serviceaccount\.identity\./.exec(e.srcIdentity);
  return m?.[1] ?? null;
}

/** Renders edges as linkerd viz edges does, with connections and rates. */
export function formatEdges(view: EdgesJson, wide: boolean, c: Palette): string {
  const head = ['SRC', 'DST', 'SRC_NS', 'DST_NS', ...(wide ? ['PORT'] : []), 'CLIENT_ID', 'SERVER_ID', 'SECURED', 'CONN', 'RPS', ...(wide ? ['DENIED'] : [])];
  const rows: string[][] = [head.map(c.bold)];
  const dash = c.dim('-');
  for (const e of view.edges) {
    const client = wide ? e.srcIdentity : shortIdentity(e.srcIdentity);
    const server = wide ? e.dstIdentity : shortIdentity(e.dstIdentity);
    rows.push([
      srcName(e) ?? dash,
      e.dst.name,
      srcNamespace(e) ?? dash,
      e.dst.namespace,
      ...(wide ? [e.port === null ? dash : String(e.port)] : []),
      client ?? dash,
      server ?? dash,
      e.secured ? c.green('√') : c.red(e.reason ?? 'not secured'),
      String(Math.round(e.connections)),
      formatRps(e.rps),
      ...(wide ? [e.deniedRps > 0 ? c.red(formatRps(e.deniedRps)) : formatRps(0)] : []),
    ]);
  }
  return table(rows);
}

/** Runs `ward edges`. */
export async function runEdges(kind: string | undefined, flags: ObserveFlags, io: CliIo): Promise<number> {
  if (!['text', 'wide', 'json'].includes(flags.output)) throw new UsageError(`-o "${flags.output}": use wide or json (or leave it out)`);
  if (kind?.includes('/') === true) throw new UsageError(`ward edges takes a kind (deploy, sts, po…), not "${kind}"`);
  const q = new URLSearchParams({ window: windowParam(flags.window) });
  namespaceParams(flags, q);
  if (kind !== undefined) q.set('resource', kind);
  const base = await observeController(flags.controller, 'edges');
  const view = await getObserveJson<EdgesJson>(base, `/api/v1/edges?${q}`);
  if (flags.output === 'json') io.out(json(view));
  else if (view.edges.length === 0) io.out(await noTrafficMessage(base, view.window));
  else io.out(formatEdges(view, flags.output === 'wide', palette(io.color)));
  return EXIT.ok;
}

/** Registers `ward edges`. */
export function registerEdgesCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('edges')
    .description('who talks to whom: source and destination workloads, identities, mTLS or why not, connections and request rates')
    .argument('[kind]', 'only edges with a workload of this kind at either end (deploy, sts, ds, po…)')
    .option('-n, --namespace <ns>', 'namespace (default: default): edges with either end in it')
    .option('-A, --all-namespaces', 'every namespace')
    .option('-o, --output <format>', 'wide (ports, full identities, denials) or json', 'text')
    .option('--window <duration>', 'the time window rates are computed over', '1m')
    .option('--controller <url>', "the controller's admin address (default: the local mesh's, when `ward up` runs)")
    .action(async (kind, opts) => {
      result.status = await runEdges(kind, opts as ObserveFlags, io);
    });
}
