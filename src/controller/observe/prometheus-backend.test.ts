/**
 * PrometheusBackend against a scripted Prometheus on a real socket: the PromQL it sends (whole
 * query texts), hostile label values that must stay inside their string literal, answers with
 * NaN and infinities, and every way a Prometheus fails (refused, silent, 503, 400, HTML, huge,
 * not a vector, a redirect) as a PrometheusError with a precise message and the API status.
 * The queries against a real Prometheus are in test/e2e/prometheus.test.ts.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import { hasCode } from '../../shared/index.js';
import { PrometheusBackend, type PrometheusError, parseTargetsAnswer, promqlString } from './prometheus-backend.js';
import { parsePromqlMatchers } from './test-promql.js';

interface Seen {
  method: string;
  path: string;
  query: string | null;
  authorization: string | undefined;
}

let server: Server;
let base: string;
let seen: Seen[] = [];
let answer: (req: IncomingMessage, res: ServerResponse, query: string | null) => void;

const vector = (result: { metric: Record<string, string>; value: [number, string] }[]) =>
  JSON.stringify({ status: 'success', data: { resultType: 'vector', result } });

before(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => {
      body += c;
    });
    req.on('end', () => {
      const query = req.method === 'POST' ? new URLSearchParams(body).get('query') : null;
      seen.push({ method: req.method ?? '', path: req.url ?? '', query, authorization: req.headers.authorization });
      answer(req, res, query);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(() => {
  server.closeAllConnections();
  server.close();
});

beforeEach(() => {
  seen = [];
  answer = (_req, res) => res.end(vector([]));
});

/** Runs `f`, which must fail with a PrometheusError; returns it. */
async function failure(f: () => Promise<unknown>): Promise<PrometheusError> {
  try {
    await f();
  } catch (e) {
    assert.equal((e as Error).name, 'PrometheusError', String(e));
    return e as PrometheusError;
  }
  assert.fail('expected a PrometheusError');
}

describe('PrometheusBackend: the queries', () => {
  it('rate, latest and quantile send the PromQL the interface names, restricted to the proxies job, by POST', async () => {
    const b = new PrometheusBackend({ url: base });
    await b.rate({ metric: 'request_total', match: { direction: 'inbound', namespace: 'demo' }, by: ['namespace', 'pod'] }, 60);
    await b.latest({ metric: 'tcp_open_connections', by: ['workload_kind', 'workload_name'] });
    await b.quantile(0.95, { metric: 'response_latency_ms', match: { direction: 'inbound' }, by: ['workload_name'] }, 30);
    await b.rate({ metric: 'inbound_http_authz_deny_total', by: [] }, 0.5);
    assert.deepEqual(
      seen.map((s) => [s.method, s.path, s.query]),
      [
        ['POST', '/api/v1/query', 'sum by (namespace, pod) (rate(request_total{job="linkerd-proxy",direction="inbound",namespace="demo"}[60000ms]))'],
        ['POST', '/api/v1/query', 'sum by (workload_kind, workload_name) (tcp_open_connections{job="linkerd-proxy"})'],
        [
          'POST',
          '/api/v1/query',
          'histogram_quantile(0.95, sum by (le, workload_name) (rate(response_latency_ms_bucket{job="linkerd-proxy",direction="inbound"}[30000ms])))',
        ],
        ['POST', '/api/v1/query', 'sum by () (rate(inbound_http_authz_deny_total{job="linkerd-proxy"}[500ms]))'],
      ],
    );
  });

  it('keeps a path prefix, sends credentials of the URL as basic auth, and never shows them', async () => {
    const b = new PrometheusBackend({ url: `http://admin:s%40cret@127.0.0.1:${new URL(base).port}/prom`, job: '' });
    assert.equal(b.url, `http://127.0.0.1:${new URL(base).port}/prom`);
    await b.latest({ metric: 'up', by: [] });
    assert.deepEqual(seen[0], {
      method: 'POST',
      path: '/prom/api/v1/query',
      query: 'sum by () (up{})',
      authorization: `Basic ${Buffer.from('admin:s@cret').toString('base64')}`,
    });
    answer = (_req, res) => {
      res.statusCode = 503;
      res.end('down');
    };
    const e = await failure(() => b.latest({ metric: 'up', by: [] }));
    assert.doesNotMatch(e.message, /s%40cret|s@cret|admin/);
  });

  it('answers with exactly the grouping labels, "" for one a series lacks', async () => {
    answer = (_req, res) =>
      res.end(
        vector([
          { metric: { namespace: 'demo', pod: 'web-0', extra: 'x' }, value: [1, '2.5'] },
          { metric: { namespace: 'demo' }, value: [1, '1e3'] },
        ]),
      );
    const got = await new PrometheusBackend({ url: base }).rate({ metric: 'request_total', by: ['namespace', 'pod'] }, 60);
    assert.deepEqual(got, [
      { labels: { namespace: 'demo', pod: 'web-0' }, value: 2.5 },
      { labels: { namespace: 'demo', pod: '' }, value: 1000 },
    ]);
  });

  it('leaves out NaN samples (a quantile of no requests) and keeps infinities', async () => {
    answer = (_req, res) =>
      res.end(
        vector([
          { metric: { pod: 'a' }, value: [1, 'NaN'] },
          { metric: { pod: 'b' }, value: [1, '+Inf'] },
          { metric: { pod: 'c' }, value: [1, '-Inf'] },
          { metric: { pod: 'd' }, value: [1, '12.75'] },
        ]),
      );
    const got = await new PrometheusBackend({ url: base }).quantile(0.5, { metric: 'response_latency_ms', by: ['pod'] }, 60);
    assert.deepEqual(got, [
      { labels: { pod: 'b' }, value: Number.POSITIVE_INFINITY },
      { labels: { pod: 'c' }, value: Number.NEGATIVE_INFINITY },
      { labels: { pod: 'd' }, value: 12.75 },
    ]);
  });
});

