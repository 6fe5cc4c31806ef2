/**
 * The core `InboundServer` <-> the `io.linkerd.proxy.inbound.Server` message (POLICY-SEMANTICS
 * §5.1, §5.2). `serverToWire` is what the controller sends; `serverFromWire` is what a proxy
 * accepts: it validates what upstream proxies require (a protocol, non-empty authorization
 * networks, an authentication, route metadata, set oneofs) and reports the first problem with its
 * field path instead of throwing.
 *
 * Representation choices (core values produced by the index round-trip exactly):
 * - Server labels carry `group`/`kind`/`name` of the Server or default policy; authorizations
 *   carry both the deprecated labels and `metadata`.
 * - Header values and header-match exact values are UTF-8 bytes on the wire.
 * - Redirect schemes `http`/`https` (any case) travel as registered values and decode to lower
 *   case; other schemes travel unregistered. Unset redirect host/port/status are `''`/`0`.
 * - gRPC routes have no redirect filter on the wire (the index rejects it); a failure injector's
 *   `status` is the gRPC `code`.
 * - `HttpLocalRateLimit` is not part of the core model: never sent, ignored when received.
 */
import {
  type Authorization,
  type ClientAuthentication,
  defaultMeta,
  type GrpcRoute,
  type GrpcRouteMatch,
  type Header,
  type HostMatch,
  type HttpRoute,
  type HttpRouteMatch,
  type InboundServer,
  isDefaultMeta,
  type Meta,
  type Network,
  POLICY_GROUP,
  type ProxyProtocol,
  type RouteFilter,
  type ValueMatch,
} from '../core/index.js';
import { MeshError } from '../shared/index.js';
import type { Duration } from './gen/google/protobuf/duration.js';
import type * as grpcRoutePb from './gen/grpc_route.js';
import type * as httpRoutePb from './gen/http_route.js';
import { type Headers, type HttpMethod, HttpMethod_Registered, httpMethod_RegisteredToJSON, type Scheme, Scheme_Registered } from './gen/http_types.js';
import type * as pb from './gen/inbound.js';
import type { Metadata } from './gen/meta.js';
import { ipNetFromWire, ipNetToWire } from './ip-wire.js';
import { type WireResult, wireError } from './wire-result.js';

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

const REGISTERED_METHODS: ReadonlyMap<string, HttpMethod_Registered> = new Map([
  ['GET', HttpMethod_Registered.GET],
  ['POST', HttpMethod_Registered.POST],
  ['PUT', HttpMethod_Registered.PUT],
  ['DELETE', HttpMethod_Registered.DELETE],
  ['PATCH', HttpMethod_Registered.PATCH],
  ['OPTIONS', HttpMethod_Registered.OPTIONS],
  ['CONNECT', HttpMethod_Registered.CONNECT],
  ['HEAD', HttpMethod_Registered.HEAD],
  ['TRACE', HttpMethod_Registered.TRACE],
]);

// === core -> wire ===

/** `io.linkerd.proxy.meta.Metadata` of a core name. */
export function metaToWire(meta: Meta): Metadata {
  if (isDefaultMeta(meta)) return { kind: { $case: 'default', value: meta.name } };
  return { kind: { $case: 'resource', value: { group: meta.group, kind: meta.kind, name: meta.name, namespace: '', section: '', port: 0 } } };
}

function labelsOf(meta: Meta): { [key: string]: string } {
  return { group: meta.group, kind: meta.kind, name: meta.name };
}

function authnToWire(a: ClientAuthentication): pb.Authn {
  switch (a.kind) {
    case 'unauthenticated':
      return { permit: { $case: 'unauthenticated', value: {} } };
    case 'tlsUnauthenticated':
      return { permit: { $case: 'meshTLS', value: { clients: { $case: 'unauthenticated', value: {} } } } };
    case 'tlsAuthenticated':
      return {
        permit: {
          $case: 'meshTLS',
          value: {
            clients: {
              $case: 'identities',
              value: { identities: a.identities.map((name) => ({ name })), suffixes: a.suffixes.map((parts) => ({ parts: [...parts] })) },
            },
          },
        },
      };
  }
}

function authzToWire(a: Authorization): pb.Authz {
  return {
    networks: a.networks.map((n) => ({ net: ipNetToWire(n.net), except: n.except.map(ipNetToWire) })),
    authentication: authnToWire(a.authentication),
    labels: labelsOf(a.meta),
    metadata: metaToWire(a.meta),
  };
}

