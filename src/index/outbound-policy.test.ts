import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Pod, Service } from '../manifest/index.js';
import { EndpointsIndex } from './endpoints.js';
import { type DestinationProfileValue, OutboundLookups, type OutboundPolicyValue } from './outbound-policy.js';

const CP = 'linkerd';
const CONFIG = { clusterDomain: 'cluster.local', controlPlaneNamespace: CP, trustDomain: 'cluster.local' };
const SVC_IP = '10.96.0.10';
const POD_IP = '10.244.0.7';

function mkPod(name: string, ip: string, annotations: Record<string, string> = {}): Pod {
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: { namespace: 'demo', name, labels: { app: 'web', 'linkerd.io/control-plane-ns': CP }, annotations },
    spec: { serviceAccountName: 'web', containers: [{ name: 'app', ports: [{ name: 'http', containerPort: 8080 }] }] },
    status: { podIP: ip },
  };
}

function mkService(annotations: Record<string, string> = {}, ports: Service['spec']['ports'] = [{ name: 'http', port: 80, targetPort: 8080 }]): Service {
  return {
    kind: 'Service',
    apiVersion: 'v1',
    metadata: { namespace: 'demo', name: 'web', labels: {}, annotations },
    spec: { selector: { app: 'web' }, clusterIP: SVC_IP, ports },
  };
}

function mkLookups(...resources: (Pod | Service)[]): { index: EndpointsIndex; lookups: OutboundLookups } {
  const index = new EndpointsIndex(CONFIG);
  index.update((tx) => {
    for (const r of resources) tx.apply(r);
  });
  return { index, lookups: new OutboundLookups(index, { clusterDomain: 'cluster.local' }) };
}

const WEB_80: OutboundPolicyValue = { kind: 'service', namespace: 'demo', name: 'web', port: 80, authority: 'web.demo.svc.cluster.local:80' };

