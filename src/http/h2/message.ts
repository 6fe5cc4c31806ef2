/**
 * What makes an HTTP/2 message malformed (RFC 9113 §8.1-8.3), checked by h2/connection on every
 * header block it receives before anything else sees it. A malformed request or response is a
 * stream error (PROTOCOL_ERROR): it is never relayed, so what reaches the other side is always a
 * message its own parser would accept, whatever the sender's.
 *
 * - Field names: lower case, visible ASCII, no colon but a pseudo-header's first character.
 * - Field values: no NUL, CR or LF; no leading or trailing space or tab.
 * - No connection-specific field (`connection`, `keep-alive`, `proxy-connection`,
 *   `transfer-encoding`, `upgrade`); `te` only as `trailers`.
 * - Pseudo-headers first, each at most once, only those of the message's kind: a request has
 *   `:method`, and `:scheme` and a non-empty `:path` unless it is a CONNECT (which has
 *   `:authority` and neither); a response has a three-digit `:status`; trailers have none.
 * - `content-length`: digits only, and the same value if repeated.
 * - `host`: at most once, and equal to `:authority` (case aside) when both are present.
 */

/** The facts of a header block the connection keeps. */
export interface MessageFacts {
  /** `content-length` when present, else -1. */
  contentLength: number;
  /** A request's `:method` (`''` for responses and trailers). */
  method: string;
  /** A response's `:status` (0 for requests and trailers). */
  status: number;
}

const CONNECTION_SPECIFIC: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

/** What a field-name octet may be (RFC 9113 §8.2.1: not 0x00-0x20, A-Z, 0x7f-0xff; a colon only first). */
const NAME_OK = new Uint8Array(256);
for (let c = 0x21; c < 0x7f; c++) NAME_OK[c] = c >= 0x41 && c <= 0x5a ? 0 : 1;
NAME_OK[0x3a] = 0;

function nameProblem(name: string): string | undefined {
  if (name.length === 0) return 'empty field name';
  const start = name.charCodeAt(0) === 0x3a ? 1 : 0;
  if (start === 1 && name.length === 1) return 'empty pseudo-header name';
  for (let i = start; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c > 0xff || NAME_OK[c] === 0) return `invalid field name ${JSON.stringify(name.slice(0, 64))}`;
  }
  return undefined;
}

function valueProblem(name: string, value: string): string | undefined {
  const n = value.length;
  if (n === 0) return undefined;
  for (let i = 0; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c === 0 || c === 0x0a || c === 0x0d) return `invalid character in the value of ${name}`;
  }
  const a = value.charCodeAt(0);
  const z = value.charCodeAt(n - 1);
  if (a === 0x20 || a === 0x09 || z === 0x20 || z === 0x09) return `whitespace around the value of ${name}`;
  return undefined;
}

const DIGITS = /^[0-9]{1,15}$/;

/** The kinds of header block. */
export type MessageKind = 'request' | 'response' | 'trailers';

/**
 * Checks a header block of `kind` (flat name/value pairs): undefined when well-formed, with
 * `facts` filled in, else why it is malformed.
 */
export function messageProblem(kind: MessageKind, pairs: readonly string[], facts: MessageFacts): string | undefined {
  facts.contentLength = -1;
  facts.method = '';
  facts.status = 0;
  let regular = false;
  let scheme: string | undefined;
  let path: string | undefined;
  let authority: string | undefined;
  let status: string | undefined;
  let host: string | undefined;
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const name = pairs[i] as string;
    const value = pairs[i + 1] as string;
    const np = nameProblem(name);
    if (np !== undefined) return np;
    const vp = valueProblem(name, value);
    if (vp !== undefined) return vp;
    if (name.charCodeAt(0) === 0x3a) {
      if (regular) return `pseudo-header ${name} after a regular field`;
      if (kind === 'trailers') return `pseudo-header ${name} in trailers`;
      const request = kind === 'request';
      switch (name) {
        case ':method':
          if (!request || facts.method !== '') return `unexpected ${name}`;
          if (value === '') return 'empty :method';
          facts.method = value;
          break;
        case ':scheme':
          if (!request || scheme !== undefined) return `unexpected ${name}`;
          scheme = value;
          break;
        case ':path':
          if (!request || path !== undefined) return `unexpected ${name}`;
          path = value;
          break;
        case ':authority':
          if (!request || authority !== undefined) return `unexpected ${name}`;
          authority = value;
          break;
        case ':status':
          if (request || status !== undefined) return `unexpected ${name}`;
          status = value;
          break;
        default:
          return `unknown pseudo-header ${name}`;
      }
      continue;
    }
    regular = true;
    if (CONNECTION_SPECIFIC.has(name)) return `connection-specific field ${name}`;
    if (name === 'te' && value !== 'trailers') return 'te other than trailers';
    if (name === 'host') {
      // One host, naming what :authority names (RFC 9113 §8.3.1): policy and application read the same.
      if (host !== undefined) return 'more than one host field';
      host = value;
    }
    if (name === 'content-length') {
      if (!DIGITS.test(value)) return 'invalid content-length';
      const n = Number(value);
      if (facts.contentLength !== -1 && facts.contentLength !== n) return 'conflicting content-length';
      facts.contentLength = n;
    }
  }
  if (kind === 'request') {
    if (facts.method === '') return 'missing :method';
    if (host !== undefined && authority !== undefined && host.toLowerCase() !== authority.toLowerCase()) return 'host differs from :authority';
    if (facts.method === 'CONNECT') {
      if (scheme !== undefined || path !== undefined) return 'CONNECT with :scheme or :path';
      if (authority === undefined || authority === '') return 'CONNECT without :authority';
    } else {
      if (scheme === undefined || scheme === '') return 'missing :scheme';
      if (path === undefined || path === '') return 'missing :path';
      // Origin-form only (or `*` for OPTIONS): an absolute-form path would be authorized as one
      // path and read by the application as another.
      if (path.charCodeAt(0) !== 0x2f && !(path === '*' && facts.method === 'OPTIONS')) return 'invalid :path';
      for (let i = 0; i < path.length; i++) {
        const c = path.charCodeAt(i);
        if (c <= 0x20 || c >= 0x7f) return 'invalid :path';
      }
    }
  } else if (kind === 'response') {
    if (status === undefined || !/^[1-9][0-9]{2}$/.test(status)) return 'missing or invalid :status';
    facts.status = Number(status);
  }
  return undefined;
}
