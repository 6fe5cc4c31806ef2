import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createRegistry, promClient } from '../../shared/index.js';
import { DEFAULT_PROMETHEUS_TEXT_LIMITS, familyOf, isCumulative, type ParsedSample, parsePrometheusText } from './prometheus-text.js';

function ok(body: string, limits = DEFAULT_PROMETHEUS_TEXT_LIMITS) {
  const r = parsePrometheusText(body, limits);
  assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
  return r;
}

function codes(body: string, limits = DEFAULT_PROMETHEUS_TEXT_LIMITS): string[] {
  const r = parsePrometheusText(body, limits);
  assert.ok(!r.ok, 'expected the body to be refused');
  return r.problems.map((p) => `${p.line}:${p.code}`);
}

const plain = (s: ParsedSample) => ({ name: s.name, labels: { ...s.labels }, value: s.value, ...(s.timestampMs !== undefined ? { ts: s.timestampMs } : {}) });

describe('parsePrometheusText', () => {
  it('reads what a ward proxy writes: HELP/TYPE, labels, histograms with +Inf', () => {
    const r = ok(
      [
        '# HELP request_total Total count of HTTP requests',
        '# TYPE request_total counter',
        'request_total{direction="inbound",target_addr="127.22.0.3:8080",tls="true",client_id="web.demo.serviceaccount.identity.linkerd.cluster.local"} 12',
        '# TYPE response_latency_ms histogram',
        'response_latency_ms_bucket{direction="inbound",le="1"} 3',
        'response_latency_ms_bucket{direction="inbound",le="+Inf"} 12',
        'response_latency_ms_sum{direction="inbound"} 40.5',
        'response_latency_ms_count{direction="inbound"} 12',
        '',
      ].join('\n'),
    );
    assert.deepEqual(r.samples.map(plain), [
      {
        name: 'request_total',
        labels: { direction: 'inbound', target_addr: '127.22.0.3:8080', tls: 'true', client_id: 'web.demo.serviceaccount.identity.linkerd.cluster.local' },
        value: 12,
      },
      { name: 'response_latency_ms_bucket', labels: { direction: 'inbound', le: '1' }, value: 3 },
      { name: 'response_latency_ms_bucket', labels: { direction: 'inbound', le: '+Inf' }, value: 12 },
      { name: 'response_latency_ms_sum', labels: { direction: 'inbound' }, value: 40.5 },
      { name: 'response_latency_ms_count', labels: { direction: 'inbound' }, value: 12 },
    ]);
    assert.equal(r.types.get('response_latency_ms'), 'histogram');
    assert.deepEqual(familyOf('response_latency_ms_bucket', r.types), { family: 'response_latency_ms', type: 'histogram' });
    assert.ok(isCumulative('response_latency_ms_sum', r.types));
    assert.ok(isCumulative('request_total', r.types));
  });

  it('reads what prom-client writes, escapes included', async () => {
    const registry = createRegistry();
    const { Counter, Gauge, Histogram } = promClient();
    const c = new Counter({ name: 'odd_total', help: 'a "help" with \\ and\nnewline', labelNames: ['v'] as const, registers: [registry] });
    c.inc({ v: 'quote " backslash \\ newline \n end' }, 3);
    new Gauge({ name: 'g', help: 'g', registers: [registry] }).set(Number.NaN);
    new Histogram({ name: 'h_seconds', help: 'h', buckets: [0.1, 1], registers: [registry] }).observe(0.5);
    const r = ok(await registry.metrics());
    const byName = new Map(r.samples.map((s) => [`${s.name}${s.labels.le ?? ''}`, s]));
    assert.equal(byName.get('odd_total')?.labels.v, 'quote " backslash \\ newline \n end');
    assert.equal(byName.get('odd_total')?.value, 3);
    assert.ok(Number.isNaN(byName.get('g')?.value));
    assert.equal(byName.get('h_seconds_bucket+Inf')?.value, 1);
    assert.equal(byName.get('h_seconds_bucket0.1')?.value, 0);
    assert.equal(r.types.get('h_seconds'), 'histogram');
  });

  it('takes values in every spelling Go accepts, timestamps, blanks and trailing commas', () => {
    const r = ok('a 1e3\nb -Inf\nc +Inf 1700000000000\nd{x="1",} .5 -1\n\t e \t NaN\nf{} 0x\n'.replace('0x', '7'));
    assert.deepEqual(
      r.samples.map((s) => [s.name, s.value, s.timestampMs]),
      [
        ['a', 1000, undefined],
        ['b', Number.NEGATIVE_INFINITY, undefined],
        ['c', Number.POSITIVE_INFINITY, 1_700_000_000_000],
        ['d', 0.5, -1],
        ['e', Number.NaN, undefined],
        ['f', 7, undefined],
      ],
    );
  });

  it("names linkerd2-proxy's counter families without their _total", () => {
    const r = ok('# TYPE inbound_http_authz_allow counter\ninbound_http_authz_allow_total 3\n');
    assert.deepEqual(familyOf('inbound_http_authz_allow_total', r.types), { family: 'inbound_http_authz_allow', type: 'counter' });
    assert.ok(isCumulative('inbound_http_authz_allow_total', r.types));
    assert.ok(!isCumulative('tcp_open_connections', new Map([['tcp_open_connections', 'gauge']])));
  });

  it('keeps a label named __proto__ as a label, without touching prototypes', () => {
    const r = ok('x{__proto__="polluted",constructor="c"} 1\n');
    const s = r.samples[0] as ParsedSample;
    assert.equal(Object.getOwnPropertyDescriptor(s.labels, '__proto__')?.value, 'polluted');
    assert.equal(Object.getPrototypeOf(s.labels), null);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  it('refuses malformed lines with their line numbers, collecting several', () => {
    assert.deepEqual(codes('ok 1\n1bad 2\nx{a="1" 3\nx{a=1} 3\nx{a="1",a="2"} 1\nx abc\nx 1 1.5\n# TYPE x nonsense\n'), [
      '2:PROM_BAD_NAME',
      '3:PROM_BAD_LABELS',
      '4:PROM_BAD_LABELS',
      '5:PROM_DUPLICATE_LABEL',
      '6:PROM_BAD_VALUE',
      '7:PROM_BAD_TIMESTAMP',
      '8:PROM_BAD_TYPE',
    ]);
    assert.deepEqual(codes('x{a="unterminated} 1\n'), ['1:PROM_BAD_LABELS']);
    assert.deepEqual(codes('x{a="ends in backslash\\'), ['1:PROM_BAD_LABELS']);
    assert.deepEqual(codes('x{a="1"}1\n'), ['1:PROM_BAD_VALUE']);
    assert.deepEqual(codes('x 1 99999999999999999999\n'), ['1:PROM_BAD_TIMESTAMP']);
    assert.deepEqual(codes('# TYPE x counter\n# TYPE x gauge\n'), ['2:PROM_DUPLICATE_TYPE']);
    assert.deepEqual(codes('x\n'), ['1:PROM_BAD_VALUE']);
  });

  it('stops at ten problems however many lines are bad', () => {
    const r = parsePrometheusText('!\n'.repeat(100_000));
    assert.ok(!r.ok);
    assert.equal(r.problems.length, 10);
  });

  it('holds its limits against a hostile pod', () => {
    const small = {
      ...DEFAULT_PROMETHEUS_TEXT_LIMITS,
      maxBodyLength: 1000,
      maxLineLength: 100,
      maxSeries: 3,
      maxLabels: 2,
      maxNameLength: 10,
      maxLabelValueLength: 5,
    };
    assert.deepEqual(codes('x 1\n'.repeat(300), small), ['0:PROM_BODY_TOO_LARGE']);
    assert.deepEqual(codes(`x{a="${'v'.repeat(200)}"} 1\n`, small), ['1:PROM_LINE_TOO_LONG']);
    assert.deepEqual(codes('a 1\nb 1\nc 1\nd 1\ne 1\n', small), ['4:PROM_TOO_MANY_SERIES']);
    assert.deepEqual(codes('x{a="1",b="2",c="3"} 1\n', small), ['1:PROM_TOO_MANY_LABELS']);
    assert.deepEqual(codes('abcdefghijklmnop 1\n', small), ['1:PROM_NAME_TOO_LONG']);
    assert.deepEqual(codes('x{a="123456"} 1\n', small), ['1:PROM_LABEL_VALUE_TOO_LONG']);
    // Six escaped backslashes: six characters once unescaped.
    assert.deepEqual(codes(`x{a="${'\\\\'.repeat(6)}"} 1\n`, small), ['1:PROM_LABEL_VALUE_TOO_LONG']);
    // Comments count against the line limit too, and the default series limit holds on a big body.
    assert.deepEqual(codes(`# ${'h'.repeat(200)}\n`, small), ['1:PROM_LINE_TOO_LONG']);
    const many = parsePrometheusText('x 1\n'.repeat(DEFAULT_PROMETHEUS_TEXT_LIMITS.maxSeries + 1));
    assert.ok(!many.ok);
    assert.equal(many.problems[0]?.code, 'PROM_TOO_MANY_SERIES');
  });
});
