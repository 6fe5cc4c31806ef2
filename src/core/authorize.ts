/**
 * The decision engine. One `InboundServer` is compiled once (`compileServer`) and then every
 * connection and request is decided against the compiled form. The proxy calls these functions on
 * live traffic; `ward explain` and `ward test` call them on the index's output, so the CLI says
 * what the proxy does.
 *
 * Evaluation (POLICY-SEMANTICS §4.5): the server list is the controller's authorizations followed
 * by the proxy-added `default:localhost`; a routed request sees the route's authorizations first,
 * then the server list. The first authorization whose networks contain the client IP and whose
 * authentication the client satisfies is the permit.
 */

import { isUriIdentity } from './identity-name.js';
import { type ParsedIp, parseIp } from './ip.js';
import {
  type Authorization,
  type ClientAuthentication,
  defaultMeta,
  httpRoutesOf,
  type InboundServer,
  type Meta,
  type Network,
  type PathMatch,
  type RouteFilter,
} from './model.js';
import { NetworkSet } from './network-match.js';
import {
  type CompiledGrpcRoute,
  type CompiledHttpTable,
  compileGrpcRoutes,
  compileHttpRoutes,
  normalizeHost,
  type RouteRequest,
  selectGrpcRoute,
  selectHttpRoute,
} from './route-match.js';

/** The TLS state of an inbound connection as the proxy sees it (§4.3). */
export type TlsState =
  | { readonly kind: 'none'; readonly reason: 'no_tls_from_remote' | 'port_skipped' | 'loopback' | 'disabled' }
  /** Mesh TLS terminated by the proxy; `clientId` absent when the client sent no certificate. */
  | { readonly kind: 'established'; readonly clientId?: string | undefined }
  /** TLS with another SNI, passed through to the application. */
  | { readonly kind: 'passthrough'; readonly sni: string };

/** The facts about a client that authorization depends on, fixed for a connection. */
export interface ClientInfo {
  readonly ip: ParsedIp;
  readonly tls: TlsState;
}

/** One HTTP request as the engine needs it. */
export interface RequestInfo {
  readonly method: string;
  /** Request target: path with optional `?query`. */
  readonly path: string;
  /** `:authority` (HTTP/2) or the Host header; falls back to `headers.host`. */
  readonly authority?: string | undefined;
  /** Headers by lower-case name, as node's `IncomingHttpHeaders`. */
  readonly headers: Readonly<Record<string, string | readonly string[] | undefined>>;
}

/** How a denial looks to the client. */
export type DenyKind = 'http403' | 'http404' | 'grpc7' | 'grpc5' | 'tcp-refuse' | 'http500';

/** A permit: which authorization admitted the client, on which route, and whether only by audit. */
export interface Permit {
  readonly allowed: true;
  readonly level: 'http' | 'tcp';
  readonly server: Meta;
  readonly route: Meta | undefined;
  readonly authz: Meta;
  /** True when the permit came from the `audit` authorization: would be denied otherwise. */
  readonly isAudit: boolean;
  /**
   * HTTP permits: the matched rule's filters, to apply after authorization (§4.10); the policy's
   * own array, never copied. Absent for connection permits.
   */
  readonly filters?: readonly RouteFilter[];
  /** HTTP permits on HTTP routes: the path match of the rule's best match (a redirect's prefix replacement needs it). */
  readonly pathMatch?: PathMatch | undefined;
}

/** A denial, with the kind of response the client gets. */
export interface Deny {
  readonly allowed: false;
  readonly level: 'http' | 'tcp';
  readonly kind: DenyKind;
  readonly server: Meta;
  readonly route: Meta | undefined;
  /** Machine-readable reason (`l5d-proxy-error`). */
  readonly reason: string;
}

/** The outcome of authorizing a connection or a request. */
export type Decision = Permit | Deny;

/** An authorization compiled for matching. */
export interface CompiledAuthz {
  readonly meta: Meta;
  readonly authz: Authorization;
  readonly isAudit: boolean;
  readonly networks: NetworkSet;
  /** 0 unauthenticated, 1 TLS without identity, 2 TLS with one of the identities. */
  readonly authn: 0 | 1 | 2;
  readonly identities: ReadonlySet<string>;
  /** `.a.b` forms of suffix matches; '' stands for "any DNS-like identity". */
  readonly suffixes: readonly string[];
}

/** What each compiled route carries: the full authorization list for requests on it. */
interface RouteData {
  readonly authzs: readonly CompiledAuthz[];
}

