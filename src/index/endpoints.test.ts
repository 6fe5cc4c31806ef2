import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type ContainerSpec, decodeResource, type Pod, parseManifestText, type Service } from '../manifest/index.js';
import { type Endpoint, type EndpointEvent, EndpointsIndex, parseEndpointsPath } from './endpoints.js';

// === builders ===

const NS = 'app';
const CP = 'linkerd';
const CONFIG = { clusterDomain: 'cluster.local', controlPlaneNamespace: CP, trustDomain: 'cluster.local' };
const WEB = 'web.app.svc.cluster.local';

const CONTAINER: ContainerSpec = {
  name: 'app',
  ports: [
    { name: 'http', containerPort: 8080 },
    { name: 'db', containerPort: 3306 },
  ],
};

interface PodOpts {
  readonly ip?: string | undefined;
  readonly labels?: Record<string, string>;
  readonly meshed?: boolean | string;
  readonly annotations?: Record<string, string>;
  readonly containers?: ContainerSpec[];
  readonly sa?: string;
  readonly owner?: string;
  readonly namespace?: string;
  /** `status.conditions[type=Ready].status`, as a kubelet reports it. */
  readonly ready?: 'True' | 'False';
  readonly phase?: string;
}

function mkPod(name: string, o: PodOpts = {}): Pod {
  const cp = o.meshed === false ? {} : { 'linkerd.io/control-plane-ns': typeof o.meshed === 'string' ? o.meshed : CP };
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: { namespace: o.namespace ?? NS, name, labels: { ...(o.labels ?? { app: 'web' }), ...cp }, annotations: o.annotations ?? {} },
    spec: { containers: o.containers ?? [CONTAINER], ...(o.sa !== undefined ? { serviceAccountName: o.sa } : {}) },
    ...(o.ip !== undefined || o.ready !== undefined || o.phase !== undefined
      ? {
          status: {
            ...(o.ip !== undefined ? { podIP: o.ip } : {}),
            ...(o.phase !== undefined ? { phase: o.phase } : {}),
            ...(o.ready !== undefined
              ? {
                  conditions: [
                    { type: 'PodScheduled', status: 'True' },
                    { type: 'Ready', status: o.ready },
                  ],
                }
              : {}),
          },
        }
      : {}),
    ...(o.owner !== undefined ? { owner: o.owner } : {}),
  };
}

function mkService(
  name: string,
  o: {
    selector?: Record<string, string> | undefined;
    ports?: Service['spec']['ports'];
    clusterIP?: string;
    namespace?: string;
    publishNotReadyAddresses?: boolean;
  } = {},
): Service {
  return {
    kind: 'Service',
    apiVersion: 'v1',
    metadata: { namespace: o.namespace ?? NS, name, labels: {}, annotations: {} },
    spec: {
      ...('selector' in o ? (o.selector !== undefined ? { selector: o.selector } : {}) : { selector: { app: 'web' } }),
      ...(o.clusterIP !== undefined ? { clusterIP: o.clusterIP } : {}),
      ...(o.publishNotReadyAddresses !== undefined ? { publishNotReadyAddresses: o.publishNotReadyAddresses } : {}),
      ports: o.ports ?? [{ name: 'http', port: 80, targetPort: 'http' }],
    },
  };
}

function mkIndex(...resources: (Pod | Service)[]): EndpointsIndex {
  const index = new EndpointsIndex(CONFIG);
  index.update((tx) => {
    for (const r of resources) tx.apply(r);
  });
  return index;
}

function identity(sa: string, ns = NS): string {
  return `${sa}.${ns}.serviceaccount.identity.${CP}.cluster.local`;
}

/** The endpoint a meshed `mkPod` with default settings gets. */
function meshedEndpoint(pod: string, ip: string, port: number, extra: Partial<Endpoint> = {}): Endpoint {
  return {
    ip,
    port,
    weight: 10000,
    labels: { namespace: NS, pod, serviceaccount: 'default', control_plane_ns: CP },
    identity: identity('default'),
    protocolHint: 'h2',
    ...extra,
  };
}

function ok<T extends { ok: boolean }>(r: T): Extract<T, { ok: true }> {
  assert.equal(r.ok, true, JSON.stringify(r));
  return r as Extract<T, { ok: true }>;
}

