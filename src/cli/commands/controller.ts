/**
 * `ward controller`: runs the control plane in the foreground until SIGINT/SIGTERM. Logs are JSON
 * lines on stderr (pino); `WARD_LOG=debug` or `--log-level` for more.
 *
 * Two sources: `--manifests DIR` (a directory, watched) or `--kubernetes` (the API server, through
 * the pod's in-cluster configuration or `--kubeconfig`). In Kubernetes mode the controller also
 * authenticates proxies with TokenReview, serves the admission webhooks (`--webhook-cert`,
 * `--webhook-key`) and, while it holds the Lease, writes status; it is ready once every list has
 * been applied.
 */
import { hostname } from 'node:os';
import type { Command } from '@commander-js/extra-typings';
import { type ControllerListen, type ControllerOptions, DEFAULT_LISTEN, type KubernetesControllerOptions, startController } from '../../controller/index.js';
import { createLogger, hasCode, packageVersionOf } from '../../shared/index.js';
import { inClusterConfig, KubeClient, type KubeConfig, loadKubeconfig } from '../../sources/index.js';
import { clusterConfig } from '../cluster-config.js';
import { type CliIo, EXIT, parseListenAddress, UsageError, untilStopped } from '../io.js';
import { palette } from '../output.js';
import { defaultImage } from './install.js';

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
  readonly manifests?: string;
  readonly kubernetes?: boolean;
  readonly kubeconfig?: string;
  readonly webhookCert?: string;
  readonly webhookKey?: string;
  readonly webhookAddr?: string;
  readonly proxyImage?: string;
  readonly proxyImagePullPolicy?: string;
  readonly controllerHost?: string;
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
  readonly adminApiFrom?: string;
  readonly grpcPlaintext?: boolean;
  readonly logLevel?: string;
  readonly metricsBackend?: string;
  readonly prometheusUrl?: string;
  readonly scrapeInterval?: string;
}

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** Registers `ward controller`. */
export function registerControllerCommand(program: Command, io: CliIo, result: { status: number }, signals: AbortSignal | undefined): void {
  program
    .command('controller')
    .description('run the control plane: inbound policy, identity and destination APIs for a directory of manifests or a Kubernetes cluster')
    .option('--manifests <dir>', 'directory of manifests, loaded recursively and watched')
    .option('--kubernetes', 'watch the Kubernetes API instead (in-cluster configuration, or --kubeconfig); serve webhooks, write status')
    .option('--kubeconfig <file>', "with --kubernetes: a kubeconfig instead of the pod's in-cluster configuration")
    .option('--webhook-cert <file>', "with --kubernetes: the admission webhooks' serving certificate (PEM; reloaded when it changes)")
    .option('--webhook-key <file>', 'with --kubernetes: its private key')
    .option('--webhook-addr <host:port>', "with --kubernetes: the webhooks' listener (default 0.0.0.0:9443)")
    .option('--proxy-image <ref>', 'with --kubernetes: the image injected pods run the proxy from (default localhost/ward:<version>)')
    .option('--proxy-image-pull-policy <policy>', 'with --kubernetes: its pull policy (default IfNotPresent)')
    .option('--controller-host <host>', "with --kubernetes: where injected proxies reach the controller (default the ward-controller Service's ClusterIP)")
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
    .option(
      '--admin-api-from <who>',
      "who the admin port's JSON API, tap and dashboard answer: loopback (kubectl port-forward) or any — any exposes every workload's requests through tap to whoever reaches the port; use it only behind your own authenticating proxy (default loopback; /live, /ready, /metrics answer anyone)",
    )
    .option('--grpc-plaintext', 'serve gRPC without TLS (debugging only)')
    .option('--log-level <level>', `log level: ${LEVELS.join(', ')} (default info; WARD_LOG overrides)`)
    .option(
      '--metrics-backend <backend>',
      'where `ward edges`/`stat` and the dashboard read traffic: embedded (scrape every meshed pod) or prometheus (default embedded)',
    )
    .option('--prometheus-url <url>', 'with --metrics-backend prometheus: the Prometheus server (e.g. http://prometheus:9090)')
    .option('--scrape-interval <duration>', 'how often the embedded collector scrapes each pod (default 10s; WARD_SCRAPE_INTERVAL too)')
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
  const kubernetes = flags.kubernetes === true ? kubernetesOptions(flags, cluster.controlPlaneNamespace, packageVersionOf(import.meta.url)) : undefined;
  if (kubernetes === undefined && flags.manifests === undefined) throw new UsageError('ward controller needs --manifests DIR or --kubernetes');
  if (kubernetes !== undefined && flags.manifests !== undefined)
    throw new UsageError('--manifests and --kubernetes exclude each other: the controller has one source');
  const metrics = metricsSettings(flags);
  const adminApiFrom = flags.adminApiFrom ?? 'loopback';
  if (adminApiFrom !== 'loopback' && adminApiFrom !== 'any') throw new UsageError(`--admin-api-from "${adminApiFrom}": use loopback or any`);
  const logger = createLogger({ name: 'controller', level: (flags.logLevel as (typeof LEVELS)[number] | undefined) ?? 'info' });
  let running: Awaited<ReturnType<typeof startController>>;
  try {
    running = await startController({
      manifestsDir: flags.manifests,
      kubernetes,
      identityDir: flags.identityDir,
      cluster,
      ...(flags.clusterDomain !== undefined ? { clusterDomain: flags.clusterDomain } : {}),
      listen,
      logger,
      grpcPlaintext: flags.grpcPlaintext === true,
      metrics,
      adminApiFrom,
    });
  } catch (e) {
    logger.flush();
    if (hasCode(e, 'ERR_IDENTITY') || hasCode(e, 'ERR_LISTEN') || hasCode(e, 'ERR_WEBHOOK_TLS') || hasCode(e, 'ERR_CONTROLLER_SERVICE')) {
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
  kubernetes?.client.close();
  logger.flush();
  return EXIT.ok;
}

/** `--metrics-backend`, `--prometheus-url`, `--scrape-interval`. */
function metricsSettings(flags: ControllerFlags): NonNullable<ControllerOptions['metrics']> {
  const backend = flags.metricsBackend ?? 'embedded';
  if (backend !== 'embedded' && backend !== 'prometheus') throw new UsageError(`--metrics-backend "${backend}": use embedded or prometheus`);
  let scrapeIntervalMs: number | undefined;
  if (flags.scrapeInterval !== undefined) {
    const m = /^(\d{1,7})(ms|s|m)?$/.exec(flags.scrapeInterval);
    scrapeIntervalMs = m === null ? undefined : Number(m[1]) * (m[2] === 'ms' ? 1 : m[2] === 'm' ? 60_000 : 1000);
    if (scrapeIntervalMs === undefined || scrapeIntervalMs < 100 || scrapeIntervalMs > 300_000)
      throw new UsageError(`--scrape-interval "${flags.scrapeInterval}": give a duration from 100ms to 5m (e.g. 10s)`);
  }
  if (backend === 'embedded') {
    if (flags.prometheusUrl !== undefined) throw new UsageError('--prometheus-url needs --metrics-backend prometheus');
    return { backend, scrapeIntervalMs };
  }
  if (flags.prometheusUrl === undefined) throw new UsageError('--metrics-backend prometheus needs --prometheus-url URL');
  let url: URL;
  try {
    url = new URL(flags.prometheusUrl);
  } catch {
    throw new UsageError(`--prometheus-url "${flags.prometheusUrl}" is not a URL (e.g. http://prometheus:9090)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`--prometheus-url "${flags.prometheusUrl}": use http:// or https://`);
  if (flags.scrapeInterval !== undefined) throw new UsageError("--scrape-interval is the embedded collector's: Prometheus scrapes on its own schedule");
  return { backend, prometheusUrl: flags.prometheusUrl };
}

const PULL_POLICIES = ['Always', 'IfNotPresent', 'Never'];

/** Kubernetes mode's settings from the flags and the pod's environment (POD_NAME, POD_NAMESPACE); throws `UsageError`. */
export function kubernetesOptions(
  flags: ControllerFlags,
  controlPlaneNamespace: string,
  version: string,
  env: NodeJS.ProcessEnv = process.env,
): KubernetesControllerOptions {
  let config: KubeConfig;
  try {
    config = flags.kubeconfig !== undefined ? loadKubeconfig(flags.kubeconfig) : inClusterConfig();
  } catch (e) {
    throw new UsageError(`${(e as Error).message}${flags.kubeconfig === undefined ? '\n  hint: outside a pod, pass --kubeconfig FILE' : ''}`);
  }
  if ((flags.webhookCert === undefined) !== (flags.webhookKey === undefined)) throw new UsageError('--webhook-cert and --webhook-key go together');
  if (flags.proxyImagePullPolicy !== undefined && !PULL_POLICIES.includes(flags.proxyImagePullPolicy))
    throw new UsageError(`--proxy-image-pull-policy must be one of ${PULL_POLICIES.join(', ')}`);
  const namespace = env.POD_NAMESPACE !== undefined && env.POD_NAMESPACE !== '' ? env.POD_NAMESPACE : controlPlaneNamespace;
  return {
    client: new KubeClient(config, { userAgent: `ward-controller/${version}` }),
    namespace,
    podName: env.POD_NAME !== undefined && env.POD_NAME !== '' ? env.POD_NAME : hostname(),
    ...(flags.webhookCert !== undefined && flags.webhookKey !== undefined
      ? {
          webhook: {
            listen: parseListenAddress(flags.webhookAddr ?? '0.0.0.0:9443', '--webhook-addr'),
            certFile: flags.webhookCert,
            keyFile: flags.webhookKey,
          },
        }
      : {}),
    proxyImage: flags.proxyImage ?? defaultImage(version),
    ...(flags.proxyImagePullPolicy !== undefined ? { proxyImagePullPolicy: flags.proxyImagePullPolicy } : {}),
    ...(flags.controllerHost !== undefined ? { controllerHost: flags.controllerHost } : {}),
  };
}
