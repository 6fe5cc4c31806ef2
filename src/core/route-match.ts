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

/** A compiled host match: exactly one of `exact` / `suffix` is set (fields always present for V8). */
interface CompiledHost {
  readonly exact: string | undefined;
  /** `.example.com` for `*.example.com`. */
  readonly suffix: string | undefined;
}

const HOST_EXACT = 2_000_000;
const HOST_SUFFIX = 1_000_000;

function compileHost(h: HostMatch): CompiledHost {
  if (h.kind === 'exact') return { exact: h.value.toLowerCase().replace(/\.$/, ''), suffix: undefined };
  return { exact: undefined, suffix: `.${[...h.reverseLabels].reverse().join('.').toLowerCase()}` };
}

/** Score of the best matching host of a route; 0 when the route has no hosts; -1 when none matches. */
function hostScore(hosts: readonly CompiledHost[], host: string): number {
  if (hosts.length === 0) return 0;
  let best = -1;
  for (let i = 0; i < hosts.length; i++) {
    const h = hosts[i] as CompiledHost;
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
  readonly exact: string | undefined;
  readonly regex: RegExp | undefined;
}

function compileValueMatch(m: ValueMatch, lowerName: boolean): CompiledValueMatch {
  const name = lowerName ? m.name.toLowerCase() : m.name;
  return m.kind === 'exact' ? { name, exact: m.value, regex: undefined } : { name, exact: undefined, regex: wholeRegex(m.value) };
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
  for (let i = 0; i < v.length; i++) if (valueOk(m, v[i] as string)) return true;
  return false;
}

const PATH_EXACT = 0;
const PATH_PREFIX = 1;
const PATH_REGEX = 2;

interface CompiledPath {
  readonly kind: 0 | 1 | 2;
  /** Exact value, or prefix without trailing slashes ('' matches everything). */
  readonly value: string;
  readonly regex: RegExp | undefined;
}

/** Returns the path-match length, or -1 when the path does not match. */
function pathScore(p: CompiledPath, path: string): number {
  if (p.kind === PATH_EXACT) return path === p.value ? p.value.length : -1;
  if (p.kind === PATH_PREFIX) {
    // "/" matches everything and counts as length 1; a trailing "/" is not significant.
    const v = p.value;
    if (v === '') return 1;
    if (!path.startsWith(v)) return -1;
    if (path.length !== v.length && path.charCodeAt(v.length) !== 47) return -1;
    return v.length;
  }
  return (p.regex as RegExp).test(path) ? path.length : -1;
}

interface CompiledHttpMatch {
  readonly path: CompiledPath | undefined;
  readonly headers: readonly CompiledValueMatch[];
  readonly query: readonly CompiledValueMatch[];
  readonly method: string | undefined;
}

function compilePath(p: PathMatch): CompiledPath {
  if (p.kind === 'regex') return { kind: PATH_REGEX, value: p.value, regex: wholeRegex(p.value) };
  if (p.kind === 'prefix') return { kind: PATH_PREFIX, value: p.value.replace(/\/+$/, ''), regex: undefined };
  return { kind: PATH_EXACT, value: p.value, regex: undefined };
}

function compileHttpMatch(m: HttpRouteMatch): CompiledHttpMatch {
  return {
    path: m.path === undefined ? undefined : compilePath(m.path),
    headers: m.headers.map((h) => compileValueMatch(h, true)),
    query: m.queryParams.map((q) => compileValueMatch(q, false)),
    method: m.method === undefined ? undefined : m.method.toUpperCase(),
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

/** Score of one HTTP match, or -1. `params` is parsed once per request when any match needs it. */
function httpMatchScore(m: CompiledHttpMatch, req: RouteRequest, params: URLSearchParams | undefined): number {
  if (m.method !== undefined && m.method !== req.method) return -1;
  let pathLen = 0;
  if (m.path !== undefined) {
    pathLen = pathScore(m.path, req.path);
    if (pathLen < 0) return -1;
  }
  const headers = m.headers;
  for (let i = 0; i < headers.length; i++) if (!headerOk(headers[i] as CompiledValueMatch, req.headers)) return -1;
  const query = m.query;
  if (query.length > 0) {
    const p = params ?? new URLSearchParams(req.query);
    for (let i = 0; i < query.length; i++) if (!queryOk(query[i] as CompiledValueMatch, p)) return -1;
  }
  return combine(pathLen, headers.length, query.length, m.method !== undefined);
}

/** A compiled HTTP route; `T` carries what the engine attaches (e.g. authorizations). */
export interface CompiledHttpRoute<T> {
  readonly route: HttpRoute;
  readonly data: T;
  /** Position in the route list: earlier routes win ties. */
  readonly index: number;
  readonly hosts: readonly CompiledHost[];
  readonly rules: readonly (readonly CompiledHttpMatch[])[];
}

/** A node of the path-segment trie: routes with a literal match path ending here. */
interface SegmentNode<T> {
  readonly routes: CompiledHttpRoute<T>[];
  readonly children: Map<string, SegmentNode<T>>;
}

/**
 * Compiled HTTP routes indexed by path segments. A match with an Exact or PathPrefix path can
 * only match requests whose path passes through that path's node (prefix matching is segment-wise),
 * so a request scores the routes on the nodes along its own path plus the routes that have a
 * match without a literal path (`always`). Ties are broken by route position, so precedence is
 * exactly that of a scan over the whole list.
 */
export interface CompiledHttpTable<T> {
  readonly routes: readonly CompiledHttpRoute<T>[];
  readonly always: readonly CompiledHttpRoute<T>[];
  readonly root: SegmentNode<T>;
  readonly hasQuery: boolean;
}

function newNode<T>(): SegmentNode<T> {
  return { routes: [], children: new Map() };
}

/** Compiles HTTP routes for matching. Throws on an invalid regex (the caller marks the policy invalid). */
export function compileHttpRoutes<T>(routes: readonly HttpRoute[], data: (r: HttpRoute) => T): CompiledHttpTable<T> {
  const compiled: CompiledHttpRoute<T>[] = routes.map((route, index) => ({
    route,
    data: data(route),
    index,
    hosts: route.hosts.map(compileHost),
    rules: route.rules.map((rule) => rule.matches.map(compileHttpMatch)),
  }));
  const root = newNode<T>();
  const always: CompiledHttpRoute<T>[] = [];
  for (const r of compiled) {
    const literal = r.rules.every((rule) => rule.length > 0 && rule.every((m) => m.path !== undefined && m.path.kind !== PATH_REGEX && m.path.value !== ''));
    if (!literal) {
      always.push(r);
      continue;
    }
    for (const rule of r.rules) {
      for (const m of rule) {
        let node = root;
        for (const seg of (m.path as CompiledPath).value.slice(1).split('/')) {
          let next = node.children.get(seg);
          if (next === undefined) {
            next = newNode<T>();
            node.children.set(seg, next);
          }
          node = next;
        }
        if (!node.routes.includes(r)) node.routes.push(r);
      }
    }
  }
  const hasQuery = compiled.some((r) => r.rules.some((rule) => rule.some((m) => m.query.length > 0)));
  return { routes: compiled, always, root, hasQuery };
}

/** Result of route selection: the route, the index of the matched rule and of its best match. */
export interface RouteSelection<R> {
  readonly route: R;
  readonly ruleIndex: number;
  /** Index of the rule's best-scoring match; -1 for a rule without matches (it matches everything). */
  readonly matchIndex: number;
}

/** Rule index of the last `bestHttpRule`/`bestGrpcRule` call (avoids a tuple per route). */
let lastRule = -1;

/** Best rule score of a route for a request, or -1; the winning rule index is left in `lastRule`. */
function bestHttpRule<T>(r: CompiledHttpRoute<T>, req: RouteRequest, params: URLSearchParams | undefined): number {
  let best = -1;
  let bestRule = -1;
  const rules = r.rules;
  for (let i = 0; i < rules.length; i++) {
    const matches = rules[i] as readonly CompiledHttpMatch[];
    let s = -1;
    if (matches.length === 0) s = 0;
    else {
      for (let j = 0; j < matches.length; j++) {
        const ms = httpMatchScore(matches[j] as CompiledHttpMatch, req, params);
        if (ms > s) s = ms;
      }
    }
    if (s > best) {
      best = s;
      bestRule = i;
    }
  }
  lastRule = bestRule;
  return best;
}

/** Running best candidate of a selection (reset per request). */
interface Best<R> {
  host: number;
  score: number;
  route: R | undefined;
  rule: number;
}

function consider<T>(best: Best<CompiledHttpRoute<T>>, list: readonly CompiledHttpRoute<T>[], req: RouteRequest, params: URLSearchParams | undefined): void {
  for (let i = 0; i < list.length; i++) {
    const r = list[i] as CompiledHttpRoute<T>;
    const hs = hostScore(r.hosts, req.host);
    if (hs < 0 || hs < best.host) continue;
    const score = bestHttpRule(r, req, params);
    if (score < 0) continue;
    if (hs > best.host || score > best.score || (score === best.score && r.index < (best.route as CompiledHttpRoute<T>).index)) {
      best.host = hs;
      best.score = score;
      best.route = r;
      best.rule = lastRule;
    }
  }
}

/**
 * The selection of a winning route and rule, with the index of the rule's best match — found
 * once, for the winner only (most rules have one match), rather than tracked while scoring.
 */
function httpSelection<T>(
  route: CompiledHttpRoute<T>,
  ruleIndex: number,
  req: RouteRequest,
  params: URLSearchParams | undefined,
): RouteSelection<CompiledHttpRoute<T>> {
  const matches = route.rules[ruleIndex] as readonly CompiledHttpMatch[];
  let matchIndex = matches.length === 0 ? -1 : 0;
  if (matches.length > 1) {
    let best = -1;
    for (let j = 0; j < matches.length; j++) {
      const ms = httpMatchScore(matches[j] as CompiledHttpMatch, req, params);
      if (ms > best) {
        best = ms;
        matchIndex = j;
      }
    }
  }
  return { route, ruleIndex, matchIndex };
}

/** Selects the best HTTP route for a request, or undefined when none matches. */
export function selectHttpRoute<T>(table: CompiledHttpTable<T>, req: RouteRequest): RouteSelection<CompiledHttpRoute<T>> | undefined {
  const params = table.hasQuery && req.query !== '' ? new URLSearchParams(req.query) : undefined;
  const best: Best<CompiledHttpRoute<T>> = { host: -1, score: -1, route: undefined, rule: -1 };
  consider(best, table.always, req, params);
  // Walk the trie along the request path's segments.
  const path = req.path;
  let node: SegmentNode<T> | undefined = table.root;
  let start = 1;
  while (node !== undefined && start <= path.length) {
    const slash = path.indexOf('/', start);
    const end = slash === -1 ? path.length : slash;
    node = node.children.get(path.slice(start, end));
    if (node === undefined) break;
    if (node.routes.length > 0) consider(best, node.routes, req, params);
    if (slash === -1) break;
    start = slash + 1;
  }
  return best.route === undefined ? undefined : httpSelection(best.route, best.rule, req, params);
}

/** Route selection by a plain scan of every route in order: the oracle the trie is tested against. */
export function selectHttpRouteByScan<T>(table: CompiledHttpTable<T>, req: RouteRequest): RouteSelection<CompiledHttpRoute<T>> | undefined {
  const best: Best<CompiledHttpRoute<T>> = { host: -1, score: -1, route: undefined, rule: -1 };
  const params = req.query === '' ? undefined : new URLSearchParams(req.query);
  consider(best, table.routes, req, params);
  return best.route === undefined ? undefined : httpSelection(best.route, best.rule, req, params);
}

/** Why a route did not match a request (for explain), or undefined when it matches. */
export function httpRouteMismatch<T>(r: CompiledHttpRoute<T>, req: RouteRequest): string | undefined {
  if (hostScore(r.hosts, req.host) < 0) return `host "${req.host || '(none)'}" matches none of its hostnames`;
  const score = bestHttpRule(r, req, req.query === '' ? undefined : new URLSearchParams(req.query));
  return score < 0 ? `no rule matches ${req.method} ${req.path}` : undefined;
}

// === gRPC ===

interface CompiledGrpcMatch {
  readonly service: string | undefined;
  readonly method: string | undefined;
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
        service: m.rpc?.service === undefined || m.rpc.service === '' ? undefined : m.rpc.service,
        method: m.rpc?.method === undefined || m.rpc.method === '' ? undefined : m.rpc.method,
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
  for (let i = 0; i < m.headers.length; i++) if (!headerOk(m.headers[i] as CompiledValueMatch, req.headers)) return -1;
  return ((m.service?.length ?? 0) * 1000 + (m.method?.length ?? 0)) * 1000 + m.headers.length;
}

function bestGrpcRule<T>(r: CompiledGrpcRoute<T>, rpc: { service: string; method: string }, req: RouteRequest): number {
  let best = -1;
  let bestRule = -1;
  for (let i = 0; i < r.rules.length; i++) {
    const matches = r.rules[i] as readonly CompiledGrpcMatch[];
    let s = matches.length === 0 ? 0 : -1;
    for (let j = 0; j < matches.length; j++) {
      const ms = grpcMatchScore(matches[j] as CompiledGrpcMatch, rpc, req);
      if (ms > s) s = ms;
    }
    if (s > best) {
      best = s;
      bestRule = i;
    }
  }
  lastRule = bestRule;
  return best;
}

/** Selects the best gRPC route. Only POST requests to `/<service>/<method>` can match. */
export function selectGrpcRoute<T>(routes: readonly CompiledGrpcRoute<T>[], req: RouteRequest): RouteSelection<CompiledGrpcRoute<T>> | undefined {
  if (req.method !== 'POST') return undefined;
  const rpc = parseGrpcPath(req.path);
  if (rpc === undefined) return undefined;
  let bestHost = -1;
  let bestScore = -1;
  let found: CompiledGrpcRoute<T> | undefined;
  let foundRule = -1;
  for (let i = 0; i < routes.length; i++) {
    const r = routes[i] as CompiledGrpcRoute<T>;
    const hs = hostScore(r.hosts, req.host);
    if (hs < 0 || hs < bestHost) continue;
    const score = bestGrpcRule(r, rpc, req);
    if (score < 0) continue;
    if (hs > bestHost || score > bestScore) {
      bestHost = hs;
      bestScore = score;
      found = r;
      foundRule = lastRule;
    }
  }
  if (found === undefined) return undefined;
  const matches = found.rules[foundRule] as readonly CompiledGrpcMatch[];
  let matchIndex = matches.length === 0 ? -1 : 0;
  if (matches.length > 1) {
    let bestScore = -1;
    for (let j = 0; j < matches.length; j++) {
      const ms = grpcMatchScore(matches[j] as CompiledGrpcMatch, rpc, req);
      if (ms > bestScore) {
        bestScore = ms;
        matchIndex = j;
      }
    }
  }
  return { route: found, ruleIndex: foundRule, matchIndex };
}

/** Why a gRPC route did not match (for explain), or undefined when it matches. */
export function grpcRouteMismatch<T>(r: CompiledGrpcRoute<T>, req: RouteRequest): string | undefined {
  if (req.method !== 'POST') return `gRPC routes only match POST, not ${req.method}`;
  const rpc = parseGrpcPath(req.path);
  if (rpc === undefined) return `${req.path} is not a /<service>/<method> path`;
  if (hostScore(r.hosts, req.host) < 0) return `host "${req.host || '(none)'}" matches none of its hostnames`;
  return bestGrpcRule(r, rpc, req) < 0 ? `no rule matches ${rpc.service}/${rpc.method}` : undefined;
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
