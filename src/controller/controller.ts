/**
 * `ward controller`: the control plane. Wires the directory source into the policy index and
 * the endpoints index, and serves the proxies:
 *
 *   manifests dir -> DirectorySource -> sink -> PolicyIndex   -> InboundServerPolicies (8090)
 *                                            -> EndpointsIndex -> Destination (8086)
 *   identity dir  -> IssuerReloader  -> CertificateAuthority  -> Identity/Certify (8080)
 *   admin (9990): /metrics, /ready, /live, JSON API
 *
 * The gRPC servers speak TLS with a certificate the controller issues itself from the current
 * issuer, for the control plane's identities (`linkerd-identity.<ns>…`, `linkerd-destination.<ns>…`),
 * so proxies verify it against the trust anchors like any meshed peer. Bad manifests never stop
 * the controller (the source keeps the last good version); a bad identity directory does, with
 * a precise message, because a control plane that cannot issue certificates is not one.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  type DestinationEndpoint,
  type DestinationEvent,
  type DestinationResolver,
  destinationService,
  type GrpcServerHandle,
  identityService,
  inboundPolicyService,
  startGrpcServer,
} from '../api/index.js';
import { type Diagnostic, serviceAccountIdentity } from '../core/index.js';
import { CertificateAuthority, IDENTITY_FILES, type Issuer, IssuerReloader, LocalTokenAuthenticator, type ServerCredentials } from '../identity/index.js';
import {
  type ClusterConfig,
  type Endpoint,
  type EndpointEvent,
  EndpointsIndex,
  type IndexTx,
  PolicyIndex,
  parseEndpointsPath,
  resourceKey,
} from '../index/index.js';
import { type Pod, type Resource, type ResourceKey, resourceKeyString } from '../manifest/index.js';
import { type Counter, createRegistry, type Gauge, type Histogram, type Logger, MeshError, promClient, type Registry, silentLogger } from '../shared/index.js';
import { DirectorySource, type SourceTx } from '../sources/index.js';
import type { ResourceEntry } from './admin-api.js';
import { type AdminServer, startAdminServer } from './admin-server.js';

/** A listen address. */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/** The controller's listeners. */
export interface ControllerListen {
  readonly policy: ListenAddress;
  readonly identity: ListenAddress;
  readonly destination: ListenAddress;
  readonly admin: ListenAddress;
}

/** Upstream's ports, on loopback. */
export const DEFAULT_LISTEN: ControllerListen = {
  policy: { host: '127.0.0.1', port: 8090 },
  identity: { host: '127.0.0.1', port: 8080 },
  destination: { host: '127.0.0.1', port: 8086 },
  admin: { host: '127.0.0.1', port: 9990 },
};

/** Settings of `startController`. */
export interface ControllerOptions {
  readonly manifestsDir: string;
  readonly identityDir: string;
  readonly cluster: ClusterConfig;
  /** DNS suffix of Service names (default `cluster.local`). */
  readonly clusterDomain?: string;
  readonly listen?: Partial<ControllerListen>;
  readonly logger?: Logger;
  /**
   * Quiet time after a file event before the batch is applied (default 20 ms: long enough to
   * coalesce an editor's write, short enough for the propagation target; a half-written file
   * only ever costs one rejected batch, since the last good version stays in force).
   */
  readonly debounceMs?: number;
  /** Period of the directory rescan that heals missed file events (default 2000 ms). */
  readonly rescanIntervalMs?: number;
  /** Lifetime of workload certificates (default 24 h). */
  readonly issuanceLifetimeMs?: number;
  /** Serve gRPC in plaintext (tests and debugging only; default false = TLS). */
  readonly grpcPlaintext?: boolean;
  /**
   * The address of a pod that has no `status.podIP` (local mode allocates one per pod). Called
   * when such a pod is applied, for the pods of one batch in `namespace/name` order; the pod
   * reaches the indexes with `status.podIP` set to the answer (left without one on undefined).
   */
  readonly podAddress?: (namespace: string, name: string) => string | undefined;
  /**
   * Ask `podAddress` for every pod, replacing a manifest's `status.podIP` (local mode: an exported
   * Pod carries its cluster address, which means nothing on this machine). Default false: only
   * pods without one are asked.
   */
  readonly replacePodAddresses?: boolean;
}

