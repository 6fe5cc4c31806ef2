import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { normalizeRequestTarget } from './request-target.js';

const RUNS = Number(process.env.WARD_FUZZ_RUNS ?? 300);

function ok(target: string): string {
  const r = normalizeRequestTarget(target);
  assert.ok(r.ok, `${target}: ${r.ok ? '' : r.reason}`);
  return r.target;
}

function refusedWith(target: string, pattern: RegExp): void {
  const r = normalizeRequestTarget(target);
  assert.equal(r.ok, false, `${target} was accepted as ${r.ok ? r.target : ''}`);
  if (!r.ok) assert.match(r.reason, pattern, target);
}

describe('normalizeRequestTarget', () => {
  it('returns the same string for a path that needs nothing', () => {
    const target = '/api/v1/orders?id=7&x=%2F';
    const r = normalizeRequestTarget(target);
    assert.ok(r.ok);
    assert.equal(r.target, target);
    assert.equal(ok('/'), '/');
    assert.equal(ok('*'), '*');
  });

  it('removes dot-segments, a %2e counting as a dot', () => {
    const cases: [string, string][] = [
      ['/public/../admin', '/admin'],
      ['/public/%2e%2e/admin', '/admin'],
      ['/public/%2E%2E/admin', '/admin'],
      ['/public/.%2e/admin', '/admin'],
      ['/public/%2e./admin', '/admin'],
      ['/./admin', '/admin'],
      ['/a/b/c/./../../g', '/a/g'],
      ['/a/b/.', '/a/b/'],
      ['/a/b/..', '/a/'],
      ['/..', '/'],
      ['/../../admin', '/admin'],
      ['/a/..', '/'],
      ['/.well-known/x', '/.well-known/x'],
      ['/a/...', '/a/...'],
      ['/a/..b/c', '/a/..b/c'],
    ];
    for (const [input, expected] of cases) assert.equal(ok(input), expected, input);
  });

  it('merges repeated slashes before removing dot-segments', () => {
    assert.equal(ok('//admin'), '/admin');
    assert.equal(ok('///admin//x///'), '/admin/x/');
    assert.equal(ok('/public//../admin'), '/admin');
  });

  it('decodes percent-encoded unreserved characters and upper-cases the rest', () => {
    assert.equal(ok('/%61dmin'), '/admin');
    assert.equal(ok('/%7Euser/%2D%5F'), '/~user/-_');
    assert.equal(ok('/a%3ab%20c'), '/a%3Ab%20c');
    assert.equal(ok('/caf%c3%a9'), '/caf%C3%A9');
  });

  it('keeps the query as it came', () => {
    assert.equal(ok('/public/../admin?next=/../x&p=%2F'), '/admin?next=/../x&p=%2F');
    assert.equal(ok('//x?'), '/x?');
  });

  it('refuses fragments, encoded slashes and backslashes, raw backslashes, controls and bad escapes', () => {
    refusedWith('/admin#x', /fragment/);
    refusedWith('/public?q=1#x', /fragment/);
    refusedWith('/admin%2F', /encoded slash/);
    refusedWith('/admin%2f..%2fx', /encoded slash/);
    refusedWith('/public/..%5Cadmin', /encoded slash or backslash/);
    refusedWith('/public/..\\admin', /backslash/);
    refusedWith('/a%00b', /control/);
    refusedWith('/a%7f', /control/);
    refusedWith('/a\u0000b', /control/);
    refusedWith('/a b', /whitespace/);
    refusedWith('/caf\u00e9', /non-ASCII/);
    refusedWith('/a%4', /malformed percent/);
    refusedWith('/a%zz', /malformed percent/);
    refusedWith('/a%', /malformed percent/);
    refusedWith('admin', /not a path/);
    refusedWith('', /not a path/);
    refusedWith('http://x/admin', /not a path/);
  });

  const targetChars = fc.constantFrom(...'/./.../%2e%2E%2f%41%7e%5c?#\\ab_-~:;=&'.split(''), '/', '.', '%2e', '%2E', '..', '//');
  const anyTarget = fc.oneof(
    fc.string({ unit: 'binary-ascii', maxLength: 40 }),
    fc.array(targetChars, { maxLength: 20 }).map((a) => `/${a.join('')}`),
  );

  it('never throws; what it accepts is stable, free of dot-segments, empty segments and encoded unreserved characters', () => {
    fc.assert(
      fc.property(anyTarget, (t) => {
        const r = normalizeRequestTarget(t);
        if (!r.ok) return;
        const again = normalizeRequestTarget(r.target);
        assert.deepEqual(again, { ok: true, target: r.target });
        if (r.target === '*') return;
        const q = r.target.indexOf('?');
        const path = q < 0 ? r.target : r.target.slice(0, q);
        assert.ok(path.startsWith('/'));
        assert.ok(!path.includes('//'), path);
        for (const seg of path.split('/')) assert.ok(seg !== '.' && seg !== '..', path);
        assert.ok(!/%(2[DdEe]|5[Ff]|7[Ee]|[346][0-9A-Fa-f]|[57][0-9Aa])/.test(path), path);
        assert.ok(!/%[0-9A-F]?[a-f]/.test(path), path);
        assert.equal(q < 0 ? '' : r.target.slice(q), q < 0 ? '' : t.slice(t.indexOf('?')));
      }),
      { numRuns: RUNS },
    );
  });

  it('resolves dot-segments as the WHATWG URL parser does (no empty segments, no other escapes)', () => {
    const seg = fc.constantFrom('a', 'b', 'admin', '.', '..', '%2e', '%2E%2e', '.%2e', 'x.y');
    const path = fc.array(seg, { minLength: 1, maxLength: 8 }).map((a) => `/${a.join('/')}`);
    fc.assert(
      fc.property(path, (p) => {
        assert.equal(ok(p), new URL(p, 'http://h').pathname, p);
      }),
      { numRuns: RUNS },
    );
  });
});