/** A server compiled for decisions. */
export interface CompiledServer {
  readonly server: InboundServer;
  /** Server authorizations followed by `default:localhost`. */
  readonly authzs: readonly CompiledAuthz[];
  readonly httpRoutes: CompiledHttpTable<RouteData> | undefined;
  readonly grpcRoutes: readonly CompiledGrpcRoute<RouteData>[] | undefined;
  /** Set when the policy is unusable: every request gets 500 and connections are refused. */
  readonly invalid: string | undefined;
}

/** The authorization the proxy adds to every server: plaintext from the loopback addresses. */
export const LOCALHOST_AUTHZ: Authorization = {
  meta: defaultMeta('localhost'),
  networks: [
    { net: { ip: '127.0.0.1', prefixLen: 32 }, except: [] },
    { net: { ip: '::1', prefixLen: 128 }, except: [] },
  ],
  authentication: { kind: 'unauthenticated' },
};

function authnCode(a: ClientAuthentication): 0 | 1 | 2 {
  switch (a.kind) {
    case 'unauthenticated':
      return 0;
    case 'tlsUnauthenticated':
      return 1;
    case 'tlsAuthenticated':
      return 2;
  }
}

/** Compiles one authorization. */
export function compileAuthz(authz: Authorization): CompiledAuthz {
  const a = authz.authentication;
  return {
    meta: authz.meta,
    authz,
    isAudit: authz.meta.kind === 'default' && authz.meta.name === 'audit',
    networks: new NetworkSet(authz.networks),
    authn: authnCode(a),
    identities: new Set(a.kind === 'tlsAuthenticated' ? a.identities : []),
    suffixes: a.kind === 'tlsAuthenticated' ? a.suffixes.map((parts) => (parts.length === 0 ? '' : `.${parts.join('.')}`)) : [],
  };
}

const COMPILED_LOCALHOST = compileAuthz(LOCALHOST_AUTHZ);

/** Options of {@link compileServer}. */
export interface CompileServerOptions {
  /**
   * The proxy-added `default:localhost` authorization, compiled (default: 127.0.0.1 and ::1). Local
   * mode narrows it to the pod's own address, since every pod shares the host's loopback.
   */
  readonly localhost?: CompiledAuthz;
}

/** A `default:localhost` authorization for the given networks (see {@link CompileServerOptions}). */
export function localhostAuthz(networks: readonly Network[]): CompiledAuthz {
  return compileAuthz({ ...LOCALHOST_AUTHZ, networks: [...networks] });
}

function invalidReason(authzs: readonly Authorization[]): string | undefined {
  for (const a of authzs) {
    if (a.networks.length === 0) return `authorization ${a.meta.kind}/${a.meta.name} has no networks`;
  }
  return undefined;
}

/**
 * Compiles a server once per policy update. Never throws: a policy the proxy cannot use (an
 * authorization without networks, a regex that does not compile) yields an `invalid` server
 * that fails closed.
 */
export function compileServer(server: InboundServer, opts?: CompileServerOptions): CompiledServer {
  const serverAuthzs = [...server.authorizations.map(compileAuthz), opts?.localhost ?? COMPILED_LOCALHOST];
  const routeData = (r: { authorizations: readonly Authorization[] }): RouteData => ({
    authzs: r.authorizations.length === 0 ? serverAuthzs : [...r.authorizations.map(compileAuthz), ...serverAuthzs],
  });
  let invalid = invalidReason(server.authorizations);
  let httpRoutes: CompiledHttpTable<RouteData> | undefined;
  let grpcRoutes: CompiledGrpcRoute<RouteData>[] | undefined;
  try {
    const http = httpRoutesOf(server.protocol);
    if (http !== undefined) {
      httpRoutes = compileHttpRoutes(http, routeData);
      for (const r of http) invalid ??= invalidReason(r.authorizations);
    }
    if (server.protocol.kind === 'grpc') {
      grpcRoutes = compileGrpcRoutes(server.protocol.routes, routeData);
      for (const r of server.protocol.routes) invalid ??= invalidReason(r.authorizations);
    }
  } catch (e) {
    invalid ??= `route does not compile: ${(e as Error).message}`;
  }
  return { server, authzs: serverAuthzs, httpRoutes, grpcRoutes, invalid };
}

/** True when the client's identity satisfies `a`'s identity list (DNS suffixes never match URIs). */
function identityOk(a: CompiledAuthz, id: string, isUri: boolean): boolean {
  if (a.identities.has(id)) return true;
  if (isUri) return false;
  const suffixes = a.suffixes;
  for (let i = 0; i < suffixes.length; i++) {
    const s = suffixes[i] as string;
    if (s === '' || id.endsWith(s)) return true;
  }
  return false;
}