/** A running controller. */
export interface RunningController {
  /** Bound ports (useful with port 0). */
  readonly ports: { readonly policy: number; readonly identity: number; readonly destination: number; readonly admin: number };
  /** The trust anchors (PEM) clients verify the controller against. */
  readonly trustAnchorsPem: string;
  /** The TLS server name of the policy and destination APIs. */
  readonly destinationServerName: string;
  /** The TLS server name of the identity API. */
  readonly identityServerName: string;
  readonly index: PolicyIndex;
  readonly endpoints: EndpointsIndex;
  readonly registry: Registry;
  /**
   * Creates the pod again from its definition, as deleting a pod does in a cluster: the
   * namespace's `config.linkerd.io/*` annotations are copied anew (the pod-creation rule), and
   * the result is applied. False when the directory defines no such pod.
   */
  recreatePod(namespace: string, name: string): boolean;
  /** Stops serving: ends watch streams cleanly, closes listeners and watchers. Idempotent. */
  close(): Promise<void>;
}

/** Identity of a control-plane component (its ServiceAccount in the control-plane namespace). */
function controlPlaneIdentity(cluster: ClusterConfig, component: string): string {
  return serviceAccountIdentity(cluster, cluster.controlPlaneNamespace, component);
}

/** Renders identity diagnostics for a start-up failure message. */
function describeDiagnostics(ds: readonly Diagnostic[]): string {
  return ds
    .map((d) => `  ${d.source !== undefined ? `${d.source.file}: ` : ''}${d.code} ${d.message}${d.hint !== undefined ? `\n    hint: ${d.hint}` : ''}`)
    .join('\n');
}

function toDestinationEndpoint(e: Endpoint): DestinationEndpoint {
  return {
    ip: e.ip,
    port: e.port,
    weight: e.weight,
    labels: { ...e.labels },
    ...(e.identity !== undefined ? { identity: e.identity, serverName: e.identity } : {}),
    ...(e.opaqueTransportPort !== undefined ? { opaqueTransportPort: e.opaqueTransportPort } : {}),
    ...(e.protocolHint !== undefined ? { protocolHint: e.protocolHint } : {}),
  };
}

function toDestinationEvent(e: EndpointEvent, setLabels: Readonly<Record<string, string>>): DestinationEvent {
  switch (e.kind) {
    case 'add':
      return { kind: 'add', endpoints: e.endpoints.map(toDestinationEndpoint), setLabels };
    case 'remove':
      return { kind: 'remove', addrs: e.addrs.map((a) => ({ ip: a.ip, port: a.port })) };
    case 'noEndpoints':
      return { kind: 'noEndpoints', exists: e.exists };
  }
}

/** Controller metrics of its own (the CA registers the certificate metrics). */
class ControllerMetrics {
  readonly watchStreams: Gauge;
  readonly updatesSent: Counter;
  readonly updateLatency: Histogram;
  readonly destinationStreams: Gauge;
  readonly batches: Counter;

