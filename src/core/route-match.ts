/**
 * HTTP and gRPC route matching with upstream precedence (POLICY-SEMANTICS §4.6): the best host
 * match wins first (exact > suffix > none, longer first), then the best rule match by path-match
 * length, header count, query-parameter count and whether a method is set. Ties keep the earlier
 * route and the earlier rule. Regexes are compiled once per policy.
 */
import type { GrpcRoute, HostMatch, HttpRoute, HttpRouteMatch, PathMatch, ValueMatch } from './model.js';

/** Request facts the matchers need, computed once per request. */
export interface RouteRequest {
  /** Upper-case method. */
  readonly method: string;
  /** Path without the query string. */
  readonly path: string;
  /** Raw query string (without `?`), or '' when absent. */
  readonly query: string;
  /** Lower-case host without port or trailing dot, or '' when unknown. */
  readonly host: string;
  /** Request headers by lower-case name (node's `IncomingHttpHeaders` shape). */
  readonly headers: Readonly<Record<string, string | readonly string[] | undefined>>;
}

/** A compiled host match: scores exact above suffix, then longer above shorter. */
interface CompiledHost {
  readonly exact?: string;
  /** `.example.com` for `*.example.com`. */
  readonly suffix?: string;
}

const HOST_EXACT = 2_000_000;
const HOST_SUFFIX = 1_000_000;

function compileHost(h: HostMatch): CompiledHost {
  if (h.kind === 'exact') return { exact: h.value.toLowerCase().replace(/\.$/, '') };
  return { suffix: `.${[...h.reverseLabels].reverse().join('.').toLowerCase()}` };
}

/** Score of the best matching host of a route; 0 when the route has no hosts; -1 when none matches. */
function hostScore(hosts: readonly CompiledHost[], host: string): number {
  if (hosts.length === 0) return 0;
  let best = -1;
  for (const h of hosts) {
    let s = -1;
    if (h.exact !== undefined) {
      if (h.exact === host) s = HOST_EXACT + h.exact.length;
    } else if (h.suffix !== undefined && host.length > h.suffix.length && host.endsWith(h.suffix)) {
      s = HOST_SUFFIX + h.suffix.length;
    }
    if (s > best) best = s;
  }
  return best;
}

interface CompiledValueMatch {
  readonly name: string;
  readonly exact?: string;
  readonly regex?: RegExp;
}

function compileValueMatch(m: ValueMatch, lowerName: boolean): CompiledValueMatch {
  const name = lowerName ? m.name.toLowerCase() : m.name;
  return m.kind === 'exact' ? { name, exact: m.value } : { name, regex: wholeRegex(m.value) };
}

function wholeRegex(pattern: string): RegExp {
  return new RegExp(`^(?:${pattern})$`);
}

function valueOk(m: CompiledValueMatch, value: string): boolean {
  return m.exact !== undefined ? value === m.exact : (m.regex as RegExp).test(value);
}

function headerOk(m: CompiledValueMatch, headers: RouteRequest['headers']): boolean {
  const v = headers[m.name];
  if (v === undefined) return false;
  if (typeof v === 'string') return valueOk(m, v);
  for (const x of v) if (valueOk(m, x)) return true;
  return false;
}

interface CompiledPath {
  readonly kind: PathMatch['kind'];
  readonly value: string;
  readonly regex?: RegExp;
}

/** Returns the path-match length, or -1 when the path does not match. */
function pathScore(p: CompiledPath, path: string): number {
  switch (p.kind) {
    case 'exact':
      return path === p.value ? p.value.length : -1;
    case 'prefix': {
      // "/" and "" match everything and count as length 1; a trailing "/" is not significant.
      if (p.value === '') return 1;
      if (!path.startsWith(p.value)) return -1;
      if (path.length !== p.value.length && path.charCodeAt(p.value.length) !== 47) return -1;
      return p.value.length;
    }
    case 'regex':
      return (p.regex as RegExp).test(path) ? path.length : -1;
  }
}

interface CompiledHttpMatch {
  readonly path?: CompiledPath;
  readonly headers: readonly CompiledValueMatch[];
  readonly query: readonly CompiledValueMatch[];
  readonly method?: string;
}

function compileHttpMatch(m: HttpRouteMatch): CompiledHttpMatch {
  let path: CompiledPath | undefined;
  if (m.path !== undefined) {
    if (m.path.kind === 'regex') path = { kind: 'regex', value: m.path.value, regex: wholeRegex(m.path.value) };
    else if (m.path.kind === 'prefix') path = { kind: 'prefix', value: m.path.value.replace(/\/+$/, '') };
    else path = { kind: 'exact', value: m.path.value };
  }
  return {
    ...(path !== undefined ? { path } : {}),
    headers: m.headers.map((h) => compileValueMatch(h, true)),
    query: m.queryParams.map((q) => compileValueMatch(q, false)),
    ...(m.method !== undefined ? { method: m.method.toUpperCase() } : {}),
  };
}

