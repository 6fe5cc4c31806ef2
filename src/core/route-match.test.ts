import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { HttpRoute, HttpRouteMatch } from './model.js';
import { compileHttpRoutes, normalizeHost, type RouteRequest, selectHttpRoute, selectHttpRouteByScan } from './route-match.js';

const seg = fc.constantFrom('api', 'v1', 'v2', 'orders', 'x', '');
const litPath = fc.array(seg, { minLength: 0, maxLength: 4 }).map((s) => `/${s.join('/')}`);
const match: fc.Arbitrary<HttpRouteMatch> = fc
  .record({
    path: fc.option(
      fc.oneof(
        litPath.map((value) => ({ kind: 'exact' as const, value })),
        litPath.map((value) => ({ kind: 'prefix' as const, value })),
        fc.constantFrom('/api/v[0-9]+.*', '/x/.*', '.*').map((value) => ({ kind: 'regex' as const, value })),
      ),
      { nil: undefined },
    ),
    headers: fc.constantFrom([], [{ name: 'x-env', kind: 'exact' as const, value: 'canary' }]),
    queryParams: fc.constantFrom([], [{ name: 'q', kind: 'exact' as const, value: '1' }]),
    method: fc.option(fc.constantFrom('GET', 'POST'), { nil: undefined }),
  })
  .map((m) => {
    const out: { -readonly [K in keyof HttpRouteMatch]: HttpRouteMatch[K] } = { headers: m.headers, queryParams: m.queryParams };
    if (m.path !== undefined) out.path = m.path;
    if (m.method !== undefined) out.method = m.method;
    return out;
  });
const route = (i: number): fc.Arbitrary<HttpRoute> =>
  fc
    .record({
      rules: fc.array(fc.record({ matches: fc.array(match, { maxLength: 3 }), filters: fc.constant([]) }), { minLength: 1, maxLength: 3 }),
      hosts: fc.constantFrom([], [{ kind: 'exact' as const, value: 'a.example.com' }], [{ kind: 'suffix' as const, reverseLabels: ['com', 'example'] }]),
    })
    .map((r) => ({ meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: `r${i}` }, authorizations: [], ...r }));
const routes = fc.integer({ min: 1, max: 12 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => route(i))));
const request: fc.Arbitrary<RouteRequest> = fc.record({
  method: fc.constantFrom('GET', 'POST'),
  path: fc.array(seg, { minLength: 0, maxLength: 5 }).map((s) => `/${s.join('/')}`),
  query: fc.constantFrom('', 'q=1', 'q=2'),
  host: fc.constantFrom('', 'a.example.com', 'b.example.com', 'other'),
  headers: fc.constantFrom({}, { 'x-env': 'canary' }),
});

describe('HTTP route selection', () => {
  it('the path-segment trie selects exactly what a scan of every route selects', () => {
    fc.assert(
      fc.property(routes, fc.array(request, { minLength: 1, maxLength: 10 }), (rs, reqs) => {
        const table = compileHttpRoutes(rs, () => null);
        for (const req of reqs) {
          const a = selectHttpRoute(table, req);
          const b = selectHttpRouteByScan(table, req);
          assert.equal(a?.route.route.meta.name, b?.route.route.meta.name, `${req.method} ${req.path}?${req.query} host=${req.host}`);
          assert.equal(a?.ruleIndex, b?.ruleIndex);
        }
      }),
      { numRuns: 3000 },
    );
  });

  it('normalises hosts: port, case, trailing dot, IPv6 brackets', () => {
    assert.equal(normalizeHost('Web.Example.COM.:8080'), 'web.example.com');
    assert.equal(normalizeHost('[::1]:80'), '::1');
    assert.equal(normalizeHost(undefined), '');
  });
});