/** Why the client fails `a`'s authentication, or undefined when it passes. */
export function authenticationMismatch(a: CompiledAuthz, tls: TlsState): string | undefined {
  if (a.authn === 0) return undefined;
  if (tls.kind !== 'established') {
    const what = tls.kind === 'passthrough' ? `TLS passthrough (SNI ${tls.sni}) is not mesh TLS` : 'the connection is not mesh TLS';
    return `requires mesh TLS, but ${what}`;
  }
  if (a.authn === 1) return undefined;
  if (tls.clientId === undefined) return 'requires a client identity, but the client sent no certificate';
  if (identityOk(a, tls.clientId, isUriIdentity(tls.clientId))) return undefined;
  if (isUriIdentity(tls.clientId) && a.suffixes.length > 0 && a.identities.size === 0) {
    return `identity ${tls.clientId} is a URI; wildcard and suffix matches only cover DNS-like identities`;
  }
  return `identity ${tls.clientId} is not in the allowed identities`;
}

/** The first authorization in `authzs` the client satisfies. Client facts are derived once per call. */
function firstMatch(authzs: readonly CompiledAuthz[], client: ClientInfo): CompiledAuthz | undefined {
  const tls = client.tls;
  const established = tls.kind === 'established';
  const id = established ? tls.clientId : undefined;
  const isUri = id !== undefined && isUriIdentity(id);
  const ip = client.ip;
  for (let i = 0; i < authzs.length; i++) {
    const a = authzs[i] as CompiledAuthz;
    if (!a.networks.has(ip)) continue;
    if (a.authn === 0) return a;
    if (!established) continue;
    if (a.authn === 1) return a;
    if (id !== undefined && identityOk(a, id, isUri)) return a;
  }
  return undefined;
}

/**
 * Authorizes a connection against the server authorizations (+ localhost). Used for opaque, TLS
 * and non-HTTP traffic; HTTP traffic is authorized per request instead.
 */
export function authorizeConnection(cs: CompiledServer, client: ClientInfo): Decision {
  const server = cs.server.meta;
  if (cs.invalid !== undefined) {
    return { allowed: false, level: 'tcp', kind: 'tcp-refuse', server, route: undefined, reason: `invalid policy: ${cs.invalid}` };
  }
  const a = firstMatch(cs.authzs, client);
  if (a === undefined) {
    return { allowed: false, level: 'tcp', kind: 'tcp-refuse', server, route: undefined, reason: 'unauthorized connection on server' };
  }
  return { allowed: true, level: 'tcp', server, route: undefined, authz: a.meta, isAudit: a.isAudit };
}

/** True when a request carries gRPC (`content-type: application/grpc...`). */
export function isGrpcRequest(req: RequestInfo): boolean {
  const ct = req.headers['content-type'];
  const v = typeof ct === 'string' ? ct : ct?.[0];
  return v?.startsWith('application/grpc') === true;
}

/** Builds the matcher view of a request (path/query split, host normalised). */
export function routeRequestOf(req: RequestInfo): RouteRequest {
  const q = req.path.indexOf('?');
  const host = req.authority ?? req.headers.host;
  return {
    method: req.method.toUpperCase(),
    path: q === -1 ? req.path : req.path.slice(0, q),
    query: q === -1 ? '' : req.path.slice(q + 1),
    host: normalizeHost(typeof host === 'string' ? host : host?.[0]),
    headers: req.headers,
  };
}

/** The route chosen for a request, with its authorization list (for explain) and the matched rule's filters. */
export interface SelectedRoute {
  readonly meta: Meta;
  readonly ruleIndex: number;
  readonly authzs: readonly CompiledAuthz[];
  readonly filters: readonly RouteFilter[];
  /** The path match of the rule's best match (HTTP routes; undefined for gRPC routes and match-all rules). */
  readonly pathMatch: PathMatch | undefined;
}

const NO_FILTERS: readonly RouteFilter[] = Object.freeze([]);

/** Selects the route for a request on an HTTP-capable server; undefined when none matches. */
export function selectRoute(cs: CompiledServer, rr: RouteRequest): SelectedRoute | undefined {
  if (cs.grpcRoutes !== undefined) {
    const sel = selectGrpcRoute(cs.grpcRoutes, rr);
    if (sel === undefined) return undefined;
    const rule = sel.route.route.rules[sel.ruleIndex];
    return { meta: sel.route.route.meta, ruleIndex: sel.ruleIndex, authzs: sel.route.data.authzs, filters: rule?.filters ?? NO_FILTERS, pathMatch: undefined };
  }
  if (cs.httpRoutes !== undefined) {
    const sel = selectHttpRoute(cs.httpRoutes, rr);
    if (sel === undefined) return undefined;
    const rule = sel.route.route.rules[sel.ruleIndex];
    return {
      meta: sel.route.route.meta,
      ruleIndex: sel.ruleIndex,
      authzs: sel.route.data.authzs,
      filters: rule?.filters ?? NO_FILTERS,
      pathMatch: rule?.matches[sel.matchIndex]?.path,
    };
  }
  return undefined;
}

