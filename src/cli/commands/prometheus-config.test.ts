/**
 * `ward prometheus-config`: the local configuration's targets and labels, Debian's promtool
 * accepting it, and the flags' errors. What Prometheus makes of the Kubernetes relabelling (on
 * pod discovery's labels) and of the local configuration (scraping a real `ward up`) is in
 * test/e2e/prometheus.test.ts.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { bufferIo } from '../io.js';
import { main } from '../main.js';
import { kubernetesPrometheusConfig, localPrometheusConfig } from './prometheus-config.js';

const PROMTOOL = '/usr/bin/promtool';

async function ward(args: string[]) {
  const io = bufferIo();
  const status = await main(args, io);
  return { status, stdout: io.stdout, stderr: io.stderr };
}

const PODS = [
  { namespace: 'demo', name: 'web-6b8d9c7f5-0', owner: 'Deployment/web', adminAddress: '127.22.4.2:4191' },
  { namespace: 'demo', name: 'db-0', owner: 'StatefulSet/db', adminAddress: '127.22.4.3:4191' },
  { namespace: 'demo', name: 'solo', owner: null, adminAddress: '127.22.4.4:4191' },
  { namespace: 'demo', name: 'unmeshed', owner: null, adminAddress: null },
];

describe('ward prometheus-config', () => {
  it('--local: one target per meshed pod, labelled with namespace, pod and owning workload', () => {
    const cfg = parse(localPrometheusConfig(PODS, { scrapeInterval: '1s' })) as Record<string, unknown>;
    assert.deepEqual(cfg, {
      global: { scrape_interval: '1s', evaluation_interval: '1s' },
      scrape_configs: [
        {
          job_name: 'linkerd-proxy',
          static_configs: [
            { targets: ['127.22.4.2:4191'], labels: { namespace: 'demo', pod: 'web-6b8d9c7f5-0', workload_kind: 'Deployment', workload_name: 'web' } },
            { targets: ['127.22.4.3:4191'], labels: { namespace: 'demo', pod: 'db-0', workload_kind: 'StatefulSet', workload_name: 'db' } },
            { targets: ['127.22.4.4:4191'], labels: { namespace: 'demo', pod: 'solo', workload_kind: 'Pod', workload_name: 'solo' } },
          ],
        },
      ],
    });
  });

  it('promtool accepts the --local configuration', {
    skip: existsSync(PROMTOOL) || process.env.CI === 'true' ? false : `${PROMTOOL} is absent (Debian's prometheus package)`,
  }, () => {
    const dir = mkdtempSync(join(tmpdir(), 'ward-promtool-'));
    try {
      const file = join(dir, 'prometheus.yml');
      writeFileSync(file, localPrometheusConfig(PODS, { scrapeInterval: '10s' }));
      const r = spawnSync(PROMTOOL, ['check', 'config', file], { encoding: 'utf8', timeout: 60_000 });
      assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('--kubernetes (the default) prints the pod-discovery job, starting with what a user must know', async () => {
    const r = await ward(['prometheus-config']);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, kubernetesPrometheusConfig({ scrapeInterval: '10s' }));
    assert.match(r.stdout, /^# Prometheus configuration for ward's proxies \(`ward prometheus-config --kubernetes`\)/);
    assert.match(r.stdout, /run this Prometheus meshed/);
    const job = (parse(r.stdout) as { scrape_configs: { job_name: string; kubernetes_sd_configs: unknown }[] }).scrape_configs[0];
    assert.deepEqual([job?.job_name, job?.kubernetes_sd_configs], ['linkerd-proxy', [{ role: 'pod' }]]);
  });

  it('refuses --local with --kubernetes, a bad interval, --state-dir without --local; --local needs a running mesh', async () => {
    const both = await ward(['prometheus-config', '--local', '--kubernetes']);
    assert.equal(both.status, 2);
    assert.match(both.stderr, /cannot be used with/);
    const interval = await ward(['prometheus-config', '--scrape-interval', '10']);
    assert.equal(interval.status, 2);
    assert.match(interval.stderr, /invalid --scrape-interval "10": want a Prometheus duration such as 10s/);
    const stateDir = await ward(['prometheus-config', '--state-dir', '/tmp']);
    assert.equal(stateDir.status, 2);
    assert.match(stateDir.stderr, /--state-dir goes with --local/);
    const dir = mkdtempSync(join(tmpdir(), 'ward-no-mesh-'));
    try {
      const none = await ward(['prometheus-config', '--local', '--state-dir', dir]);
      assert.equal(none.status, 2);
      assert.match(none.stderr, /no local mesh is running/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
