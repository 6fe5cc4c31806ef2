/**
 * Socket helpers of the HTTP/1 and HTTP/2 code: how a connection ends (lingering while a slow
 * reader still takes what was buffered for it) and how received bytes are held.
 */
import type { Duplex } from 'node:stream';
import { unsentBytes } from './node-internals.js';

/**
 * After its end, a socket is destroyed a second after its buffered output is out, once that output
 * has not moved for {@link LINGER_STALL_MS}, or after {@link LINGER_MAX_MS} in any case.
 */
export const LINGER_STEP_MS = 1000;
const LINGER_STALL_MS = 5000;
const LINGER_MAX_MS = 30_000;

/** `chunk`, or a copy of it when it is a small slice of a larger buffer (which it would keep alive while held). */
export function detached(chunk: Buffer): Buffer {
  return chunk.length * 2 < chunk.buffer.byteLength ? Buffer.from(chunk) : chunk;
}

/**
 * After `end()`: a peer that never reads (or never closes its side) must not hold the socket, but
 * one that is still reading what was buffered for it gets it (see {@link LINGER_STALL_MS}).
 */
export function lingerThenDestroy(socket: Duplex): void {
  const started = Date.now();
  let left = unsentBytes(socket);
  let stalled = 0;
  const check = (): void => {
    if (socket.destroyed) return;
    const now = unsentBytes(socket);
    stalled = now > 0 && now >= left ? stalled + LINGER_STEP_MS : 0;
    if (now === 0 || stalled >= LINGER_STALL_MS || Date.now() - started >= LINGER_MAX_MS) {
      socket.destroy();
      return;
    }
    left = now;
    setTimeout(check, LINGER_STEP_MS).unref();
  };
  setTimeout(check, LINGER_STEP_MS).unref();
}
