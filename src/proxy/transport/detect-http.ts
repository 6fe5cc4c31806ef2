/**
 * HTTP detection over the first bytes of a plaintext (or mesh-TLS-terminated) stream
 * (POLICY-SEMANTICS §4.4, protocol `detect`): HTTP/2 prior knowledge, an HTTP/1 request, or
 * neither. Pure, allocation-free and prefix-stable: once a prefix is decided, every longer input
 * with that prefix gets the same answer.
 *
 * Lenient on purpose. A stream that is not HTTP is forwarded opaquely under connection-level
 * policy, with no route matching and no header hygiene, so anything an application's HTTP parser
 * would take as a request must be detected as HTTP: the proxy then parses it strictly (what does
 * not parse is answered 400, never relayed). The yardstick is the most lenient common server,
 * Python's `http.server` (and so WSGI servers built on it): it reads a line up to LF, splits it on
 * any whitespace (CR, tab, vertical tab, form feed, 0x1c-0x1f, 0x85 and 0xa0 included), takes
 * `GET /path` as HTTP/0.9, and nginx and node skip empty lines before a request. So, after any
 * leading whitespace and empty lines, the first line is HTTP/1 when
 * - its first word is a token (RFC 9110 §5.6.2: any case, any token character), and
 * - a later word starts with `HTTP/` (any case), or the line is exactly `GET` and one more word.
 * It is `not-http` as soon as the first word holds a byte that is neither a token character nor
 * whitespace (a TLS record, a length-prefixed binary protocol), as soon as a first word not in
 * upper case is followed by one that cannot start a target (`hello 9002`, memcached's `get key`:
 * no server dispatches such a method with such a target), or when the whole line is there and is
 * neither (`SSH-2.0-…`, `EHLO mail.example`).
 *
 * The answer needs the whole first line; `need-more` until then. A stream still undecided at the
 * caller's byte bound or deadline is judged by {@link detectHttpUndecided}: a slow or long line
 * that may still become a request some server serves is HTTP/1 (the strict parser then answers
 * 400, 408 or 431), or a client could send the rest after the deadline, through as opaque bytes.
 */

/** Result of {@link detectHttp}. */
export type HttpDetection = 'need-more' | 'http1' | 'http2' | 'not-http';

/** How many bytes HTTP detection reads at most before the caller's rule for an undecided stream applies. */
export const HTTP1_MAX_REQUEST_LINE_BYTES = 8192;

/** The HTTP/2 client connection preface (RFC 9113 §3.4), 24 bytes. */
export const HTTP2_PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n';

const H2_PREFACE = Buffer.from(HTTP2_PREFACE, 'latin1');
const LF = 0x0a;
const HYPHEN = 0x2d;
const UNDERSCORE = 0x5f;

/** Whether a byte can start a request target: `/`, `*`, or the `h` of `http://` / `https://`. */
function mayStartTarget(c: number): boolean {
  return c === 0x2f || c === 0x2a || (c | 0x20) === 0x68;
}

/** Bytes Python's `str.split()` splits a Latin-1 request line on (LF ends the line). */
const WS = new Uint8Array(256);
for (const c of [0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0]) WS[c] = 1;

/** RFC 9110 §5.6.2 token characters. */
const TCHAR = new Uint8Array(256);
for (let c = 0x30; c <= 0x39; c++) TCHAR[c] = 1;
for (let c = 0x41; c <= 0x5a; c++) TCHAR[c] = 1;
for (let c = 0x61; c <= 0x7a; c++) TCHAR[c] = 1;
for (const ch of "!#$%&'*+-.^_`|~") TCHAR[ch.charCodeAt(0)] = 1;

/** `HTTP/` in any case starts at `buf[p]` (the caller knows five bytes are there). */
function isVersionWord(buf: Uint8Array, p: number): boolean {
  return (buf[p]! | 0x20) === 0x68 && (buf[p + 1]! | 0x20) === 0x74 && (buf[p + 2]! | 0x20) === 0x74 && (buf[p + 3]! | 0x20) === 0x70 && buf[p + 4] === 0x2f;
}

/**
 * Classifies the stream whose first bytes are `buf` (every byte received so far). Call again
 * with the longer buffer after `need-more`.
 */
