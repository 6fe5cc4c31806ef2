/**
 * Default inbound policies (POLICY-SEMANTICS §2.1): the authorization each one grants.
 */
import { type Authorization, defaultMeta, type GrpcRoute, type HttpRoute, type Network } from './model.js';

/** The six default policy names. */
export const DEFAULT_POLICY_NAMES = ['all-unauthenticated', 'all-authenticated', 'cluster-unauthenticated', 'cluster-authenticated', 'deny', 'audit'] as const;

/** A default policy name. */
export type DefaultPolicyName = (typeof DEFAULT_POLICY_NAMES)[number];

/** True for one of the six default policy names (exact spelling). */
export function isDefaultPolicyName(s: string): s is DefaultPolicyName {
  return (DEFAULT_POLICY_NAMES as readonly string[]).includes(s);
}

/** `0.0.0.0/0` and `::/0`. */
export const ALL_NETWORKS: readonly Network[] = [
  { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
  { net: { ip: '::', prefixLen: 0 }, except: [] },
];

/** The authorization a default policy grants, or undefined for `deny`. */
export function defaultPolicyAuthz(name: DefaultPolicyName, clusterNetworks: readonly Network[]): Authorization | undefined {
  const meta = defaultMeta(name);
  const anyIdentity = { kind: 'tlsAuthenticated', identities: [], suffixes: [[]] } as const;
  switch (name) {
    case 'all-unauthenticated':
    case 'audit':
      return { meta, networks: ALL_NETWORKS, authentication: { kind: 'unauthenticated' } };
    case 'all-authenticated':
      return { meta, networks: ALL_NETWORKS, authentication: anyIdentity };
    case 'cluster-unauthenticated':
      return { meta, networks: clusterNetworks, authentication: { kind: 'unauthenticated' } };
    case 'cluster-authenticated':
      return { meta, networks: clusterNetworks, authentication: anyIdentity };
    case 'deny':
      return undefined;
  }
}

/** Require-identity ports turn the unauthenticated defaults into their authenticated forms (§2.4). */
export function requireIdentity(name: DefaultPolicyName): DefaultPolicyName {
  if (name === 'all-unauthenticated') return 'all-authenticated';
  if (name === 'cluster-unauthenticated') return 'cluster-authenticated';
  return name;
}

/** The catch-all HTTP route of a default or route-less server (§3.4, §3.6): any path, server authorizations. */
export const DEFAULT_HTTP_ROUTE: HttpRoute = {
  meta: defaultMeta('default'),
  hosts: [],
  authorizations: [],
  rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
};

/**
 * The catch-all gRPC route of a gRPC server without GRPCRoutes: one match with an empty `rpc`
 * (any service, any method), as upstream sends it — linkerd2-proxy rejects a gRPC match without
 * `rpc` and then denies every call.
 */
export const DEFAULT_GRPC_ROUTE: GrpcRoute = {
  meta: defaultMeta('default'),
  hosts: [],
  authorizations: [],
  rules: [{ matches: [{ rpc: {}, headers: [] }], filters: [] }],
};

/** The probe route (§3.6): `GET` of exactly the given paths, admitted from `networks` without authentication. */
export function probeRoute(paths: readonly string[], networks: readonly Network[]): HttpRoute {
  return {
    meta: defaultMeta('probe'),
    hosts: [],
    authorizations: [{ meta: defaultMeta('probe'), networks, authentication: { kind: 'unauthenticated' } }],
    rules: [{ matches: paths.map((value) => ({ path: { kind: 'exact', value }, headers: [], queryParams: [], method: 'GET' })), filters: [] }],
  };
}
