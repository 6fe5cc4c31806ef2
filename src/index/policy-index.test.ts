import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type Authorization,
  type ClientAuthentication,
  type DefaultPolicyName,
  defaultMeta,
  GATEWAY_GROUP,
  type GrpcRoute,
  type HttpRoute,
  type HttpRouteMatch,
  type InboundServer,
  type LabelSelector,
  type Network,
  POLICY_GROUP,
  parseCidr,
} from '../core/index.js';
import type {
  AuthorizationPolicy,
  ContainerSpec,
  GRPCRoute,
  HTTPRoute,
  LocalTargetRef,
  MeshTLSAuthentication,
  NamespacedTargetRef,
  NetworkAuthentication,
  ParentRef,
  Pod,
  Resource,
  Server,
  ServerAuthorization,
  ServerProtocol,
} from '../manifest/index.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

// === builders: resources ===

const NS = 'app';
const POLICY_ANNOTATION = 'config.linkerd.io/default-inbound-policy';

interface MetaOpts {
  readonly namespace?: string;
  readonly labels?: Record<string, string>;
  readonly annotations?: Record<string, string>;
  readonly creationTimestamp?: string;
}

function meta(name: string, o: MetaOpts = {}) {
  return {
    namespace: o.namespace ?? NS,
    name,
    labels: o.labels ?? {},
    annotations: o.annotations ?? {},
    ...(o.creationTimestamp !== undefined ? { creationTimestamp: o.creationTimestamp } : {}),
  };
}

const WEB_CONTAINER: ContainerSpec = { name: 'app', ports: [{ name: 'http', containerPort: 8080 }] };

function mkPod(
  name: string,
  o: { labels?: Record<string, string>; annotations?: Record<string, string>; containers?: ContainerSpec[]; meshed?: boolean; namespace?: string } = {},
): Pod {
  const labels = { ...(o.labels ?? { app: 'web' }), ...(o.meshed === false ? {} : { 'linkerd.io/control-plane-ns': 'linkerd' }) };
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: meta(name, {
      labels,
      ...(o.annotations !== undefined ? { annotations: o.annotations } : {}),
      ...(o.namespace ? { namespace: o.namespace } : {}),
    }),
    spec: { containers: o.containers ?? [WEB_CONTAINER] },
  };
}

function mkServer(
  name: string,
  o: {
    port?: number | string;
    selector?: LabelSelector;
    externalWorkloadSelector?: LabelSelector;
    proxyProtocol?: ServerProtocol;
    accessPolicy?: string;
    creationTimestamp?: string;
    labels?: Record<string, string>;
  } = {},
): Server {
  return {
    kind: 'Server',
    apiVersion: 'policy.linkerd.io/v1beta3',
    metadata: meta(name, {
      ...(o.labels !== undefined ? { labels: o.labels } : {}),
      ...(o.creationTimestamp !== undefined ? { creationTimestamp: o.creationTimestamp } : {}),
    }),
    spec: {
      ...(o.externalWorkloadSelector !== undefined
        ? { externalWorkloadSelector: o.externalWorkloadSelector }
        : { podSelector: o.selector ?? { matchLabels: { app: 'web' } } }),
      port: o.port ?? 8080,
      proxyProtocol: o.proxyProtocol ?? 'unknown',
      ...(o.accessPolicy !== undefined ? { accessPolicy: o.accessPolicy } : {}),
    },
  };
}

const serverRef = (name: string): LocalTargetRef => ({ group: POLICY_GROUP, kind: 'Server', name });

function mkAuthorizationPolicy(name: string, targetRef: LocalTargetRef, refs: NamespacedTargetRef[] = []): AuthorizationPolicy {
  return { kind: 'AuthorizationPolicy', apiVersion: 'policy.linkerd.io/v1alpha1', metadata: meta(name), spec: { targetRef, requiredAuthenticationRefs: refs } };
}

function mkServerAuthorization(
  name: string,
  server: ServerAuthorization['spec']['server'],
  client: ServerAuthorization['spec']['client'],
): ServerAuthorization {
  return { kind: 'ServerAuthorization', apiVersion: 'policy.linkerd.io/v1beta1', metadata: meta(name), spec: { server, client } };
}

function mkMeshTLS(name: string, identities: string[], namespace = NS): MeshTLSAuthentication {
  return { kind: 'MeshTLSAuthentication', apiVersion: 'policy.linkerd.io/v1alpha1', metadata: meta(name, { namespace }), spec: { identities } };
}

function mkNetworkAuthentication(name: string, networks: Network[], namespace = NS): NetworkAuthentication {
  return { kind: 'NetworkAuthentication', apiVersion: 'policy.linkerd.io/v1alpha1', metadata: meta(name, { namespace }), spec: { networks } };
}

const toServer = (name: string): ParentRef => ({ group: POLICY_GROUP, kind: 'Server', name });

