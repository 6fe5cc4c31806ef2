/**
 * The `/tap` query parser under arbitrary query strings (it reads what any admitted caller sends):
 * it never throws, and what it accepts is within bounds — printable paths without a query
 * string, token-character methods, counts in range — while what it refuses carries
 * TAP_BAD_QUERY and a message of bounded length.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { fuzzParams } from '../../shared/testing/fuzz.js';
import { PROXY_TAP_BOUNDS, parseTapQuery } from './tap-query.js';

const KEYS = ['path', 'identity', 'method', 'denied', 'max', 'seconds', 'bogus', 'PATH', ''];
const value = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('true', 'false', '0', '1', '100', '3600', '3601', '1000000', '1000001', '-1', '1e3', '0x10', ' 5', '/api', '/a?b', '/a\r\nb', 'GET', 'get '),
  fc.string({ maxLength: 5000 }).map((s) => `/${s}`),
);
const query = fc.array(fc.tuple(fc.constantFrom(...KEYS), value), { maxLength: 8 }).map((pairs) => {
  const p = new URLSearchParams();
  for (const [k, v] of pairs) p.append(k, v);
  return p;
});
const raw = fc.string({ unit: 'binary', maxLength: 200 }).map((s) => new URLSearchParams(s));

describe('parseTapQuery (fuzz)', () => {
  it('never throws; accepts only bounded, printable values; refuses with TAP_BAD_QUERY', () => {
    fc.assert(
      fc.property(fc.oneof(query, raw), (params) => {
        const r = parseTapQuery(params);
        if (!r.ok) {
          assert.equal(r.error.code, 'TAP_BAD_QUERY');
          assert.ok(r.error.message.length < 300);
          return;
        }
        const v = r.value;
        assert.ok(Number.isInteger(v.max) && v.max >= 1 && v.max <= PROXY_TAP_BOUNDS.maxMax);
        assert.ok(Number.isInteger(v.seconds) && v.seconds >= 1 && v.seconds <= PROXY_TAP_BOUNDS.maxSeconds);
        if (v.pathPrefix !== undefined) assert.match(v.pathPrefix, /^\/[\x21-\x3e\x40-\x7e]*$/);
        if (v.method !== undefined) assert.match(v.method, /^[!#$%&'*+\-.^_`|~0-9A-Z]+$/);
        if (v.identity !== undefined) assert.match(v.identity, /^[\x21-\x7e]+$/);
      }),
      fuzzParams(300),
    );
  });
});
