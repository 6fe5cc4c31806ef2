import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseCidr } from '../core/index.js';
import { decodeResource, parseManifestText, type Resource } from '../manifest/index.js';
import { authzView } from './authz-view.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';
import { type PolicyTargetsResult, policyKindOf, policyTargetsView } from './policy-targets.js';
import { QueryError } from './query-error.js';
import { parseResourceArg } from './targets.js';

const net = (cidr: string) => ({ net: parseCidr(cidr)!, except: [] });
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [net('10.0.0.0/8')],
  probeNetworks: [net('0.0.0.0/0')],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

// === fixtures: one namespace with each way a policy object reaches (or misses) a port ===

function mkPod(name: string, labels: string, ports: string, owner = ''): string {
  return `apiVersion: v1
kind: Pod
metadata:
  namespace: app
  name: ${name}
  labels: {${labels}, linkerd.io/control-plane-ns: linkerd}
spec:
  containers:
  - name: app
    ports: [${ports}]
${owner}`;
}

function mkServer(name: string, selector: string, port: string, protocol = 'HTTP/1', ts = '2026-01-01T00:00:00Z'): string {
  return `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {namespace: app, name: ${name}, labels: {tier: ${name}}, creationTimestamp: "${ts}"}
spec:
  podSelector: {matchLabels: {${selector}}}
  port: ${port}
  proxyProtocol: ${protocol}
`;
}

function mkAp(name: string, target: string, refs = '[]'): string {
  return `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {namespace: app, name: ${name}}
spec:
  targetRef: {${target}}
  requiredAuthenticationRefs: ${refs}
`;
}

const DOCS = [
  mkPod('web-0', 'app: web', '{name: http, containerPort: 8080}, {name: admin, containerPort: 9990}'),
  mkPod('web-1', 'app: web', '{name: http, containerPort: 8080}, {name: admin, containerPort: 9990}'),
  mkPod('api-0', 'app: api', '{name: grpc, containerPort: 9000}'),
  mkServer('web-http', 'app: web', 'http'),
  // Older Server on the same port: it wins, web-http-2 loses.
  mkServer('web-admin', 'app: web', '9990', 'HTTP/1', '2025-01-01T00:00:00Z'),
  mkServer('web-admin-2', 'app: web', '9990'),
  // A port name no container declares.
  mkServer('web-metrics', 'app: web', 'metrics'),
  mkServer('api-grpc', 'app: api', 'grpc', 'gRPC'),
  `apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {namespace: app, name: web-api}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-http}]
  rules: [{matches: [{path: {type: PathPrefix, value: /api}}]}]
`,
  `apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {namespace: app, name: orphan}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: nope}]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}]}]
`,
  `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {namespace: app, name: api-calls}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: api-grpc}]
  rules: [{matches: [{method: {service: api.Api}}]}]
`,
  `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {namespace: app, name: clients}
spec:
  identities: ["*.app.serviceaccount.identity.linkerd.cluster.local"]
`,
  `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {namespace: app, name: unused}
spec:
  identities: ["x.app.serviceaccount.identity.linkerd.cluster.local"]
`,
  `apiVersion: policy.linkerd.io/v1alpha1
kind: NetworkAuthentication
metadata: {namespace: app, name: office}
spec:
  networks: [{cidr: 192.168.0.0/16, except: [192.168.1.0/24]}]
`,
  mkAp('web-clients', 'group: policy.linkerd.io, kind: Server, name: web-http', '[{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: clients}]'),
  mkAp('api-route', 'group: policy.linkerd.io, kind: HTTPRoute, name: web-api', '[{group: policy.linkerd.io, kind: NetworkAuthentication, name: office}]'),
  mkAp('everything', 'group: core, kind: Namespace, name: app'),
  mkAp('dropped', 'group: policy.linkerd.io, kind: Server, name: web-http', '[{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: missing}]'),
  `apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {namespace: app, name: by-label}
spec:
  server: {selector: {matchLabels: {tier: api-grpc}}}
  client: {meshTLS: {serviceAccounts: [{name: web}]}}
`,
];

function mkView(docs: readonly string[] = DOCS) {
  const loaded = parseManifestText(docs.join('---\n'), 'p.yaml');
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
  return { config: CONFIG, index };
}

const one = (r: PolicyTargetsResult) => {
  assert.equal(r.policies.length, 1);
  return r.policies[0]!;
};
/** Rows as `pod:port server route active`, for exact comparisons. */
const rows = (r: PolicyTargetsResult) =>
  one(r).appliesTo.map((x) => `${x.pod}:${x.port ?? '-'} ${x.server ?? '-'} ${x.route ?? '*'}${x.active ? '' : ` (${x.note})`}`);

