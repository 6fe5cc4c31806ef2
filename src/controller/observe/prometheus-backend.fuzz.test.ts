/**
 * What PrometheusBackend reads from and writes to a Prometheus, under arbitrary input: any
 * label value (every Unicode code point, quotes, backslashes, control characters) reads back,
 * with Prometheus's string rules, as exactly the matcher written; and any JSON answer, well-formed
 * answers mutated included, parses to samples with exactly the grouping labels and a non-NaN
 * number, or to a message, never an exception.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { fuzzParams } from '../../shared/testing/fuzz.js';
import { latestQuery, parseTargetsAnswer, parseVectorAnswer } from './prometheus-backend.js';
import { parsePromqlMatchers } from './test-promql.js';

/** Strings full of what a literal must escape, and any well-formed Unicode. */
const value = fc.oneof(
  fc.string({ unit: fc.constantFrom('"', '\\', '}', '{', ',', '=', '\n', '\r', '\t', '\u0000', '\u007f', '\u2028', 'x', 'é', '😀', "'", '`') }),
  fc.string({ unit: 'grapheme' }),
  fc.string({ unit: 'binary' }),
);

const sampleValue = fc.oneof(
  fc.double().map(String),
  fc.constantFrom('NaN', '+Inf', '-Inf', 'Inf', '1e400', '', ' 1', '0x10', '1_0', '.5', '5.', '-0'),
  fc.string(),
);
const labelSet = fc.dictionary(fc.constantFrom('pod', 'namespace', 'le', 'job', '__name__', 'x'), fc.oneof(fc.string(), fc.integer() as fc.Arbitrary<unknown>));
const wellFormedVector = fc
  .array(fc.record({ metric: labelSet, value: fc.tuple(fc.double(), sampleValue) }), { maxLength: 8 })
  .map((result) => ({ status: 'success', data: { resultType: 'vector', result } }));

/** Replaces one node of a JSON value (chosen by `path`) with `replacement`. */
function mutateJson(v: unknown, path: readonly number[], replacement: unknown): unknown {
  if (path.length === 0 || typeof v !== 'object' || v === null) return replacement;
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length === 0) return replacement;
  const at = (path[0] as number) % entries.length;
  const copy: Record<string, unknown> | unknown[] = Array.isArray(v) ? [...v] : { ...(v as Record<string, unknown>) };
  const [k, child] = entries[at] as [string, unknown];
  (copy as Record<string, unknown>)[k] = mutateJson(child, path.slice(1), replacement);
  return copy;
}

describe('prometheus backend fuzz', () => {
  it('every label value reads back as exactly the matcher written', () => {
    fc.assert(
      fc.property(fc.array(value, { minLength: 1, maxLength: 3 }), (values) => {
        const match = Object.fromEntries(values.map((v, i) => [`l${i}`, v]));
        const q = latestQuery({ metric: 'request_total', match, by: [] });
        const m = /^sum by \(\) \(request_total(\{.*\})\)$/s.exec(q);
        assert.ok(m, q);
        assert.deepEqual(parsePromqlMatchers(m[1] as string), [['job', 'linkerd-proxy'], ...Object.entries(match)]);
      }),
      fuzzParams(500),
    );
  });

  it('any answer is samples with exactly the grouping labels and a number, or a message', () => {
    const check = (body: unknown) => {
      const r = parseVectorAnswer(body, ['pod', 'namespace']);
      if (typeof r === 'string') return;
      for (const s of r) {
        assert.deepEqual(Object.keys(s.labels), ['pod', 'namespace']);
        for (const v of Object.values(s.labels)) assert.equal(typeof v, 'string');
        assert.ok(typeof s.value === 'number' && !Number.isNaN(s.value));
      }
    };
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue(), wellFormedVector), (body) => check(body)),
      fuzzParams(300),
    );
    fc.assert(
      fc.property(wellFormedVector, fc.array(fc.nat(), { maxLength: 6 }), fc.jsonValue(), (body, path, replacement) =>
        check(mutateJson(body, path, replacement)),
      ),
      fuzzParams(300),
    );
  });

  it('any targets answer is a list of targets or a message', () => {
    const target = fc.record({
      labels: labelSet,
      scrapeUrl: fc.oneof(fc.string(), fc.constant('http://127.0.0.1:4191/metrics'), fc.integer() as fc.Arbitrary<unknown>),
      lastError: fc.oneof(fc.string(), fc.constant(null)),
      lastScrape: fc.oneof(fc.string(), fc.constant('0001-01-01T00:00:00Z')),
      health: fc.oneof(fc.constantFrom('up', 'down', 'unknown'), fc.string()),
    });
    const body = fc.array(target, { maxLength: 5 }).map((activeTargets) => ({ status: 'success', data: { activeTargets } }));
    fc.assert(
      fc.property(body, fc.array(fc.nat(), { maxLength: 6 }), fc.jsonValue(), (b, path, replacement) => {
        for (const input of [b, mutateJson(b, path, replacement)]) {
          const r = parseTargetsAnswer(input, '');
          if (typeof r === 'string') continue;
          for (const t of r) {
            assert.equal(typeof t.namespace, 'string');
            assert.equal(typeof t.address, 'string');
            assert.equal(typeof t.up, 'boolean');
          }
        }
      }),
      fuzzParams(300),
    );
  });
});
