import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseCidr } from '../../core/index.js';
import { type ClusterConfig, EndpointsIndex, type IndexTx, PolicyIndex } from '../../index/index.js';
import { decodeResource, documentFromObject } from '../../manifest/index.js';
import { createLogger } from '../../shared/index.js';
import { waitFor } from '../../shared/testing/waits.js';
import { type ChangeSummary, DirectorySource, type SourceSink } from '../directory-source.js';
import { KubeClient, loadKubeconfig } from './client.js';
import { KubernetesSource, type PolicySource, podOwner, WATCHED_KINDS } from './kubernetes-source.js';
import { applyLinkerdCrds, describeWithKubeKit, type KubeKit, startKubeKit } from './testing/kube-kit.js';

const net = (cidr: string) => ({ net: parseCidr(cidr) as NonNullable<ReturnType<typeof parseCidr>>, except: [] });
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'].map(net),
  probeNetworks: [net('0.0.0.0/0'), net('::/0')],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};
const NS = 'conf';
const WAIT_MS = 60_000;

// === fixtures: pods as the injector created them, and policy in every group and version ward reads ===

const PROXY = `  - name: linkerd-proxy
    image: localhost/ward:test
    ports: [{name: linkerd-proxy, containerPort: 4143}, {name: linkerd-admin, containerPort: 4191}]
    readinessProbe: {httpGet: {port: 4191, path: /ready}}
    livenessProbe: {httpGet: {port: 4191, path: /live}}`;

const pod = (name: string, o: { sa: string; labels: Record<string, string>; ip: string; meshed?: boolean; ports?: string }) => ({
  spec: `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: ${NS}
  labels: ${JSON.stringify(o.meshed === false ? o.labels : { ...o.labels, 'linkerd.io/control-plane-ns': 'linkerd' })}
  annotations: ${JSON.stringify(o.meshed === false ? {} : { 'linkerd.io/proxy-version': 'ward', 'config.linkerd.io/opaque-ports': '3306' })}
spec:
  serviceAccountName: ${o.sa}
  containers:
  - name: app
    image: example.invalid/app:1
    ports: ${o.ports ?? '[]'}
    readinessProbe: {httpGet: {port: 9090, path: /healthz}}
${o.meshed === false ? '' : PROXY}
`,
  status: { phase: 'Running', podIP: o.ip, podIPs: [{ ip: o.ip }], conditions: [{ type: 'Ready', status: 'True' }] },
});

const WEB_PORTS = '[{name: http, containerPort: 8080}, {name: admin, containerPort: 9090}, {name: mysql, containerPort: 3306}]';
const PODS = {
  'web-0': pod('web-0', { sa: 'web', labels: { app: 'web' }, ip: '10.1.0.7', ports: WEB_PORTS }),
  'web-1': pod('web-1', { sa: 'web', labels: { app: 'web' }, ip: '10.1.0.8', ports: WEB_PORTS }),
  'client-0': pod('client-0', { sa: 'client', labels: { app: 'client' }, ip: '10.1.0.9' }),
  'plain-0': pod('plain-0', { sa: 'default', labels: { app: 'plain' }, ip: '10.1.0.10', meshed: false, ports: '[{containerPort: 8080}]' }),
};

const CORE = `apiVersion: v1
kind: Namespace
metadata: {name: ${NS}, annotations: {config.linkerd.io/default-inbound-policy: cluster-authenticated}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: ${NS}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: ${NS}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ${NS}}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
`;

const WEB_HTTP = (o: { accessPolicy?: string; port?: string } = {}) => `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web-http, namespace: ${NS}}
spec:
  podSelector: {matchLabels: {app: web}}
  port: ${o.port ?? 'http'}
  proxyProtocol: HTTP/1
  accessPolicy: ${o.accessPolicy ?? 'deny'}
`;

const WEB_GET_AUTHZ = `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: web-get-authz, namespace: ${NS}}
spec:
  targetRef: {group: policy.linkerd.io, kind: HTTPRoute, name: web-get}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: clients}
`;