describe('PrometheusBackend: hostile label values', () => {
  const HOSTILE = ['"}or vector(1)', '\\', '\\"} or up{x="', 'a\nb\r\tc', 'x"}[5m]) or on() vector(1) #', '\u0000\u001b[31m\u007f', '\u2028é😀', "'`$1"];

  for (const value of HOSTILE) {
    it(`${JSON.stringify(value)} stays one matcher's value`, async () => {
      const b = new PrometheusBackend({ url: base });
      await b.rate({ metric: 'request_total', match: { namespace: value, pod: 'p' }, by: ['pod'] }, 60);
      const q = seen[0]?.query ?? '';
      const m = /^sum by \(pod\) \(rate\(request_total(\{.*\})\[60000ms\]\)\)$/s.exec(q);
      assert.ok(m, q);
      assert.deepEqual(parsePromqlMatchers(m[1] as string), [
        ['job', 'linkerd-proxy'],
        ['namespace', value],
        ['pod', 'p'],
      ]);
    });
  }

  it('a lone surrogate (not sendable as UTF-8) is refused before any request', async () => {
    const b = new PrometheusBackend({ url: base });
    await assert.rejects(b.latest({ metric: 'up', match: { pod: 'a\ud800b' }, by: [] }), (e) => hasCode(e, 'ERR_METRICS_QUERY'));
    assert.equal(seen.length, 0);
  });

  it('metric and label names outside the grammar, bad quantiles and windows are refused before any request', async () => {
    const b = new PrometheusBackend({ url: base });
    const bad = [
      () => b.latest({ metric: 'up{x="1"}', by: [] }),
      () => b.latest({ metric: 'up', match: { 'a"': 'x' }, by: [] }),
      () => b.latest({ metric: 'up', by: ['a) or vector(1'] }),
      () => b.latest({ metric: 'up', match: { __name__: 'x' }, by: [] }),
      () => b.quantile(1.5, { metric: 'response_latency_ms', by: [] }, 60),
      () => b.quantile(0.5, { metric: 'response_latency_ms', by: ['le'] }, 60),
      () => b.rate({ metric: 'request_total', by: [] }, Number.NaN),
      () => b.rate({ metric: 'request_total', by: [] }, -1),
    ];
    for (const f of bad) await assert.rejects(f(), (e) => hasCode(e, 'ERR_METRICS_QUERY'));
    assert.equal(seen.length, 0);
  });

  it('promqlString escapes backslash before quote', () => {
    assert.equal(promqlString('a\\"b'), '"a\\\\\\"b"');
  });
});

