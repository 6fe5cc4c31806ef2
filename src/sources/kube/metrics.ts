/**
 * Metrics of the Kubernetes source: per resource type, whether it is synced, how many objects it
 * mirrors, and the list/watch counters (relists, watch restarts, events, 429s, 404s, failures);
 * and the objects rejected (their last good version in force). Read from the source at scrape
 * time: nothing is counted twice and nothing runs between scrapes.
 */
import { promClient, type Registry } from '../../shared/index.js';
import type { ObjectStatus } from './kubernetes-source.js';
import type { ReflectorStats } from './reflector.js';

/** What the metrics read (a KubernetesSource). */
export interface KubeSourceStats {
  reflectorStats(): Record<string, ReflectorStats>;
  /** The refused objects only: a scrape must not build the status of every object. */
  rejected(): ObjectStatus[];
}

const COUNTERS: readonly [keyof ReflectorStats, string, string][] = [
  ['lists', 'ward_kube_lists_total', 'Complete LISTs of a resource type (the first included)'],
  ['relists', 'ward_kube_relists_total', 'LISTs after the first (410 Gone, a type served again)'],
  ['watchRestarts', 'ward_kube_watch_restarts_total', 'Watches opened again after one ended or failed'],
  ['events', 'ward_kube_watch_events_total', 'Watch events received, bookmarks included'],
  ['throttled', 'ward_kube_throttled_total', '429 answers waited out'],
  ['notFound', 'ward_kube_not_found_total', '404 answers (the type not served: CRD not installed)'],
  ['errors', 'ward_kube_list_watch_errors_total', 'Failed LISTs and watches, of any kind'],
];

/** Registers the source's metrics on `registry`; `source` is read at each scrape (undefined: nothing). */
export function registerKubeSourceMetrics(registry: Registry, source: () => KubeSourceStats | undefined): void {
  const { Counter, Gauge } = promClient();
  const registers = [registry];
  const labelNames = ['resource'] as const;
  new Gauge({
    name: 'ward_kube_synced',
    help: 'Whether the resource type had its first complete LIST (1) or not (0)',
    labelNames,
    registers,
    collect() {
      for (const [resource, s] of Object.entries(source()?.reflectorStats() ?? {})) this.set({ resource }, s.synced ? 1 : 0);
    },
  });
  new Gauge({
    name: 'ward_kube_objects',
    help: 'Objects of the resource type mirrored from the API server',
    labelNames,
    registers,
    collect() {
      for (const [resource, s] of Object.entries(source()?.reflectorStats() ?? {})) this.set({ resource }, s.objects);
    },
  });
  for (const [field, name, help] of COUNTERS) {
    new Counter({
      name,
      help,
      labelNames,
      registers,
      collect() {
        // The reflector keeps the running totals; a scrape reports them as they are.
        this.reset();
        for (const [resource, s] of Object.entries(source()?.reflectorStats() ?? {})) this.inc({ resource }, s[field] as number);
      },
    });
  }
  new Gauge({
    name: 'ward_kube_objects_rejected',
    help: 'Objects whose latest version did not decode or was rejected by admission (retained = an earlier version stays in force)',
    labelNames: ['retained'] as const,
    registers,
    collect() {
      const bad = source()?.rejected() ?? [];
      this.set({ retained: 'true' }, bad.filter((s) => s.retained.length > 0).length);
      this.set({ retained: 'false' }, bad.filter((s) => s.retained.length === 0).length);
    },
  });
}
