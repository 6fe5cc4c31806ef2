/**
 * A synthetic cluster for the `index` suite, built from typed resources (no YAML): per "group"
 * of workloads 100 pods (10 apps x 10 replicas), 20 Servers, 40 AuthorizationPolicies, 4
 * MeshTLSAuthentications, 2 NetworkAuthentications, 2 ServerAuthorizations and 4 HTTPRoutes.
 * 50 groups either live in 50 namespaces (realistic) or all in one namespace (worst case).
 */
import type { Network } from '../src/core/index.js';
import { type ClusterConfig, PolicyIndex } from '../src/index/index.js';
import type {
  AuthorizationPolicy,
  ContainerSpec,
  HTTPRoute,
  MeshTLSAuthentication,
  NamespacedTargetRef,
  NetworkAuthentication,
  ObjectMeta,
  Pod,
  Resource,
  Server,
  ServerAuthorization,
} from '../src/manifest/index.js';

/** The cluster config every scenario uses. */
export const CLUSTER_CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [{ net: { ip: '10.0.0.0', prefixLen: 8 }, except: [] }],
  probeNetworks: [{ net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] }],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const GROUPS = 50;
const APPS_PER_GROUP = 10;
const REPLICAS = 10;
const POLICY_API = 'policy.linkerd.io/v1beta3';
const POLICY_ALPHA_API = 'policy.linkerd.io/v1alpha1';
const POLICY_GROUP = 'policy.linkerd.io';

/** Which layout to generate. */
export type ScenarioName = 'namespaces-50' | 'one-namespace';

/** A pod of the scenario with the ports the bench looks up. */
export interface PodRef {
  readonly namespace: string;
  readonly name: string;
  readonly ports: readonly number[];
}

/** Generated resources plus handles for the republish measurements. */
export interface Scenario {
  readonly name: ScenarioName;
  readonly resources: readonly Resource[];
  readonly pods: readonly PodRef[];
  readonly counts: Readonly<Record<string, number>>;
  /** Two versions of one AuthorizationPolicy that differ in required authentication. */
  readonly apVariants: readonly [AuthorizationPolicy, AuthorizationPolicy];
  /** Two versions of one Server that differ in proxy protocol. */
  readonly serverVariants: readonly [Server, Server];
  /** Two versions of one Pod that differ in the label its Servers select. */
  readonly podVariants: readonly [Pod, Pod];
}

let clock = Date.parse('2026-01-05T08:00:00Z');

/** Distinct, increasing creation timestamps, as the API server assigns them. */
function nextTimestamp(): string {
  clock += 1000;
  return new Date(clock).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function meta(namespace: string, name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}): ObjectMeta {
  return { namespace, name, labels, annotations, creationTimestamp: nextTimestamp(), uid: `uid-${namespace}-${name}`, resourceVersion: '1' };
}

