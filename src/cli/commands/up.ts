/**
 * `ward up DIR`: runs the mesh of DIR on this machine (see src/local) until Ctrl-C. DIR is
 * checked first like `ward check` does, plus what local mode needs (a command in every
 * container); errors stop it before anything starts (exit 2). Ctrl-C (SIGINT), SIGTERM, SIGHUP
 * (the terminal closed) or SIGQUIT stops every pod (SIGTERM, SIGKILL after 3 s), the controller,
 * and removes the state's `mesh.json`; a second one kills everything at once. (The pods run in
 * process groups of their own, so no signal of the terminal reaches them but through ward up.)
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { type Command, Option } from '@commander-js/extra-typings';
import type { Diagnostic } from '../../core/index.js';
import { checkLocalPods, type LocalEvent, type LocalMesh, POD_RANGE, podRangeOffset, startLocalMesh, stateDirOf } from '../../local/index.js';
import type { Pod } from '../../manifest/index.js';
import { errorMessage, hasCode, packageRootOf } from '../../shared/index.js';
import { clusterConfig } from '../cluster-config.js';
import { type CliIo, EXIT, UsageError, untilStopped } from '../io.js';
import { formatDiagnostics, type Palette, palette, table } from '../output.js';
import { buildWorkspace } from '../workspace.js';
import { statusOf } from './check.js';
import { controllerListen } from './controller.js';

/** Flags of `ward up`. */
export interface UpFlags {
  readonly stateDir?: string;
  readonly defaultPolicy?: string;
  readonly probeNetworks?: string;
  readonly trustDomain?: string;
  readonly controlPlaneNamespace?: string;
  readonly clusterDomain?: string;
  readonly policyAddr?: string;
  readonly identityAddr?: string;
  readonly destinationAddr?: string;
  readonly adminAddr?: string;
  readonly firstPodIp?: string;
  readonly probePeriodScale?: string;
  readonly restartBackoffMs?: string;
}

/** The `bin/ward.js` of this package, whether this module runs from its source or a bundle. */
const WARD_BIN = join(packageRootOf(import.meta.url), 'bin', 'ward.js');

/** Node flags not handed on to the processes `ward up` starts: the test runner's and the inspector's. */
function isHandedOn(flag: string): boolean {
  return !flag.startsWith('--test') && !flag.startsWith('--inspect') && !flag.startsWith('--experimental-test');
}

/**
 * How this process runs `ward`: the same node and launcher, with the node flags it was given but
 * the test runner's, the inspector's and tsx's loader (bin/ward.js runs compiled bundles: a proxy
 * never carries a TypeScript loader, even when `ward up` itself runs from the sources).
 */
export function wardArgv(): string[] {
  const keep: string[] = [];
  const argv = process.execArgv;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    const loaderFlag = /^(--import|--require|-r|--loader|--experimental-loader)(=|$)/.exec(a);
    if (loaderFlag !== null) {
      const value = loaderFlag[2] === '=' ? a.slice(loaderFlag[0].length) : (argv[i + 1] ?? '');
      if (loaderFlag[2] !== '=') i++;
      if (!/\btsx\b/.test(value)) keep.push(...(loaderFlag[2] === '=' ? [a] : [a, value]));
      continue;
    }
    if (isHandedOn(a)) keep.push(a);
  }
  return [process.execPath, ...keep, WARD_BIN];
}

