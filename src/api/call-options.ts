/**
 * Per-call options of the clients, independent of grpc-js.
 */
import type { CallOptions } from '@grpc/grpc-js';

/** Options of one client call. */
export interface ClientCallOptions {
  /** Fail with DEADLINE_EXCEEDED after this long (none by default). */
  readonly deadlineMs?: number;
}

/** grpc-js call options for `ClientCallOptions`. */
export function grpcCallOptions(o: ClientCallOptions | undefined): Partial<CallOptions> {
  const out: Partial<CallOptions> = {};
  if (o?.deadlineMs !== undefined) out.deadline = Date.now() + o.deadlineMs;
  return out;
}
