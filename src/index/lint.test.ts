import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type Diagnostic, parseCidr } from '../core/index.js';
import { decodeResource, parseManifestText, type Resource } from '../manifest/index.js';
import { lintIndex } from './lint.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const net = (cidr: string) => ({ net: parseCidr(cidr)!, except: [] });
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: ['10.0.0.0/8', '100.64.0.0/10', '172.16.0.0/12', '192.168.0.0/16', 'fd00::/8'].map(net),
  probeNetworks: [net('0.0.0.0/0'), net('::/0')],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

// === builders (YAML, so diagnostics carry real positions) ===

function mkNamespace(annotations = ''): string {
  return `apiVersion: v1
kind: Namespace
metadata:
  name: app
  annotations: {${annotations}}
`;
}

function mkPod(o: { name?: string; labels?: string; annotations?: string; injected?: boolean; meshed?: boolean } = {}): string {
  const proxy = o.injected
    ? `
  - name: linkerd-proxy
    ports: [{name: linkerd-admin, containerPort: 4191}]`
    : '';
  return `apiVersion: v1
kind: Pod
metadata:
  namespace: app
  name: ${o.name ?? 'web-0'}
  labels: {${o.labels ?? 'app: web'}${o.meshed === false ? '' : ', linkerd.io/control-plane-ns: linkerd'}}
  annotations: {${o.annotations ?? ''}}
spec:
  containers:
  - name: app
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {port: 8080, path: /ready}${proxy}
`;
}

function mkServer(
  name: string,
  o: { port?: string; selector?: string; proxyProtocol?: string; accessPolicy?: string; creationTimestamp?: string } = {},
): string {
  return `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata:
  namespace: app
  name: ${name}${o.creationTimestamp ? `\n  creationTimestamp: "${o.creationTimestamp}"` : ''}
spec:
  podSelector: {matchLabels: {${o.selector ?? 'app: web'}}}
  port: ${o.port ?? 'http'}
  proxyProtocol: ${o.proxyProtocol ?? 'unknown'}
  accessPolicy: ${o.accessPolicy ?? 'deny'}
`;
}

function mkAuthorizationPolicy(name: string, target: string, refs = '[]'): string {
  return `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata:
  namespace: app
  name: ${name}
spec:
  targetRef: {${target}}
  requiredAuthenticationRefs: ${refs}
`;
}

function mkHttpRoute(name: string, server: string, path = '/api', group = 'policy.linkerd.io'): string {
  return `apiVersion: ${group}/${group === 'policy.linkerd.io' ? 'v1beta3' : 'v1'}
kind: HTTPRoute
metadata:
  namespace: app
  name: ${name}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: ${server}}]
  rules:
  - matches: [{path: {type: PathPrefix, value: ${path}}}]
`;
}

const MESHTLS = `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata:
  namespace: app
  name: clients
spec:
  identities: ["*.app.serviceaccount.identity.linkerd.cluster.local"]
`;

/** Decodes the documents, indexes them and lints the set. */
function lint(...docs: string[]): Diagnostic[] {
  const text = docs.join('---\n');
  const loaded = parseManifestText(text, 'p.yaml');
  assert.deepStrictEqual(loaded.diagnostics, []);
  const resources: Resource[] = loaded.documents.map((d) => {
    const r = decodeResource(d);
    assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
    return (r as { resource: Resource }).resource;
  });
  const index = new PolicyIndex(CONFIG);
  index.update((tx) => {
    for (const r of resources) tx.apply(r);
  });
  return lintIndex(index, resources);
}

/** The findings as `CODE line:col message`, for exact comparisons. */
const brief = (ds: readonly Diagnostic[]) => ds.map((d) => `${d.code} ${d.source?.line}:${d.source?.col} ${d.message}`);

/** A namespace where nothing is wrong: one pod, one Server with a resolvable policy. */
const CLEAN = [
  mkNamespace(),
  mkPod(),
  mkServer('web', { accessPolicy: 'deny' }),
  MESHTLS,
  mkAuthorizationPolicy(
    'web-clients',
    'group: policy.linkerd.io, kind: Server, name: web',
    '[{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: clients}]',
  ),
];

