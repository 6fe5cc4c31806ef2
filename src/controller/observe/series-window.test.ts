import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bucketQuantile, histogramQuantile, latestOver, rateOver, type ScrapedSeries, TargetWindow } from './series-window.js';

const S = 1000;
const pod = (name: string) => ({ namespace: 'demo', pod: name, workload_kind: 'Deployment', workload_name: name.replace(/-\d+$/, '') });
const counter = (value: number, labels: Record<string, string> = {}, name = 'request_total'): ScrapedSeries => ({
  name,
  labels: { ...pod('web-0'), ...labels },
  value,
  cumulative: true,
});
const gauge = (value: number, labels: Record<string, string> = {}): ScrapedSeries => ({
  name: 'tcp_open_connections',
  labels: { ...pod('web-0'), ...labels },
  value,
  cumulative: false,
});
const BIG = 1_000_000;

function rate(w: TargetWindow | TargetWindow[], by: string[], fromMs: number, toMs: number, match?: Record<string, string>) {
  return rateOver(Array.isArray(w) ? w : [w], { metric: 'request_total', by, ...(match !== undefined ? { match } : {}) }, fromMs, toMs).map((s) => ({
    ...s.labels,
    value: s.value,
  }));
}

describe('TargetWindow', () => {
  it('rates a counter over the scrapes in the window', () => {
    const w = new TargetWindow(10);
    for (let i = 0; i <= 6; i++) w.record(i * 10 * S, [counter(i * 50)], BIG);
    // 300 requests in 60 s.
    assert.deepEqual(rate(w, [], 0, 60 * S), [{ value: 5 }]);
    // The last 20 s: scrapes at 40, 50, 60 → 100 in 20 s.
    assert.deepEqual(rate(w, [], 40 * S, 60 * S), [{ value: 5 }]);
    // One point is no rate.
    assert.deepEqual(rate(w, [], 60 * S, 60 * S), []);
  });

  it('counts a reset as the new value, as Prometheus does', () => {
    const w = new TargetWindow(10);
    for (const [i, v] of [100, 150, 20, 70].entries()) w.record(i * 10 * S, [counter(v)], BIG);
    // 50 + 20 (reset: the new count) + 50 = 120 in 30 s.
    assert.deepEqual(rate(w, [], 0, 30 * S), [{ value: 4 }]);
  });

  it('starts a series that appears after the first scrape from zero, but not on the first scrape', () => {
    const w = new TargetWindow(10);
    w.record(0, [counter(500, { client_id: 'old' })], BIG);
    w.record(10 * S, [counter(500, { client_id: 'old' }), counter(30, { client_id: 'new' })], BIG);
    assert.deepEqual(rate(w, ['client_id'], 0, 10 * S), [
      { client_id: 'old', value: 0 },
      { client_id: 'new', value: 3 },
    ]);
  });

  it('sums by the kept labels, drops empty ones, and matches an absent label as ""', () => {
    const w = new TargetWindow(10);
    const series = (n: number) => [
      counter(n, { tls: 'true', client_id: 'a' }),
      counter(2 * n, { tls: 'true', client_id: 'b' }),
      counter(n, { tls: 'no_identity', no_tls_reason: 'no_tls_from_remote' }),
    ];
    w.record(0, series(0), BIG);
    w.record(10 * S, series(10), BIG);
    assert.deepEqual(rate(w, ['tls'], 0, 10 * S), [
      { tls: 'true', value: 3 },
      { tls: 'no_identity', value: 1 },
    ]);
    assert.deepEqual(rate(w, ['client_id'], 0, 10 * S, { no_tls_reason: '' }), [
      { client_id: 'a', value: 1 },
      { client_id: 'b', value: 2 },
    ]);
    assert.deepEqual(rate(w, ['client_id', 'no_tls_reason'], 0, 10 * S, { tls: 'no_identity' }), [{ no_tls_reason: 'no_tls_from_remote', value: 1 }]);
  });

  it('answers gauges from the last scrape only, and not once it is stale', () => {
    const w = new TargetWindow(10);
    w.record(0, [gauge(3, { client_id: 'a' }), gauge(1, { client_id: 'b' })], BIG);
    w.record(10 * S, [gauge(2, { client_id: 'a' })], BIG);
    const latest = (since: number) =>
      latestOver([w], { metric: 'tcp_open_connections', by: ['client_id'] }, since).map((s) => ({ ...s.labels, value: s.value }));
    assert.deepEqual(latest(0), [{ client_id: 'a', value: 2 }]);
    assert.deepEqual(latest(11 * S), []);
    // Gauges have no rate.
    assert.deepEqual(rateOver([w], { metric: 'tcp_open_connections', by: [] }, 0, 10 * S), []);
  });

  it('forgets series absent from the whole ring and refuses new ones past the limit', () => {
    const w = new TargetWindow(3);
    w.record(0, [counter(1, { client_id: 'gone' })], BIG);
    assert.equal(w.size, 1);
    w.record(1 * S, [], BIG);
    w.record(2 * S, [], BIG);
    assert.equal(w.size, 0);
    const u = w.record(3 * S, [counter(1, { client_id: 'a' }), counter(1, { client_id: 'b' }), counter(1, { client_id: 'c' })], 2);
    assert.deepEqual(u, { series: 2, dropped: 1 });
  });

  it('sums over several targets', () => {
    const a = new TargetWindow(5);
    const b = new TargetWindow(5);
    a.record(0, [counter(0)], BIG);
    a.record(10 * S, [counter(10)], BIG);
    b.record(0, [counter(0)], BIG);
    b.record(10 * S, [counter(30)], BIG);
    assert.deepEqual(rate([a, b], ['workload_name'], 0, 10 * S), [{ workload_name: 'web', value: 4 }]);
  });
});

