/**
 * TLS ClientHello sniffing over the first bytes of a connection (POLICY-SEMANTICS §4.3): is this
 * TLS at all, and if so which server name (SNI) and application protocols (ALPN) does the client
 * ask for. Pure and allocation-light: it re-reads the prefix on every call (no state between
 * reads), copies bytes only when the ClientHello is fragmented over several records, and never
 * throws, whatever the input.
 *
 * Outcomes are prefix-stable: once a prefix yields anything but `need-more`, every longer input
 * starting with that prefix yields the same result, and any input of at least
 * {@link CLIENT_HELLO_MAX_PREFIX_BYTES} bytes yields a decision.
 *
 * - `not-tls`: the first bytes are not a TLS handshake record header (`16 03 xx`: any minor
 *   version, as OpenSSL takes it for a ClientHello's records). SSLv2-style hellos (first byte
 *   with the high bit set) land here.
 * - `malformed`: the bytes start like TLS but break the record layer, the handshake framing or the
 *   ClientHello structure, exceed the size bounds, or carry an SNI that is not a DNS host name.
 * - `hello`: a complete, structurally valid ClientHello. Bytes after it are not examined.
 */
import { isHostNameBytes } from './detect-host-name.js';

/** Largest ClientHello handshake message accepted, in bytes including its 4-byte header. */
export const MAX_CLIENT_HELLO_BYTES = 16_384;

/**
 * Most TLS records a ClientHello may be spread over. Clients send their first flight in records
 * of up to 2^14 bytes (no record size limit is negotiated yet), so real hellos use one record, or
 * two when larger than 16 KiB; the bound keeps deliberately fragmented hellos cheap to re-scan.
 */
export const MAX_CLIENT_HELLO_RECORDS = 32;

const RECORD_HEADER_BYTES = 5;

/**
 * Bytes after which {@link sniffClientHello} never answers `need-more`: the largest hello plus a
 * record header per allowed record. A prefix reader sniffing TLS needs no larger buffer.
 */
export const CLIENT_HELLO_MAX_PREFIX_BYTES = MAX_CLIENT_HELLO_BYTES + MAX_CLIENT_HELLO_RECORDS * RECORD_HEADER_BYTES;

/** A complete ClientHello: the host name it asks for (if any) and its ALPN protocols in order. */
export interface ClientHello {
  readonly kind: 'hello';
  /** The `host_name` of the server_name extension, as sent (ASCII, case preserved). */
  readonly sni?: string;
  /** ALPN protocol names decoded byte-for-byte (latin1), so GREASE values survive unchanged. */
  readonly alpn: readonly string[];
}

/** Result of {@link sniffClientHello}. */
export type ClientHelloSniff =
  | { readonly kind: 'need-more' }
  | { readonly kind: 'not-tls' }
  | ClientHello
  | { readonly kind: 'malformed'; readonly reason: string };

const CONTENT_TYPE_HANDSHAKE = 0x16;
const HANDSHAKE_CLIENT_HELLO = 0x01;
const MAX_RECORD_FRAGMENT_BYTES = 16_384;
const EXTENSION_SERVER_NAME = 0x0000;
const EXTENSION_ALPN = 0x0010;
const NAME_TYPE_HOST_NAME = 0x00;

/** ALPN names the mesh sees on every connection, returned without decoding a new string. */
const COMMON_ALPN: readonly (readonly [Buffer, string])[] = ['h2', 'http/1.1', 'transport.l5d.io/v1'].map(
  (name) => [Buffer.from(name, 'latin1'), name] as const,
);

const NEED_MORE: ClientHelloSniff = Object.freeze({ kind: 'need-more' });
const NOT_TLS: ClientHelloSniff = Object.freeze({ kind: 'not-tls' });
const NO_ALPN: readonly string[] = Object.freeze([]);

type Malformed = { readonly kind: 'malformed'; readonly reason: string };

function malformed(reason: string): Malformed {
  return { kind: 'malformed', reason };
}

/**
 * Whether a record header starts at `at` as far as its bytes are present (type and major
 * version). The minor version is not looked at: RFC 8446 §5.1 says it must not be, and OpenSSL
 * reads a hello in records of any 3.x (a stricter check let such a hello pass as not TLS).
 */
function recordPrefixIsHandshake(buf: Uint8Array, at: number): boolean {
  const n = buf.length;
  if (at < n && buf[at] !== CONTENT_TYPE_HANDSHAKE) return false;
  return !(at + 1 < n && buf[at + 1] !== 0x03);
}