const POLICY_REST = `apiVersion: policy.linkerd.io/v1beta1
kind: Server
metadata: {name: web-admin, namespace: ${NS}}
spec:
  podSelector: {matchLabels: {app: web}}
  port: admin
  proxyProtocol: gRPC
---
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {name: web-get, namespace: ${NS}}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-http}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}, method: GET}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web-post, namespace: ${NS}}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-http}]
  rules:
  - matches: [{path: {type: Exact, value: /submit}, method: POST}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: admin-rpc, namespace: ${NS}}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-admin}]
  rules:
  - matches: [{method: {service: admin.v1.Admin, method: Status}}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: ${NS}}
spec:
  identityRefs: [{kind: ServiceAccount, name: client}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: NetworkAuthentication
metadata: {name: cluster-nets, namespace: ${NS}}
spec:
  networks: [{cidr: 10.0.0.0/8, except: [10.9.0.0/16]}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: admin-authz, namespace: ${NS}}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-admin}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: NetworkAuthentication, name: cluster-nets}
---
apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {name: admin-saz, namespace: ${NS}}
spec:
  server: {name: web-admin}
  client:
    meshTLS:
      serviceAccounts: [{name: client}]
`;

/** The pods as the directory source reads them: the status the API server holds is written inline. */
const podFiles = () =>
  Object.values(PODS)
    .map((p) => `${p.spec}status: ${JSON.stringify(p.status)}\n`)
    .join('---\n');

// === what the index answers, in a comparable form ===

const plain = (v: unknown): unknown => {
  if (v instanceof Set) return [...v].map(plain).sort();
  if (v instanceof Map) return [...v.entries()].map(([k, x]) => [k, plain(x)]).sort((a, b) => String(a[0]).localeCompare(String(b[0])));
  if (Array.isArray(v)) return v.map(plain);
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
};

/** Every pod's facts and the policy of each of its ports (and one no Server binds). */
function snapshot(index: PolicyIndex): unknown {
  const pods = index.pods().sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
  return {
    pods: pods.map(({ pod: _pod, ...info }) => plain(info)),
    ports: pods.map((p) => ({
      pod: `${p.namespace}/${p.name}`,
      policies: [...new Set([...p.declaredPorts, 4191, 7777])].sort((a, b) => a - b).map((port) => [port, plain(index.peek(p.namespace, p.name, port)?.value)]),
    })),
    unmeshed: index
      .unmeshedPods()
      .map((p) => `${p.metadata.namespace}/${p.metadata.name}`)
      .sort(),
    routeStatus: plain(index.routeStatus(NS)),
  };
}

/** A sink feeding both indexes the same operations, as the controller's does. */
function bothIndexes(index: PolicyIndex, endpoints: EndpointsIndex): SourceSink {
  return {
    update(fn) {
      const ops: ((tx: IndexTx) => void)[] = [];
      fn({ apply: (r) => ops.push((tx) => tx.apply(r)), delete: (k) => ops.push((tx) => tx.delete(k)) });
      const replay = (tx: IndexTx) => {
        for (const op of ops) op(tx);
      };
      index.update(replay);
      endpoints.update(replay);
    },
  };
}

const ENDPOINT_PATHS = [`web.${NS}.svc.cluster.local:80`, '10.1.0.7:8080', '10.1.0.9:9999', '10.1.0.10:8080'];
const endpointsView = (e: EndpointsIndex) => ENDPOINT_PATHS.map((p) => [p, e.resolve(p)]);

