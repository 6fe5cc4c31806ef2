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
 * How expanded pods are named:
 * - `ordinal`: `<workload>-<i>`, the pods a template stands for (`ward check`, `ward test`);
 * - `template-hash`: `<workload>-<hash>-<i>`, where `<hash>` is the template's hash
 *   ({@link podTemplateHash}), as a Deployment's ReplicaSet names its pods: a changed template
 *   makes new pods instead of changing running ones (the live mesh of `ward up`). Deployment pods
 *   also get the `pod-template-hash` label.
 */
export type PodNaming = 'ordinal' | 'template-hash';

/** Options of {@link expandWorkloads}. */
export interface ExpandOptions {
  /** Default `ordinal`. */
  readonly podNames?: PodNaming;
}

/** The label a Deployment's pods carry with their template's hash. */
export const POD_TEMPLATE_HASH_LABEL = 'pod-template-hash';

/**
 * The pods the workloads among `resources` stand for: `replicas` pods (named per
 * `opts.podNames`) in the workload's namespace, built from its template, with `owner`
 * `Kind/name`. Their origin is the workload's, with pod paths mapped into the template (so a
 * diagnostic about a pod's probe points at the probe in the Deployment). Other resources are
 * skipped.
 */
export function expandWorkloads(resources: readonly Resource[], opts: ExpandOptions = {}): Pod[] {
  const pods: Pod[] = [];
  for (const w of resources) {
    if (!isWorkload(w)) continue;
    const { template } = w.spec;
    const origin = w.origin === undefined ? undefined : templateOrigin(w.origin, w.kind === 'CronJob');
    const hash = opts.podNames === 'template-hash' ? podTemplateHash(w) : undefined;
    const prefix = hash === undefined ? w.metadata.name : `${w.metadata.name}-${hash}`;
    const labels = hash !== undefined && w.kind === 'Deployment' ? { ...template.metadata.labels, [POD_TEMPLATE_HASH_LABEL]: hash } : template.metadata.labels;
    for (let i = 0; i < w.spec.replicas; i++) {
      pods.push({
        kind: 'Pod',
        apiVersion: 'v1',
        metadata: {
          namespace: w.metadata.namespace,
          name: `${prefix}-${i}`,
          labels,
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

/** The alphabet Kubernetes encodes name suffixes with (no vowels, no look-alike digits). */
const SAFE_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

/**
 * The hash of a workload's pod template, spelled as Kubernetes spells a `pod-template-hash`:
 * 32-bit FNV-1a of the template (labels, annotations, spec; object keys sorted, so only content
 * counts), its decimal digits mapped to {@link SAFE_ALPHABET}. Equal templates hash equal; any
 * change of them (an annotation included) changes it, barring a 32-bit collision.
 */
export function podTemplateHash(w: Workload): string {
  const t = w.spec.template;
  const text = canonicalJson({ metadata: { labels: t.metadata.labels, annotations: t.metadata.annotations }, spec: t.spec });
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(text)) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return [...String(h)].map((d) => SAFE_ALPHABET[d.charCodeAt(0) % SAFE_ALPHABET.length]).join('');
}

/** JSON with object keys sorted and undefined members left out. */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : canonicalJson(x))).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}
