/**
 * The controller's Kubernetes side, on top of the indexes the API server feeds: the Lease that
 * decides which replica writes status, the status writer, and the admission webhooks (validating
 * the policy resources with `ward check`'s rules, injecting pods). Every replica serves the gRPC
 * APIs and the webhooks from its own watch; only the leader writes.
 */
import type { Issuer } from '../identity/index.js';
import type { KubeInjectConfig } from '../manifest/index.js';
import { errorMessage, type Logger, MeshError, type Registry } from '../shared/index.js';
import { KubeApiError, type KubeObject, type KubeRequester, type ResourceType } from '../sources/index.js';
import type { ControllerIdentity } from './controller-identity.js';
import type { ControllerIndexes, SourceListeners } from './controller-indexes.js';
import type { ControllerOptions, KubernetesControllerOptions } from './controller-types.js';
import type { LeaderElection } from './kube/leader-election.js';
import { createStatusLoop, type StatusLoop } from './kube/status-loop.js';
import { rejectedObjects, type StatusWriter } from './kube/status-writer.js';
import type { ShutdownStack } from './shutdown-stack.js';
import { type RunningWebhookServer, startWebhookServer } from './webhooks/webhook-server.js';

/** The Service injected proxies dial by default (what `ward install` creates). */
export const DEFAULT_CONTROLLER_SERVICE = 'ward-controller';

/** The started Kubernetes side. */
export interface KubernetesSide {
  readonly leader: LeaderElection;
  readonly status: StatusWriter;
  readonly webhook: RunningWebhookServer | undefined;
  /** Where injected proxies reach the controller. */
  readonly controllerHost: string;
}

/**
 * The source listeners that feed the status loop, which starts after the initial sync: the
 * objects seen until then are kept (the last version of each) and handed over when it is
 * attached; after that they go straight to it.
 */
export class StatusFeed {
  readonly #seen = new Map<string, { readonly type: ResourceType; readonly key: string; readonly object: KubeObject }>();
  #loop: StatusLoop | undefined;

  readonly listeners: SourceListeners = {
    onObject: (type: ResourceType, key: string, object: KubeObject | undefined) => {
      if (this.#loop !== undefined) {
        this.#loop.onObject(type, key, object);
        return;
      }
      const id = `${type.group}/${type.kind}/${key}`;
      if (object !== undefined) this.#seen.set(id, { type, key, object });
      else this.#seen.delete(id);
    },
    onBatch: () => this.#loop?.onChange(),
  };