describe('OutboundLookups.policy', () => {
  const { lookups } = mkLookups(mkService(), mkPod('web-0', POD_IP));

  it('a Service address on a declared port: that Service port, resolved by its authority', () => {
    assert.deepStrictEqual(lookups.policy({ kind: 'addr', ip: SVC_IP, port: 80 }), WEB_80);
  });

  it('a Service address on a port it does not declare: the undefined port', () => {
    assert.deepStrictEqual(lookups.policy({ kind: 'addr', ip: SVC_IP, port: 81 }), { kind: 'undefinedPort', namespace: 'demo', name: 'web', port: 81 });
  });

  it('a pod address or an unknown address in the cluster networks: no policy (NOT_FOUND)', () => {
    assert.deepStrictEqual(lookups.policy({ kind: 'addr', ip: POD_IP, port: 8080 }), { ok: false, code: 'NOT_FOUND', message: 'No such service' });
    assert.deepStrictEqual(lookups.policy({ kind: 'addr', ip: '192.168.9.9', port: 80 }), { ok: false, code: 'NOT_FOUND', message: 'No such service' });
  });

  it('an address outside the cluster networks: the egress fallback', () => {
    assert.deepStrictEqual(lookups.policy({ kind: 'addr', ip: '93.184.216.34', port: 443 }), { kind: 'egressFallback', ip: '93.184.216.34', port: 443 });
  });

  it('by authority: the Service port (port 80 by default, trailing dot and domain optional), known or not', () => {
    assert.deepStrictEqual(lookups.policy({ kind: 'authority', authority: 'web.demo.svc.cluster.local.:80' }), WEB_80);
    assert.deepStrictEqual(lookups.policy({ kind: 'authority', authority: 'web.demo.svc' }), WEB_80);
    assert.deepStrictEqual(lookups.policy({ kind: 'authority', authority: 'api.other.svc.cluster.local:8080' }), {
      kind: 'service',
      namespace: 'other',
      name: 'api',
      port: 8080,
      authority: 'api.other.svc.cluster.local:8080',
    });
    assert.deepStrictEqual(lookups.policy({ kind: 'authority', authority: 'example.com:80' }), {
      ok: false,
      code: 'NOT_FOUND',
      message: 'authority must be of the form <name>.<namespace>.svc.cluster.local',
    });
    assert.deepStrictEqual(lookups.policy({ kind: 'authority', authority: ':80' }), {
      ok: false,
      code: 'INVALID_ARGUMENT',
      message: 'authority must have a host',
    });
  });

  it('opaque ports: the Service annotation (names too), else the cluster defaults', () => {
    const annotated = mkLookups(mkService({ 'config.linkerd.io/opaque-ports': 'db' }, [{ name: 'db', port: 5433 }, { port: 3306 }])).lookups;
    assert.deepStrictEqual(annotated.policy({ kind: 'addr', ip: SVC_IP, port: 5433 }), {
      kind: 'service',
      namespace: 'demo',
      name: 'web',
      port: 5433,
      authority: 'web.demo.svc.cluster.local:5433',
      appProtocol: 'opaque',
    });
    // The annotation replaces the defaults (3306 is one of them).
    assert.equal((annotated.policy({ kind: 'addr', ip: SVC_IP, port: 3306 }) as { appProtocol?: string }).appProtocol, undefined);
    const plain = mkLookups(mkService({}, [{ port: 3306 }])).lookups;
    assert.equal((plain.policy({ kind: 'addr', ip: SVC_IP, port: 3306 }) as { appProtocol?: string }).appProtocol, 'opaque');
  });

  it('a port’s appProtocol: http is HTTP/1, kubernetes.io/h2c HTTP/2, anything else opaque; it wins over the opaque ports', () => {
    const ports: Service['spec']['ports'] = [
      { port: 80, appProtocol: 'HTTP' },
      { port: 81, appProtocol: 'kubernetes.io/h2c' },
      { port: 82, appProtocol: 'linkerd.io/opaque' },
      { port: 83, appProtocol: 'example.com/custom' },
      { port: 3306, appProtocol: 'http' },
    ];
    const { lookups } = mkLookups(mkService({}, ports));
    const protocols = ports.map((p) => (lookups.policy({ kind: 'addr', ip: SVC_IP, port: p.port }) as { appProtocol?: string }).appProtocol);
    assert.deepStrictEqual(protocols, ['http1', 'http2', 'opaque', 'opaque', 'http1']);
  });
});

describe('OutboundLookups.profile', () => {
  const { lookups } = mkLookups(mkService(), mkPod('web-0', POD_IP), mkPod('db-0', '10.244.0.8', { 'config.linkerd.io/opaque-ports': '5432' }));
  const identity = 'web.demo.serviceaccount.identity.linkerd.cluster.local';

  it('a Service address or name: its fully-qualified name and whether the port is opaque', () => {
    const expected: DestinationProfileValue = {
      kind: 'service',
      namespace: 'demo',
      name: 'web',
      port: 80,
      fullyQualifiedName: 'web.demo.svc.cluster.local',
      opaqueProtocol: false,
    };
    assert.deepStrictEqual(lookups.profile(`${SVC_IP}:80`), expected);
    assert.deepStrictEqual(lookups.profile('web.demo.svc.cluster.local:80'), expected);
    assert.deepStrictEqual(lookups.profile(`${SVC_IP}:81`), { kind: 'undefinedPort' });
  });

  it('a pod address: the pod as the endpoint (identity, h2 hint), opaque by its annotation', () => {
    assert.deepStrictEqual(lookups.profile(`${POD_IP}:8080`), {
      kind: 'endpoint',
      opaqueProtocol: false,
      endpoint: {
        ip: POD_IP,
        port: 8080,
        weight: 10000,
        labels: { namespace: 'demo', pod: 'web-0', serviceaccount: 'web', control_plane_ns: CP },
        identity,
        protocolHint: 'h2',
      },
    });
    const db = lookups.profile('10.244.0.8:5432') as Extract<DestinationProfileValue, { kind: 'endpoint' }>;
    assert.deepStrictEqual([db.opaqueProtocol, db.endpoint.protocolHint, db.endpoint.opaqueTransportPort], [true, 'opaque', 4143]);
  });

  it('an unknown address: a bare endpoint, opaque on the default opaque ports', () => {
    assert.deepStrictEqual(lookups.profile('10.244.9.9:3306'), {
      kind: 'endpoint',
      opaqueProtocol: true,
      endpoint: { ip: '10.244.9.9', port: 3306, weight: 10000, labels: {} },
    });
  });

  it('bad paths and unknown Services are refused', () => {
    assert.equal((lookups.profile('10.0.0.1:0') as { code?: string }).code, 'INVALID_ARGUMENT');
    assert.equal((lookups.profile('example.com:80') as { code?: string }).code, 'INVALID_ARGUMENT');
    assert.equal((lookups.profile('nope.demo.svc.cluster.local:80') as { code?: string }).code, 'NOT_FOUND');
  });
});

