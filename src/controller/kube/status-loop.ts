/**
 * The controller's status loop in one piece: a LeaderElection on the Lease and a StatusWriter
 * that writes only while this replica leads, with the hooks a Kubernetes source calls.
 */
import type { PolicyIndex } from '../../index/index.js';
import type { Logger, Registry } from '../../shared/index.js';
import type { KubeRequester } from '../../sources/index.js';
import { LeaderElection, type LeaderElectionOptions } from './leader-election.js';
import { registerStatusMetrics } from './status-metrics.js';
import { type RejectedObject, StatusWriter, type StatusWriterOptions } from './status-writer.js';

/** Settings of {@link createStatusLoop}. */
export interface StatusLoopOptions {
  readonly client: KubeRequester;
  readonly index: PolicyIndex;
  /** The controller's namespace (the Lease lives there). */
  readonly namespace: string;
  /** This replica's name in the Lease (the pod name). */
  readonly identity: string;
  /** Objects the source refused: `() => rejectedObjects(source.status())`. */
  readonly rejected?: () => Iterable<RejectedObject>;
  readonly logger?: Logger;
  /** Registers the loop's metrics there when given. */
  readonly registry?: Registry;
  /** Lease name and timings (tests); client-go's defaults otherwise. */
  readonly election?: Pick<LeaderElectionOptions, 'name' | 'leaseDurationMs' | 'renewDeadlineMs' | 'retryPeriodMs'>;
  readonly writer?: Pick<StatusWriterOptions, 'debounceMs' | 'backoff' | 'concurrency'>;
}

/** A status loop: pass `onObject` and `onChange` to the source, then `start()`. */
export interface StatusLoop {
  readonly election: LeaderElection;
  readonly writer: StatusWriter;
  /** KubernetesSourceOptions.onObject. */
  readonly onObject: (type: { readonly group: string; readonly kind: string }, key: string, object: unknown) => void;
  /** Call after every batch the source applied to the index (KubernetesSourceOptions.onChange). */
  readonly onChange: () => void;
  /** Starts campaigning; status is written once this replica leads. */
  start(): void;
  /** Stops writing, then gives the Lease up so another replica takes over at once. */
  stop(): Promise<void>;
}

/** Builds the status loop. See {@link StatusLoop}. */
export function createStatusLoop(opts: StatusLoopOptions): StatusLoop {
  let writer: StatusWriter | undefined;
  const election = new LeaderElection({
    client: opts.client,
    namespace: opts.namespace,
    identity: opts.identity,
    ...opts.election,
    ...(opts.logger !== undefined ? { logger: opts.logger } : {}),
    // A new leader writes whatever the previous one left undone or out of date.
    onStartedLeading: () => writer?.schedule(),
  });
  writer = new StatusWriter({
    client: opts.client,
    index: opts.index,
    isLeader: () => election.isLeader(),
    ...opts.writer,
    ...(opts.rejected !== undefined ? { rejected: opts.rejected } : {}),
    ...(opts.logger !== undefined ? { logger: opts.logger } : {}),
  });
  const w = writer;
  if (opts.registry !== undefined) registerStatusMetrics(opts.registry, w, election);
  return {
    election,
    writer: w,
    onObject: (type, key, object) => w.onObject(type, key, object),
    onChange: () => w.schedule(),
    start: () => election.start(),
    async stop() {
      await w.stop();
      await election.stop();
    },
  };
}
