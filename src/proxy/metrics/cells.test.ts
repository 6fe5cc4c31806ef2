import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { clockedRegistry } from '../testing/metrics.js';
import { CellCounter, CellGauge, CellHistogram, EXPOSITION_CONTENT_TYPE, METRICS_IDLE_TIMEOUT_MS, MetricsRegistry, observe, SeriesGroup } from './cells.js';

/** The sample lines of the exposition (no HELP/TYPE). */
function sampleLines(registry: MetricsRegistry): string[] {
  return registry
    .render()
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'));
}

const LABEL = '[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"';
const SAMPLE = new RegExp(`^[a-zA-Z_:][a-zA-Z0-9_:]*(?:\\{${LABEL}(?:,${LABEL})*\\})? (?:[-+]?[0-9.e+-]+|NaN|[+-]Inf)$`);

/** Asserts the text exposition format: HELP, TYPE, then that family's samples; every line well formed. */
function assertValidExposition(text: string): void {
  assert.ok(text.endsWith('\n'), 'ends with a newline');
  let family: string | undefined;
  const seen = new Set<string>();
  for (const line of text.slice(0, -1).split('\n')) {
    const help = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) /.exec(line);
    if (help !== null) {
      family = help[1];
      assert.ok(!seen.has(family as string), `family ${family} appears once`);
      seen.add(family as string);
      continue;
    }
    if (line.startsWith('# TYPE ')) {
      assert.match(line, new RegExp(`^# TYPE ${family} (counter|gauge|histogram)$`));
      continue;
    }
    assert.match(line, SAMPLE);
    assert.ok(line.startsWith(family as string), `${line} belongs to ${family}`);
    assert.ok(!seen.has(line), `no duplicate sample ${line}`);
    seen.add(line);
  }
}

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
});