function mkHttpRoute(
  name: string,
  parents: ParentRef[],
  o: { group?: string; creationTimestamp?: string; matches?: HTTPRoute['spec']['rules'][number]['matches'] } = {},
): HTTPRoute {
  const group = o.group ?? POLICY_GROUP;
  return {
    kind: 'HTTPRoute',
    apiVersion: `${group}/${group === POLICY_GROUP ? 'v1beta3' : 'v1'}`,
    metadata: meta(name, o.creationTimestamp !== undefined ? { creationTimestamp: o.creationTimestamp } : {}),
    spec: { group, parentRefs: parents, hostnames: [], rules: [{ matches: o.matches ?? [{ path: { type: 'PathPrefix', value: `/${name}` } }] }] },
  };
}

function mkGrpcRoute(name: string, parents: ParentRef[]): GRPCRoute {
  return {
    kind: 'GRPCRoute',
    apiVersion: 'gateway.networking.k8s.io/v1',
    metadata: meta(name),
    spec: {
      group: GATEWAY_GROUP,
      parentRefs: parents,
      hostnames: [],
      rules: [{ matches: [{ method: { type: 'Exact', service: 'pkg.Svc', method: 'Call' } }] }],
    },
  };
}

// === builders: expected values ===

const net = (cidr: string, ...except: string[]): Network => ({ net: parseCidr(cidr)!, except: except.map((e) => parseCidr(e)!) });
const ALL = [net('0.0.0.0/0'), net('::/0')];
const CLUSTER = ['10.0.0.0/8', '100.64.0.0/10', '172.16.0.0/12', '192.168.0.0/16', 'fd00::/8'].map((c) => net(c));
const PROBE = [net('0.0.0.0/0'), net('::/0')];
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: CLUSTER,
  probeNetworks: PROBE,
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const UNAUTHENTICATED: ClientAuthentication = { kind: 'unauthenticated' };
const ANY_IDENTITY: ClientAuthentication = { kind: 'tlsAuthenticated', identities: [], suffixes: [[]] };
const ids = (...identities: string[]): ClientAuthentication => ({ kind: 'tlsAuthenticated', identities, suffixes: [] });
const sa = (name: string, ns = NS) => `${name}.${ns}.serviceaccount.identity.linkerd.cluster.local`;

const defaultAuthz = (name: string, networks: Network[], authentication: ClientAuthentication): Authorization => ({
  meta: defaultMeta(name),
  networks,
  authentication,
});
const apAuthz = (name: string, networks: Network[] = ALL, authentication: ClientAuthentication = UNAUTHENTICATED): Authorization => ({
  meta: { group: POLICY_GROUP, kind: 'authorizationpolicy', name },
  networks,
  authentication,
});
const sazAuthz = (name: string, networks: Network[], authentication: ClientAuthentication): Authorization => ({
  meta: { group: POLICY_GROUP, kind: 'serverauthorization', name },
  networks,
  authentication,
});

/** POLICY-SEMANTICS §2.1, written out. */
const DEFAULT_AUTHZ: Record<DefaultPolicyName, Authorization[]> = {
  'all-unauthenticated': [defaultAuthz('all-unauthenticated', ALL, UNAUTHENTICATED)],
  'all-authenticated': [defaultAuthz('all-authenticated', ALL, ANY_IDENTITY)],
  'cluster-unauthenticated': [defaultAuthz('cluster-unauthenticated', CLUSTER, UNAUTHENTICATED)],
  'cluster-authenticated': [defaultAuthz('cluster-authenticated', CLUSTER, ANY_IDENTITY)],
  deny: [],
  audit: [defaultAuthz('audit', ALL, UNAUTHENTICATED)],
};
const POLICIES = Object.keys(DEFAULT_AUTHZ) as DefaultPolicyName[];
const REQUIRE_IDENTITY: Record<DefaultPolicyName, DefaultPolicyName> = {
  'all-unauthenticated': 'all-authenticated',
  'all-authenticated': 'all-authenticated',
  'cluster-unauthenticated': 'cluster-authenticated',
  'cluster-authenticated': 'cluster-authenticated',
  deny: 'deny',
  audit: 'audit',
};

const DEFAULT_ROUTE: HttpRoute = {
  meta: defaultMeta('default'),
  hosts: [],
  authorizations: [],
  rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
};
const DEFAULT_GRPC_ROUTE: GrpcRoute = {
  meta: defaultMeta('default'),
  hosts: [],
  authorizations: [],
  rules: [{ matches: [{ rpc: {}, headers: [] }], filters: [] }],
};

function probeRoute(...paths: string[]): HttpRoute {
  return {
    meta: defaultMeta('probe'),
    hosts: [],
    authorizations: [defaultAuthz('probe', PROBE, UNAUTHENTICATED)],
    rules: [{ matches: paths.map((value) => ({ path: { kind: 'exact', value }, headers: [], queryParams: [], method: 'GET' })), filters: [] }],
  };
}

const detect = (...httpRoutes: HttpRoute[]): InboundServer['protocol'] => ({ kind: 'detect', timeoutMs: 10_000, httpRoutes });

function defaultServer(policy: DefaultPolicyName, protocol: InboundServer['protocol']): InboundServer {
  return { meta: defaultMeta(policy), protocol, authorizations: DEFAULT_AUTHZ[policy] };
}

function serverValue(name: string, authorizations: Authorization[], protocol: InboundServer['protocol'] = detect(DEFAULT_ROUTE)): InboundServer {
  return { meta: { group: POLICY_GROUP, kind: 'server', name }, protocol, authorizations };
}

