/**
 * The inbound policy model: exactly what the controller streams to a proxy for one (pod, port)
 * (`io.linkerd.proxy.inbound.Server`), as plain immutable data with value equality.
 *
 * Everything here is produced by the index, mapped to protobuf by `api`, compiled by
 * `compileServer` for the proxy and the CLI, and never mutated after construction.
 */

/** Names a policy object in metrics, logs and the API. Defaults use group `''`, kind `default`. */
export interface Meta {
  readonly group: string;
  readonly kind: string;
  readonly name: string;
}

/** An IP network in canonical text form (`10.0.0.0`, `fd00::`) with a prefix length. */
export interface IpNet {
  readonly ip: string;
  readonly prefixLen: number;
}

/** A client network: inside `net` and outside every `except`. */
export interface Network {
  readonly net: IpNet;
  readonly except: readonly IpNet[];
}

/**
 * How a client must authenticate.
 * - `unauthenticated`: anything (plaintext, passthrough TLS, mesh TLS).
 * - `tlsUnauthenticated`: mesh TLS terminated by the proxy; a client certificate is optional.
 * - `tlsAuthenticated`: mesh TLS with a client identity that is one of `identities` or ends
 *   with one of `suffixes` (each a label list, `[]` = any DNS-like identity).
 */
export type ClientAuthentication =
  | { readonly kind: 'unauthenticated' }
  | { readonly kind: 'tlsUnauthenticated' }
  | {
      readonly kind: 'tlsAuthenticated';
      readonly identities: readonly string[];
      readonly suffixes: readonly (readonly string[])[];
    };

/** One authorization: who (authentication) from where (networks), named by `meta`. */
export interface Authorization {
  readonly meta: Meta;
  readonly networks: readonly Network[];
  readonly authentication: ClientAuthentication;
}

/** Request path match. Exact/prefix values start with `/`; regex must match the whole path. */
export type PathMatch =
  | { readonly kind: 'exact'; readonly value: string }
  | { readonly kind: 'prefix'; readonly value: string }
  | { readonly kind: 'regex'; readonly value: string };

/** Header or query-parameter match by exact value or whole-value regex. */
export interface ValueMatch {
  readonly name: string;
  readonly kind: 'exact' | 'regex';
  readonly value: string;
}

/** One HTTP route match: every present condition must hold. */
export interface HttpRouteMatch {
  readonly path?: PathMatch;
  readonly headers: readonly ValueMatch[];
  readonly queryParams: readonly ValueMatch[];
  /** Upper-case HTTP method, when the match requires one. */
  readonly method?: string;
}

/** Host match: exact host, or a suffix given as reversed labels (`*.example.com` = `[com, example]`). */
export type HostMatch = { readonly kind: 'exact'; readonly value: string } | { readonly kind: 'suffix'; readonly reverseLabels: readonly string[] };

/** Header name/value pair used by filters. */
export interface Header {
  readonly name: string;
  readonly value: string;
}

/** Route filters that inbound proxies apply after authorization. */
export type RouteFilter =
  | {
      readonly kind: 'requestHeaderModifier';
      readonly add: readonly Header[];
      readonly set: readonly Header[];
      readonly remove: readonly string[];
    }
  | {
      readonly kind: 'requestRedirect';
      readonly scheme?: string;
      readonly host?: string;
      readonly path?: { readonly kind: 'full' | 'prefix'; readonly value: string };
      readonly port?: number;
      readonly status?: number;
    }
  | {
      readonly kind: 'failureInjector';
      readonly status: number;
      readonly message: string;
      readonly ratio: { readonly numerator: number; readonly denominator: number };
    };

/** One rule of an HTTP route: it matches when any of its matches does (or always, with none). */
export interface HttpRouteRule {
  readonly matches: readonly HttpRouteMatch[];
  readonly filters: readonly RouteFilter[];
}

/** An HTTP route with its route-level authorizations (server authorizations are appended by the proxy). */
export interface HttpRoute {
  readonly meta: Meta;
  readonly hosts: readonly HostMatch[];
  readonly authorizations: readonly Authorization[];
  readonly rules: readonly HttpRouteRule[];
}

/** gRPC match: `service`/`method` compared exactly when set; headers as for HTTP. */
export interface GrpcRouteMatch {
  readonly rpc?: { readonly service?: string; readonly method?: string };
  readonly headers: readonly ValueMatch[];
}

/** One rule of a gRPC route. */
export interface GrpcRouteRule {
  readonly matches: readonly GrpcRouteMatch[];
  readonly filters: readonly RouteFilter[];
}

/** A gRPC route with its route-level authorizations. */
export interface GrpcRoute {
  readonly meta: Meta;
  readonly hosts: readonly HostMatch[];
  readonly authorizations: readonly Authorization[];
  readonly rules: readonly GrpcRouteRule[];
}

/** How the proxy handles the port (POLICY-SEMANTICS §4.4), carrying the routes it uses. */
export type ProxyProtocol =
  | { readonly kind: 'detect'; readonly timeoutMs: number; readonly httpRoutes: readonly HttpRoute[] }
  | { readonly kind: 'http1'; readonly routes: readonly HttpRoute[] }
  | { readonly kind: 'http2'; readonly routes: readonly HttpRoute[] }
  | { readonly kind: 'grpc'; readonly routes: readonly GrpcRoute[] }
  | { readonly kind: 'opaque' }
  | { readonly kind: 'tls' };

/** The policy of one inbound (pod, port): the `io.linkerd.proxy.inbound.Server` message. */
export interface InboundServer {
  /** Which Server resource (kind `server`) or default policy (kind `default`) applies. */
  readonly meta: Meta;
  readonly protocol: ProxyProtocol;
  /** Server-level authorizations, in evaluation order. Empty means nothing is allowed. */
  readonly authorizations: readonly Authorization[];
}

/** The detect timeout the controller always sends (not configurable upstream). */
export const DETECT_TIMEOUT_MS = 10_000;

/** API group of Linkerd's policy resources. */
export const POLICY_GROUP = 'policy.linkerd.io';
/** API group of Gateway API resources. */
export const GATEWAY_GROUP = 'gateway.networking.k8s.io';

/** Builds the metadata of a default (non-resource) object. */
export function defaultMeta(name: string): Meta {
  return { group: '', kind: 'default', name };
}

/** True for metadata of a default (non-resource) object. */
export function isDefaultMeta(meta: Meta): boolean {
  return meta.kind === 'default';
}

/** The routes the proxy consults for HTTP requests on a port, by protocol (§3.6). */
export function httpRoutesOf(protocol: ProxyProtocol): readonly HttpRoute[] | undefined {
  switch (protocol.kind) {
    case 'detect':
      return protocol.httpRoutes;
    case 'http1':
    case 'http2':
      return protocol.routes;
    case 'grpc':
    case 'opaque':
    case 'tls':
      return undefined;
  }
}