describe('PrometheusBackend: a failing Prometheus', () => {
  it('nothing listening: "cannot reach Prometheus at URL: ECONNREFUSED", 503', async () => {
    const s = createServer();
    s.listen(0, '127.0.0.1');
    await once(s, 'listening');
    const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
    s.close();
    await once(s, 'close');
    const e = await failure(() => new PrometheusBackend({ url }).latest({ metric: 'up', by: [] }));
    assert.equal(e.message, `cannot reach Prometheus at ${url}: ECONNREFUSED`);
    assert.deepEqual([e.code, e.httpStatus, e.apiCode], ['ERR_PROMETHEUS_UNREACHABLE', 503, 'METRICS_UNAVAILABLE']);
  });

  it('no answer within the timeout: ERR_PROMETHEUS_TIMEOUT, 503', async () => {
    answer = () => {
      // never answers
    };
    const e = await failure(() => new PrometheusBackend({ url: base, timeoutMs: 300 }).latest({ metric: 'up', by: [] }));
    assert.equal(e.message, `Prometheus at ${base} did not answer within 300 ms`);
    assert.deepEqual([e.code, e.httpStatus], ['ERR_PROMETHEUS_TIMEOUT', 503]);
  });

  it("503 with Prometheus's error body: its message, 503", async () => {
    answer = (_req, res) => {
      res.statusCode = 503;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ status: 'error', errorType: 'unavailable', error: 'TSDB not ready' }));
    };
    const e = await failure(() => new PrometheusBackend({ url: base }).latest({ metric: 'up', by: [] }));
    assert.equal(e.message, `Prometheus at ${base} answered 503: TSDB not ready`);
    assert.deepEqual([e.code, e.httpStatus, e.apiCode], ['ERR_PROMETHEUS_STATUS', 503, 'METRICS_UNAVAILABLE']);
  });

  it("a proxy's 500 page: its text quoted, 502", async () => {
    answer = (_req, res) => {
      res.statusCode = 500;
      res.end('<html>Internal Server Error</html>\n');
    };
    const e = await failure(() => new PrometheusBackend({ url: base }).latest({ metric: 'up', by: [] }));
    assert.equal(e.message, `Prometheus at ${base} answered 500: <html>Internal Server Error</html>`);
    assert.deepEqual([e.code, e.httpStatus, e.apiCode], ['ERR_PROMETHEUS_STATUS', 502, 'METRICS_BACKEND_ERROR']);
  });

  it("a refused query (400 bad_data): the query and Prometheus's reason, 502", async () => {
    answer = (_req, res) => {
      res.statusCode = 400;
      res.end(JSON.stringify({ status: 'error', errorType: 'bad_data', error: 'parse error' }));
    };
    const e = await failure(() => new PrometheusBackend({ url: base }).latest({ metric: 'up', by: [] }));
    assert.equal(e.message, `Prometheus at ${base} answered 400 to sum by () (up{job="linkerd-proxy"}): parse error`);
    assert.deepEqual([e.code, e.httpStatus], ['ERR_PROMETHEUS_QUERY', 502]);
  });

  it('a redirect is not followed: 502', async () => {
    answer = (_req, res) => {
      res.statusCode = 302;
      res.setHeader('location', 'http://169.254.169.254/');
      res.end();
    };
    const e = await failure(() => new PrometheusBackend({ url: base }).latest({ metric: 'up', by: [] }));
    assert.deepEqual([e.code, e.httpStatus], ['ERR_PROMETHEUS_STATUS', 502]);
    assert.equal(seen.length, 1);
  });

  it('an answer past the size bound, declared or streamed, is cut: 502', async () => {
    const big = vector(Array.from({ length: 2000 }, (_, i) => ({ metric: { pod: `pod-${i}` }, value: [1, '1'] as [number, string] })));
    answer = (_req, res) => res.end(big);
    const e = await failure(() => new PrometheusBackend({ url: base, maxResponseBytes: 10_000 }).latest({ metric: 'up', by: ['pod'] }));
    assert.equal(e.message, `Prometheus at ${base} answered more than 10000 bytes`);
    assert.deepEqual([e.code, e.httpStatus], ['ERR_PROMETHEUS_RESPONSE', 502]);
    // Chunked, no length: the bound applies while reading; the server keeps writing.
    answer = (_req, res) => {
      const chunk = Buffer.alloc(4096, 0x20);
      const write = () => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once('drain', write);
      };
      write();
    };
    const streamed = await failure(() => new PrometheusBackend({ url: base, maxResponseBytes: 100_000 }).latest({ metric: 'up', by: [] }));
    assert.equal(streamed.code, 'ERR_PROMETHEUS_RESPONSE');
  });

  it('not JSON, not a vector, a sample that is not a number: ERR_PROMETHEUS_RESPONSE, 502', async () => {
    const bodies = [
      'hello',
      JSON.stringify({ status: 'success', data: { resultType: 'matrix', result: [] } }),
      JSON.stringify({ status: 'success', data: { resultType: 'vector', result: [{ metric: {}, value: [1, 'twelve'] }] } }),
      JSON.stringify({ status: 'success', data: { resultType: 'vector', result: [{ metric: { pod: 7 }, value: [1, '1'] }] } }),
      JSON.stringify([1, 2]),
    ];
    for (const body of bodies) {
      answer = (_req, res) => res.end(body);
      const e = await failure(() => new PrometheusBackend({ url: base }).latest({ metric: 'up', by: ['pod'] }));
      assert.deepEqual([e.code, e.httpStatus], ['ERR_PROMETHEUS_RESPONSE', 502], body);
      assert.match(e.message, new RegExp(`^Prometheus at ${base} answered `));
    }
  });

  it('a URL that is not one is refused at construction', () => {
    for (const url of ['prometheus:9090', 'ftp://p/', 'http://p:9090/?x=1', 'not a url'])
      assert.throws(
        () => new PrometheusBackend({ url }),
        (e) => hasCode(e, 'ERR_PROMETHEUS_URL'),
      );
  });
});

