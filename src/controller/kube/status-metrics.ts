/**
 * Metrics of the status writer and the leader election, read from their counters at scrape time
 * (so neither component depends on a registry).
 */
import { promClient, type Registry } from '../../shared/index.js';
import type { LeaderElection } from './leader-election.js';
import type { StatusWriter } from './status-writer.js';

/** Registers `ward_status_*` and `ward_leader*` families reading `writer` and `election`. */
export function registerStatusMetrics(registry: Registry, writer: StatusWriter, election: LeaderElection): void {
  const registers = [registry];
  const { Counter, Gauge } = promClient();
  // A counter's value can only be reset to a total that never decreases: set it from the source.
  const mirror = (name: string, help: string, read: () => number) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  mirror('ward_status_writes_total', 'Status patches applied', () => writer.stats.writes);
  mirror('ward_status_skipped_unchanged_total', 'Objects whose computed status was already in place', () => writer.stats.skippedUnchanged);
  mirror('ward_status_write_errors_total', 'Failed status patches', () => writer.stats.errors);
  mirror('ward_leader_acquisitions_total', 'Times this replica became the status leader', () => election.stats.acquired);
  new Gauge({
    name: 'ward_leader',
    help: '1 while this replica holds the status Lease, else 0',
    registers,
    collect() {
      this.set(election.isLeader() ? 1 : 0);
    },
  });
}
