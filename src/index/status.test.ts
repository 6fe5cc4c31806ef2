import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GATEWAY_GROUP, POLICY_GROUP } from '../core/index.js';
import type {
  AuthorizationPolicy,
  GRPCRoute,
  HTTPRoute,
  MeshTLSAuthentication,
  NamespacedTargetRef,
  ParentRef,
  Pod,
  Resource,
  Server,
  ServerAuthorization,
} from '../manifest/index.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';
import { POLICY_CONTROLLER_NAME, PolicyStatusView, type ServiceLookup } from './status.js';

const NS = 'app';
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const meta = (name: string, o: { namespace?: string; labels?: Record<string, string>; creationTimestamp?: string } = {}) => ({
  namespace: o.namespace ?? NS,
  name,
  labels: o.labels ?? {},
  annotations: {},
  ...(o.creationTimestamp !== undefined ? { creationTimestamp: o.creationTimestamp } : {}),
});

function mkPod(name: string, labels: Record<string, string> = { app: 'web' }): Pod {
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: meta(name, { labels: { ...labels, 'linkerd.io/control-plane-ns': 'linkerd' } }),
    spec: {
      containers: [
        {
          name: 'app',
          ports: [
            { name: 'http', containerPort: 8080 },
            { name: 'admin', containerPort: 9990 },
          ],
        },
      ],
    },
  };
}

function mkServer(name: string, o: { port?: number | string; app?: string; creationTimestamp?: string; labels?: Record<string, string> } = {}): Server {
  return {
    kind: 'Server',
    apiVersion: 'policy.linkerd.io/v1beta3',
    metadata: meta(name, {
      ...(o.creationTimestamp !== undefined ? { creationTimestamp: o.creationTimestamp } : {}),
      ...(o.labels !== undefined ? { labels: o.labels } : {}),
    }),
    spec: { podSelector: { matchLabels: { app: o.app ?? 'web' } }, port: o.port ?? 8080, proxyProtocol: 'unknown' },
  };
}

function mkAp(name: string, target: { kind: string; name: string; group?: string }, refs: NamespacedTargetRef[] = []): AuthorizationPolicy {
  const group = target.group ?? (target.kind === 'Namespace' ? '' : POLICY_GROUP);
  return {
    kind: 'AuthorizationPolicy',
    apiVersion: 'policy.linkerd.io/v1alpha1',
    metadata: meta(name),
    spec: { targetRef: { group, kind: target.kind, name: target.name }, requiredAuthenticationRefs: refs },
  };
}

function mkMeshTLS(name: string, identities: string[], namespace = NS): MeshTLSAuthentication {
  return { kind: 'MeshTLSAuthentication', apiVersion: 'policy.linkerd.io/v1alpha1', metadata: meta(name, { namespace }), spec: { identities } };
}

function mkSaz(name: string, server: ServerAuthorization['spec']['server']): ServerAuthorization {
  return {
    kind: 'ServerAuthorization',
    apiVersion: 'policy.linkerd.io/v1beta1',
    metadata: meta(name),
    spec: { server, client: { unauthenticated: true } },
  };
}

const toServer = (name: string, namespace?: string): ParentRef => ({ group: POLICY_GROUP, kind: 'Server', name, ...(namespace ? { namespace } : {}) });

function mkHttpRoute(
  name: string,
  parentRefs: ParentRef[],
  o: { group?: string; backends?: { name: string; kind?: string; group?: string }[] } = {},
): HTTPRoute {
  const group = o.group ?? POLICY_GROUP;
  return {
    kind: 'HTTPRoute',
    apiVersion: `${group}/${group === POLICY_GROUP ? 'v1beta3' : 'v1'}`,
    metadata: meta(name),
    spec: { group, parentRefs, hostnames: [], rules: [{ matches: [{ path: { type: 'PathPrefix', value: '/' } }], backendRefs: o.backends ?? [] }] },
  };
}

function mkGrpcRoute(name: string, parentRefs: ParentRef[]): GRPCRoute {
  return { kind: 'GRPCRoute', apiVersion: `${GATEWAY_GROUP}/v1`, metadata: meta(name), spec: { group: GATEWAY_GROUP, parentRefs, hostnames: [], rules: [{}] } };
}

