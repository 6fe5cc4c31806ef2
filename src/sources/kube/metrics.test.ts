import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createRegistry } from '../../shared/index.js';
import type { ObjectStatus } from './kubernetes-source.js';
import { registerKubeSourceMetrics } from './metrics.js';
import type { ReflectorStats } from './reflector.js';

const stats = (over: Partial<ReflectorStats>): ReflectorStats => ({
  state: 'watching',
  synced: true,
  lists: 1,
  relists: 0,
  watchRestarts: 0,
  events: 0,
  throttled: 0,
  notFound: 0,
  errors: 0,
  resourceVersion: '1',
  lastError: undefined,
  objects: 0,
  ...over,
});

const status = (ok: boolean, retained: boolean): ObjectStatus => {
  const key = { kind: 'Server', group: '', namespace: 'n', name: 's' };
  return {
    file: '/x',
    kind: 'Server',
    apiVersion: 'v',
    namespace: 'n',
    name: 's',
    resourceVersion: '1',
    ok,
    diagnostics: [],
    resources: [key],
    retained: retained ? [key] : [],
  };
};

describe('registerKubeSourceMetrics', () => {
  it("reports each type's state and counters as the source has them at the scrape", async () => {
    let current: Record<string, ReflectorStats> = {
      'pods.v1': stats({ objects: 12, events: 30, watchRestarts: 2 }),
      'servers.policy.linkerd.io/v1beta3': stats({ synced: false, lists: 0, notFound: 3, errors: 3 }),
    };
    const registry = createRegistry();
    registerKubeSourceMetrics(registry, () => ({
      reflectorStats: () => current,
      rejected: () => [status(false, true), status(false, false)],
    }));
    const text = await registry.metrics();
    for (const line of [
      'ward_kube_synced{resource="pods.v1"} 1',
      'ward_kube_synced{resource="servers.policy.linkerd.io/v1beta3"} 0',
      'ward_kube_objects{resource="pods.v1"} 12',
      'ward_kube_watch_events_total{resource="pods.v1"} 30',
      'ward_kube_watch_restarts_total{resource="pods.v1"} 2',
      'ward_kube_not_found_total{resource="servers.policy.linkerd.io/v1beta3"} 3',
      'ward_kube_objects_rejected{retained="true"} 1',
      'ward_kube_objects_rejected{retained="false"} 1',
    ]) {
      assert.ok(text.split('\n').includes(line), `${line}\n---\n${text}`);
    }
    // Totals are the source's, not accumulated across scrapes.
    current = { 'pods.v1': stats({ events: 31 }) };
    const again = await registry.metrics();
    assert.ok(again.split('\n').includes('ward_kube_watch_events_total{resource="pods.v1"} 31'), again);
  });

  it('reports nothing before there is a source', async () => {
    const registry = createRegistry();
    registerKubeSourceMetrics(registry, () => undefined);
    assert.doesNotMatch(await registry.metrics(), /resource=/);
  });
});
