/**
 * Request metrics of a redirected HTTP/2 connection (transparent mode), which the outbound proxy
 * carries as a tunnel to one endpoint — the HTTP/2 counterpart of outbound/http1-tap: the bytes
 * are piped as they are, and this reads a copy of each direction's frames to count each stream as
 * upstream's outbound counts a request (`request_total` at its HEADERS; at its end
 * `response_total` with the `:status`, a gRPC request's `grpc-status` from the headers or the
 * trailers, and `response_latency_ms`), on the endpoint's series.
 *
 * - Every header block is decoded in order, each direction with its own HPACK table, so the
 *   tables stay in step with the peers'; DATA payloads are skipped without being held, and header
 *   blocks are held only until their END_HEADERS (at most {@link MAX_HEADER_BLOCK_BYTES}).
 * - A stream ends at the server's END_STREAM (on HEADERS or DATA), or fails with a reset by
 *   either side (`h2(<REASON>)`, upstream's spelling). A 1xx is not the response.
 * - It stops reading at what it cannot follow (a frame that does not parse, a header block that
 *   does not decode or is too large): the bytes still flow, and streams in flight are reported as
 *   failed (`"unclassified"`; `"connection closed"` when the connection ends under them).
 */
import type { Socket } from 'node:net';
import { HpackDecoder } from '../../http/index.js';
import { grpcStatusValue, type HttpExchange, h2Error, isGrpcContentType } from '../metrics/http.js';
import { headerValue } from '../relay/http-relay.js';

/** The client connection preface (RFC 9113 §3.4), skipped. */
const PREFACE_BYTES = 24;
/** A header block (with its CONTINUATION frames) held beyond this: the tap stops. */
const MAX_HEADER_BLOCK_BYTES = 256 * 1024;
/** Dynamic table bound of the tap's decoders: above what peers announce in practice (4 KiB by default). */
const TABLE_LIMIT = 64 * 1024;
const MAX_LIST_SIZE = 1024 * 1024;

const DATA = 0x0;
const HEADERS = 0x1;
const RST_STREAM = 0x3;
const PUSH_PROMISE = 0x5;
const CONTINUATION = 0x9;
const END_STREAM = 0x1;
const END_HEADERS = 0x4;
const PADDED = 0x8;
const PRIORITY = 0x20;

interface Stream {
  readonly ex: HttpExchange;
  responded: boolean;
}

/** One direction's frames, as they arrive in arbitrary pieces. */
class FrameReader {
  /** Bytes of the preface still to skip. */
  #preface: number;
  /** The start of a frame that did not arrive whole (header and kept payload). */
  #partial: Buffer | undefined;
  /** Payload bytes of a DATA frame still to skip (not held). */
  #skip = 0;
  readonly #onFrame: (type: number, flags: number, stream: number, payload: Buffer) => boolean;

  constructor(preface: number, onFrame: (type: number, flags: number, stream: number, payload: Buffer) => boolean) {
    this.#preface = preface;
    this.#onFrame = onFrame;
  }