/** Starts a watch and records every batch of events. */
function record(index: EndpointsIndex, path: string) {
  const batches: (readonly EndpointEvent[])[] = [];
  const w = ok(index.watch(path, (events) => batches.push(events)));
  return { initial: w.initial, batches, unsubscribe: w.unsubscribe };
}

// === paths ===

describe('EndpointsIndex paths', () => {
  it('parses service names and IP addresses', () => {
    assert.deepEqual(parseEndpointsPath('web.app.svc.cluster.local:80'), { kind: 'service', namespace: 'app', name: 'web', port: 80 });
    assert.deepEqual(parseEndpointsPath('Web.App.svc.cluster.local.:8080'), { kind: 'service', namespace: 'app', name: 'web', port: 8080 });
    assert.deepEqual(parseEndpointsPath('10.0.0.1:80'), { kind: 'ip', ip: '10.0.0.1', port: 80 });
    assert.deepEqual(parseEndpointsPath('[fd00:0::1]:443'), { kind: 'ip', ip: 'fd00::1', port: 443 });
    assert.deepEqual(parseEndpointsPath('web.app.svc.example.org:80', 'example.org'), { kind: 'service', namespace: 'app', name: 'web', port: 80 });
  });

  for (const path of [
    '',
    'web.app.svc.cluster.local',
    'web.app.svc.cluster.local:0',
    'web.app.svc.cluster.local:65536',
    'web.app.svc.cluster.local:http',
    'web.app.svc.cluster.local:-1',
    '10.0.0.1',
    '10.0.0.1:',
    'fd00::1:80',
    '[fd00::1]',
    '[fd00::1:80',
    'example.com:80',
    'web.app:80',
    'web-0.web.app.svc.cluster.local:80',
    'a.b.c.d.svc.cluster.local:80',
    'web_x.app.svc.cluster.local:80',
  ]) {
    it(`rejects ${JSON.stringify(path)} with INVALID_ARGUMENT`, () => {
      const index = mkIndex();
      const r = index.resolve(path);
      assert.equal(r.ok, false);
      assert.equal(!r.ok && r.code, 'INVALID_ARGUMENT');
      const w = index.watch(path, () => {});
      assert.equal(w.ok, false);
      assert.equal(index.watchedTargets, 0);
    });
  }
});

// === resolve ===

