/**
 * The canonical proto3 JSON mapping of `io.linkerd.proxy.inbound.Server` (POLICY-SEMANTICS §5):
 * lowerCamelCase field names, default values omitted, oneofs as their set field, `Duration` as
 * `"10s"`, 64-bit integers as strings, bytes as base64. This is what `ward diagnostics policy`
 * prints and what the controller's JSON API returns.
 */
import {
  type Authorization,
  type GrpcRoute,
  type HostMatch,
  type HttpRoute,
  type InboundServer,
  type IpNet,
  type Meta,
  netAddress,
  type RouteFilter,
  type ValueMatch,
} from '../core/index.js';

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const REGISTERED_METHODS = new Set(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'CONNECT', 'HEAD', 'TRACE']);

/** Adds `key: value` unless the value is a proto3 default (empty string/array/object-less). */
function put(obj: { [k: string]: Json }, key: string, value: Json | undefined): void {
  if (value === undefined || value === '' || value === 0 || value === false) return;
  if (Array.isArray(value) && value.length === 0) return;
  obj[key] = value;
}

function ipNetwork(n: IpNet): Json {
  const ip = netAddress(n);
  let addr: Json;
  // A set oneof member is serialised even when it holds the default value.
  if (ip.v === 4) addr = { ipv4: ip.w0 };
  else {
    const hi = (BigInt(ip.w[0] as number) << 32n) | BigInt(ip.w[1] as number);
    const lo = (BigInt(ip.w[2] as number) << 32n) | BigInt(ip.w[3] as number);
    const v6: { [k: string]: Json } = {};
    put(v6, 'first', hi === 0n ? undefined : hi.toString());
    put(v6, 'last', lo === 0n ? undefined : lo.toString());
    addr = { ipv6: v6 };
  }
  const out: { [k: string]: Json } = { ip: addr };
  put(out, 'prefixLen', n.prefixLen);
  return out;
}

function labels(meta: Meta): Json {
  return { group: meta.group, kind: meta.kind, name: meta.name };
}

/** `io.linkerd.proxy.meta.Metadata`. */
export function metadataJson(meta: Meta): Json {
  if (meta.kind === 'default') return { default: meta.name };
  const r: { [k: string]: Json } = {};
  put(r, 'group', meta.group);
  put(r, 'kind', meta.kind);
  put(r, 'name', meta.name);
  return { resource: r };
}

function authzJson(a: Authorization): Json {
  const out: { [k: string]: Json } = {};
  put(
    out,
    'networks',
    a.networks.map((n) => {
      const o: { [k: string]: Json } = { net: ipNetwork(n.net) };
      put(o, 'except', n.except.map(ipNetwork));
      return o;
    }),
  );
  const authn = a.authentication;
  switch (authn.kind) {
    case 'unauthenticated':
      out.authentication = { unauthenticated: {} };
      break;
    case 'tlsUnauthenticated':
      out.authentication = { meshTLS: { unauthenticated: {} } };
      break;
    case 'tlsAuthenticated': {
      const ids: { [k: string]: Json } = {};
      put(
        ids,
        'identities',
        authn.identities.map((name) => ({ name })),
      );
      put(
        ids,
        'suffixes',
        authn.suffixes.map((parts) => (parts.length === 0 ? {} : { parts: [...parts] })),
      );
      out.authentication = { meshTLS: { identities: ids } };
      break;
    }
  }
  out.labels = labels(a.meta);
  out.metadata = metadataJson(a.meta);
  return out;
}

function hostJson(h: HostMatch): Json {
  return h.kind === 'exact' ? { exact: h.value } : { suffix: { reverseLabels: [...h.reverseLabels] } };
}

function valueMatchJson(m: ValueMatch, bytes: boolean): Json {
  const out: { [k: string]: Json } = { name: m.name };
  if (m.kind === 'exact') out.exact = bytes ? Buffer.from(m.value).toString('base64') : m.value;
  else out.regex = m.value;
  return out;
}