/** Registers `ward up`. */
export function registerUpCommand(program: Command, io: CliIo, result: { status: number }, signals: AbortSignal | undefined): void {
  program
    .command('up')
    .description(
      'run the mesh of a manifests directory on this machine: the controller, and every pod as local processes with its own proxy and loopback address',
    )
    .argument('<dir>', 'directory of manifests (watched: policy edits take effect live)')
    .option('--state-dir <dir>', 'identity, pod logs and tokens, mesh.json (default $WARD_STATE_DIR, else $XDG_STATE_HOME/ward, else ~/.local/state/ward)')
    .option('--default-policy <policy>', 'cluster default inbound policy (default all-unauthenticated)')
    .option('--probe-networks <cidrs>', 'comma-separated networks kubelet probes come from (default 0.0.0.0/0,::/0)')
    .option('--trust-domain <domain>', 'identity trust domain (default cluster.local)')
    .option('--control-plane-namespace <ns>', 'control-plane namespace used in identities (default linkerd)')
    .option('--cluster-domain <domain>', 'DNS suffix of Service names (default cluster.local)')
    .option('--policy-addr <host:port>', "the controller's inbound policy API (default 127.0.0.1:8090; port 0 = any free port)")
    .option('--identity-addr <host:port>', "the controller's identity API (default 127.0.0.1:8080)")
    .option('--destination-addr <host:port>', "the controller's Destination API (default 127.0.0.1:8086)")
    .option('--admin-addr <host:port>', "the controller's admin and JSON API (default 127.0.0.1:9990)")
    .addOption(new Option('--first-pod-ip <ip>', 'first pod address handed out (testing; default 127.20.0.1)').hideHelp())
    .addOption(new Option('--probe-period-scale <factor>', "multiplies probes' initial delays and periods (testing)").hideHelp())
    .addOption(new Option('--restart-backoff-ms <ms>', 'restart delay of a container after its first, immediate restart (testing; default 10000)').hideHelp())
    .action(async (dir, opts) => {
      result.status = await runUp(dir, opts as UpFlags, io, signals);
    });
}

function positiveNumber(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!(Number.isFinite(n) && n > 0)) throw new UsageError(`${flag} "${text}" is not a positive number`);
  return n;
}

/** DIR's problems: `ward check`'s, plus what local mode cannot run. */
function checkDir(dir: string, flags: UpFlags): { readonly diagnostics: readonly Diagnostic[]; readonly status: number } {
  const cluster = clusterConfig({ ...flags, clusterNetworks: POD_RANGE });
  const ws = buildWorkspace({ paths: [dir] }, cluster);
  const pods = ws.resources.filter((r): r is Pod => r.kind === 'Pod');
  const local = checkLocalPods(pods, (p) => ws.index.pod(p.metadata.namespace, p.metadata.name) !== undefined, { dir });
  const diagnostics = [...ws.diagnostics, ...local];
  const unreadable = statusOf(ws.diagnostics) === EXIT.usage;
  return { diagnostics, status: unreadable || diagnostics.some((d) => d.severity === 'error') ? EXIT.usage : EXIT.ok };
}

function clock(p: Palette): string {
  return p.dim(new Date().toTimeString().slice(0, 8));
}

/** Renders the runtime's events on the console. */
function renderEvent(e: LocalEvent, io: CliIo): void {
  const p = palette(io.color);
  const say = (text: string) => io.out(`${clock(p)} ${text}\n`);
  switch (e.kind) {
    case 'identity':
      say(e.created ? `identity: created ${e.dir} (a new trust anchor)` : `identity: reusing ${e.dir}`);
      return;
    case 'controller':
      say(`controller ready: ${e.adminUrl} (policy :${e.ports.policy}, identity :${e.ports.identity}, destination :${e.ports.destination})`);
      return;
    case 'pod-started':
      say(`pod ${p.bold(e.pod)} starting at ${e.ip}${e.meshed ? '' : p.dim(' (not meshed)')}`);
      return;
    case 'pod-ready':
      say(e.ready ? `pod ${p.bold(e.pod)} ${p.green('ready')}` : `pod ${p.bold(e.pod)} ${p.yellow('not ready')}`);
      return;
    case 'pod-stopped':
      say(`pod ${p.bold(e.pod)} stopped: ${e.why}`);
      return;
    case 'pod-invalid':
      say(`${p.red('error')}: pod ${p.bold(e.pod)} cannot run: ${e.problems.join('; ')}`);
      return;
    case 'report':
      say(`${p.yellow('!')} ${e.text}`);
      return;
    case 'manifests':
      say(`manifests changed: ${e.applied} applied, ${e.deleted} deleted`);
      return;
    case 'controller-log':
      say(`${e.level === 'error' ? p.red('error') : p.yellow('warning')}: ${e.text}`);
      return;
    case 'summary': {
      const rows = e.rows.map((r) => [
        r.namespace,
        r.name,
        r.ip,
        r.ready ? p.green('yes') : p.yellow('no'),
        r.meshed ? 'yes' : p.dim('no'),
        r.urls.join(' ') || p.dim('-'),
      ]);
      io.out(`\n${table([['NAMESPACE', 'NAME', 'IP', 'READY', 'MESHED', 'URL'], ...rows])}`);
      io.out(
        `\n${e.rows.length} pods; controller ${e.controller}\n` +
          'pods and recent denials: ward status    output: ward logs NS/POD [-c app|proxy] [-f]    recreate a pod: ward restart NS/POD\n' +
          'policy edits in the directory take effect live; Ctrl-C stops everything\n\n',
      );
      return;
    }
    case 'stopping':
      say('stopping: every pod, then the controller');
      return;
  }
}

