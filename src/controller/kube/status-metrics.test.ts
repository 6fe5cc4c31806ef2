import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type ClusterConfig, PolicyIndex } from '../../index/index.js';
import { decodeResource, documentFromObject, type Resource } from '../../manifest/index.js';
import { createRegistry } from '../../shared/index.js';
import type { KubeRequester } from '../../sources/index.js';
import { LeaderElection } from './leader-election.js';
import { registerStatusMetrics } from './status-metrics.js';
import { StatusWriter } from './status-writer.js';

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

describe('status metrics', () => {
  it('export the writer counters and whether this replica leads', async () => {
    const server = {
      apiVersion: 'policy.linkerd.io/v1beta3',
      kind: 'Server',
      metadata: { namespace: 'app', name: 'web', generation: 1, resourceVersion: '5' },
      spec: { podSelector: { matchLabels: { app: 'web' } }, port: 8080 },
    };
    const client: KubeRequester = { request: (req) => Promise.resolve({ status: 200, body: req.body, headers: {} }) };
    const index = new PolicyIndex(CONFIG);
    const decoded = decodeResource(documentFromObject(server));
    assert.equal(decoded.status, 'ok');
    index.apply((decoded as { resource: Resource }).resource);
    const writer = new StatusWriter({ client, index, isLeader: () => true });
    const election = new LeaderElection({ client, namespace: 'linkerd', identity: 'ward-controller-0' });
    const registry = createRegistry();
    registerStatusMetrics(registry, writer, election);
    writer.observe(server);
    await writer.flush();
    await writer.flush();
    const text = await registry.metrics();
    assert.match(text, /^ward_status_writes_total 1$/m);
    assert.match(text, /^ward_status_skipped_unchanged_total 1$/m);
    assert.match(text, /^ward_status_write_errors_total 0$/m);
    assert.match(text, /^ward_leader 0$/m);
    await writer.stop();
  });
});