describe('policyKindOf', () => {
  it('takes the singular, plural, Linkerd short names and kind.group, and nothing else', () => {
    for (const w of ['server', 'servers', 'srv', 'Server', 'servers.policy.linkerd.io']) assert.equal(policyKindOf(w), 'Server');
    assert.equal(policyKindOf('saz'), 'ServerAuthorization');
    assert.equal(policyKindOf('authorizationpolicies'), 'AuthorizationPolicy');
    assert.equal(policyKindOf('MeshTLSAuthentication'), 'MeshTLSAuthentication');
    assert.equal(policyKindOf('networkauthentications'), 'NetworkAuthentication');
    assert.equal(policyKindOf('httproutes.gateway.networking.k8s.io'), 'HTTPRoute');
    assert.equal(policyKindOf('grpcroute'), 'GRPCRoute');
    for (const w of ['deploy', 'pod', 'ap', 'svc', '']) assert.equal(policyKindOf(w), undefined);
  });
});

describe('policyTargetsView', () => {
  const view = mkView();

  it('a Server: the pods and ports it binds, with its authorizations and routes', () => {
    const r = policyTargetsView(view, 'Server', 'web-http', 'app');
    assert.deepStrictEqual(rows(r), ['web-0:8080 server/web-http *', 'web-1:8080 server/web-http *']);
    const o = one(r);
    assert.equal(o.summary, 'selects pods app=web, port name "http", HTTP/1');
    // In the order the proxy evaluates them: the Server's own, then the namespace's.
    assert.deepStrictEqual(o.authorizations, ['authorizationpolicy/web-clients', 'authorizationpolicy/everything']);
    assert.deepStrictEqual(o.notes, ['routes: httproute/web-api (requests matching no route are denied with 404)']);
    assert.deepStrictEqual(o.appliesTo[0], {
      namespace: 'app',
      pod: 'web-0',
      workload: null,
      port: 8080,
      server: 'server/web-http',
      route: null,
      via: 'podSelector app=web, port name "http"',
      active: true,
    });
  });

  it('a Server that lost the port to an older one, and one naming an undeclared port', () => {
    assert.deepStrictEqual(rows(policyTargetsView(view, 'Server', 'web-admin-2', 'app')), [
      'web-0:9990 server/web-admin * (Server web-admin binds this port instead)',
      'web-1:9990 server/web-admin * (Server web-admin binds this port instead)',
    ]);
    assert.deepStrictEqual(rows(policyTargetsView(view, 'Server', 'web-metrics', 'app')), [
      'web-0:- - * (the pod declares no container port named "metrics")',
      'web-1:- - * (the pod declares no container port named "metrics")',
    ]);
  });

  it('an AuthorizationPolicy: through its Server, its route, or every Server of the namespace', () => {
    const server = policyTargetsView(view, 'AuthorizationPolicy', 'web-clients', 'app');
    assert.deepStrictEqual(rows(server), ['web-0:8080 server/web-http *', 'web-1:8080 server/web-http *']);
    assert.equal(one(server).summary, 'targets Server web-http; requires MeshTLSAuthentication clients');
    assert.equal(one(server).appliesTo[0]?.via, 'AuthorizationPolicy web-clients → Server web-http');
    const route = policyTargetsView(view, 'AuthorizationPolicy', 'api-route', 'app');
    assert.deepStrictEqual(rows(route), ['web-0:8080 server/web-http httproute/web-api', 'web-1:8080 server/web-http httproute/web-api']);
    assert.equal(one(route).appliesTo[0]?.via, 'AuthorizationPolicy api-route → HTTPRoute web-api');
    assert.deepStrictEqual(rows(policyTargetsView(view, 'AuthorizationPolicy', 'everything', 'app')), [
      'api-0:9000 server/api-grpc *',
      'web-0:8080 server/web-http *',
      'web-0:9990 server/web-admin *',
      'web-1:8080 server/web-http *',
      'web-1:9990 server/web-admin *',
    ]);
  });

  it('an AuthorizationPolicy whose authentication is missing applies nowhere, and says why', () => {
    const o = one(policyTargetsView(view, 'AuthorizationPolicy', 'dropped', 'app'));
    assert.deepStrictEqual(o.appliesTo, []);
    assert.deepStrictEqual(o.notes, [
      'it requires MeshTLSAuthentication app/missing, which does not exist (or is invalid): the policy is dropped and grants nothing',
    ]);
  });

  it('an authentication: through the AuthorizationPolicies that require it', () => {
    const o = one(policyTargetsView(view, 'MeshTLSAuthentication', 'clients', 'app'));
    assert.deepStrictEqual(o.usedBy, ['app/web-clients']);
    assert.deepStrictEqual(
      o.appliesTo.map((x) => `${x.pod}:${x.port} ${x.via}`),
      [
        'web-0:8080 MeshTLSAuthentication clients → AuthorizationPolicy web-clients → Server web-http',
        'web-1:8080 MeshTLSAuthentication clients → AuthorizationPolicy web-clients → Server web-http',
      ],
    );
    const netw = one(policyTargetsView(view, 'NetworkAuthentication', 'office', 'app'));
    assert.equal(netw.summary, 'networks 192.168.0.0/16 except 192.168.1.0/24');
    assert.deepStrictEqual(rows({ policies: [netw] }), ['web-0:8080 server/web-http httproute/web-api', 'web-1:8080 server/web-http httproute/web-api']);
    const unused = one(policyTargetsView(view, 'MeshTLSAuthentication', 'unused', 'app'));
    assert.deepStrictEqual([unused.appliesTo, unused.notes], [[], ['no AuthorizationPolicy requires it, so it admits nobody anywhere']]);
  });

  it('a ServerAuthorization selecting Servers by label', () => {
    const o = one(policyTargetsView(view, 'ServerAuthorization', 'by-label', 'app'));
    assert.deepStrictEqual(rows({ policies: [o] }), ['api-0:9000 server/api-grpc *']);
    assert.equal(o.summary, 'authorizes web.app.serviceaccount.identity.linkerd.cluster.local on Servers tier=api-grpc');
  });

  it('routes: where accepted, with their authorizations; an unaccepted parent is a note', () => {
    const web = one(policyTargetsView(view, 'HTTPRoute', 'web-api', 'app'));
    assert.deepStrictEqual(web.authorizations, ['authorizationpolicy/api-route']);
    assert.equal(web.appliesTo.length, 2);
    const orphan = one(policyTargetsView(view, 'HTTPRoute', 'orphan', 'app'));
    assert.deepStrictEqual([orphan.appliesTo, orphan.notes], [[], ['parent Server nope does not exist in namespace app']]);
    assert.deepStrictEqual(rows(policyTargetsView(view, 'GRPCRoute', 'api-calls', 'app')), ['api-0:9000 server/api-grpc grpcroute/api-calls']);
  });

  it('a bare kind lists every object of the kind; all namespaces with undefined', () => {
    assert.deepStrictEqual(
      policyTargetsView(view, 'Server', undefined, 'app').policies.map((p) => p.name),
      ['api-grpc', 'web-admin', 'web-admin-2', 'web-http', 'web-metrics'],
    );
    assert.equal(policyTargetsView(view, 'Server', 'web-http', undefined).policies.length, 1);
  });

  it('not found: a precise message naming what exists, as a not-found query error', () => {
    assert.throws(
      () => policyTargetsView(view, 'Server', 'web', 'app'),
      (e: unknown) =>
        e instanceof QueryError &&
        e.code === 'ERR_QUERY_NOT_FOUND' &&
        e.message === 'Server web not found in namespace app (Servers there: api-grpc, web-admin, web-admin-2, web-http, web-metrics)',
    );
    assert.throws(() => policyTargetsView(view, 'Server', 'web-http', 'default'), /not found in namespace default; -A searches every namespace/);
    assert.throws(() => policyTargetsView(view, 'GRPCRoute', undefined, 'default'), /^QueryError: no GRPCRoutes in namespace default$/);
  });
});

describe('authzView', () => {
  const view = mkView();

  it('answers policy kinds with {policies} and workloads with {pods}', () => {
    const policy = authzView(view, 'srv/web-http', 'app');
    assert.ok('policies' in policy);
    const workload = authzView(view, 'pod/web-0', 'app');
    assert.ok('pods' in workload);
    assert.throws(() => authzView(view, 'server/app/web-http', 'app'), /is not KIND\/NAME/);
  });

  it('a workload query given a policy kind says what it is', () => {
    assert.throws(() => parseResourceArg('server/web'), /"server\/web" is a Server, not a workload/);
    assert.throws(() => parseResourceArg('svc/web'), /unknown resource kind "svc".*policy objects for `ward authz`: server \(srv\)/);
  });
});