function httpRoute(name: string, authorizations: Authorization[] = [], o: { group?: string; matches?: HttpRouteMatch[] } = {}): HttpRoute {
  return {
    meta: { group: o.group ?? POLICY_GROUP, kind: 'HTTPRoute', name },
    hosts: [],
    authorizations,
    rules: [{ matches: o.matches ?? [{ path: { kind: 'prefix', value: `/${name}` }, headers: [], queryParams: [] }], filters: [] }],
  };
}

// === helpers ===

function mkIndex(resources: readonly Resource[], config: Partial<ClusterConfig> = {}): PolicyIndex {
  const index = new PolicyIndex({ ...CONFIG, ...config });
  index.update((tx) => {
    for (const r of resources) tx.apply(r);
  });
  return index;
}

function policyOf(index: PolicyIndex, pod: string, port: number, namespace = NS): InboundServer {
  const cell = index.lookup(namespace, pod, port);
  assert.ok(cell !== undefined, `${namespace}/${pod} is indexed`);
  return cell.value;
}

/** Subscribes to a cell and records every published value. */
function watch(index: PolicyIndex, pod: string, port: number, namespace = NS) {
  const cell = index.lookup(namespace, pod, port);
  assert.ok(cell !== undefined);
  const seen: InboundServer[] = [];
  cell.subscribe((v) => seen.push(v));
  return { cell, seen };
}

const PROBED_CONTAINER: ContainerSpec = {
  name: 'app',
  ports: [{ name: 'http', containerPort: 8080 }],
  readinessProbe: { httpGet: { port: 8080, path: '/ready' } },
  // A named probe port resolves against the same container; the query string is dropped.
  livenessProbe: { httpGet: { port: 'http', path: '/live?verbose=1' } },
};

// === tests ===

describe('PolicyIndex default servers', () => {
  for (const policy of POLICIES) {
    describe(policy, () => {
      it('pod annotation: detect 10 s, default route plus a probe route for the HTTP probes', () => {
        const index = mkIndex([mkPod('web-0', { annotations: { [POLICY_ANNOTATION]: policy }, containers: [PROBED_CONTAINER] })]);
        assert.deepStrictEqual(policyOf(index, 'web-0', 8080), defaultServer(policy, detect(DEFAULT_ROUTE, probeRoute('/live', '/ready'))));
      });

      it('cluster default: a port without probes gets only the default route', () => {
        const index = mkIndex([mkPod('web-0', { containers: [PROBED_CONTAINER] })], { defaultPolicy: policy });
        assert.deepStrictEqual(policyOf(index, 'web-0', 9090), defaultServer(policy, detect(DEFAULT_ROUTE)));
      });

      it('opaque-ports annotation: opaque protocol and no routes', () => {
        const pod = mkPod('web-0', {
          annotations: { [POLICY_ANNOTATION]: policy, 'config.linkerd.io/opaque-ports': '3306,8080' },
          containers: [PROBED_CONTAINER],
        });
        assert.deepStrictEqual(policyOf(mkIndex([pod]), 'web-0', 8080), defaultServer(policy, { kind: 'opaque' }));
      });

      it(`require-identity port turns it into ${REQUIRE_IDENTITY[policy]}, other ports keep it`, () => {
        const pod = mkPod('web-0', { annotations: { [POLICY_ANNOTATION]: policy, 'config.linkerd.io/proxy-require-identity-inbound-ports': '8080-8081' } });
        const index = mkIndex([pod]);
        assert.deepStrictEqual(policyOf(index, 'web-0', 8080), defaultServer(REQUIRE_IDENTITY[policy], detect(DEFAULT_ROUTE)));
        assert.deepStrictEqual(policyOf(index, 'web-0', 9000), defaultServer(policy, detect(DEFAULT_ROUTE)));
      });

      it('a Server accessPolicy adds the same authorization after the explicit ones', () => {
        const index = mkIndex([mkPod('web-0'), mkServer('web', { accessPolicy: policy })]);
        assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('web', DEFAULT_AUTHZ[policy]));
      });
    });
  }

  it('an invalid default-policy annotation falls back to the cluster default', () => {
    const pod = mkPod('web-0', { annotations: { [POLICY_ANNOTATION]: 'allow-all' } });
    const index = mkIndex([pod], { defaultPolicy: 'cluster-authenticated' });
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), defaultServer('cluster-authenticated', detect(DEFAULT_ROUTE)));
    assert.equal(index.pod(NS, 'web-0')?.defaultPolicy, undefined);
  });

  it('no probe route when the probe networks are empty', () => {
    const index = mkIndex([mkPod('web-0', { containers: [PROBED_CONTAINER] })], { probeNetworks: [] });
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), defaultServer('all-unauthenticated', detect(DEFAULT_ROUTE)));
  });

  it('require-identity ports do not affect Server-bound ports', () => {
    const pod = mkPod('web-0', { annotations: { 'config.linkerd.io/proxy-require-identity-inbound-ports': '8080' } });
    const index = mkIndex([pod, mkServer('web', { accessPolicy: 'all-unauthenticated' })]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('web', DEFAULT_AUTHZ['all-unauthenticated']));
  });

  it('an invalid accessPolicy is treated as absent (deny)', () => {
    const index = mkIndex([mkPod('web-0'), mkServer('web', { accessPolicy: 'allow' })]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('web', []));
  });
});

