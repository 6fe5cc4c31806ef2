/**
 * `ward restart`: recreates pods of the local mesh, as deleting pods (or `kubectl rollout
 * restart`) does in a cluster: their processes stop, the namespace's `config.linkerd.io/*`
 * annotations are copied onto them anew (the pod-creation rule), and they start again. What to
 * restart, kubectl style:
 * - `NS/POD`, or `POD` with `-n`, or `pod/NAME`, `pod/NS/NAME`: one pod;
 * - `deploy/web` (any workload kind: `sts`, `ds`, `rs`, `job`, `cj`), `deploy/NS/NAME`: the pods of
 *   that workload; a bare kind (`deploy`) every workload of that kind in the namespace;
 * - `--all`: every pod of the namespace (`-n`, default `default`); `-A` every pod of the mesh.
 * The old pods of a rollout (`replaced`, running until their workload's new pods are ready) are
 * left out of workloads and `--all`; named alone, the mesh refuses them.
 * A kind comes first: a namespace named like a kind is reached with `pod/NS/NAME`.
 */
import type { Command } from '@commander-js/extra-typings';
import { parseResourceArg, QueryError } from '../../index/index.js';
import type { LocalStatus, PodStatus } from '../../local/index.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { callLocalApi, parsePodRef, requireLocalMesh } from '../local-client.js';

/** What the arguments name, resolved against the mesh's pods (sorted, each once). */
export function podsToRestart(
  pods: readonly Pick<PodStatus, 'namespace' | 'name' | 'owner' | 'replaced'>[],
  args: readonly string[],
  opts: { readonly namespace?: string | undefined; readonly all?: boolean | undefined; readonly allNamespaces?: boolean | undefined },
): { namespace: string; name: string }[] {
  const ns = opts.namespace ?? 'default';
  const chosen = new Map<string, { namespace: string; name: string }>();
  const add = (p: Pick<PodStatus, 'namespace' | 'name'>) => chosen.set(`${p.namespace}/${p.name}`, { namespace: p.namespace, name: p.name });
  if (opts.all === true || opts.allNamespaces === true) {
    if (args.length > 0) throw new UsageError('give pods or workloads, or --all / -A, not both');
    for (const p of pods) if (p.replaced !== true && (opts.allNamespaces === true || p.namespace === ns)) add(p);
    if (chosen.size === 0) throw new UsageError(opts.allNamespaces === true ? 'the mesh has no pods' : `no pods in namespace ${ns}`);
  } else {
    if (args.length === 0) throw new UsageError('name what to restart: NAMESPACE/POD, deploy/NAME (kubectl style), or --all');
    for (const arg of args) {
      const matched = matchArg(pods, arg, opts.namespace);
      if (matched.length === 0)
        throw new UsageError(`${arg}: nothing to restart in this mesh${opts.namespace === undefined ? '' : ` (namespace ${opts.namespace})`}`);
      for (const p of matched) add(p);
    }
  }
  return [...chosen.values()].sort((a, b) => (`${a.namespace}/${a.name}` < `${b.namespace}/${b.name}` ? -1 : 1));
}

function matchArg(
  pods: readonly Pick<PodStatus, 'namespace' | 'name' | 'owner' | 'replaced'>[],
  arg: string,
  namespace: string | undefined,
): Pick<PodStatus, 'namespace' | 'name'>[] {
  let kind: { kind: string; namespace: string | undefined; name: string | undefined } | undefined;
  try {
    kind = parseResourceArg(arg);
  } catch (e) {
    if (!(e instanceof QueryError)) throw e;
  }
  if (kind === undefined || kind.kind === 'Pod') {
    const ref =
      kind === undefined
        ? parsePodRef(arg, namespace)
        : parsePodRef(kind.namespace === undefined ? (kind.name ?? '') : `${kind.namespace}/${kind.name}`, namespace);
    return pods.filter((p) => p.namespace === ref.namespace && p.name === ref.name);
  }
  if (kind.kind === 'Namespace') throw new UsageError(`${arg}: to restart a namespace's pods, use --all -n NAMESPACE`);
  if (kind.namespace !== undefined && namespace !== undefined && kind.namespace !== namespace)
    throw new UsageError(`${arg} is in namespace ${kind.namespace}, not ${namespace}`);
  const ns = kind.namespace ?? namespace ?? 'default';
  // The old pods of a rollout are on their way out: a workload's pods are its current ones.
  return pods.filter(
    (p) =>
      p.namespace === ns &&
      p.replaced !== true &&
      p.owner?.startsWith(`${kind.kind}/`) === true &&
      (kind.name === undefined || p.owner === `${kind.kind}/${kind.name}`),
  );
}

/** Registers `ward restart`. */
export function registerRestartCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('restart')
    .description('recreate pods of the local mesh (`ward up`): new processes, namespace annotations applied again')
    .argument('[what...]', 'NAMESPACE/POD, POD (with -n), pod/NAME, or a workload: deploy/NAME, sts/NAME, … (a bare kind: all of it)')
    .option('-n, --namespace <ns>', 'namespace of what is named (default: default)')
    .option('--all', 'every pod of the namespace')
    .option('-A, --all-namespaces', 'every pod of the mesh')
    .option('--state-dir <dir>', 'state directory of the mesh (default as for `ward up`)')
    .action(async (what, opts) => {
      const mesh = await requireLocalMesh(opts.stateDir);
      const status = (await (await callLocalApi(mesh, '/api/v1/local/status')).json()) as LocalStatus;
      const targets = podsToRestart(status.pods, what, { namespace: opts.namespace, all: opts.all, allNamespaces: opts.allNamespaces });
      for (const t of targets) {
        await callLocalApi(mesh, `/api/v1/local/restart/${encodeURIComponent(t.namespace)}/${encodeURIComponent(t.name)}`, { method: 'POST' });
        io.out(`pod ${t.namespace}/${t.name} restarted\n`);
      }
      result.status = EXIT.ok;
    });
}
