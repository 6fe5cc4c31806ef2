/**
 * `ward proxy`: runs one pod's sidecar proxy (local mode, inbound side) in the foreground until
 * SIGINT/SIGTERM. Logs are JSON lines on stderr (pino); one human line announces the bound ports.
 *
 * `--inbound POD_PORT[@LISTEN_PORT]=APPHOST:APPPORT` (repeatable) serves the pod's port POD_PORT:
 * its policy is the controller's for (pod, POD_PORT), the proxy listens on LISTEN_PORT of
 * `--listen-host` (default: POD_PORT itself; 0 = any free port, reported in the ready line) and
 * forwards to the application at APPHOST:APPPORT. Mesh clients reach the port through the mesh
 * port with a transport header naming POD_PORT. Every APPHOST must be the same (the pod's
 * private address).
 *
 * The outbound side runs when `--destination-addr` names the controller's Destination API: an
 * HTTP forward proxy on `--outbound-addr` (default 127.0.0.1:4140; `off` disables it) for the
 * application's `HTTP_PROXY` / `grpc_proxy`. Its connections leave from `--listen-host`. The
 * hidden `--mesh-port-override IP=PORT` (repeatable) tells it the mesh port of the proxy at a pod
 * address that is not on 4143 (several proxies on one loopback address, as in tests).
 *
 * `--transparent` (Linux; needs `npm run build:native`): iptables in the pod's network namespace
 * redirects inbound TCP to the mesh port and the application's outbound TCP to the outbound
 * listener, and the proxy reads each connection's original destination (SO_ORIGINAL_DST). The
 * proxy then listens on no pod port: `--inbound POD_PORT=APPHOST:APPPORT` (no `@LISTEN_PORT`)
 * only declares the pod's ports, whose redirected connections get that port's policy and go to
 * APPHOST:APPPORT; `--mesh-addr` defaults to 0.0.0.0:4143; with `--destination-addr` the listener
 * on `--outbound-addr` (default 127.0.0.1:4140) carries redirected connections to their original
 * destinations (and still serves HTTP_PROXY clients that address it). The proxy's own connections
 * must not be redirected: run it as a dedicated user (or group) and exempt it in the OUTPUT rules
 * (`-m owner --uid-owner UID -j RETURN`, as upstream's proxy-init does; or `--gid-owner GID`).
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { type Command, Option } from '@commander-js/extra-typings';
import { isDns1123Label, isDnsName } from '../../identity/index.js';
import {
  ADMIN_POLICY_PORT,
  DEFAULT_DISCOVERY_IDLE_MS,
  DEFAULT_DISCOVERY_TIMEOUT_MS,
  DEFAULT_MAX_DISCOVERED_PORTS,
  loadMallocTrim,
  METRICS_IDLE_TIMEOUT_MS,
  type OriginalDstAddonError,
  type PolicyDiscoveryOptions,
  type ProxyInboundPort,
  type ProxyOutboundOptions,
  processMetricsRegistry,
  type RunningProxy,
  settleHeapWhenQuiet,
  startProxy,
} from '../../proxy/index.js';
import { createLogger, errorMessage, hasCode } from '../../shared/index.js';
import { networks } from '../cluster-config.js';
import { type CliIo, EXIT, parseListenAddress, UsageError, untilStopped } from '../io.js';
import { palette } from '../output.js';

/** Flags of `ward proxy`. */
export interface ProxyFlags {
  readonly workload: string;
  readonly serviceAccount: string;
  readonly trustDomain?: string;
  readonly controlPlaneNamespace?: string;
  /** A PEM file; default: the PEM in the environment variable `TRUST_ANCHORS_ENV` (as injected pods get it). */
  readonly trustAnchors?: string;
  readonly tokenFile: string;
  readonly identityAddr: string;
  readonly policyAddr: string;
  readonly inbound: readonly string[];
  readonly listenHost: string;
  /** Default 127.0.0.1:4143; 0.0.0.0:4143 with `transparent`. */
  readonly meshAddr?: string;
  readonly adminAddr: string;
  /** The only identity `/tap` answers; default: the environment variable `TAP_IDENTITY_ENV`. */
  readonly tapIdentity?: string;
  /** `HOST:PORT` or `off`; default 127.0.0.1:4140 when `destinationAddr` is given. */
  readonly outboundAddr?: string;
  readonly destinationAddr?: string;
  readonly clusterDomain?: string;
  readonly meshPortOverride?: readonly string[];
  /** Comma-separated CIDRs the proxy-added localhost authorization admits. */
  readonly localhostNetworks?: string;
  /** Transparent mode: iptables redirects, original destinations from SO_ORIGINAL_DST. */
  readonly transparent?: boolean;
  readonly logLevel?: string;
  /** Durations such as `5s`, `10m`, `1m30s`. */
  readonly inboundDiscoveryTimeout?: string;
  readonly inboundDiscoveryIdleTimeout?: string;
  readonly inboundDiscoveryMaxPorts?: string;
  readonly metricsRetainIdle?: string;
}