  /** Reads `chunk`; false once the stream of frames cannot be followed. */
  push(chunk: Buffer): boolean {
    let buf = chunk;
    let pos = 0;
    if (this.#preface > 0) {
      const n = Math.min(this.#preface, buf.length);
      this.#preface -= n;
      pos = n;
    }
    if (this.#skip > 0) {
      const n = Math.min(this.#skip, buf.length - pos);
      this.#skip -= n;
      pos += n;
    }
    if (this.#partial !== undefined) {
      buf = Buffer.concat([this.#partial, buf.subarray(pos)]);
      pos = 0;
      this.#partial = undefined;
    }
    while (buf.length - pos >= 9) {
      const length = buf.readUIntBE(pos, 3);
      const type = buf[pos + 3] as number;
      const flags = buf[pos + 4] as number;
      const stream = buf.readUInt32BE(pos + 5) & 0x7fff_ffff;
      if (type === DATA) {
        // Only its END_STREAM matters: the payload is skipped, never held.
        if (!this.#onFrame(type, flags, stream, EMPTY)) return false;
        const have = Math.min(length, buf.length - pos - 9);
        this.#skip = length - have;
        pos += 9 + have;
        continue;
      }
      if (length > MAX_HEADER_BLOCK_BYTES) return false;
      if (buf.length - pos - 9 < length) break;
      if (!this.#onFrame(type, flags, stream, buf.subarray(pos + 9, pos + 9 + length))) return false;
      pos += 9 + length;
    }
    if (pos < buf.length) this.#partial = Buffer.from(buf.subarray(pos));
    return true;
  }
}

const EMPTY = Buffer.alloc(0);

/** The fragment of a HEADERS or PUSH_PROMISE payload without padding and priority; undefined when malformed. */
function fragmentOf(type: number, flags: number, payload: Buffer): Buffer | undefined {
  let start = 0;
  let end = payload.length;
  if ((flags & PADDED) !== 0) {
    if (payload.length < 1) return undefined;
    end -= payload[0] as number;
    start = 1;
  }
  if (type === HEADERS && (flags & PRIORITY) !== 0) start += 5;
  if (type === PUSH_PROMISE) start += 4;
  return start <= end ? payload.subarray(start, end) : undefined;
}

/** One direction's header blocks, decoded in order (HEADERS, PUSH_PROMISE and their CONTINUATION frames). */
class BlockReader {
  readonly #decoder = new HpackDecoder(TABLE_LIMIT);
  #pieces: Buffer[] | undefined;
  #bytes = 0;
  #type = 0;
  #flags = 0;
  #stream = 0;

  /** A frame; `onBlock` gets each complete header block. False: malformed, or a block that does not decode. */
  frame(
    type: number,
    flags: number,
    stream: number,
    payload: Buffer,
    onBlock: (type: number, flags: number, stream: number, pairs: string[]) => void,
  ): boolean {
    if (type === CONTINUATION) {
      if (this.#pieces === undefined || stream !== this.#stream) return false;
      this.#pieces.push(Buffer.from(payload));
      this.#bytes += payload.length;
      if (this.#bytes > MAX_HEADER_BLOCK_BYTES) return false;
      if ((flags & END_HEADERS) === 0) return true;
      const block = Buffer.concat(this.#pieces);
      this.#pieces = undefined;
      return this.#decode(block, onBlock);
    }
    if (type !== HEADERS && type !== PUSH_PROMISE) return this.#pieces === undefined;
    if (this.#pieces !== undefined) return false;
    const fragment = fragmentOf(type, flags, payload);
    if (fragment === undefined) return false;
    this.#type = type;
    this.#flags = flags;
    this.#stream = stream;
    if ((flags & END_HEADERS) !== 0) return this.#decode(fragment, onBlock);
    this.#pieces = [Buffer.from(fragment)];
    this.#bytes = fragment.length;
    return true;
  }

  #decode(block: Buffer, onBlock: (type: number, flags: number, stream: number, pairs: string[]) => void): boolean {
    const decoded = this.#decoder.decode(block, MAX_LIST_SIZE);
    if (typeof decoded === 'string') return false;
    onBlock(this.#type, this.#flags, this.#stream, decoded.pairs);
    return true;
  }
}

/**
 * Counts the HTTP/2 streams of `client` ↔ `upstream` (piped elsewhere; the client's bytes start
 * with the connection preface); `start` makes the exchange of a stream whose request HEADERS just
 * went by (counted on its endpoint from now on).
 */
export function tapHttp2(client: Socket, upstream: Socket, start: () => HttpExchange): void {
  const streams = new Map<number, Stream>();
  const requestBlocks = new BlockReader();
  const responseBlocks = new BlockReader();
  let stopped = false;

  const finish = (id: number, error?: string): void => {
    const s = streams.get(id);
    if (s === undefined) return;
    streams.delete(id);
    if (error !== undefined) s.ex.fail(error);
    s.ex.end();
  };

  const stop = (error: string): void => {
    if (stopped) return;
    stopped = true;
    client.off('data', onRequestData);
    upstream.off('data', onResponseData);
    for (const id of [...streams.keys()]) finish(id, error);
  };

  const onRequestBlock = (type: number, _flags: number, id: number, pairs: string[]): void => {
    // A second block on a stream is its trailers.
    if (type !== HEADERS || streams.has(id)) return;
    const ex = start();
    ex.isGrpc = isGrpcContentType(headerValue(pairs, 'content-type'));
    streams.set(id, { ex, responded: false });
  };

  const onResponseBlock = (type: number, flags: number, id: number, pairs: string[]): void => {
    const s = streams.get(id);
    if (type !== HEADERS || s === undefined) return;
    const grpcStatus = grpcStatusValue(headerValue(pairs, 'grpc-status'));
    if (!s.responded) {
      const status = Number(headerValue(pairs, ':status'));
      if (status < 200) return;
      s.responded = true;
      s.ex.head(status, grpcStatus);
    } else s.ex.trailers(grpcStatus);
    if ((flags & END_STREAM) !== 0) finish(id);
  };

  const requests = new FrameReader(PREFACE_BYTES, (type, flags, id, payload) => {
    if (type === RST_STREAM) {
      if (payload.length === 4) finish(id, h2Error(payload.readUInt32BE(0)));
      return true;
    }
    return requestBlocks.frame(type, flags, id, payload, onRequestBlock);
  });

  const responses = new FrameReader(0, (type, flags, id, payload) => {
    if (type === DATA) {
      if ((flags & END_STREAM) !== 0 && streams.get(id)?.responded === true) finish(id);
      return true;
    }
    if (type === RST_STREAM) {
      if (payload.length === 4) finish(id, h2Error(payload.readUInt32BE(0)));
      return true;
    }
    return responseBlocks.frame(type, flags, id, payload, onResponseBlock);
  });

  function onRequestData(chunk: Buffer): void {
    if (!requests.push(chunk)) stop('unclassified');
  }

  function onResponseData(chunk: Buffer): void {
    if (!responses.push(chunk)) stop('unclassified');
  }

  client.on('data', onRequestData);
  upstream.on('data', onResponseData);
  const closed = (): void => stop('connection closed');
  client.once('close', closed);
  upstream.once('close', closed);
}
