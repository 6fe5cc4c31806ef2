/**
 * Workload expansion: a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob in a
 * manifest stands for the pods its template would create (CLI.md, "Workloads in manifests").
 */
import type { Pod, Resource, ResourceOrigin, Workload } from './types.js';

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
 * in the workload's namespace, built from its template, with `owner` `Kind/name`. Their origin
 * is the workload's, with pod paths mapped into the template (so a diagnostic about a pod's probe
 * points at the probe in the Deployment). Other resources are skipped.
 */
export function expandWorkloads(resources: readonly Resource[]): Pod[] {
  const pods: Pod[] = [];
  for (const w of resources) {
    if (!isWorkload(w)) continue;
    const { template } = w.spec;
    const origin = w.origin === undefined ? undefined : templateOrigin(w.origin, w.kind === 'CronJob');
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
        ...(origin !== undefined ? { origin } : {}),
      });
    }
  }
  return pods;
}

/** Maps a pod's field paths (`spec...`, `metadata...`) into the workload's pod template. */
function templateOrigin(origin: ResourceOrigin, isCronJob: boolean): ResourceOrigin {
  const prefix = isCronJob ? ['spec', 'jobTemplate', 'spec', 'template'] : ['spec', 'template'];
  return {
    source: origin.source,
    positionOf: (path) => (path[0] === 'spec' || path[0] === 'metadata' ? origin.positionOf([...prefix, ...path]) : origin.positionOf(path)),
  };
}
