/**
 * Conversion of decoded resources into the index's internal forms (upstream's `TryFrom` impls).
 * A conversion failure means the index ignores the object (or, for an update, keeps the previous
 * version); the reason is kept so `ward check` and the controller can report it.
 */
import {
  GATEWAY_GROUP,
  type GrpcRoute,
  type HostMatch,
  type HttpRoute,
  type HttpRouteMatch,
  type IdentityDomain,
  type IdentityMatch,
  type LabelSelector,
  type Network,
  namespaceIdentitySuffix,
  POLICY_GROUP,
  parseIdentityMatch,
  type RouteFilter,
  serviceAccountIdentity,
  type ValueMatch,
} from '../core/index.js';
import type {
  AuthorizationPolicy,
  GRPCRoute,
  HTTPRoute,
  MeshTLSAuthentication,
  ParentRef,
  RouteFilterSpec,
  ServerAuthorization,
  ValueMatchSpec,
} from '../manifest/index.js';

/** A conversion result: the value, or why the object is ignored. */
export type Converted<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly reason: string };

const fail = (reason: string): { ok: false; reason: string } => ({ ok: false, reason });

/** Case-insensitive group comparison where '' and 'core' both mean the core group. */
export function sameGroup(a: string | undefined, b: string): boolean {
  const norm = (g: string | undefined) => {
    const l = (g ?? '').toLowerCase();
    return l === 'core' ? '' : l;
  };
  return norm(a) === norm(b);
}

/** ASCII case-insensitive equality (kinds and names in references). */
export function sameName(a: string | undefined, b: string): boolean {
  return a !== undefined && a.toLowerCase() === b.toLowerCase();
}

// === ServerAuthorization ===

/** A ServerAuthorization in index form. */
export interface SazSpec {
  readonly server: { readonly name: string } | { readonly selector: LabelSelector };
  /** Empty: the cluster networks. */
  readonly networks: readonly Network[];
  readonly authn:
    | { readonly kind: 'unauthenticated' }
    | { readonly kind: 'tlsUnauthenticated' }
    | { readonly kind: 'tlsAuthenticated'; readonly matches: readonly IdentityMatch[] };
}

/** Converts a ServerAuthorization (§1.3 index translation). */
export function convertServerAuthorization(saz: ServerAuthorization, domain: IdentityDomain): Converted<SazSpec> {
  const { server: ref, client } = saz.spec;
  let server: SazSpec['server'];
  if (ref.name !== undefined && ref.selector === undefined) server = { name: ref.name };
  else if (ref.selector !== undefined && ref.name === undefined) server = { selector: ref.selector };
  else return fail('spec.server needs exactly one of name and selector');
  const networks = client.networks ?? [];
  if (client.unauthenticated) return { ok: true, value: { server, networks, authn: { kind: 'unauthenticated' } } };
  const mtls = client.meshTLS;
  if (mtls === undefined) return fail('no client authentication is configured (neither unauthenticated nor meshTLS)');
  if (mtls.unauthenticatedTLS) return { ok: true, value: { server, networks, authn: { kind: 'tlsUnauthenticated' } } };
  const matches: IdentityMatch[] = (mtls.identities ?? []).map(parseIdentityMatch);
  for (const sa of mtls.serviceAccounts ?? []) {
    matches.push({ kind: 'exact', name: serviceAccountIdentity(domain, sa.namespace ?? saz.metadata.namespace, sa.name) });
  }
  if (matches.length === 0) return fail('meshTLS lists no identities or serviceAccounts');
  return { ok: true, value: { server, networks, authn: { kind: 'tlsAuthenticated', matches } } };
}

// === AuthorizationPolicy ===

/** What an AuthorizationPolicy targets. */
export type PolicyTarget =
  | { readonly kind: 'server'; readonly name: string }
  | { readonly kind: 'namespace' }
  | { readonly kind: 'httproute'; readonly group: string; readonly name: string }
  | { readonly kind: 'grpcroute'; readonly name: string };

/** A reference to an authentication object. */
export interface AuthnRef {
  readonly namespace: string;
  readonly name: string;
}

/** An AuthorizationPolicy in index form. */
export interface ApSpec {
  readonly target: PolicyTarget;
  readonly meshTLS?: AuthnRef | undefined;
  readonly network?: AuthnRef | undefined;
  readonly serviceAccount?: AuthnRef | undefined;
}

