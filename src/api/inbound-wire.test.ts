import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { InboundServer } from '../core/index.js';
import { hasCode } from '../shared/index.js';
import type { HttpMethod_Registered } from './gen/http_types.js';
import { Server } from './gen/inbound.js';
import { serverFromWire, serverToWire } from './inbound-wire.js';
import { serverToProtoJson } from './proto-json.js';
import { allFixtureServers, defaultServer, grpcServer, meshIdentities, richHttpServer } from './test-fixtures.js';
import { type JsonStep, jsonAt, jsonDelete, jsonSet } from './test-json.js';

/** core -> wire -> bytes -> wire -> core. */
function roundTrip(s: InboundServer): InboundServer {
  const bytes = Server.encode(serverToWire(s)).finish();
  const r = serverFromWire(Server.decode(bytes));
  assert.ok(r.ok, r.ok ? '' : r.message);
  return r.value;
}

/** A wire message of a fixture with its JSON edited (a deep copy, so fixtures stay intact). */
function edited(s: InboundServer, edit: (json: unknown) => void): Server {
  const json: unknown = structuredClone(serverToProtoJson(s));
  edit(json);
  return Server.fromJSON(json);
}

/** Sets (or with `undefined`, deletes) the value at a path. */
const setAt =
  (path: JsonStep[], v: unknown) =>
  (json: unknown): void =>
    v === undefined ? jsonDelete(json, path) : jsonSet(json, path, v);

const ROUTE: JsonStep[] = ['protocol', 'detect', 'httpRoutes', 0];
const MATCH: JsonStep[] = [...ROUTE, 'rules', 0, 'matches', 0];
const AUTHZ: JsonStep[] = ['authorizations', 0];

