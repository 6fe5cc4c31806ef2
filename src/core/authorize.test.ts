import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { authorizeConnection, authorizeRequest, type ClientInfo, compileServer, localhostAuthz, reauthorizeConnection, type TlsState } from './authorize.js';
import { ALL_NETWORKS } from './default-policy.js';
import { traceRequest } from './explain.js';
import { parseCidr, parseIp } from './ip.js';
import { type Authorization, defaultMeta, type HttpRoute, type HttpRouteMatch, type InboundServer } from './model.js';

const CLUSTER = [{ net: parseCidr('10.0.0.0/8')!, except: [] }];
const ID = (sa: string, ns = 'app') => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;

function mkAuthz(name: string, authn: Authorization['authentication'], networks = ALL_NETWORKS): Authorization {
  return { meta: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name }, networks, authentication: authn };
}
function mkMatch(m: Partial<HttpRouteMatch>): HttpRouteMatch {
  return { headers: [], queryParams: [], ...m };
}
function mkRoute(name: string, matches: HttpRouteMatch[], extra: Partial<HttpRoute> = {}): HttpRoute {
  return { meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name }, hosts: [], authorizations: [], rules: [{ matches, filters: [] }], ...extra };
}
function mkServer(authorizations: Authorization[], routes: HttpRoute[] = [mkRoute('all', [mkMatch({ path: { kind: 'prefix', value: '/' } })])]): InboundServer {
  return { meta: { group: 'policy.linkerd.io', kind: 'server', name: 'web' }, protocol: { kind: 'http1', routes }, authorizations };
}
function client(ip: string, tls: TlsState = { kind: 'none', reason: 'no_tls_from_remote' }): ClientInfo {
  return { ip: parseIp(ip)!, tls };
}
const mesh = (id?: string): TlsState => ({ kind: 'established', clientId: id });
const get = (path: string, headers: Record<string, string> = {}) => ({ method: 'GET', path, headers });

describe('authentication', () => {
  const srv = compileServer(
    mkServer([
      mkAuthz('ids', { kind: 'tlsAuthenticated', identities: [ID('web')], suffixes: [['other', 'serviceaccount', 'identity', 'linkerd', 'cluster', 'local']] }),
    ]),
  );
  it('admits exact identities and suffixes only over mesh TLS', () => {
    assert.equal(authorizeRequest(srv, client('10.1.1.1', mesh(ID('web'))), get('/')).allowed, true);
    assert.equal(authorizeRequest(srv, client('10.1.1.1', mesh(ID('x', 'other'))), get('/')).allowed, true);
    assert.equal(authorizeRequest(srv, client('10.1.1.1', mesh(ID('x', 'app'))), get('/')).allowed, false);
    assert.equal(authorizeRequest(srv, client('10.1.1.1', mesh()), get('/')).allowed, false, 'no client cert');
    assert.equal(authorizeRequest(srv, client('10.1.1.1', { kind: 'passthrough', sni: ID('web') }), get('/')).allowed, false);
  });
  it('a suffix does not match the bare suffix itself', () => {
    assert.equal(authorizeRequest(srv, client('10.1.1.1', mesh('other.serviceaccount.identity.linkerd.cluster.local')), get('/')).allowed, false);
  });
  it('* matches any DNS-like identity but never a SPIFFE URI', () => {
    const any = compileServer(mkServer([mkAuthz('any', { kind: 'tlsAuthenticated', identities: [], suffixes: [[]] })]));
    assert.equal(authorizeRequest(any, client('10.1.1.1', mesh(ID('web'))), get('/')).allowed, true);
    assert.equal(authorizeRequest(any, client('10.1.1.1', mesh('spiffe://cluster.local/ns/app/sa/web')), get('/')).allowed, false);
    const exact = compileServer(mkServer([mkAuthz('uri', { kind: 'tlsAuthenticated', identities: ['spiffe://cluster.local/ns/app/sa/web'], suffixes: [] })]));
    assert.equal(authorizeRequest(exact, client('10.1.1.1', mesh('spiffe://cluster.local/ns/app/sa/web')), get('/')).allowed, true);
  });
  it('tlsUnauthenticated needs terminated TLS but no certificate', () => {
    const s = compileServer(mkServer([mkAuthz('tls', { kind: 'tlsUnauthenticated' })]));
    assert.equal(authorizeRequest(s, client('10.1.1.1', mesh()), get('/')).allowed, true);
    assert.equal(authorizeRequest(s, client('10.1.1.1'), get('/')).allowed, false);
  });
});