function hostToWire(h: HostMatch): httpRoutePb.HostMatch {
  return h.kind === 'exact' ? { match: { $case: 'exact', value: h.value } } : { match: { $case: 'suffix', value: { reverseLabels: [...h.reverseLabels] } } };
}

function headerMatchToWire(m: ValueMatch): httpRoutePb.HeaderMatch {
  return { name: m.name, value: m.kind === 'exact' ? { $case: 'exact', value: utf8Encoder.encode(m.value) } : { $case: 'regex', value: m.value } };
}

function queryParamMatchToWire(m: ValueMatch): httpRoutePb.QueryParamMatch {
  return { name: m.name, value: { $case: m.kind, value: m.value } };
}

function methodToWire(method: string): HttpMethod {
  const registered = REGISTERED_METHODS.get(method);
  return { type: registered === undefined ? { $case: 'unregistered', value: method } : { $case: 'registered', value: registered } };
}

function schemeToWire(scheme: string): Scheme {
  const lower = scheme.toLowerCase();
  if (lower === 'http') return { type: { $case: 'registered', value: Scheme_Registered.HTTP } };
  if (lower === 'https') return { type: { $case: 'registered', value: Scheme_Registered.HTTPS } };
  return { type: { $case: 'unregistered', value: scheme } };
}

/** Unset (rather than an empty list) when there is nothing to add or set, as upstream. */
function headersToWire(hs: readonly Header[]): Headers | undefined {
  return hs.length === 0 ? undefined : { headers: hs.map((h) => ({ name: h.name, value: utf8Encoder.encode(h.value) })) };
}

function headerModifierToWire(f: Extract<RouteFilter, { kind: 'requestHeaderModifier' }>): httpRoutePb.RequestHeaderModifier {
  return { add: headersToWire(f.add), set: headersToWire(f.set), remove: [...f.remove] };
}

function httpFilterToWire(f: RouteFilter): pb.HttpRoute_Filter {
  switch (f.kind) {
    case 'requestHeaderModifier':
      return { kind: { $case: 'requestHeaderModifier', value: headerModifierToWire(f) } };
    case 'requestRedirect':
      return {
        kind: {
          $case: 'redirect',
          value: {
            scheme: f.scheme === undefined ? undefined : schemeToWire(f.scheme),
            host: f.host ?? '',
            path: f.path === undefined ? undefined : { replace: { $case: f.path.kind, value: f.path.value } },
            port: f.port ?? 0,
            status: f.status ?? 0,
          },
        },
      };
    case 'failureInjector':
      return { kind: { $case: 'failureInjector', value: { status: f.status, message: f.message, ratio: { ...f.ratio } } } };
  }
}

function grpcFilterToWire(f: RouteFilter): pb.GrpcRoute_Filter {
  switch (f.kind) {
    case 'requestHeaderModifier':
      return { kind: { $case: 'requestHeaderModifier', value: headerModifierToWire(f) } };
    case 'failureInjector':
      return { kind: { $case: 'failureInjector', value: { code: f.status, message: f.message, ratio: { ...f.ratio } } } };
    case 'requestRedirect':
      throw new MeshError('ERR_WIRE_UNREPRESENTABLE', 'a gRPC route cannot carry a requestRedirect filter');
  }
}

function httpMatchToWire(m: HttpRouteMatch): httpRoutePb.HttpRouteMatch {
  return {
    path: m.path === undefined ? undefined : { kind: { $case: m.path.kind, value: m.path.value } },
    headers: m.headers.map(headerMatchToWire),
    queryParams: m.queryParams.map(queryParamMatchToWire),
    method: m.method === undefined ? undefined : methodToWire(m.method),
  };
}

function grpcMatchToWire(m: GrpcRouteMatch): grpcRoutePb.GrpcRouteMatch {
  return {
    rpc: m.rpc === undefined ? undefined : { service: m.rpc.service ?? '', method: m.rpc.method ?? '' },
    headers: m.headers.map(headerMatchToWire),
  };
}

function httpRouteToWire(r: HttpRoute): pb.HttpRoute {
  return {
    metadata: metaToWire(r.meta),
    hosts: r.hosts.map(hostToWire),
    authorizations: r.authorizations.map(authzToWire),
    rules: r.rules.map((rule) => ({ matches: rule.matches.map(httpMatchToWire), filters: rule.filters.map(httpFilterToWire) })),
  };
}