describe('histogram quantiles', () => {
  it("interpolates inside the bucket as Prometheus's histogram_quantile", () => {
    const b = [
      { le: 1, count: 50 },
      { le: 10, count: 90 },
      { le: 100, count: 100 },
      { le: Number.POSITIVE_INFINITY, count: 100 },
    ];
    assert.equal(bucketQuantile(0.5, b), 1);
    assert.equal(bucketQuantile(0.25, b), 0.5);
    assert.equal(bucketQuantile(0.7, b), 1 + 9 * (20 / 40));
    assert.equal(bucketQuantile(0.95, b), 10 + 90 * (5 / 10));
    // A rank in +Inf answers the highest finite bound; no observations, no answer.
    assert.equal(
      bucketQuantile(0.99, [
        { le: 1, count: 1 },
        { le: Number.POSITIVE_INFINITY, count: 10 },
      ]),
      1,
    );
    assert.equal(
      bucketQuantile(0.5, [
        { le: 1, count: 0 },
        { le: Number.POSITIVE_INFINITY, count: 0 },
      ]),
      undefined,
    );
    assert.equal(bucketQuantile(0.5, [{ le: 1, count: 3 }]), undefined);
  });

  it('computes quantiles per group from bucket rates over the window', () => {
    const w = new TargetWindow(5);
    const buckets = (n: number, slow: number) => [
      { ...counter(n, { le: '10' }, 'response_latency_ms_bucket') },
      { ...counter(n + slow, { le: '100' }, 'response_latency_ms_bucket') },
      { ...counter(n + slow, { le: '+Inf' }, 'response_latency_ms_bucket') },
    ];
    w.record(0, buckets(0, 0), BIG);
    w.record(10 * S, buckets(90, 10), BIG);
    const rates = rateOver([w], { metric: 'response_latency_ms', by: ['workload_name'] }, 0, 10 * S, 'response_latency_ms_bucket', true);
    const [p50] = histogramQuantile(0.5, rates, ['workload_name']);
    const [p99] = histogramQuantile(0.99, rates, ['workload_name']);
    assert.deepEqual({ ...p50?.labels }, { workload_name: 'web' });
    assert.ok(Math.abs((p50?.value ?? 0) - 10 * (50 / 90)) < 1e-9);
    assert.ok(Math.abs((p99?.value ?? 0) - (10 + 90 * (9 / 10))) < 1e-9);
  });
});
