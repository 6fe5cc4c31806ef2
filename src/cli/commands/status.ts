/**
 * `ward status [-o text|json]`: the pods of the running local mesh and its recent denials.
 */
import type { Command } from '@commander-js/extra-typings';
import { Option } from '@commander-js/extra-typings';
import type { LocalStatus } from '../../local/index.js';
import { type CliIo, EXIT } from '../io.js';
import { callLocalApi, requireLocalMesh } from '../local-client.js';
import { json, palette, table } from '../output.js';

/** Denials shown by the text output (the JSON has all the mesh keeps). */
const SHOWN_DENIALS = 20;

/** Registers `ward status`. */
export function registerStatusCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('status')
    .description('pods of the local mesh (`ward up`) with their address, readiness and identity, and recent denials')
    .addOption(new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text'))
    .option('--state-dir <dir>', 'state directory of the mesh (default as for `ward up`)')
    .action(async (opts) => {
      result.status = await runStatus(opts, io);
    });
}

/** Runs `ward status`. */
export async function runStatus(flags: { output: string; stateDir?: string }, io: CliIo): Promise<number> {
  const mesh = await requireLocalMesh(flags.stateDir);
  const res = await callLocalApi(mesh, '/api/v1/local/status');
  const status = (await res.json()) as LocalStatus;
  if (flags.output === 'json') {
    io.out(json(status));
    return EXIT.ok;
  }
  const p = palette(io.color);
  io.out(`local mesh of ${mesh.dir} (pid ${mesh.pid}, since ${mesh.started}); controller ${mesh.controller}\n\n`);
  const rows = status.pods.map((pod) => {
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
  const notReady = status.pods.filter((pod) => !pod.ready);
  for (const pod of notReady) {
    const why =
      pod.message ??
      pod.containers.find((c) => c.message !== undefined)?.message ??
      (pod.proxy !== null && !pod.proxy.ready ? 'the proxy is not ready' : undefined);
    if (why !== undefined) io.out(p.dim(`  ${pod.namespace}/${pod.name}: ${why}\n`));
  }
  io.out('\nRECENT DENIALS\n');
  const denials = status.denials.slice(-SHOWN_DENIALS);
  if (denials.length === 0) {
    io.out(p.dim('none\n'));
    return EXIT.ok;
  }
  io.out(
    table([
      ['TIME', 'POD', 'PORT', 'KIND', 'CLIENT', 'IDENTITY', 'REQUEST', 'REASON'],
      ...denials.map((d) => [
        d.time.slice(11, 19),
        `${d.namespace}/${d.pod}`,
        String(d.port),
        p.red(d.kind),
        d.client,
        d.clientId ?? p.dim('(plaintext)'),
        d.method !== undefined ? `${d.method} ${d.path ?? ''}` : p.dim('-'),
        d.reason,
      ]),
    ]),
  );
  const older = status.denials.length - denials.length;
  if (older > 0) io.out(p.dim(`(${older} older not shown; \`ward status -o json\` lists the last ${status.denials.length})\n`));
  return EXIT.ok;
}
