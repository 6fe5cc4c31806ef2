/**
 * The `ward` executable: one binary, one subcommand per role. Exit statuses follow CLI.md:
 * 0 success, 1 a check or test failed, 2 bad usage or unreadable input.
 */
import { Command, CommanderError, Option, type OptionValues } from '@commander-js/extra-typings';
import pc from 'picocolors';
import { QueryError } from '../index/index.js';
import { packageVersionOf } from '../shared/index.js';
import { clusterConfig } from './cluster-config.js';
import { printAuthz, runAuthz } from './commands/authz.js';
import { runCheck, statusOf } from './commands/check.js';
import { registerControllerCommand } from './commands/controller.js';
import { registerDashboardCommand } from './commands/dashboard.js';
import { policyTarget, printPolicy, runDiagnosticsPolicy } from './commands/diagnostics.js';
import { registerEdgesCommand } from './commands/edges.js';
import { type ExplainOptions, printExplain, runExplain } from './commands/explain.js';
import { registerIdentityCommands } from './commands/identity.js';
import { registerInjectCommand } from './commands/inject.js';
import { registerInstallCommands } from './commands/install.js';
import { registerLogsCommand } from './commands/logs.js';
import { registerPrometheusConfigCommand } from './commands/prometheus-config.js';
import { registerProxyCommand } from './commands/proxy.js';
import { registerProxyInitCommand } from './commands/proxy-init.js';
import { registerRestartCommand } from './commands/restart.js';
import { registerStatCommand } from './commands/stat.js';
import { registerStatusCommand } from './commands/status.js';
import { registerTapCommand } from './commands/tap.js';
import { runTest } from './commands/test.js';
import { registerUpCommand } from './commands/up.js';
import { callController, controllerBase } from './controller-client.js';
import { type CliIo, EXIT, processIo, UsageError } from './io.js';
import { localController } from './local-client.js';
import { formatDiagnostics, palette } from './output.js';
import { buildWorkspace, type Workspace } from './workspace.js';

const collect = (value: string, previous: string[]) => [...previous, value];

interface ClusterFlags {
  filename: string[];
  defaultPolicy?: string;
  clusterNetworks?: string;
  probeNetworks?: string;
  trustDomain?: string;
  controlPlaneNamespace?: string;
}

function withManifestFlags<A extends unknown[], O extends OptionValues>(cmd: Command<A, O>): Command<A, O> {
  cmd
    .option('-f, --filename <path>', 'manifest file or directory (repeatable; - for stdin)', collect, [] as string[])
    .option('--default-policy <policy>', 'cluster default inbound policy (default all-unauthenticated)')
    .option('--cluster-networks <cidrs>', 'comma-separated cluster networks')
    .option('--probe-networks <cidrs>', 'comma-separated networks kubelet probes come from')
    .option('--trust-domain <domain>', 'identity trust domain (default cluster.local)')
    .option('--control-plane-namespace <ns>', 'control-plane namespace used in identities (default linkerd)');
  return cmd;
}

/** Adds `--controller URL` (online mode) to a command that can also read manifests. */
function withControllerFlag<A extends unknown[], O extends OptionValues>(cmd: Command<A, O>): Command<A, O> {
  cmd.option(
    '--controller <url>',
    "ask a running controller's JSON API (its admin address, e.g. http://127.0.0.1:9990) instead of reading -f manifests (default without -f: the local mesh of `ward up`, when one runs)",
  );
  return cmd;
}

/** The controller to ask, or undefined for offline mode; -f and --controller exclude each other. */
async function onlineController(flags: { filename: string[]; controller?: string }): Promise<URL | undefined> {
  if (flags.controller === undefined) {
    // Neither -f nor --controller: the local mesh of `ward up`, when one runs.
    const local = flags.filename.length === 0 ? await localController() : undefined;
    return local === undefined ? undefined : controllerBase(local);
  }
  if (flags.filename.length > 0) throw new UsageError('give either -f manifests or --controller URL, not both');
  return controllerBase(flags.controller);
}

function outputOption(choices: string[], dflt: string) {
  return new Option('-o, --output <format>', 'output format').choices(choices).default(dflt);
}

/** Builds the workspace for a command; input problems print and end the command (exit 2). */
function workspaceFor(flags: ClusterFlags, io: CliIo, { quiet }: { quiet: boolean }): Workspace {
  if (flags.filename.length === 0)
    throw new UsageError('no manifests: give -f PATH (a file, a directory, or - for stdin) or --controller URL, or start a local mesh with `ward up DIR`');
  const config = clusterConfig(flags);
  const ws = buildWorkspace({ paths: flags.filename, stdin: io.stdin }, config);
  if (!quiet) {
    const unreadable = statusOf(ws.diagnostics) === EXIT.usage;
    const errors = ws.diagnostics.filter((d) => d.severity === 'error');
    if (unreadable) {
      io.err(
        formatDiagnostics(
          ws.diagnostics.filter((d) => d.severity === 'error'),
          palette(io.color),
        ),
      );
      throw new InputError();
    }
    if (errors.length > 0) {
      io.err(formatDiagnostics(errors, palette(io.color)));
      io.err(palette(io.color).yellow(`${errors.length} invalid resource problems above were skipped; run ward check for details\n`));
    }
  }
  return ws;
}

