/**
 * HTTP detection over the first bytes of a plaintext (or mesh-TLS-terminated) stream
 * (POLICY-SEMANTICS §4.4, protocol `detect`): HTTP/2 prior knowledge, an HTTP/1 request line, or
 * neither. Pure, allocation-free and prefix-stable: once a prefix is decided, every longer input
 * with that prefix gets the same answer, and `not-http` is given as soon as the bytes present
 * rule HTTP out (a TLS record is rejected on its first byte).
 *
 * Conservative on purpose: only what the proxy's HTTP stack (node:http, node:http2) will parse is
 * HTTP; everything else is `not-http` and is forwarded opaquely under connection-level policy,
 * which is the policy §4.4 applies to all non-HTTP traffic. An HTTP/1 request line is
 * `method SP request-target SP HTTP/1.0|HTTP/1.1 CRLF` where
 * - the method is one node:http accepts (`http.METHODS`, case-sensitive, so `get` is not-http),
 * - the request-target is 1+ visible ASCII bytes (0x21-0x7e; no raw UTF-8, no controls),
 * - the separators are single spaces and the line ends in CRLF (a bare LF is not-http),
 * - the whole line including CRLF fits in `maxLineBytes` (default 8 KiB); a longer or never-ending
 *   line is not-http once that many bytes are buffered.
 */
import { METHODS } from 'node:http';

/** Result of {@link detectHttp}. */
export type HttpDetection = 'need-more' | 'http1' | 'http2' | 'not-http';

/** Default bound on an HTTP/1 request line, CRLF included. */
export const HTTP1_MAX_REQUEST_LINE_BYTES = 8192;

/** The HTTP/2 client connection preface (RFC 9113 §3.4), 24 bytes. */
export const HTTP2_PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n';

const H2_PREFACE = Buffer.from(HTTP2_PREFACE, 'latin1');
const VERSION_PREFIX = Buffer.from('HTTP/1.', 'latin1');
const SP = 0x20;
const CR = 0x0d;
const LF = 0x0a;
const HYPHEN = 0x2d;

/** Methods node:http parses, as bytes, indexed by first byte. */
const METHODS_BY_FIRST_BYTE = new Map<number, Buffer[]>();
let maxMethodBytes = 0;
for (const m of METHODS) {
  const bytes = Buffer.from(m, 'latin1');
  const list = METHODS_BY_FIRST_BYTE.get(bytes[0]!) ?? [];
  list.push(bytes);
  METHODS_BY_FIRST_BYTE.set(bytes[0]!, list);
  maxMethodBytes = Math.max(maxMethodBytes, bytes.length);
}

function isKnownMethod(buf: Uint8Array, length: number): boolean {
  const candidates = METHODS_BY_FIRST_BYTE.get(buf[0]!);
  if (candidates === undefined) return false;
  outer: for (const m of candidates) {
    if (m.length !== length) continue;
    for (let i = 1; i < length; i++) if (buf[i] !== m[i]) continue outer;
    return true;
  }
  return false;
}

/**
 * Classifies the stream whose first bytes are `buf` (every byte received so far). Call again
 * with the longer buffer after `need-more`.
 */
export function detectHttp(buf: Uint8Array, maxLineBytes: number = HTTP1_MAX_REQUEST_LINE_BYTES): HttpDetection {
  const n = buf.length;
  if (n === 0) return 'need-more';

  // HTTP/2 prior knowledge: the exact preface. A divergent prefix may still be POST, PUT, ...
  let i = 0;
  const h2Bytes = Math.min(n, H2_PREFACE.length);
  while (i < h2Bytes && buf[i] === H2_PREFACE[i]) i++;
  if (i === H2_PREFACE.length) return 'http2';
  if (i === n) return 'need-more';

  // HTTP/1 request line, scanned only up to the line bound.
  const limit = Math.min(n, maxLineBytes);
  const needMore = limit === maxLineBytes ? 'not-http' : 'need-more';
  let p = 0;
  while (p < limit) {
    const c = buf[p]!;
    if ((c < 0x41 || c > 0x5a) && c !== HYPHEN) break;
    if (++p > maxMethodBytes) return 'not-http';
  }
  if (p === limit) return needMore;
  if (buf[p] !== SP || p === 0 || !isKnownMethod(buf, p)) return 'not-http';
  p++;

  const targetStart = p;
  while (p < limit) {
    const c = buf[p]!;
    if (c < 0x21 || c > 0x7e) break;
    p++;
  }
  if (p === limit) return needMore;
  if (buf[p] !== SP || p === targetStart) return 'not-http';
  p++;

  for (let k = 0; k < VERSION_PREFIX.length; k++, p++) {
    if (p === limit) return needMore;
    if (buf[p] !== VERSION_PREFIX[k]) return 'not-http';
  }
  if (p === limit) return needMore;
  const minor = buf[p++];
  if (minor !== 0x30 && minor !== 0x31) return 'not-http';
  if (p === limit) return needMore;
  if (buf[p++] !== CR) return 'not-http';
  if (p === limit) return needMore;
  return buf[p] === LF ? 'http1' : 'not-http';
}