/** A parsed `--inbound` flag. */
export interface InboundFlag extends ProxyInboundPort {
  readonly appHost: string;
}

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const INBOUND = /^(\d{1,5})(?:@(\d{1,5}))?=(?:\[([^\]]+)\]|([^:[\]@=]+)):(\d{1,5})$/;
const INBOUND_SYNTAX = 'POD_PORT[@LISTEN_PORT]=APPHOST:APPPORT (e.g. 8080=127.0.0.1:18080, 8080@0=127.0.0.1:18080)';

const collect = (value: string, previous: string[]) => [...previous, value];
/** The upstream outbound port. */
const OUTBOUND_PORT = 4140;
/** Where an injected pod's proxy finds the trust anchors (PEM, inline), as Linkerd's proxy does. */
export const TRUST_ANCHORS_ENV = 'LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS';
/** The only client identity the admin port's `/tap` answers, as Linkerd's injector gives its proxy the tap service's. */
export const TAP_IDENTITY_ENV = 'LINKERD2_PROXY_TAP_SVC_NAME';

/** `--tap-identity`, else `$LINKERD2_PROXY_TAP_SVC_NAME`; undefined (tap disabled) when neither is set; throws `UsageError`. */
export function tapIdentityOf(flag: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  const [value, source] = flag !== undefined ? [flag, '--tap-identity'] : [env[TAP_IDENTITY_ENV], `$${TAP_IDENTITY_ENV}`];
  if (value === undefined || (flag === undefined && value === '')) return undefined;
  if (!isDnsName(value))
    throw new UsageError(`${source} "${value}" is not a DNS name (e.g. ward-controller.linkerd.serviceaccount.identity.linkerd.cluster.local)`);
  return value;
}

/** Parses `--inbound POD_PORT[@LISTEN_PORT]=APPHOST:APPPORT`; throws `UsageError`. */
export function parseInboundFlag(text: string): InboundFlag {
  const m = INBOUND.exec(text);
  if (m === null) throw new UsageError(`--inbound "${text}" is not ${INBOUND_SYNTAX}`);
  const podPort = Number(m[1]);
  const listenPort = m[2] === undefined ? podPort : Number(m[2]);
  const appHost = m[3] ?? (m[4] as string);
  const appPort = Number(m[5]);
  if (podPort < 1 || podPort > 65535) throw new UsageError(`--inbound "${text}": pod port ${podPort} is not in 1-65535`);
  if (podPort === ADMIN_POLICY_PORT) throw new UsageError(`--inbound "${text}": pod port ${ADMIN_POLICY_PORT} is the proxy's admin port (see --admin-addr)`);
  if (listenPort > 65535) throw new UsageError(`--inbound "${text}": listen port ${listenPort} is not in 0-65535`);
  if (appPort < 1 || appPort > 65535) throw new UsageError(`--inbound "${text}": application port ${appPort} is not in 1-65535`);
  return { podPort, listenPort, appHost, appPort };
}

/** Parses `--mesh-port-override IP=PORT`; throws `UsageError`. */
export function parseMeshPortOverride(text: string): [string, number] {
  const eq = text.lastIndexOf('=');
  const ip = text.slice(0, eq);
  const port = /^\d{1,5}$/.test(text.slice(eq + 1)) ? Number(text.slice(eq + 1)) : Number.NaN;
  if (eq === -1 || isIP(ip) === 0 || !(port >= 1 && port <= 65535))
    throw new UsageError(`--mesh-port-override "${text}" is not IP=PORT (e.g. 127.0.0.5=14143)`);
  return [ip, port];
}

