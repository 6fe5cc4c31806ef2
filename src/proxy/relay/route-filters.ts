/**
 * Route filters of the inbound HTTP stack (POLICY-SEMANTICS §4.10): after a request is permitted,
 * the filters of its matched rule run in order — a `RequestHeaderModifier` edits the headers sent
 * to the application, a `RequestRedirect` or a `FailureInjector` that fires answers the request
 * instead of forwarding it (later filters do not run). Filters never run for denied requests;
 * `ResponseHeaderModifier` never reaches the proxy (the index drops it for inbound).
 *
 * Semantics follow upstream (linkerd2-proxy `http/route/src/http/filter`, inbound
 * `policy/http.rs`), with Gateway API where they differ:
 * - Header modifier: per filter, `add` appends a value, then `set` replaces every value, then
 *   `remove` drops the header; names compare case-insensitively. The proxy owns some headers and
 *   a filter never touches them: pseudo-headers, `host`, hop-by-hop headers, `content-length`
 *   and `l5d-*` (a route must not be able to forge `l5d-client-id`). A header name or value that
 *   cannot be sent makes the filter invalid.
 * - Redirect: `Location` = scheme (the filter's, else `http`) `://` authority path. The authority
 *   is the request's (`:authority` / Host) unless overridden: host and port → `host:port`; host
 *   only → that host with the request's port unless it is the scheme's default; port only → the
 *   request's host with that port, omitted when it is the scheme's default. Path: the request's
 *   path and query; `full` replaces both; `prefix` replaces the matched path prefix and keeps the
 *   rest and the query (only when the rule matched by path prefix). Status: the filter's, else
 *   302 (Gateway API's default; upstream's proxy falls back to 301 but Kubernetes applies the CRD
 *   default 302 before the controller sees the route). A location equal to the request's own is
 *   no redirect: the filter is skipped, as upstream. The response has no body; gRPC requests get
 *   trailers-only `grpc-status` 5 as upstream's synthetic redirect.
 * - Failure injector: fires with probability `numerator / denominator` (always when the numerator
 *   reaches the denominator, never with 0). On an HTTP route it answers `status` (gRPC requests:
 *   `grpc-status` 9 FAILED_PRECONDITION); on a gRPC route `status` is the gRPC code, answered
 *   trailers-only with HTTP 200. The message goes out as `l5d-proxy-error` (and `grpc-message`)
 *   to meshed clients only, like every proxy-made response.
 * - A filter that cannot be applied (an invalid status or header, a prefix redirect without a
 *   prefix match, no authority to redirect to) fails the request with 500, as upstream fails it.
 *
 * Compiled once per filter list (the policy's own arrays, cached by identity); a request with no
 * filters does no work here.
 */
import type { Header, PathMatch, RouteFilter } from '../../core/index.js';
import { HOP_BY_HOP, isL5dHeader } from './http-headers.js';

/** A response the proxy gives instead of forwarding the request. */
export interface FilterResponse {
  /** HTTP status (non-gRPC requests). */
  readonly status: number;
  /** `grpc-status` of the trailers-only answer to a gRPC request. */
  readonly grpcStatus: number;
  /** `l5d-proxy-error` / `grpc-message` for meshed clients. */
  readonly message: string;
  /** `Location` of a redirect. */
  readonly location: string | undefined;
}

/** One compiled `RequestHeaderModifier`: lower-case names, sendable values. */
export interface HeaderEdit {
  readonly add: readonly Header[];
  readonly set: readonly Header[];
  readonly remove: readonly string[];
}

/** What a permitted request's filters decided. */
export type FilterOutcome =
  /** Forward the request, with these header edits applied in order (possibly none). */
  | { readonly kind: 'forward'; readonly edits: readonly HeaderEdit[] }
  /** Answer with this response instead. */
  | { readonly kind: 'respond'; readonly response: FilterResponse; readonly filter: 'requestRedirect' | 'failureInjector' }
  /** A filter cannot be applied: the request fails (500). */
  | { readonly kind: 'invalid'; readonly reason: string };

/** The request facts filters read. */
export interface FilterRequest {
  /** `:authority` or the Host header (an absolute-form target's authority first). */
  readonly authority: string | undefined;
  /** Request target: path with optional `?query`. */
  readonly path: string;
}

type CompiledFilter =
  | { readonly kind: 'headers'; readonly edit: HeaderEdit }
  | { readonly kind: 'redirect'; readonly filter: Extract<RouteFilter, { kind: 'requestRedirect' }>; readonly status: number }
  | { readonly kind: 'fail'; readonly response: FilterResponse; readonly numerator: number; readonly denominator: number }
  | { readonly kind: 'invalid'; readonly reason: string };

const GRPC_NOT_FOUND = 5;
const GRPC_FAILED_PRECONDITION = 9;
const DEFAULT_REDIRECT_STATUS = 302;
const NO_EDITS: FilterOutcome = Object.freeze({ kind: 'forward', edits: Object.freeze([]) });
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const LOCATION = /^[\x21-\x7e]+$/;

