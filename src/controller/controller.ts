/**
 * `ward controller`: the control plane. Wires a source (a directory of manifests, or the
 * Kubernetes API) into the policy index and the endpoints index, and serves the proxies:
 *
 *   manifests dir  -> DirectorySource  -> sink -> PolicyIndex   -> InboundServerPolicies (8090)
 *   Kubernetes API -> KubernetesSource -/      -> EndpointsIndex -> Destination (8086)
 *   identity dir   -> IssuerReloader  -> CertificateAuthority   -> Identity/Certify (8080)
 *   admin (9990): /metrics, /ready, /live, JSON API
 *   Kubernetes mode: webhooks (9443), status written by the Lease holder
 *
 * The gRPC servers speak TLS with a certificate the controller issues itself from the current
 * issuer, for the control plane's identities (`linkerd-identity.<ns>…`, `linkerd-destination.<ns>…`),
 * so proxies verify it against the trust anchors like any meshed peer. Bad manifests never stop
 * the controller (the source keeps the last good version); a bad identity directory does, with
 * a precise message, because a control plane that cannot issue certificates is not one.
 */
import { type Diagnostic, serviceAccountIdentity } from '../core/index.js';
import type { Issuer } from '../identity/index.js';
import { type Resource, resourceKeyString } from '../manifest/index.js';
import { createRegistry, type Logger, MeshError, type Registry, silentLogger } from '../shared/index.js';
import type { FileStatus } from '../sources/index.js';
import type { ResourceEntry } from './admin-api.js';
import { featureRoutes } from './admin-routes.js';
import { type AdminServer, startAdminServer } from './admin-server.js';
import { startGrpcServers } from './controller-grpc.js';
import { type ControllerIdentity, startControllerIdentity } from './controller-identity.js';
import { type ControllerIndexes, startIndexes } from './controller-indexes.js';
import { type KubernetesSide, StatusFeed, startKubernetesSide } from './controller-kubernetes.js';
import { type ControllerListen, type ControllerOptions, DEFAULT_LISTEN, type ListenAddress, type RunningController } from './controller-types.js';
import { ShutdownStack } from './shutdown-stack.js';

export type { ControllerListen, ControllerOptions, KubernetesControllerOptions, ListenAddress, RunningController } from './controller-types.js';
export { DEFAULT_LISTEN } from './controller-types.js';

/** Starts the controller. Throws `MeshError` (`ERR_IDENTITY`, `ERR_LISTEN`, …) when it cannot start. */
export async function startController(opts: ControllerOptions): Promise<RunningController> {
  const log = opts.logger ?? silentLogger();
  const listen: ControllerListen = { ...DEFAULT_LISTEN, ...opts.listen };
  const registry = createRegistry({ processMetrics: true });
  // What has started so far, stopped last first on a failed start and on close.
  const cleanups = new ShutdownStack(log);

  try {
    const identity = await startControllerIdentity(opts, registry, log, cleanups);
    const feed = opts.kubernetes !== undefined ? new StatusFeed() : undefined;
    const indexes = await startIndexes(opts, registry, log, cleanups, feed?.listeners);
    const grpc = await startGrpcServers(opts, listen, identity, indexes, log, cleanups);
    let kube: KubernetesSide | undefined;
    if (opts.kubernetes !== undefined && feed !== undefined)
      kube = await startKubernetesSide({ ...opts, kubernetes: opts.kubernetes }, identity, indexes, feed, registry, log, cleanups);
    let ready = false;
    const admin = await startAdmin(opts, listen.admin, { registry, log, identity, indexes, cleanups, isReady: () => ready });
    cleanups.push(() => admin.close());
    ready = true;
    log.info(
      {
        policy: `${listen.policy.host}:${grpc.policy.port}`,
        identity: `${listen.identity.host}:${grpc.identity.port}`,
        destination: `${listen.destination.host}:${grpc.destination.port}`,
        admin: `${listen.admin.host}:${admin.port}`,
        ...(kube !== undefined
          ? {
              webhooks: kube.webhook !== undefined ? `${opts.kubernetes?.webhook?.listen.host}:${kube.webhook.port}` : null,
              controllerHost: kube.controllerHost,
            }
          : {}),
        pods: indexes.index.pods().length,
      },
      'controller ready',
    );

    let closing: Promise<void> | undefined;
    return {
      ports: { policy: grpc.policy.port, identity: grpc.identity.port, destination: grpc.destination.port, admin: admin.port },
      trustAnchorsPem: (identity.reloader.current() as Issuer).anchorsPem,
      identityServerName: identity.identityServerName,
      destinationServerName: identity.destinationServerName,
      index: indexes.index,
      endpoints: indexes.endpoints,
      registry,
      ...(kube !== undefined
        ? { kubernetes: { isLeader: () => (kube as KubernetesSide).leader.isLeader(), webhookPort: kube.webhook?.port, controllerHost: kube.controllerHost } }
        : {}),
      recreatePod: (namespace, name) => indexes.source.recreatePod(namespace, name),
      close: () => {
        ready = false;
        closing ??= cleanups.closeAll();
        return closing;
      },
    };
  } catch (e) {
    await cleanups.closeAll();
    throw e;
  }
}