/** Converts an AuthorizationPolicy (§1.4). */
export function convertAuthorizationPolicy(ap: AuthorizationPolicy): Converted<ApSpec> {
  const t = ap.spec.targetRef;
  let target: PolicyTarget;
  if (sameName(t.kind, 'Server') && sameGroup(t.group, POLICY_GROUP)) target = { kind: 'server', name: t.name };
  else if (sameName(t.kind, 'Namespace') && sameGroup(t.group, '')) target = { kind: 'namespace' };
  else if (sameName(t.kind, 'HTTPRoute') && (sameGroup(t.group, POLICY_GROUP) || sameGroup(t.group, GATEWAY_GROUP)))
    target = { kind: 'httproute', group: (t.group ?? '').toLowerCase(), name: t.name };
  else if (sameName(t.kind, 'GRPCRoute') && sameGroup(t.group, GATEWAY_GROUP)) target = { kind: 'grpcroute', name: t.name };
  else return fail(`targetRef ${t.group ? `${t.group}/` : ''}${t.kind} ${t.name} is not a supported target`);

  const ns = ap.metadata.namespace;
  let meshTLS: AuthnRef | undefined;
  let network: AuthnRef | undefined;
  let serviceAccount: AuthnRef | undefined;
  for (const ref of ap.spec.requiredAuthenticationRefs ?? []) {
    if (ref.name === undefined) return fail(`authentication ref ${ref.kind} has no name`);
    const r = { namespace: ref.namespace ?? ns, name: ref.name };
    if (sameName(ref.kind, 'MeshTLSAuthentication') && sameGroup(ref.group, POLICY_GROUP)) {
      if (meshTLS !== undefined) return fail('only a single MeshTLSAuthentication may be set');
      meshTLS = r;
    } else if (sameName(ref.kind, 'NetworkAuthentication') && sameGroup(ref.group, POLICY_GROUP)) {
      if (network !== undefined) return fail('only a single NetworkAuthentication may be set');
      network = r;
    } else if (sameName(ref.kind, 'ServiceAccount') && sameGroup(ref.group, '')) {
      if (serviceAccount !== undefined) return fail('only a single ServiceAccount may be set');
      serviceAccount = r;
    } else {
      return fail(`unsupported authentication ${ref.group ? `${ref.group}/` : ''}${ref.kind}`);
    }
  }
  if (meshTLS !== undefined && serviceAccount !== undefined) return fail('a MeshTLSAuthentication and a ServiceAccount cannot both be set');
  return { ok: true, value: { target, meshTLS, network, serviceAccount } };
}

// === MeshTLSAuthentication ===

/** Converts a MeshTLSAuthentication into identity matches (§1.5). */
export function convertMeshTLSAuthentication(m: MeshTLSAuthentication, domain: IdentityDomain): Converted<readonly IdentityMatch[]> {
  const matches: IdentityMatch[] = (m.spec.identities ?? []).map(parseIdentityMatch);
  for (const ref of m.spec.identityRefs ?? []) {
    if (ref.name === undefined) return fail(`identityRefs ${ref.kind} has no name`);
    if (sameName(ref.kind, 'ServiceAccount') && sameGroup(ref.group, '')) {
      matches.push({ kind: 'exact', name: serviceAccountIdentity(domain, ref.namespace ?? m.metadata.namespace, ref.name) });
    } else if (sameName(ref.kind, 'Namespace') && sameGroup(ref.group, '')) {
      matches.push({ kind: 'suffix', parts: namespaceIdentitySuffix(domain, ref.name) });
    } else {
      return fail(`identityRefs kind ${ref.kind} is not supported`);
    }
  }
  if (matches.length === 0) return fail('it has no identities');
  return { ok: true, value: matches };
}

// === routes ===

/** A route converted for inbound use, before acceptance and authorization are known. */
export interface RouteSpec<R> {
  /** Names of the Server parents (same namespace). */
  readonly servers: readonly string[];
  /** The route without authorizations. */
  readonly route: R;
  readonly creationTimestamp: string | undefined;
}

function isServerRef(p: ParentRef): boolean {
  return sameName(p.kind, 'Server') && sameGroup(p.group, POLICY_GROUP);
}

function serverParents(refs: readonly ParentRef[], namespace: string): Converted<string[]> {
  const out: string[] = [];
  for (const p of refs) {
    if (!isServerRef(p)) continue;
    if (p.namespace !== undefined && p.namespace !== namespace) return fail(`parentRef Server ${p.name} names another namespace (${p.namespace})`);
    if (p.port !== undefined) return fail(`parentRef Server ${p.name} sets port, which inbound routes do not support`);
    if (p.sectionName !== undefined) return fail(`parentRef Server ${p.name} sets sectionName, which inbound routes do not support`);
    out.push(p.name);
  }
  return { ok: true, value: out };
}

function compiles(pattern: string): boolean {
  try {
    new RegExp(`^(?:${pattern})$`);
    return true;
  } catch {
    return false;
  }
}

function convertValueMatches(ms: readonly ValueMatchSpec[] | undefined, what: string): Converted<ValueMatch[]> {
  const out: ValueMatch[] = [];
  for (const m of ms ?? []) {
    if (m.type === 'RegularExpression' && !compiles(m.value)) return fail(`${what} ${m.name} regex "${m.value}" does not compile`);
    out.push({ name: m.name, kind: m.type === 'Exact' ? 'exact' : 'regex', value: m.value });
  }
  return { ok: true, value: out };
}

function convertHosts(hostnames: readonly string[]): HostMatch[] {
  return hostnames.map((h) => (h.startsWith('*.') ? { kind: 'suffix', reverseLabels: h.slice(2).split('.').reverse() } : { kind: 'exact', value: h }));
}

