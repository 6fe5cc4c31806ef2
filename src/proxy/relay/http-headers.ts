/**
 * Header hygiene of the inbound and outbound HTTP stacks (POLICY-SEMANTICS §4.7): what the policy sees, what
 * is forwarded to the application and what is relayed back. Invariants:
 * - every `l5d-*` and `l5d_*` header a client sent is dropped (case-insensitively), so a client cannot spoof
 *   `l5d-client-id` (the proxy adds it itself, from the verified mesh identity, after
 *   authorization) nor any other proxy-to-proxy header;
 * - HTTP/1 hop-by-hop headers (RFC 9110 §7.6.1) are dropped in both directions: `connection` and
 *   every header it names (except `host`), `keep-alive`, `proxy-connection`, `transfer-encoding`
 *   (bodies are re-framed on each hop: the upstream pool frames the request, node the response), `te`,
 *   `upgrade`, `http2-settings`, and `expect` on requests (the proxy answers `100-continue`
 *   itself);
 * - the policy sees exactly the headers that are forwarded (minus the proxy's own
 *   `l5d-client-id`), with every value of a repeated header: a route's header match and the
 *   application never read different values.
 */

/** The header the proxy sets toward the application for mesh clients with a verified identity. */
export const L5D_CLIENT_ID = 'l5d-client-id';
/** The header carrying the proxy's error message to meshed clients. */
export const L5D_PROXY_ERROR = 'l5d-proxy-error';

/** Headers by lower-case name; a repeated header has every value, in order. */
export type HeaderValues = Record<string, string | string[]>;

/** An HTTP/1 request's headers after {@link filterHttp1Request}. */
export interface Http1RequestHeaders {
  /** The forwarded headers by lower-case name: the policy's view. */
  readonly byName: HeaderValues;
  /** The forwarded headers as flat `[name, value, ...]` pairs, names as the client spelled them. */
  readonly forward: string[];
  /** The `upgrade` header's value when the client asked for a protocol upgrade (dropped from `forward`). */
  readonly upgrade: string | undefined;
  /** The `transfer-encoding` header's value (dropped from `forward`: the upstream client re-frames the body). */
  readonly transferEncoding: string | undefined;
}

/**
 * True for `l5d-*` and `l5d_*` in any case, without allocating: WSGI, CGI and others map `_` and
 * `-` to the same variable, so `l5d_client_id` would reach them as the identity.
 */
export function isL5dHeader(name: string): boolean {
  if (name.length < 4) return false;
  const c0 = name.charCodeAt(0) | 0x20;
  const c1 = name.charCodeAt(1);
  const c2 = name.charCodeAt(2);
  const c3 = name.charCodeAt(3);
  return c0 === 0x6c /* l */ && c1 === 0x35 /* 5 */ && (c2 | 0x20) === 0x64 /* d */ && (c3 === 0x2d /* - */ || c3 === 0x5f) /* _ */;
}

/** Lower-case names always dropped at an HTTP/1 hop (the outbound proxy's filter drops these too). */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'upgrade',
  'http2-settings',
]);

/**
 * The lower-case tokens of every `connection` header in flat raw pairs, i.e. the headers it names
 * as hop-by-hop (never `host`, `keep-alive` or `close`); undefined when there are none.
 */
export function connectionTokens(raw: readonly string[]): Set<string> | undefined {
  let tokens: Set<string> | undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as string;
    if (name.length !== 10 || name.toLowerCase() !== 'connection') continue;
    const value = raw[i + 1] as string;
    // The usual values name no header: no split.
    if (value.length === 10 || value.length === 5) {
      const v = value.toLowerCase();
      if (v === 'keep-alive' || v === 'close') continue;
    }
    for (const t of value.split(',')) {
      const token = t.trim().toLowerCase();
      // `Connection: host` must not make the application see another host than the policy did.
      if (token === '' || token === 'host' || token === 'keep-alive' || token === 'close') continue;
      tokens ??= new Set();
      tokens.add(token);
    }
  }
  return tokens;
}

function addValue(into: HeaderValues, name: string, value: string): void {
  const prev = into[name];
  if (prev === undefined) into[name] = value;
  else if (typeof prev === 'string') into[name] = [prev, value];
  else prev.push(value);
}

/**
 * Filters an HTTP/1 request's `rawHeaders` (flat pairs, as node:http gives them): drops `l5d-*`,
 * hop-by-hop headers and `expect`, and returns the rest both by name (for the policy) and as
 * pairs (for forwarding).
 */
export function filterHttp1Request(raw: readonly string[]): Http1RequestHeaders {
  const named = connectionTokens(raw);
  const byName: HeaderValues = Object.create(null) as HeaderValues;
  const forward: string[] = [];
  let upgrade: string | undefined;
  let transferEncoding: string | undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as string;
    const value = raw[i + 1] as string;
    if (isL5dHeader(name)) continue;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || lower === 'expect' || named?.has(lower) === true) {
      if (lower === 'upgrade') upgrade = upgrade === undefined ? value : `${upgrade}, ${value}`;
      else if (lower === 'transfer-encoding') transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
      continue;
    }
    addValue(byName, lower, value);
    forward.push(name, value);
  }
  return { byName, forward, upgrade, transferEncoding };
}

/**
 * Filters an HTTP/1 response's `rawHeaders` from the application for relaying to the client:
 * drops hop-by-hop headers (node frames the response itself). Returns flat pairs.
 */
export function filterHttp1Response(raw: readonly string[]): string[] {
  const named = connectionTokens(raw);
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as string;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || named?.has(lower) === true) continue;
    out.push(name, raw[i + 1] as string);
  }
  return out;
}

/**
 * A header value safe for node to send: visible ASCII and spaces only (anything else becomes `?`),
 * so a reason built from resource names can never make `setHeader` throw.
 */
export function safeHeaderValue(s: string): string {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return s.replace(/[^\x20-\x7e]/g, '?');
  }
  return s;
}

/** Percent-encodes a `grpc-message` (gRPC over HTTP/2: `%` and bytes outside 0x20-0x7e). */
export function grpcMessage(s: string): string {
  let plain = true;
  for (let i = 0; i < s.length && plain; i++) {
    const c = s.charCodeAt(i);
    plain = c >= 0x20 && c <= 0x7e && c !== 0x25;
  }
  if (plain) return s;
  let out = '';
  for (const b of Buffer.from(s, 'utf8'))
    out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  return out;
}
