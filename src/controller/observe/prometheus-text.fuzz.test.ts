/**
 * The exposition parser under arbitrary input: bodies rendered from generated samples (escapes,
 * odd values, timestamps) parse back to the same samples; mutated and random bodies never throw,
 * and whatever they give stays within the limits.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { fuzzParams, latin1, mutated } from '../../shared/testing/fuzz.js';
import { DEFAULT_PROMETHEUS_TEXT_LIMITS, type PrometheusTextLimits, parsePrometheusText } from './prometheus-text.js';

interface Gen {
  name: string;
  labels: [string, string][];
  value: number;
  ts: number | undefined;
}

const nameArb = fc.stringMatching(/^[a-zA-Z_:][a-zA-Z0-9_:]{0,20}$/);
const labelNameArb = fc.stringMatching(/^[a-zA-Z_][a-zA-Z0-9_]{0,12}$/);
const valueArb = fc.oneof(fc.double(), fc.integer().map(Number), fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY));
const sampleArb: fc.Arbitrary<Gen> = fc.record({
  name: nameArb,
  labels: fc.uniqueArray(fc.tuple(labelNameArb, fc.string({ maxLength: 30, unit: 'binary' })), { maxLength: 6, selector: ([k]) => k }),
  value: valueArb,
  ts: fc.option(fc.integer({ min: -(2 ** 40), max: 2 ** 45 }), { nil: undefined }),
});

const escapeValue = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
const formatValue = (v: number) => (Number.isNaN(v) ? 'NaN' : v === Number.POSITIVE_INFINITY ? '+Inf' : v === Number.NEGATIVE_INFINITY ? '-Inf' : String(v));

function render(samples: readonly Gen[]): string {
  return samples
    .map((s) => {
      const labels = s.labels.length === 0 ? '' : `{${s.labels.map(([k, v]) => `${k}="${escapeValue(v)}"`).join(',')}}`;
      return `${s.name}${labels} ${formatValue(s.value)}${s.ts === undefined ? '' : ` ${s.ts}`}\n`;
    })
    .join('');
}

const SMALL: PrometheusTextLimits = { maxBodyLength: 4096, maxLineLength: 256, maxSeries: 8, maxLabels: 4, maxNameLength: 16, maxLabelValueLength: 16 };

function assertWithin(body: string, limits: PrometheusTextLimits): void {
  const r = parsePrometheusText(body, limits);
  if (r.ok) {
    assert.ok(r.samples.length <= limits.maxSeries);
    for (const s of r.samples) {
      assert.ok(s.name.length <= limits.maxNameLength);
      const labels = Object.entries(s.labels);
      assert.ok(labels.length <= limits.maxLabels);
      for (const [k, v] of labels) assert.ok(k.length <= limits.maxNameLength && v.length <= limits.maxLabelValueLength);
    }
  } else {
    assert.ok(r.problems.length >= 1 && r.problems.length <= 10);
  }
}

describe('parsePrometheusText (fuzz)', () => {
  it('parses rendered samples back to themselves', () => {
    fc.assert(
      fc.property(fc.array(sampleArb, { maxLength: 20 }), (gen) => {
        const r = parsePrometheusText(render(gen));
        assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
        assert.equal(r.samples.length, gen.length);
        r.samples.forEach((s, i) => {
          const g = gen[i] as Gen;
          assert.equal(s.name, g.name);
          assert.deepEqual({ ...s.labels }, Object.fromEntries(g.labels));
          assert.ok(Object.is(s.value, g.value) || (s.value === 0 && g.value === 0), `${s.value} vs ${g.value}`);
          assert.equal(s.timestampMs, g.ts);
        });
      }),
      fuzzParams(200),
    );
  });

  it('never throws on mutated bodies, and keeps to its limits', () => {
    const valid = fc.array(sampleArb, { maxLength: 12 }).map((g) => new Uint8Array(Buffer.from(`# TYPE x counter\n# HELP x h\n${render(g)}`)));
    fc.assert(
      fc.property(mutated(valid, 6), (body) => {
        assertWithin(body.toString('utf8'), SMALL);
        assertWithin(body.toString('latin1'), DEFAULT_PROMETHEUS_TEXT_LIMITS);
      }),
      fuzzParams(300),
    );
  });

  it('never throws on random text', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          latin1({ maxLength: 600 }),
          fc.string({ maxLength: 600, unit: fc.constantFrom('a', '{', '}', '"', '\\', '=', ',', ' ', '\n', '#', '1', 'e', '+', 'I', 'n', 'f', '.') }),
        ),
        (body) => {
          assertWithin(body, SMALL);
          assertWithin(body, DEFAULT_PROMETHEUS_TEXT_LIMITS);
        },
      ),
      fuzzParams(300),
    );
  });
});