function view(resources: Resource[], services: ServiceLookup = () => undefined): PolicyStatusView {
  const index = new PolicyIndex(CONFIG);
  index.reset(resources);
  return new PolicyStatusView(index, services);
}

const accepted = { type: 'Accepted', status: 'True', reason: 'Accepted', message: '' };
const resolved = { type: 'ResolvedRefs', status: 'True', reason: 'ResolvedRefs', message: '' };

describe('policy object status', () => {
  it('a Server counts the pods it selects and the pod ports it serves', () => {
    const v = view([mkPod('web-0'), mkPod('web-1'), mkPod('db-0', { app: 'db' }), mkServer('web-http', { port: 'http' })]);
    assert.deepEqual(v.policyStatus({ kind: 'Server', namespace: NS, name: 'web-http' }), {
      conditions: [accepted, resolved],
      selectedPods: 2,
      selectedPorts: 2,
    });
  });

  it('a Server that selects no pods, or whose named port no pod has, does not resolve', () => {
    const v = view([mkPod('web-0'), mkServer('none', { app: 'nothing' }), mkServer('grpc', { port: 'grpc' })]);
    assert.deepEqual(v.policyStatus({ kind: 'Server', namespace: NS, name: 'none' })?.conditions[1], {
      type: 'ResolvedRefs',
      status: 'False',
      reason: 'NoMatchingPods',
      message: 'podSelector selects no meshed pods in namespace app',
    });
    assert.deepEqual(v.policyStatus({ kind: 'Server', namespace: NS, name: 'grpc' }), {
      conditions: [accepted, { type: 'ResolvedRefs', status: 'False', reason: 'NoMatchingPort', message: 'no selected pod has a container port named grpc' }],
      selectedPods: 1,
      selectedPorts: 0,
    });
  });

  it('a Server whose every port went to an older Server is not accepted and names the winner', () => {
    const v = view([
      mkPod('web-0'),
      mkServer('old', { port: 8080, creationTimestamp: '2026-01-01T00:00:00Z' }),
      mkServer('new', { port: 'http', creationTimestamp: '2026-02-01T00:00:00Z' }),
    ]);
    assert.deepEqual(v.policyStatus({ kind: 'Server', namespace: NS, name: 'new' }), {
      conditions: [{ type: 'Accepted', status: 'False', reason: 'Conflicted', message: 'every port it selects is served by an older Server (old)' }, resolved],
      selectedPods: 1,
      selectedPorts: 0,
    });
    assert.equal(v.policyStatus({ kind: 'Server', namespace: NS, name: 'old' })?.selectedPorts, 1);
  });

  it('an AuthorizationPolicy on a missing Server names it; its counts follow the Server once it exists', () => {
    const ap = mkAp('allow', { kind: 'Server', name: 'web-http' });
    const before = view([mkPod('web-0'), ap]).policyStatus({ kind: 'AuthorizationPolicy', namespace: NS, name: 'allow' });
    assert.deepEqual(before, {
      conditions: [accepted, { type: 'ResolvedRefs', status: 'False', reason: 'TargetNotFound', message: 'Server web-http not found in namespace app' }],
      selectedPods: 0,
      selectedPorts: 0,
    });
    const after = view([mkPod('web-0'), mkPod('web-1'), mkServer('web-http'), ap]).policyStatus({ kind: 'AuthorizationPolicy', namespace: NS, name: 'allow' });
    assert.deepEqual(after, { conditions: [accepted, resolved], selectedPods: 2, selectedPorts: 2 });
  });

  it('an unresolved authentication says the policy fails closed, and lists every problem', () => {
    const ap = mkAp('allow', { kind: 'Server', name: 'missing' }, [{ group: POLICY_GROUP, kind: 'MeshTLSAuthentication', name: 'clients' }]);
    const st = view([ap]).policyStatus({ kind: 'AuthorizationPolicy', namespace: NS, name: 'allow' });
    assert.deepEqual(st?.conditions[1], {
      type: 'ResolvedRefs',
      status: 'False',
      reason: 'TargetNotFound',
      message: 'Server missing not found in namespace app; MeshTLSAuthentication app/clients not found or invalid; the policy authorizes nothing (fail closed)',
    });
  });

  it('a namespace-wide policy covers every Server-bound pod port of the namespace', () => {
    const v = view([
      mkPod('web-0'),
      mkPod('db-0', { app: 'db' }),
      mkServer('web-http'),
      mkServer('db-admin', { app: 'db', port: 9990 }),
      mkAp('ns-wide', { kind: 'Namespace', name: NS }),
    ]);
    assert.deepEqual(v.policyStatus({ kind: 'AuthorizationPolicy', namespace: NS, name: 'ns-wide' }), {
      conditions: [accepted, resolved],
      selectedPods: 2,
      selectedPorts: 2,
    });
  });

  it('a route-targeted policy covers the Servers that accepted the route', () => {
    const v = view([mkPod('web-0'), mkServer('web-http'), mkHttpRoute('r', [toServer('web-http')]), mkAp('on-route', { kind: 'HTTPRoute', name: 'r' })]);
    assert.deepEqual(v.policyStatus({ kind: 'AuthorizationPolicy', namespace: NS, name: 'on-route' }), {
      conditions: [accepted, resolved],
      selectedPods: 1,
      selectedPorts: 1,
    });
  });

  it('an invalid policy is not accepted and says why', () => {
    const bad = mkAp('bad', { kind: 'Pod', name: 'x', group: '' });
    assert.deepEqual(view([bad]).policyStatus({ kind: 'AuthorizationPolicy', namespace: NS, name: 'bad' }), {
      conditions: [
        { type: 'Accepted', status: 'False', reason: 'Invalid', message: 'targetRef Pod x is not a supported target' },
        { type: 'ResolvedRefs', status: 'Unknown', reason: 'Invalid', message: 'not evaluated: the object is invalid' },
      ],
      selectedPods: 0,
      selectedPorts: 0,
    });
  });

  it('an authentication counts the pod ports of the policies that require it, across namespaces', () => {
    const ap = mkAp('allow', { kind: 'Server', name: 'web-http' }, [
      { group: POLICY_GROUP, kind: 'MeshTLSAuthentication', name: 'clients', namespace: 'shared' },
    ]);
    const v = view([mkPod('web-0'), mkServer('web-http'), ap, mkMeshTLS('clients', ['*'], 'shared'), mkMeshTLS('unused', ['*'], 'shared')]);
    assert.deepEqual(v.policyStatus({ kind: 'MeshTLSAuthentication', namespace: 'shared', name: 'clients' }), {
      conditions: [accepted, resolved],
      selectedPods: 1,
      selectedPorts: 1,
    });
    assert.equal(v.policyStatus({ kind: 'MeshTLSAuthentication', namespace: 'shared', name: 'unused' })?.selectedPorts, 0);
    assert.deepEqual(v.policyStatus({ kind: 'AuthorizationPolicy', namespace: NS, name: 'allow' })?.conditions[1], resolved);
  });

  it('a ServerAuthorization by selector resolves to the Servers it matches', () => {
    const v = view([
      mkPod('web-0'),
      mkServer('web-http', { labels: { tier: 'front' } }),
      mkSaz('by-label', { selector: { matchLabels: { tier: 'front' } } }),
      mkSaz('by-name', { name: 'gone' }),
    ]);
    assert.deepEqual(v.policyStatus({ kind: 'ServerAuthorization', namespace: NS, name: 'by-label' }), {
      conditions: [accepted, resolved],
      selectedPods: 1,
      selectedPorts: 1,
    });
    assert.deepEqual(v.policyStatus({ kind: 'ServerAuthorization', namespace: NS, name: 'by-name' })?.conditions[1], {
      type: 'ResolvedRefs',
      status: 'False',
      reason: 'TargetNotFound',
      message: 'Server gone not found in namespace app',
    });
  });

  it('objects the index does not hold have no status', () => {
    const v = view([mkPod('web-0')]);
    for (const kind of ['Server', 'AuthorizationPolicy', 'ServerAuthorization', 'MeshTLSAuthentication', 'NetworkAuthentication']) {
      assert.equal(v.policyStatus({ kind, namespace: NS, name: 'x' }), undefined, kind);
    }
  });
});