function grpcRouteToWire(r: GrpcRoute): pb.GrpcRoute {
  return {
    metadata: metaToWire(r.meta),
    hosts: r.hosts.map(hostToWire),
    authorizations: r.authorizations.map(authzToWire),
    rules: r.rules.map((rule) => ({ matches: rule.matches.map(grpcMatchToWire), filters: rule.filters.map(grpcFilterToWire) })),
  };
}

function msToDuration(ms: number): Duration {
  const seconds = Math.floor(ms / 1000);
  return { seconds: BigInt(seconds), nanos: Math.round((ms - seconds * 1000) * 1_000_000) };
}

function protocolToWire(p: ProxyProtocol): pb.ProxyProtocol {
  switch (p.kind) {
    case 'detect':
      return { kind: { $case: 'detect', value: { timeout: msToDuration(p.timeoutMs), httpRoutes: p.httpRoutes.map(httpRouteToWire) } } };
    case 'http1':
      return { kind: { $case: 'http1', value: { routes: p.routes.map(httpRouteToWire) } } };
    case 'http2':
      return { kind: { $case: 'http2', value: { routes: p.routes.map(httpRouteToWire) } } };
    case 'grpc':
      return { kind: { $case: 'grpc', value: { routes: p.routes.map(grpcRouteToWire) } } };
    case 'opaque':
      return { kind: { $case: 'opaque', value: {} } };
    case 'tls':
      return { kind: { $case: 'tls', value: {} } };
  }
}

/**
 * The message the controller sends for a core server. Throws `MeshError` `ERR_WIRE_UNREPRESENTABLE`
 * only for values the index never produces (a redirect filter on a gRPC route).
 */
export function serverToWire(s: InboundServer): pb.Server {
  return { protocol: protocolToWire(s.protocol), serverIps: [], authorizations: s.authorizations.map(authzToWire), labels: labelsOf(s.meta) };
}

// === wire -> core ===

function all<A, B>(xs: readonly A[], path: string, f: (x: A, path: string) => WireResult<B>): WireResult<B[]> {
  const out: B[] = [];
  for (let i = 0; i < xs.length; i++) {
    const r = f(xs[i] as A, `${path}[${i}]`);
    if (!r.ok) return r;
    out.push(r.value);
  }
  return { ok: true, value: out };
}

function utf8(bytes: Uint8Array, path: string): WireResult<string> {
  try {
    return { ok: true, value: utf8Decoder.decode(bytes) };
  } catch {
    return wireError(`${path}: not valid UTF-8`);
  }
}

/** Upstream proxies name objects from labels when `metadata` is absent, with per-kind defaults. */
function metaFromLabels(labels: { [key: string]: string }, defaultKind: string, path: string): WireResult<Meta> {
  const name = labels.name;
  if (name === undefined || name === '') return wireError(`${path}: missing "name" label`);
  return { ok: true, value: { group: labels.group ?? POLICY_GROUP, kind: labels.kind ?? defaultKind, name } };
}

function metaFromWire(m: Metadata | undefined, path: string): WireResult<Meta> {
  const kind = m?.kind;
  switch (kind?.$case) {
    case 'default':
      if (kind.value === '') return wireError(`${path}.default: empty name`);
      return { ok: true, value: defaultMeta(kind.value) };
    case 'resource': {
      const r = kind.value;
      if (r.name === '' || r.kind === '') return wireError(`${path}.resource: kind and name must be set`);
      return { ok: true, value: { group: r.group, kind: r.kind, name: r.name } };
    }
    case undefined:
      return wireError(`${path}: not set`);
  }
}

function networkFromWire(n: pb.Network, path: string): WireResult<Network> {
  const net = ipNetFromWire(n.net);
  if (!net.ok) return wireError(`${path}.net: ${net.message}`);
  const except = all(n.except, `${path}.except`, (e, p) => {
    const r = ipNetFromWire(e);
    return r.ok ? r : wireError(`${p}: ${r.message}`);
  });
  if (!except.ok) return except;
  return { ok: true, value: { net: net.value, except: except.value } };
}

function meshTlsFromWire(m: pb.Authn_PermitMeshTLS, path: string): WireResult<ClientAuthentication> {
  const clients = m.clients;
  switch (clients?.$case) {
    case 'unauthenticated':
      return { ok: true, value: { kind: 'tlsUnauthenticated' } };
    case 'identities':
      return {
        ok: true,
        value: { kind: 'tlsAuthenticated', identities: clients.value.identities.map((i) => i.name), suffixes: clients.value.suffixes.map((s) => s.parts) },
      };
    case undefined:
      return wireError(`${path}: clients not set`);
  }
}

