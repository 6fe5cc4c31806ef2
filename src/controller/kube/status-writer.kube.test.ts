import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { type ClusterConfig, PolicyIndex } from '../../index/index.js';
import { customResourceDefinitions, decodeResource, documentFromObject, type Resource } from '../../manifest/index.js';
import { waitFor } from '../../shared/testing/waits.js';
import { KubeApiError, KubeClient, loadKubeconfig } from '../../sources/index.js';
import { describeWithKubeKit, type KubeKit, startKubeKit } from '../../sources/kube/testing/kube-kit.js';
import { LeaderElection } from './leader-election.js';
import { StatusWriter } from './status-writer.js';

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

/** Where the test reads objects from, as the Kubernetes source's reflectors would. */
const COLLECTIONS = [
  '/api/v1/namespaces/app/pods',
  '/api/v1/namespaces/app/services',
  '/apis/policy.linkerd.io/v1beta3/namespaces/app/servers',
  '/apis/policy.linkerd.io/v1alpha1/namespaces/app/authorizationpolicies',
  '/apis/policy.linkerd.io/v1beta3/namespaces/app/httproutes',
  '/apis/gateway.networking.k8s.io/v1/namespaces/app/httproutes',
  '/apis/gateway.networking.k8s.io/v1/namespaces/app/grpcroutes',
  '/apis/policy.linkerd.io/v1alpha1/namespaces/app/meshtlsauthentications',
  '/apis/policy.linkerd.io/v1alpha1/namespaces/app/networkauthentications',
  '/apis/policy.linkerd.io/v1beta1/namespaces/app/serverauthorizations',
];

const MANIFESTS = `
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: app, labels: {app: web, linkerd.io/control-plane-ns: linkerd}}
spec:
  containers:
  - name: app
    image: example.invalid/web
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web-http, namespace: app}
spec:
  podSelector: {matchLabels: {app: web}}
  port: http
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: allow-web, namespace: app}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-htp}
  requiredAuthenticationRefs: []
---
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {name: web-get, namespace: app}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-http}]
  rules: [{matches: [{path: {type: PathPrefix, value: /}, method: GET}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web-out, namespace: app}
spec:
  parentRefs: [{group: core, kind: Service, name: web, port: 80}]
  rules: [{backendRefs: [{name: web, port: 80}, {name: gone, port: 80}]}]
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web-grpc, namespace: app}
spec:
  podSelector: {matchLabels: {app: web}}
  port: 9090
  proxyProtocol: gRPC
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: web-rpc, namespace: app}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-grpc}]
  rules: [{matches: [{method: {service: web.Api}}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web-rpc-http, namespace: app}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-grpc}]
  rules: [{}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: web-clients, namespace: app}
spec:
  identities: ["*.app.serviceaccount.identity.linkerd.cluster.local"]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: NetworkAuthentication
metadata: {name: unused-nets, namespace: app}
spec:
  networks: [{cidr: 10.0.0.0/8}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: allow-mtls, namespace: app}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-grpc}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: web-clients}]
---
apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {name: legacy, namespace: app}
spec:
  server: {selector: {matchLabels: {tier: none}}}
  client: {unauthenticated: true}
`;

type Obj = { apiVersion: string; kind: string; metadata: Record<string, unknown>; status?: Record<string, unknown> };

const conditionsOf = (o: Obj) => (o.status?.conditions ?? []) as Record<string, unknown>[];