/** The outbound settings of the flags: undefined when the outbound proxy is off; throws `UsageError`. */
export function parseOutboundFlags(
  flags: Pick<ProxyFlags, 'outboundAddr' | 'destinationAddr' | 'clusterDomain' | 'meshPortOverride'>,
): ProxyOutboundOptions | undefined {
  const meshPorts = new Map((flags.meshPortOverride ?? []).map(parseMeshPortOverride));
  if (flags.clusterDomain !== undefined && !isDnsName(flags.clusterDomain)) throw new UsageError(`--cluster-domain "${flags.clusterDomain}" is not a DNS name`);
  if (flags.outboundAddr === 'off') return undefined;
  if (flags.destinationAddr === undefined) {
    if (flags.outboundAddr !== undefined) throw new UsageError("--outbound-addr needs --destination-addr (the controller's Destination API)");
    return undefined;
  }
  return {
    listen: parseListenAddress(flags.outboundAddr ?? `127.0.0.1:${OUTBOUND_PORT}`, '--outbound-addr'),
    destinationAddress: parseDialAddress(flags.destinationAddr, '--destination-addr'),
    ...(flags.clusterDomain !== undefined ? { clusterDomain: flags.clusterDomain } : {}),
    ...(meshPorts.size > 0 ? { meshPorts } : {}),
  };
}

/** Parses a `HOST:PORT` to dial (`[::1]:8090` for IPv6; port 1-65535); throws `UsageError`. */
export function parseDialAddress(text: string, flag: string): string {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
  const port = m !== null ? Number(m[3]) : Number.NaN;
  if (m === null || !(port >= 1 && port <= 65535)) throw new UsageError(`${flag} "${text}" is not HOST:PORT (e.g. 127.0.0.1:8090, [::1]:8090)`);
  return text;
}

function parseWorkload(text: string): { namespace: string; pod: string } {
  const parts = text.split('/');
  const [namespace, pod] = parts;
  if (parts.length !== 2 || namespace === undefined || pod === undefined) throw new UsageError(`--workload "${text}" is not NAMESPACE/POD`);
  if (!isDns1123Label(namespace)) throw new UsageError(`--workload "${text}": namespace "${namespace}" is not a DNS-1123 label`);
  if (pod.length > 253 || !DNS1123_SUBDOMAIN.test(pod)) throw new UsageError(`--workload "${text}": pod "${pod}" is not a DNS-1123 subdomain`);
  return { namespace, pod };
}

function readFlagFile(path: string, flag: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw new UsageError(`${flag} ${path}: cannot read: ${errorMessage(e)}`);
  }
}

function trustAnchorsFromEnv(): string {
  const pem = process.env[TRUST_ANCHORS_ENV];
  if (pem === undefined || pem.trim() === '') throw new UsageError(`no trust anchors: give --trust-anchors FILE or set ${TRUST_ANCHORS_ENV} to the PEM`);
  return pem;
}

const DURATION_UNITS_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
/** Timers cannot wait longer (about 24.8 days). */
const MAX_TIMER_MS = 0x7fff_ffff;

/**
 * Parses a duration flag as kubectl takes them (`500ms`, `5s`, `10m`, `1h30m`: integers with the
 * units ms, s, m, h) into milliseconds, more than 0 and at most ~24 days; throws `UsageError`.
 */
export function parseDurationFlag(text: string, flag: string): number {
  const parts = /^(?:\d+(?:ms|s|m|h))+$/.test(text) ? [...text.matchAll(/(\d+)(ms|s|m|h)/g)] : [];
  const ms = parts.reduce((sum, [, n, unit]) => sum + Number(n) * (DURATION_UNITS_MS[unit as string] ?? Number.NaN), 0);
  if (parts.length === 0 || !(ms > 0 && ms <= MAX_TIMER_MS))
    throw new UsageError(`${flag} "${text}" is not a duration between 1ms and 24d (e.g. 500ms, 5s, 10m, 1h30m)`);
  return ms;
}