function queryOk(m: CompiledValueMatch, params: URLSearchParams): boolean {
  for (const v of params.getAll(m.name)) if (valueOk(m, v)) return true;
  return false;
}

/** Combines match criteria into one comparable number (lexicographic over the §4.6 tuple). */
function combine(pathLen: number, headers: number, query: number, method: boolean): number {
  return ((pathLen * 1000 + headers) * 1000 + query) * 2 + (method ? 1 : 0);
}

/** Score of one HTTP match, or -1. `params` is parsed lazily by the caller when needed. */
function httpMatchScore(m: CompiledHttpMatch, req: RouteRequest, params: () => URLSearchParams): number {
  if (m.method !== undefined && m.method !== req.method) return -1;
  let pathLen = 0;
  if (m.path !== undefined) {
    pathLen = pathScore(m.path, req.path);
    if (pathLen < 0) return -1;
  }
  for (const h of m.headers) if (!headerOk(h, req.headers)) return -1;
  if (m.query.length > 0) {
    const p = params();
    for (const q of m.query) if (!queryOk(q, p)) return -1;
  }
  return combine(pathLen, m.headers.length, m.query.length, m.method !== undefined);
}

/** A compiled HTTP route; `T` carries what the engine attaches (e.g. authorizations). */
export interface CompiledHttpRoute<T> {
  readonly route: HttpRoute;
  readonly data: T;
  readonly hosts: readonly CompiledHost[];
  readonly rules: readonly (readonly CompiledHttpMatch[])[];
}

/** Compiles HTTP routes for matching. Throws on an invalid regex (the caller marks the policy invalid). */
export function compileHttpRoutes<T>(routes: readonly HttpRoute[], data: (r: HttpRoute) => T): CompiledHttpRoute<T>[] {
  return routes.map((route) => ({
    route,
    data: data(route),
    hosts: route.hosts.map(compileHost),
    rules: route.rules.map((rule) => rule.matches.map(compileHttpMatch)),
  }));
}

/** Result of route selection: the route and the index of the matched rule. */
export interface RouteSelection<R> {
  readonly route: R;
  readonly ruleIndex: number;
}

/** Best rule score of a route for a request, or -1 with the winning rule index. */
function bestHttpRule<T>(r: CompiledHttpRoute<T>, req: RouteRequest, params: () => URLSearchParams): [number, number] {
  let best = -1;
  let bestRule = -1;
  for (let i = 0; i < r.rules.length; i++) {
    const matches = r.rules[i] as readonly CompiledHttpMatch[];
    let s = -1;
    if (matches.length === 0) s = 0;
    else {
      for (const m of matches) {
        const ms = httpMatchScore(m, req, params);
        if (ms > s) s = ms;
      }
    }
    if (s > best) {
      best = s;
      bestRule = i;
    }
  }
  return [best, bestRule];
}

function lazyParams(req: RouteRequest): () => URLSearchParams {
  let params: URLSearchParams | undefined;
  return () => {
    params ??= new URLSearchParams(req.query);
    return params;
  };
}

/** Selects the best HTTP route for a request, or undefined when none matches. */
export function selectHttpRoute<T>(routes: readonly CompiledHttpRoute<T>[], req: RouteRequest): RouteSelection<CompiledHttpRoute<T>> | undefined {
  const params = lazyParams(req);
  let bestHost = -1;
  let bestScore = -1;
  let found: RouteSelection<CompiledHttpRoute<T>> | undefined;
  for (const r of routes) {
    const hs = hostScore(r.hosts, req.host);
    if (hs < 0 || hs < bestHost) continue;
    const [score, rule] = bestHttpRule(r, req, params);
    if (score < 0) continue;
    if (hs > bestHost || score > bestScore) {
      bestHost = hs;
      bestScore = score;
      found = { route: r, ruleIndex: rule };
    }
  }
  return found;
}

/** Why a route did not match a request (for explain), or undefined when it matches. */
export function httpRouteMismatch<T>(r: CompiledHttpRoute<T>, req: RouteRequest): string | undefined {
  if (hostScore(r.hosts, req.host) < 0) return `host "${req.host || '(none)'}" matches none of its hostnames`;
  const [score] = bestHttpRule(r, req, lazyParams(req));
  return score < 0 ? `no rule matches ${req.method} ${req.path}` : undefined;
}

// === gRPC ===

interface CompiledGrpcMatch {
  readonly service?: string;
  readonly method?: string;
  readonly headers: readonly CompiledValueMatch[];
}

