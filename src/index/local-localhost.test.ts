/**
 * Local mode (`ward up`): every pod shares the host's loopback, so each proxy's `default:localhost`
 * admits only its own pod's address — and explain and authz must say what the proxy does.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseCidr } from '../core/index.js';
import type { Pod } from '../manifest/index.js';
import { podView } from './authz-view.js';
import { evaluate } from './explain-probe.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const pod: Pod = {
  kind: 'Pod',
  apiVersion: 'v1',
  metadata: { namespace: 'app', name: 'web-0', labels: { app: 'web', 'linkerd.io/control-plane-ns': 'linkerd' }, annotations: {} },
  spec: { containers: [{ name: 'app', ports: [{ name: 'http', containerPort: 8080 }] }] },
  status: { podIP: '127.20.0.7' },
};

function view(localhostIsPodAddress: boolean) {
  const config: ClusterConfig = {
    defaultPolicy: 'deny',
    clusterNetworks: [{ net: parseCidr('127.20.0.0/16')!, except: [] }],
    probeNetworks: [{ net: parseCidr('0.0.0.0/0')!, except: [] }],
    trustDomain: 'cluster.local',
    controlPlaneNamespace: 'linkerd',
    localhostIsPodAddress,
  };
  const index = new PolicyIndex(config);
  index.update((tx) => tx.apply(pod));
  return { config, index };
}

const tcpFrom = (ip: string) => ({ namespace: 'app', pod: 'web-0', port: 8080, client: { ip }, traffic: { kind: 'tcp' as const } });

describe('local mode: default:localhost is the pod address', () => {
  it('explain admits the pod itself and not the host', () => {
    const v = view(true);
    const own = evaluate(v, tcpFrom('127.20.0.7'));
    assert.equal(own.decision, 'allow');
    assert.equal(own.authz?.name, 'localhost');
    const host = evaluate(v, tcpFrom('127.0.0.1'));
    assert.equal(host.decision, 'deny');
    assert.match(host.chain.map((c) => c.detail).join('\n'), /client IP 127\.0\.0\.1 is not in 127\.20\.0\.7\/32/);
  });
  it('outside local mode the host is localhost, as upstream', () => {
    assert.equal(evaluate(view(false), tcpFrom('127.0.0.1')).authz?.name, 'localhost');
    assert.equal(evaluate(view(false), tcpFrom('127.20.0.7')).decision, 'deny');
  });
  it('authz lists the narrowed authorization', () => {
    const v = view(true);
    const info = v.index.pod('app', 'web-0');
    assert.ok(info);
    const entry = podView(v, info).ports[0]?.authorizations.find((a) => a.name === 'localhost');
    assert.match(JSON.stringify(entry), /127\.20\.0\.7\/32/);
    assert.doesNotMatch(JSON.stringify(entry), /127\.0\.0\.1/);
  });
});