/** What the admin server reads. */
interface AdminSources {
  readonly registry: Registry;
  readonly log: Logger;
  readonly identity: ControllerIdentity;
  readonly indexes: ControllerIndexes;
  readonly cleanups: ShutdownStack;
  readonly isReady: () => boolean;
}

/** Starts the admin server (metrics, readiness, JSON API). Throws `MeshError` `ERR_LISTEN` when `at` cannot be served. */
async function startAdmin(
  opts: ControllerOptions,
  at: ListenAddress,
  { registry, log, identity, indexes, cleanups, isReady }: AdminSources,
): Promise<AdminServer> {
  const cluster = opts.cluster;
  const src = indexes.source;
  const reloader = identity.reloader;
  const features = featureRoutes({ cluster, indexes, identity, registry, log, cleanups, metrics: opts.metrics });
  try {
    return await startAdminServer(
      {
        view: { config: cluster, index: indexes.index },
        isReady,
        settings: () => ({
          manifestsDir: opts.manifestsDir ?? null,
          kubernetes: opts.kubernetes !== undefined,
          identityDir: opts.identityDir,
          defaultPolicy: cluster.defaultPolicy,
          trustDomain: cluster.trustDomain,
          controlPlaneNamespace: cluster.controlPlaneNamespace,
          clusterNetworks: cluster.clusterNetworks.map((n) => `${n.net.ip}/${n.net.prefixLen}`),
          probeNetworks: cluster.probeNetworks.map((n) => `${n.net.ip}/${n.net.prefixLen}`),
          issuer: reloader.current()?.subject ?? null,
          issuerNotAfter: reloader.current() !== undefined ? new Date((reloader.current() as Issuer).notAfterMs).toISOString() : null,
          grpcTls: opts.grpcPlaintext !== true,
        }),
        files: () => src.status(),
        resources: () => resourceEntries(indexes.inForce, src.status(), indexes.policyWarnings.current()),
        metrics: async () => ({ contentType: registry.contentType, text: await registry.metrics() }),
        identityOf: (ns, sa) => serviceAccountIdentity(cluster, ns, sa),
        routes: features.routes,
      },
      at.host,
      at.port,
      log,
      features.streams,
      // The controller's own namespace (its pod's, in Kubernetes) is where the port-forward goes.
      { apiFrom: opts.adminApiFrom ?? 'loopback', controlPlaneNamespace: opts.kubernetes?.namespace ?? cluster.controlPlaneNamespace },
    );
  } catch (e) {
    throw new MeshError('ERR_LISTEN', `cannot serve the admin API on ${at.host}:${at.port}: ${(e as Error).message}`, { cause: e });
  }
}

/** The resources in force, with the diagnostics of their file and the policy warnings that name them. */
function resourceEntries(inForce: ReadonlyMap<string, Resource>, files: readonly FileStatus[], warnings: readonly Diagnostic[]): ResourceEntry[] {
  const retained = new Set<string>();
  const diagnosticsOf = new Map<string, Diagnostic[]>();
  for (const f of files) for (const k of f.retained) retained.add(resourceKeyString(k));
  for (const f of [...files.map((x) => x.diagnostics), warnings]) {
    for (const d of f) {
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