describe('PolicyIndex Server binding', () => {
  it('binds a numeric port the pod does not declare', () => {
    const index = mkIndex([mkPod('web-0'), mkServer('metrics', { port: 9999, accessPolicy: 'audit' })]);
    assert.deepStrictEqual(index.ports(NS, 'web-0'), [8080, 9999]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 9999), serverValue('metrics', DEFAULT_AUTHZ.audit));
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), defaultServer('all-unauthenticated', detect(DEFAULT_ROUTE)));
  });

  it('a port name resolves to every number it has across containers, case-sensitively', () => {
    const pod = mkPod('web-0', {
      containers: [
        { name: 'a', ports: [{ name: 'http', containerPort: 8080 }] },
        {
          name: 'b',
          ports: [
            { name: 'http', containerPort: 8081 },
            { name: 'admin', containerPort: 9000 },
            { name: 'dns', containerPort: 53, protocol: 'UDP' },
          ],
        },
      ],
    });
    const index = mkIndex([pod, mkServer('web-http', { port: 'http' }), mkServer('upper', { port: 'ADMIN' }), mkServer('dns', { port: 'dns' })]);
    assert.deepStrictEqual(index.bindings(NS, 'web-0'), [
      { port: 8080, server: 'web-http', losers: [] },
      { port: 8081, server: 'web-http', losers: [] },
    ]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8081), serverValue('web-http', []));
    assert.deepStrictEqual(policyOf(index, 'web-0', 9000).meta, defaultMeta('all-unauthenticated'));
    assert.deepStrictEqual(index.ports(NS, 'web-0'), [8080, 8081, 9000]);
  });

  it('the oldest Server wins an overlap, then the name; bindings() reports the losers', () => {
    const index = mkIndex([
      mkPod('web-0'),
      mkServer('a-new', { creationTimestamp: '2024-06-01T00:00:00Z', accessPolicy: 'audit' }),
      mkServer('b-old', { creationTimestamp: '2024-01-01T00:00:00Z' }),
      mkServer('c-old', { creationTimestamp: '2024-01-01T00:00:00Z', accessPolicy: 'audit' }),
    ]);
    assert.deepStrictEqual(index.bindings(NS, 'web-0'), [{ port: 8080, server: 'b-old', losers: ['c-old', 'a-new'] }]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('b-old', []));
  });

  it('a Server without creationTimestamp sorts first', () => {
    const index = mkIndex([mkPod('web-0'), mkServer('a', { creationTimestamp: '2024-01-01T00:00:00Z' }), mkServer('z')]);
    assert.deepStrictEqual(index.bindings(NS, 'web-0'), [{ port: 8080, server: 'z', losers: ['a'] }]);
  });

  it('an externalWorkloadSelector never binds pods', () => {
    const index = mkIndex([mkPod('web-0'), mkServer('ext', { externalWorkloadSelector: {} })]);
    assert.deepStrictEqual(index.bindings(NS, 'web-0'), []);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), defaultServer('all-unauthenticated', detect(DEFAULT_ROUTE)));
  });

  it('a Server in another namespace or with a non-matching selector does not bind', () => {
    const other = { ...mkServer('web'), metadata: meta('web', { namespace: 'other' }) };
    const index = mkIndex([mkPod('web-0'), other, mkServer('db', { selector: { matchLabels: { app: 'db' } } })]);
    assert.deepStrictEqual(index.bindings(NS, 'web-0'), []);
  });

  it('unmeshed pods are not indexed until they get the control-plane label', () => {
    const index = mkIndex([mkPod('web-0', { meshed: false }), mkServer('web')]);
    assert.equal(index.lookup(NS, 'web-0', 8080), undefined);
    assert.deepStrictEqual(index.pods(), []);
    assert.deepStrictEqual(
      index.unmeshedPods().map((p) => p.metadata.name),
      ['web-0'],
    );
    index.apply(mkPod('web-0'));
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('web', []));
    assert.deepStrictEqual(index.unmeshedPods(), []);
    index.apply(mkPod('web-0', { meshed: false }));
    assert.equal(index.lookup(NS, 'web-0', 8080), undefined);
  });

  it('an unknown namespace or pod is not found', () => {
    const index = mkIndex([mkPod('web-0')]);
    assert.equal(index.lookup('nope', 'web-0', 8080), undefined);
    assert.equal(index.lookup(NS, 'web-1', 8080), undefined);
    assert.deepStrictEqual(index.ports(NS, 'web-1'), []);
  });
});

