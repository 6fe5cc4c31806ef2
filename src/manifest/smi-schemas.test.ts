import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type DecodeResult, decodeResource } from './decode.js';
import { parseManifestText } from './load.js';
import { checkRe2Regex, hasNestedQuantifier } from './re2.js';
import { smiFieldPath } from './smi-types.js';
import type { SmiResource } from './types.js';

function decodeOne(text: string): DecodeResult {
  const r = parseManifestText(text, 't.yaml');
  assert.deepEqual(r.diagnostics, []);
  const [doc] = r.documents;
  assert.ok(doc);
  return decodeResource(doc);
}

function ok(text: string): SmiResource {
  const r = decodeOne(text);
  assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
  return (r as Extract<DecodeResult, { status: 'ok' }>).resource as SmiResource;
}

/** `code@line:col` of every diagnostic. */
function where(r: DecodeResult): string[] {
  return r.diagnostics.map((d) => `${d.code}@${d.source?.line}:${d.source?.col}`);
}

const HEAD = (apiVersion: string, kind: string) => `apiVersion: ${apiVersion}\nkind: ${kind}\nmetadata: {name: x, namespace: app}\n`;

describe('SMI TrafficTarget, every served version, one normalised shape', () => {
  const expected = {
    destination: { kind: 'ServiceAccount', name: 'api', namespace: 'app', port: 8080 },
    sources: [{ kind: 'ServiceAccount', name: 'web', namespace: 'app' }],
    rules: [{ kind: 'HTTPRouteGroup', name: 'routes', matches: ['metrics'] }],
  };
  it('v1alpha1 keeps its fields at the top level and calls its rules specs', () => {
    const r = ok(`${HEAD('access.smi-spec.io/v1alpha1', 'TrafficTarget')}destination: {kind: ServiceAccount, name: api, namespace: app, port: 8080}
specs: [{kind: HTTPRouteGroup, name: routes, matches: [metrics]}]
sources: [{kind: ServiceAccount, name: web, namespace: app}]
`);
    assert.equal(r.kind, 'TrafficTarget');
    assert.deepEqual(r.spec, expected);
    assert.deepEqual(smiFieldPath(r, ['spec', 'rules', 0, 'name']), ['specs', 0, 'name']);
    assert.deepEqual(smiFieldPath(r, ['spec', 'destination']), ['destination']);
  });
  it('v1alpha2 moves them under spec and keeps destination.port', () => {
    const r = ok(`${HEAD('access.smi-spec.io/v1alpha2', 'TrafficTarget')}spec:
  destination: {kind: ServiceAccount, name: api, namespace: app, port: 8080}
  rules: [{kind: HTTPRouteGroup, name: routes, matches: [metrics]}]
  sources: [{kind: ServiceAccount, name: web, namespace: app}]
`);
    assert.deepEqual(r.spec, expected);
    assert.deepEqual(smiFieldPath(r, ['spec', 'rules', 0]), ['spec', 'rules', 0]);
  });
  it('v1alpha3 has no destination.port: it is reported where written and pruned, as the API server prunes it', () => {
    const r = decodeOne(`${HEAD('access.smi-spec.io/v1alpha3', 'TrafficTarget')}spec:
  destination: {kind: ServiceAccount, name: api, namespace: app, port: 8080}
  rules: [{kind: UDPRoute, name: udp}]
  sources: [{kind: ServiceAccount, name: web}]
`);
    assert.equal(r.status, 'ok');
    assert.deepEqual(where(r), ['POL011@5:72']);
    assert.deepEqual((r as Extract<DecodeResult, { status: 'ok' }>).resource.spec, {
      destination: { kind: 'ServiceAccount', name: 'api', namespace: 'app' },
      sources: [{ kind: 'ServiceAccount', name: 'web' }],
      rules: [{ kind: 'UDPRoute', name: 'udp' }],
    });
  });
  it('refuses a rule kind the version does not know, and a missing destination, at their positions', () => {
    const udp = decodeOne(`${HEAD('access.smi-spec.io/v1alpha2', 'TrafficTarget')}spec:
  destination: {kind: ServiceAccount, name: api}
  rules: [{kind: UDPRoute, name: udp}]
`);
    assert.equal(udp.status, 'invalid');
    assert.deepEqual(where(udp), ['POL010@6:18']);
    const none = decodeOne(`${HEAD('access.smi-spec.io/v1alpha3', 'TrafficTarget')}spec:
  rules: []
`);
    assert.deepEqual(where(none), ['POL012@5:3']);
  });
  it('v1alpha4 is not a served TrafficTarget version (POL005 names the served ones)', () => {
    const r = decodeOne(`${HEAD('access.smi-spec.io/v1alpha4', 'TrafficTarget')}spec: {}\n`);
    assert.equal(r.status, 'invalid');
    assert.match(
      `${r.diagnostics[0]?.message} ${r.diagnostics[0]?.hint}`,
      /access\.smi-spec\.io\/v1alpha1, access\.smi-spec\.io\/v1alpha2, access\.smi-spec\.io\/v1alpha3/,
    );
  });
});