describe('EndpointsIndex.resolve', () => {
  it('selects the pods of the Service with a pod IP and resolves a named targetPort per pod', () => {
    const other: ContainerSpec = { name: 'app', ports: [{ name: 'http', containerPort: 9090 }] };
    const index = mkIndex(
      mkService('web'),
      mkPod('web-0', { ip: '10.0.0.1' }),
      mkPod('web-1', { ip: '10.0.0.2', containers: [other] }),
      mkPod('web-2'), // no IP yet
      mkPod('web-3', { ip: '10.0.0.4', containers: [{ name: 'app', ports: [{ name: 'metrics', containerPort: 9100 }] }] }), // no "http" port
      mkPod('api-0', { ip: '10.0.0.5', labels: { app: 'api' } }),
      mkPod('web-x', { ip: '10.1.0.1', namespace: 'other' }),
    );
    const r = ok(index.resolve(`${WEB}:80`));
    assert.equal(r.exists, true);
    assert.deepEqual(r.endpoints, [meshedEndpoint('web-0', '10.0.0.1', 8080), meshedEndpoint('web-1', '10.0.0.2', 9090)]);
  });

  it('uses a numeric targetPort, and the port itself when targetPort is absent or the Service does not list the port', () => {
    const index = mkIndex(
      mkService('web', {
        ports: [
          { name: 'a', port: 80, targetPort: 8080 },
          { name: 'b', port: 8443 },
        ],
      }),
      mkPod('web-0', { ip: '10.0.0.1' }),
    );
    assert.deepEqual(ok(index.resolve(`${WEB}:80`)).endpoints, [meshedEndpoint('web-0', '10.0.0.1', 8080)]);
    assert.deepEqual(ok(index.resolve(`${WEB}:8443`)).endpoints, [meshedEndpoint('web-0', '10.0.0.1', 8443)]);
    assert.deepEqual(ok(index.resolve(`${WEB}:7000`)).endpoints, [meshedEndpoint('web-0', '10.0.0.1', 7000)]);
  });

  it('matches every selector label', () => {
    const index = mkIndex(
      mkService('web', { selector: { app: 'web', tier: 'front' }, ports: [{ port: 80, targetPort: 8080 }] }),
      mkPod('a', { ip: '10.0.0.1', labels: { app: 'web', tier: 'front', extra: 'x' } }),
      mkPod('b', { ip: '10.0.0.2', labels: { app: 'web' } }),
      mkPod('c', { ip: '10.0.0.3', labels: { app: 'web', tier: 'back' } }),
    );
    assert.deepEqual(
      ok(index.resolve(`${WEB}:80`)).endpoints.map((e) => e.labels.pod),
      ['a'],
    );
  });

  it('reports a Service without selector as existing with no endpoints, and an unknown one as not existing', () => {
    const index = mkIndex(mkService('web', { selector: undefined }), mkService('empty', { selector: {} }), mkPod('web-0', { ip: '10.0.0.1' }));
    assert.deepEqual(index.resolve(`${WEB}:80`), { ok: true, exists: true, endpoints: [] });
    assert.deepEqual(index.resolve('empty.app.svc.cluster.local:80'), { ok: true, exists: true, endpoints: [] });
    assert.deepEqual(index.resolve('nope.app.svc.cluster.local:80'), { ok: true, exists: false, endpoints: [] });
  });

  it('resolves a pod IP to that pod, and an unknown IP to nothing', () => {
    const index = mkIndex(mkPod('web-0', { ip: '10.0.0.1' }), mkPod('db-0', { ip: 'fd00::5', meshed: false }));
    assert.deepEqual(ok(index.resolve('10.0.0.1:8080')).endpoints, [meshedEndpoint('web-0', '10.0.0.1', 8080)]);
    assert.deepEqual(ok(index.resolve('[fd00:0:0::5]:5432')).endpoints, [
      { ip: 'fd00::5', port: 5432, weight: 10000, labels: { namespace: NS, pod: 'db-0', serviceaccount: 'default' } },
    ]);
    assert.deepEqual(index.resolve('10.9.9.9:80'), { ok: true, exists: false, endpoints: [] });
  });

  it('resolves a Service clusterIP to the Service', () => {
    const index = mkIndex(mkService('web', { clusterIP: '10.96.0.10' }), mkPod('web-0', { ip: '10.0.0.1' }));
    assert.deepEqual(ok(index.resolve('10.96.0.10:80')).endpoints, [meshedEndpoint('web-0', '10.0.0.1', 8080)]);
  });

  it('gives an identity only to pods this control plane meshes', () => {
    const index = mkIndex(
      mkService('web', { ports: [{ port: 80, targetPort: 8080 }] }),
      mkPod('meshed', { ip: '10.0.0.1', sa: 'web', owner: 'Deployment/web' }),
      mkPod('plain', { ip: '10.0.0.2', meshed: false }),
      mkPod('foreign', { ip: '10.0.0.3', meshed: 'other-cp' }),
    );
    assert.deepEqual(ok(index.resolve(`${WEB}:80`)).endpoints, [
      {
        ip: '10.0.0.1',
        port: 8080,
        weight: 10000,
        labels: { namespace: NS, pod: 'meshed', serviceaccount: 'web', deployment: 'web', control_plane_ns: CP },
        identity: identity('web'),
        protocolHint: 'h2',
      },
      { ip: '10.0.0.2', port: 8080, weight: 10000, labels: { namespace: NS, pod: 'plain', serviceaccount: 'default' } },
      {
        ip: '10.0.0.3',
        port: 8080,
        weight: 10000,
        labels: { namespace: NS, pod: 'foreign', serviceaccount: 'default', control_plane_ns: 'other-cp' },
        protocolHint: 'h2',
      },
    ]);
  });

  it('hints opaque ports with the proxy inbound port for opaque transport', () => {
    const annotations = { 'config.linkerd.io/opaque-ports': '3306' };
    const index = mkIndex(
      mkService('db', { selector: { app: 'db' }, ports: [{ port: 3306, targetPort: 'db' }] }),
      mkPod('db-0', { ip: '10.0.0.1', labels: { app: 'db' }, annotations }),
      mkPod('db-1', { ip: '10.0.0.2', labels: { app: 'db' }, annotations, meshed: false }),
    );
    assert.deepEqual(ok(index.resolve('db.app.svc.cluster.local:3306')).endpoints, [
      meshedEndpoint('db-0', '10.0.0.1', 3306, { protocolHint: 'opaque', opaqueTransportPort: 4143 }),
      { ip: '10.0.0.2', port: 3306, weight: 10000, labels: { namespace: NS, pod: 'db-1', serviceaccount: 'default' } },
    ]);
    // The same pod on a non-opaque port.
    assert.deepEqual(ok(index.resolve('10.0.0.1:8080')).endpoints, [meshedEndpoint('db-0', '10.0.0.1', 8080)]);
  });

  it('announces no identity and no hints on skipped inbound ports (the proxy does not see that traffic)', () => {
    const annotations = { 'config.linkerd.io/skip-inbound-ports': '5432,9000-9010', 'config.linkerd.io/opaque-ports': '9005' };
    const index = mkIndex(mkPod('db-0', { ip: '10.0.0.1', annotations }));
    for (const port of [5432, 9005]) {
      assert.deepEqual(ok(index.resolve(`10.0.0.1:${port}`)).endpoints, [
        { ip: '10.0.0.1', port, weight: 10000, labels: { namespace: NS, pod: 'db-0', serviceaccount: 'default', control_plane_ns: CP } },
      ]);
    }
    assert.deepEqual(ok(index.resolve('10.0.0.1:8080')).endpoints, [meshedEndpoint('db-0', '10.0.0.1', 8080)]);
  });
});