/**
 * Sniffs a TLS ClientHello at the start of `buf`, which holds every byte received so far.
 * Call again with the longer buffer after `need-more`.
 */
export function sniffClientHello(buf: Uint8Array): ClientHelloSniff {
  const n = buf.length;
  if (n === 0) return NEED_MORE;
  if (!recordPrefixIsHandshake(buf, 0)) return NOT_TLS;

  let at = 0; // start of the current record header
  let records = 0;
  let fragmentBytes = 0; // handshake bytes in the records before `at`
  let headerBytes = 0; // how many of the 4 handshake header bytes have been read
  let bodyLength = 0;
  for (;;) {
    if (records === MAX_CLIENT_HELLO_RECORDS) return malformed(`ClientHello spans more than ${MAX_CLIENT_HELLO_RECORDS} records`);
    if (records > 0 && !recordPrefixIsHandshake(buf, at)) return malformed('ClientHello interleaved with a non-handshake record');
    if (at + RECORD_HEADER_BYTES > n) return NEED_MORE;
    const fragmentLength = (buf[at + 3]! << 8) | buf[at + 4]!;
    if (fragmentLength === 0) return malformed('empty handshake record');
    if (fragmentLength > MAX_RECORD_FRAGMENT_BYTES) return malformed('record longer than 2^14 bytes');
    records++;
    const fragmentStart = at + RECORD_HEADER_BYTES;
    const fragmentEnd = fragmentStart + fragmentLength;

    // The 4-byte handshake header (type, 24-bit length) may itself be split over records.
    for (let i = fragmentStart; headerBytes < 4 && i < fragmentEnd && i < n; i++, headerBytes++) {
      const c = buf[i]!;
      if (headerBytes === 0) {
        if (c !== HANDSHAKE_CLIENT_HELLO) return malformed('first handshake message is not a ClientHello');
      } else {
        bodyLength = (bodyLength << 8) | c;
      }
    }
    if (headerBytes === 4) {
      const messageLength = 4 + bodyLength;
      if (messageLength > MAX_CLIENT_HELLO_BYTES) return malformed(`ClientHello longer than ${MAX_CLIENT_HELLO_BYTES} bytes`);
      const missing = messageLength - fragmentBytes;
      if (missing <= fragmentLength) {
        if (fragmentStart + missing > n) return NEED_MORE;
        if (records === 1) return parseClientHello(buf, fragmentStart + 4, fragmentStart + messageLength);
        return parseClientHello(reassemble(buf, messageLength), 4, messageLength);
      }
    }
    if (fragmentEnd > n) return NEED_MORE;
    fragmentBytes += fragmentLength;
    at = fragmentEnd;
  }
}

/** Copies the first `messageLength` handshake bytes out of the (already validated) records. */
function reassemble(buf: Uint8Array, messageLength: number): Buffer {
  const out = Buffer.allocUnsafe(messageLength);
  let filled = 0;
  for (let at = 0; filled < messageLength; ) {
    const fragmentLength = (buf[at + 3]! << 8) | buf[at + 4]!;
    const take = Math.min(fragmentLength, messageLength - filled);
    out.set(buf.subarray(at + RECORD_HEADER_BYTES, at + RECORD_HEADER_BYTES + take), filled);
    filled += take;
    at += RECORD_HEADER_BYTES + fragmentLength;
  }
  return out;
}

