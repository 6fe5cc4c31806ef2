/**
 * Suite `decide`: the proxy's per-connection and per-request decisions against a compiled
 * policy, and the per-update compile cost. Clients are built once per connection (the proxy
 * parses the peer address once); requests carry a realistic node `IncomingHttpHeaders` object.
 */
import {
  type Authorization,
  authorizeConnection,
  authorizeRequest,
  type ClientInfo,
  type CompiledServer,
  compileServer,
  type Decision,
  type HttpRoute,
  type HttpRouteMatch,
  type InboundServer,
  type Network,
  type PathMatch,
  parseIp,
  type RequestInfo,
  type TlsState,
} from '../src/core/index.js';
import { type BenchResult, type MicroTask, runMicro } from './harness.js';

const POLICY_GROUP = 'policy.linkerd.io';
const ALL: readonly Network[] = [
  { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
  { net: { ip: '::', prefixLen: 0 }, except: [] },
];
const CLUSTER: readonly Network[] = [
  { net: { ip: '10.0.0.0', prefixLen: 8 }, except: [] },
  { net: { ip: 'fd00::', prefixLen: 8 }, except: [] },
];

/** `<sa>.<ns>.serviceaccount.identity.linkerd.cluster.local` */
function sa(name: string, ns: string): string {
  return `${name}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
}

function nsSuffix(ns: string): string[] {
  return [ns, 'serviceaccount', 'identity', 'linkerd', 'cluster', 'local'];
}

function mkAuthz(name: string, networks: readonly Network[], authentication: Authorization['authentication']): Authorization {
  return { meta: { group: POLICY_GROUP, kind: 'authorizationpolicy', name }, networks, authentication };
}

function client(ip: string, tls: TlsState): ClientInfo {
  const parsed = parseIp(ip);
  if (parsed === undefined) throw new Error(`bad ip ${ip}`);
  return { ip: parsed, tls };
}

// === connection scenario ===

/** Five authorizations of the kinds a real Server collects; the permit client matches the third. */
function connectionServer(): InboundServer {
  return {
    meta: { group: POLICY_GROUP, kind: 'server', name: 'orders-grpc' },
    protocol: { kind: 'opaque' },
    authorizations: [
      mkAuthz('orders-from-frontends', ALL, {
        kind: 'tlsAuthenticated',
        identities: [sa('web', 'shop'), sa('checkout', 'shop'), sa('cart', 'shop'), 'spiffe://cluster.local/ns/shop/sa/batch'],
        suffixes: [],
      }),
      mkAuthz('orders-from-monitoring', ALL, { kind: 'tlsAuthenticated', identities: [], suffixes: [nsSuffix('monitoring')] }),
      mkAuthz('orders-cluster-plaintext', CLUSTER, { kind: 'unauthenticated' }),
      mkAuthz('orders-from-office', [{ net: { ip: '192.168.0.0', prefixLen: 16 }, except: [{ ip: '192.168.13.0', prefixLen: 24 }] }], {
        kind: 'tlsUnauthenticated',
      }),
      mkAuthz('orders-any-meshed', ALL, { kind: 'tlsAuthenticated', identities: [], suffixes: [[]] }),
    ],
  };
}

// === request scenario ===

const METHODS = ['GET', 'POST', 'PUT', 'DELETE'] as const;

function exact(value: string): PathMatch {
  return { kind: 'exact', value };
}
function prefix(value: string): PathMatch {
  return { kind: 'prefix', value };
}

/**
 * 50 routes: Exact and PathPrefix paths, a third with a method, some with header matches, three
 * with hostnames (so they outrank the rest for those hosts), one regex. No catch-all route, so a
 * request outside the API is a 404. Every fifth route carries its own authorization.
 */
function httpRoutes(): HttpRoute[] {
  const resources = ['orders', 'carts', 'users', 'payments', 'invoices', 'products', 'reviews', 'shipments', 'coupons', 'stock'];
  const routes: HttpRoute[] = [];
  for (let i = 0; i < 47; i++) {
    const res = resources[i % resources.length] as string;
    const version = `v${1 + Math.floor(i / resources.length)}`;
    const matches: HttpRouteMatch[] = [];
    switch (i % 4) {
      case 0:
        matches.push({ path: prefix(`/api/${version}/${res}`), headers: [], queryParams: [] });
        break;
      case 1:
        matches.push({ path: exact(`/api/${version}/${res}/search`), headers: [], queryParams: [], method: 'GET' });
        matches.push({ path: exact(`/api/${version}/${res}/search`), headers: [], queryParams: [], method: 'POST' });
        break;
      case 2:
        matches.push({
          path: prefix(`/api/${version}/${res}/admin`),
          headers: [{ name: 'x-tenant', kind: 'exact', value: `tenant-${i}` }],
          queryParams: [],
          method: METHODS[i % METHODS.length] as string,
        });
        break;
      default:
        matches.push({ path: prefix(`/internal/${version}/${res}`), headers: [{ name: 'x-internal', kind: 'exact', value: 'true' }], queryParams: [] });
    }
    const routeAuthz = i % 5 === 0 ? [mkAuthz(`route-${i}-ops`, CLUSTER, { kind: 'tlsAuthenticated', identities: [sa('ops', 'ops')], suffixes: [] })] : [];
    routes.push({
      meta: { group: POLICY_GROUP, kind: 'HTTPRoute', name: `route-${i}` },
      hosts: [],
      authorizations: routeAuthz,
      rules: [{ matches, filters: [] }],
    });
  }
  routes.push({
    meta: { group: POLICY_GROUP, kind: 'HTTPRoute', name: 'admin-host' },
    hosts: [{ kind: 'exact', value: 'admin.shop.example.com' }],
    authorizations: [],
    rules: [{ matches: [{ path: prefix('/'), headers: [], queryParams: [] }], filters: [] }],
  });
  routes.push({
    meta: { group: POLICY_GROUP, kind: 'HTTPRoute', name: 'partners-host' },
    hosts: [{ kind: 'suffix', reverseLabels: ['com', 'example', 'partners'] }],
    authorizations: [],
    rules: [{ matches: [{ path: prefix('/api'), headers: [], queryParams: [] }], filters: [] }],
  });
  routes.push({
    meta: { group: POLICY_GROUP, kind: 'HTTPRoute', name: 'order-by-id' },
    hosts: [{ kind: 'exact', value: 'orders.shop.svc.cluster.local' }],
    authorizations: [],
    rules: [
      {
        matches: [{ path: { kind: 'regex', value: '/api/v[0-9]+/orders/[0-9a-f-]{8,36}' }, headers: [], queryParams: [], method: 'GET' }],
        filters: [],
      },
    ],
  });
  return routes;
}

/** 20 server authorizations; the permit client (meshed `checkout` in `shop`) matches the 19th. */
function serverAuthorizations(): Authorization[] {
  const out: Authorization[] = [];
  for (let i = 0; i < 20; i++) {
    if (i === 18) {
      out.push(mkAuthz('orders-from-shop', CLUSTER, { kind: 'tlsAuthenticated', identities: [], suffixes: [nsSuffix('shop')] }));
      continue;
    }
    switch (i % 4) {
      case 0:
        out.push(
          mkAuthz(`a${i}-ids`, ALL, { kind: 'tlsAuthenticated', identities: [sa(`svc${i}`, `team${i}`), sa(`svc${i}-canary`, `team${i}`)], suffixes: [] }),
        );
        break;
      case 1:
        out.push(mkAuthz(`a${i}-ns`, ALL, { kind: 'tlsAuthenticated', identities: [], suffixes: [nsSuffix(`team${i}`)] }));
        break;
      case 2:
        out.push(
          mkAuthz(`a${i}-net`, [{ net: { ip: `172.${16 + i}.0.0`, prefixLen: 16 }, except: [{ ip: `172.${16 + i}.1.0`, prefixLen: 24 }] }], {
            kind: 'unauthenticated',
          }),
        );
        break;
      default:
        out.push(mkAuthz(`a${i}-net-ids`, CLUSTER, { kind: 'tlsAuthenticated', identities: [sa('prometheus', `team${i}`)], suffixes: [] }));
    }
  }
  return out;
}

function requestServer(): InboundServer {
  return {
    meta: { group: POLICY_GROUP, kind: 'server', name: 'orders-http' },
    protocol: { kind: 'http1', routes: httpRoutes() },
    authorizations: serverAuthorizations(),
  };
}

/** A browser-ish API request as node's `IncomingHttpHeaders` (8 headers). */
function request(method: string, path: string): RequestInfo {
  return {
    method,
    path,
    headers: {
      host: 'orders.shop.svc.cluster.local:8080',
      'user-agent': 'checkout/2.14.1 (node 20.20.2)',
      accept: 'application/json',
      'accept-encoding': 'gzip, deflate, br',
      'x-request-id': '5f0c6a6e-9d3a-4d7c-bf1e-0a9e1d2c3b4a',
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      'l5d-dst-canonical': 'orders.shop.svc.cluster.local:8080',
      'x-tenant': 'tenant-42',
    },
  };
}

/** Folds a decision into a number for the dead-code guard. */
function score(d: Decision): number {
  return d.allowed ? d.authz.name.length : d.reason.length + 1000;
}

function expect(label: string, d: Decision, check: (d: Decision) => boolean): void {
  if (!check(d)) throw new Error(`decide: scenario ${label} produced an unexpected decision: ${JSON.stringify(d)}`);
}

/** Runs the suite. */
export async function runDecideSuite(): Promise<BenchResult[]> {
  const conn = compileServer(connectionServer());
  const meshed: ClientInfo = client('10.42.3.17', { kind: 'established', clientId: sa('api', 'shop') });
  const outsider: ClientInfo = client('203.0.113.9', { kind: 'none', reason: 'no_tls_from_remote' });
  expect('connection/permit', authorizeConnection(conn, meshed), (d) => d.allowed && d.authz.name === 'orders-cluster-plaintext');
  expect('connection/deny', authorizeConnection(conn, outsider), (d) => !d.allowed && d.kind === 'tcp-refuse');

  const reqServer = requestServer();
  const cs: CompiledServer = compileServer(reqServer);
  if (cs.invalid !== undefined) throw new Error(`decide: request server is invalid: ${cs.invalid}`);
  const checkout: ClientInfo = client('10.42.7.201', { kind: 'established', clientId: sa('checkout', 'shop') });
  const stranger: ClientInfo = client('10.42.9.33', { kind: 'established', clientId: sa('crawler', 'edge') });
  // Matches route-40 (prefix /api/v5/orders, one route-level authz ahead of the 20 server ones);
  // the hostname routes are scored too (the regex one fails on the extra segment).
  const permitReq = request('GET', '/api/v5/orders/8812/items?fields=price,stock');
  const notFoundReq = request('GET', '/static/app.js');
  expect('request/permit', authorizeRequest(cs, checkout, permitReq), (d) => d.allowed && d.route?.name === 'route-40' && d.authz.name === 'orders-from-shop');
  expect('request/deny-403', authorizeRequest(cs, stranger, permitReq), (d) => !d.allowed && d.kind === 'http403');
  expect('request/404', authorizeRequest(cs, checkout, notFoundReq), (d) => !d.allowed && d.kind === 'http404');

  const routeCount = httpRoutes().length;
  const facts = { routes: routeCount, serverAuthzs: reqServer.authorizations.length, headers: Object.keys(permitReq.headers).length };
  const tasks: MicroTask[] = [
    { name: 'connection/permit', op: () => score(authorizeConnection(conn, meshed)), batch: 1000, targetNs: 300, extra: { authzs: 5, matchedIndex: 3 } },
    { name: 'connection/deny', op: () => score(authorizeConnection(conn, outsider)), batch: 1000, targetNs: 300, extra: { authzs: 5, matchedIndex: 0 } },
    {
      name: 'request/50routes-20authz/permit',
      op: () => score(authorizeRequest(cs, checkout, permitReq)),
      batch: 200,
      targetNs: 1500,
      extra: { ...facts, routeAuthzs: 1, matchedIndex: 20 },
    },
    { name: 'request/50routes-20authz/deny-403', op: () => score(authorizeRequest(cs, stranger, permitReq)), batch: 200, targetNs: 1500, extra: facts },
    { name: 'request/50routes-20authz/404', op: () => score(authorizeRequest(cs, checkout, notFoundReq)), batch: 200, targetNs: 1500, extra: facts },
    {
      name: 'compile/50routes-20authz',
      op: () => {
        const c = compileServer(reqServer);
        return c.authzs.length + (c.httpRoutes?.routes.length ?? 0);
      },
      batch: 10,
      extra: facts,
    },
  ];
  return runMicro(tasks);
}