// === watch ===

describe('EndpointsIndex.watch', () => {
  it('starts with the current set, then sends exactly the differences of each transaction', () => {
    const index = mkIndex(mkService('web'), mkPod('web-0', { ip: '10.0.0.1' }));
    const w = record(index, `${WEB}:80`);
    assert.deepEqual(w.initial, [{ kind: 'add', endpoints: [meshedEndpoint('web-0', '10.0.0.1', 8080)] }]);

    // Pod added.
    index.apply(mkPod('web-1', { ip: '10.0.0.2' }));
    assert.deepEqual(w.batches, [[{ kind: 'add', endpoints: [meshedEndpoint('web-1', '10.0.0.2', 8080)] }]]);

    // Pod relabelled out of the selector, and another changed (new service account) in one transaction.
    w.batches.length = 0;
    index.update((tx) => {
      tx.apply(mkPod('web-0', { ip: '10.0.0.1', labels: { app: 'other' } }));
      tx.apply(mkPod('web-1', { ip: '10.0.0.2', sa: 'web' }));
    });
    assert.deepEqual(w.batches, [
      [
        { kind: 'remove', addrs: [{ ip: '10.0.0.1', port: 8080 }] },
        {
          kind: 'add',
          endpoints: [
            meshedEndpoint('web-1', '10.0.0.2', 8080, {
              labels: { namespace: NS, pod: 'web-1', serviceaccount: 'web', control_plane_ns: CP },
              identity: identity('web'),
            }),
          ],
        },
      ],
    ]);

    // Pod deleted: the set becomes empty.
    w.batches.length = 0;
    index.delete({ kind: 'Pod', group: '', namespace: NS, name: 'web-1' });
    assert.deepEqual(w.batches, [[{ kind: 'noEndpoints', exists: true }]]);

    // Pod relabelled back in.
    w.batches.length = 0;
    index.apply(mkPod('web-0', { ip: '10.0.0.1' }));
    assert.deepEqual(w.batches, [[{ kind: 'add', endpoints: [meshedEndpoint('web-0', '10.0.0.1', 8080)] }]]);
  });

  it('sends nothing when a transaction leaves the set unchanged', () => {
    const index = mkIndex(mkService('web'), mkPod('web-0', { ip: '10.0.0.1' }));
    const w = record(index, `${WEB}:80`);
    index.update((tx) => {
      tx.apply(mkPod('web-0', { ip: '10.0.0.1' })); // same pod again
      tx.apply(mkPod('api-0', { ip: '10.0.0.9', labels: { app: 'api' } })); // not selected
      tx.apply(mkPod('web-9')); // selected but no IP
      tx.apply(mkService('api', { selector: { app: 'api' } }));
      tx.apply({ kind: 'Namespace', apiVersion: 'v1', metadata: { namespace: '', name: NS, labels: {}, annotations: {} }, spec: {} });
    });
    index.apply(mkPod('web-x', { ip: '10.1.0.1', namespace: 'other' }));
    assert.deepEqual(w.batches, []);
  });

  it('follows a Service selector change', () => {
    const index = mkIndex(mkService('web'), mkPod('web-0', { ip: '10.0.0.1' }), mkPod('canary-0', { ip: '10.0.0.2', labels: { app: 'canary' } }));
    const w = record(index, `${WEB}:80`);
    index.apply(mkService('web', { selector: { app: 'canary' } }));
    assert.deepEqual(w.batches, [
      [
        { kind: 'remove', addrs: [{ ip: '10.0.0.1', port: 8080 }] },
        { kind: 'add', endpoints: [meshedEndpoint('canary-0', '10.0.0.2', 8080)] },
      ],
    ]);
    // A new targetPort moves every endpoint.
    w.batches.length = 0;
    index.apply(mkService('web', { selector: { app: 'canary' }, ports: [{ port: 80, targetPort: 3306 }] }));
    assert.deepEqual(w.batches, [
      [
        { kind: 'remove', addrs: [{ ip: '10.0.0.2', port: 8080 }] },
        { kind: 'add', endpoints: [meshedEndpoint('canary-0', '10.0.0.2', 3306)] },
      ],
    ]);
  });

  it('reports a deleted Service as noEndpoints(exists: false), and its return', () => {
    const index = mkIndex(mkService('web'), mkPod('web-0', { ip: '10.0.0.1' }));
    const w = record(index, `${WEB}:80`);
    index.delete({ kind: 'Service', group: '', namespace: NS, name: 'web' });
    assert.deepEqual(w.batches, [[{ kind: 'noEndpoints', exists: false }]]);
    w.batches.length = 0;
    index.apply(mkService('web', { selector: undefined }));
    assert.deepEqual(w.batches, [[{ kind: 'noEndpoints', exists: true }]]);
    w.batches.length = 0;
    index.apply(mkService('web'));
    assert.deepEqual(w.batches, [[{ kind: 'add', endpoints: [meshedEndpoint('web-0', '10.0.0.1', 8080)] }]]);
  });

  it('starts an unknown Service with noEndpoints(exists: false)', () => {
    const index = mkIndex();
    const w = record(index, `${WEB}:80`);
    assert.deepEqual(w.initial, [{ kind: 'noEndpoints', exists: false }]);
    index.apply(mkPod('web-0', { ip: '10.0.0.1' }));
    assert.deepEqual(w.batches, []);
  });

  it('watches a pod IP: the pod appearing, changing and going away', () => {
    const index = mkIndex();
    const w = record(index, '10.0.0.1:8080');
    assert.deepEqual(w.initial, [{ kind: 'noEndpoints', exists: false }]);
    index.apply(mkPod('web-0', { ip: '10.0.0.1', meshed: false }));
    assert.deepEqual(w.batches, [
      [{ kind: 'add', endpoints: [{ ip: '10.0.0.1', port: 8080, weight: 10000, labels: { namespace: NS, pod: 'web-0', serviceaccount: 'default' } }] }],
    ]);
    w.batches.length = 0;
    index.apply(mkPod('web-0', { ip: '10.0.0.1' }));
    assert.deepEqual(w.batches, [[{ kind: 'add', endpoints: [meshedEndpoint('web-0', '10.0.0.1', 8080)] }]]);
    w.batches.length = 0;
    index.apply(mkPod('web-0', { ip: '10.0.0.7' })); // the pod moved to another IP
    assert.deepEqual(w.batches, [[{ kind: 'noEndpoints', exists: false }]]);
  });

  it('shares a target between watchers and stops notifying after unsubscribe', () => {
    const index = mkIndex(mkService('web'));
    const a = record(index, `${WEB}:80`);
    const b = record(index, `${WEB.toUpperCase()}:80`);
    assert.equal(index.watchedTargets, 1);
    index.apply(mkPod('web-0', { ip: '10.0.0.1' }));
    assert.deepEqual(a.batches, b.batches);
    assert.equal(a.batches.length, 1);
    a.unsubscribe();
    index.apply(mkPod('web-1', { ip: '10.0.0.2' }));
    assert.equal(a.batches.length, 1);
    assert.equal(b.batches.length, 2);
    b.unsubscribe();
    assert.equal(index.watchedTargets, 0);
    // A watch started later sees the whole current set at once.
    const c = record(index, `${WEB}:80`);
    assert.deepEqual(c.initial, [{ kind: 'add', endpoints: [meshedEndpoint('web-0', '10.0.0.1', 8080), meshedEndpoint('web-1', '10.0.0.2', 8080)] }]);
  });

  it('notifies every watcher even when one throws, then rethrows', () => {
    const index = mkIndex(mkService('web'));
    ok(
      index.watch(`${WEB}:80`, () => {
        throw new Error('boom');
      }),
    );
    const w = record(index, `${WEB}:80`);
    assert.throws(() => index.apply(mkPod('web-0', { ip: '10.0.0.1' })), /boom/);
    assert.equal(w.batches.length, 1);
  });
});