/** The tuning flags, as `startProxy` options (only those given); throws `UsageError`. */
export function parseTuningFlags(
  flags: Pick<ProxyFlags, 'inboundDiscoveryTimeout' | 'inboundDiscoveryIdleTimeout' | 'inboundDiscoveryMaxPorts' | 'metricsRetainIdle'>,
): { policyDiscovery: PolicyDiscoveryOptions; metricsIdleTimeoutMs?: number } {
  const max = flags.inboundDiscoveryMaxPorts;
  if (max !== undefined && !(/^\d{1,5}$/.test(max) && Number(max) <= 65535))
    throw new UsageError(`--inbound-discovery-max-ports "${max}" is not a number of ports from 0 to 65535 (0 turns discovery off)`);
  const policyDiscovery: PolicyDiscoveryOptions = {
    ...(flags.inboundDiscoveryTimeout !== undefined
      ? { discoveryTimeoutMs: parseDurationFlag(flags.inboundDiscoveryTimeout, '--inbound-discovery-timeout') }
      : {}),
    ...(flags.inboundDiscoveryIdleTimeout !== undefined
      ? { discoveryIdleMs: parseDurationFlag(flags.inboundDiscoveryIdleTimeout, '--inbound-discovery-idle-timeout') }
      : {}),
    ...(max !== undefined ? { maxDiscoveredPorts: Number(max) } : {}),
  };
  return {
    policyDiscovery,
    ...(flags.metricsRetainIdle !== undefined ? { metricsIdleTimeoutMs: parseDurationFlag(flags.metricsRetainIdle, '--metrics-retain-idle') } : {}),
  };
}

/** Registers `ward proxy`. */
export function registerProxyCommand(program: Command, io: CliIo, result: { status: number }, signals: AbortSignal | undefined): void {
  program
    .command('proxy')
    .description("run a pod's sidecar proxy (local mode): mesh identity, inbound policy enforcement, outbound forward proxy, admin port")
    .requiredOption('--workload <ns/pod>', 'the pod this proxy serves, NAMESPACE/POD')
    .option('--service-account <name>', "the pod's ServiceAccount (its mesh identity)", 'default')
    .option('--trust-domain <domain>', 'identity trust domain (default cluster.local)')
    .option('--control-plane-namespace <ns>', 'control-plane namespace used in identities (default linkerd)')
    .option('--trust-anchors <file>', `trust anchors (PEM), e.g. ca.crt from \`ward identity init\` (default: the PEM in $${TRUST_ANCHORS_ENV})`)
    .requiredOption('--token-file <file>', 'ServiceAccount token (from `ward identity token`), read again for every certificate request')
    .requiredOption('--identity-addr <host:port>', "the controller's identity API")
    .requiredOption('--policy-addr <host:port>', "the controller's inbound policy API")
    .option('--inbound <spec>', `serve a pod port (repeatable): ${INBOUND_SYNTAX}`, collect, [] as string[])
    .option('--listen-host <ip>', "the pod's address: where the inbound ports listen", '127.0.0.1')
    .option('--mesh-addr <host:port>', 'the mesh port for transport-header connections (default 127.0.0.1:4143; 0.0.0.0:4143 with --transparent)')
    .option('--admin-addr <host:port>', 'the admin server: /live, /ready, /metrics, /debug/policies, /tap', `127.0.0.1:${ADMIN_POLICY_PORT}`)
    .option('--tap-identity <id>', `the only mesh identity /tap answers (default $${TAP_IDENTITY_ENV}; neither: tap disabled)`)
    .option('--destination-addr <host:port>', "the controller's Destination API; turns the outbound proxy on")
    .option(
      '--outbound-addr <host:port|off>',
      `the outbound HTTP forward proxy for the application (default 127.0.0.1:${OUTBOUND_PORT} with --destination-addr); with --transparent also where iptables redirects its outbound connections`,
    )
    .option('--cluster-domain <domain>', 'cluster domain of service names (default cluster.local)')
    .addOption(
      new Option('--mesh-port-override <ip=port>', 'mesh port of the proxy at a pod address (repeatable; testing)')
        .argParser(collect)
        .default([] as string[])
        .hideHelp(),
    )
    .option(
      '--localhost-networks <cidrs>',
      "who the proxy-added default:localhost authorization admits (default 127.0.0.1/32,::1/128; local mode: the pod's own address)",
    )
    .option(
      '--transparent',
      'transparent mode (Linux, iptables redirects; needs `npm run build:native`): no listener per pod port; connections redirected to the mesh port are served as the port they were headed for, and with --destination-addr those redirected to the outbound address go to their original destination',
    )
    .option(
      '--inbound-discovery-timeout <duration>',
      `transparent mode: how long a connection to an undeclared port waits for the port's policy before it is closed (default ${DEFAULT_DISCOVERY_TIMEOUT_MS / 1000}s)`,
    )
    .option(
      '--inbound-discovery-idle-timeout <duration>',
      `transparent mode: stop watching an undeclared port's policy after no connection for this long (default ${DEFAULT_DISCOVERY_IDLE_MS / 60_000}m)`,
    )
    .option(
      '--inbound-discovery-max-ports <n>',
      `transparent mode: at most this many undeclared ports watched at once, the least recently used idle one making room; when all are in use, connections to others are closed (default ${DEFAULT_MAX_DISCOVERED_PORTS}; 0: none)`,
    )
    .option('--metrics-retain-idle <duration>', `drop metric series not updated for this long (default ${METRICS_IDLE_TIMEOUT_MS / 60_000}m)`)
    .option('--log-level <level>', `log level: ${LEVELS.join(', ')} (default info; WARD_LOG overrides)`)
    .action(async (opts) => {
      result.status = await runProxy(opts as unknown as ProxyFlags, io, signals);
    });
}