  constructor(registry: Registry, source: () => DirectorySource | undefined, index: PolicyIndex) {
    const registers = [registry];
    const { Counter, Gauge, Histogram } = promClient();
    this.watchStreams = new Gauge({ name: 'ward_policy_watch_streams', help: 'Open InboundServerPolicies/WatchPort streams', registers });
    this.updatesSent = new Counter({
      name: 'ward_policy_updates_sent_total',
      help: 'Policy updates sent on WatchPort streams (first messages excluded)',
      registers,
    });
    this.updateLatency = new Histogram({
      name: 'ward_policy_update_latency_seconds',
      help: 'Time from a resource change (first file event of the batch) to the update leaving for each affected stream',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.destinationStreams = new Gauge({ name: 'ward_destination_streams', help: 'Open Destination/Get streams', registers });
    this.batches = new Counter({ name: 'ward_source_batches_total', help: 'Change batches applied from the manifests directory', registers });
    new Gauge({
      name: 'ward_source_files',
      help: 'Manifest files by load state (error = the last good version stays in force)',
      labelNames: ['state'] as const,
      registers,
      collect() {
        const files = source()?.status() ?? [];
        this.set({ state: 'ok' }, files.filter((f) => f.ok).length);
        this.set({ state: 'error' }, files.filter((f) => !f.ok).length);
      },
    });
    new Gauge({
      name: 'ward_index_pods',
      help: 'Meshed pods in the policy index',
      registers,
      collect() {
        this.set(index.pods().length);
      },
    });
  }
}

/** Starts the controller. Throws `MeshError` (`ERR_IDENTITY`, `ERR_LISTEN`, …) when it cannot start. */
export async function startController(opts: ControllerOptions): Promise<RunningController> {
  const log = opts.logger ?? silentLogger();
  const cluster = opts.cluster;
  const listen: ControllerListen = { ...DEFAULT_LISTEN, ...opts.listen };
  const registry = createRegistry({ processMetrics: true });
  const cleanups: (() => Promise<void> | void)[] = [];
  const closeAll = async () => {
    for (const c of cleanups.splice(0).reverse()) {
      try {
        await c();
      } catch (e) {
        log.warn({ err: e }, 'error while shutting down');
      }
    }
  };

  try {
    // === identity ===
    let identityReady = false;
    const reloader = new IssuerReloader({
      dir: opts.identityDir,
      logger: log,
      onReload: (issuer: Issuer) => {
        if (!identityReady) return;
        log.info({ issuer: issuer.subject, notAfter: new Date(issuer.notAfterMs).toISOString() }, 'issuer rotated; renewing the controller certificate');
        void refreshServerCert('issuer changed');
      },
      onReject: (ds) => {
        // At start-up the failure is reported once, by the error that stops the controller.
        if (identityReady) log.error({ problems: ds.map((d) => `${d.code} ${d.message}`) }, 'new issuer material rejected; the previous issuer stays in use');
      },
    });
    const loaded = await reloader.start();
    cleanups.push(() => reloader.stop());
    if (!loaded.ok) {
      throw new MeshError('ERR_IDENTITY', `cannot load the identity issuer from ${opts.identityDir}:\n${describeDiagnostics(loaded.diagnostics)}`);
    }
    const tokenKeyPath = join(opts.identityDir, IDENTITY_FILES.tokenKey);
    let tokenKeyPem: string;
    try {
      tokenKeyPem = await readFile(tokenKeyPath, 'utf8');
    } catch (e) {
      throw new MeshError(
        'ERR_IDENTITY',
        `cannot read the token signing key ${tokenKeyPath}: ${(e as Error).message}\n  hint: create the identity directory with \`ward identity init --out ${opts.identityDir}\``,
        { cause: e },
      );
    }
    let authenticator: LocalTokenAuthenticator;
    try {
      authenticator = new LocalTokenAuthenticator({ keyPem: tokenKeyPem });
    } catch (e) {
      throw new MeshError('ERR_IDENTITY', `the token signing key ${tokenKeyPath} is not a usable EC key: ${(e as Error).message}`, { cause: e });
    }
    const ca = new CertificateAuthority({
      issuer: reloader,
      authenticator,
      trustDomain: cluster.trustDomain,
      controlPlaneNamespace: cluster.controlPlaneNamespace,
      registry,
      ...(opts.issuanceLifetimeMs !== undefined ? { issuanceLifetimeMs: opts.issuanceLifetimeMs } : {}),
    });
    const identityServerName = controlPlaneIdentity(cluster, 'linkerd-identity');
    const destinationServerName = controlPlaneIdentity(cluster, 'linkerd-destination');
    let serverCert: ServerCredentials = await ca.issueServerCertificate([identityServerName, destinationServerName]);
    const grpcServers: GrpcServerHandle[] = [];
    let renewTimer: NodeJS.Timeout | undefined;
    let stopped = false;
    const scheduleRenewal = () => {
      if (stopped) return;
      if (renewTimer !== undefined) clearTimeout(renewTimer);
      const lifeMs = Math.max(10_000, (serverCert.notAfterMs - Date.now()) * 0.7);
      renewTimer = setTimeout(() => void refreshServerCert('renewal'), Math.min(lifeMs, 2 ** 31 - 1));
      renewTimer.unref();
    };
    async function refreshServerCert(why: string): Promise<void> {
      if (stopped) return;
      try {
        serverCert = await ca.issueServerCertificate([identityServerName, destinationServerName]);
        if (stopped) return;
        for (const s of grpcServers) s.updateTls?.({ certPem: serverCert.certPem + serverCert.chainPem, keyPem: serverCert.keyPem });
        log.info({ why, notAfter: new Date(serverCert.notAfterMs).toISOString() }, 'controller certificate renewed');
      } catch (e) {
        if (stopped) return;
        log.error({ err: e, why }, 'cannot renew the controller certificate; retrying in 30 s');
        if (renewTimer !== undefined) clearTimeout(renewTimer);
        renewTimer = setTimeout(() => void refreshServerCert('retry'), 30_000);
        renewTimer.unref();
        return;
      }
      scheduleRenewal();
    }
    scheduleRenewal();
    identityReady = true;
    cleanups.push(() => {
      stopped = true;
      if (renewTimer !== undefined) clearTimeout(renewTimer);
    });

    // === indexes and the source ===
    const index = new PolicyIndex(cluster);
    const endpoints = new EndpointsIndex({
      clusterDomain: opts.clusterDomain ?? 'cluster.local',
      controlPlaneNamespace: cluster.controlPlaneNamespace,
      trustDomain: cluster.trustDomain,
    });
    const inForce = new Map<string, Resource>();
    /** Pods whose manifest address was replaced, logged once each. */
    const replacedLogged = new Set<string>();
    const replacedAddress = (pod: string, manifestIp: string, ip: string) => {
      if (replacedLogged.has(pod)) return;
      replacedLogged.add(pod);
      log.debug({ pod, manifestPodIP: manifestIp, podIP: ip }, 'pod address of the manifest replaced');
    };
    let source: DirectorySource | undefined;
    const metrics = new ControllerMetrics(registry, () => source, index);
    /** When the change being applied began (for the latency histogram). */
    let changeStartedAt = Date.now();
    const sink = {
      update(fn: (tx: SourceTx) => void): void {
        const ops: ({ op: 'apply'; r: Resource } | { op: 'delete'; k: ResourceKey })[] = [];
        fn({ apply: (r) => ops.push({ op: 'apply', r }), delete: (k) => ops.push({ op: 'delete', k }) });
        if (opts.podAddress !== undefined) withPodAddresses(ops, opts.podAddress, opts.replacePodAddresses === true, replacedAddress);
        changeStartedAt = source?.lastChangeStartedAt ?? Date.now();
        const replay = (tx: IndexTx) => {
          for (const o of ops) {
            if (o.op === 'apply') tx.apply(o.r);
            else tx.delete(o.k);
          }
        };
        for (const o of ops) {
          if (o.op === 'apply') inForce.set(resourceKeyString(resourceKey(o.r)), o.r);
          else inForce.delete(resourceKeyString(o.k));
        }
        const t0 = performance.now();
        index.update(replay);
        const t1 = performance.now();
        endpoints.update(replay);
        const t2 = performance.now();
        metrics.batches.inc();
        log.debug(
          { ops: ops.length, indexMs: +(t1 - t0).toFixed(2), endpointsMs: +(t2 - t1).toFixed(2), sinceChangeMs: Date.now() - changeStartedAt },
          'indexes updated',
        );
      },
    };
    source = new DirectorySource({
      dir: opts.manifestsDir,
      config: { controlPlaneNamespace: cluster.controlPlaneNamespace },
      sink,
      logger: log,
      debounceMs: opts.debounceMs ?? 20,
      ...(opts.rescanIntervalMs !== undefined ? { rescanIntervalMs: opts.rescanIntervalMs } : {}),
      onChange: (s) => {
        if (s.applied + s.deleted > 0)
          log.info({ applied: s.applied, deleted: s.deleted, files: s.files.length, ms: Date.now() - s.startedAtMs }, 'manifests applied');
      },
    });
    await source.start();
    const src = source;
    cleanups.push(() => src.stop());

    // === gRPC ===
    const tls = opts.grpcPlaintext === true ? undefined : { certPem: serverCert.certPem + serverCert.chainPem, keyPem: serverCert.keyPem };
    const startOne = async (name: string, at: ListenAddress, services: Parameters<typeof startGrpcServer>[0]['services']) => {
      try {
        const s = await startGrpcServer({ host: at.host, port: at.port, ...(tls !== undefined ? { tls } : {}), services });
        grpcServers.push(s);
        cleanups.push(() => s.close(2000));
        return s;
      } catch (e) {
        throw new MeshError('ERR_LISTEN', `cannot serve the ${name} API on ${at.host}:${at.port}: ${(e as Error).message}`, { cause: e });
      }
    };
    const policyServer = await startOne('policy', listen.policy, [
      inboundPolicyService(index, {
        onStreamOpen: () => metrics.watchStreams.inc(),
        onStreamClose: () => metrics.watchStreams.dec(),
        onUpdateSent: (_v, initial) => {
          if (initial) return;
          metrics.updatesSent.inc();
          metrics.updateLatency.observe(Math.max(0, Date.now() - changeStartedAt) / 1000);
        },
      }),
    ]);
    const identityServer = await startOne('identity', listen.identity, [
      identityService(async (req) => {
        const r = await ca.certify({ identity: req.identity, token: req.token, csrDer: req.csrDer });
        if (r.ok) return { ok: true, leafDer: r.leafDer, chainDer: [...r.chainDer], validUntilMs: r.validUntilMs };
        log.info({ identity: req.identity, code: r.code, reason: r.reason }, `certificate refused: ${r.message}`);
        return { ok: false, code: r.code, message: r.message };
      }),
    ]);
    const resolveDestination: DestinationResolver = (req) => {
      const target = parseEndpointsPath(req.path, opts.clusterDomain ?? 'cluster.local');
      if ('ok' in target) return target;
      const setLabels: Record<string, string> = target.kind === 'service' ? { namespace: target.namespace, service: target.name } : {};
      return {
        ok: true,
        subscribe(listener) {
          const w = endpoints.watch(req.path, (events) => {
            for (const e of events) listener(toDestinationEvent(e, setLabels));
          });
          // The path parsed above, so the watch cannot fail; stay defensive all the same.
          if (!w.ok) {
            listener({ kind: 'noEndpoints', exists: false });
            return () => {};
          }
          metrics.destinationStreams.inc();
          for (const e of w.initial) listener(toDestinationEvent(e, setLabels));
          let done = false;
          return () => {
            if (done) return;
            done = true;
            metrics.destinationStreams.dec();
            w.unsubscribe();
          };
        },
      };
    };
    const destinationServer = await startOne('destination', listen.destination, [destinationService(resolveDestination)]);

    // === admin ===
    let ready = false;
    let admin: AdminServer;
    try {
      admin = await startAdminServer(
        {
          view: { config: cluster, index },
          isReady: () => ready,
          settings: () => ({
            manifestsDir: opts.manifestsDir,
            identityDir: opts.identityDir,
            defaultPolicy: cluster.defaultPolicy,
            trustDomain: cluster.trustDomain,
            controlPlaneNamespace: cluster.controlPlaneNamespace,
            clusterNetworks: cluster.clusterNetworks.map((n) => `${n.net.ip}/${n.net.prefixLen}`),
            probeNetworks: cluster.probeNetworks.map((n) => `${n.net.ip}/${n.net.prefixLen}`),
            issuer: reloader.current()?.subject ?? null,
            issuerNotAfter: reloader.current() !== undefined ? new Date((reloader.current() as Issuer).notAfterMs).toISOString() : null,
            grpcTls: tls !== undefined,
          }),
          files: () => src.status(),
          resources: () => resourceEntries(inForce, src.status()),
          metrics: async () => ({ contentType: registry.contentType, text: await registry.metrics() }),
          identityOf: (ns, sa) => serviceAccountIdentity(cluster, ns, sa),
        },
        listen.admin.host,
        listen.admin.port,
        log,
      );
    } catch (e) {
      throw new MeshError('ERR_LISTEN', `cannot serve the admin API on ${listen.admin.host}:${listen.admin.port}: ${(e as Error).message}`, { cause: e });
    }
    const adminServer = admin;
    cleanups.push(() => adminServer.close());
    ready = true;
    log.info(
      {
        policy: `${listen.policy.host}:${policyServer.port}`,
        identity: `${listen.identity.host}:${identityServer.port}`,
        destination: `${listen.destination.host}:${destinationServer.port}`,
        admin: `${listen.admin.host}:${adminServer.port}`,
        pods: index.pods().length,
      },
      'controller ready',
    );

    let closing: Promise<void> | undefined;
    return {
      ports: { policy: policyServer.port, identity: identityServer.port, destination: destinationServer.port, admin: adminServer.port },
      trustAnchorsPem: (reloader.current() as Issuer).anchorsPem,
      identityServerName,
      destinationServerName,
      index,
      endpoints,
      registry,
      recreatePod: (namespace, name) => src.recreatePod(namespace, name),
      close: () => {
        ready = false;
        closing ??= closeAll();
        return closing;
      },
    };
  } catch (e) {
    await closeAll();
    throw e;
  }
}

/**
 * Gives the pods among `ops` that have no `status.podIP` (every pod when `replace`) the address
 * `podAddress` answers (in `namespace/name` order); `replaced` hears of each manifest address replaced.
 */
function withPodAddresses(
  ops: ({ op: 'apply'; r: Resource } | { op: 'delete'; k: ResourceKey })[],
  podAddress: (namespace: string, name: string) => string | undefined,
  replace: boolean,
  replaced: (pod: string, manifestIp: string, ip: string) => void,
): void {
  const name = (r: Resource) => `${r.metadata.namespace}/${r.metadata.name}`;
  const pending = ops.filter((o): o is { op: 'apply'; r: Pod } => o.op === 'apply' && o.r.kind === 'Pod' && (replace || (o.r.status?.podIP ?? '') === ''));
  pending.sort((a, b) => (name(a.r) < name(b.r) ? -1 : name(a.r) > name(b.r) ? 1 : 0));
  for (const o of pending) {
    const ip = podAddress(o.r.metadata.namespace, o.r.metadata.name);
    if (ip === undefined) continue;
    const had = o.r.status?.podIP ?? '';
    if (had !== '' && had !== ip) replaced(name(o.r), had, ip);
    o.r = { ...o.r, status: { ...o.r.status, podIP: ip } };
  }
}

/** The resources in force, with the diagnostics of their file that name them. */
function resourceEntries(inForce: ReadonlyMap<string, Resource>, files: ReturnType<DirectorySource['status']>): ResourceEntry[] {
  const retained = new Set<string>();
  const diagnosticsOf = new Map<string, Diagnostic[]>();
  for (const f of files) {
    for (const k of f.retained) retained.add(resourceKeyString(k));
    for (const d of f.diagnostics) {
      if (d.resource === undefined) continue;
      const id = `${d.resource.kind}|${d.resource.namespace ?? ''}|${d.resource.name}`;
      diagnosticsOf.set(id, [...(diagnosticsOf.get(id) ?? []), d]);
    }
  }
  const out: ResourceEntry[] = [];
  for (const [key, r] of inForce) {
    out.push({
      kind: r.kind,
      apiVersion: r.apiVersion,
      namespace: r.metadata.namespace,
      name: r.metadata.name,
      source: r.origin?.source,
      stale: retained.has(key),
      diagnostics: diagnosticsOf.get(`${r.kind}|${r.metadata.namespace}|${r.metadata.name}`) ?? [],
    });
  }
  return out.sort((a, b) => (a.namespace + a.kind + a.name < b.namespace + b.kind + b.name ? -1 : 1));
}
