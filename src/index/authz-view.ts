/**
 * The effective inbound policy of a resource's pods, port by port (`ward authz`, and the
 * controller's JSON API): every server-level authorization (with the proxy's localhost one) and
 * every route with its own authorizations, each with a one-line summary of whom it admits.
 */
import { type Authorization, compileAuthz, describeAuthz, type GrpcRoute, type HttpRoute, type InboundServer, LOCALHOST_AUTHZ } from '../core/index.js';
import type { PodInfo } from './pod.js';
import { localhostAuthzOf } from './policy-index.js';
import { type PolicyTargetsResult, policyKindOf, policyTargetsView } from './policy-targets.js';
import { type PolicyView, QueryError } from './query-error.js';
import { parseResourceArg, podsOf } from './targets.js';

/** Protocol names as people read them. */
export const PROTOCOL_LABELS: Record<InboundServer['protocol']['kind'], string> = {
  detect: 'detect',
  http1: 'HTTP/1',
  http2: 'HTTP/2',
  grpc: 'gRPC',
  opaque: 'opaque',
  tls: 'TLS',
};

/** One authorization in the view. */
export interface AuthzEntry {
  readonly group: string;
  readonly kind: string;
  readonly name: string;
  readonly networks: readonly { readonly cidr: string; readonly except: readonly string[] }[];
  readonly authentication:
    | { readonly kind: 'tlsAuthenticated'; readonly identities: readonly string[]; readonly suffixes: readonly string[] }
    | { readonly kind: 'unauthenticated' | 'tlsUnauthenticated' };
  readonly admits: string;
}

/** One port of a pod in the view. */
export interface PortView {
  readonly port: number;
  readonly server: { readonly kind: 'default' | 'server' | 'traffictarget'; readonly name: string };
  readonly protocol: string;
  readonly authorizations: readonly AuthzEntry[];
  readonly routes: readonly { readonly kind: string; readonly name: string; readonly authorizations: readonly AuthzEntry[] }[];
}

/** One pod in the view. */
export interface PodView {
  readonly namespace: string;
  readonly name: string;
  readonly serviceAccount: string;
  readonly ports: readonly PortView[];
}

function authzEntry(a: Authorization): AuthzEntry {
  const authn = a.authentication;
  return {
    group: a.meta.group,
    kind: a.meta.kind,
    name: a.meta.name,
    networks: a.networks.map((n) => ({ cidr: `${n.net.ip}/${n.net.prefixLen}`, except: n.except.map((e) => `${e.ip}/${e.prefixLen}`) })),
    authentication:
      authn.kind === 'tlsAuthenticated'
        ? { kind: authn.kind, identities: authn.identities, suffixes: authn.suffixes.map((s) => (s.length === 0 ? '*' : `*.${s.join('.')}`)) }
        : { kind: authn.kind },
    admits: describeAuthz(compileAuthz(a)),
  };
}

function routesOf(s: InboundServer): readonly (HttpRoute | GrpcRoute)[] {
  const p = s.protocol;
  if (p.kind === 'detect') return p.httpRoutes;
  if (p.kind === 'http1' || p.kind === 'http2' || p.kind === 'grpc') return p.routes;
  return [];
}

/** The view of one port's published policy. */
export function portView(port: number, s: InboundServer, localhost: Authorization = LOCALHOST_AUTHZ): PortView {
  return {
    port,
    server: { kind: s.meta.kind === 'default' || s.meta.kind === 'traffictarget' ? s.meta.kind : 'server', name: s.meta.name },
    protocol: PROTOCOL_LABELS[s.protocol.kind],
    authorizations: [...s.authorizations, localhost].map(authzEntry),
    routes: routesOf(s).map((r) => ({ kind: r.meta.kind, name: r.meta.name, authorizations: r.authorizations.map(authzEntry) })),
  };
}

/** The view of one pod: every known port (declared, bound by a Server, or looked up). */
export function podView(view: PolicyView, p: PodInfo): PodView {
  return {
    namespace: p.namespace,
    name: p.name,
    serviceAccount: p.serviceAccount,
    ports: view.index.ports(p.namespace, p.name).flatMap((port) => {
      const cell = view.index.peek(p.namespace, p.name, port);
      return cell === undefined ? [] : [portView(port, cell.value, localhostAuthzOf(view.config, p))];
    }),
  };
}

/** `ward authz` of a workload: its pods with their policy. */
export interface WorkloadAuthz {
  readonly pods: readonly PodView[];
}

/** `ward authz` of a workload (`{pods}`) or of policy objects (`{policies}`). */
export type AuthzResult = WorkloadAuthz | PolicyTargetsResult;

/**
 * The pods of `resource` (kubectl style) with their policy, or, for a policy kind (`server/web`,
 * `authorizationpolicy/a`, …), the pods and ports each object applies to; `namespace` undefined
 * = all namespaces.
 */
export function authzView(view: PolicyView, resource: string, namespace: string | undefined): AuthzResult {
  const parts = resource.split('/');
  const policyKind = policyKindOf(parts[0] ?? '');
  if (policyKind !== undefined) {
    if (parts.length > 2 || parts[1] === '') throw new QueryError(`"${resource}" is not KIND/NAME (policy objects are named within -n NAMESPACE)`);
    return policyTargetsView(view, policyKind, parts[1], namespace);
  }
  return workloadAuthzView(view, resource, namespace);
}

/** The pods of a workload resource with their policy. */
export function workloadAuthzView(view: PolicyView, resource: string, namespace: string | undefined): WorkloadAuthz {
  const pods = podsOf(view, parseResourceArg(resource), namespace);
  if (pods.length === 0) throw new QueryError(`no meshed pods found for ${resource}${namespace ? ` in namespace ${namespace}` : ''}`, { notFound: true });
  return { pods: pods.map((p) => podView(view, p)) };
}
