/**
 * Consumes a grpc-js server stream with plain callbacks: messages in order, then exactly one
 * end notification — unless the caller cancelled first.
 */
import type { ClientReadableStream } from '@grpc/grpc-js';
import { type GrpcError, grpcErrorFrom } from './grpc-error.js';

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

/** Attaches handlers to a stream; returns the cancel function (idempotent). */
export function consumeStream<W>(call: ClientReadableStream<W>, onWire: (m: W) => void, onEnd: (error: GrpcError | undefined) => void): () => void {
  let cancelled = false;
  let done = false;
  const finish = (error: GrpcError | undefined): void => {
    if (done) return;
    done = true;
    if (!cancelled) onEnd(error);
  };
  call.on('data', (m: W) => {
    if (!cancelled) onWire(m);
  });
  // A non-OK status is emitted as 'error' before the readable side ends.
  call.on('error', (e: unknown) => finish(grpcErrorFrom(e)));
  call.on('end', () => finish(undefined));
  return () => {
    if (cancelled) return;
    cancelled = true;
    call.cancel();
  };
}
