/**
 * The controller's indexes and what feeds them: the source's batches (a directory's manifests, or
 * the Kubernetes API's objects) are applied to the policy index and the endpoints index alike,
 * with local pod addresses filled in on the way.
 */
import { performance } from 'node:perf_hooks';
import { EndpointsIndex, type IndexTx, PolicyIndex, resourceKey } from '../index/index.js';
import { type Pod, type Resource, type ResourceKey, resourceKeyString } from '../manifest/index.js';
import { type Logger, MeshError, type Registry } from '../shared/index.js';
import {
  DirectorySource,
  type KubeObject,
  KubernetesSource,
  type PolicySource,
  type ResourceType,
  registerKubeSourceMetrics,
  type SourceTx,
} from '../sources/index.js';
import { ControllerMetrics } from './controller-metrics.js';
import type { ControllerOptions } from './controller-types.js';
import { PolicyWarnings } from './policy-warnings.js';
import type { ShutdownStack } from './shutdown-stack.js';

/** The started indexes and source. */
export interface ControllerIndexes {
  readonly index: PolicyIndex;
  readonly endpoints: EndpointsIndex;
  readonly source: PolicySource;
  /** The Kubernetes source, in Kubernetes mode. */
  readonly kubernetes: KubernetesSource | undefined;
  readonly metrics: ControllerMetrics;
  /** The resources in force, by `resourceKeyString`. */
  readonly inForce: ReadonlyMap<string, Resource>;
  /** When the change being applied began (for the latency histogram). */
  changeStartedAt(): number;
  /** The lint warnings of what is in force, refreshed after each batch. */
  readonly policyWarnings: PolicyWarnings;
}

type SourceOp = { op: 'apply'; r: Resource } | { op: 'delete'; k: ResourceKey };

/** What the source's listeners hear besides the sink (Kubernetes mode's status writer). */
export interface SourceListeners {
  /** Every object of a batch as the API has it (undefined: deleted), before it is decoded. */
  onObject?: (type: ResourceType, key: string, object: KubeObject | undefined) => void;
  /** After each batch the indexes applied. */
  onBatch?: () => void;
}

/**
 * Creates the indexes and starts the source on them (stopped by `cleanups`): resolves once the
 * source's initial state is in the indexes (in Kubernetes mode, after every list).
 */
export async function startIndexes(
  opts: ControllerOptions,
  registry: Registry,
  log: Logger,
  cleanups: ShutdownStack,
  listeners: SourceListeners = {},
): Promise<ControllerIndexes> {
  const cluster = opts.cluster;
  const index = new PolicyIndex(cluster);
  const endpoints = new EndpointsIndex({
    clusterDomain: opts.clusterDomain ?? 'cluster.local',
    controlPlaneNamespace: cluster.controlPlaneNamespace,
    trustDomain: cluster.trustDomain,
  });
  let source: PolicySource | undefined;
  const metrics = new ControllerMetrics(registry, () => source, index);
  const sink = makeIndexSink(opts, log, { index, endpoints, metrics, source: () => source });
  const policyWarnings = new PolicyWarnings(index, sink.inForce, log);
  const onChange = (s: { applied: number; deleted: number; files: readonly string[]; startedAtMs: number }, msg: string) => {
    if (s.applied + s.deleted > 0) log.info({ applied: s.applied, deleted: s.deleted, files: s.files.length, ms: Date.now() - s.startedAtMs }, msg);
    if (s.applied + s.deleted > 0) policyWarnings.refresh();
    listeners.onBatch?.();
  };
  let kubernetes: KubernetesSource | undefined;
  if (opts.kubernetes !== undefined) {
    if (opts.manifestsDir !== undefined) throw new MeshError('ERR_CONFIG', 'the controller reads either a manifests directory or the Kubernetes API, not both');
    kubernetes = new KubernetesSource({
      client: opts.kubernetes.client,
      sink,
      logger: log,
      onChange: (s) => onChange(s, 'objects applied'),
      ...(listeners.onObject !== undefined ? { onObject: listeners.onObject } : {}),
    });
    const k = kubernetes;
    registerKubeSourceMetrics(registry, () => k);
    source = kubernetes;
  } else {
    if (opts.manifestsDir === undefined) throw new MeshError('ERR_CONFIG', 'the controller needs a manifests directory or Kubernetes mode');
    source = new DirectorySource({
      dir: opts.manifestsDir,
      config: { controlPlaneNamespace: cluster.controlPlaneNamespace },
      sink,
      logger: log,
      debounceMs: opts.debounceMs ?? 20,
      ...(opts.rescanIntervalMs !== undefined ? { rescanIntervalMs: opts.rescanIntervalMs } : {}),
      ...(opts.podNames !== undefined ? { podNames: opts.podNames } : {}),
      onChange: (s) => onChange(s, 'manifests applied'),
    });
  }
  const src = source;
  // Pushed before start: a source stopped while its first list is still out ends that start.
  cleanups.push(() => src.stop());
  await src.start();
  return { index, endpoints, source: src, kubernetes, metrics, inForce: sink.inForce, changeStartedAt: sink.changeStartedAt, policyWarnings };
}

/** The source's sink: applies each batch to both indexes and remembers the resources in force. */
function makeIndexSink(
  opts: ControllerOptions,
  log: Logger,
  to: {
    readonly index: PolicyIndex;
    readonly endpoints: EndpointsIndex;
    readonly metrics: ControllerMetrics;
    readonly source: () => PolicySource | undefined;
  },
): { update(fn: (tx: SourceTx) => void): void; readonly inForce: ReadonlyMap<string, Resource>; changeStartedAt(): number } {
  const inForce = new Map<string, Resource>();
  /** Pods whose manifest address was replaced, logged once each. */
  const replacedLogged = new Set<string>();
  const replacedAddress = (pod: string, manifestIp: string, ip: string) => {
    if (replacedLogged.has(pod)) return;
    replacedLogged.add(pod);
    log.debug({ pod, manifestPodIP: manifestIp, podIP: ip }, 'pod address of the manifest replaced');
  };
  let changeStartedAt = Date.now();
  return {
    inForce,
    changeStartedAt: () => changeStartedAt,
    update(fn: (tx: SourceTx) => void): void {
      const ops: SourceOp[] = [];
      fn({ apply: (r) => ops.push({ op: 'apply', r }), delete: (k) => ops.push({ op: 'delete', k }) });
      if (opts.podAddress !== undefined) withPodAddresses(ops, opts.podAddress, opts.replacePodAddresses === true, replacedAddress);
      changeStartedAt = to.source()?.lastChangeStartedAt ?? Date.now();
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
      to.index.update(replay);
      const t1 = performance.now();
      to.endpoints.update(replay);
      const t2 = performance.now();
      to.metrics.batches.inc();
      log.debug(
        { ops: ops.length, indexMs: +(t1 - t0).toFixed(2), endpointsMs: +(t2 - t1).toFixed(2), sinceChangeMs: Date.now() - changeStartedAt },
        'indexes updated',
      );
    },
  };
}

/**
 * Gives the pods among `ops` that have no `status.podIP` (every pod when `replace`) the address
 * `podAddress` answers (in `namespace/name` order); `replaced` hears of each manifest address replaced.
 */
function withPodAddresses(
  ops: SourceOp[],
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
