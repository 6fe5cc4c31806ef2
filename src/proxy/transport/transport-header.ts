/**
 * The transport header of direct connections (POLICY-SEMANTICS §4.2): after mTLS with ALPN
 * `transport.l5d.io/v1` the client writes the preface `transport.l5d.io/v1\r\n\r\n`, a 4-byte
 * big-endian message length and a protobuf `transport.l5d.io.Header` (see transport-header.proto
 * beside this file):
 *
 * ```proto
 * message Header { int32 port = 1; string name = 2; SessionProtocol session_protocol = 3; }
 * message SessionProtocol { oneof kind { Http1 http1 = 1; Http2 http2 = 2; } message Http1 {} message Http2 {} }
 * ```
 *
 * The codec is hand-rolled for this one message (no schema library on the hot path) and follows
 * proto3 wire rules: fields in any order, the last occurrence of a scalar wins, embedded messages
 * merge, unknown fields of every wire type (groups included) are skipped. It is strict where the
 * proxy must be: varints longer than 10 bytes or 64 bits, truncated fields, wrong wire types for
 * known fields, field number 0, lengths over the cap, ports outside 1-65535, names that are not
 * UTF-8 (any occurrence, as protobuf's own decoders hold) and a final name that is not a DNS host
 * name are all `invalid`. Decoding never throws.
 */
import { isUtf8 } from 'node:buffer';
import { isHostName, isHostNameBytes } from './detect-host-name.js';

/** The preface that starts every transport header. */
export const TRANSPORT_HEADER_PREFACE = 'transport.l5d.io/v1\r\n\r\n';

/** Default cap on the protobuf message length; longer headers are `invalid` before any buffering. */
export const TRANSPORT_HEADER_MAX_MESSAGE_BYTES = 64 * 1024;

/** The session protocol a transport header announces; absent means an opaque TCP stream. */
export type SessionProtocol = 'http1' | 'http2';

/** A decoded transport header. */
export interface TransportHeader {
  /** Target port on the local pod (gateway mode: the target port of `name`), 1-65535. */
  readonly port: number;
  /** Gateway target host name; absent (or empty when encoding) means local forwarding. */
  readonly name?: string;
  /** Set when the stream is HTTP; it then goes straight into the inbound HTTP stack. */
  readonly sessionProtocol?: SessionProtocol;
}

/** Result of {@link decodeTransportHeader}. `consumed` counts preface, length and message. */
export type TransportHeaderDecode =
  | { readonly kind: 'need-more' }
  | { readonly kind: 'header'; readonly header: TransportHeader; readonly consumed: number }
  | { readonly kind: 'invalid'; readonly reason: string };

const PREFACE = Buffer.from(TRANSPORT_HEADER_PREFACE, 'latin1');
const PREFIX_BYTES = PREFACE.length + 4;

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_LEN = 2;
const WIRE_START_GROUP = 3;
const WIRE_END_GROUP = 4;
const WIRE_FIXED32 = 5;
const MAX_GROUP_DEPTH = 32;

const TAG_PORT = (1 << 3) | WIRE_VARINT;
const TAG_NAME = (2 << 3) | WIRE_LEN;
const TAG_SESSION_PROTOCOL = (3 << 3) | WIRE_LEN;
const TAG_HTTP1 = (1 << 3) | WIRE_LEN;
const TAG_HTTP2 = (2 << 3) | WIRE_LEN;

const NEED_MORE: TransportHeaderDecode = Object.freeze({ kind: 'need-more' });

function invalid(reason: string): TransportHeaderDecode {
  return { kind: 'invalid', reason };
}

// ---------------------------------------------------------------------------------------------
// Encoding

function varintLength(n: number): number {
  let length = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    length++;
  }
  return length;
}

function writeVarint(out: Buffer, at: number, n: number): number {
  while (n >= 0x80) {
    out[at++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 128);
  }
  out[at++] = n;
  return at;
}