describe('networks and localhost', () => {
  it('honours except and always admits loopback last', () => {
    const nets = [{ net: parseCidr('10.0.0.0/8')!, except: [parseCidr('10.9.0.0/16')!] }];
    const s = compileServer(mkServer([mkAuthz('net', { kind: 'unauthenticated' }, nets)]));
    assert.equal(authorizeRequest(s, client('10.1.0.1'), get('/')).allowed, true);
    const d = authorizeRequest(s, client('10.9.0.1'), get('/'));
    assert.equal(d.allowed, false);
    assert.equal(!d.allowed && d.kind, 'http403');
    const local = authorizeConnection(s, client('127.0.0.1'));
    assert.equal(local.allowed && local.authz.name, 'localhost');
    const local6 = authorizeConnection(compileServer(mkServer([])), client('::1'));
    assert.equal(local6.allowed && local6.authz.name, 'localhost');
  });
  it('local mode narrows the localhost authorization to the pod address', () => {
    const s = compileServer(mkServer([]), { localhost: localhostAuthz([{ net: parseCidr('127.20.0.5/32')!, except: [] }]) });
    const own = authorizeConnection(s, client('127.20.0.5'));
    assert.equal(own.allowed && own.authz.name, 'localhost');
    // The host and the other pods share the loopback, so they are not "localhost" for this pod.
    assert.equal(authorizeConnection(s, client('127.0.0.1')).allowed, false);
    assert.equal(authorizeConnection(s, client('::1')).allowed, false);
    assert.equal(authorizeRequest(s, client('127.20.0.6'), get('/')).allowed, false);
  });
  it('an authorization without networks makes the policy invalid and fails closed', () => {
    const s = compileServer(mkServer([mkAuthz('broken', { kind: 'unauthenticated' }, [])]));
    const d = authorizeRequest(s, client('127.0.0.1'), get('/'));
    assert.equal(!d.allowed && d.kind, 'http500');
    assert.equal(authorizeConnection(s, client('127.0.0.1')).allowed, false);
  });
});