describe('PolicyIndex Server authorizations', () => {
  const office = net('10.1.0.0/16', '10.1.2.0/24');
  const resources = (): Resource[] => [
    mkPod('web-0'),
    mkServer('web', { accessPolicy: 'audit', labels: { tier: 'front' } }),
    mkServer('other', { port: 9090 }),
    // Namespace-level policies come after Server-level ones whatever their name.
    mkAuthorizationPolicy('0-everyone-in-ns', { kind: 'Namespace', name: NS }, [{ kind: 'ServiceAccount', name: 'prom', namespace: 'monitoring' }]),
    mkAuthorizationPolicy('a-ap', serverRef('web')),
    mkServerAuthorization('b-saz', { name: 'web' }, { unauthenticated: true }),
    mkAuthorizationPolicy('c-ap', serverRef('web'), [
      { group: POLICY_GROUP, kind: 'NetworkAuthentication', name: 'office' },
      { group: POLICY_GROUP, kind: 'MeshTLSAuthentication', name: 'clients' },
    ]),
    mkServerAuthorization(
      'd-saz-selector',
      { selector: { matchLabels: { tier: 'front' } } },
      {
        unauthenticated: false,
        networks: [office],
        meshTLS: { unauthenticatedTLS: false, serviceAccounts: [{ name: 'web' }, { name: 'gw', namespace: 'ingress' }] },
      },
    ),
    mkAuthorizationPolicy('e-dropped', serverRef('web'), [{ group: POLICY_GROUP, kind: 'MeshTLSAuthentication', name: 'missing' }]),
    mkAuthorizationPolicy('f-cross-ns', serverRef('web'), [
      { group: POLICY_GROUP, kind: 'MeshTLSAuthentication', name: 'shared-clients', namespace: 'shared' },
    ]),
    mkServerAuthorization('g-saz-other', { name: 'other' }, { unauthenticated: false, meshTLS: { unauthenticatedTLS: true } }),
    mkNetworkAuthentication('office', [office]),
    mkMeshTLS('clients', ['*.app.serviceaccount.identity.linkerd.cluster.local', sa('web')]),
    mkMeshTLS('shared-clients', [sa('batch', 'shared')], 'shared'),
  ];

  it('orders Server-level authorizations by name, then Namespace-level, then accessPolicy; drops unresolved ones', () => {
    const index = mkIndex(resources());
    assert.deepStrictEqual(
      policyOf(index, 'web-0', 8080),
      serverValue('web', [
        apAuthz('a-ap'),
        // A ServerAuthorization without networks gets the cluster networks.
        sazAuthz('b-saz', CLUSTER, UNAUTHENTICATED),
        apAuthz('c-ap', [office], {
          kind: 'tlsAuthenticated',
          identities: [sa('web')],
          suffixes: [['app', 'serviceaccount', 'identity', 'linkerd', 'cluster', 'local']],
        }),
        sazAuthz('d-saz-selector', [office], ids(sa('web'), sa('gw', 'ingress'))),
        apAuthz('f-cross-ns', ALL, ids(sa('batch', 'shared'))),
        apAuthz('0-everyone-in-ns', ALL, ids(sa('prom', 'monitoring'))),
        ...DEFAULT_AUTHZ.audit,
      ]),
    );
    assert.deepStrictEqual(
      policyOf(index, 'web-0', 9090),
      serverValue('other', [sazAuthz('g-saz-other', CLUSTER, { kind: 'tlsUnauthenticated' }), apAuthz('0-everyone-in-ns', ALL, ids(sa('prom', 'monitoring')))]),
    );
  });

  it('a cross-namespace authentication appearing later republishes the policy; deleting it drops the policy again', () => {
    const index = mkIndex(resources().filter((r) => r.metadata.name !== 'shared-clients'));
    const names = () => policyOf(index, 'web-0', 8080).authorizations.map((a) => a.meta.name);
    assert.deepStrictEqual(names(), ['a-ap', 'b-saz', 'c-ap', 'd-saz-selector', '0-everyone-in-ns', 'audit']);
    const { cell, seen } = watch(index, 'web-0', 8080);
    index.apply(mkMeshTLS('shared-clients', [sa('batch', 'shared')], 'shared'));
    assert.deepStrictEqual(names(), ['a-ap', 'b-saz', 'c-ap', 'd-saz-selector', 'f-cross-ns', '0-everyone-in-ns', 'audit']);
    assert.equal(seen.length, 1);
    assert.equal(cell.version, 2);
    index.delete({ kind: 'MeshTLSAuthentication', group: '', namespace: 'shared', name: 'shared-clients' });
    assert.deepStrictEqual(names(), ['a-ap', 'b-saz', 'c-ap', 'd-saz-selector', '0-everyone-in-ns', 'audit']);
    assert.equal(seen.length, 2);
  });

  it('Namespace-targeted policies do not apply to ports without a Server', () => {
    const index = mkIndex([mkPod('web-0'), mkAuthorizationPolicy('ns-wide', { kind: 'Namespace', name: NS })], { defaultPolicy: 'deny' });
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), defaultServer('deny', detect(DEFAULT_ROUTE)));
  });
});

