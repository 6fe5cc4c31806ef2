/**
 * Traces of a decision for people: every route considered and every candidate authorization with
 * the first condition it failed. The verdict always comes from `authorizeConnection` /
 * `authorizeRequest`; tracing only annotates it with the same compiled matchers.
 */
import {
  authenticationMismatch,
  authorizeConnection,
  authorizeRequest,
  type ClientInfo,
  type CompiledAuthz,
  type CompiledServer,
  type Decision,
  type RequestInfo,
  routeRequestOf,
  selectRoute,
} from './authorize.js';
import { formatIp, formatNet, netContains } from './ip.js';
import type { Meta } from './model.js';
import { grpcRouteMismatch, httpRouteMismatch } from './route-match.js';

/** One candidate authorization and how it fared. */
export interface AuthzTrace {
  readonly meta: Meta;
  /** Where it came from: the route, the server, or the proxy (localhost). */
  readonly scope: 'route' | 'server' | 'proxy';
  /** Undefined when it admits the client; else the first condition it failed. */
  readonly failure: string | undefined;
  /** A short description of who it admits. */
  readonly admits: string;
}

/** One route considered for a request. */
export interface RouteTrace {
  readonly meta: Meta;
  /** `selected`, `matches` (lost on precedence), or why it does not match. */
  readonly outcome: 'selected' | 'matches' | string;
}

/** A decision with its evidence. */
export interface Trace {
  readonly decision: Decision;
  readonly routes: readonly RouteTrace[];
  readonly authzs: readonly AuthzTrace[];
}

/** Describes who an authorization admits: networks and authentication. */
export function describeAuthz(a: CompiledAuthz): string {
  const nets = a.authz.networks.map((n) => formatNet(n.net) + (n.except.length > 0 ? ` except ${n.except.map(formatNet).join(', ')}` : ''));
  const authn = a.authz.authentication;
  let who: string;
  switch (authn.kind) {
    case 'unauthenticated':
      who = 'any client';
      break;
    case 'tlsUnauthenticated':
      who = 'mesh TLS clients (certificate optional)';
      break;
    case 'tlsAuthenticated': {
      const ids = [...authn.identities, ...authn.suffixes.map((s) => (s.length === 0 ? '*' : `*.${s.join('.')}`))];
      who = ids.length === 0 ? 'no identity (empty list)' : `mesh identities ${ids.join(', ')}`;
      break;
    }
  }
  return `${who} from ${nets.join(', ') || 'no networks'}`;
}

function networkMismatch(a: CompiledAuthz, client: ClientInfo): string | undefined {
  if (a.networks.has(client.ip)) return undefined;
  const ip = formatIp(client.ip);
  for (const n of a.authz.networks) {
    if (!netContains(n.net, client.ip)) continue;
    const ex = n.except.find((e) => netContains(e, client.ip));
    if (ex !== undefined) return `client IP ${ip} is excluded by except ${formatNet(ex)} of ${formatNet(n.net)}`;
  }
  return `client IP ${ip} is not in ${a.authz.networks.map((n) => formatNet(n.net)).join(', ') || 'any network'}`;
}

function traceAuthzs(list: readonly CompiledAuthz[], routeCount: number, client: ClientInfo): AuthzTrace[] {
  return list.map((a, i) => ({
    meta: a.meta,
    scope: i < routeCount ? 'route' : a.meta.kind === 'default' && a.meta.name === 'localhost' ? 'proxy' : 'server',
    failure: networkMismatch(a, client) ?? authenticationMismatch(a, client.tls),
    admits: describeAuthz(a),
  }));
}

/** Traces a connection decision. */
export function traceConnection(cs: CompiledServer, client: ClientInfo): Trace {
  return { decision: authorizeConnection(cs, client), routes: [], authzs: traceAuthzs(cs.authzs, 0, client) };
}

/** Traces a request decision. */
export function traceRequest(cs: CompiledServer, client: ClientInfo, req: RequestInfo): Trace {
  const decision = authorizeRequest(cs, client, req);
  if (decision.level === 'tcp') return { decision, routes: [], authzs: traceAuthzs(cs.authzs, 0, client) };
  const rr = routeRequestOf(req);
  const selected = selectRoute(cs, rr);
  const routes: RouteTrace[] = [];
  const sameMeta = (m: Meta) => selected !== undefined && m === selected.meta;
  for (const r of cs.grpcRoutes ?? []) {
    const miss = grpcRouteMismatch(r, rr);
    routes.push({ meta: r.route.meta, outcome: sameMeta(r.route.meta) ? 'selected' : (miss ?? 'matches') });
  }
  for (const r of cs.httpRoutes?.routes ?? []) {
    const miss = httpRouteMismatch(r, rr);
    routes.push({ meta: r.route.meta, outcome: sameMeta(r.route.meta) ? 'selected' : (miss ?? 'matches') });
  }
  const authzs = selected === undefined ? [] : traceAuthzs(selected.authzs, selected.authzs.length - cs.authzs.length, client);
  return { decision, routes, authzs };
}
