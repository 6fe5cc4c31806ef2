/**
 * `ward restart NS/POD`: recreates a pod of the local mesh, as deleting a pod in a cluster does:
 * its processes stop, the namespace's `config.linkerd.io/*` annotations are copied onto it anew
 * (the pod-creation rule), and it starts again.
 */
import type { Command } from '@commander-js/extra-typings';
import { type CliIo, EXIT } from '../io.js';
import { callLocalApi, parsePodRef, requireLocalMesh } from '../local-client.js';

/** Registers `ward restart`. */
export function registerRestartCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('restart')
    .description('recreate a pod of the local mesh (`ward up`): new processes, namespace annotations applied again')
    .argument('<pod>', 'NAMESPACE/POD (or POD with -n)')
    .option('-n, --namespace <ns>', 'namespace of POD (default: default)')
    .option('--state-dir <dir>', 'state directory of the mesh (default as for `ward up`)')
    .action(async (pod, opts) => {
      const ref = parsePodRef(pod, opts.namespace);
      const mesh = await requireLocalMesh(opts.stateDir);
      await callLocalApi(mesh, `/api/v1/local/restart/${encodeURIComponent(ref.namespace)}/${encodeURIComponent(ref.name)}`, { method: 'POST' });
      io.out(`pod ${ref.namespace}/${ref.name} restarted\n`);
      result.status = EXIT.ok;
    });
}