describe('PolicyIndex routes', () => {
  it('an attached HTTPRoute replaces the default and probe routes; route policies attach by group, kind and name', () => {
    const index = mkIndex([
      mkPod('web-0', { containers: [PROBED_CONTAINER] }),
      mkServer('web'),
      mkHttpRoute('api', [toServer('web')]),
      mkHttpRoute('gw', [toServer('web')], { group: GATEWAY_GROUP }),
      mkAuthorizationPolicy('p-api', { group: POLICY_GROUP, kind: 'HTTPRoute', name: 'api' }),
      mkAuthorizationPolicy('g-gw', { group: GATEWAY_GROUP, kind: 'httproute', name: 'GW' }),
      // Same name, wrong group: attaches to nothing.
      mkAuthorizationPolicy('p-gw', { group: POLICY_GROUP, kind: 'HTTPRoute', name: 'gw' }),
      mkAuthorizationPolicy('g-api', { group: GATEWAY_GROUP, kind: 'HTTPRoute', name: 'api' }),
    ]);
    assert.deepStrictEqual(
      policyOf(index, 'web-0', 8080),
      serverValue('web', [], detect(httpRoute('api', [apAuthz('p-api')]), httpRoute('gw', [apAuthz('g-gw')], { group: GATEWAY_GROUP }))),
    );
  });

  it('orders routes by creationTimestamp, then name; timestamp-less routes last', () => {
    const index = mkIndex([
      mkPod('web-0'),
      mkServer('web'),
      mkHttpRoute('d', [toServer('web')]),
      mkHttpRoute('c', [toServer('web')]),
      mkHttpRoute('a', [toServer('web')], { creationTimestamp: '2024-02-01T00:00:00Z' }),
      mkHttpRoute('e', [toServer('web')], { creationTimestamp: '2024-01-01T00:00:00Z' }),
      mkHttpRoute('b', [toServer('web')], { creationTimestamp: '2024-01-01T00:00:00Z' }),
    ]);
    const p = policyOf(index, 'web-0', 8080).protocol;
    assert.equal(p.kind, 'detect');
    assert.deepStrictEqual(p.kind === 'detect' ? p.httpRoutes.map((r) => r.meta.name) : [], ['b', 'e', 'a', 'c', 'd']);
  });

  it('a GRPCRoute wins the Server: the HTTPRoute is RouteReasonConflicted and the gRPC Server uses gRPC routes', () => {
    const index = mkIndex([
      mkPod('web-0'),
      mkServer('grpc', { proxyProtocol: 'gRPC' }),
      mkGrpcRoute('svc', [toServer('grpc')]),
      mkHttpRoute('h', [toServer('grpc')]),
      mkAuthorizationPolicy('svc-callers', { group: GATEWAY_GROUP, kind: 'GRPCRoute', name: 'svc' }),
    ]);
    assert.deepStrictEqual(
      index.routeStatus(NS),
      new Map([
        ['GRPCRoute/svc', [{ server: 'grpc', accepted: true, reason: 'Accepted' }]],
        ['HTTPRoute/policy.linkerd.io/h', [{ server: 'grpc', accepted: false, reason: 'RouteReasonConflicted' }]],
      ]),
    );
    const grpcRoute: GrpcRoute = {
      meta: { group: GATEWAY_GROUP, kind: 'GRPCRoute', name: 'svc' },
      hosts: [],
      authorizations: [apAuthz('svc-callers')],
      rules: [{ matches: [{ rpc: { service: 'pkg.Svc', method: 'Call' }, headers: [] }], filters: [] }],
    };
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('grpc', [], { kind: 'grpc', routes: [grpcRoute] }));
  });

  it('a gRPC Server without GRPCRoutes gets the default gRPC route and no probe route', () => {
    const index = mkIndex([mkPod('web-0', { containers: [PROBED_CONTAINER] }), mkServer('grpc', { proxyProtocol: 'gRPC' })]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('grpc', [], { kind: 'grpc', routes: [DEFAULT_GRPC_ROUTE] }));
  });

  it('HTTP/1, HTTP/2, opaque and TLS Servers', () => {
    const index = mkIndex([
      mkPod('web-0', { containers: [PROBED_CONTAINER] }),
      mkServer('h1', { port: 8080, proxyProtocol: 'HTTP/1' }),
      mkServer('h2', { port: 8081, proxyProtocol: 'HTTP/2' }),
      mkServer('op', { port: 8082, proxyProtocol: 'opaque' }),
      mkServer('tls', { port: 8083, proxyProtocol: 'TLS' }),
    ]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('h1', [], { kind: 'http1', routes: [DEFAULT_ROUTE, probeRoute('/live', '/ready')] }));
    assert.deepStrictEqual(policyOf(index, 'web-0', 8081), serverValue('h2', [], { kind: 'http2', routes: [DEFAULT_ROUTE] }));
    assert.deepStrictEqual(policyOf(index, 'web-0', 8082), serverValue('op', [], { kind: 'opaque' }));
    assert.deepStrictEqual(policyOf(index, 'web-0', 8083), serverValue('tls', [], { kind: 'tls' }));
  });

  it('a Server parentRef with port, sectionName or another namespace makes the route ignored', () => {
    const index = mkIndex([
      mkPod('web-0'),
      mkServer('web'),
      mkHttpRoute('with-port', [{ ...toServer('web'), port: 8080 }]),
      mkHttpRoute('with-section', [{ ...toServer('web'), sectionName: 'http' }]),
      mkHttpRoute('other-ns', [toServer('web'), { ...toServer('web'), namespace: 'other' }]),
      mkHttpRoute('same-ns', [{ ...toServer('web'), namespace: NS }]),
    ]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('web', [], detect(httpRoute('same-ns'))));
    assert.deepStrictEqual(
      index
        .ignored(NS)
        .map((i) => i.resource.metadata.name)
        .sort(),
      ['other-ns', 'with-port', 'with-section'],
    );
    assert.deepStrictEqual([...index.routeStatus(NS).keys()], ['HTTPRoute/policy.linkerd.io/same-ns']);
  });

  it('a route whose Server does not exist is NoMatchingParent, and attaches once the Server appears', () => {
    const index = mkIndex([mkPod('web-0'), mkHttpRoute('api', [toServer('web')])]);
    assert.deepStrictEqual(index.routeStatus(NS).get('HTTPRoute/policy.linkerd.io/api'), [{ server: 'web', accepted: false, reason: 'NoMatchingParent' }]);
    index.apply(mkServer('web'));
    assert.deepStrictEqual(index.routeStatus(NS).get('HTTPRoute/policy.linkerd.io/api'), [{ server: 'web', accepted: true, reason: 'Accepted' }]);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('web', [], detect(httpRoute('api'))));
  });

  it('deleting an HTTPRoute by group keeps the other group', () => {
    const index = mkIndex([
      mkPod('web-0'),
      mkServer('web'),
      mkHttpRoute('api', [toServer('web')]),
      mkHttpRoute('api', [toServer('web')], { group: GATEWAY_GROUP }),
    ]);
    index.delete({ kind: 'HTTPRoute', group: POLICY_GROUP, namespace: NS, name: 'api' });
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('web', [], detect(httpRoute('api', [], { group: GATEWAY_GROUP }))));
  });
});