describeWithKubeKit('StatusWriter against a real API server', () => {
  let kit: KubeKit;
  let client: KubeClient;
  let election: LeaderElection;
  let writer: StatusWriter;
  const index = new PolicyIndex(CONFIG);

  /** A LIST, waiting out the API server's 429 while a new CRD's storage initializes. */
  async function listOnce(path: string): Promise<unknown> {
    for (let attempt = 0; ; attempt++) {
      try {
        return (await client.request({ method: 'GET', path })).body;
      } catch (e) {
        if (!(e instanceof KubeApiError && e.status === 429) || attempt > 30) throw e;
        await new Promise((r) => setTimeout(r, (e.retryAfterSeconds ?? 1) * 1000));
      }
    }
  }

  /** Lists every object and feeds the index and the writer, as the source does on a resync. */
  async function sync(): Promise<void> {
    const objects: Obj[] = [];
    for (const path of COLLECTIONS) {
      const list = (await listOnce(path)) as { apiVersion: string; kind: string; items: Obj[] };
      const [group, version] = path.startsWith('/api/v1') ? ['', 'v1'] : (path.split('/').slice(2, 4) as [string, string]);
      const kind = list.kind.replace(/List$/, '');
      for (const item of list.items) objects.push({ ...item, apiVersion: group === '' ? version : `${group}/${version}`, kind });
    }
    const resources: Resource[] = [];
    for (const o of objects) {
      const r = decodeResource(documentFromObject(o));
      if (r.status === 'ok') resources.push(r.resource);
    }
    index.reset(resources);
    for (const o of objects) writer.observe(o);
    writer.schedule();
  }

  const get = async (kind: string, name: string) =>
    JSON.parse(await kit.kubectl(['get', kind, '-n', 'app', name, '-o', 'json', '--show-managed-fields'])) as Obj;

  before(async () => {
    kit = await startKubeKit();
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
    // ward's own CRDs: the status subresource, schema and printer columns on every kind.
    const crds = customResourceDefinitions();
    await kit.kubectl(['apply', '--server-side', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: crds }));
    await kit.kubectl(['wait', '--for=condition=Established', '--timeout=120s', ...crds.map((c) => `crd/${c.metadata.name}`)]);
    await kit.kubectl(['create', 'namespace', 'app']);
    await kit.kubectl(['create', 'namespace', 'linkerd']);
    await kit.kubectl(['apply', '-f', '-'], MANIFESTS);

    election = new LeaderElection({
      client,
      namespace: 'linkerd',
      identity: 'ward-controller-0',
      leaseDurationMs: 15_000,
      renewDeadlineMs: 10_000,
      retryPeriodMs: 500,
      onStartedLeading: () => writer.schedule(),
    });
    writer = new StatusWriter({ client, index, isLeader: () => election.isLeader(), debounceMs: 20 });
    election.start();
    await waitFor(() => election.isLeader(), 'leadership', 30_000);
  });

  after(async () => {
    await writer?.stop();
    await election?.stop();
    client?.close();
    await kit?.stop();
  });

  it('a Server gets its counts; a policy on a missing Server says what does not resolve', async () => {
    await sync();
    await writer.flush();
    const srv = await get('server', 'web-http');
    assert.deepEqual(
      conditionsOf(srv).map((c) => [c.type, c.status, c.reason, c.message, c.observedGeneration]),
      [
        ['Accepted', 'True', 'Accepted', '', 1],
        ['ResolvedRefs', 'True', 'ResolvedRefs', '', 1],
      ],
    );
    assert.deepEqual([srv.status?.selectedPods, srv.status?.selectedPorts], [1, 1]);
    const ap = await get('authorizationpolicy', 'allow-web');
    assert.deepEqual(
      conditionsOf(ap).map((c) => [c.type, c.status, c.reason, c.message]),
      [
        ['Accepted', 'True', 'Accepted', ''],
        ['ResolvedRefs', 'False', 'TargetNotFound', 'Server web-htp not found in namespace app'],
      ],
    );
    assert.deepEqual([ap.status?.selectedPods, ap.status?.selectedPorts], [0, 0]);
    const managers = (ap.metadata.managedFields as { manager: string; operation: string; subresource?: string }[]).filter((m) => m.subresource === 'status');
    assert.deepEqual(
      managers.map((m) => [m.manager, m.operation]),
      [['ward-controller', 'Apply']],
    );
    // What kubectl users see.
    const table = await kit.kubectl(['get', 'authorizationpolicies,servers', '-n', 'app', '-o', 'wide']);
    assert.match(table, /ACCEPTED\s+PODS\s+PORTS\s+RESOLVED/);
    assert.match(table, /allow-web\s+.*True\s+0\s+0\s+False/);
    assert.match(table, /web-http\s+.*True\s+1\s+1\s+True/);
  });

  it('fixing the reference turns ResolvedRefs True and keeps Accepted’s transition time', async () => {
    const before = await get('authorizationpolicy', 'allow-web');
    const acceptedSince = conditionsOf(before)[0]?.lastTransitionTime;
    // Transition times have one-second resolution: let a new one differ from the old.
    await new Promise((r) => setTimeout(r, 1100));
    await kit.kubectl(['patch', 'authorizationpolicy', '-n', 'app', 'allow-web', '--type=merge', '-p', '{"spec":{"targetRef":{"name":"web-http"}}}']);
    await sync();
    await writer.flush();
    const ap = await get('authorizationpolicy', 'allow-web');
    assert.equal(ap.metadata.generation, 2);
    assert.deepEqual(
      conditionsOf(ap).map((c) => [c.type, c.status, c.reason, c.observedGeneration]),
      [
        ['Accepted', 'True', 'Accepted', 2],
        ['ResolvedRefs', 'True', 'ResolvedRefs', 2],
      ],
    );
    const [accepted, resolved] = conditionsOf(ap);
    assert.equal(accepted?.lastTransitionTime, acceptedSince);
    assert.notEqual(resolved?.lastTransitionTime, acceptedSince);
    assert.deepEqual([ap.status?.selectedPods, ap.status?.selectedPorts], [1, 1]);
  });

  it('routes get status.parents as Linkerd writes them', async () => {
    await sync();
    await writer.flush();
    const inbound = await get('httproutes.policy.linkerd.io', 'web-get');
    const parents = inbound.status?.parents as Record<string, unknown>[];
    assert.equal(parents.length, 1);
    const [p] = parents as [{ conditions: Record<string, unknown>[] }];
    assert.deepEqual(
      {
        ...p,
        conditions: p.conditions.map(({ lastTransitionTime, ...c }) => {
          assert.match(String(lastTransitionTime), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
          return c;
        }),
      },
      {
        parentRef: { group: 'policy.linkerd.io', kind: 'Server', namespace: 'app', name: 'web-http' },
        controllerName: 'linkerd.io/policy-controller',
        conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message: '' }],
      },
    );
    const outbound = await get('httproutes.gateway.networking.k8s.io', 'web-out');
    const [o] = (outbound.status?.parents ?? []) as [{ parentRef: unknown; conditions: Record<string, unknown>[] }];
    assert.deepEqual(o.parentRef, { group: 'core', kind: 'Service', namespace: 'app', name: 'web', port: 80 });
    assert.deepEqual(
      o.conditions.map((c) => [c.type, c.status, c.reason]),
      [
        ['Accepted', 'True', 'Accepted'],
        ['ResolvedRefs', 'False', 'BackendNotFound'],
      ],
    );
  });

  it('a GRPCRoute wins a Server over an HTTPRoute (GEP-1426)', async () => {
    await sync();
    await writer.flush();
    const reasons = async (kind: string, name: string) =>
      (((await get(kind, name)).status?.parents ?? []) as { parentRef: { name: string }; conditions: Record<string, unknown>[] }[]).map((p) => [
        p.parentRef.name,
        ...p.conditions.map((c) => `${String(c.type)}=${String(c.status)}/${String(c.reason)}`),
      ]);
    assert.deepEqual(await reasons('grpcroutes', 'web-rpc'), [['web-grpc', 'Accepted=True/Accepted']]);
    assert.deepEqual(await reasons('httproutes.gateway.networking.k8s.io', 'web-rpc-http'), [['web-grpc', 'Accepted=False/RouteReasonConflicted']]);
  });

  it('authentications count the pod ports of the policies that require them; a ServerAuthorization names its unmatched selector', async () => {
    await sync();
    await writer.flush();
    const summary = async (kind: string, name: string) => {
      const o = await get(kind, name);
      return [...conditionsOf(o).map((c) => `${String(c.type)}=${String(c.status)}/${String(c.reason)}`), o.status?.selectedPods, o.status?.selectedPorts];
    };
    assert.deepEqual(await summary('meshtlsauthentication', 'web-clients'), ['Accepted=True/Accepted', 'ResolvedRefs=True/ResolvedRefs', 1, 1]);
    assert.deepEqual(await summary('networkauthentication', 'unused-nets'), ['Accepted=True/Accepted', 'ResolvedRefs=True/ResolvedRefs', 0, 0]);
    assert.deepEqual(await summary('serverauthorization', 'legacy'), ['Accepted=True/Accepted', 'ResolvedRefs=False/TargetNotFound', 0, 0]);
    assert.equal(conditionsOf(await get('serverauthorization', 'legacy'))[1]?.message, 'spec.server.selector matches no Server in namespace app');
  });

  it('recomputing an unchanged state writes nothing', async () => {
    await sync();
    await writer.flush();
    const rvs = async () =>
      Promise.all(
        [
          ['server', 'web-http'],
          ['authorizationpolicy', 'allow-web'],
          ['httproutes.policy.linkerd.io', 'web-get'],
          ['httproutes.gateway.networking.k8s.io', 'web-out'],
          ['grpcroutes', 'web-rpc'],
          ['meshtlsauthentication', 'web-clients'],
          ['serverauthorization', 'legacy'],
        ].map(async ([k, n]) => (await get(k as string, n as string)).metadata.resourceVersion),
      );
    const before = await rvs();
    const writes = writer.stats.writes;
    const skipped = writer.stats.skippedUnchanged;
    await sync();
    await writer.flush();
    assert.equal(writer.stats.writes, writes);
    // Two Servers, two policies, three authentications and authorizations, three HTTPRoutes and
    // a GRPCRoute compared, none written.
    assert.ok(writer.stats.skippedUnchanged >= skipped + 11);
    assert.deepEqual(await rvs(), before);
    assert.equal(writer.stats.errors, 0);
  });
});