function filterJson(f: RouteFilter): Json {
  switch (f.kind) {
    case 'requestHeaderModifier': {
      const m: { [k: string]: Json } = {};
      const hdrs = (hs: readonly { name: string; value: string }[]) =>
        hs.length === 0 ? undefined : { headers: hs.map((h) => ({ name: h.name, value: Buffer.from(h.value).toString('base64') })) };
      put(m, 'add', hdrs(f.add));
      put(m, 'set', hdrs(f.set));
      put(m, 'remove', [...f.remove]);
      return { requestHeaderModifier: m };
    }
    case 'requestRedirect': {
      const r: { [k: string]: Json } = {};
      if (f.scheme !== undefined) r.scheme = { registered: f.scheme.toUpperCase() };
      put(r, 'host', f.host);
      if (f.path !== undefined) r.path = { [f.path.kind === 'full' ? 'full' : 'prefix']: f.path.value };
      put(r, 'port', f.port);
      put(r, 'status', f.status);
      return { redirect: r };
    }
    case 'failureInjector':
      return { failureInjector: { status: f.status, message: f.message, ratio: { numerator: f.ratio.numerator, denominator: f.ratio.denominator } } };
  }
}

/** Route fields shared by `HttpRoute` and `GrpcRoute`; only the match mapping differs. */
function routeJson<M>(
  r: {
    meta: HttpRoute['meta'];
    hosts: HttpRoute['hosts'];
    authorizations: HttpRoute['authorizations'];
    rules: readonly { matches: readonly M[]; filters: HttpRoute['rules'][number]['filters'] }[];
  },
  matchJson: (m: M) => Json,
): Json {
  const out: { [k: string]: Json } = { metadata: metadataJson(r.meta) };
  put(out, 'hosts', r.hosts.map(hostJson));
  put(out, 'authorizations', r.authorizations.map(authzJson));
  const rules = r.rules.map((rule) => {
    const o: { [k: string]: Json } = {};
    put(o, 'matches', rule.matches.map(matchJson));
    put(o, 'filters', rule.filters.map(filterJson));
    return o;
  });
  put(out, 'rules', rules);
  return out;
}

function httpMatchJson(m: HttpRoute['rules'][number]['matches'][number]): Json {
  const mo: { [k: string]: Json } = {};
  if (m.path !== undefined) mo.path = { [m.path.kind]: m.path.value };
  put(
    mo,
    'headers',
    m.headers.map((h) => valueMatchJson(h, true)),
  );
  put(
    mo,
    'queryParams',
    m.queryParams.map((q) => valueMatchJson(q, false)),
  );
  if (m.method !== undefined) mo.method = REGISTERED_METHODS.has(m.method) ? { registered: m.method } : { unregistered: m.method };
  return mo;
}

function grpcMatchJson(m: GrpcRoute['rules'][number]['matches'][number]): Json {
  const mo: { [k: string]: Json } = {};
  if (m.rpc !== undefined) {
    const rpc: { [k: string]: Json } = {};
    put(rpc, 'service', m.rpc.service);
    put(rpc, 'method', m.rpc.method);
    mo.rpc = rpc;
  }
  put(
    mo,
    'headers',
    m.headers.map((h) => valueMatchJson(h, true)),
  );
  return mo;
}

const httpRouteJson = (r: HttpRoute): Json => routeJson(r, httpMatchJson);
const grpcRouteJson = (r: GrpcRoute): Json => routeJson(r, grpcMatchJson);

/** Proto3 JSON of an `InboundServer` as the `io.linkerd.proxy.inbound.Server` message. */
export function serverToProtoJson(s: InboundServer): Json {
  let protocol: Json;
  const p = s.protocol;
  switch (p.kind) {
    case 'detect': {
      const d: { [k: string]: Json } = { timeout: `${p.timeoutMs / 1000}s` };
      put(d, 'httpRoutes', p.httpRoutes.map(httpRouteJson));
      protocol = { detect: d };
      break;
    }
    case 'http1':
    case 'http2': {
      const h: { [k: string]: Json } = {};
      put(h, 'routes', p.routes.map(httpRouteJson));
      protocol = { [p.kind]: h };
      break;
    }
    case 'grpc': {
      const g: { [k: string]: Json } = {};
      put(g, 'routes', p.routes.map(grpcRouteJson));
      protocol = { grpc: g };
      break;
    }
    case 'opaque':
      protocol = { opaque: {} };
      break;
    case 'tls':
      protocol = { tls: {} };
      break;
  }
  const out: { [k: string]: Json } = { protocol };
  put(out, 'authorizations', s.authorizations.map(authzJson));
  out.labels = labels(s.meta);
  return out;
}