const compiledHttp = new WeakMap<readonly RouteFilter[], readonly CompiledFilter[]>();
const compiledGrpc = new WeakMap<readonly RouteFilter[], readonly CompiledFilter[]>();

function isStatus(n: number): boolean {
  return Number.isInteger(n) && n >= 100 && n <= 999;
}

/** True for a header the proxy owns (see the module comment). */
function isProtected(lower: string): boolean {
  return (
    lower.charCodeAt(0) === 0x3a /* : */ || lower === 'host' || lower === 'content-length' || lower === 'expect' || HOP_BY_HOP.has(lower) || isL5dHeader(lower)
  );
}

function compileHeaders(f: Extract<RouteFilter, { kind: 'requestHeaderModifier' }>): CompiledFilter {
  const pairs = (hs: readonly Header[]): Header[] | string => {
    const out: Header[] = [];
    for (const h of hs) {
      if (!TOKEN.test(h.name)) return `header name ${JSON.stringify(h.name)} is not a token`;
      if (!FIELD_VALUE.test(h.value)) return `header ${h.name}: the value cannot be sent`;
      const name = h.name.toLowerCase();
      if (!isProtected(name)) out.push({ name, value: h.value });
    }
    return out;
  };
  const add = pairs(f.add);
  if (typeof add === 'string') return { kind: 'invalid', reason: `RequestHeaderModifier: ${add}` };
  const set = pairs(f.set);
  if (typeof set === 'string') return { kind: 'invalid', reason: `RequestHeaderModifier: ${set}` };
  const remove: string[] = [];
  for (const n of f.remove) {
    const name = n.toLowerCase();
    if (!isProtected(name)) remove.push(name);
  }
  return { kind: 'headers', edit: { add, set, remove } };
}

function compileFilter(f: RouteFilter, grpcRoute: boolean): CompiledFilter {
  switch (f.kind) {
    case 'requestHeaderModifier':
      return compileHeaders(f);
    case 'requestRedirect': {
      const status = f.status ?? DEFAULT_REDIRECT_STATUS;
      if (!isStatus(status)) return { kind: 'invalid', reason: `RequestRedirect: invalid status ${status}` };
      if (f.port !== undefined && !(Number.isInteger(f.port) && f.port >= 1 && f.port <= 65_535)) {
        return { kind: 'invalid', reason: `RequestRedirect: invalid port ${f.port}` };
      }
      return { kind: 'redirect', filter: f, status };
    }
    case 'failureInjector': {
      const { numerator, denominator } = f.ratio;
      if (grpcRoute) {
        if (!(Number.isInteger(f.status) && f.status >= 0)) return { kind: 'invalid', reason: `FailureInjector: invalid gRPC status ${f.status}` };
        return { kind: 'fail', response: { status: 200, grpcStatus: f.status, message: f.message, location: undefined }, numerator, denominator };
      }
      if (!isStatus(f.status)) return { kind: 'invalid', reason: `FailureInjector: invalid status ${f.status}` };
      return {
        kind: 'fail',
        response: { status: f.status, grpcStatus: GRPC_FAILED_PRECONDITION, message: f.message, location: undefined },
        numerator,
        denominator,
      };
    }
  }
}

/** The compiled form of a filter list, built once per list. */
function compiled(filters: readonly RouteFilter[], grpcRoute: boolean): readonly CompiledFilter[] {
  const cache = grpcRoute ? compiledGrpc : compiledHttp;
  let c = cache.get(filters);
  if (c === undefined) {
    c = filters.map((f) => compileFilter(f, grpcRoute));
    cache.set(filters, c);
  }
  return c;
}

/**
 * Runs a permitted request's filters (`filters` and `pathMatch` from its permit). `grpcRoute`:
 * the port's routes are gRPC routes (a failure injector's status is then a gRPC code).
 * `random` draws in [0, 1) for failure injection.
 */
export function runRouteFilters(
  filters: readonly RouteFilter[],
  pathMatch: PathMatch | undefined,
  grpcRoute: boolean,
  req: FilterRequest,
  random: () => number,
): FilterOutcome {
  if (filters.length === 0) return NO_EDITS;
  let edits: HeaderEdit[] | undefined;
  for (const f of compiled(filters, grpcRoute)) {
    switch (f.kind) {
      case 'headers':
        edits ??= [];
        edits.push(f.edit);
        break;
      case 'redirect': {
        const location = redirectLocation(f.filter, pathMatch, req);
        if (location.kind === 'invalid') return location;
        if (location.value === undefined) break;
        return {
          kind: 'respond',
          filter: 'requestRedirect',
          response: { status: f.status, grpcStatus: GRPC_NOT_FOUND, message: 'redirected', location: location.value },
        };
      }
      case 'fail':
        if (f.numerator >= f.denominator || random() * f.denominator < f.numerator) return { kind: 'respond', filter: 'failureInjector', response: f.response };
        break;
      case 'invalid':
        return f;
    }
  }
  return edits === undefined ? NO_EDITS : { kind: 'forward', edits };
}

