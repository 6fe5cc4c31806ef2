/**
 * `ward logs NS/POD [-c app|proxy|NAME] [-f] [--tail N]`: a pod's output from the local mesh.
 * `app` (the default) is every application container of the pod (lines prefixed with the
 * container name when there are several); `proxy` is its proxy's JSON log.
 */
import type { Command } from '@commander-js/extra-typings';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { callLocalApi, parsePodRef, requireLocalMesh } from '../local-client.js';

/** Flags of `ward logs`. */
export interface LogsFlags {
  readonly container: string;
  readonly follow?: boolean;
  readonly tail?: string;
  readonly namespace?: string;
  readonly stateDir?: string;
}

/** Registers `ward logs`. */
export function registerLogsCommand(program: Command, io: CliIo, result: { status: number }, signals: AbortSignal | undefined): void {
  program
    .command('logs')
    .description("a pod's output in the local mesh (`ward up`)")
    .argument('<pod>', 'NAMESPACE/POD (or POD with -n)')
    .option('-c, --container <name>', 'app (every application container), proxy, or a container name', 'app')
    .option('-f, --follow', 'keep printing new lines until Ctrl-C')
    .option('--tail <lines>', 'only the last N lines')
    .option('-n, --namespace <ns>', 'namespace of POD (default: default)')
    .option('--state-dir <dir>', 'state directory of the mesh (default as for `ward up`)')
    .action(async (pod, opts) => {
      result.status = await runLogs(pod, opts as LogsFlags, io, signals);
    });
}

/** Runs `ward logs`. */
export async function runLogs(podText: string, flags: LogsFlags, io: CliIo, signals: AbortSignal | undefined): Promise<number> {
  const pod = parsePodRef(podText, flags.namespace);
  if (flags.tail !== undefined && !/^\d+$/.test(flags.tail)) throw new UsageError(`--tail "${flags.tail}" is not a line count`);
  const mesh = await requireLocalMesh(flags.stateDir);
  const q = new URLSearchParams({ container: flags.container });
  if (flags.tail !== undefined) q.set('tail', flags.tail);
  if (flags.follow === true) q.set('follow', '1');
  const path = `/api/v1/local/logs/${encodeURIComponent(pod.namespace)}/${encodeURIComponent(pod.name)}?${q}`;
  if (flags.follow !== true) {
    const res = await callLocalApi(mesh, path);
    io.out(await res.text());
    return EXIT.ok;
  }
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  if (signals !== undefined) signals.addEventListener('abort', onSignal, { once: true });
  else {
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  }
  try {
    const res = await callLocalApi(mesh, path, { signal: abort.signal });
    const decoder = new TextDecoder();
    if (res.body !== null) {
      for await (const chunk of res.body) io.out(decoder.decode(chunk as Uint8Array, { stream: true }));
    }
  } catch (e) {
    // Ctrl-C ends following; so does the mesh stopping.
    if (!abort.signal.aborted) throw e;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  return EXIT.ok;
}