/**
 * Encodes preface, length and message for `header`. Fields are written in field-number order and
 * an empty `name` is omitted, so the bytes equal those of any conformant proto3 encoder.
 * Throws RangeError for a port outside 1-65535 or a name that is not a DNS host name (a bug in
 * the caller, not bad peer input).
 */
export function encodeTransportHeader(header: TransportHeader): Buffer {
  const { port, name, sessionProtocol } = header;
  if (!Number.isInteger(port) || port < 1 || port > 65_535) throw new RangeError(`transport header port ${port} is not in 1-65535`);
  const hasName = name !== undefined && name !== '';
  if (hasName && !isHostName(name)) throw new RangeError(`transport header name ${JSON.stringify(name)} is not a DNS host name`);
  if (sessionProtocol !== undefined && sessionProtocol !== 'http1' && sessionProtocol !== 'http2') {
    throw new RangeError(`unknown session protocol ${String(sessionProtocol)}`);
  }
  const nameLength = hasName ? name.length : 0; // ASCII: one byte per character
  const messageLength = 1 + varintLength(port) + (hasName ? 1 + varintLength(nameLength) + nameLength : 0) + (sessionProtocol === undefined ? 0 : 4);
  const out = Buffer.allocUnsafe(PREFIX_BYTES + messageLength);
  PREFACE.copy(out, 0);
  out.writeUInt32BE(messageLength, PREFACE.length);
  let at = PREFIX_BYTES;
  out[at++] = TAG_PORT;
  at = writeVarint(out, at, port);
  if (hasName) {
    out[at++] = TAG_NAME;
    at = writeVarint(out, at, nameLength);
    at += out.write(name, at, 'latin1');
  }
  if (sessionProtocol !== undefined) {
    out[at++] = TAG_SESSION_PROTOCOL;
    out[at++] = 2;
    out[at++] = sessionProtocol === 'http1' ? TAG_HTTP1 : TAG_HTTP2;
    out[at++] = 0;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding

// The varint reader returns the position after the varint (or a negative error code) and leaves
// the value in these two module-level words, avoiding an allocation per field.
let varintLo = 0;
let varintHi = 0;
const TRUNCATED = -1;
const OVERLONG = -2;

function readVarint(buf: Uint8Array, p: number, end: number): number {
  let lo = 0;
  let hi = 0;
  for (let i = 0; i < 10; i++) {
    if (p >= end) return TRUNCATED;
    const c = buf[p++]!;
    const bits = c & 0x7f;
    if (i < 4) lo |= bits << (7 * i);
    else if (i === 4) {
      lo |= bits << 28; // only the low 4 bits survive the 32-bit shift
      hi = bits >>> 4;
    } else hi |= bits << (7 * i - 32);
    if (c < 0x80) {
      if (i === 9 && c > 1) return OVERLONG; // more than 64 bits
      varintLo = lo >>> 0;
      varintHi = hi >>> 0;
      return p;
    }
  }
  return OVERLONG;
}

function varintError(code: number, what: string): string {
  return code === TRUNCATED ? `truncated ${what}` : `overlong ${what}`;
}

/** Reads a length prefix at `p`; returns the payload start, or a reason string. */
function readLength(buf: Uint8Array, p: number, end: number, what: string): number | string {
  const q = readVarint(buf, p, end);
  if (q < 0) return varintError(q, `${what} length`);
  if (varintHi !== 0 || varintLo > end - q) return `truncated ${what}`;
  return q;
}

/**
 * Skips one field whose tag (wire type `wire`, field number `field`) ends at `p`. Returns the
 * position after it, or a reason string.
 */
function skipField(buf: Uint8Array, p: number, end: number, wire: number, field: number, depth: number): number | string {
  switch (wire) {
    case WIRE_VARINT: {
      const q = readVarint(buf, p, end);
      return q < 0 ? varintError(q, 'varint field') : q;
    }
    case WIRE_FIXED64:
      return p + 8 <= end ? p + 8 : 'truncated fixed64 field';
    case WIRE_FIXED32:
      return p + 4 <= end ? p + 4 : 'truncated fixed32 field';
    case WIRE_LEN: {
      const q = readLength(buf, p, end, 'length-delimited field');
      return typeof q === 'string' ? q : q + varintLo;
    }
    case WIRE_START_GROUP: {
      if (depth >= MAX_GROUP_DEPTH) return 'groups nested too deeply';
      for (;;) {
        const tag = readTag(buf, p, end);
        if (typeof tag === 'string') return tag === 'end' ? 'unterminated group' : tag;
        p = tagEnd;
        const innerWire = tag & 7;
        if (innerWire === WIRE_END_GROUP) return tag >>> 3 === field ? p : 'mismatched end group';
        const q = skipField(buf, p, end, innerWire, tag >>> 3, depth + 1);
        if (typeof q === 'string') return q;
        p = q;
      }
    }
    default:
      return wire === WIRE_END_GROUP ? 'unexpected end group' : `invalid wire type ${wire}`;
  }
}

let tagEnd = 0;

/** Reads a field tag at `p` (position after it in `tagEnd`); 'end' at the end of input, or a reason. */
function readTag(buf: Uint8Array, p: number, end: number): number | string {
  if (p >= end) return 'end';
  const q = readVarint(buf, p, end);
  if (q < 0) return varintError(q, 'field tag');
  if (varintHi !== 0) return 'field number out of range';
  if (varintLo >>> 3 === 0) return 'field number 0';
  tagEnd = q;
  return varintLo;
}

/**
 * Walks a message of only unknown fields (the empty `Http1`/`Http2`), checking its framing.
 * Returns undefined when well-formed, else a reason.
 */
function checkEmptyMessage(buf: Uint8Array, p: number, end: number): string | undefined {
  for (;;) {
    const tag = readTag(buf, p, end);
    if (tag === 'end') return undefined;
    if (typeof tag === 'string') return tag;
    const q = skipField(buf, tagEnd, end, tag & 7, tag >>> 3, 0);
    if (typeof q === 'string') return q;
    p = q;
  }
}

/** Decodes `SessionProtocol` in `buf[p, end)`, merged over `current` (the oneof's last member wins). */
function decodeSessionProtocol(
  buf: Uint8Array,
  p: number,
  end: number,
  current: SessionProtocol | undefined,
): SessionProtocol | undefined | { reason: string } {
  let kind = current;
  for (;;) {
    const tag = readTag(buf, p, end);
    if (tag === 'end') return kind;
    if (typeof tag === 'string') return { reason: `session_protocol: ${tag}` };
    p = tagEnd;
    const field = tag >>> 3;
    if (field === 1 || field === 2) {
      if ((tag & 7) !== WIRE_LEN) return { reason: `session_protocol: wrong wire type for ${field === 1 ? 'http1' : 'http2'}` };
      const q = readLength(buf, p, end, field === 1 ? 'http1' : 'http2');
      if (typeof q === 'string') return { reason: `session_protocol: ${q}` };
      const bodyEnd = q + varintLo;
      const bad = checkEmptyMessage(buf, q, bodyEnd);
      if (bad !== undefined) return { reason: `session_protocol: ${bad}` };
      kind = field === 1 ? 'http1' : 'http2';
      p = bodyEnd;
    } else {
      const q = skipField(buf, p, end, tag & 7, field, 0);
      if (typeof q === 'string') return { reason: `session_protocol: ${q}` };
      p = q;
    }
  }
}

/** Decodes the `Header` message in `buf[start, end)`. */
function decodeMessage(buf: Uint8Array, start: number, end: number): TransportHeader | string {
  let port = 0;
  let nameStart = 0;
  let nameEnd = 0;
  let sessionProtocol: SessionProtocol | undefined;
  for (let p = start; ; ) {
    const tag = readTag(buf, p, end);
    if (tag === 'end') break;
    if (typeof tag === 'string') return tag;
    p = tagEnd;
    const field = tag >>> 3;
    const wire = tag & 7;
    if (field === 1) {
      if (wire !== WIRE_VARINT) return 'wrong wire type for port';
      const q = readVarint(buf, p, end);
      if (q < 0) return varintError(q, 'port');
      // int32 on the wire: non-negative values have no high bits, negative ones are sign-extended.
      if (varintHi === 0 && varintLo <= 0x7fff_ffff) port = varintLo;
      else if (varintHi === 0xffff_ffff && varintLo >= 0x8000_0000) port = varintLo | 0;
      else return 'port is not an int32';
      p = q;
    } else if (field === 2) {
      if (wire !== WIRE_LEN) return 'wrong wire type for name';
      const q = readLength(buf, p, end, 'name');
      if (typeof q === 'string') return q;
      // A proto3 string must be UTF-8 even when a later occurrence replaces it (protobuf and
      // prost refuse the message); the last one must be a host name, checked below.
      if (nameEnd > nameStart && !isUtf8(buf.subarray(nameStart, nameEnd))) return 'name is not UTF-8';
      nameStart = q;
      nameEnd = q + varintLo;
      p = nameEnd;
    } else if (field === 3) {
      if (wire !== WIRE_LEN) return 'wrong wire type for session_protocol';
      const q = readLength(buf, p, end, 'session_protocol');
      if (typeof q === 'string') return q;
      const bodyEnd = q + varintLo;
      const r = decodeSessionProtocol(buf, q, bodyEnd, sessionProtocol);
      if (typeof r === 'object') return r.reason;
      sessionProtocol = r;
      p = bodyEnd;
    } else {
      const q = skipField(buf, p, end, wire, field, 0);
      if (typeof q === 'string') return q;
      p = q;
    }
  }
  if (port < 1 || port > 65_535) return `port ${port} is not in 1-65535`;
  if (nameEnd > nameStart && !isHostNameBytes(buf, nameStart, nameEnd)) return 'name is not a DNS host name';
  const name =
    nameEnd > nameStart
      ? (Buffer.isBuffer(buf) ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength)).toString('latin1', nameStart, nameEnd)
      : undefined;
  if (name === undefined) return sessionProtocol === undefined ? { port } : { port, sessionProtocol };
  return sessionProtocol === undefined ? { port, name } : { port, name, sessionProtocol };
}

/**
 * Decodes a transport header at the start of `buf` (every byte received so far). `need-more`
 * until preface, length and message are all present; `invalid` as soon as the bytes present rule
 * a header out (wrong preface, length over `maxMessageBytes`, bad message). On success the
 * stream continues at `buf[consumed]`.
 */
export function decodeTransportHeader(buf: Uint8Array, maxMessageBytes: number = TRANSPORT_HEADER_MAX_MESSAGE_BYTES): TransportHeaderDecode {
  const n = buf.length;
  const prefaceBytes = Math.min(n, PREFACE.length);
  for (let i = 0; i < prefaceBytes; i++) if (buf[i] !== PREFACE[i]) return invalid('missing transport header preface');
  if (n < PREFIX_BYTES) return NEED_MORE;
  const at = PREFACE.length;
  // Unsigned: `<<` would turn a length of 2^31 or more negative.
  const messageLength = buf[at]! * 0x100_0000 + ((buf[at + 1]! << 16) | (buf[at + 2]! << 8) | buf[at + 3]!);
  if (messageLength > maxMessageBytes) return invalid(`header length ${messageLength} exceeds ${maxMessageBytes} bytes`);
  const end = PREFIX_BYTES + messageLength;
  if (n < end) return NEED_MORE;
  const r = decodeMessage(buf, PREFIX_BYTES, end);
  return typeof r === 'string' ? invalid(r) : { kind: 'header', header: r, consumed: end };
}