describe('OutboundLookups watches', () => {
  it('a watch hears the current value, then only changes of its own value', () => {
    const { index, lookups } = mkLookups(mkService(), mkPod('web-0', POD_IP));
    const w = lookups.watchPolicy({ kind: 'addr', ip: SVC_IP, port: 3306 });
    assert.ok(w.ok);
    const seen: OutboundPolicyValue[] = [];
    const stop = w.subscribe((v) => seen.push(v));
    const undefinedPort: OutboundPolicyValue = { kind: 'undefinedPort', namespace: 'demo', name: 'web', port: 3306 };
    assert.deepStrictEqual(seen, [undefinedPort]);
    // A change elsewhere: nothing.
    index.apply(mkPod('web-1', '10.244.0.9'));
    assert.equal(seen.length, 1);
    // The Service declares the port (one of the default opaque ports): the opaque Service port.
    index.apply(
      mkService({}, [
        { name: 'http', port: 80 },
        { name: 'mysql', port: 3306 },
      ]),
    );
    assert.deepStrictEqual(seen.at(-1), {
      kind: 'service',
      namespace: 'demo',
      name: 'web',
      port: 3306,
      authority: 'web.demo.svc.cluster.local:3306',
      appProtocol: 'opaque',
    });
    index.apply(
      mkService({ 'config.linkerd.io/opaque-ports': '' }, [
        { name: 'http', port: 80 },
        { name: 'mysql', port: 3306 },
      ]),
    );
    assert.deepStrictEqual(seen.at(-1), { kind: 'service', namespace: 'demo', name: 'web', port: 3306, authority: 'web.demo.svc.cluster.local:3306' });
    assert.equal(seen.length, 3);
    stop();
    index.apply(mkService());
    assert.equal(seen.length, 3);
  });

  it('a profile watch follows the pod at the address; a target without a policy is refused up front', () => {
    const { index, lookups } = mkLookups(mkService());
    assert.deepStrictEqual(lookups.watchPolicy({ kind: 'addr', ip: POD_IP, port: 8080 }), { ok: false, code: 'NOT_FOUND', message: 'No such service' });
    const w = lookups.watchProfile(`${POD_IP}:8080`);
    assert.ok(w.ok);
    const seen: DestinationProfileValue[] = [];
    w.subscribe((v) => seen.push(v));
    assert.deepStrictEqual(seen, [{ kind: 'endpoint', opaqueProtocol: false, endpoint: { ip: POD_IP, port: 8080, weight: 10000, labels: {} } }]);
    index.apply(mkPod('web-0', POD_IP));
    assert.equal(seen.length, 2);
    assert.equal(
      (seen[1] as Extract<DestinationProfileValue, { kind: 'endpoint' }>).endpoint.identity,
      'web.demo.serviceaccount.identity.linkerd.cluster.local',
    );
  });
});