/** The signals that stop `ward up` (SIGHUP: its terminal closed; the pods would not hear of it). */
const STOP_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];

/** Runs `ward up` until stopped. */
export async function runUp(dir: string, flags: UpFlags, io: CliIo, signals: AbortSignal | undefined): Promise<number> {
  try {
    if (!statSync(dir).isDirectory()) throw new UsageError(`${dir} is not a directory`);
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`cannot read ${dir}: ${errorMessage(e)}`);
  }
  const listen = controllerListen(flags);
  if (flags.firstPodIp !== undefined && podRangeOffset(flags.firstPodIp) === undefined)
    throw new UsageError(`--first-pod-ip "${flags.firstPodIp}" is not an address in the pod range ${POD_RANGE}`);
  const probePeriodScale = positiveNumber(flags.probePeriodScale, '--probe-period-scale');
  const restartBackoffMs = positiveNumber(flags.restartBackoffMs, '--restart-backoff-ms');
  const cluster = clusterConfig({ ...flags, clusterNetworks: POD_RANGE });
  const p = palette(io.color);

  const checked = checkDir(dir, flags);
  const shown = checked.diagnostics.filter((d) => d.severity !== 'info');
  if (shown.length > 0) io.err(formatDiagnostics(shown, p));
  if (checked.status !== EXIT.ok) {
    const errors = checked.diagnostics.filter((d) => d.severity === 'error').length;
    io.err(`${p.red('✖')} ${dir}: ${errors} errors; nothing was started\n`);
    return EXIT.usage;
  }

  let mesh: LocalMesh;
  try {
    mesh = await startLocalMesh({
      dir,
      stateDir: stateDirOf(flags.stateDir),
      cluster,
      ...(flags.clusterDomain !== undefined ? { clusterDomain: flags.clusterDomain } : {}),
      listen,
      ...(flags.firstPodIp !== undefined ? { firstPodAddress: flags.firstPodIp } : {}),
      ...(probePeriodScale !== undefined ? { probePeriodScale } : {}),
      ...(restartBackoffMs !== undefined ? { restartBackoffMs } : {}),
      wardArgv: wardArgv(),
      onEvent: (e) => renderEvent(e, io),
    });
  } catch (e) {
    for (const code of ['ERR_LOCAL_RUNNING', 'ERR_LOCAL_ADDRESS', 'ERR_IDENTITY', 'ERR_LISTEN', 'ERR_SOURCE_DIR', 'ERR_IDENTITY_WRITE']) {
      if (hasCode(e, code)) {
        io.err(`${p.red('error')}: ${(e as Error).message}\n`);
        return code === 'ERR_LISTEN' || code === 'ERR_LOCAL_ADDRESS' ? EXIT.failed : EXIT.usage;
      }
    }
    throw e;
  }

  if (signals !== undefined) {
    await untilStopped(signals);
    await mesh.stop();
    return EXIT.ok;
  }
  // First Ctrl-C: stop gracefully. Second: kill everything now.
  let interrupted = 0;
  let onSignal: (signal: NodeJS.Signals) => void = () => {};
  const stopped = new Promise<void>((resolve) => {
    onSignal = (signal) => {
      // The terminal is gone: writing to it fails (EIO), which must not cut the stop short.
      if (signal === 'SIGHUP') for (const s of [process.stdout, process.stderr]) s.on('error', () => {});
      interrupted++;
      if (interrupted === 1) {
        resolve();
        return;
      }
      io.err('killing every pod now\n');
      mesh.killNow();
      process.exit(130);
    };
  });
  for (const s of STOP_SIGNALS) process.on(s, onSignal);
  await stopped;
  await mesh.stop();
  for (const s of STOP_SIGNALS) process.off(s, onSignal);
  io.out(`${clock(p)} stopped\n`);
  return EXIT.ok;
}