describe('PolicyIndex incremental updates', () => {
  const base = (): Resource[] => [
    mkPod('web-0'),
    mkPod('db-0', { labels: { app: 'db' }, containers: [{ name: 'db', ports: [{ containerPort: 5432 }] }] }),
    mkServer('web'),
    mkServer('db', { port: 5432, selector: { matchLabels: { app: 'db' } } }),
    mkAuthorizationPolicy('allow-web', serverRef('web')),
  ];

  it('re-applying identical resources publishes nothing', () => {
    const index = mkIndex(base());
    const web = watch(index, 'web-0', 8080);
    const db = watch(index, 'db-0', 5432);
    index.update((tx) => {
      for (const r of base()) tx.apply(r);
    });
    assert.deepStrictEqual([web.seen, db.seen], [[], []]);
    assert.deepStrictEqual([web.cell.version, db.cell.version], [1, 1]);
  });

  it('changing a policy republishes only the ports bound to its Server', () => {
    const index = mkIndex(base());
    const web = watch(index, 'web-0', 8080);
    const webDefault = watch(index, 'web-0', 9090);
    const db = watch(index, 'db-0', 5432);
    index.apply(mkAuthorizationPolicy('allow-web', serverRef('web'), [{ kind: 'ServiceAccount', name: 'client' }]));
    const expected = serverValue('web', [apAuthz('allow-web', ALL, ids(sa('client')))]);
    assert.deepStrictEqual(web.seen, [expected]);
    assert.equal(web.cell.version, 2);
    assert.deepStrictEqual(web.cell.value, expected);
    assert.deepStrictEqual([webDefault.seen, db.seen], [[], []]);
    assert.deepStrictEqual([webDefault.cell.version, db.cell.version], [1, 1]);
  });

  it('deleting a Server returns its ports to the default policy', () => {
    const index = mkIndex(base(), { defaultPolicy: 'cluster-unauthenticated' });
    const web = watch(index, 'web-0', 8080);
    index.delete({ kind: 'Server', group: '', namespace: NS, name: 'web' });
    const expected = defaultServer('cluster-unauthenticated', detect(DEFAULT_ROUTE));
    assert.deepStrictEqual(web.seen, [expected]);
    assert.deepStrictEqual(index.bindings(NS, 'web-0'), []);
    assert.equal(index.lookup(NS, 'web-0', 8080), web.cell, 'the cell survives');
  });

  it('reset() removes what is missing and keeps the cells of surviving pods', () => {
    const index = mkIndex([...base(), mkPod('web-1')]);
    const web = watch(index, 'web-0', 8080);
    const db = watch(index, 'db-0', 5432);
    index.reset([mkPod('web-0'), mkPod('db-0', { labels: { app: 'db' }, containers: [{ name: 'db', ports: [{ containerPort: 5432 }] }] }), mkServer('web')]);
    assert.equal(index.lookup(NS, 'web-0', 8080), web.cell);
    assert.deepStrictEqual(web.seen, [serverValue('web', [])], 'allow-web is gone');
    // Server db is gone: its port falls back to the default policy.
    assert.deepStrictEqual(db.seen, [defaultServer('all-unauthenticated', detect(DEFAULT_ROUTE))]);
    assert.equal(index.lookup(NS, 'web-1', 8080), undefined);
    assert.deepStrictEqual(
      index
        .pods()
        .map((p) => p.name)
        .sort(),
      ['db-0', 'web-0'],
    );
  });

  it('an update that fails conversion keeps the previous version in force and is reported as ignored', () => {
    const index = mkIndex(base());
    const web = watch(index, 'web-0', 8080);
    const invalid = mkAuthorizationPolicy('allow-web', { group: 'apps', kind: 'Deployment', name: 'web' });
    index.apply(invalid);
    assert.deepStrictEqual(web.seen, []);
    assert.deepStrictEqual(web.cell.value, serverValue('web', [apAuthz('allow-web')]));
    assert.deepStrictEqual(index.ignored(NS), [
      { resource: invalid, reason: 'targetRef apps/Deployment web is not a supported target; the previous version stays in force' },
    ]);
    // A valid update replaces it and clears the report.
    index.apply(mkAuthorizationPolicy('allow-web', serverRef('web'), [{ kind: 'ServiceAccount', name: 'client' }]));
    assert.deepStrictEqual(web.seen, [serverValue('web', [apAuthz('allow-web', ALL, ids(sa('client')))])]);
    assert.deepStrictEqual(index.ignored(NS), []);
  });

  it('an invalid new object is ignored: it grants nothing', () => {
    const index = mkIndex(base());
    const invalid = mkAuthorizationPolicy('bad', { group: 'apps', kind: 'Deployment', name: 'web' });
    index.apply(invalid);
    assert.deepStrictEqual(policyOf(index, 'web-0', 8080), serverValue('web', [apAuthz('allow-web')]));
    assert.deepStrictEqual(index.ignored(NS), [{ resource: invalid, reason: 'targetRef apps/Deployment web is not a supported target' }]);
  });

  it('looking up an undeclared port synthesizes a default server and keeps it', () => {
    const index = mkIndex(base());
    assert.deepStrictEqual(index.ports(NS, 'web-0'), [8080]);
    const cell = index.lookup(NS, 'web-0', 7000);
    assert.ok(cell !== undefined);
    assert.deepStrictEqual(cell.value, defaultServer('all-unauthenticated', detect(DEFAULT_ROUTE)));
    assert.deepStrictEqual(index.ports(NS, 'web-0'), [7000, 8080]);
    assert.equal(index.lookup(NS, 'web-0', 7000), cell);
    // The kept cell follows later changes: a Server binding the port republishes it.
    const seen: InboundServer[] = [];
    cell.subscribe((v) => seen.push(v));
    index.apply(mkServer('admin', { port: 7000 }));
    assert.deepStrictEqual(seen, [serverValue('admin', [])]);
  });

  it('a pod annotation change republishes its default ports', () => {
    const index = mkIndex([mkPod('web-0')]);
    const web = watch(index, 'web-0', 8080);
    index.apply(mkPod('web-0', { annotations: { [POLICY_ANNOTATION]: 'deny' } }));
    assert.deepStrictEqual(web.seen, [defaultServer('deny', detect(DEFAULT_ROUTE))]);
  });

  it('unsubscribing stops notifications', () => {
    const index = mkIndex(base());
    const cell = index.lookup(NS, 'web-0', 8080);
    assert.ok(cell !== undefined);
    let calls = 0;
    const off = cell.subscribe(() => calls++);
    assert.equal(cell.subscriberCount, 1);
    off();
    index.delete({ kind: 'AuthorizationPolicy', group: '', namespace: NS, name: 'allow-web' });
    assert.equal(calls, 0);
    assert.equal(cell.version, 2);
  });
});

