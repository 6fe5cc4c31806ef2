/**
 * The request target every route decision is made on (POLICY-SEMANTICS §4.6): the proxy
 * normalizes the path before matching and sends the application the normalized one, so the path
 * that was authorized is the path that is served, whatever the application's own parser does with
 * `..`, `%2e` or `//`. `ward explain` and `ward test` apply the same function, so they say exactly
 * what the proxy does.
 *
 * On the path (the part before `?`):
 * - percent-encoded unreserved characters (RFC 3986 §2.3: letters, digits, `-._~`) are decoded,
 *   other percent-encodings get upper-case hex digits (§6.2.2.1);
 * - runs of `/` are merged into one (as nginx's `merge_slashes` and Python's `normpath` do);
 * - dot-segments are removed (§5.2.4), a decoded `%2e` counting as a dot.
 * Refused (400 by the proxy): a target that is not origin-form (`*` is left to the caller), a
 * fragment (`#`, anywhere), whitespace, a control or non-ASCII character (anywhere), an
 * encoded `/` or `\` (`%2F`, `%5C`) or an encoded control in the path, a raw `\` in the path, and
 * a `%` not followed by two hex digits in the path. The query is kept as it came.
 *
 * Matching stays case-sensitive, as upstream: `/Admin` is not `/admin`.
 *
 * A path that needs nothing (the common case) is scanned once and comes back as the same string.
 */

/** What {@link normalizeRequestTarget} made of a target. */
export type NormalizedTarget = { readonly ok: true; readonly target: string } | { readonly ok: false; readonly reason: string };

const SLASH = 0x2f;
const DOT = 0x2e;
const PERCENT = 0x25;
const QUESTION = 0x3f;
const HASH = 0x23;
const BACKSLASH = 0x5c;

/** RFC 3986 §2.3 unreserved characters, by code. */
const UNRESERVED = new Uint8Array(128);
for (let c = 0x30; c <= 0x39; c++) UNRESERVED[c] = 1;
for (let c = 0x41; c <= 0x5a; c++) UNRESERVED[c] = 1;
for (let c = 0x61; c <= 0x7a; c++) UNRESERVED[c] = 1;
for (const c of '-._~') UNRESERVED[c.charCodeAt(0)] = 1;

const HEX = '0123456789ABCDEF';

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  if (l >= 0x61 && l <= 0x66) return l - 0x61 + 10;
  return -1;
}

function refused(reason: string): NormalizedTarget {
  return { ok: false, reason };
}

/**
 * Normalizes an origin-form request target (`/path?query`): see the module comment. The target
 * `*` (asterisk-form) comes back unchanged; any other target that does not start with `/` is
 * refused.
 */
export function normalizeRequestTarget(target: string): NormalizedTarget {
  const n = target.length;
  if (n === 1 && target === '*') return { ok: true, target };
  if (n === 0 || target.charCodeAt(0) !== SLASH) return refused('the request target is not a path');
  let query = n;
  let work = false;
  let prev = 0;
  for (let i = 0; i < n; i++) {
    const c = target.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f) return refused('whitespace, a control or a non-ASCII character in the request target');
    if (c === HASH) return refused('a fragment (#) in the request target');
    if (i < query) {
      if (c === QUESTION) query = i;
      else if (c === BACKSLASH) return refused('a backslash in the request path');
      else if (c === PERCENT || (prev === SLASH && (c === SLASH || c === DOT))) work = true;
    }
    prev = c;
  }
  if (!work) return { ok: true, target };
  const path = decodePath(target, query);
  if (typeof path !== 'string') return path;
  const normalized = removeDotSegments(path);
  return { ok: true, target: query === n ? normalized : normalized + target.slice(query) };
}

/** The path part of `target` (up to `end`) with unreserved characters decoded and slashes merged; or why it is refused. */
function decodePath(target: string, end: number): string | NormalizedTarget {
  let out = '';
  let prevSlash = false;
  for (let i = 0; i < end; i++) {
    let c = target.charCodeAt(i);
    if (c === PERCENT) {
      const hi = i + 2 < end ? hexValue(target.charCodeAt(i + 1)) : -1;
      const lo = hi < 0 ? -1 : hexValue(target.charCodeAt(i + 2));
      if (lo < 0) return refused('a malformed percent-encoding in the request path');
      const v = hi * 16 + lo;
      i += 2;
      if (v === SLASH || v === BACKSLASH) return refused('an encoded slash or backslash (%2F, %5C) in the request path');
      if (v < 0x20 || v === 0x7f) return refused('an encoded control character in the request path');
      if (v >= 0x80 || UNRESERVED[v] !== 1) {
        out += `%${HEX[hi]}${HEX[lo]}`;
        prevSlash = false;
        continue;
      }
      c = v;
    }
    if (c === SLASH) {
      if (prevSlash) continue;
      prevSlash = true;
    } else {
      prevSlash = false;
    }
    out += String.fromCharCode(c);
  }
  return out;
}

/** RFC 3986 §5.2.4 on an absolute path without empty segments but a trailing one. */
function removeDotSegments(path: string): string {
  const segments = path.slice(1).split('/');
  const out: string[] = [];
  let trailingSlash = false;
  for (let i = 0; i < segments.length; i++) {
    const s = segments[i] as string;
    const last = i === segments.length - 1;
    if (s === '.' || s === '..') {
      if (s === '..') out.pop();
      if (last) trailingSlash = true;
      continue;
    }
    out.push(s);
  }
  const joined = `/${out.join('/')}`;
  return trailingSlash && out.length > 0 ? `${joined}/` : joined;
}
