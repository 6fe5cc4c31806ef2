/** The controller's own metric families: policy and destination streams, updates, source batches and files, indexed pods. */
import type { PolicyIndex } from '../index/index.js';
import { type Counter, type Gauge, type Histogram, promClient, type Registry } from '../shared/index.js';
import type { PolicySource } from '../sources/index.js';

/** Controller metrics of its own (the CA registers the certificate metrics). */
export class ControllerMetrics {
  readonly watchStreams: Gauge;
  readonly updatesSent: Counter;
  readonly updateLatency: Histogram;
  readonly destinationStreams: Gauge;
  readonly batches: Counter;

  constructor(registry: Registry, source: () => PolicySource | undefined, index: PolicyIndex) {
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
      help: 'Source inputs (manifest files, or Kubernetes objects) by load state (error = the last good version stays in force)',
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