function convertFilters(filters: readonly RouteFilterSpec[] | undefined, grpc: boolean): Converted<RouteFilter[]> {
  const out: RouteFilter[] = [];
  for (const f of filters ?? []) {
    switch (f.type) {
      case 'RequestHeaderModifier': {
        const m = f.requestHeaderModifier;
        out.push({ kind: 'requestHeaderModifier', add: m?.add ?? [], set: m?.set ?? [], remove: m?.remove ?? [] });
        break;
      }
      case 'ResponseHeaderModifier':
        break; // ignored inbound
      case 'RequestRedirect': {
        if (grpc) return fail('RequestRedirect is not supported on GRPCRoutes');
        const r = f.requestRedirect ?? {};
        const path = r.path;
        out.push({
          kind: 'requestRedirect',
          ...(r.scheme !== undefined ? { scheme: r.scheme } : {}),
          ...(r.hostname !== undefined ? { host: r.hostname } : {}),
          ...(path?.type === 'ReplaceFullPath' && path.replaceFullPath !== undefined ? { path: { kind: 'full' as const, value: path.replaceFullPath } } : {}),
          ...(path?.type === 'ReplacePrefixMatch' && path.replacePrefixMatch !== undefined
            ? { path: { kind: 'prefix' as const, value: path.replacePrefixMatch } }
            : {}),
          ...(r.port !== undefined ? { port: r.port } : {}),
          ...(r.statusCode !== undefined ? { status: r.statusCode } : {}),
        });
        break;
      }
      default:
        return fail(`filter ${f.type} is not supported for inbound routes`);
    }
  }
  return { ok: true, value: out };
}

/** Converts an HTTPRoute of either group for inbound use (§1.7, §3.6). */
export function convertHttpRoute(r: HTTPRoute): Converted<RouteSpec<HttpRoute>> {
  const parents = serverParents(r.spec.parentRefs, r.metadata.namespace);
  if (!parents.ok) return parents;
  const rules: HttpRoute['rules'][number][] = [];
  for (const rule of r.spec.rules) {
    const matches: HttpRouteMatch[] = [];
    for (const m of rule.matches ?? []) {
      if (m.path !== undefined && m.path.type !== 'RegularExpression' && !m.path.value.startsWith('/')) {
        return fail(`path "${m.path.value}" is not absolute`);
      }
      if (m.path?.type === 'RegularExpression' && !compiles(m.path.value)) return fail(`path regex "${m.path.value}" does not compile`);
      const headers = convertValueMatches(m.headers, 'header');
      if (!headers.ok) return headers;
      const queryParams = convertValueMatches(m.queryParams, 'query parameter');
      if (!queryParams.ok) return queryParams;
      matches.push({
        ...(m.path !== undefined
          ? { path: { kind: m.path.type === 'Exact' ? 'exact' : m.path.type === 'PathPrefix' ? 'prefix' : 'regex', value: m.path.value } as const }
          : {}),
        headers: headers.value,
        queryParams: queryParams.value,
        ...(m.method !== undefined ? { method: m.method.toUpperCase() } : {}),
      });
    }
    const filters = convertFilters(rule.filters, false);
    if (!filters.ok) return filters;
    rules.push({ matches, filters: filters.value });
  }
  const group = r.spec.group;
  return {
    ok: true,
    value: {
      servers: parents.value,
      creationTimestamp: r.metadata.creationTimestamp,
      route: { meta: { group, kind: 'HTTPRoute', name: r.metadata.name }, hosts: convertHosts(r.spec.hostnames), authorizations: [], rules },
    },
  };
}

/** Converts a GRPCRoute for inbound use (§1.8). */
export function convertGrpcRoute(r: GRPCRoute): Converted<RouteSpec<GrpcRoute>> {
  const parents = serverParents(r.spec.parentRefs, r.metadata.namespace);
  if (!parents.ok) return parents;
  const rules: GrpcRoute['rules'][number][] = [];
  for (const rule of r.spec.rules) {
    const matches: GrpcRoute['rules'][number]['matches'][number][] = [];
    for (const m of rule.matches ?? []) {
      if (m.method?.type === 'RegularExpression') return fail('GRPCRoute method matches of type RegularExpression are not supported');
      const headers = convertValueMatches(m.headers, 'header');
      if (!headers.ok) return headers;
      const rpc =
        m.method === undefined
          ? undefined
          : { ...(m.method.service ? { service: m.method.service } : {}), ...(m.method.method ? { method: m.method.method } : {}) };
      matches.push({ ...(rpc !== undefined ? { rpc } : {}), headers: headers.value });
    }
    const filters = convertFilters(rule.filters, true);
    if (!filters.ok) return filters;
    rules.push({ matches, filters: filters.value });
  }
  return {
    ok: true,
    value: {
      servers: parents.value,
      creationTimestamp: r.metadata.creationTimestamp,
      route: { meta: { group: GATEWAY_GROUP, kind: 'GRPCRoute', name: r.metadata.name }, hosts: convertHosts(r.spec.hostnames), authorizations: [], rules },
    },
  };
}
