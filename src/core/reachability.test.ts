import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { authorizeRequest, compileServer } from './authorize.js';
import { ALL_NETWORKS, defaultPolicyAuthz } from './default-policy.js';
import { parseCidr, parseIp } from './ip.js';
import { type Authorization, defaultMeta, type HttpRoute, type HttpRouteMatch, type InboundServer } from './model.js';
import { type ReachSource, reachTarget } from './reachability.js';

const ID = (sa: string, ns = 'emojivoto') => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const NS_SUFFIX = ['emojivoto', 'serviceaccount', 'identity', 'linkerd', 'cluster', 'local'];

function mkAuthz(name: string, authn: Authorization['authentication'], networks = ALL_NETWORKS): Authorization {
  return { meta: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name }, networks, authentication: authn };
}
function mkMatch(m: Partial<HttpRouteMatch>): HttpRouteMatch {
  return { headers: [], queryParams: [], ...m };
}
function mkRoute(name: string, matches: HttpRouteMatch[], authorizations: Authorization[] = []): HttpRoute {
  return { meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name }, hosts: [], authorizations, rules: [{ matches, filters: [] }] };
}
function mkServer(authorizations: Authorization[], routes: HttpRoute[]): InboundServer {
  return { meta: { group: 'policy.linkerd.io', kind: 'server', name: 'web-http' }, protocol: { kind: 'http1', routes }, authorizations };
}

/** The emojivoto lockdown of web's port: the namespace's identities on web-app, anyone on GET /ready. */
const WEB = mkServer(
  [mkAuthz('web-from-emojivoto', { kind: 'tlsAuthenticated', identities: [], suffixes: [NS_SUFFIX] })],
  [
    mkRoute('web-app', [mkMatch({ path: { kind: 'prefix', value: '/' } })]),
    mkRoute('web-probes', [mkMatch({ path: { kind: 'exact', value: '/ready' }, method: 'GET' })], [mkAuthz('web-probes-kubelet', { kind: 'unauthenticated' })]),
  ],
);

const SOURCES: ReachSource[] = [
  { identity: ID('vote-bot'), ip: '127.22.3.4' },
  { identity: ID('vote-bot', 'bad'), ip: '127.22.3.5' },
  { identity: undefined, ip: '127.22.3.9' },
  { identity: ID('web'), ip: '127.22.3.6' },
];