describe('serverToWire / serverFromWire', () => {
  it('round-trips every protocol, route, match, filter and authentication variant', () => {
    for (const s of allFixtureServers) assert.deepStrictEqual(roundTrip(s), s, s.meta.name);
  });

  it('round-trips through the canonical JSON as well', () => {
    for (const s of allFixtureServers) {
      const r = serverFromWire(Server.fromJSON(serverToProtoJson(s)));
      assert.ok(r.ok);
      assert.deepStrictEqual(r.value, s);
    }
  });

  it('serverToProtoJson is the generated toJSON of serverToWire', () => {
    for (const s of allFixtureServers) assert.deepStrictEqual(serverToProtoJson(s), Server.toJSON(serverToWire(s)));
  });

  it('maps the default server to the canonical JSON', () => {
    assert.deepStrictEqual(serverToProtoJson(defaultServer), {
      protocol: {
        detect: {
          timeout: '10s',
          httpRoutes: [{ metadata: { default: 'default' }, rules: [{ matches: [{ path: { prefix: '/' } }] }] }],
        },
      },
      authorizations: [
        {
          networks: [{ net: { ip: { ipv4: 0 } } }, { net: { ip: { ipv6: {} } } }],
          authentication: { unauthenticated: {} },
          labels: { group: '', kind: 'default', name: 'all-unauthenticated' },
          metadata: { default: 'all-unauthenticated' },
        },
      ],
      labels: { group: '', kind: 'default', name: 'all-unauthenticated' },
    });
  });

  it('maps networks, identities and suffixes to the canonical JSON', () => {
    const json = serverToProtoJson({ meta: defaultServer.meta, protocol: { kind: 'opaque' }, authorizations: [meshIdentities] });
    assert.deepStrictEqual(jsonAt(json, 'protocol'), { opaque: {} });
    assert.deepStrictEqual(jsonAt(json, 'authorizations', 0), {
      networks: [
        { net: { ip: { ipv4: 0x0a000000 }, prefixLen: 8 }, except: [{ ip: { ipv4: 0x0a010203 }, prefixLen: 32 }] },
        {
          net: { ip: { ipv6: { first: (0xfd00n << 48n).toString() } }, prefixLen: 8 },
          except: [
            { ip: { ipv6: { first: (0xfd00n << 48n).toString(), last: '1' } }, prefixLen: 128 },
            { ip: { ipv6: { first: ((0x2001n << 48n) | (0x0db8n << 32n)).toString() } }, prefixLen: 32 },
          ],
        },
      ],
      authentication: {
        meshTLS: {
          identities: {
            identities: [
              { name: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local' },
              { name: 'vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local' },
            ],
            suffixes: [{ parts: ['emojivoto', 'serviceaccount', 'identity', 'linkerd', 'cluster', 'local'] }, {}],
          },
        },
      },
      labels: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: 'web-authn' },
      metadata: { resource: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: 'web-authn' } },
    });
  });

  it('maps route matches and filters to the canonical JSON', () => {
    const route = jsonAt(serverToProtoJson(richHttpServer), ...ROUTE);
    assert.deepStrictEqual(jsonAt(route, 'hosts'), [{ exact: 'web.example.com' }, { suffix: { reverseLabels: ['com', 'example'] } }]);
    assert.deepStrictEqual(jsonAt(route, 'rules', 0, 'matches'), [
      {
        path: { exact: '/api/vote' },
        headers: [
          { name: 'x-exact', exact: Buffer.from('yes ✓').toString('base64') },
          { name: 'x-regex', regex: 'a.*b' },
        ],
        queryParams: [
          { name: 'q', exact: '1' },
          { name: 'r', regex: '[0-9]+' },
        ],
        method: { registered: 'POST' },
      },
      { path: { regex: '/api/.*' }, method: { unregistered: 'PURGE' } },
      { method: { registered: 'GET' } },
    ]);
    assert.deepStrictEqual(jsonAt(route, 'rules', 0, 'filters'), [
      {
        requestHeaderModifier: {
          add: { headers: [{ name: 'x-add', value: Buffer.from('a').toString('base64') }] },
          set: { headers: [{ name: 'x-set', value: Buffer.from('ß').toString('base64') }] },
          remove: ['x-remove', 'x-other'],
        },
      },
      { redirect: { scheme: { registered: 'HTTPS' }, host: 'other.example.com', path: { prefix: '/v2' }, port: 8443, status: 302 } },
      { redirect: { path: { full: '/moved' } } },
      { redirect: { scheme: { registered: 'HTTP' } } },
      { failureInjector: { status: 503, message: 'injected', ratio: { numerator: 1, denominator: 10 } } },
    ]);
    assert.deepStrictEqual(jsonAt(route, 'rules', 1), { filters: [{ requestHeaderModifier: { remove: ['x-only-remove'] } }] });
    const grpc = jsonAt(serverToProtoJson(grpcServer), 'protocol', 'grpc', 'routes', 0, 'rules', 0);
    assert.deepStrictEqual(jsonAt(grpc, 'matches', 2), { rpc: {} });
    assert.deepStrictEqual(jsonAt(grpc, 'filters', 1), { failureInjector: { code: 14, message: 'unavailable', ratio: { numerator: 1, denominator: 2 } } });
  });

  it('normalises redirect schemes to lower case and keeps unknown schemes unregistered', () => {
    const mk = (scheme: string): InboundServer => ({
      meta: richHttpServer.meta,
      protocol: {
        kind: 'http1',
        routes: [{ meta: richHttpServer.meta, hosts: [], authorizations: [], rules: [{ matches: [], filters: [{ kind: 'requestRedirect', scheme }] }] }],
      },
      authorizations: [],
    });
    const scheme = (s: InboundServer) => {
      const p = s.protocol;
      const f = p.kind === 'http1' ? p.routes[0]?.rules[0]?.filters[0] : undefined;
      return f?.kind === 'requestRedirect' ? f.scheme : undefined;
    };
    assert.equal(scheme(roundTrip(mk('HTTPS'))), 'https');
    assert.equal(scheme(roundTrip(mk('ftp'))), 'ftp');
    assert.deepStrictEqual(jsonAt(serverToProtoJson(mk('ftp')), 'protocol', 'http1', 'routes', 0, 'rules', 0, 'filters', 0), {
      redirect: { scheme: { unregistered: 'ftp' } },
    });
  });

  it('refuses a redirect filter on a gRPC route (the index never produces one)', () => {
    const bad: InboundServer = {
      ...grpcServer,
      protocol: {
        kind: 'grpc',
        routes: [{ meta: grpcServer.meta, hosts: [], authorizations: [], rules: [{ matches: [], filters: [{ kind: 'requestRedirect', status: 301 }] }] }],
      },
    };
    assert.throws(
      () => serverToWire(bad),
      (e) => hasCode(e, 'ERR_WIRE_UNREPRESENTABLE'),
    );
  });

  it('ignores server_ips and the rate limit, which the core model does not carry', () => {
    const m = serverToWire(defaultServer);
    m.serverIps.push({ ip: { $case: 'ipv4', value: 1 } });
    if (m.protocol?.kind?.$case === 'detect') m.protocol.kind.value.httpLocalRateLimit = { metadata: undefined, overrides: [] };
    const r = serverFromWire(Server.decode(Server.encode(m).finish()));
    assert.ok(r.ok);
    assert.deepStrictEqual(r.value, defaultServer);
  });

  const invalid: [string, Server, string][] = [
    ['no protocol', edited(defaultServer, setAt(['protocol'], undefined)), 'protocol: kind not set'],
    ['empty protocol', edited(defaultServer, setAt(['protocol'], {})), 'protocol: kind not set'],
    ['no name label', edited(defaultServer, setAt(['labels', 'name'], undefined)), 'labels: missing "name" label'],
    ['detect without timeout', edited(defaultServer, setAt(['protocol', 'detect', 'timeout'], undefined)), 'protocol.detect.timeout: not set'],
    ['authz without networks', edited(defaultServer, setAt([...AUTHZ, 'networks'], [])), 'authorizations[0].networks: must not be empty'],
    ['authz without authentication', edited(defaultServer, setAt([...AUTHZ, 'authentication'], undefined)), 'authorizations[0].authentication: not set'],
    ['authn with an empty oneof', edited(defaultServer, setAt([...AUTHZ, 'authentication'], {})), 'authorizations[0].authentication: not set'],
    [
      'meshTLS without clients',
      edited(defaultServer, setAt([...AUTHZ, 'authentication'], { meshTLS: {} })),
      'authorizations[0].authentication.meshTLS: clients not set',
    ],
    ['network without net', edited(defaultServer, setAt([...AUTHZ, 'networks', 1, 'net'], undefined)), 'authorizations[0].networks[1].net: network is not set'],
    [
      'network without an address',
      edited(defaultServer, setAt([...AUTHZ, 'networks', 0, 'net'], { prefixLen: 8 })),
      'authorizations[0].networks[0].net: IP address is not set',
    ],
    [
      'IPv4 prefix longer than 32',
      edited(defaultServer, setAt([...AUTHZ, 'networks', 0, 'net', 'prefixLen'], 33)),
      'authorizations[0].networks[0].net: prefix length 33 exceeds 32',
    ],
    [
      'authz without metadata or name label',
      edited(defaultServer, (j) => {
        jsonDelete(j, [...AUTHZ, 'metadata']);
        jsonDelete(j, [...AUTHZ, 'labels']);
      }),
      'authorizations[0].labels: missing "name" label',
    ],
    ['route without metadata', edited(defaultServer, setAt([...ROUTE, 'metadata'], undefined)), 'protocol.detect.httpRoutes[0].metadata: not set'],
    ['host match without a value', edited(defaultServer, setAt([...ROUTE, 'hosts'], [{}])), 'protocol.detect.httpRoutes[0].hosts[0]: match not set'],
    ['path match without a kind', edited(defaultServer, setAt([...MATCH, 'path'], {})), 'protocol.detect.httpRoutes[0].rules[0].matches[0].path: kind not set'],
    [
      'header match without a value',
      edited(defaultServer, setAt([...MATCH, 'headers'], [{ name: 'x' }])),
      'protocol.detect.httpRoutes[0].rules[0].matches[0].headers[0]: value not set',
    ],
    [
      'header match with invalid UTF-8',
      edited(defaultServer, setAt([...MATCH, 'headers'], [{ name: 'x', exact: Buffer.from([0xff]).toString('base64') }])),
      'protocol.detect.httpRoutes[0].rules[0].matches[0].headers[0].exact: not valid UTF-8',
    ],
    [
      'unknown registered method',
      (() => {
        // Set on the message, not in JSON: fromJSON would turn 42 into UNRECOGNIZED.
        const m = serverToWire(defaultServer);
        const k = m.protocol?.kind;
        const match = k?.$case === 'detect' ? k.value.httpRoutes[0]?.rules[0]?.matches[0] : undefined;
        assert.ok(match !== undefined);
        match.method = { type: { $case: 'registered', value: 42 as HttpMethod_Registered } };
        return m;
      })(),
      'protocol.detect.httpRoutes[0].rules[0].matches[0].method.registered: unknown method 42',
    ],
    [
      'filter without a kind',
      edited(defaultServer, setAt([...ROUTE, 'rules', 0, 'filters'], [{}])),
      'protocol.detect.httpRoutes[0].rules[0].filters[0]: kind not set',
    ],
    [
      'failure injector with a zero denominator',
      edited(defaultServer, setAt([...ROUTE, 'rules', 0, 'filters'], [{ failureInjector: { status: 500, ratio: { numerator: 1, denominator: 0 } } }])),
      'protocol.detect.httpRoutes[0].rules[0].filters[0].failureInjector.ratio.denominator: must not be zero',
    ],
  ];
  for (const [name, message, expected] of invalid) {
    it(`rejects ${name}`, () => {
      const r = serverFromWire(Server.decode(Server.encode(message).finish()));
      assert.deepStrictEqual(r, { ok: false, message: expected });
    });
  }

  it('falls back to the deprecated labels for an authorization without metadata', () => {
    const r = serverFromWire(edited(defaultServer, setAt([...AUTHZ, 'metadata'], undefined)));
    assert.ok(r.ok);
    assert.deepStrictEqual(r.value.authorizations[0]?.meta, { group: '', kind: 'default', name: 'all-unauthenticated' });
  });

  it('reads an unset failure-injector ratio as "every request"', () => {
    const r = serverFromWire(edited(defaultServer, setAt([...ROUTE, 'rules', 0, 'filters'], [{ failureInjector: { status: 500 } }])));
    assert.ok(r.ok);
    const p = r.value.protocol;
    assert.deepStrictEqual(p.kind === 'detect' ? p.httpRoutes[0]?.rules[0]?.filters : undefined, [
      { kind: 'failureInjector', status: 500, message: '', ratio: { numerator: 1, denominator: 1 } },
    ]);
  });
});