function authnFromWire(a: pb.Authn | undefined, path: string): WireResult<ClientAuthentication> {
  const permit = a?.permit;
  switch (permit?.$case) {
    case 'unauthenticated':
      return { ok: true, value: { kind: 'unauthenticated' } };
    case 'meshTLS':
      return meshTlsFromWire(permit.value, `${path}.meshTLS`);
    case undefined:
      return wireError(`${path}: not set`);
  }
}

function authzFromWire(a: pb.Authz, path: string): WireResult<Authorization> {
  if (a.networks.length === 0) return wireError(`${path}.networks: must not be empty`);
  const networks = all(a.networks, `${path}.networks`, networkFromWire);
  if (!networks.ok) return networks;
  const authentication = authnFromWire(a.authentication, `${path}.authentication`);
  if (!authentication.ok) return authentication;
  const meta = a.metadata === undefined ? metaFromLabels(a.labels, 'serverauthorization', `${path}.labels`) : metaFromWire(a.metadata, `${path}.metadata`);
  if (!meta.ok) return meta;
  return { ok: true, value: { meta: meta.value, networks: networks.value, authentication: authentication.value } };
}

function hostFromWire(h: httpRoutePb.HostMatch, path: string): WireResult<HostMatch> {
  const m = h.match;
  switch (m?.$case) {
    case 'exact':
      return { ok: true, value: { kind: 'exact', value: m.value } };
    case 'suffix':
      return { ok: true, value: { kind: 'suffix', reverseLabels: m.value.reverseLabels } };
    case undefined:
      return wireError(`${path}: match not set`);
  }
}

function headerMatchFromWire(m: httpRoutePb.HeaderMatch, path: string): WireResult<ValueMatch> {
  const v = m.value;
  switch (v?.$case) {
    case 'exact': {
      const value = utf8(v.value, `${path}.exact`);
      return value.ok ? { ok: true, value: { name: m.name, kind: 'exact', value: value.value } } : value;
    }
    case 'regex':
      return { ok: true, value: { name: m.name, kind: 'regex', value: v.value } };
    case undefined:
      return wireError(`${path}: value not set`);
  }
}

function queryParamMatchFromWire(m: httpRoutePb.QueryParamMatch, path: string): WireResult<ValueMatch> {
  const v = m.value;
  if (v === undefined) return wireError(`${path}: value not set`);
  return { ok: true, value: { name: m.name, kind: v.$case, value: v.value } };
}

function methodFromWire(m: HttpMethod, path: string): WireResult<string> {
  const t = m.type;
  switch (t?.$case) {
    case 'registered': {
      const name = httpMethod_RegisteredToJSON(t.value);
      return name === 'UNRECOGNIZED' ? wireError(`${path}.registered: unknown method ${t.value}`) : { ok: true, value: name };
    }
    case 'unregistered':
      return t.value === '' ? wireError(`${path}.unregistered: empty`) : { ok: true, value: t.value };
    case undefined:
      return wireError(`${path}: type not set`);
  }
}

function httpMatchFromWire(m: httpRoutePb.HttpRouteMatch, path: string): WireResult<HttpRouteMatch> {
  if (m.path !== undefined && m.path.kind === undefined) return wireError(`${path}.path: kind not set`);
  const headers = all(m.headers, `${path}.headers`, headerMatchFromWire);
  if (!headers.ok) return headers;
  const queryParams = all(m.queryParams, `${path}.queryParams`, queryParamMatchFromWire);
  if (!queryParams.ok) return queryParams;
  const method = m.method === undefined ? undefined : methodFromWire(m.method, `${path}.method`);
  if (method !== undefined && !method.ok) return method;
  const p = m.path?.kind;
  return {
    ok: true,
    value: {
      ...(p === undefined ? {} : { path: { kind: p.$case, value: p.value } }),
      headers: headers.value,
      queryParams: queryParams.value,
      ...(method === undefined ? {} : { method: method.value }),
    },
  };
}

