/**
 * Header hygiene of the outbound proxy (an HTTP forward proxy): what the application's request
 * carries to the endpoint. Invariants:
 * - HTTP/1 hop-by-hop headers (RFC 9110 §7.6.1) are dropped: `connection` and every header it
 *   names, `keep-alive`, `proxy-connection`, `transfer-encoding` (the upstream pool re-frames bodies), `te`,
 *   `upgrade`, `http2-settings`, and `expect` (node answers `100-continue` itself);
 * - every `proxy-*` header is dropped (`Proxy-Authorization` is for this proxy, never the
 *   endpoint), and so is every `l5d-*` header the application sent: proxy-to-proxy headers are the
 *   proxies' own;
 * - `Host` is the authority of the absolute-form request target (RFC 9112 §3.2.2: a proxy
 *   ignores the client's Host then).
 */
import { connectionTokens, HOP_BY_HOP, isL5dHeader } from '../relay/http-headers.js';

/** Lower-case names always dropped: the HTTP/1 hop-by-hop ones, `expect`, and `host` (replaced). */
const DROPPED: ReadonlySet<string> = new Set([...HOP_BY_HOP, 'expect', 'host']);

/** True for `proxy-*` in any case. */
function isProxyHeader(name: string): boolean {
  // The dash first: most names are ruled out without a lower-cased copy.
  return name.length > 6 && name.charCodeAt(5) === 0x2d && name.slice(0, 5).toLowerCase() === 'proxy';
}

/**
 * Filters an HTTP/1 request's `rawHeaders` (flat pairs) for forwarding to an endpoint and puts
 * `Host: authority` first. Returns flat pairs.
 */
export function filterOutboundRequest1(raw: readonly string[], authority: string): string[] {
  const named = connectionTokens(raw);
  const out: string[] = ['Host', authority];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as string;
    if (isL5dHeader(name) || isProxyHeader(name)) continue;
    const lower = name.toLowerCase();
    if (DROPPED.has(lower) || named?.has(lower) === true) continue;
    out.push(name, raw[i + 1] as string);
  }
  return out;
}

/**
 * An HTTP/2 request's header block (flat pairs, pseudo-headers included) or trailers without
 * `l5d-*` and `proxy-*` fields; the same array when there is none. h2/connection has already
 * refused connection-specific fields and upper-case names.
 */
export function filterOutboundRequest2(pairs: readonly string[]): readonly string[] {
  let i = 0;
  while (i + 1 < pairs.length && !isDropped2(pairs[i] as string)) i += 2;
  if (i + 1 >= pairs.length) return pairs;
  const out = pairs.slice(0, i);
  for (; i + 1 < pairs.length; i += 2) {
    const name = pairs[i] as string;
    if (!isDropped2(name)) out.push(name, pairs[i + 1] as string);
  }
  return out;
}

function isDropped2(name: string): boolean {
  return isL5dHeader(name) || isProxyHeader(name);
}

/**
 * The request target of an absolute-form HTTP/1 request (`http://authority/path?query`): the
 * authority and the origin-form path (`/` when empty). A reason string for anything else:
 * origin-form (not a proxy request), another scheme (HTTPS goes through CONNECT), user info, an
 * empty authority. The path is kept byte for byte (no URL normalization).
 */
export function parseAbsoluteForm(url: string): { readonly authority: string; readonly path: string } | string {
  const schemeEnd = url.indexOf('://');
  if (schemeEnd === -1) return `not a proxy request: the request target must be an absolute http:// URI, got ${JSON.stringify(url.slice(0, 100))}`;
  const scheme = url.slice(0, schemeEnd).toLowerCase();
  if (scheme !== 'http') return `unsupported scheme ${JSON.stringify(scheme)}: use CONNECT for anything but http://`;
  const rest = url.slice(schemeEnd + 3);
  let end = rest.length;
  for (const c of ['/', '?', '#']) {
    const i = rest.indexOf(c);
    if (i !== -1 && i < end) end = i;
  }
  const authority = rest.slice(0, end);
  if (authority === '') return 'empty authority in the request target';
  if (authority.includes('@')) return 'user info in the request target is not supported';
  let path = rest.slice(end);
  const hash = path.indexOf('#');
  if (hash !== -1) path = path.slice(0, hash);
  if (path === '' || path.startsWith('?')) path = `/${path}`;
  return { authority, path };
}
