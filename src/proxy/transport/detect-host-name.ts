/**
 * DNS host-name syntax shared by the byte-level detectors: the SNI of a ClientHello and the
 * `name` of a transport header are both checked with these rules before they become strings.
 *
 * Accepted: 1-253 ASCII bytes, dot-separated labels of 1-63 letters, digits, `-` or `_` (no
 * label starts or ends with `-`), no empty label (so no leading, doubled or trailing dot), and a
 * last label that is not all digits (so an IPv4 literal is not a host name, as RFC 6066 requires
 * for SNI). Letter case is preserved; DNS names compare case-insensitively.
 */

/** Longest host name in bytes (RFC 1035 presentation form without the trailing dot). */
export const MAX_HOST_NAME_BYTES = 253;

const DOT = 0x2e;
const HYPHEN = 0x2d;

/** Whether `bytes[start, end)` is a host name under the rules above. Never reads outside the range. */
export function isHostNameBytes(bytes: Uint8Array, start: number, end: number): boolean {
  const length = end - start;
  if (length < 1 || length > MAX_HOST_NAME_BYTES || start < 0 || end > bytes.length) return false;
  let labelLength = 0;
  let labelAllDigits = true;
  let prev = DOT;
  for (let i = start; i < end; i++) {
    const c = bytes[i]!;
    if (c === DOT) {
      if (labelLength === 0 || prev === HYPHEN) return false;
      labelLength = 0;
      labelAllDigits = true;
    } else {
      const isDigit = c >= 0x30 && c <= 0x39;
      const isLetter = (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a);
      if (!isDigit && !isLetter && c !== HYPHEN && c !== 0x5f) return false;
      if (c === HYPHEN && labelLength === 0) return false;
      if (++labelLength > 63) return false;
      if (!isDigit) labelAllDigits = false;
    }
    prev = c;
  }
  return labelLength > 0 && prev !== HYPHEN && !labelAllDigits;
}

/** Whether `name` is a host name under the rules above (any non-ASCII character fails). */
export function isHostName(name: string): boolean {
  if (name.length < 1 || name.length > MAX_HOST_NAME_BYTES) return false;
  const bytes = Buffer.from(name, 'utf8');
  return isHostNameBytes(bytes, 0, bytes.length);
}