/** Splits an authority into host (IPv6 in brackets) and port text ('' when absent). */
function splitAuthority(authority: string): { readonly host: string; readonly port: string } {
  if (authority.startsWith('[')) {
    const end = authority.indexOf(']');
    if (end !== -1) return { host: authority.slice(0, end + 1), port: authority.startsWith(':', end + 1) ? authority.slice(end + 2) : '' };
  }
  const colon = authority.lastIndexOf(':');
  if (colon === -1 || authority.indexOf(':') !== colon) return { host: authority, port: '' };
  return { host: authority.slice(0, colon), port: authority.slice(colon + 1) };
}

function isDefaultPort(scheme: string, port: string): boolean {
  return (scheme === 'http' && port === '80') || (scheme === 'https' && port === '443');
}

/** The redirect's `Location`, undefined when it equals the request's own URL. */
function redirectLocation(
  f: Extract<RouteFilter, { kind: 'requestRedirect' }>,
  pathMatch: PathMatch | undefined,
  req: FilterRequest,
): { readonly kind: 'location'; readonly value: string | undefined } | { readonly kind: 'invalid'; readonly reason: string } {
  const scheme = (f.scheme ?? 'http').toLowerCase();
  const original = req.authority === undefined || req.authority === '' ? undefined : splitAuthority(req.authority);
  let authority: string;
  if (f.host !== undefined && f.port !== undefined) {
    authority = `${f.host}:${f.port}`;
  } else if (f.host !== undefined) {
    authority = original !== undefined && original.port !== '' && !isDefaultPort(scheme, original.port) ? `${f.host}:${original.port}` : f.host;
  } else {
    if (original === undefined) return { kind: 'invalid', reason: 'RequestRedirect: no authority to redirect to' };
    const port = f.port === undefined ? undefined : String(f.port);
    if (port === undefined) authority = req.authority as string;
    else if (!isDefaultPort(scheme, port)) authority = port === original.port ? (req.authority as string) : `${original.host}:${port}`;
    else authority = original.host;
  }
  const q = req.path.indexOf('?');
  const path = q === -1 ? req.path : req.path.slice(0, q);
  const query = q === -1 ? '' : req.path.slice(q);
  let target: string;
  if (f.path === undefined) {
    target = req.path;
  } else if (f.path.kind === 'full') {
    target = f.path.value;
  } else {
    if (pathMatch?.kind !== 'prefix') return { kind: 'invalid', reason: 'RequestRedirect: a prefix replacement needs a path prefix match' };
    // The matched prefix, as matching compares it: trailing slashes are not significant.
    const prefixLength = pathMatch.value.replace(/\/+$/, '').length;
    const rest = path.slice(Math.min(prefixLength, path.length));
    let replaced = f.path.value;
    if (rest !== '')
      replaced = replaced.endsWith('/') && rest.startsWith('/') ? replaced + rest.slice(1) : rest.startsWith('/') ? replaced + rest : `${replaced}/${rest}`;
    target = (replaced === '' ? '/' : replaced) + query;
  }
  const location = `${scheme}://${authority}${target}`;
  if (!LOCATION.test(location)) return { kind: 'invalid', reason: 'RequestRedirect: the location cannot be sent' };
  if (req.authority !== undefined && location === `http://${req.authority}${req.path}`) return { kind: 'location', value: undefined };
  return { kind: 'location', value: location };
}

/** Applies header edits to HTTP/1 flat `[name, value, ...]` pairs (names as the client spelled them); returns new pairs. */
export function editHttp1Headers(pairs: readonly string[], edits: readonly HeaderEdit[]): string[] {
  let out = [...pairs];
  const without = (lower: string): string[] => {
    const kept: string[] = [];
    for (let i = 0; i + 1 < out.length; i += 2) {
      const name = out[i] as string;
      if (name.toLowerCase() !== lower) kept.push(name, out[i + 1] as string);
    }
    return kept;
  };
  for (const e of edits) {
    for (const h of e.add) out.push(h.name, h.value);
    for (const h of e.set) {
      out = without(h.name);
      out.push(h.name, h.value);
    }
    for (const name of e.remove) out = without(name);
  }
  return out;
}

/** Applies header edits to an HTTP/2 header object (lower-case names); returns a new object. */
export function editHttp2Headers<H extends Record<string, string | string[] | number | undefined>>(headers: H, edits: readonly HeaderEdit[]): H {
  const out: Record<string, string | string[] | number | undefined> = { ...headers };
  for (const e of edits) {
    for (const h of e.add) {
      const prev = out[h.name];
      out[h.name] = prev === undefined ? h.value : Array.isArray(prev) ? [...prev, h.value] : [String(prev), h.value];
    }
    for (const h of e.set) out[h.name] = h.value;
    for (const name of e.remove) Reflect.deleteProperty(out, name);
  }
  return out as H;
}