class InputError extends Error {
  readonly code = 'ERR_INPUT';
}

/** The version in ward's package.json. */
function wardVersion(): string {
  return packageVersionOf(import.meta.url);
}

/** Builds the command tree. `result` receives each command's exit status. */
function program(io: CliIo, result: { status: number }, signal: AbortSignal | undefined): Command {
  const prog = new Command('ward')
    .description('identity-based authorization for service meshes: check, inspect, explain and test inbound policy')
    .version(`ward ${wardVersion()}`, '-V, --version', 'print the version')
    .showHelpAfterError()
    .configureOutput({ writeOut: (s) => io.out(s), writeErr: (s) => io.err(s) })
    .exitOverride();

  withManifestFlags(
    prog
      .command('check')
      .description('validate resources like the admission webhook and lint for policy traps')
      .addOption(outputOption(['text', 'json'], 'text'))
      .option('--existing <path>', 'resources already in the cluster (repeatable)', collect, [] as string[]),
  ).action((opts) => {
    const flags = opts as unknown as ClusterFlags & { output: string; existing: string[] };
    if (flags.filename.length === 0) throw new UsageError('no manifests: give -f PATH (a file, a directory, or - for stdin)');
    const ws = buildWorkspace({ paths: [...flags.existing, ...flags.filename], stdin: io.stdin }, clusterConfig(flags));
    result.status = runCheck(ws, flags.output, io);
  });

  withControllerFlag(
    withManifestFlags(
      prog
        .command('authz')
        .description('show the effective inbound policy of every pod and port of a workload, or the pods and ports a policy object applies to')
        .argument(
          '<resource>',
          'a workload (pod/NAME, deploy/NAME, sts/NAME, ns/NAME) or a policy object (server/NAME, authorizationpolicy/NAME, meshtlsauthentication/NAME, networkauthentication/NAME, serverauthorization/NAME, httproute/NAME, grpcroute/NAME, SMI traffictarget/NAME, httproutegroup/NAME, tcproute/NAME, udproute/NAME); a bare kind for all',
        )
        .option('-n, --namespace <ns>', 'namespace (default: default)')
        .option('-A, --all-namespaces', 'all namespaces')
        .addOption(outputOption(['text', 'json'], 'text')),
    ),
  ).action(async (resource, opts) => {
    const flags = opts as unknown as ClusterFlags & { output: string; namespace?: string; allNamespaces?: boolean; controller?: string };
    const online = await onlineController(flags);
    if (online !== undefined) {
      const q = new URLSearchParams({ resource });
      if (flags.allNamespaces) q.set('allNamespaces', 'true');
      else q.set('namespace', flags.namespace ?? 'default');
      const view = (await callController(online, `/api/v1/authz?${q}`)) as Parameters<typeof printAuthz>[0];
      result.status = printAuthz(view, flags.output, io);
      return;
    }
    const ws = workspaceFor(flags, io, { quiet: flags.output === 'json' });
    const ns = flags.allNamespaces ? undefined : flags.namespace;
    result.status = runAuthz(ws, resource, ns ?? (flags.allNamespaces ? undefined : 'default'), flags.output, io);
  });

  withControllerFlag(
    withManifestFlags(
      prog
        .command('explain')
        .description('evaluate one connection or request and print the decision chain')
        .requiredOption('--to <target>', 'pod/NS/NAME:PORT or deploy/NAME:PORT')
        .option('-n, --namespace <ns>', 'namespace of --to (default: default)')
        .option('--from-ip <ip>', 'client IP (default: inside the first cluster network)')
        .option('--from-identity <id>', 'client mesh identity (implies --tls mesh)')
        .option('--from-sa <ns/name>', 'client ServiceAccount (identity built from the trust domain)')
        .option('--tls <mode>', 'none | mesh | no-client-cert | passthrough')
        .option('--sni <name>', 'SNI for --tls passthrough')
        .option('--http <request>', "'METHOD PATH'")
        .option('--header <header>', "'Name: value' (repeatable)", collect, [] as string[])
        .option('--host <host>', 'Host header')
        .option('--grpc <call>', 'SERVICE/METHOD')
        .option('--tcp', 'an opaque TCP connection')
        .addOption(outputOption(['text', 'json'], 'text')),
    ),
  ).action(async (opts) => {
    const flags = opts as unknown as ClusterFlags & ExplainOptions & { controller?: string };
    const online = await onlineController(flags);
    if (online !== undefined) {
      const keys = ['to', 'namespace', 'fromIp', 'fromIdentity', 'fromSa', 'tls', 'sni', 'http', 'header', 'host', 'grpc', 'tcp'] as const;
      const request = Object.fromEntries(keys.filter((k) => flags[k] !== undefined).map((k) => [k, flags[k]]));
      const explained = (await callController(online, '/api/v1/explain', { method: 'POST', body: request })) as Parameters<typeof printExplain>[0];
      result.status = printExplain(explained, flags.output, io);
      return;
    }
    const ws = workspaceFor(flags, io, { quiet: flags.output === 'json' });
    result.status = runExplain(ws, flags, io);
  });

  prog
    .command('test')
    .description('run policy unit tests from YAML suites')
    .argument('<suite...>', 'suite files')
    .addOption(outputOption(['text', 'json', 'junit'], 'text'))
    .action((suites, opts) => {
      result.status = runTest(suites, opts.output, io);
    });

  const diag = prog.command('diagnostics').description('low-level views of what the controller serves');
  withControllerFlag(
    withManifestFlags(
      diag
        .command('policy')
        .description('print the inbound.Server message for a pod port (proto3 JSON mapping)')
        .argument('<pod>', 'pod/NAME or pod/NAMESPACE/NAME')
        .argument('<port>', 'port number')
        .option('-n, --namespace <ns>', 'namespace (default: default)')
        .addOption(outputOption(['json', 'yaml'], 'yaml')),
    ),
  ).action(async (pod, port, opts) => {
    const flags = opts as unknown as ClusterFlags & { output: string; namespace?: string; controller?: string };
    const online = await onlineController(flags);
    if (online !== undefined) {
      const t = policyTarget(pod, port, flags.namespace);
      const q = new URLSearchParams({ workload: `${t.namespace}:${t.pod}`, port: String(t.port) });
      result.status = printPolicy(await callController(online, `/api/v1/policy?${q}`), flags.output, io);
      return;
    }
    const ws = workspaceFor(flags, io, { quiet: true });
    result.status = runDiagnosticsPolicy(ws, pod, port, flags.namespace, flags.output, io);
  });
  registerIdentityCommands(prog as unknown as Parameters<typeof registerIdentityCommands>[0], io, result);
  registerControllerCommand(prog as unknown as Parameters<typeof registerControllerCommand>[0], io, result, signal);
  registerInstallCommands(prog as unknown as Parameters<typeof registerInstallCommands>[0], io, result);
  registerProxyCommand(prog as unknown as Parameters<typeof registerProxyCommand>[0], io, result, signal);
  registerProxyInitCommand(prog as unknown as Parameters<typeof registerProxyInitCommand>[0], io, result);
  registerInjectCommand(prog as unknown as Parameters<typeof registerInjectCommand>[0], io, result);
  registerUpCommand(prog as unknown as Parameters<typeof registerUpCommand>[0], io, result, signal);
  registerStatusCommand(prog as unknown as Parameters<typeof registerStatusCommand>[0], io, result);
  registerTapCommand(prog as unknown as Parameters<typeof registerTapCommand>[0], io, result, signal);
  registerLogsCommand(prog as unknown as Parameters<typeof registerLogsCommand>[0], io, result, signal);
  registerRestartCommand(prog as unknown as Parameters<typeof registerRestartCommand>[0], io, result);
  registerPrometheusConfigCommand(prog as unknown as Parameters<typeof registerPrometheusConfigCommand>[0], io, result);
  registerEdgesCommand(prog as unknown as Parameters<typeof registerEdgesCommand>[0], io, result);
  registerStatCommand(prog as unknown as Parameters<typeof registerStatCommand>[0], io, result);
  registerDashboardCommand(prog as unknown as Parameters<typeof registerDashboardCommand>[0], io, result, signal);
  return prog;
}

/**
 * Runs the CLI with `argv` (without node and script) and returns the exit status. `signal` stops
 * long-running commands (default: SIGINT/SIGTERM).
 */
export async function main(argv: readonly string[], io: CliIo = processIo(pc.isColorSupported), signal?: AbortSignal): Promise<number> {
  const result = { status: EXIT.ok as number };
  try {
    await program(io, result, signal).parseAsync([...argv], { from: 'user' });
    return result.status;
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.code === 'commander.help') return EXIT.ok;
      return EXIT.usage;
    }
    if (e instanceof QueryError || e instanceof UsageError) {
      io.err(`${palette(io.color).red('error')}: ${e.message}\n`);
      return EXIT.usage;
    }
    if (e instanceof InputError) return EXIT.usage;
    throw e;
  }
}
