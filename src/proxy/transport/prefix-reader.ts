/**
 * Reads the first bytes of an accepted connection until a detector decides (TLS, transport
 * header, HTTP), then puts every byte back: the socket is paused and the bytes are `unshift`ed,
 * so the caller can hand the same socket on — `server.emit('connection', socket)` for a
 * node:http, node:http2 or node:tls server — without a JS `Duplex` wrapper (STACK.md §2.13).
 * After handing a socket to a node:http server call `socket.resume()`; for node:http2 do not
 * (the session drains the readable buffer into nghttp2 itself). To drop a prefix the detector
 * consumed (a transport header), `socket.read(consumed)` after the hand-back; calls chain, so
 * HTTP detection can follow on the same socket.
 *
 * One timer per call (a deadline over the whole read, not an idle timeout, so a client dribbling
 * a byte at a time cannot hold detection open), cleared on every path; the listeners it adds are
 * removed on every path. Bytes are accumulated without per-chunk concatenation: the first chunk
 * is used as is and later ones go into a buffer that grows by doubling (bounded by `maxBytes`
 * plus one chunk).
 */
import type { Socket } from 'node:net';

/** Bounds of one {@link readPrefix} call. */
export interface PrefixReadOptions {
  /** Deadline for a decision, from the call (detect timeout; the proxy default is 10 s). */
  readonly timeoutMs: number;
  /** Once this many bytes are buffered and `decide` still needs more, the read overflows. */
  readonly maxBytes: number;
}

/**
 * Outcome of {@link readPrefix}; `buffer` always holds every byte read. On `result`, `timeout`
 * and `overflow` the socket is paused with those bytes unshifted back into it (hand it on, or
 * destroy it). On `closed` (end of stream, error or close before a decision) nothing is put back;
 * `error` is set when an 'error' event caused it.
 */
export type PrefixRead<T> =
  | { readonly result: T; readonly buffer: Buffer }
  | { readonly timeout: true; readonly buffer: Buffer }
  | { readonly closed: true; readonly buffer: Buffer; readonly error?: Error }
  | { readonly overflow: true; readonly buffer: Buffer };

const EMPTY = Buffer.alloc(0);

/**
 * Reads from `socket` until `decide` (called with all bytes so far, after every chunk) returns
 * something other than 'need-more', the deadline passes, `maxBytes` are buffered, or the stream
 * ends. `decide` must be pure and cheap; if it throws, the bytes are put back and the promise
 * rejects with its error. The socket must be in binary mode (no `setEncoding`).
 */
export function readPrefix<T>(socket: Socket, decide: (buf: Buffer) => T | 'need-more', options: PrefixReadOptions): Promise<PrefixRead<T>> {
  const { timeoutMs, maxBytes } = options;
  // setTimeout turns delays past 2^31 - 1 ms into 1 ms.
  if (!(timeoutMs > 0 && timeoutMs <= 0x7fff_ffff)) return Promise.reject(new RangeError(`readPrefix: bad timeoutMs ${timeoutMs}`));
  if (!Number.isInteger(maxBytes) || maxBytes < 1) return Promise.reject(new RangeError(`readPrefix: bad maxBytes ${maxBytes}`));
  if (socket.readableEncoding !== null) return Promise.reject(new TypeError('readPrefix: the socket has an encoding set'));
  if (socket.destroyed || socket.readableEnded) return Promise.resolve({ closed: true, buffer: EMPTY });

  return new Promise<PrefixRead<T>>((resolve, reject) => {
    let acc: Buffer = EMPTY;
    let length = 0;
    let owned = false; // whether `acc` is our own growable buffer (else the first chunk as received)
    let done = false;

    const bytes = (): Buffer => (length === acc.length ? acc : acc.subarray(0, length));
    const detach = (): void => {
      done = true;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('error', onError);
      socket.off('close', onClose);
    };
    /** Stops reading and puts the bytes back at the front of the socket's readable buffer. */
    const handBack = (): Buffer => {
      detach();
      socket.pause();
      const b = bytes();
      if (b.length > 0) socket.unshift(b);
      return b;
    };
    const append = (chunk: Buffer): void => {
      if (length === 0) {
        acc = chunk;
        length = chunk.length;
        return;
      }
      const need = length + chunk.length;
      if (!owned || acc.length < need) {
        const grown = Buffer.allocUnsafe(Math.max(need, Math.min(2 * length, maxBytes)));
        acc.copy(grown, 0, 0, length);
        acc = grown;
        owned = true;
      }
      chunk.copy(acc, length);
      length = need;
    };

    function onData(chunk: Buffer): void {
      if (done) return;
      append(chunk);
      let decision: T | 'need-more';
      try {
        decision = decide(bytes());
      } catch (err) {
        handBack();
        reject(err instanceof Error ? err : new Error(String(err)));
        return;
      }
      if (decision !== 'need-more') resolve({ result: decision, buffer: handBack() });
      else if (length >= maxBytes) resolve({ overflow: true, buffer: handBack() });
    }
    function onEnd(): void {
      detach();
      resolve({ closed: true, buffer: bytes() });
    }
    function onError(error: Error): void {
      detach();
      resolve({ closed: true, buffer: bytes(), error });
    }
    function onClose(): void {
      detach();
      resolve({ closed: true, buffer: bytes() });
    }
    function onTimeout(): void {
      if (!done) resolve({ timeout: true, buffer: handBack() });
    }

    const timer = setTimeout(onTimeout, timeoutMs);
    socket.on('data', onData);
    socket.on('end', onEnd);
    socket.on('error', onError);
    socket.on('close', onClose);
    socket.resume();
  });
}