describe('lintIndex', () => {
  it('finds nothing in a clean set', () => {
    assert.deepStrictEqual(lint(...CLEAN), []);
  });

  it('finds nothing under deny without a Server: the automatic probe route admits the kubelet', () => {
    assert.deepStrictEqual(lint(mkNamespace(), mkPod({ annotations: 'config.linkerd.io/default-inbound-policy: deny' })), []);
  });

  describe('POL102 dangling references', () => {
    it('an AuthorizationPolicy targeting a missing Server', () => {
      // The sixth document starts at line 49; targetRef is its seventh line, the value at column 14.
      assert.deepStrictEqual(brief(lint(...CLEAN, mkAuthorizationPolicy('typo', 'group: policy.linkerd.io, kind: Server, name: wbe'))), [
        'POL102 55:14 targetRef Server wbe does not resolve to anything; the policy authorizes nothing',
      ]);
    });

    it('an unresolved authentication reference, in its own or another namespace', () => {
      const ds = lint(
        ...CLEAN,
        mkAuthorizationPolicy(
          'dropped',
          'group: policy.linkerd.io, kind: Server, name: web',
          '[{group: policy.linkerd.io, kind: NetworkAuthentication, name: office}, {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: clients, namespace: other}]',
        ),
      );
      assert.deepStrictEqual(
        ds.map((d) => [d.code, d.message, d.path]),
        [
          [
            'POL102',
            'requiredAuthenticationRefs NetworkAuthentication app/office does not resolve to anything; the whole policy is dropped (fail closed)',
            ['spec', 'requiredAuthenticationRefs', 0],
          ],
          [
            'POL102',
            'requiredAuthenticationRefs MeshTLSAuthentication other/clients does not resolve to anything; the whole policy is dropped (fail closed)',
            ['spec', 'requiredAuthenticationRefs', 1],
          ],
        ],
      );
    });

    it('a ServerAuthorization naming a missing Server', () => {
      const saz = `apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {namespace: app, name: legacy}
spec:
  server: {name: gone}
  client: {unauthenticated: true}
`;
      assert.deepStrictEqual(
        lint(...CLEAN, saz).map((d) => [d.code, d.message, d.resource]),
        [
          [
            'POL102',
            'spec.server Server gone does not resolve to anything; it authorizes nothing',
            { kind: 'ServerAuthorization', namespace: 'app', name: 'legacy' },
          ],
        ],
      );
    });

    it('a route policy whose route exists only in the other API group', () => {
      const docs = (group: string) => [
        mkNamespace(),
        mkPod(),
        mkServer('web', { accessPolicy: 'all-unauthenticated' }),
        mkHttpRoute('api', 'web', '/', group),
        mkAuthorizationPolicy('api-callers', 'group: policy.linkerd.io, kind: HTTPRoute, name: api'),
      ];
      assert.deepStrictEqual(
        lint(...docs('gateway.networking.k8s.io')).map((d) => [d.code, d.message]),
        [['POL102', 'targetRef HTTPRoute api does not resolve to anything; the policy authorizes nothing']],
      );
      assert.deepStrictEqual(lint(...docs('policy.linkerd.io')), []);
    });
  });

  it('POL103 a Server that selects no pod', () => {
    assert.deepStrictEqual(
      lint(...CLEAN, mkServer('orphan', { selector: 'app: nope', port: '9090' })).map((d) => [d.code, d.message, d.path]),
      [['POL103', 'Server orphan selects no pod', ['spec', 'podSelector']]],
    );
  });

  it('POL104 a port name the selected pod does not declare', () => {
    assert.deepStrictEqual(
      lint(...CLEAN, mkServer('grpc', { port: 'grpc' })).map((d) => [d.code, d.message]),
      [['POL104', 'Server grpc port "grpc" is not a container port name of pod app/web-0, so it binds nothing there']],
    );
  });

  describe('POL105 overlapping Servers, naming the winner and why', () => {
    it('the older one wins', () => {
      const ds = lint(
        mkNamespace(),
        mkPod(),
        mkServer('web-new', { creationTimestamp: '2021-01-01T00:00:00Z' }),
        mkServer('web-old', { port: '8080', creationTimestamp: '2020-01-01T00:00:00Z' }),
      );
      assert.deepStrictEqual(
        ds.map((d) => [d.code, d.message, d.resource?.name]),
        [['POL105', 'Servers web-old and web-new both select pod app/web-0 port 8080; web-old wins (it is older)', 'web-new']],
      );
    });
    it('same age: the name decides', () => {
      assert.deepStrictEqual(
        lint(...CLEAN, mkServer('a-web', { port: '8080' })).map((d) => [d.code, d.message, d.resource?.name]),
        [['POL105', 'Servers a-web and web both select pod app/web-0 port 8080; a-web wins (same age, its name sorts first)', 'web']],
      );
    });
  });

  describe('POL106 probes the effective policy denies', () => {
    it('a Server whose HTTPRoute does not cover the probe path: 404', () => {
      const ds = lint(...CLEAN, mkHttpRoute('api', 'web', '/api'));
      assert.deepStrictEqual(
        ds.map((d) => [d.code, d.message, d.path]),
        [
          [
            'POL106',
            'readiness probe GET /ready on port 8080 of pod app/web-0 would be denied (no route matches on server/web)',
            ['spec', 'containers', 0, 'readinessProbe'],
          ],
        ],
      );
    });

    it('a route that covers the probe path but no authorization admitting the kubelet: 403', () => {
      const ds = lint(mkNamespace(), mkPod(), mkServer('web'), mkHttpRoute('probes', 'web', '/ready'));
      assert.deepStrictEqual(
        ds.map((d) => [d.code, d.message]),
        [['POL106', 'readiness probe GET /ready on port 8080 of pod app/web-0 would be denied (server/web has no authorization admitting the kubelet)']],
      );
    });
  });

  it('POL107 an HTTPRoute on a Server whose protocol never uses it', () => {
    const ds = lint(mkNamespace(), mkPod(), mkServer('web', { proxyProtocol: 'opaque', accessPolicy: 'all-unauthenticated' }), mkHttpRoute('api', 'web'));
    assert.deepStrictEqual(
      ds.map((d) => [d.code, d.message, d.hint]),
      [
        [
          'POL107',
          'HTTPRoute api is attached to Server web whose protocol opaque never uses it',
          'opaque ports carry no HTTP: remove the route or change proxyProtocol',
        ],
      ],
    );
  });

  describe('POL108 namespace annotations that changed after pod creation', () => {
    const ns = mkNamespace('config.linkerd.io/default-inbound-policy: deny');
    it('fires for an injected pod whose annotation differs', () => {
      const ds = lint(ns, mkPod({ injected: true, annotations: 'config.linkerd.io/default-inbound-policy: all-unauthenticated' }));
      assert.deepStrictEqual(
        ds.map((d) => [d.code, d.message, d.resource]),
        [
          [
            'POL108',
            'namespace app sets config.linkerd.io/default-inbound-policy=deny but pod app/web-0 was created with all-unauthenticated; the change reaches it only when it is recreated',
            { kind: 'Namespace', namespace: '', name: 'app' },
          ],
        ],
      );
    });
    it('does not fire for a pod that is not injected yet, or that agrees', () => {
      assert.deepStrictEqual(lint(ns, mkPod({ annotations: 'config.linkerd.io/default-inbound-policy: all-unauthenticated' })), []);
      assert.deepStrictEqual(lint(ns, mkPod({ injected: true, annotations: 'config.linkerd.io/default-inbound-policy: deny' })), []);
    });
  });

  describe('POL110 routes a Server does not accept', () => {
    it('no such Server', () => {
      assert.deepStrictEqual(
        lint(...CLEAN, mkHttpRoute('api', 'nope')).map((d) => [d.code, d.message]),
        [['POL110', 'HTTPRoute api is not accepted by Server nope: no Server nope in namespace app']],
      );
    });
    it('an HTTPRoute sharing a gRPC Server with a GRPCRoute', () => {
      const grpcRoute = `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {namespace: app, name: svc}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: grpc}]
  rules: [{matches: [{method: {service: pkg.Svc}}]}]
`;
      const ds = lint(...CLEAN, mkServer('grpc', { port: '9090', proxyProtocol: 'gRPC' }), grpcRoute, mkHttpRoute('h', 'grpc'));
      assert.deepStrictEqual(
        ds.map((d) => [d.code, d.message]),
        [
          ['POL113', 'Server grpc port 9090 is not declared by pod app/web-0; the Server still binds it'],
          ['POL110', 'HTTPRoute h is not accepted by Server grpc: Server grpc also has a GRPCRoute, and GRPCRoutes win'],
        ],
      );
    });
  });

  it('POL111 an object the index ignores', () => {
    const saz = `apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {namespace: app, name: nobody}
spec:
  server: {name: web}
  client: {}
`;
    assert.deepStrictEqual(
      lint(...CLEAN, saz).map((d) => [d.code, d.message]),
      [['POL111', 'ServerAuthorization nobody is ignored by inbound policy: no client authentication is configured (neither unauthenticated nor meshTLS)']],
    );
  });

  it('POL112 an unmeshed pod (info)', () => {
    const ds = lint(...CLEAN, mkPod({ name: 'job-0', labels: 'app: job', meshed: false }));
    assert.deepStrictEqual(
      ds.map((d) => [d.code, d.severity, d.message]),
      [['POL112', 'info', 'pod app/job-0 is not meshed (no linkerd.io/control-plane-ns label); no inbound policy applies to it']],
    );
  });
});