describe('PrometheusBackend: targets', () => {
  it("lists the proxies job's active targets with namespace, pod, address, health, last scrape and error", async () => {
    answer = (_req, res) =>
      res.end(
        JSON.stringify({
          status: 'success',
          data: {
            activeTargets: [
              {
                labels: { job: 'linkerd-proxy', namespace: 'demo', pod: 'web-0', instance: 'web-0' },
                scrapeUrl: 'http://127.22.4.2:4191/metrics',
                lastError: '',
                lastScrape: '2026-11-28T10:00:00.5Z',
                health: 'up',
              },
              {
                labels: { job: 'linkerd-proxy', namespace: 'demo', pod: 'api-0' },
                scrapeUrl: 'http://127.22.4.1:4191/metrics',
                lastError: 'connection refused',
                lastScrape: '2026-11-28T10:00:00.1Z',
                health: 'down',
              },
              {
                labels: { job: 'linkerd-proxy', namespace: 'demo', pod: 'new-0' },
                scrapeUrl: 'http://127.22.4.3:4191/metrics',
                lastError: '',
                lastScrape: '0001-01-01T00:00:00Z',
                health: 'unknown',
              },
              { labels: { job: 'prometheus' }, scrapeUrl: 'http://127.0.0.1:9090/metrics', lastError: '', lastScrape: '2026-11-28T10:00:00Z', health: 'up' },
            ],
            droppedTargets: [],
          },
        }),
      );
    const got = await new PrometheusBackend({ url: base }).targets();
    assert.equal(seen[0]?.path, '/api/v1/targets?state=active');
    assert.deepEqual(got, [
      { namespace: 'demo', pod: 'api-0', address: '127.22.4.1:4191', up: false, lastScrape: '2026-11-28T10:00:00.1Z', error: 'connection refused' },
      { namespace: 'demo', pod: 'new-0', address: '127.22.4.3:4191', up: false, lastScrape: null },
      { namespace: 'demo', pod: 'web-0', address: '127.22.4.2:4191', up: true, lastScrape: '2026-11-28T10:00:00.5Z' },
    ]);
  });

  it('a malformed targets answer is a message, not an exception', () => {
    assert.equal(typeof parseTargetsAnswer({ status: 'success', data: { activeTargets: [null] } }, ''), 'string');
    assert.equal(typeof parseTargetsAnswer({ status: 'success', data: {} }, ''), 'string');
  });
});