export function detectHttp(buf: Uint8Array): HttpDetection {
  const n = buf.length;
  if (n === 0) return 'need-more';

  // HTTP/2 prior knowledge: the exact preface. A divergent one is read as an HTTP/1 line below.
  let i = 0;
  const h2Bytes = Math.min(n, H2_PREFACE.length);
  while (i < h2Bytes && buf[i] === H2_PREFACE[i]) i++;
  if (i === H2_PREFACE.length) return 'http2';
  if (i === n) return 'need-more';

  let p = 0;
  while (p < n && WS[buf[p]!] === 1) p++;
  if (p === n) return 'need-more';
  const methodStart = p;
  while (p < n && TCHAR[buf[p]!] === 1) p++;
  if (p === n) return 'need-more';
  if (WS[buf[p]!] !== 1) return 'not-http';
  const methodIsGet = p - methodStart === 3 && buf[methodStart] === 0x47 && buf[methodStart + 1] === 0x45 && buf[methodStart + 2] === 0x54;
  // A method no server dispatches by name (Python and nginx want upper case) followed by a word
  // that cannot start a target (Go, which takes any token, wants `/…`, `*` or an absolute URI): no
  // server serves the line, whatever follows, so a text protocol's `hello 9002` need not wait for
  // its line end (or the deadline) to go through.
  let upper = true;
  for (let k = methodStart; k < p && upper; k++) {
    const m = buf[k]!;
    upper = (m >= 0x41 && m <= 0x5a) || m === HYPHEN || m === UNDERSCORE;
  }
  if (!upper) {
    let q = p;
    while (q < n && buf[q] !== LF && WS[buf[q]!] === 1) q++;
    if (q < n && buf[q] !== LF && !mayStartTarget(buf[q]!)) return 'not-http';
  }

  let words = 1;
  let version = false;
  for (;;) {
    while (p < n && buf[p] !== LF && WS[buf[p]!] === 1) p++;
    if (p === n) return 'need-more';
    if (buf[p] === LF) break;
    const start = p;
    while (p < n && WS[buf[p]!] !== 1) p++;
    if (p === n) return 'need-more';
    words++;
    if (p - start >= 5 && isVersionWord(buf, start)) version = true;
  }
  return version || (words === 2 && methodIsGet) ? 'http1' : 'not-http';
}

/** `http://` and `https://`, the absolute-form targets a server takes. */
const ABSOLUTE_PREFIXES = [Buffer.from('http://', 'latin1'), Buffer.from('https://', 'latin1')];

/**
 * The verdict on a stream {@link detectHttp} still needed more of when the caller stopped waiting
 * (its deadline or its byte bound): `http1` when the unfinished first line may still become a
 * request that some server serves — nothing but a token yet, an upper-case method and anything,
 * or a token and the start of a target (`/…`, `*`, `http://…`, `https://…`); `not-http` when a
 * lower-case `h…` word turned out no absolute URI, or when `detectHttp` has decided already.
 */
export function detectHttpUndecided(buf: Uint8Array): HttpDetection {
  const d = detectHttp(buf);
  if (d !== 'need-more') return d;
  const n = buf.length;
  let p = 0;
  while (p < n && WS[buf[p]!] === 1) p++;
  let upper = true;
  while (p < n && TCHAR[buf[p]!] === 1) {
    const m = buf[p++]!;
    upper &&= (m >= 0x41 && m <= 0x5a) || m === HYPHEN || m === UNDERSCORE;
  }
  while (p < n && buf[p] !== LF && WS[buf[p]!] === 1) p++;
  if (p === n || upper) return 'http1';
  const c = buf[p];
  if (c === 0x2f /* / */ || c === 0x2a /* * */) return 'http1';
  let end = p;
  while (end < n && WS[buf[end]!] !== 1) end++;
  for (const prefix of ABSOLUTE_PREFIXES) {
    const m = Math.min(end - p, prefix.length);
    let k = 0;
    while (k < m && (buf[p + k]! | (k < 5 ? 0x20 : 0)) === prefix[k]) k++;
    if (k === m) return 'http1';
  }
  return 'not-http';
}
