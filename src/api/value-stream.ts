/**
 * Server streams of a latest value (client policies, destination profiles): the current value,
 * then each change, until the client cancels or the server shuts down. A proxy only needs the
 * newest value, so when a stream's buffer is full the values in between are dropped and only the
 * newest is written once it drains.
 */
import type { ServerWritableStream } from '@grpc/grpc-js';
import { errorMessage } from '../shared/index.js';
import { statusCode } from './grpc-error.js';

/** A watched value: `subscribe` calls `listener` synchronously with the current value, then with every change; it returns the unsubscribe function. */
export interface ValueSubscription<T> {
  readonly ok: true;
  subscribe(listener: (value: T) => void): () => void;
}

/** Why a request cannot be answered. */
export interface ValueRefusal {
  readonly ok: false;
  readonly code: 'INVALID_ARGUMENT' | 'NOT_FOUND';
  readonly message: string;
}

/** The current value of a subscription (a unary answer): subscribes, reads, unsubscribes. */
export function currentValue<T>(sub: ValueSubscription<T>): T {
  let value: { v: T } | undefined;
  const unsubscribe = sub.subscribe((v) => {
    value ??= { v };
  });
  unsubscribe();
  if (value === undefined) throw new Error('a value subscription gave no initial value');
  return value.v;
}

/**
 * Serves `sub` (or its refusal) on `call`, encoding each value with `toWire`. Registers the
 * stream's end function in `streams` while it is open (shutdown ends them all with OK).
 */
export function serveValueStream<T, W>(
  call: ServerWritableStream<unknown, W>,
  open: () => ValueSubscription<T> | ValueRefusal,
  toWire: (value: T) => W,
  streams: Set<() => void>,
): void {
  let sub: ValueSubscription<T> | ValueRefusal;
  try {
    sub = open();
  } catch (e) {
    call.emit('error', { code: statusCode('INTERNAL'), details: errorMessage(e) });
    return;
  }
  if (!sub.ok) {
    call.emit('error', { code: statusCode(sub.code), details: sub.message });
    return;
  }
  if (call.cancelled) return;

  let closed = false;
  let unsubscribe: (() => void) | undefined;
  let pending: { v: T } | undefined;
  let waiting = false;
  const cleanup = (): boolean => {
    if (closed) return false;
    closed = true;
    unsubscribe?.();
    streams.delete(end);
    return true;
  };
  const end = (): void => {
    if (cleanup()) call.end();
  };
  const fail = (e: unknown): void => {
    if (cleanup()) call.emit('error', { code: statusCode('INTERNAL'), details: errorMessage(e) });
  };
  const write = (value: T): void => {
    try {
      if (!call.write(toWire(value)) && !waiting) {
        waiting = true;
        call.once('drain', () => {
          waiting = false;
          const next = pending;
          pending = undefined;
          if (next !== undefined && !closed) write(next.v);
        });
      }
    } catch (err) {
      fail(err);
    }
  };
  const send = (value: T): void => {
    if (closed) return;
    if (waiting) pending = { v: value };
    else write(value);
  };

  call.on('cancelled', cleanup);
  call.on('close', cleanup);
  call.on('error', cleanup);
  streams.add(end);
  try {
    const u = sub.subscribe(send);
    if (closed) u();
    else unsubscribe = u;
  } catch (e) {
    fail(e);
  }
}
