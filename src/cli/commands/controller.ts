/**
 * `ward controller`: runs the control plane in the foreground until SIGINT/SIGTERM. Logs are JSON
 * lines on stderr (pino); `WARD_LOG=debug` or `--log-level` for more.
 */
import type { Command } from '@commander-js/extra-typings';
import { type ControllerListen, DEFAULT_LISTEN, startController } from '../../controller/index.js';
import { createLogger, hasCode } from '../../shared/index.js';
import { clusterConfig } from '../cluster-config.js';
import { type CliIo, EXIT, parseListenAddress, UsageError, untilStopped } from '../io.js';
import { palette } from '../output.js';

/** The controller's listen addresses from `--policy-addr`, `--identity-addr`, `--destination-addr`, `--admin-addr` (also `ward up`'s). */
export function controllerListen(flags: {
  readonly policyAddr?: string | undefined;
  readonly identityAddr?: string | undefined;
  readonly destinationAddr?: string | undefined;
  readonly adminAddr?: string | undefined;
}): Partial<ControllerListen> {
  return {
    ...(flags.policyAddr !== undefined ? { policy: parseListenAddress(flags.policyAddr, '--policy-addr') } : {}),
    ...(flags.identityAddr !== undefined ? { identity: parseListenAddress(flags.identityAddr, '--identity-addr') } : {}),
    ...(flags.destinationAddr !== undefined ? { destination: parseListenAddress(flags.destinationAddr, '--destination-addr') } : {}),
    ...(flags.adminAddr !== undefined ? { admin: parseListenAddress(flags.adminAddr, '--admin-addr') } : {}),
  };
}

/** Flags of `ward controller`. */
export interface ControllerFlags {
  readonly manifests: string;
  readonly identityDir: string;
  readonly defaultPolicy?: string;
  readonly clusterNetworks?: string;
  readonly probeNetworks?: string;
  readonly trustDomain?: string;
  readonly controlPlaneNamespace?: string;
  readonly clusterDomain?: string;
  readonly policyAddr?: string;
  readonly identityAddr?: string;
  readonly destinationAddr?: string;
  readonly adminAddr?: string;
  readonly grpcPlaintext?: boolean;
  readonly logLevel?: string;
}

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** Registers `ward controller`. */
export function registerControllerCommand(program: Command, io: CliIo, result: { status: number }, signals: AbortSignal | undefined): void {
  program
    .command('controller')
    .description('run the control plane: inbound policy, identity and destination APIs for the manifests in a directory')
    .requiredOption('--manifests <dir>', 'directory of manifests, loaded recursively and watched')
    .requiredOption('--identity-dir <dir>', 'trust anchor, issuer and token key (from `ward identity init`)')
    .option('--default-policy <policy>', 'cluster default inbound policy (default all-unauthenticated)')
    .option('--cluster-networks <cidrs>', 'comma-separated cluster networks')
    .option('--probe-networks <cidrs>', 'comma-separated networks kubelet probes come from')
    .option('--trust-domain <domain>', 'identity trust domain (default cluster.local)')
    .option('--control-plane-namespace <ns>', 'control-plane namespace used in identities (default linkerd)')
    .option('--cluster-domain <domain>', 'DNS suffix of Service names (default cluster.local)')
    .option('--policy-addr <host:port>', `InboundServerPolicies API (default ${DEFAULT_LISTEN.policy.host}:${DEFAULT_LISTEN.policy.port})`)
    .option('--identity-addr <host:port>', `Identity API (default ${DEFAULT_LISTEN.identity.host}:${DEFAULT_LISTEN.identity.port})`)
    .option('--destination-addr <host:port>', `Destination API (default ${DEFAULT_LISTEN.destination.host}:${DEFAULT_LISTEN.destination.port})`)
    .option('--admin-addr <host:port>', `metrics, health and JSON API (default ${DEFAULT_LISTEN.admin.host}:${DEFAULT_LISTEN.admin.port})`)
    .option('--grpc-plaintext', 'serve gRPC without TLS (debugging only)')
    .option('--log-level <level>', `log level: ${LEVELS.join(', ')} (default info; WARD_LOG overrides)`)
    .action(async (opts) => {
      result.status = await runController(opts as ControllerFlags, io, signals);
    });
}

/** Runs the controller until `signals` aborts (or SIGINT/SIGTERM when undefined). */
export async function runController(flags: ControllerFlags, io: CliIo, signals: AbortSignal | undefined): Promise<number> {
  const cluster = clusterConfig(flags);
  if (flags.logLevel !== undefined && !(LEVELS as readonly string[]).includes(flags.logLevel))
    throw new UsageError(`--log-level must be one of ${LEVELS.join(', ')}`);
  const listen = controllerListen(flags);
  const logger = createLogger({ name: 'controller', level: (flags.logLevel as (typeof LEVELS)[number] | undefined) ?? 'info' });
  let running: Awaited<ReturnType<typeof startController>>;
  try {
    running = await startController({
      manifestsDir: flags.manifests,
      identityDir: flags.identityDir,
      cluster,
      ...(flags.clusterDomain !== undefined ? { clusterDomain: flags.clusterDomain } : {}),
      listen,
      logger,
      grpcPlaintext: flags.grpcPlaintext === true,
    });
  } catch (e) {
    logger.flush();
    if (hasCode(e, 'ERR_IDENTITY') || hasCode(e, 'ERR_LISTEN')) {
      io.err(`${palette(io.color).red('error')}: ${(e as Error).message}\n`);
      return hasCode(e, 'ERR_IDENTITY') ? EXIT.usage : EXIT.failed;
    }
    throw e;
  }
  const p = running.ports;
  io.err(
    `ward controller ready: policy :${p.policy}, identity :${p.identity}, destination :${p.destination}, admin http://${(listen.admin ?? DEFAULT_LISTEN.admin).host}:${p.admin}\n`,
  );
  await untilStopped(signals);
  logger.info('shutting down');
  await running.close();
  logger.flush();
  return EXIT.ok;
}
