/**
 * The callbacks of a server stream: messages in order, then exactly one end notification —
 * unless the caller cancelled first.
 */
import type { GrpcError } from './grpc-error.js';

/** Callbacks of a watched stream. */
export interface StreamHandlers<T> {
  /** Each message, in order. */
  onMessage(message: T): void;
  /**
   * The stream ended: `undefined` when the server closed it with status OK (e.g. shutdown),
   * otherwise the error. Not called after the caller cancelled. A watcher should re-call with
   * backoff: streams are not resumed automatically.
   */
  onEnd(error: GrpcError | undefined): void;
}