/** Runs the proxy until `signals` aborts (or SIGINT/SIGTERM when undefined). Throws `UsageError` for bad flags. */
export async function runProxy(flags: ProxyFlags, io: CliIo, signals: AbortSignal | undefined): Promise<number> {
  const { namespace, pod } = parseWorkload(flags.workload);
  if (!isDns1123Label(flags.serviceAccount)) throw new UsageError(`--service-account "${flags.serviceAccount}" is not a DNS-1123 label`);
  const trustDomain = flags.trustDomain ?? 'cluster.local';
  if (!isDnsName(trustDomain)) throw new UsageError(`--trust-domain "${trustDomain}" is not a DNS name`);
  const controlPlaneNamespace = flags.controlPlaneNamespace ?? 'linkerd';
  if (!isDns1123Label(controlPlaneNamespace)) throw new UsageError(`--control-plane-namespace "${controlPlaneNamespace}" is not a DNS-1123 label`);
  if (flags.logLevel !== undefined && !(LEVELS as readonly string[]).includes(flags.logLevel))
    throw new UsageError(`--log-level must be one of ${LEVELS.join(', ')}`);
  const identityAddress = parseDialAddress(flags.identityAddr, '--identity-addr');
  const policyAddress = parseDialAddress(flags.policyAddr, '--policy-addr');
  const transparent = flags.transparent === true;
  const mesh = parseListenAddress(flags.meshAddr ?? (transparent ? '0.0.0.0:4143' : '127.0.0.1:4143'), '--mesh-addr');
  const admin = parseListenAddress(flags.adminAddr, '--admin-addr');
  const tapIdentity = tapIdentityOf(flags.tapIdentity, process.env);
  if (isIP(flags.listenHost) === 0) throw new UsageError(`--listen-host "${flags.listenHost}" is not an IP address`);
  const inbound = flags.inbound.map(parseInboundFlag);
  const withListenPort = flags.inbound.find((t) => t.includes('@'));
  if (transparent && withListenPort !== undefined)
    throw new UsageError(`--inbound "${withListenPort}": no @LISTEN_PORT with --transparent (iptables brings the pod port's connections to the mesh port)`);
  const outbound = parseOutboundFlags(flags);
  const seen = new Set<number>();
  for (const p of inbound) {
    if (seen.has(p.podPort)) throw new UsageError(`--inbound: pod port ${p.podPort} is given twice`);
    seen.add(p.podPort);
  }
  const appHosts = new Set(inbound.map((p) => p.appHost));
  if (appHosts.size > 1) throw new UsageError(`--inbound: every application must be on one host (the pod's private address), got ${[...appHosts].join(', ')}`);
  const localhostNetworks = flags.localhostNetworks === undefined ? undefined : networks(flags.localhostNetworks, '', '--localhost-networks');
  if (localhostNetworks !== undefined && localhostNetworks.length === 0) throw new UsageError('--localhost-networks: give at least one CIDR');
  const tuning = parseTuningFlags(flags);
  const trustAnchorsPem = flags.trustAnchors !== undefined ? readFlagFile(flags.trustAnchors, '--trust-anchors') : trustAnchorsFromEnv();
  readFlagFile(flags.tokenFile, '--token-file');

  const logger = createLogger({ name: 'proxy', level: (flags.logLevel as (typeof LEVELS)[number] | undefined) ?? 'info' });
  let running: RunningProxy;
  try {
    running = await startProxy({
      namespace,
      pod,
      serviceAccount: flags.serviceAccount,
      trustDomain,
      controlPlaneNamespace,
      trustAnchorsPem,
      tokenFile: flags.tokenFile,
      identityAddress,
      policyAddress,
      listenHost: flags.listenHost,
      appHost: inbound[0]?.appHost ?? flags.listenHost,
      inbound,
      mesh,
      admin,
      ...(tapIdentity !== undefined ? { tapIdentity } : {}),
      ...(outbound !== undefined ? { outbound } : {}),
      ...(localhostNetworks !== undefined ? { localhostNetworks } : {}),
      ...(transparent ? { transparent } : {}),
      policyDiscovery: tuning.policyDiscovery,
      ...(tuning.metricsIdleTimeoutMs !== undefined ? { registry: processMetricsRegistry({ idleTimeoutMs: tuning.metricsIdleTimeoutMs }) } : {}),
      logger,
    });
  } catch (e) {
    logger.flush();
    const red = palette(io.color).red('error');
    if (hasCode(e, 'ERR_IDENTITY_ANCHORS')) {
      const source = flags.trustAnchors !== undefined ? `--trust-anchors ${flags.trustAnchors}` : `$${TRUST_ANCHORS_ENV}`;
      io.err(`${red}: ${source}: ${(e as Error).message}\n`);
      return EXIT.usage;
    }
    if (hasCode(e, 'ERR_ORIGINAL_DST_ADDON')) {
      io.err(`${red}: --transparent: ${(e as Error).message}\n  hint: ${(e as OriginalDstAddonError).hint}\n`);
      return EXIT.failed;
    }
    if (hasCode(e, 'ERR_INBOUND_LISTEN') || hasCode(e, 'ERR_ADMIN_LISTEN') || hasCode(e, 'ERR_INBOUND_TLS') || hasCode(e, 'ERR_OUTBOUND_LISTEN')) {
      io.err(`${red}: ${(e as Error).message}\n`);
      return EXIT.failed;
    }
    throw e;
  }
  const p = running.ports;
  const served = p.inbound.map((i) => `${i.podPort}@${i.listenPort}->${i.appHost.includes(':') ? `[${i.appHost}]` : i.appHost}:${i.appPort}`).join(', ');
  const outboundNote = (p.outbound === undefined ? '' : `, outbound :${p.outbound}`) + (transparent ? ', transparent' : '');
  io.err(`ward proxy ready: identity ${running.identity}, mesh :${p.mesh}, admin :${p.admin}, inbound ${served === '' ? 'none' : served}${outboundNote}\n`);
  // Once ready and quiet, the garbage of the start is given back, and again after any burst that
  // left memory up (runtime/heap-settle; the C heap's part through runtime/malloc-trim when it is built).
  let settle: { stop(): void } | undefined;
  let stopping = false;
  const trim = loadMallocTrim();
  const mb = (bytes: number) => Math.round(bytes / 104857.6) / 10;
  running.ready().then(
    () => {
      if (stopping) return;
      settle = settleHeapWhenQuiet({
        ...(trim !== undefined ? { trim } : {}),
        done: (err, rss) => {
          if (err !== undefined) logger.warn({ err: errorMessage(err) }, 'heap settle failed');
          else if (rss !== undefined) logger.debug({ rssMb: mb(rss.after), beforeMb: mb(rss.before), trim: trim !== undefined }, 'heap settled');
        },
      });
    },
    () => {},
  );
  await untilStopped(signals);
  stopping = true;
  settle?.stop();
  logger.info('shutting down');
  await running.close();
  logger.flush();
  return EXIT.ok;
}