/** Parses the ClientHello body `input[start, end)` (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2). */
function parseClientHello(input: Uint8Array, start: number, end: number): ClientHelloSniff {
  // A Buffer view makes the name strings a direct latin1 slice.
  const buf = Buffer.isBuffer(input) ? input : Buffer.from(input.buffer, input.byteOffset, input.byteLength);
  let p = start;
  // legacy_version (2) + random (32) + session id length (1)
  if (end - p < 35) return malformed('ClientHello truncated before the session id');
  // A later version than the server knows asks for its highest (RFC 5246 E.1; OpenSSL takes 4.x).
  if (buf[p]! < 0x03) return malformed('ClientHello legacy_version is below 3.0');
  p += 34;
  const sessionIdLength = buf[p++]!;
  if (sessionIdLength > 32) return malformed('session id longer than 32 bytes');
  p += sessionIdLength;
  if (p + 2 > end) return malformed('ClientHello truncated before the cipher suites');
  const cipherSuitesLength = (buf[p]! << 8) | buf[p + 1]!;
  p += 2;
  if (cipherSuitesLength < 2 || cipherSuitesLength % 2 !== 0) return malformed('bad cipher_suites length');
  p += cipherSuitesLength;
  if (p + 1 > end) return malformed('ClientHello truncated before the compression methods');
  const compressionLength = buf[p++]!;
  if (compressionLength < 1) return malformed('no compression methods');
  p += compressionLength;
  if (p > end) return malformed('ClientHello truncated in the compression methods');
  if (p === end) return { kind: 'hello', alpn: NO_ALPN }; // TLS 1.2 and older may omit extensions
  if (p + 2 > end) return malformed('ClientHello truncated in the extensions length');
  const extensionsLength = (buf[p]! << 8) | buf[p + 1]!;
  p += 2;
  if (p + extensionsLength !== end) return malformed('extensions length does not match the ClientHello length');

  let sni: string | undefined;
  let alpn: readonly string[] | undefined;
  while (p < end) {
    if (p + 4 > end) return malformed('truncated extension header');
    const type = (buf[p]! << 8) | buf[p + 1]!;
    const length = (buf[p + 2]! << 8) | buf[p + 3]!;
    p += 4;
    const dataEnd = p + length;
    if (dataEnd > end) return malformed('extension longer than the ClientHello');
    if (type === EXTENSION_SERVER_NAME) {
      if (sni !== undefined) return malformed('duplicate server_name extension');
      const r = parseServerName(buf, p, dataEnd);
      if (typeof r !== 'string') return r;
      sni = r;
    } else if (type === EXTENSION_ALPN) {
      if (alpn !== undefined) return malformed('duplicate ALPN extension');
      const r = parseAlpn(buf, p, dataEnd);
      if (!Array.isArray(r)) return r;
      alpn = r;
    }
    p = dataEnd;
  }
  return sni === undefined ? { kind: 'hello', alpn: alpn ?? NO_ALPN } : { kind: 'hello', sni, alpn: alpn ?? NO_ALPN };
}

/**
 * RFC 6066 §3 `ServerNameList`: entries of unknown name types are skipped; the host name must be
 * present exactly once and be a DNS host name. Returns the name, or the malformed result.
 */
function parseServerName(buf: Buffer, start: number, end: number): string | Malformed {
  if (end - start < 2) return malformed('server_name extension truncated');
  const listLength = (buf[start]! << 8) | buf[start + 1]!;
  if (listLength === 0 || start + 2 + listLength !== end) return malformed('bad server_name list length');
  let name: string | undefined;
  for (let p = start + 2; p < end; ) {
    if (p + 3 > end) return malformed('truncated server_name entry');
    const nameType = buf[p]!;
    const length = (buf[p + 1]! << 8) | buf[p + 2]!;
    p += 3;
    if (p + length > end) return malformed('server_name entry longer than its list');
    if (nameType === NAME_TYPE_HOST_NAME) {
      if (name !== undefined) return malformed('more than one host_name in server_name');
      if (!isHostNameBytes(buf, p, p + length)) return malformed('SNI host_name is not a DNS host name');
      name = buf.toString('latin1', p, p + length);
    }
    p += length;
  }
  return name ?? malformed('server_name extension without a host_name');
}

function commonAlpn(buf: Buffer, start: number, length: number): string | undefined {
  outer: for (const [bytes, name] of COMMON_ALPN) {
    if (bytes.length !== length) continue;
    for (let i = 0; i < length; i++) if (buf[start + i] !== bytes[i]) continue outer;
    return name;
  }
  return undefined;
}

/** RFC 7301 §3.1 `ProtocolNameList`: a non-empty list of non-empty names. Returns the names, or the malformed result. */
function parseAlpn(buf: Buffer, start: number, end: number): string[] | Malformed {
  if (end - start < 2) return malformed('ALPN extension truncated');
  const listLength = (buf[start]! << 8) | buf[start + 1]!;
  if (listLength < 2 || start + 2 + listLength !== end) return malformed('bad ALPN list length');
  const names: string[] = [];
  for (let p = start + 2; p < end; ) {
    const length = buf[p++]!;
    if (length === 0) return malformed('empty ALPN protocol name');
    if (p + length > end) return malformed('ALPN protocol name longer than its list');
    names.push(commonAlpn(buf, p, length) ?? buf.toString('latin1', p, p + length));
    p += length;
  }
  return names;
}
