import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { createLogger, createRegistry } from '../../shared/index.js';
import { type CollectorTarget, EmbeddedCollector, workloadOfPod } from './embedded-collector.js';
import type { ProxyAdminTls } from './proxy-admin-client.js';

const noTls: ProxyAdminTls = { clientIdentity: 'ward-controller.linkerd.serviceaccount.identity.linkerd.cluster.local', credentials: () => undefined };
const servers: Server[] = [];

after(() => {
  for (const s of servers) s.close();
});

/** A plaintext admin server answering `/metrics` with `body()` (or `status`). */
async function pod(body: () => string, status = () => 200): Promise<string> {
  const s = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    const code = status();
    res.writeHead(code, { 'content-type': 'text/plain; version=0.0.4' }).end(code === 200 ? body() : '');
  });
  servers.push(s);
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  return `127.0.0.1:${(s.address() as AddressInfo).port}`;
}

const target = (name: string, address: string): CollectorTarget => ({
  namespace: 'demo',
  pod: `${name}-0`,
  workloadKind: 'Deployment',
  workloadName: name,
  address,
  identity: null,
});

describe('EmbeddedCollector', () => {
  it('labels every series with its pod, renames exposed pod labels, and answers rates between scrapes', async () => {
    let n = 0;
    const address = await pod(
      () =>
        `# TYPE request_total counter\nrequest_total{direction="inbound",namespace="spoofed",pod="other"} ${n}\n# TYPE tcp_open_connections gauge\ntcp_open_connections 3\n`,
    );
    let now = 0;
    const registry = createRegistry();
    const c = new EmbeddedCollector({ targets: () => [target('web', address)], tls: noTls, intervalMs: 1000, now: () => now, registry });
    await c.scrapeAll();
    n = 50;
    now = 10_000;
    await c.scrapeAll();
    const rates = await c.rate(
      { metric: 'request_total', by: ['namespace', 'pod', 'workload_kind', 'workload_name', 'exported_namespace', 'exported_pod'] },
      60,
    );
    assert.deepEqual(
      rates.map((s) => ({ ...s.labels, value: s.value })),
      [{ namespace: 'demo', pod: 'web-0', workload_kind: 'Deployment', workload_name: 'web', exported_namespace: 'spoofed', exported_pod: 'other', value: 5 }],
    );
    assert.deepEqual(
      (await c.latest({ metric: 'tcp_open_connections', by: ['pod'] })).map((s) => s.value),
      [3],
    );
    const targets = await c.targets();
    assert.deepEqual(
      targets.map((t) => [t.pod, t.up, t.error]),
      [['web-0', true, undefined]],
    );
    const text = await registry.metrics();
    assert.match(text, /^ward_observe_scrapes_total\{result="success"\} 2$/m);
    assert.match(text, /^ward_observe_series 2$/m);
  });

  it('reports each failing pod with its reason and forgets pods that go away', async () => {
    const denied = await pod(
      () => '',
      () => 403,
    );
    const garbage = await pod(() => 'request_total{ 1\n');
    const big = await pod(() => `x 1\n`.repeat(100));
    let pods = [target('denied', denied), target('garbage', garbage), target('big', big), target('gone', '127.0.0.1:1')];
    const c = new EmbeddedCollector({ targets: () => pods, tls: noTls, intervalMs: 1000, maxSeriesPerPod: 10 });
    await c.scrapeAll();
    const health = new Map((await c.targets()).map((t) => [t.pod, t]));
    assert.match(health.get('denied-0')?.error ?? '', /^denied by the pod's policy on port 4191: the pod has no mesh identity/);
    assert.match(health.get('garbage-0')?.error ?? '', /not valid exposition text: line 1: PROM_BAD_NAME expected a label name/);
    assert.match(health.get('big-0')?.error ?? '', /PROM_TOO_MANY_SERIES more than 10 series/);
    assert.match(health.get('gone-0')?.error ?? '', /cannot reach the proxy admin server at 127\.0\.0\.1:1/);
    assert.ok([...health.values()].every((t) => !t.up && t.lastScrape !== null));
    pods = [target('denied', denied)];
    c.start();
    await waitUntil(async () => (await c.targets()).length === 1);
    c.stop();
    assert.deepEqual(
      (await c.targets()).map((t) => t.pod),
      ['denied-0'],
    );
  });

  it('warns once when a pod starts denying the controller, even after other failures', async () => {
    let status = 500;
    const address = await pod(
      () => '',
      () => status,
    );
    const lines: { level: number; msg: string; pod?: string; err?: string }[] = [];
    const log = createLogger({ level: 'debug', destination: { write: (l: string) => lines.push(JSON.parse(l) as (typeof lines)[number]) } });
    const c = new EmbeddedCollector({ targets: () => [target('web', address)], tls: noTls, intervalMs: 1000, log });
    await c.scrapeAll();
    status = 403;
    await c.scrapeAll();
    await c.scrapeAll();
    const warnings = lines.filter((l) => l.level >= 40);
    assert.deepEqual(
      warnings.map((w) => [w.msg, w.pod]),
      [['metrics scrape denied', 'demo/web-0']],
    );
    assert.match(warnings[0]?.err ?? '', /^demo\/web-0: denied by the pod's policy on port 4191/);
    assert.equal(lines.filter((l) => l.msg === 'metrics scrape failed').length, 1);
  });

  it('asks a pod that denied it again only a minute later', async () => {
    let hits = 0;
    const address = await pod(
      () => '',
      () => {
        hits++;
        return 403;
      },
    );
    let offsetMs = 0;
    const c = new EmbeddedCollector({ targets: () => [target('web', address)], tls: noTls, intervalMs: 100, now: () => Date.now() + offsetMs });
    c.start();
    await waitUntil(() => Promise.resolve(hits >= 1));
    const rounds = c.rounds;
    await waitUntil(() => Promise.resolve(c.rounds >= rounds + 5));
    assert.equal(hits, 1);
    offsetMs = 61_000;
    await waitUntil(() => Promise.resolve(hits >= 2));
    c.stop();
  });

  it('holds its total series limit, dropping new series and saying so', async () => {
    const a = await pod(() => 'a 1\nb 1\nc 1\n');
    const b = await pod(() => 'd 1\ne 1\n');
    const c = new EmbeddedCollector({ targets: () => [target('a', a), target('b', b)], tls: noTls, intervalMs: 1000, maxSeriesTotal: 4 });
    await c.scrapeAll();
    const health = await c.targets();
    const dropped = health.filter((t) => t.error !== undefined);
    assert.equal(dropped.length, 1);
    assert.match(dropped[0]?.error ?? '', /new series dropped: the collector holds its limit of 4 series/);
  });

  it('scrapes on its interval once started, and stops', async () => {
    let scrapes = 0;
    const address = await pod(() => {
      scrapes++;
      return 'a_total 1\n';
    });
    const c = new EmbeddedCollector({ targets: () => [target('web', address)], tls: noTls, intervalMs: 100 });
    c.start();
    await waitUntil(() => Promise.resolve(scrapes >= 3));
    c.stop();
    const at = scrapes;
    await new Promise((r) => setTimeout(r, 300));
    assert.ok(scrapes <= at + 1, `${scrapes} scrapes after stop (${at} before)`);
  });

  it('names the workload of a pod from its owner', () => {
    assert.deepEqual(workloadOfPod({ name: 'web-abc-0', owner: 'Deployment/web' }), { kind: 'Deployment', name: 'web' });
    assert.deepEqual(workloadOfPod({ name: 'solo' }), { kind: 'Pod', name: 'solo' });
  });
});

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}