describe('podOwner', () => {
  const mk = (labels: Record<string, string>, ...refs: object[]) => ({ metadata: { name: 'p', namespace: 'n', labels, ownerReferences: refs } });
  it('names the controller reference, a Deployment for its ReplicaSet', () => {
    assert.equal(podOwner(mk({ 'pod-template-hash': '5d9c8' }, { kind: 'ReplicaSet', name: 'web-5d9c8', controller: true })), 'Deployment/web');
    assert.equal(podOwner(mk({}, { kind: 'ReplicaSet', name: 'web-5d9c8', controller: true })), 'ReplicaSet/web-5d9c8');
    assert.equal(podOwner(mk({ 'pod-template-hash': 'abc' }, { kind: 'StatefulSet', name: 'db', controller: true })), 'StatefulSet/db');
    assert.equal(podOwner(mk({}, { kind: 'Node', name: 'n1' }, { kind: 'DaemonSet', name: 'agent', controller: true })), 'DaemonSet/agent');
    assert.equal(podOwner(mk({}, { kind: 'ConfigMap', name: 'x' })), undefined);
    assert.equal(podOwner({ metadata: { name: 'p' } }), undefined);
  });
});

describe('version discovery', () => {
  it('watches the newest version ward decodes that the server serves', async () => {
    // An older Linkerd: Servers served up to v1beta1, HTTPRoutes up to v1beta2, no Gateway API.
    const served: Record<string, string[]> = {
      '/apis/policy.linkerd.io/v1alpha1': ['servers', 'httproutes'],
      '/apis/policy.linkerd.io/v1beta1': ['servers', 'httproutes'],
      '/apis/policy.linkerd.io/v1beta2': ['httproutes'],
    };
    const lists: string[] = [];
    const server = createServer((req, res) => {
      const path = (req.url ?? '').split('?')[0] as string;
      res.setHeader('content-type', 'application/json');
      const resources = served[path];
      if (resources !== undefined) {
        res.end(JSON.stringify({ kind: 'APIResourceList', resources: resources.map((name) => ({ name })) }));
      } else if (req.url?.includes('watch=true')) {
        res.writeHead(200);
        res.write('');
      } else if (Object.entries(served).some(([gv, rs]) => rs.some((r) => path === `${gv}/${r}`))) {
        lists.push(path);
        res.end(JSON.stringify({ metadata: { resourceVersion: '1' }, items: [] }));
      } else {
        res.writeHead(404);
        res.end(JSON.stringify({ kind: 'Status', code: 404, reason: 'NotFound' }));
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const client = new KubeClient({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, namespace: 'default', insecureSkipTlsVerify: false });
    const source = new KubernetesSource({
      client,
      sink: new PolicyIndex(CONFIG),
      kinds: WATCHED_KINDS.filter((k) => k.group !== ''),
      reflector: { notFoundRetryMs: 60_000 },
    });
    try {
      await source.start();
      assert.deepEqual(
        source.types().map((t) => `${t.plural}.${t.group}/${t.version}`),
        [
          'servers.policy.linkerd.io/v1beta1',
          'serverauthorizations.policy.linkerd.io/v1beta1',
          'authorizationpolicies.policy.linkerd.io/v1alpha1',
          'meshtlsauthentications.policy.linkerd.io/v1alpha1',
          'networkauthentications.policy.linkerd.io/v1alpha1',
          'httproutes.policy.linkerd.io/v1beta2',
          'httproutes.gateway.networking.k8s.io/v1',
          'grpcroutes.gateway.networking.k8s.io/v1',
          // Not served by this API server: watched at the preferred version, synced empty.
          'traffictargets.access.smi-spec.io/v1alpha3',
          'httproutegroups.specs.smi-spec.io/v1alpha4',
          'tcproutes.specs.smi-spec.io/v1alpha4',
          'udproutes.specs.smi-spec.io/v1alpha4',
        ],
      );
      assert.deepEqual(lists.sort(), ['/apis/policy.linkerd.io/v1beta1/servers', '/apis/policy.linkerd.io/v1beta2/httproutes']);
      // Kinds the server does not serve count as synced and empty.
      assert.equal(source.synced, true);
    } finally {
      await source.stop();
      client.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('KubernetesSource.stop', () => {
  // Without the stop, discovery would wait out its 30 s request timeout: beyond this test's.
  it('ends a start still waiting for an API server that does not answer', { timeout: 20_000 }, async () => {
    let answerDiscovery = false;
    const server = createServer((req, res) => {
      // Discovery answered (when asked to) with "not served"; LISTs never answered.
      if (answerDiscovery && /^\/apis\/[^/]+\/[^/]+$/.test(req.url ?? '')) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end('{"kind":"Status","code":404}');
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const client = new KubeClient({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, namespace: 'default', insecureSkipTlsVerify: false });
    const sink = new PolicyIndex(CONFIG);
    try {
      // Stopped during version discovery, then while the reflectors wait for their lists.
      for (const discovery of [false, true]) {
        answerDiscovery = discovery;
        const source = new KubernetesSource({ client, sink });
        const started = source.start();
        if (discovery) await waitFor(() => source.types().length > 0, 'the reflectors to start', WAIT_MS);
        await source.stop();
        await assert.rejects(started, { code: 'ERR_SOURCE_STOPPED' });
        assert.equal(source.synced, false);
      }
    } finally {
      client.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('WATCHED_KINDS', () => {
  it('names only versions ward decodes', () => {
    for (const k of WATCHED_KINDS) {
      for (const v of k.versions) {
        const apiVersion = k.group === '' ? v : `${k.group}/${v}`;
        const r = decodeResource(documentFromObject({ apiVersion, kind: k.kind, metadata: { name: 'x', namespace: 'n' } }));
        assert.equal(
          r.diagnostics.some((d) => d.code === 'POL005' || d.code === 'POL004'),
          false,
          `${k.kind} ${apiVersion}`,
        );
      }
    }
  });

  it('is something the directory source can stand in for (both are PolicySources)', () => {
    const asSource = (s: PolicySource) => s.recreatePod('n', 'p');
    const dir = mkdtempSync(join(tmpdir(), 'ward-kubesrc-'));
    try {
      assert.equal(asSource(new DirectorySource({ dir, config: { controlPlaneNamespace: 'linkerd' }, sink: new PolicyIndex(CONFIG) })), false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describeWithKubeKit('KubernetesSource against a real API server', () => {
  let kit: KubeKit;
  let client: KubeClient;
  let dir: string;
  const stops: (() => unknown)[] = [];
  const logs: Record<string, unknown>[] = [];

  before(async () => {
    kit = await startKubeKit();
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
    dir = mkdtempSync(join(tmpdir(), 'ward-kubesrc-'));
    await applyLinkerdCrds(kit);
    await kit.kubectl(['apply', '-f', '-'], CORE);
    await kit.kubectl(
      ['apply', '-f', '-'],
      Object.values(PODS)
        .map((p) => p.spec)
        .join('---\n'),
    );
    for (const [name, p] of Object.entries(PODS)) {
      await kit.kubectl(['-n', NS, 'patch', 'pod', name, '--subresource=status', '--type=merge', '-p', JSON.stringify({ status: p.status })]);
    }
    await kit.kubectl(['apply', '-f', '-'], `${WEB_HTTP()}---\n${WEB_GET_AUTHZ}---\n${POLICY_REST}`);
    writeFileSync(join(dir, 'core.yaml'), CORE);
    writeFileSync(join(dir, 'pods.yaml'), podFiles());
    writeFileSync(join(dir, 'web-http.yaml'), WEB_HTTP());
    writeFileSync(join(dir, 'web-get-authz.yaml'), WEB_GET_AUTHZ);
    writeFileSync(join(dir, 'policy.yaml'), POLICY_REST);
  });
  after(async () => {
    for (const s of stops.splice(0).reverse()) await s();
    client?.close();
    await kit?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  let kubeIndex: PolicyIndex;
  let dirIndex: PolicyIndex;
  const endpointsConfig = { controlPlaneNamespace: 'linkerd', trustDomain: 'cluster.local' };
  const kubeEndpoints = new EndpointsIndex(endpointsConfig);
  const dirEndpoints = new EndpointsIndex(endpointsConfig);
  let kube: KubernetesSource;
  let dirSource: DirectorySource;
  const kubeChanges: ChangeSummary[] = [];
  const objects: { kind: string; key: string; hasStatus: boolean }[] = [];
  const dirChanges: ChangeSummary[] = [];

  it('feeds a PolicyIndex exactly as the directory source does, given the same objects', async () => {
    kubeIndex = new PolicyIndex(CONFIG);
    dirIndex = new PolicyIndex(CONFIG);
    const logger = createLogger({ level: 'info', destination: { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) } });
    kube = new KubernetesSource({
      client,
      sink: bothIndexes(kubeIndex, kubeEndpoints),
      logger,
      onChange: (c) => kubeChanges.push(c),
      onObject: (t, key, o) => {
        const status = o?.status;
        objects.push({ kind: t.kind, key, hasStatus: typeof status === 'object' && status !== null && 'parents' in status });
      },
    });
    stops.push(() => kube.stop());
    dirSource = new DirectorySource({
      dir,
      config: { controlPlaneNamespace: 'linkerd' },
      sink: bothIndexes(dirIndex, dirEndpoints),
      debounceMs: 20,
      onChange: (c) => dirChanges.push(c),
    });
    stops.push(() => dirSource.stop());
    await kube.start();
    await dirSource.start();
    assert.equal(kube.synced, true);
    assert.deepEqual(
      kube.types().map((t) => `${t.kind} ${t.group === '' ? t.version : `${t.group}/${t.version}`}`),
      [
        'Namespace v1',
        'Pod v1',
        'ServiceAccount v1',
        'Service v1',
        'Server policy.linkerd.io/v1beta3',
        'ServerAuthorization policy.linkerd.io/v1beta1',
        'AuthorizationPolicy policy.linkerd.io/v1alpha1',
        'MeshTLSAuthentication policy.linkerd.io/v1alpha1',
        'NetworkAuthentication policy.linkerd.io/v1alpha1',
        'HTTPRoute policy.linkerd.io/v1beta3',
        'HTTPRoute gateway.networking.k8s.io/v1',
        'GRPCRoute gateway.networking.k8s.io/v1',
        // SMI CRDs are not installed: watched at the preferred version, synced empty.
        'TrafficTarget access.smi-spec.io/v1alpha3',
        'HTTPRouteGroup specs.smi-spec.io/v1alpha4',
        'TCPRoute specs.smi-spec.io/v1alpha4',
        'UDPRoute specs.smi-spec.io/v1alpha4',
      ],
    );
    // The initial state arrives as one transaction, every object heard of on the way.
    assert.equal(kubeChanges.length, 1);
    assert.equal(kube.batches, 1);
    assert.ok(objects.some((o) => o.kind === 'Server' && o.key === `${NS}/web-http`));
    const kubeView = snapshot(kubeIndex);
    assert.deepEqual(kubeView, snapshot(dirIndex));
    // Not vacuous: three meshed pods, the web pods' ports bound to their Servers.
    const view = kubeView as { pods: unknown[]; ports: { pod: string; policies: [number, { meta?: { name: string } }][] }[]; unmeshed: string[] };
    assert.equal(view.pods.length, 3);
    assert.deepEqual(view.unmeshed, [`${NS}/plain-0`]);
    const web0 = view.ports.find((p) => p.pod === `${NS}/web-0`)?.policies.map(([port, v]) => `${port}:${v.meta?.name}`);
    // Pods were created injected, so the namespace's default-policy annotation never reached them.
    assert.deepEqual(web0, [
      '3306:all-unauthenticated',
      '4143:all-unauthenticated',
      '4191:all-unauthenticated',
      '7777:all-unauthenticated',
      '8080:web-http',
      '9090:web-admin',
    ]);
    assert.deepEqual(
      kube.status().filter((s) => !s.ok),
      [],
    );
    // The endpoints index agrees too, and the Service has its two ready pods.
    assert.deepEqual(endpointsView(kubeEndpoints), endpointsView(dirEndpoints));
    const svc = kubeEndpoints.resolve(`web.${NS}.svc.cluster.local:80`);
    assert.deepEqual(svc.ok && svc.endpoints.map((e) => `${e.ip}:${e.port} ${e.identity}`), [
      `10.1.0.7:8080 web.${NS}.serviceaccount.identity.linkerd.cluster.local`,
      `10.1.0.8:8080 web.${NS}.serviceaccount.identity.linkerd.cluster.local`,
    ]);
  });

  it('follows updates and deletes, and agrees with the directory source after each', async () => {
    await kit.kubectl(['apply', '-f', '-'], WEB_HTTP({ accessPolicy: 'all-unauthenticated' }));
    writeFileSync(join(dir, 'web-http.yaml'), WEB_HTTP({ accessPolicy: 'all-unauthenticated' }));
    await waitFor(
      () => JSON.stringify(snapshot(kubeIndex)) === JSON.stringify(snapshot(dirIndex)) && kubeChanges.length >= 2,
      'agreement after an update',
      WAIT_MS,
    );
    await kit.kubectl(['-n', NS, 'delete', 'authorizationpolicy', 'web-get-authz']);
    rmSync(join(dir, 'web-get-authz.yaml'));
    await kit.kubectl(['-n', NS, 'delete', 'pod', 'web-1', '--wait=false']);
    writeFileSync(join(dir, 'pods.yaml'), podFiles().replace(/apiVersion: v1\nkind: Pod\nmetadata:\n {2}name: web-1[\s\S]*?(?=---\n)---\n/, ''));
    await waitFor(() => kubeIndex.pod(NS, 'web-1') === undefined && dirIndex.pod(NS, 'web-1') === undefined, 'web-1 gone from both', WAIT_MS);
    await waitFor(() => JSON.stringify(snapshot(kubeIndex)) === JSON.stringify(snapshot(dirIndex)), 'agreement after deletes', WAIT_MS);
    await waitFor(() => JSON.stringify(endpointsView(kubeEndpoints)) === JSON.stringify(endpointsView(dirEndpoints)), 'endpoints agreement', WAIT_MS);
    assert.deepEqual(
      kubeIndex
        .pods()
        .map((p) => p.name)
        .sort(),
      ['client-0', 'web-0'],
    );
  });

  it('reports an object the webhook would have rejected, and keeps its last good version in force', async () => {
    const before = kubeIndex.peek(NS, 'web-0', 8080)?.value;
    assert.equal(before?.meta.name, 'web-http');
    const path = `/apis/policy.linkerd.io/v1beta3/namespaces/${NS}/servers/web-http`;
    // No webhook in this cluster: the API server stores what ward's admission refuses (POL025).
    await kit.kubectl(['apply', '-f', '-'], WEB_HTTP({ accessPolicy: 'all-unauthenticated', port: 'Not_A_Name' }));
    await waitFor(() => kube.status().some((s) => s.file === path && !s.ok), 'the rejection to be reported', WAIT_MS);
    const st = kube.status().find((s) => s.file === path);
    assert.ok(st !== undefined);
    assert.deepEqual(
      st.diagnostics.filter((d) => d.severity === 'error').map((d) => d.code),
      ['POL025'],
    );
    assert.deepEqual(st.retained, [{ kind: 'Server', group: '', namespace: NS, name: 'web-http' }]);
    assert.equal(st.kind, 'Server');
    assert.deepEqual(kube.rejected(), [st], 'rejected() reports it as status() does, alone');
    assert.deepEqual(kubeIndex.peek(NS, 'web-0', 8080)?.value, before, 'the last good Server still decides port 8080');
    const rejected = logs.filter((l) => l.msg === 'object rejected; its last good version stays in force' && l.object === path);
    assert.equal(rejected.length, 1);
    assert.equal(rejected[0]?.resourceVersion, st.resourceVersion);

    // Fixed: in force again, and the report clears.
    await kit.kubectl(['apply', '-f', '-'], WEB_HTTP({ accessPolicy: 'deny' }));
    await waitFor(() => kube.status().find((s) => s.file === path)?.ok === true, 'the fix to be seen', WAIT_MS);
    await waitFor(() => kubeIndex.peek(NS, 'web-0', 8080)?.value.authorizations.length === 0, 'the fixed Server (deny) in force', WAIT_MS);
    assert.deepEqual(kube.status().find((s) => s.file === path)?.retained, []);
    assert.deepEqual(kube.rejected(), []);
  });

  it('does not apply again an object whose status alone was written (a route status update)', async () => {
    const batches = kube.batches;
    const changesBefore = kubeChanges.length;
    const condition = {
      type: 'Accepted',
      status: 'True',
      reason: 'Accepted',
      message: '',
      lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    };
    const status = {
      parents: [
        {
          parentRef: { group: 'policy.linkerd.io', kind: 'Server', name: 'web-http' },
          controllerName: 'linkerd.io/policy-controller',
          conditions: [condition],
        },
      ],
    };
    await kit.kubectl(['-n', NS, 'patch', 'httproutes.policy.linkerd.io', 'web-get', '--subresource=status', '--type=merge', '-p', JSON.stringify({ status })]);
    // A later change that is applied proves the status write was processed before it.
    await kit.kubectl(['-n', NS, 'label', 'serviceaccount', 'web', 'touched=yes']);
    const rv = await kit.kubectl(['-n', NS, 'get', 'serviceaccount', 'web', '-o', 'jsonpath={.metadata.resourceVersion}']);
    await waitFor(() => kube.status().find((s) => s.kind === 'ServiceAccount' && s.name === 'web')?.resourceVersion === rv, 'the later change', WAIT_MS);
    assert.equal(kube.batches, batches + 1);
    // Both batches are reported (a status writer hears of the first), only one applied anything.
    assert.deepEqual(
      kubeChanges
        .slice(changesBefore)
        .map((c) => [c.applied, c.deleted])
        .filter(([a, d]) => (a as number) + (d as number) > 0),
      [[1, 0]],
    );
    assert.ok(kubeChanges.slice(changesBefore).some((c) => c.files.includes(`/apis/policy.linkerd.io/v1beta3/namespaces/${NS}/httproutes/web-get`)));
    assert.ok(
      objects.some((o) => o.key === `${NS}/web-get` && o.kind === 'HTTPRoute' && o.hasStatus),
      'the raw object, status included, reached onObject',
    );
  });

  it('keeps the indexes through an API server restart, then converges', async () => {
    const before = JSON.stringify(snapshot(kubeIndex));
    await kit.stopApiserver();
    await waitFor(() => Object.values(kube.reflectorStats()).some((r) => r.errors > 0), 'the outage to be noticed', WAIT_MS);
    assert.equal(JSON.stringify(snapshot(kubeIndex)), before, 'nothing withdrawn during the outage');
    await kit.startApiserver();
    await kit.kubectl(['apply', '-f', '-'], WEB_HTTP({ accessPolicy: 'all-authenticated' }));
    writeFileSync(join(dir, 'web-http.yaml'), WEB_HTTP({ accessPolicy: 'all-authenticated' }));
    await waitFor(
      () => JSON.stringify(snapshot(kubeIndex)) === JSON.stringify(snapshot(dirIndex)) && JSON.stringify(snapshot(kubeIndex)) !== before,
      'agreement after the restart',
      WAIT_MS,
    );
    const servers = kube.reflectorStats()['servers.policy.linkerd.io/v1beta3'];
    assert.ok(servers !== undefined && servers.watchRestarts >= 1 && servers.synced, JSON.stringify(servers));
  });
});