describe('PolicyIndex cell lifetime and reads', () => {
  it('deleting a pod closes its cells: watchers are told once, and a re-created pod gets fresh cells', () => {
    const index = mkIndex([mkPod('web-0')]);
    const cell = index.lookup(NS, 'web-0', 8080);
    assert.ok(cell !== undefined);
    let closes = 0;
    const values: InboundServer[] = [];
    cell.subscribe(
      (v) => values.push(v),
      () => closes++,
    );
    index.delete({ kind: 'Pod', group: '', namespace: NS, name: 'web-0' });
    assert.equal(closes, 1);
    assert.equal(cell.closed, true);
    assert.equal(cell.subscriberCount, 0);
    assert.equal(index.lookup(NS, 'web-0', 8080), undefined);
    index.apply(mkPod('web-0'));
    const fresh = index.lookup(NS, 'web-0', 8080);
    assert.ok(fresh !== undefined && fresh !== cell && !fresh.closed);
    // The old cell never publishes again, and late subscribers hear about the close at once.
    index.apply(mkServer('web', { port: 8080 }));
    assert.deepEqual(values, []);
    let late = 0;
    cell.subscribe(
      () => {},
      () => late++,
    );
    assert.equal(late, 1);
  });

  it('peek reads a port without creating a cell, so ports() is unchanged', () => {
    const index = mkIndex([mkPod('web-0')]);
    const before = index.ports(NS, 'web-0');
    const v = index.peek(NS, 'web-0', 7777);
    assert.equal(v?.value.meta.kind, 'default');
    assert.deepEqual(index.ports(NS, 'web-0'), before);
    assert.equal(index.peek(NS, 'ghost', 80), undefined);
    // An existing cell is what peek returns.
    assert.equal(index.peek(NS, 'web-0', 8080), index.lookup(NS, 'web-0', 8080));
  });
});
