import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CellCounter, CellGauge, CellHistogram, EXPOSITION_CONTENT_TYPE, MetricsRegistry, observe } from './metric-cells.js';

describe('MetricsRegistry', () => {
  it('renders counters, gauges and histograms in the text exposition format, in registration order', () => {
    const registry = new MetricsRegistry();
    const requests = new CellCounter(registry, 'request_total', 'Total count of HTTP requests');
    const open = new CellGauge(registry, 'tcp_open_connections', 'Number of currently-open connections');
    const latency = new CellHistogram(registry, 'response_latency_ms', 'Latency', [1, 10, 100]);
    requests.cell({ direction: 'inbound', target_port: '8080' }).value += 3;
    requests.cell({ direction: 'inbound', target_port: '9090' }).value++;
    open.cell({ direction: 'inbound' }).value = 2;
    const h = latency.cell({ status_code: '200' });
    for (const v of [0.5, 1, 5, 50, 5000]) observe(h, v);
    assert.equal(
      registry.render(),
      [
        '# HELP request_total Total count of HTTP requests',
        '# TYPE request_total counter',
        'request_total{direction="inbound",target_port="8080"} 3',
        'request_total{direction="inbound",target_port="9090"} 1',
        '# HELP tcp_open_connections Number of currently-open connections',
        '# TYPE tcp_open_connections gauge',
        'tcp_open_connections{direction="inbound"} 2',
        '# HELP response_latency_ms Latency',
        '# TYPE response_latency_ms histogram',
        'response_latency_ms_bucket{status_code="200",le="1"} 2',
        'response_latency_ms_bucket{status_code="200",le="10"} 3',
        'response_latency_ms_bucket{status_code="200",le="100"} 4',
        'response_latency_ms_bucket{status_code="200",le="+Inf"} 5',
        'response_latency_ms_sum{status_code="200"} 5056.5',
        'response_latency_ms_count{status_code="200"} 5',
        '',
      ].join('\n'),
    );
    assert.equal(registry.contentType, EXPOSITION_CONTENT_TYPE);
  });

  it('escapes label values and help text, so a hostile value cannot forge a series', () => {
    const registry = new MetricsRegistry();
    const c = new CellCounter(registry, 'tcp_open_total', 'help with \\ and\nnewline');
    c.cell({ sni: 'evil"} 1e9\nforged_total{a="b' }).value = 1;
    c.cell({ sni: 'back\\slash' }).value = 2;
    const text = registry.render();
    assert.equal(
      text,
      [
        '# HELP tcp_open_total help with \\\\ and\\nnewline',
        '# TYPE tcp_open_total counter',
        'tcp_open_total{sni="evil\\"} 1e9\\nforged_total{a=\\"b"} 1',
        'tcp_open_total{sni="back\\\\slash"} 2',
        '',
      ].join('\n'),
    );
    assert.ok(!text.split('\n').some((l) => l.startsWith('forged_total')));
  });

  it('renders an unlabelled series without braces, and runs refresh callbacks at scrape time', () => {
    const registry = new MetricsRegistry();
    let reads = 0;
    const gauge: CellGauge = new CellGauge(registry, 'identity_cert_expiration_timestamp_seconds', 'expiry', () => {
      reads++;
      if (reads === 1) gauge.clear();
      else gauge.cell({}).value = 1_800_000_000;
    });
    assert.doesNotMatch(registry.render(), /^identity_cert_expiration_timestamp_seconds /m);
    assert.match(registry.render(), /^identity_cert_expiration_timestamp_seconds 1800000000$/m);
    assert.equal(reads, 2);
  });

  it('refuses two families of the same name', () => {
    const registry = new MetricsRegistry();
    new CellCounter(registry, 'request_total', 'x');
    assert.throws(() => new CellGauge(registry, 'request_total', 'y'), { code: 'ERR_METRIC_DUPLICATE' });
  });

  it('exports the process families with processMetrics', async () => {
    const text = await new MetricsRegistry({ processMetrics: true }).metrics();
    assert.match(text, /^# TYPE process_cpu_seconds_total counter$/m);
    const rss = Number(/^process_resident_memory_bytes (\d+)$/m.exec(text)?.[1]);
    assert.ok(rss > 10e6 && rss < 4e9, String(rss));
    const start = Number(/^process_start_time_seconds (\d+)$/m.exec(text)?.[1]);
    assert.ok(Math.abs(start - (Date.now() / 1000 - process.uptime())) < 2, String(start));
    if (process.platform === 'linux') {
      assert.match(text, /^process_open_fds \d+$/m);
      assert.match(text, /^process_max_fds \d+$/m);
      assert.match(text, /^process_threads \d+$/m);
      assert.match(text, /^process_virtual_memory_bytes \d+$/m);
    }
  });
});
