/**
 * gRPC over HTTP/2 byte formats used by the client (PROTOCOL-HTTP2.md): length-prefixed
 * messages, the `grpc-timeout` header and the percent-encoded `grpc-message` header.
 */
import { GrpcError } from './grpc-error.js';

/** Largest message accepted from a server (grpc-js's default receive limit). */
export const DEFAULT_MAX_RECEIVE_BYTES = 4 * 1024 * 1024;

/** One message as sent: flag 0 (uncompressed), 4-byte big-endian length, the bytes. */
export function frameMessage(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

/**
 * Splits a response body into messages, whatever the DATA chunk boundaries: a message may span
 * many chunks and a chunk may hold many messages. Chunks are copied only when a message spans
 * several of them.
 */
export class MessageReader {
  readonly #maxBytes: number;
  readonly #chunks: Buffer[] = [];
  #buffered = 0;
  /** The length of the message being read, or -1 while reading a prefix. */
  #length = -1;

  constructor(maxBytes = DEFAULT_MAX_RECEIVE_BYTES) {
    this.#maxBytes = maxBytes;
  }

  /** True when the bytes received so far end inside a message (the stream may not end here). */
  get isPartial(): boolean {
    return this.#buffered > 0 || this.#length >= 0;
  }

  /**
   * Adds a chunk and hands every complete message to `onMessage`, in order, until it returns
   * false. Returns the error that makes the rest of the stream unreadable: a compressed message
   * (INTERNAL: we never offer compression) or one over the limit (RESOURCE_EXHAUSTED).
   */
  push(chunk: Buffer, onMessage: (bytes: Buffer) => boolean): GrpcError | undefined {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    for (;;) {
      if (this.#length < 0) {
        if (this.#buffered < 5) return undefined;
        const prefix = this.#take(5);
        const flag = prefix[0];
        const length = prefix.readUInt32BE(1);
        if (flag === 1) return new GrpcError('INTERNAL', 'received a compressed message, but no compression was negotiated');
        if (flag !== 0) return new GrpcError('INTERNAL', `invalid message flag ${flag}`);
        if (length > this.#maxBytes)
          return new GrpcError('RESOURCE_EXHAUSTED', `received a message larger than the limit (${length} vs. ${this.#maxBytes} bytes)`);
        this.#length = length;
      }
      if (this.#buffered < this.#length) return undefined;
      const bytes = this.#take(this.#length);
      this.#length = -1;
      if (!onMessage(bytes)) return undefined;
    }
  }

  #take(n: number): Buffer {
    this.#buffered -= n;
    const first = this.#chunks[0];
    if (first === undefined || n === 0) return Buffer.alloc(0);
    if (first.length >= n) {
      if (first.length === n) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let offset = 0;
    while (offset < n) {
      const c = this.#chunks[0] as Buffer;
      const k = Math.min(c.length, n - offset);
      c.copy(out, offset, 0, k);
      if (k === c.length) this.#chunks.shift();
      else this.#chunks[0] = c.subarray(k);
      offset += k;
    }
    return out;
  }
}

/** The `grpc-timeout` value for a deadline `ms` from now (at most 8 digits, so coarser units for long ones). */
export function grpcTimeout(ms: number): string {
  const m = Math.max(1, Math.ceil(ms));
  if (m < 1e8) return `${m}m`;
  const s = Math.ceil(m / 1000);
  if (s < 1e8) return `${s}S`;
  return `${Math.min(Math.ceil(s / 3600), 99_999_999)}H`;
}

const isHex = (b: number | undefined): boolean => b !== undefined && ((b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66));

/**
 * Decodes a `grpc-message` value: percent-encoded UTF-8. Like the spec asks, a malformed
 * sequence is kept as it is rather than failing the call. Node hands header values over as
 * latin1, so raw non-ASCII bytes survive too.
 */
export function decodeGrpcMessage(value: string): string {
  if (!/[%\u0080-\u00ff]/.test(value)) return value;
  const raw = Buffer.from(value, 'latin1');
  const out = Buffer.allocUnsafe(raw.length);
  let n = 0;
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i] as number;
    if (b === 0x25 && isHex(raw[i + 1]) && isHex(raw[i + 2])) {
      out[n++] = Number.parseInt(raw.toString('latin1', i + 1, i + 3), 16);
      i += 2;
    } else {
      out[n++] = b;
    }
  }
  return out.toString('utf8', 0, n);
}