function grpcMatchFromWire(m: grpcRoutePb.GrpcRouteMatch, path: string): WireResult<GrpcRouteMatch> {
  const headers = all(m.headers, `${path}.headers`, headerMatchFromWire);
  if (!headers.ok) return headers;
  const rpc = m.rpc;
  return {
    ok: true,
    value: {
      ...(rpc === undefined ? {} : { rpc: { ...(rpc.service === '' ? {} : { service: rpc.service }), ...(rpc.method === '' ? {} : { method: rpc.method }) } }),
      headers: headers.value,
    },
  };
}

function headersFromWire(h: Headers | undefined, path: string): WireResult<Header[]> {
  return all(h?.headers ?? [], `${path}.headers`, (x, p) => {
    const value = utf8(x.value, `${p}.value`);
    return value.ok ? { ok: true, value: { name: x.name, value: value.value } } : value;
  });
}

function headerModifierFromWire(m: httpRoutePb.RequestHeaderModifier, path: string): WireResult<RouteFilter> {
  const add = headersFromWire(m.add, `${path}.add`);
  if (!add.ok) return add;
  const set = headersFromWire(m.set, `${path}.set`);
  if (!set.ok) return set;
  return { ok: true, value: { kind: 'requestHeaderModifier', add: add.value, set: set.value, remove: m.remove } };
}

function ratioFromWire(r: httpRoutePb.Ratio | undefined, path: string): WireResult<{ numerator: number; denominator: number }> {
  // An unset ratio fails every request (upstream's comment on the field).
  if (r === undefined) return { ok: true, value: { numerator: 1, denominator: 1 } };
  if (r.denominator === 0) return wireError(`${path}.denominator: must not be zero`);
  return { ok: true, value: { numerator: r.numerator, denominator: r.denominator } };
}

function schemeFromWire(s: Scheme, path: string): WireResult<string> {
  const t = s.type;
  switch (t?.$case) {
    case 'registered':
      if (t.value === Scheme_Registered.HTTP) return { ok: true, value: 'http' };
      if (t.value === Scheme_Registered.HTTPS) return { ok: true, value: 'https' };
      return wireError(`${path}.registered: unknown scheme ${t.value}`);
    case 'unregistered':
      return { ok: true, value: t.value };
    case undefined:
      return wireError(`${path}: type not set`);
  }
}

function redirectFromWire(r: httpRoutePb.RequestRedirect, path: string): WireResult<RouteFilter> {
  const scheme = r.scheme === undefined ? undefined : schemeFromWire(r.scheme, `${path}.scheme`);
  if (scheme !== undefined && !scheme.ok) return scheme;
  const replace = r.path?.replace;
  if (r.path !== undefined && replace === undefined) return wireError(`${path}.path: replace not set`);
  return {
    ok: true,
    value: {
      kind: 'requestRedirect',
      ...(scheme === undefined ? {} : { scheme: scheme.value }),
      ...(r.host === '' ? {} : { host: r.host }),
      ...(replace === undefined ? {} : { path: { kind: replace.$case, value: replace.value } }),
      ...(r.port === 0 ? {} : { port: r.port }),
      ...(r.status === 0 ? {} : { status: r.status }),
    },
  };
}

function failureInjectorFromWire(
  status: number,
  message: string,
  ratio: httpRoutePb.Ratio | undefined,
  path: string,
): WireResult<Extract<RouteFilter, { kind: 'failureInjector' }>> {
  const r = ratioFromWire(ratio, `${path}.ratio`);
  return r.ok ? { ok: true, value: { kind: 'failureInjector', status, message, ratio: r.value } } : r;
}

function httpFilterFromWire(f: pb.HttpRoute_Filter, path: string): WireResult<RouteFilter> {
  const k = f.kind;
  switch (k?.$case) {
    case 'requestHeaderModifier':
      return headerModifierFromWire(k.value, `${path}.requestHeaderModifier`);
    case 'redirect':
      return redirectFromWire(k.value, `${path}.redirect`);
    case 'failureInjector':
      return failureInjectorFromWire(k.value.status, k.value.message, k.value.ratio, `${path}.failureInjector`);
    case undefined:
      return wireError(`${path}: kind not set`);
  }
}

function grpcFilterFromWire(f: pb.GrpcRoute_Filter, path: string): WireResult<RouteFilter> {
  const k = f.kind;
  switch (k?.$case) {
    case 'requestHeaderModifier':
      return headerModifierFromWire(k.value, `${path}.requestHeaderModifier`);
    case 'failureInjector':
      return failureInjectorFromWire(k.value.code, k.value.message, k.value.ratio, `${path}.failureInjector`);
    case undefined:
      return wireError(`${path}: kind not set`);
  }
}