/**
 * Authorizes one HTTP request (§4.5-4.7). No route: 404 / grpc-status 5. Route but no
 * authorization: 403 / grpc-status 7. On a port that does not speak HTTP (opaque, TLS) the
 * request is just bytes, so the connection decision applies.
 */
export function authorizeRequest(cs: CompiledServer, client: ClientInfo, req: RequestInfo): Decision {
  if (cs.httpRoutes === undefined && cs.grpcRoutes === undefined) return authorizeConnection(cs, client);
  const server = cs.server.meta;
  const grpc = isGrpcRequest(req);
  if (cs.invalid !== undefined) {
    return { allowed: false, level: 'http', kind: 'http500', server, route: undefined, reason: `invalid policy: ${cs.invalid}` };
  }
  // Selected here rather than through selectRoute: no intermediate object per request.
  const rr = routeRequestOf(req);
  if (cs.grpcRoutes !== undefined) {
    const sel = selectGrpcRoute(cs.grpcRoutes, rr);
    if (sel === undefined) return routeNotFound(server, grpc);
    const r = sel.route;
    return decideOnRoute(server, grpc, client, r.route.meta, r.data.authzs, r.route.rules[sel.ruleIndex]?.filters ?? NO_FILTERS, undefined);
  }
  const sel = selectHttpRoute(cs.httpRoutes as CompiledHttpTable<RouteData>, rr);
  if (sel === undefined) return routeNotFound(server, grpc);
  const r = sel.route;
  const rule = r.route.rules[sel.ruleIndex];
  return decideOnRoute(server, grpc, client, r.route.meta, r.data.authzs, rule?.filters ?? NO_FILTERS, rule?.matches[sel.matchIndex]?.path);
}

function routeNotFound(server: Meta, grpc: boolean): Deny {
  return { allowed: false, level: 'http', kind: grpc ? 'grpc5' : 'http404', server, route: undefined, reason: 'no route found for request' };
}

/** The decision for a request on a selected route: its first matching authorization, or 403 / grpc-status 7. */
function decideOnRoute(
  server: Meta,
  grpc: boolean,
  client: ClientInfo,
  route: Meta,
  authzs: readonly CompiledAuthz[],
  filters: readonly RouteFilter[],
  pathMatch: PathMatch | undefined,
): Decision {
  const a = firstMatch(authzs, client);
  if (a === undefined) {
    return { allowed: false, level: 'http', kind: grpc ? 'grpc7' : 'http403', server, route, reason: 'unauthorized request on route' };
  }
  return { allowed: true, level: 'http', server, route, authz: a.meta, isAudit: a.isAudit, filters, pathMatch };
}

/**
 * Re-checks an open TCP connection after a policy update (§4.8): it survives only if some server
 * authorization still admits it and the port did not become an HTTP-only port.
 */
export function reauthorizeConnection(cs: CompiledServer, client: ClientInfo): Decision {
  const k = cs.server.protocol.kind;
  if (k === 'http1' || k === 'http2' || k === 'grpc') {
    return {
      allowed: false,
      level: 'tcp',
      kind: 'tcp-refuse',
      server: cs.server.meta,
      route: undefined,
      reason: `connection terminated due to policy change: the port's protocol is now ${k}`,
    };
  }
  const d = authorizeConnection(cs, client);
  return d.allowed ? d : { ...d, reason: 'connection terminated due to policy change' };
}

/** Convenience for callers with text addresses: parses the IP or returns undefined. */
export function clientInfo(ip: string, tls: TlsState): ClientInfo | undefined {
  const parsed = parseIp(ip);
  return parsed === undefined ? undefined : { ip: parsed, tls };
}

/** The HTTP status of a denial a proxy answers itself: 403, 404 or 500. */
export function httpStatusOf(d: Deny): number {
  switch (d.kind) {
    case 'http403':
    case 'grpc7':
      return 403;
    case 'http404':
    case 'grpc5':
      return 404;
    case 'http500':
    case 'tcp-refuse':
      return 500;
  }
}