describe('SMI HTTPRouteGroup', () => {
  it('reads top-level matches (v1alpha1, v1alpha2) and spec.matches (v1alpha3, v1alpha4) alike; headers as a map or a list of maps', () => {
    const top = ok(`${HEAD('specs.smi-spec.io/v1alpha2', 'HTTPRouteGroup')}matches:
- {name: api, pathRegex: /api/.*, methods: [GET, HEAD], headers: {user-agent: .*iPhone.*}}
`);
    const spec = ok(`${HEAD('specs.smi-spec.io/v1alpha4', 'HTTPRouteGroup')}spec:
  matches:
  - name: api
    pathRegex: /api/.*
    methods: [GET, HEAD]
    headers: [{user-agent: .*iPhone.*}]
`);
    const want = { matches: [{ name: 'api', pathRegex: '/api/.*', methods: ['GET', 'HEAD'], headers: [{ name: 'user-agent', value: '.*iPhone.*' }] }] };
    assert.deepEqual(top.spec, want);
    assert.deepEqual(spec.spec, want);
    assert.deepEqual(smiFieldPath(top, ['spec', 'matches', 0, 'pathRegex']), ['matches', 0, 'pathRegex']);
  });
  it('v1alpha1 has no headers (POL011), methods are the CRD enum, names are unique (SMI012)', () => {
    const r = decodeOne(`${HEAD('specs.smi-spec.io/v1alpha1', 'HTTPRouteGroup')}matches:
- {name: a, methods: [GET], headers: {x: y}}
- {name: a, methods: [get]}
`);
    assert.equal(r.status, 'invalid');
    assert.deepEqual(where(r), ['POL011@5:38', 'POL010@6:23']);
    const twice = decodeOne(`${HEAD('specs.smi-spec.io/v1alpha1', 'HTTPRouteGroup')}matches:
- {name: a, methods: [GET]}
- {name: a, methods: ['*']}
`);
    assert.deepEqual(where(twice), ['SMI012@6:10']);
  });
  it('points SMI001 at a regex that is not RE2 or reads differently in JavaScript', () => {
    const r = decodeOne(`${HEAD('specs.smi-spec.io/v1alpha4', 'HTTPRouteGroup')}spec:
  matches:
  - {name: a, pathRegex: "/(?!admin).*"}
  - {name: b, headers: {cookie: "(a)\\\\1"}}
  - {name: c, pathRegex: "/api/("}
`);
    assert.equal(r.status, 'invalid');
    assert.deepEqual(where(r), ['SMI001@6:26', 'SMI001@7:33', 'SMI001@8:26']);
    assert.match(r.diagnostics[0]?.message ?? '', /pathRegex "\/\(\?!admin\)\.\*" is not usable: lookarounds/);
    assert.match(r.diagnostics[1]?.message ?? '', /backreference/);
    assert.match(r.diagnostics[2]?.message ?? '', /does not compile/);
  });
});