/** A compiled gRPC route. */
export interface CompiledGrpcRoute<T> {
  readonly route: GrpcRoute;
  readonly data: T;
  readonly hosts: readonly CompiledHost[];
  readonly rules: readonly (readonly CompiledGrpcMatch[])[];
}

/** Compiles gRPC routes for matching. */
export function compileGrpcRoutes<T>(routes: readonly GrpcRoute[], data: (r: GrpcRoute) => T): CompiledGrpcRoute<T>[] {
  return routes.map((route) => ({
    route,
    data: data(route),
    hosts: route.hosts.map(compileHost),
    rules: route.rules.map((rule) =>
      rule.matches.map((m) => ({
        ...(m.rpc?.service !== undefined && m.rpc.service !== '' ? { service: m.rpc.service } : {}),
        ...(m.rpc?.method !== undefined && m.rpc.method !== '' ? { method: m.rpc.method } : {}),
        headers: m.headers.map((h) => compileValueMatch(h, true)),
      })),
    ),
  }));
}

/** Splits `/<service>/<method>`; undefined when the path is not a gRPC path. */
export function parseGrpcPath(path: string): { service: string; method: string } | undefined {
  if (path.charCodeAt(0) !== 47) return undefined;
  const slash = path.indexOf('/', 1);
  if (slash <= 1 || slash === path.length - 1 || path.indexOf('/', slash + 1) !== -1) return undefined;
  return { service: path.slice(1, slash), method: path.slice(slash + 1) };
}

function grpcMatchScore(m: CompiledGrpcMatch, rpc: { service: string; method: string }, req: RouteRequest): number {
  if (m.service !== undefined && m.service !== rpc.service) return -1;
  if (m.method !== undefined && m.method !== rpc.method) return -1;
  for (const h of m.headers) if (!headerOk(h, req.headers)) return -1;
  return ((m.service?.length ?? 0) * 1000 + (m.method?.length ?? 0)) * 1000 + m.headers.length;
}

function bestGrpcRule<T>(r: CompiledGrpcRoute<T>, rpc: { service: string; method: string }, req: RouteRequest): [number, number] {
  let best = -1;
  let bestRule = -1;
  for (let i = 0; i < r.rules.length; i++) {
    const matches = r.rules[i] as readonly CompiledGrpcMatch[];
    let s = matches.length === 0 ? 0 : -1;
    for (const m of matches) {
      const ms = grpcMatchScore(m, rpc, req);
      if (ms > s) s = ms;
    }
    if (s > best) {
      best = s;
      bestRule = i;
    }
  }
  return [best, bestRule];
}

/** Selects the best gRPC route. Only POST requests to `/<service>/<method>` can match. */
export function selectGrpcRoute<T>(routes: readonly CompiledGrpcRoute<T>[], req: RouteRequest): RouteSelection<CompiledGrpcRoute<T>> | undefined {
  if (req.method !== 'POST') return undefined;
  const rpc = parseGrpcPath(req.path);
  if (rpc === undefined) return undefined;
  let bestHost = -1;
  let bestScore = -1;
  let found: RouteSelection<CompiledGrpcRoute<T>> | undefined;
  for (const r of routes) {
    const hs = hostScore(r.hosts, req.host);
    if (hs < 0 || hs < bestHost) continue;
    const [score, rule] = bestGrpcRule(r, rpc, req);
    if (score < 0) continue;
    if (hs > bestHost || score > bestScore) {
      bestHost = hs;
      bestScore = score;
      found = { route: r, ruleIndex: rule };
    }
  }
  return found;
}

/** Why a gRPC route did not match (for explain), or undefined when it matches. */
export function grpcRouteMismatch<T>(r: CompiledGrpcRoute<T>, req: RouteRequest): string | undefined {
  if (req.method !== 'POST') return `gRPC routes only match POST, not ${req.method}`;
  const rpc = parseGrpcPath(req.path);
  if (rpc === undefined) return `${req.path} is not a /<service>/<method> path`;
  if (hostScore(r.hosts, req.host) < 0) return `host "${req.host || '(none)'}" matches none of its hostnames`;
  const [score] = bestGrpcRule(r, rpc, req);
  return score < 0 ? `no rule matches ${rpc.service}/${rpc.method}` : undefined;
}

/** Normalises a Host header or :authority to the form hosts are compared in. */
export function normalizeHost(authority: string | undefined): string {
  if (authority === undefined || authority === '') return '';
  let host = authority;
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    host = end === -1 ? host : host.slice(1, end);
  } else {
    const colon = host.lastIndexOf(':');
    if (colon !== -1 && host.indexOf(':') === colon) host = host.slice(0, colon);
  }
  host = host.toLowerCase();
  return host.endsWith('.') ? host.slice(0, -1) : host;
}
