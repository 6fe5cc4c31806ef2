/**
 * Route filters (§4.10): redirect locations as upstream and Gateway API compute them, header
 * edits in order with the proxy's own headers protected, failure injection by ratio, and filters
 * that cannot be applied.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PathMatch, RouteFilter } from '../../core/index.js';
import { editHttp1Headers, editHttp2Headers, type FilterOutcome, runRouteFilters } from './route-filters.js';

type Redirect = Extract<RouteFilter, { kind: 'requestRedirect' }>;

const prefix = (value: string): PathMatch => ({ kind: 'prefix', value });
const never = () => 0.999_999;

function redirect(f: Omit<Redirect, 'kind'>, authority: string | undefined, path: string, pathMatch: PathMatch | undefined = prefix('/')): FilterOutcome {
  return runRouteFilters([{ kind: 'requestRedirect', ...f }], pathMatch, false, { authority, path }, never);
}

function location(out: FilterOutcome): string | undefined {
  assert.equal(out.kind, 'respond');
  return out.kind === 'respond' ? out.response.location : undefined;
}

describe('runRouteFilters: RequestRedirect', () => {
  it('builds the location from the request and the overrides, 302 by default', () => {
    const out = redirect({ host: 'example.org' }, 'web.emojivoto:8080', '/foo?a=b&c');
    assert.deepEqual(out, {
      kind: 'respond',
      filter: 'requestRedirect',
      response: { status: 302, grpcStatus: 5, message: 'redirected', location: 'http://example.org:8080/foo?a=b&c' },
    });
    assert.equal(location(redirect({ host: 'example.org' }, 'web:80', '/foo')), 'http://example.org/foo', 'the default port is dropped');
    assert.equal(location(redirect({ host: 'example.org', port: 80 }, 'web:8080', '/foo')), 'http://example.org:80/foo');
    assert.equal(location(redirect({ port: 9090 }, 'web:8080', '/foo')), 'http://web:9090/foo');
    assert.equal(location(redirect({ port: 80 }, 'web:8080', '/foo')), 'http://web/foo');
    assert.equal(location(redirect({ scheme: 'https', port: 443 }, 'web:8080', '/foo')), 'https://web/foo');
    assert.equal(location(redirect({ scheme: 'https' }, '[fd00::1]:8080', '/')), 'https://[fd00::1]:8080/');
    const moved = redirect({ host: 'example.org', status: 301 }, 'web', '/');
    assert.equal(moved.kind === 'respond' && moved.response.status, 301);
  });

  it('replaces the full path (query included) or the matched prefix (query kept)', () => {
    assert.equal(location(redirect({ path: { kind: 'full', value: '/bar' } }, 'web', '/foo?a=b')), 'http://web/bar');
    assert.equal(location(redirect({ path: { kind: 'prefix', value: '/qux' } }, 'web', '/foo/bar?x=1', prefix('/foo'))), 'http://web/qux/bar?x=1');
    assert.equal(location(redirect({ path: { kind: 'prefix', value: '/qux/' } }, 'web', '/foo/bar', prefix('/foo/'))), 'http://web/qux/bar');
    assert.equal(location(redirect({ path: { kind: 'prefix', value: '/qux' } }, 'web', '/foo', prefix('/foo'))), 'http://web/qux');
    assert.equal(location(redirect({ path: { kind: 'prefix', value: '/' } }, 'web', '/foo/bar', prefix('/foo'))), 'http://web/bar');
    assert.equal(location(redirect({ path: { kind: 'prefix', value: '/v2' } }, 'web', '/a', prefix('/'))), 'http://web/v2/a');
  });

  it('skips a redirect to the request itself, and fails one it cannot build', () => {
    assert.deepEqual(redirect({ port: 8080 }, 'web:8080', '/foo'), { kind: 'forward', edits: [] });
    assert.deepEqual(redirect({ host: 'example.org' }, undefined, '/').kind, 'respond');
    assert.deepEqual(redirect({ path: { kind: 'full', value: '/x' } }, undefined, '/'), {
      kind: 'invalid',
      reason: 'RequestRedirect: no authority to redirect to',
    });
    assert.equal(redirect({ path: { kind: 'prefix', value: '/x' } }, 'web', '/a', { kind: 'exact', value: '/a' }).kind, 'invalid');
    const matchAll = runRouteFilters(
      [{ kind: 'requestRedirect', path: { kind: 'prefix', value: '/x' } }],
      undefined,
      false,
      { authority: 'web', path: '/a' },
      never,
    );
    assert.equal(matchAll.kind, 'invalid', 'a rule without a path match has no prefix to replace');
    assert.equal(redirect({ host: 'example.org', status: 42 }, 'web', '/').kind, 'invalid');
    assert.equal(redirect({ host: 'exa mple.org' }, 'web', '/').kind, 'invalid');
  });
});

describe('runRouteFilters: FailureInjector and order', () => {
  const inject = (numerator: number, denominator: number): RouteFilter => ({
    kind: 'failureInjector',
    status: 503,
    message: 'injected',
    ratio: { numerator, denominator },
  });

  it('fires with the ratio: always at n >= d, never at 0, by the draw otherwise', () => {
    const fire = (f: RouteFilter, draw: number) => runRouteFilters([f], undefined, false, { authority: 'web', path: '/' }, () => draw).kind;
    assert.equal(fire(inject(1, 1), 0.999), 'respond');
    assert.equal(fire(inject(0, 1), 0), 'forward');
    assert.equal(fire(inject(1, 4), 0.2), 'respond');
    assert.equal(fire(inject(1, 4), 0.3), 'forward');
    assert.deepEqual(runRouteFilters([inject(1, 1)], undefined, false, { authority: 'web', path: '/' }, never), {
      kind: 'respond',
      filter: 'failureInjector',
      response: { status: 503, grpcStatus: 9, message: 'injected', location: undefined },
    });
  });

  it('answers with the gRPC code on gRPC routes', () => {
    const out = runRouteFilters(
      [{ kind: 'failureInjector', status: 14, message: 'down', ratio: { numerator: 1, denominator: 1 } }],
      undefined,
      true,
      { authority: 'web', path: '/svc/M' },
      never,
    );
    assert.deepEqual(out, { kind: 'respond', filter: 'failureInjector', response: { status: 200, grpcStatus: 14, message: 'down', location: undefined } });
  });

  it('runs filters in order: edits before a firing filter are moot, later filters do not run', () => {
    const headers: RouteFilter = { kind: 'requestHeaderModifier', add: [], set: [{ name: 'X-A', value: '1' }], remove: [] };
    assert.equal(
      runRouteFilters([headers, inject(1, 1), { kind: 'requestRedirect', host: 'x' }], undefined, false, { authority: 'w', path: '/' }, never).kind,
      'respond',
    );
    const out = runRouteFilters([headers, inject(0, 1)], undefined, false, { authority: 'w', path: '/' }, never);
    assert.deepEqual(out, { kind: 'forward', edits: [{ add: [], set: [{ name: 'x-a', value: '1' }], remove: [] }] });
  });
});

describe('header edits', () => {
  const mod = (f: Omit<Extract<RouteFilter, { kind: 'requestHeaderModifier' }>, 'kind'>) => {
    const out = runRouteFilters([{ kind: 'requestHeaderModifier', ...f }], undefined, false, { authority: 'w', path: '/' }, never);
    assert.equal(out.kind, 'forward');
    return out.kind === 'forward' ? out.edits : [];
  };

  it('adds, then sets, then removes, case-insensitively (HTTP/1 pairs and HTTP/2 objects)', () => {
    const edits = mod({
      add: [{ name: 'X-Multi', value: 'two' }],
      set: [{ name: 'x-set', value: 'new' }],
      remove: ['X-Gone'],
    });
    assert.deepEqual(editHttp1Headers(['Host', 'web', 'X-Multi', 'one', 'X-Set', 'old', 'x-gone', 'a', 'X-Set', 'older'], edits), [
      'Host',
      'web',
      'X-Multi',
      'one',
      'x-multi',
      'two',
      'x-set',
      'new',
    ]);
    const h2 = editHttp2Headers({ ':path': '/', 'x-multi': 'one', 'x-set': 'old', 'x-gone': 'a' }, edits);
    assert.deepEqual(h2, { ':path': '/', 'x-multi': ['one', 'two'], 'x-set': 'new' });
  });

  it('never touches the headers the proxy owns', () => {
    const edits = mod({
      add: [{ name: 'l5d-client-id', value: 'forged' }],
      set: [
        { name: 'Host', value: 'evil' },
        { name: 'content-length', value: '0' },
        { name: 'Transfer-Encoding', value: 'chunked' },
        { name: 'x-ok', value: 'yes' },
      ],
      remove: ['L5D-DST-OVERRIDE', 'connection'],
    });
    assert.deepEqual(edits, [{ add: [], set: [{ name: 'x-ok', value: 'yes' }], remove: [] }]);
  });

  it('refuses names and values that cannot be sent', () => {
    const bad = (f: RouteFilter) => runRouteFilters([f], undefined, false, { authority: 'w', path: '/' }, never).kind;
    assert.equal(bad({ kind: 'requestHeaderModifier', add: [{ name: 'bad name', value: 'x' }], set: [], remove: [] }), 'invalid');
    assert.equal(bad({ kind: 'requestHeaderModifier', add: [], set: [{ name: 'x', value: 'a\r\nb: c' }], remove: [] }), 'invalid');
  });
});