// === readiness ===

describe('EndpointsIndex readiness', () => {
  it('answers a Service with its ready pods only, as a cluster whose pods carry Ready conditions', () => {
    const index = mkIndex(
      mkService('web'),
      mkPod('web-0', { ip: '10.0.0.1', ready: 'True' }),
      mkPod('web-1', { ip: '10.0.0.2', ready: 'False' }),
      mkPod('web-2', { ip: '10.0.0.3', ready: 'True', phase: 'Succeeded' }),
      mkPod('web-3', { ip: '10.0.0.4' }), // no conditions: nothing reports on it
    );
    assert.deepEqual(ok(index.resolve(`${WEB}:80`)).endpoints, [meshedEndpoint('web-0', '10.0.0.1', 8080), meshedEndpoint('web-3', '10.0.0.4', 8080)]);
    // Addressed by its IP, an unready pod still answers (upstream's endpoint profiles); a finished one does not.
    assert.deepEqual(ok(index.resolve('10.0.0.2:8080')).endpoints, [meshedEndpoint('web-1', '10.0.0.2', 8080)]);
    assert.deepEqual(ok(index.resolve('10.0.0.3:8080')), { ok: true, exists: false, endpoints: [] });
  });

  it('reads the Ready condition of a Pod as the API server serves it', () => {
    const apiPod = (ready: string) => `apiVersion: v1
kind: Pod
metadata: {name: web-7d4b9c8f6-x2k9p, namespace: app, labels: {app: web, linkerd.io/control-plane-ns: linkerd}, uid: 5d1c}
spec: {containers: [{name: app, ports: [{name: http, containerPort: 8080}]}]}
status:
  phase: Running
  podIP: 10.0.0.1
  conditions:
  - {type: Initialized, status: "True", lastTransitionTime: "2026-01-01T00:00:00Z"}
  - {type: Ready, status: "${ready}", lastTransitionTime: "2026-01-01T00:00:05Z", reason: ContainersNotReady}
  - {type: ContainersReady, status: "${ready}"}
`;
    const decode = (text: string): Pod => {
      const [doc] = parseManifestText(text, 'pod.yaml').documents;
      const r = doc === undefined ? undefined : decodeResource(doc);
      assert.equal(r?.status, 'ok', JSON.stringify(r));
      return (r as { resource: Pod }).resource;
    };
    const index = mkIndex(mkService('web'), decode(apiPod('False')));
    assert.deepEqual(ok(index.resolve(`${WEB}:80`)).endpoints, []);
    index.apply(decode(apiPod('True')));
    assert.deepEqual(
      ok(index.resolve(`${WEB}:80`)).endpoints.map((e) => e.labels.pod),
      ['web-7d4b9c8f6-x2k9p'],
    );
    // Deleted: terminating, so no longer ready, whatever its Ready condition says.
    index.apply(decode(apiPod('True').replace('uid: 5d1c}', 'uid: 5d1c, deletionTimestamp: "2026-01-01T00:01:00Z"}')));
    assert.deepEqual(ok(index.resolve(`${WEB}:80`)).endpoints, []);
  });

  it('removes a pod whose Ready condition turns False from the watch, and adds it back when True', () => {
    const index = mkIndex(mkService('web'), mkPod('web-0', { ip: '10.0.0.1', ready: 'True' }), mkPod('web-1', { ip: '10.0.0.2', ready: 'True' }));
    const w = record(index, `${WEB}:80`);
    index.apply(mkPod('web-1', { ip: '10.0.0.2', ready: 'False' }));
    assert.deepEqual(w.batches, [[{ kind: 'remove', addrs: [{ ip: '10.0.0.2', port: 8080 }] }]]);
    index.apply(mkPod('web-0', { ip: '10.0.0.1', ready: 'False' }));
    assert.deepEqual(w.batches[1], [{ kind: 'noEndpoints', exists: true }]);
    index.apply(mkPod('web-1', { ip: '10.0.0.2', ready: 'True' }));
    assert.deepEqual(w.batches[2], [{ kind: 'add', endpoints: [meshedEndpoint('web-1', '10.0.0.2', 8080)] }]);
    assert.equal(w.batches.length, 3);
  });

  it('keeps unready pods of a Service that publishes not-ready addresses', () => {
    const index = mkIndex(mkService('web', { publishNotReadyAddresses: true }), mkPod('web-0', { ip: '10.0.0.1', ready: 'False' }));
    assert.deepEqual(ok(index.resolve(`${WEB}:80`)).endpoints, [meshedEndpoint('web-0', '10.0.0.1', 8080)]);
    index.apply(mkPod('web-0', { ip: '10.0.0.1', ready: 'False', phase: 'Failed' }));
    assert.deepEqual(ok(index.resolve(`${WEB}:80`)).endpoints, []);
  });

  it('takes readiness from the node once it reports: unreported pods are no endpoints, reported ones follow their reports', () => {
    // Manifest status means nothing to the node: an exported pod says Ready, but nothing runs it yet.
    const web0 = mkPod('web-0', { ip: '10.0.0.1', ready: 'True' });
    const web1 = mkPod('web-1', { ip: '10.0.0.2' });
    const index = mkIndex(mkService('web'), web0, web1);
    const w = record(index, `${WEB}:80`);
    assert.deepEqual(w.initial, [{ kind: 'add', endpoints: [meshedEndpoint('web-0', '10.0.0.1', 8080), meshedEndpoint('web-1', '10.0.0.2', 8080)] }]);
    index.reportPod(web1, false);
    assert.deepEqual(w.batches, [[{ kind: 'noEndpoints', exists: true }]]);
    index.reportPod(web1, true);
    assert.deepEqual(w.batches[1], [{ kind: 'add', endpoints: [meshedEndpoint('web-1', '10.0.0.2', 8080)] }]);
    index.reportPod(web0, true);
    assert.deepEqual(w.batches[2], [{ kind: 'add', endpoints: [meshedEndpoint('web-0', '10.0.0.1', 8080)] }]);
    index.reportPod(web0, false);
    assert.deepEqual(w.batches[3], [{ kind: 'remove', addrs: [{ ip: '10.0.0.1', port: 8080 }] }]);
    assert.equal(w.batches.length, 4);
  });

  it('keeps a pod the manifests dropped while the node runs it ready (a rollout), until the node forgets it', () => {
    const old = mkPod('web-a-0', { ip: '10.0.0.1' });
    const next = mkPod('web-b-0', { ip: '10.0.0.2' });
    const index = mkIndex(mkService('web'), old);
    index.reportPod(old, true);
    const w = record(index, `${WEB}:80`);
    index.update((tx) => {
      tx.delete({ kind: 'Pod', group: '', namespace: NS, name: 'web-a-0' });
      tx.apply(next);
    });
    index.reportPod(next, false);
    assert.deepEqual(w.batches, [], 'the old pod serves while the new one is not ready');
    assert.deepEqual(ok(index.resolve('10.0.0.1:8080')).endpoints, [meshedEndpoint('web-a-0', '10.0.0.1', 8080)]);
    index.reportPod(next, true);
    index.forgetPod(NS, 'web-a-0');
    assert.deepEqual(w.batches, [
      [{ kind: 'add', endpoints: [meshedEndpoint('web-b-0', '10.0.0.2', 8080)] }],
      [{ kind: 'remove', addrs: [{ ip: '10.0.0.1', port: 8080 }] }],
    ]);
    assert.deepEqual(ok(index.resolve('10.0.0.1:8080')), { ok: true, exists: false, endpoints: [] });
  });
});