describe('routes', () => {
  const open = mkAuthz('open', { kind: 'unauthenticated' });
  it('no route is 404 (gRPC 5), a route without authorization is 403 (gRPC 7)', () => {
    const s = compileServer(mkServer([], [mkRoute('api', [mkMatch({ path: { kind: 'prefix', value: '/api' } })])]));
    const miss = authorizeRequest(s, client('10.1.1.1'), get('/other'));
    assert.equal(!miss.allowed && miss.kind, 'http404');
    const grpcMiss = authorizeRequest(s, client('10.1.1.1'), { method: 'POST', path: '/x.Y/Z', headers: { 'content-type': 'application/grpc' } });
    assert.equal(!grpcMiss.allowed && grpcMiss.kind, 'grpc5');
    const deny = authorizeRequest(s, client('10.1.1.1'), get('/api/v1'));
    assert.equal(!deny.allowed && deny.kind, 'http403');
    assert.equal(deny.route?.name, 'api');
  });
  it('route authorizations come before server authorizations', () => {
    const r = mkRoute('api', [mkMatch({ path: { kind: 'prefix', value: '/' } })], { authorizations: [mkAuthz('route-level', { kind: 'unauthenticated' })] });
    const s = compileServer(mkServer([open], [r]));
    const d = authorizeRequest(s, client('10.1.1.1'), get('/'));
    assert.equal(d.allowed && d.authz.name, 'route-level');
  });
  it('prefix matching is segment-wise and ignores a trailing slash in the pattern', () => {
    const s = compileServer(mkServer([open], [mkRoute('foo', [mkMatch({ path: { kind: 'prefix', value: '/foo/' } })])]));
    for (const p of ['/foo', '/foo/', '/foo/bar', '/foo?x=1']) assert.equal(authorizeRequest(s, client('10.1.1.1'), get(p)).allowed, true, p);
    assert.equal(authorizeRequest(s, client('10.1.1.1'), get('/foobar')).allowed, false);
  });
  it('longer path wins; exact and prefix of equal length tie and the earlier route wins', () => {
    const a = mkRoute('prefix', [mkMatch({ path: { kind: 'prefix', value: '/foo' } })]);
    const b = mkRoute('exact', [mkMatch({ path: { kind: 'exact', value: '/foo' } })]);
    const c = mkRoute('longer', [mkMatch({ path: { kind: 'prefix', value: '/foo/bar' } })]);
    const s = compileServer(mkServer([open], [a, b, c]));
    const at = (p: string) => {
      const d = authorizeRequest(s, client('10.1.1.1'), get(p));
      return d.route?.name;
    };
    assert.equal(at('/foo'), 'prefix');
    assert.equal(at('/foo/bar/baz'), 'longer');
    const swapped = compileServer(mkServer([open], [b, a]));
    assert.equal(authorizeRequest(swapped, client('10.1.1.1'), get('/foo')).route?.name, 'exact');
  });
  it('headers, then query params, then method break path ties', () => {
    const plain = mkRoute('plain', [mkMatch({ path: { kind: 'prefix', value: '/a' } })]);
    const hdr = mkRoute('hdr', [mkMatch({ path: { kind: 'prefix', value: '/a' }, headers: [{ name: 'X-Env', kind: 'exact', value: 'canary' }] })]);
    const q = mkRoute('query', [mkMatch({ path: { kind: 'prefix', value: '/a' }, queryParams: [{ name: 'v', kind: 'regex', value: '[0-9]+' }] })]);
    const m = mkRoute('method', [mkMatch({ path: { kind: 'prefix', value: '/a' }, method: 'GET' })]);
    const s = compileServer(mkServer([open], [plain, m, q, hdr]));
    assert.equal(authorizeRequest(s, client('10.0.0.1'), get('/a', { 'x-env': 'canary' })).route?.name, 'hdr');
    assert.equal(authorizeRequest(s, client('10.0.0.1'), get('/a?v=12')).route?.name, 'query');
    assert.equal(authorizeRequest(s, client('10.0.0.1'), get('/a?v=1x')).route?.name, 'method');
    assert.equal(authorizeRequest(s, client('10.0.0.1'), { method: 'POST', path: '/a', headers: {} }).route?.name, 'plain');
  });
  it('a route with a matching hostname outranks routes without hostnames', () => {
    const noHost = mkRoute('no-host', [mkMatch({ path: { kind: 'exact', value: '/foo/bar' } })]);
    const wild = mkRoute('wild', [mkMatch({ path: { kind: 'prefix', value: '/' } })], { hosts: [{ kind: 'suffix', reverseLabels: ['com', 'example'] }] });
    const s = compileServer(mkServer([open], [noHost, wild]));
    const route = (host: string) => authorizeRequest(s, client('10.0.0.1'), { method: 'GET', path: '/foo/bar', headers: { host } }).route?.name;
    assert.equal(route('foo.example.com'), 'wild');
    assert.equal(route('FOO.Example.com.:8080'), 'wild');
    assert.equal(route('example.com'), 'no-host');
  });
  it('regex paths must match the whole path', () => {
    const s = compileServer(mkServer([open], [mkRoute('re', [mkMatch({ path: { kind: 'regex', value: '/v[0-9]+' } })])]));
    assert.equal(authorizeRequest(s, client('10.0.0.1'), get('/v12')).allowed, true);
    assert.equal(authorizeRequest(s, client('10.0.0.1'), get('/v12/x')).allowed, false);
  });
});

describe('grpc', () => {
  const s = compileServer({
    meta: defaultMeta('deny'),
    authorizations: [],
    protocol: {
      kind: 'grpc',
      routes: [
        {
          meta: { group: 'gateway.networking.k8s.io', kind: 'GRPCRoute', name: 'vote' },
          hosts: [],
          authorizations: [mkAuthz('web', { kind: 'tlsAuthenticated', identities: [ID('web')], suffixes: [] })],
          rules: [{ matches: [{ rpc: { service: 'emojivoto.v1.VotingService', method: 'VoteDog' }, headers: [] }], filters: [] }],
        },
      ],
    },
  });
  const call = (m: string) => ({ method: 'POST', path: `/emojivoto.v1.VotingService/${m}`, headers: { 'content-type': 'application/grpc+proto' } });
  it('matches service and method; denies with grpc 7, no route with grpc 5', () => {
    assert.equal(authorizeRequest(s, client('10.0.0.1', mesh(ID('web'))), call('VoteDog')).allowed, true);
    const d7 = authorizeRequest(s, client('10.0.0.1', mesh(ID('bot'))), call('VoteDog'));
    assert.equal(!d7.allowed && d7.kind, 'grpc7');
    const d5 = authorizeRequest(s, client('10.0.0.1', mesh(ID('web'))), call('VoteCat'));
    assert.equal(!d5.allowed && d5.kind, 'grpc5');
  });
});