describe('SMI TCPRoute and UDPRoute', () => {
  it('v1alpha1-v1alpha3 TCPRoutes name no ports (every port); v1alpha4 lists them, [] meaning every port', () => {
    assert.deepEqual(ok(`${HEAD('specs.smi-spec.io/v1alpha1', 'TCPRoute')}`).spec, {});
    assert.deepEqual(ok(`${HEAD('specs.smi-spec.io/v1alpha3', 'TCPRoute')}spec: {}\n`).spec, {});
    assert.deepEqual(ok(`${HEAD('specs.smi-spec.io/v1alpha4', 'TCPRoute')}spec: {matches: {ports: []}}\n`).spec, {});
    assert.deepEqual(ok(`${HEAD('specs.smi-spec.io/v1alpha4', 'TCPRoute')}spec: {matches: {ports: [3306, 6446]}}\n`).spec, { ports: [3306, 6446] });
    assert.deepEqual(ok(`${HEAD('specs.smi-spec.io/v1alpha4', 'UDPRoute')}spec: {matches: {ports: [53]}}\n`).spec, { ports: [53] });
    const bad = decodeOne(`${HEAD('specs.smi-spec.io/v1alpha4', 'TCPRoute')}spec: {matches: {ports: [0, "80"]}}\n`);
    assert.deepEqual(where(bad), ['POL010@4:26', 'POL010@4:29']);
  });
  it('a Gateway API TCPRoute is not an SMI one: ignored, not an error', () => {
    const r = decodeOne(`${HEAD('gateway.networking.k8s.io/v1alpha2', 'TCPRoute')}spec: {}\n`);
    assert.equal(r.status, 'ignored');
    assert.deepEqual(
      r.diagnostics.map((d) => d.code),
      ['POL004'],
    );
  });
});

describe('checkRe2Regex: the common ground of RE2 and JavaScript', () => {
  it('accepts what both engines read alike', () => {
    for (const p of [
      '.*',
      '/api/.*',
      '/emojivoto\\.v1\\.EmojiService/(ListAll|FindByShortcode)',
      '^(.*?;)?(type=insider)(;.*)?$',
      '[a-z0-9-]+',
      '\\d{1,3}',
      '(?:a|b)+',
      '(?<id>\\w+)',
      '\\x41',
      '[\\]a]',
      'a{2,1000}',
    ]) {
      assert.equal(checkRe2Regex(p), undefined, p);
    }
  });
  it('refuses what RE2 refuses and what JavaScript would read differently', () => {
    const cases: [string, RegExp][] = [
      ['(?=a)', /lookaround/],
      ['(?<!a)b', /lookaround/],
      ['(a)\\1', /backreference/],
      ['(?<n>a)\\k<n>', /named backreference/],
      ['\\pL', /Unicode class/],
      ['\\p{Greek}', /Unicode class/],
      ['\\Qa.b\\E', /RE2-only/],
      ['\\Aabc\\z', /RE2-only/],
      ['(?i)get', /inline flags/],
      ['(?P<id>a)', /RE2-only group/],
      ['[[:alpha:]]', /POSIX/],
      ['[]a]', /empty class/],
      ['\\x{41}', /two hex digits/],
      ['\\cA', /JavaScript-only/],
      ['\\u0041', /JavaScript-only/],
      ['a{1001}', /above 1000/],
      ['\\y', /not an escape RE2 knows/],
      ['\\012', /octal/],
      ['a**', /does not compile/],
      ['[a-', /never closed/],
      ['x\\', /lone backslash/],
    ];
    for (const [p, why] of cases) assert.match(checkRe2Regex(p)?.detail ?? 'accepted', why, p);
  });
});

describe('hasNestedQuantifier: repetition JavaScript may backtrack on', () => {
  it('flags a repeated group that itself repeats, and nothing else', () => {
    for (const p of ['(a+)+', '(a*)*$', '(?:x|y+){2,}', '((ab)*c)+', '(a?b)*']) assert.equal(hasNestedQuantifier(p), true, p);
    for (const p of ['/api/.*', '(a+)?', '(ab)+', '(a+){3}', '[(+)]+', '\\(a+\\)+', '(?:/v[0-9])?/x']) assert.equal(hasNestedQuantifier(p), false, p);
  });
});