/** Fields shared by HTTP and gRPC routes; only matches and filters differ. */
function routeFromWire<M, F, CM>(
  r: { metadata?: Metadata | undefined; hosts: httpRoutePb.HostMatch[]; authorizations: pb.Authz[]; rules: { matches: M[]; filters: F[] }[] },
  path: string,
  matchFromWire: (m: M, path: string) => WireResult<CM>,
  filterFromWire: (f: F, path: string) => WireResult<RouteFilter>,
): WireResult<{ meta: Meta; hosts: HostMatch[]; authorizations: Authorization[]; rules: { matches: CM[]; filters: RouteFilter[] }[] }> {
  const meta = metaFromWire(r.metadata, `${path}.metadata`);
  if (!meta.ok) return meta;
  const hosts = all(r.hosts, `${path}.hosts`, hostFromWire);
  if (!hosts.ok) return hosts;
  const authorizations = all(r.authorizations, `${path}.authorizations`, authzFromWire);
  if (!authorizations.ok) return authorizations;
  const rules = all(r.rules, `${path}.rules`, (rule, p) => {
    const matches = all(rule.matches, `${p}.matches`, matchFromWire);
    if (!matches.ok) return matches;
    const filters = all(rule.filters, `${p}.filters`, filterFromWire);
    if (!filters.ok) return filters;
    return { ok: true, value: { matches: matches.value, filters: filters.value } };
  });
  if (!rules.ok) return rules;
  return { ok: true, value: { meta: meta.value, hosts: hosts.value, authorizations: authorizations.value, rules: rules.value } };
}

const httpRouteFromWire = (r: pb.HttpRoute, path: string): WireResult<HttpRoute> => routeFromWire(r, path, httpMatchFromWire, httpFilterFromWire);
const grpcRouteFromWire = (r: pb.GrpcRoute, path: string): WireResult<GrpcRoute> => routeFromWire(r, path, grpcMatchFromWire, grpcFilterFromWire);

function durationToMs(d: Duration | undefined, path: string): WireResult<number> {
  if (d === undefined) return wireError(`${path}: not set`);
  const ms = Number(d.seconds) * 1000 + Math.trunc(d.nanos / 1_000_000);
  if (d.seconds < 0n || d.nanos < 0 || !Number.isSafeInteger(ms)) return wireError(`${path}: invalid duration`);
  return { ok: true, value: ms };
}

function protocolFromWire(p: pb.ProxyProtocol | undefined, path: string): WireResult<ProxyProtocol> {
  const k = p?.kind;
  switch (k?.$case) {
    case 'detect': {
      const timeoutMs = durationToMs(k.value.timeout, `${path}.detect.timeout`);
      if (!timeoutMs.ok) return timeoutMs;
      const httpRoutes = all(k.value.httpRoutes, `${path}.detect.httpRoutes`, httpRouteFromWire);
      return httpRoutes.ok ? { ok: true, value: { kind: 'detect', timeoutMs: timeoutMs.value, httpRoutes: httpRoutes.value } } : httpRoutes;
    }
    case 'http1':
    case 'http2': {
      const routes = all(k.value.routes, `${path}.${k.$case}.routes`, httpRouteFromWire);
      return routes.ok ? { ok: true, value: { kind: k.$case, routes: routes.value } } : routes;
    }
    case 'grpc': {
      const routes = all(k.value.routes, `${path}.grpc.routes`, grpcRouteFromWire);
      return routes.ok ? { ok: true, value: { kind: 'grpc', routes: routes.value } } : routes;
    }
    case 'opaque':
      return { ok: true, value: { kind: 'opaque' } };
    case 'tls':
      return { ok: true, value: { kind: 'tls' } };
    case undefined:
      return wireError(`${path}: kind not set`);
  }
}

/** Decodes and validates a `Server` message for the proxy. */
export function serverFromWire(m: pb.Server): WireResult<InboundServer> {
  const meta = metaFromLabels(m.labels, 'server', 'labels');
  if (!meta.ok) return meta;
  const protocol = protocolFromWire(m.protocol, 'protocol');
  if (!protocol.ok) return protocol;
  const authorizations = all(m.authorizations, 'authorizations', authzFromWire);
  if (!authorizations.ok) return authorizations;
  return { ok: true, value: { meta: meta.value, protocol: protocol.value, authorizations: authorizations.value } };
}