describe('connections and policy changes', () => {
  it('opaque ports are authorized per connection even for HTTP bytes', () => {
    const s = compileServer({ meta: defaultMeta('all-authenticated'), protocol: { kind: 'opaque' }, authorizations: [] });
    const d = authorizeRequest(s, client('10.0.0.1'), get('/'));
    assert.equal(d.level, 'tcp');
    assert.equal(!d.allowed && d.kind, 'tcp-refuse');
  });
  it('an opaque connection is terminated when the port becomes HTTP, even if still authorized', () => {
    const open = [mkAuthz('open', { kind: 'unauthenticated' })];
    const c = client('10.0.0.1');
    const before = compileServer({ meta: defaultMeta('x'), protocol: { kind: 'opaque' }, authorizations: open });
    assert.equal(authorizeConnection(before, c).allowed, true);
    assert.equal(reauthorizeConnection(compileServer({ ...before.server, protocol: { kind: 'tls' } }), c).allowed, true);
    assert.equal(reauthorizeConnection(compileServer({ ...before.server, protocol: { kind: 'http1', routes: [] } }), c).allowed, false);
    assert.equal(reauthorizeConnection(compileServer({ ...before.server, authorizations: [] }), c).allowed, false);
  });
});

describe('route filters on the decision', () => {
  it('a permit carries the matched rule filters and the path match of its best match; a denial carries none', () => {
    const redirect = { kind: 'requestRedirect' as const, path: { kind: 'prefix' as const, value: '/v2' } };
    const headers = { kind: 'requestHeaderModifier' as const, add: [], set: [{ name: 'x', value: '1' }], remove: [] };
    const route: HttpRoute = {
      ...mkRoute('api', []),
      authorizations: [mkAuthz('cluster', { kind: 'unauthenticated' }, CLUSTER)],
      rules: [
        { matches: [mkMatch({ path: { kind: 'exact', value: '/api' } }), mkMatch({ path: { kind: 'prefix', value: '/api/v1' } })], filters: [redirect] },
        { matches: [mkMatch({ path: { kind: 'prefix', value: '/other' } })], filters: [headers] },
      ],
    };
    const s = compileServer(mkServer([], [route]));
    const d = authorizeRequest(s, client('10.1.1.1'), get('/api/v1/x'));
    assert.equal(d.allowed, true);
    assert.equal(d.allowed && d.filters, route.rules[0]?.filters, 'the policy array itself');
    assert.deepEqual(d.allowed && d.pathMatch, { kind: 'prefix', value: '/api/v1' });
    const other = authorizeRequest(s, client('10.1.1.1'), get('/other'));
    assert.deepEqual(other.allowed && other.filters, [headers]);
    const denied = authorizeRequest(s, client('192.0.2.1'), get('/api/v1/x'));
    assert.equal(denied.allowed, false);
    assert.equal('filters' in denied, false);
  });
});

describe('trace', () => {
  it('names the first failing condition of each candidate', () => {
    const s = compileServer(
      mkServer([mkAuthz('ids', { kind: 'tlsAuthenticated', identities: [ID('web')], suffixes: [] }), mkAuthz('cluster', { kind: 'unauthenticated' }, CLUSTER)]),
    );
    const t = traceRequest(s, client('203.0.113.7', mesh(ID('bot'))), get('/'));
    assert.equal(t.decision.allowed, false);
    assert.deepEqual(
      t.authzs.map((a) => [a.meta.name, a.failure]),
      [
        ['ids', `identity ${ID('bot')} is not in the allowed identities`],
        ['cluster', 'client IP 203.0.113.7 is not in 10.0.0.0/8'],
        ['localhost', 'client IP 203.0.113.7 is not in 127.0.0.1/32, ::1/128'],
      ],
    );
    assert.deepEqual(
      t.routes.map((r) => [r.meta.name, r.outcome]),
      [['all', 'selected']],
    );
  });
});
