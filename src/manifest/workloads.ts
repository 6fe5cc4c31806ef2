/**
 * Workload expansion: a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob in a
 * manifest stands for the pods its template would create (CLI.md, "Workloads in manifests").
 */
import type { Pod, Resource, Workload } from './types.js';

/** True for the workload kinds that stand for pods. */
export function isWorkload(r: Resource): r is Workload {
  switch (r.kind) {
    case 'Deployment':
    case 'StatefulSet':
    case 'DaemonSet':
    case 'ReplicaSet':
    case 'Job':
    case 'CronJob':
      return true;
    default:
      return false;
  }
}

/**
 * The pods the workloads among `resources` stand for: `<workload>-0` … `<workload>-(replicas-1)`
 * in the workload's namespace, built from its template, with `owner` `Kind/name` and the
 * workload's origin (so diagnostics point at the workload). Other resources are skipped.
 */
export function expandWorkloads(resources: readonly Resource[]): Pod[] {
  const pods: Pod[] = [];
  for (const w of resources) {
    if (!isWorkload(w)) continue;
    const { template } = w.spec;
    for (let i = 0; i < w.spec.replicas; i++) {
      pods.push({
        kind: 'Pod',
        apiVersion: 'v1',
        metadata: {
          namespace: w.metadata.namespace,
          name: `${w.metadata.name}-${i}`,
          labels: template.metadata.labels,
          annotations: template.metadata.annotations,
        },
        spec: template.spec,
        owner: `${w.kind}/${w.metadata.name}`,
        ...(w.origin !== undefined ? { origin: w.origin } : {}),
      });
    }
  }
  return pods;
}