describe('MetricsRegistry: idle series eviction', () => {
  const IDLE = 60_000;

  it('evicts a series not updated for the idle period, and keeps one that is', () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const requests = new CellCounter(registry, 'request_total', 'requests');
    const idle = requests.cell({ client_id: 'gone' });
    const busy = requests.cell({ client_id: 'busy' });
    idle.value++;
    busy.value++;
    assert.equal(registry.sweep(), 0);
    for (let i = 0; i < 4; i++) {
      advance(IDLE / 2);
      busy.value++;
      registry.sweep();
    }
    assert.deepEqual(sampleLines(registry), ['request_total{client_id="busy"} 5']);
    assert.equal(idle.evicted, true);
    assert.equal(busy.evicted, false);
    // The family stays, without samples, once its last series went.
    advance(IDLE * 2);
    assert.equal(registry.render(), '# HELP request_total requests\n# TYPE request_total counter\n');
  });

  it('never evicts before the idle period has passed since the last update', () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const c = new CellCounter(registry, 'c', 'x').cell({ a: '1' });
    advance(IDLE - 1);
    c.value++;
    registry.sweep();
    advance(IDLE - 1);
    assert.equal(registry.sweep(), 0, 'updated IDLE - 1 ago');
    advance(1);
    assert.equal(registry.sweep(), 1);
    assert.equal(c.evicted, true);
  });

  it('keeps a gauge whose value is not 0, however long it stays unchanged', () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const open = new CellGauge(registry, 'tcp_open_connections', 'open');
    open.cell({ peer: 'a' }).value = 2;
    open.cell({ peer: 'b' }).value = 0;
    const negative = open.cell({ peer: 'c' });
    negative.value = -1;
    advance(IDLE * 10);
    assert.deepEqual(sampleLines(registry), ['tcp_open_connections{peer="a"} 2', 'tcp_open_connections{peer="c"} -1']);
  });

  it('keeps unlabelled series (process-wide singletons)', () => {
    const { registry, advance } = clockedRegistry(IDLE);
    new CellCounter(registry, 'identity_cert_refresh_count', 'x').cell({}).value = 1;
    new CellCounter(registry, 'labelled_total', 'x').cell({ a: 'b' }).value = 1;
    registry.sweep();
    advance(IDLE * 10);
    assert.deepEqual(sampleLines(registry), ['identity_cert_refresh_count 1']);
  });

  it('evicts histograms by their count', () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const h = new CellHistogram(registry, 'latency_ms', 'x', [1, 10]);
    const a = h.cell({ s: 'a' });
    const b = h.cell({ s: 'b' });
    observe(a, 5);
    observe(b, 5);
    advance(IDLE / 2);
    registry.sweep();
    advance(IDLE / 2);
    observe(a, 50);
    advance(IDLE / 2 + 1);
    const lines = sampleLines(registry);
    assert.ok(lines.includes('latency_ms_count{s="a"} 2'), lines.join('\n'));
    assert.ok(!lines.some((l) => l.includes('s="b"')), lines.join('\n'));
    assert.equal(b.evicted, true);
  });

  it('evicts a group only as a whole: not while one cell is active or the group is held', () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const opened = new CellCounter(registry, 'tcp_open_total', 'x');
    const closed = new CellCounter(registry, 'tcp_close_total', 'x');
    const open = new CellGauge(registry, 'tcp_open_connections', 'x');
    let evictions = 0;
    const group = new SeriesGroup(() => evictions++);
    const labels = { dst_pod: 'web-1' };
    opened.cell(labels, group).value++;
    const openNow = open.cell(labels, group);
    openNow.value++;
    const closes = closed.cell({ ...labels, errno: '' }, group);

    // A long-lived connection: the counters are idle, but the open gauge keeps the whole group.
    advance(IDLE * 3);
    assert.equal(registry.sweep(), 0);
    assert.equal(group.evicted, false);
    // Closed: the gauge is 0 and the close counter just changed.
    openNow.value--;
    closes.value++;
    advance(IDLE - 1);
    assert.equal(registry.sweep(), 0);
    // Held (e.g. a request in flight): kept although every cell is idle.
    advance(IDLE);
    group.hold();
    assert.equal(registry.sweep(), 0);
    group.release();
    const generation = registry.generation;
    assert.equal(registry.sweep(), 3);
    assert.equal(group.evicted, true);
    assert.equal(evictions, 1, 'onEvict runs once');
    assert.equal(registry.generation, generation + 1);
    assert.deepEqual(sampleLines(registry), []);
    assert.equal(registry.generation, generation + 1, 'a sweep that evicts nothing keeps the generation');
  });

  it('starts a series evicted and resolved again from zero; the detached cell no longer reaches the exposition', () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const requests = new CellCounter(registry, 'request_total', 'x');
    const old = requests.cell({ authority: 'web' });
    old.value += 7;
    registry.sweep();
    advance(IDLE * 2);
    assert.equal(registry.sweep(), 1);
    old.value++;
    assert.deepEqual(sampleLines(registry), [], 'an update of a detached cell is lost: owners must resolve again');
    const fresh = requests.cell({ authority: 'web' });
    assert.notEqual(fresh, old);
    fresh.value++;
    assert.deepEqual(sampleLines(registry), ['request_total{authority="web"} 1']);
  });

  it('sweeps by itself while series are being created, at most every quarter of the idle period', async () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const c = new CellCounter(registry, 'c_total', 'x');
    c.cell({ n: '0' }).value++;
    registry.sweep();
    advance(IDLE + 1);
    // No scrape: the creation of another series queues a sweep, run on the next turn.
    c.cell({ n: '1' }).value++;
    await nextTurn();
    assert.equal(c.cell({ n: '1' }).evicted, false);
    const text = registry.render();
    assert.doesNotMatch(text, /n="0"/);
    assert.match(text, /c_total\{n="1"\} 1/);
  });

  it('keeps the exposition valid through churn and eviction', () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const requests = new CellCounter(registry, 'request_total', 'x');
    const open = new CellGauge(registry, 'tcp_open_connections', 'x');
    const latency = new CellHistogram(registry, 'response_latency_ms', 'x', [1, 10]);
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < 20; i++) {
        const labels = { client_id: `c${round}-${i}.ns.serviceaccount.identity.linkerd.cluster.local`, q: 'say "hi"\n' };
        requests.cell(labels).value++;
        observe(latency.cell(labels), i);
        open.cell(labels).value = i % 3 === 0 ? 1 : 0;
      }
      assertValidExposition(registry.render());
      advance(IDLE / 2 + 1);
    }
    const text = registry.render();
    assertValidExposition(text);
    // Only the last round is within the idle period (of the scrape that saw it), plus the gauges held open.
    assert.ok(!/client_id="c0-1\./.test(text));
    assert.ok(
      !/client_id="c3-/.test(
        text
          .split('\n')
          .filter((l) => l.startsWith('request_total'))
          .join('\n'),
      ),
    );
    assert.match(text, /^tcp_open_connections\{client_id="c0-0\.[^}]*\} 1$/m);
    assert.match(text, /^request_total\{client_id="c4-19\./m);
    assert.equal(sampleLines(registry).filter((l) => l.startsWith('request_total')).length, 20);
    const gauges = sampleLines(registry).filter((l) => l.startsWith('tcp_open_connections'));
    assert.equal(gauges.filter((l) => l.endsWith(' 1')).length, 5 * 7, 'every gauge at 1 is kept');
    assert.equal(gauges.length, 5 * 7 + 13, 'the gauges at 0 of the last round only');
  });

  it('defaults to 10 minutes, never evicts with an infinite idle period, and refuses a bad one', () => {
    assert.equal(METRICS_IDLE_TIMEOUT_MS, 600_000);
    let now = 0;
    const registry = new MetricsRegistry({ now: () => now });
    const c = new CellCounter(registry, 'c', 'x').cell({ a: 'b' });
    now = 600_000 - 1;
    assert.equal(registry.sweep(), 0);
    now = 600_000;
    assert.equal(registry.sweep(), 1);
    assert.equal(c.evicted, true);

    let t = 0;
    const forever = new MetricsRegistry({ now: () => t, idleTimeoutMs: Number.POSITIVE_INFINITY });
    new CellCounter(forever, 'c', 'x').cell({ a: 'b' }).value = 1;
    t = 1e12;
    assert.deepEqual(sampleLines(forever), ['c{a="b"} 1']);
    assert.throws(() => new MetricsRegistry({ idleTimeoutMs: 0 }), RangeError);
  });
});