  attach(loop: StatusLoop): void {
    this.#loop = loop;
    for (const { type, key, object } of this.#seen.values()) loop.onObject(type, key, object);
    // From now on the loop hears every object itself; the reflectors keep the objects.
    this.#seen.clear();
    loop.onChange();
  }
}

/**
 * The address of the controller's Service (its ClusterIP), which injected proxies dial: the
 * cluster may have no DNS, and a ClusterIP never changes while the Service exists. Retries for
 * up to `waitMs` (the Service may be created in the same `kubectl apply` as the controller).
 */
export async function lookupControllerHost(client: KubeRequester, namespace: string, service: string, log: Logger, waitMs = 60_000): Promise<string> {
  const deadline = Date.now() + waitMs;
  let delayMs = 250;
  for (;;) {
    try {
      const res = await client.request({ method: 'GET', path: `/api/v1/namespaces/${encodeURIComponent(namespace)}/services/${encodeURIComponent(service)}` });
      const ip = (res.body as { spec?: { clusterIP?: unknown } } | undefined)?.spec?.clusterIP;
      if (typeof ip === 'string' && ip !== '' && ip !== 'None') return ip;
      throw new MeshError('ERR_CONTROLLER_SERVICE', `Service ${namespace}/${service} has no ClusterIP (spec.clusterIP ${JSON.stringify(ip)})`);
    } catch (e) {
      const retryable =
        !(e instanceof MeshError && e.code === 'ERR_CONTROLLER_SERVICE') &&
        (!(e instanceof KubeApiError) || e.status === 404 || e.status === 0 || e.status >= 429);
      if (!retryable || Date.now() + delayMs > deadline)
        throw new MeshError(
          'ERR_CONTROLLER_SERVICE',
          `cannot find where injected proxies reach the controller: ${errorMessage(e)}\n  hint: \`ward install\` creates Service ${namespace}/${service}; or pass --controller-host`,
          { cause: e },
        );
      log.info({ service: `${namespace}/${service}`, err: errorMessage(e), retryInMs: delayMs }, 'waiting for the controller Service');
      await new Promise((r) => setTimeout(r, delayMs));
      delayMs = Math.min(delayMs * 2, 5000);
    }
  }
}

/** Starts leader election, the status writer and the webhooks (each stopped by `cleanups`). */
export async function startKubernetesSide(
  opts: ControllerOptions & { readonly kubernetes: KubernetesControllerOptions },
  identity: ControllerIdentity,
  indexes: ControllerIndexes,
  feed: StatusFeed,
  registry: Registry,
  log: Logger,
  cleanups: ShutdownStack,
): Promise<KubernetesSide> {
  const k = opts.kubernetes;
  const client = k.client;
  const controllerHost = k.controllerHost ?? (await lookupControllerHost(client, k.namespace, k.controllerService ?? DEFAULT_CONTROLLER_SERVICE, log));

  const loop = createStatusLoop({
    client,
    index: indexes.index,
    namespace: k.namespace,
    identity: k.podName,
    rejected: () => rejectedObjects(indexes.kubernetes?.rejected() ?? []),
    logger: log,
    registry,
    election: {
      ...(k.leaseDurationMs !== undefined ? { leaseDurationMs: k.leaseDurationMs } : {}),
      ...(k.renewDeadlineMs !== undefined ? { renewDeadlineMs: k.renewDeadlineMs } : {}),
      ...(k.retryPeriodMs !== undefined ? { retryPeriodMs: k.retryPeriodMs } : {}),
    },
  });
  feed.attach(loop);
  // Stops writing, then gives the Lease up so another replica takes over at once.
  cleanups.push(() => loop.stop());
  loop.start();

  let webhook: RunningWebhookServer | undefined;
  if (k.webhook !== undefined) {
    const cluster = opts.cluster;
    const source = indexes.kubernetes;
    const injectConfig = (): KubeInjectConfig => ({
      controlPlaneNamespace: cluster.controlPlaneNamespace,
      image: k.proxyImage,
      ...(k.proxyImagePullPolicy !== undefined ? { imagePullPolicy: k.proxyImagePullPolicy } : {}),
      controllerHost,
      trustAnchorsPem: (identity.reloader.current() as Issuer).anchorsPem,
      trustDomain: cluster.trustDomain,
      ...(opts.clusterDomain !== undefined ? { clusterDomain: opts.clusterDomain } : {}),
    });
    try {
      webhook = await startWebhookServer({
        certFile: k.webhook.certFile,
        keyFile: k.webhook.keyFile,
        host: k.webhook.listen.host,
        port: k.webhook.listen.port,
        logger: log,
        validate: {
          existing: (namespace) => [...indexes.inForce.values()].filter((r) => r.metadata.namespace === namespace),
        },
        inject: {
          config: injectConfig,
          lookupNamespace: (name) => source?.lookup('Namespace', '', name),
          fetchNamespace: async (name) => {
            try {
              return (await client.request({ method: 'GET', path: `/api/v1/namespaces/${encodeURIComponent(name)}`, timeoutMs: 4000 })).body;
            } catch (e) {
              if (e instanceof KubeApiError && e.status === 404) return undefined;
              throw e;
            }
          },
          logger: log,
        },
      });
    } catch (e) {
      if (e instanceof MeshError) throw e;
      throw new MeshError('ERR_LISTEN', `cannot serve the webhooks on ${k.webhook.listen.host}:${k.webhook.listen.port}: ${errorMessage(e)}`, { cause: e });
    }
    const w = webhook;
    cleanups.push(() => w.close());
  }
  return { leader: loop.election, status: loop.writer, webhook, controllerHost };
}