describe('route parent status (as Linkerd writes it)', () => {
  const serverParent = (name: string, conditions: object[]) => ({
    parentRef: { group: POLICY_GROUP, kind: 'Server', namespace: NS, name },
    controllerName: POLICY_CONTROLLER_NAME,
    conditions,
  });

  it('a Server parent gets Accepted only: True when the Server exists, NoMatchingParent when not', () => {
    const v = view([mkServer('web-http'), mkHttpRoute('r', [toServer('web-http'), toServer('gone'), { group: GATEWAY_GROUP, kind: 'Gateway', name: 'gw' }])]);
    assert.deepEqual(v.routeParents({ kind: 'HTTPRoute', group: POLICY_GROUP, namespace: NS, name: 'r' }), [
      serverParent('web-http', [accepted]),
      serverParent('gone', [{ type: 'Accepted', status: 'False', reason: 'NoMatchingParent', message: '' }]),
    ]);
  });

  it('an HTTPRoute sharing a Server parent with a GRPCRoute is conflicted; the GRPCRoute is accepted', () => {
    const v = view([mkServer('grpc'), mkHttpRoute('h', [toServer('grpc')], { group: GATEWAY_GROUP }), mkGrpcRoute('g', [toServer('grpc')])]);
    assert.deepEqual(v.routeParents({ kind: 'HTTPRoute', group: GATEWAY_GROUP, namespace: NS, name: 'h' }), [
      serverParent('grpc', [{ type: 'Accepted', status: 'False', reason: 'RouteReasonConflicted', message: '' }]),
    ]);
    assert.deepEqual(v.routeParents({ kind: 'GRPCRoute', namespace: NS, name: 'g' }), [serverParent('grpc', [accepted])]);
    assert.equal(v.routeParents({ kind: 'HTTPRoute', group: POLICY_GROUP, namespace: NS, name: 'h' }), undefined, 'groups are distinct routes');
  });

  it('a Service parent gets Accepted and a ResolvedRefs condition for the backends', () => {
    const services: ServiceLookup = (_ns, name) =>
      name === 'web' ? { clusterIP: '10.0.0.7', type: 'ClusterIP' } : name === 'headless' ? { clusterIP: 'None' } : undefined;
    const svc = (name: string, port?: number): ParentRef => ({ group: 'core', kind: 'Service', name, ...(port ? { port } : {}) });
    const v = view(
      [
        mkHttpRoute('ok', [svc('web', 80)], { backends: [{ name: 'web' }] }),
        mkHttpRoute('missing-backend', [svc('web')], { backends: [{ name: 'web' }, { name: 'gone' }] }),
        mkHttpRoute('bad-kind', [svc('headless'), svc('nothing')], { backends: [{ name: 'x', kind: 'Pod' }] }),
      ],
      services,
    );
    const parent = (name: string, conditions: object[], port?: number) => ({
      parentRef: { group: 'core', kind: 'Service', namespace: NS, name, ...(port ? { port } : {}) },
      controllerName: POLICY_CONTROLLER_NAME,
      conditions,
    });
    assert.deepEqual(v.routeParents({ kind: 'HTTPRoute', group: POLICY_GROUP, namespace: NS, name: 'ok' }), [parent('web', [accepted, resolved], 80)]);
    assert.deepEqual(v.routeParents({ kind: 'HTTPRoute', group: POLICY_GROUP, namespace: NS, name: 'missing-backend' }), [
      parent('web', [accepted, { type: 'ResolvedRefs', status: 'False', reason: 'BackendNotFound', message: '' }]),
    ]);
    const invalidKind = { type: 'ResolvedRefs', status: 'False', reason: 'InvalidKind', message: '' };
    assert.deepEqual(v.routeParents({ kind: 'HTTPRoute', group: POLICY_GROUP, namespace: NS, name: 'bad-kind' }), [
      parent('headless', [{ type: 'Accepted', status: 'False', reason: 'NoMatchingParent', message: 'parent service must have a ClusterIP' }, invalidKind]),
      parent('nothing', [{ type: 'Accepted', status: 'False', reason: 'NoMatchingParent', message: '' }, invalidKind]),
    ]);
  });
});
