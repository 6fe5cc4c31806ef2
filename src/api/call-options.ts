/**
 * Per-call options of the clients.
 */

/** Options of one client call. */
export interface ClientCallOptions {
  /** Fail with DEADLINE_EXCEEDED after this long (none by default); sent as `grpc-timeout`. */
  readonly deadlineMs?: number;
}