function sa(name: string, ns: string): string {
  return `${name}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
}

// === builders ===

/** A meshed pod of `app` with http (+ grpc) and admin ports and HTTP probes on the admin port. */
export function mkPod(namespace: string, name: string, app: string, group: string, opts: { grpc: boolean; ip: string; defaultPolicy?: string }): Pod {
  const ports: NonNullable<ContainerSpec['ports']>[number][] = [
    { name: 'http', containerPort: 8080, protocol: 'TCP' },
    { name: 'admin', containerPort: 9990 },
  ];
  if (opts.grpc) ports.push({ name: 'grpc', containerPort: 9090, protocol: 'TCP' });
  const annotations: Record<string, string> = { 'linkerd.io/proxy-version': 'stable-2.17.0', 'linkerd.io/created-by': 'linkerd/proxy-injector' };
  if (opts.defaultPolicy !== undefined) annotations['config.linkerd.io/default-inbound-policy'] = opts.defaultPolicy;
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: meta(
      namespace,
      name,
      {
        app,
        'bench/group': group,
        'pod-template-hash': '7d9c8b6f5',
        version: 'v1',
        'linkerd.io/control-plane-ns': 'linkerd',
        'linkerd.io/workload-ns': namespace,
      },
      annotations,
    ),
    spec: {
      serviceAccountName: app,
      containers: [
        {
          name: 'app',
          image: `registry.example.com/${app}:1.4.2`,
          ports,
          readinessProbe: { httpGet: { port: 'admin', path: '/ready' } },
          livenessProbe: { httpGet: { port: 9990, path: '/live' } },
        },
      ],
    },
    status: { podIP: opts.ip },
  };
}

/** A Server selecting `app`'s pods, by matchLabels or by an `In` expression. */
export function mkServer(
  namespace: string,
  name: string,
  app: string,
  group: string,
  tier: string,
  port: number | string,
  proxyProtocol: Server['spec']['proxyProtocol'],
): Server {
  const podSelector = typeof port === 'string' ? { matchLabels: { app } } : { matchExpressions: [{ key: 'app', operator: 'In', values: [app] }] };
  return {
    kind: 'Server',
    apiVersion: POLICY_API,
    metadata: meta(namespace, name, { app, 'bench/group': group, 'policy-tier': tier }),
    spec: { podSelector, port, proxyProtocol },
  };
}

/** An AuthorizationPolicy on a target with required authentication references. */
export function mkAuthorizationPolicy(
  namespace: string,
  name: string,
  targetRef: AuthorizationPolicy['spec']['targetRef'],
  refs: readonly NamespacedTargetRef[],
): AuthorizationPolicy {
  return { kind: 'AuthorizationPolicy', apiVersion: POLICY_ALPHA_API, metadata: meta(namespace, name), spec: { targetRef, requiredAuthenticationRefs: refs } };
}

function mkMeshTLS(namespace: string, name: string, spec: MeshTLSAuthentication['spec']): MeshTLSAuthentication {
  return { kind: 'MeshTLSAuthentication', apiVersion: POLICY_ALPHA_API, metadata: meta(namespace, name), spec };
}

function mkNetworkAuthentication(namespace: string, name: string, networks: readonly Network[]): NetworkAuthentication {
  return { kind: 'NetworkAuthentication', apiVersion: POLICY_ALPHA_API, metadata: meta(namespace, name), spec: { networks } };
}

function mkServerAuthorization(namespace: string, name: string, spec: ServerAuthorization['spec']): ServerAuthorization {
  return { kind: 'ServerAuthorization', apiVersion: 'policy.linkerd.io/v1beta1', metadata: meta(namespace, name), spec };
}

function mkHttpRoute(namespace: string, name: string, server: string): HTTPRoute {
  return {
    kind: 'HTTPRoute',
    apiVersion: POLICY_API,
    metadata: meta(namespace, name),
    spec: {
      group: POLICY_GROUP,
      parentRefs: [{ group: POLICY_GROUP, kind: 'Server', name: server }],
      hostnames: [],
      rules: [
        { matches: [{ path: { type: 'PathPrefix', value: '/api' }, method: 'GET' }] },
        { matches: [{ path: { type: 'Exact', value: '/ready' } }, { path: { type: 'Exact', value: '/live' } }] },
        { matches: [{ path: { type: 'PathPrefix', value: '/admin' }, headers: [{ type: 'Exact', name: 'x-admin', value: 'true' }] }] },
      ],
    },
  };
}

const meshTLSRef = (name: string, namespace?: string): NamespacedTargetRef => ({
  group: POLICY_GROUP,
  kind: 'MeshTLSAuthentication',
  name,
  ...(namespace !== undefined ? { namespace } : {}),
});
const networkRef = (name: string): NamespacedTargetRef => ({ group: POLICY_GROUP, kind: 'NetworkAuthentication', name });
const serverTarget = (name: string) => ({ group: POLICY_GROUP, kind: 'Server', name });

// === scenario ===

/** Generates the cluster. Object counts are the same for both layouts. */
export function buildScenario(name: ScenarioName): Scenario {
  const resources: Resource[] = [];
  const pods: PodRef[] = [];
  const nsOf = (g: number) => (name === 'namespaces-50' ? `ns-${g}` : 'bench');
  let apVariants: [AuthorizationPolicy, AuthorizationPolicy] | undefined;
  let serverVariants: [Server, Server] | undefined;
  let podVariants: [Pod, Pod] | undefined;

  for (let g = 0; g < GROUPS; g++) {
    const ns = nsOf(g);
    const group = `g${g}`;
    const apps = Array.from({ length: APPS_PER_GROUP }, (_, a) => `${group}-app${a}`);

    // Authentication objects (a group's "monitoring" one lives in the first namespace).
    resources.push(
      mkMeshTLS(ns, `${group}-frontends`, { identities: [sa(apps[0] as string, ns), sa(apps[1] as string, ns), sa('ingress', 'ingress-nginx')] }),
      mkMeshTLS(ns, `${group}-same-ns`, { identityRefs: [{ kind: 'Namespace', name: ns }] }),
      mkMeshTLS(ns, `${group}-monitoring`, {
        identities: [sa('prometheus', 'monitoring'), '*.observability.serviceaccount.identity.linkerd.cluster.local'],
        identityRefs: [{ kind: 'ServiceAccount', name: 'grafana', namespace: 'monitoring' }],
      }),
      mkMeshTLS(ns, `${group}-any`, { identities: ['*'] }),
      mkNetworkAuthentication(ns, `${group}-cluster`, [{ net: { ip: '10.0.0.0', prefixLen: 8 }, except: [{ ip: '10.99.0.0', prefixLen: 16 }] }]),
      mkNetworkAuthentication(ns, `${group}-office`, [
        { net: { ip: '192.168.0.0', prefixLen: 16 }, except: [] },
        { net: { ip: 'fd00:10::', prefixLen: 32 }, except: [] },
      ]),
    );
    const meshTLSNames = [`${group}-frontends`, `${group}-same-ns`, `${group}-monitoring`, `${group}-any`];

    // Pods: 10 apps x 10 replicas; every third app also serves gRPC.
    for (let a = 0; a < APPS_PER_GROUP; a++) {
      const app = apps[a] as string;
      for (let r = 0; r < REPLICAS; r++) {
        const podName = `${app}-7d9c8b6f5-${r.toString(36).padStart(5, 'x')}`;
        const grpc = a % 3 === 0;
        const pod = mkPod(ns, podName, app, group, {
          grpc,
          ip: `10.${g}.${a}.${r + 10}`,
          ...(a === 9 ? { defaultPolicy: 'cluster-authenticated' } : {}),
        });
        resources.push(pod);
        pods.push({ namespace: ns, name: podName, ports: grpc ? [8080, 9990, 9090] : [8080, 9990] });
        if (g === 0 && a === 1 && r === 0) {
          podVariants = [pod, { ...pod, metadata: { ...pod.metadata, labels: { ...pod.metadata.labels, app: `${app}-canary` } } }];
        }
      }
    }

    // Servers: per app one on the named http port and one on grpc (by name) or admin (by number).
    const servers: Server[] = [];
    for (let a = 0; a < APPS_PER_GROUP; a++) {
      const app = apps[a] as string;
      servers.push(mkServer(ns, `${app}-http`, app, group, 'http', 'http', 'HTTP/1'));
      servers.push(
        a % 3 === 0 ? mkServer(ns, `${app}-grpc`, app, group, 'grpc', 'grpc', 'gRPC') : mkServer(ns, `${app}-admin`, app, group, 'admin', 9990, 'HTTP/1'),
      );
    }
    resources.push(...servers);
    if (g === 0) {
      const s = servers[2] as Server;
      serverVariants = [s, { ...s, spec: { ...s.spec, proxyProtocol: 'HTTP/2' } }];
    }

    // HTTPRoutes on the http Servers of the first four apps.
    const routes = [0, 1, 2, 3].map((a) => mkHttpRoute(ns, `${apps[a]}-routes`, `${apps[a]}-http`));
    resources.push(...routes);

    // 40 AuthorizationPolicies: 20 Server x MeshTLS, 10 Server x (Network + MeshTLS in another
    // namespace), 4 Server x ServiceAccount, 2 Namespace, 4 HTTPRoute.
    const aps: AuthorizationPolicy[] = [];
    servers.forEach((s, i) => {
      aps.push(mkAuthorizationPolicy(ns, `${s.metadata.name}-mtls`, serverTarget(s.metadata.name), [meshTLSRef(meshTLSNames[i % 4] as string)]));
    });
    servers.slice(0, 10).forEach((s) => {
      aps.push(
        mkAuthorizationPolicy(ns, `${s.metadata.name}-net`, serverTarget(s.metadata.name), [
          networkRef(`${group}-cluster`),
          meshTLSRef('g0-monitoring', nsOf(0)),
        ]),
      );
    });
    servers.slice(10, 14).forEach((s) => {
      aps.push(
        mkAuthorizationPolicy(ns, `${s.metadata.name}-sa`, serverTarget(s.metadata.name), [{ kind: 'ServiceAccount', name: 'debug', namespace: 'tools' }]),
      );
    });
    aps.push(mkAuthorizationPolicy(ns, `${group}-ns-office`, { kind: 'Namespace', name: ns }, [networkRef(`${group}-office`)]));
    aps.push(
      mkAuthorizationPolicy(ns, `${group}-ns-ingress`, { kind: 'Namespace', name: ns }, [
        { kind: 'ServiceAccount', name: 'ingress', namespace: 'ingress-nginx' },
      ]),
    );
    for (const r of routes) {
      aps.push(
        mkAuthorizationPolicy(ns, `${r.metadata.name}-authz`, { group: POLICY_GROUP, kind: 'HTTPRoute', name: r.metadata.name }, [
          meshTLSRef(`${group}-frontends`),
        ]),
      );
    }
    resources.push(...aps);
    if (g === 0) {
      const ap = aps[0] as AuthorizationPolicy;
      apVariants = [ap, { ...ap, spec: { ...ap.spec, requiredAuthenticationRefs: [meshTLSRef(`${group}-any`)] } }];
    }

    // ServerAuthorizations (legacy): admin-tier Servers by label for Prometheus, one by name.
    resources.push(
      mkServerAuthorization(ns, `${group}-prometheus-admin`, {
        server: { selector: { matchLabels: { 'bench/group': group, 'policy-tier': 'admin' } } },
        client: { unauthenticated: false, meshTLS: { unauthenticatedTLS: false, serviceAccounts: [{ name: 'prometheus', namespace: 'monitoring' }] } },
      }),
      mkServerAuthorization(ns, `${group}-legacy-http`, {
        server: { name: `${apps[5]}-http` },
        client: { unauthenticated: true, networks: [{ net: { ip: '10.0.0.0', prefixLen: 8 }, except: [] }] },
      }),
    );
  }
  if (apVariants === undefined || serverVariants === undefined || podVariants === undefined) throw new Error('scenario: variants not generated');
  const counts: Record<string, number> = {};
  for (const r of resources) counts[r.kind] = (counts[r.kind] ?? 0) + 1;
  counts.namespaces = new Set(resources.map((r) => r.metadata.namespace)).size;
  return { name, resources, pods, counts, apVariants, serverVariants, podVariants };
}

/** Builds an index from the scenario in one transaction and materialises every declared port. */
export function buildIndex(s: Scenario): { index: PolicyIndex; cells: number; checksum: number } {
  const index = new PolicyIndex(CLUSTER_CONFIG);
  index.update((tx) => {
    for (const r of s.resources) tx.apply(r);
  });
  let cells = 0;
  let checksum = 0;
  for (const p of s.pods) {
    for (const port of p.ports) {
      const cell = index.lookup(p.namespace, p.name, port);
      if (cell === undefined) throw new Error(`index: pod ${p.namespace}/${p.name} is not indexed`);
      cells++;
      checksum += cell.value.authorizations.length;
    }
  }
  return { index, cells, checksum };
}