describe('reachTarget', () => {
  it('gives each source the decision and the authorization per route', () => {
    const r = reachTarget({ server: WEB }, SOURCES);
    assert.deepEqual(
      r.routes.map((x) => [x.route?.name, x.sample?.method, x.sample?.path, x.verdicts.map((v) => `${v.decision}:${v.authz?.name ?? v.reason}`)]),
      [
        [
          'web-app',
          'GET',
          '/',
          ['allow:web-from-emojivoto', 'deny:unauthorized request on route', 'deny:unauthorized request on route', 'allow:web-from-emojivoto'],
        ],
        ['web-probes', 'GET', '/ready', ['allow:web-probes-kubelet', 'allow:web-probes-kubelet', 'allow:web-probes-kubelet', 'allow:web-probes-kubelet']],
      ],
    );
  });

  it('agrees with authorizeRequest on the sample request for every source', () => {
    const cs = compileServer(WEB);
    const r = reachTarget({ server: WEB }, SOURCES);
    for (const route of r.routes) {
      const sample = route.sample;
      assert.ok(sample !== undefined);
      SOURCES.forEach((s, i) => {
        const d = authorizeRequest(
          cs,
          {
            ip: parseIp(s.ip)!,
            tls: s.identity === undefined ? { kind: 'none', reason: 'no_tls_from_remote' } : { kind: 'established', clientId: s.identity },
          },
          { method: sample.method, path: sample.path, headers: {} },
        );
        assert.equal(d.allowed, route.verdicts[i]?.decision !== 'deny');
        assert.equal(d.route, route.route);
      });
    }
  });

  it('evaluates sources with one identity and the same networks once', () => {
    const many: ReachSource[] = Array.from({ length: 50 }, (_, i) => ({ identity: ID('vote-bot'), ip: `127.22.3.${10 + i}` }));
    const r = reachTarget({ server: WEB }, [...many, { identity: ID('web'), ip: '127.22.3.6' }]);
    assert.equal(r.groups, 2);
    assert.equal(r.evaluations, 4, 'two groups on two routes');
    assert.ok(r.routes[0]?.verdicts.every((v) => v.decision === 'allow'));
  });

  it('tells apart sources of one identity that a network authorization separates', () => {
    const host = mkAuthz('web-from-host', { kind: 'unauthenticated' }, [{ net: parseCidr('127.0.0.1/32')!, except: [] }]);
    const srv = mkServer([host], [mkRoute('web-app', [mkMatch({ path: { kind: 'prefix', value: '/' } })])]);
    const r = reachTarget({ server: srv }, [
      { identity: undefined, ip: '127.0.0.1' },
      { identity: undefined, ip: '127.22.3.9' },
    ]);
    assert.equal(r.groups, 2);
    assert.deepEqual(
      r.routes[0]?.verdicts.map((v) => v.decision),
      ['allow', 'deny'],
    );
  });

  it('reports a route no request can select as shadowed', () => {
    const srv = mkServer(
      [mkAuthz('all', { kind: 'unauthenticated' })],
      [
        mkRoute('first', [mkMatch({ path: { kind: 'exact', value: '/x' } })]),
        // Same match, later: the older route wins every request.
        { ...mkRoute('second', [mkMatch({ path: { kind: 'exact', value: '/x' } })]), meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'second' } },
        mkRoute('regex', [mkMatch({ path: { kind: 'regex', value: '/api/v[0-9]+/(a|b)' } })]),
        mkRoute('literal-regex', [mkMatch({ path: { kind: 'regex', value: '/metrics/.*' } })]),
      ],
    );
    const r = reachTarget({ server: srv }, SOURCES);
    assert.deepEqual(
      r.routes.map((x) => [x.route?.name, x.shadowed, x.sample?.path]),
      [
        ['first', false, '/x'],
        ['second', true, undefined],
        ['regex', true, undefined],
        ['literal-regex', false, '/metrics/x'],
      ],
    );
    assert.equal(r.routes[1]?.verdicts.length, 0);
  });

  it('decides opaque ports per connection and marks audit permits', () => {
    const audit = defaultPolicyAuthz('audit', ALL_NETWORKS)!;
    const srv: InboundServer = { meta: defaultMeta('audit'), protocol: { kind: 'opaque' }, authorizations: [audit] };
    const r = reachTarget({ server: srv }, SOURCES);
    assert.equal(r.routes.length, 1);
    assert.equal(r.routes[0]?.route, undefined);
    assert.ok(r.routes[0]?.verdicts.every((v) => v.decision === 'audit' && v.authz?.name === 'audit'));
  });

  it('denies everyone on an invalid server, as the proxy does', () => {
    const broken = mkServer([{ ...mkAuthz('no-nets', { kind: 'unauthenticated' }), networks: [] }], [mkRoute('all', [])]);
    const r = reachTarget({ server: broken }, SOURCES);
    assert.equal(r.routes.length, 1);
    assert.ok(r.routes[0]?.verdicts.every((v) => v.decision === 'deny' && v.reason?.startsWith('invalid policy')));
  });

  it('denies a source whose address does not parse', () => {
    const r = reachTarget({ server: WEB }, [{ identity: ID('web'), ip: 'not-an-ip' }]);
    assert.equal(r.routes[0]?.verdicts[0]?.decision, 'deny');
    assert.equal(r.groups, 0);
  });

  it('admits the pod itself through the proxy-added localhost authorization', () => {
    const deny: InboundServer = { meta: defaultMeta('deny'), protocol: { kind: 'opaque' }, authorizations: [] };
    const localhost = {
      ...mkAuthz('localhost', { kind: 'unauthenticated' }, [{ net: parseCidr('127.22.3.6/32')!, except: [] }]),
      meta: defaultMeta('localhost'),
    };
    const r = reachTarget({ server: deny, localhost }, SOURCES);
    assert.deepEqual(
      r.routes[0]?.verdicts.map((v) => `${v.decision}:${v.authz?.name ?? ''}`),
      ['deny:', 'deny:', 'deny:', 'allow:localhost'],
    );
  });

  it('samples gRPC routes with a gRPC call', () => {
    const grpc: InboundServer = {
      meta: { group: 'policy.linkerd.io', kind: 'server', name: 'emoji-grpc' },
      protocol: {
        kind: 'grpc',
        routes: [
          {
            meta: { group: 'gateway.networking.k8s.io', kind: 'GRPCRoute', name: 'list' },
            hosts: [],
            authorizations: [],
            rules: [{ matches: [{ rpc: { service: 'emojivoto.v1.EmojiService', method: 'ListAll' }, headers: [] }], filters: [] }],
          },
        ],
      },
      authorizations: [mkAuthz('emoji-from-web', { kind: 'tlsAuthenticated', identities: [ID('web')], suffixes: [] })],
    };
    const r = reachTarget({ server: grpc }, SOURCES);
    assert.deepEqual(r.routes[0]?.sample, { method: 'POST', path: '/emojivoto.v1.EmojiService/ListAll', host: undefined });
    assert.deepEqual(
      r.routes[0]?.verdicts.map((v) => v.decision),
      ['deny', 'deny', 'deny', 'allow'],
    );
  });
});
