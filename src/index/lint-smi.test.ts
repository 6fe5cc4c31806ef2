import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseCidr } from '../core/index.js';
import { decodeResource, parseManifestText, type Resource } from '../manifest/index.js';
import { lintSmi } from './lint-smi.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [{ net: parseCidr('10.0.0.0/8') ?? assert.fail(), except: [] }],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

/** `code@line:col message` of each SMI finding for the manifests in `text`. */
function lint(text: string): string[] {
  const docs = parseManifestText(text, 't.yaml').documents.map(decodeResource);
  const resources = docs.flatMap((d) => (d.status === 'ok' ? [d.resource as Resource] : []));
  assert.equal(resources.length, docs.length, 'every document decodes');
  const index = new PolicyIndex(CONFIG);
  index.reset(resources);
  return lintSmi(index).map((d) => `${d.code}@${d.source?.line}:${d.source?.col} ${d.message}`);
}

const POD = `apiVersion: v1
kind: Pod
metadata: {name: api-0, namespace: app, labels: {app: api, linkerd.io/control-plane-ns: linkerd}, annotations: {config.linkerd.io/opaque-ports: "5432"}}
spec:
  serviceAccountName: api
  containers: [{name: app, ports: [{name: http, containerPort: 8080}, {name: db, containerPort: 5432}]}]
---
`;

describe('lintSmi', () => {
  it('reports unresolved references, foreign subjects and UDPRoutes at the field that names them', () => {
    const found = lint(`${POD}apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: routes, namespace: app}
spec:
  matches: [{name: api, pathRegex: /api/.*}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: t, namespace: app}
spec:
  destination: {kind: ServiceAccount, name: api, namespace: app}
  rules:
  - {kind: HTTPRouteGroup, name: routes, matches: [api, metrics]}
  - {kind: HTTPRouteGroup, name: missing}
  - {kind: TCPRoute, name: gone}
  - {kind: UDPRoute, name: dns}
  sources:
  - {kind: ServiceAccount, name: web}
  - {kind: Group, name: admins}
`);
    assert.deepEqual(found, [
      'SMI004@26:12 source kind Group is not ServiceAccount; ward identifies callers only by ServiceAccount, so this source is ignored',
      'SMI003@20:57 rule 0 names match "metrics", which HTTPRouteGroup routes does not define; that match admits nothing',
      'SMI002@21:34 rule 1 names HTTPRouteGroup missing, which does not exist in namespace app; the rule admits nothing',
      'SMI002@22:28 rule 2 names TCPRoute gone, which does not exist in namespace app; the rule admits nothing',
      'SMI009@23:5 rule 3 names UDPRoute dns, which ward cannot enforce: its proxy carries TCP only, so the rule admits nothing',
      'SMI008@20:3 TrafficTarget t has only HTTP rules for port 5432 of pod app/api-0, which is opaque; the proxy sees no requests there, so it admits nothing',
    ]);
  });

  it('says a Linkerd Server wins on a governed port, and flags destinations without pods, other namespaces and literal paths', () => {
    const found = lint(`${POD}apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: api-http, namespace: app}
spec: {podSelector: {matchLabels: {app: api}}, port: http, proxyProtocol: HTTP/1}
---
apiVersion: specs.smi-spec.io/v1alpha2
kind: HTTPRouteGroup
metadata: {name: routes, namespace: app}
matches: [{name: metrics, pathRegex: /metrics}]
---
apiVersion: access.smi-spec.io/v1alpha1
kind: TrafficTarget
metadata: {name: t, namespace: app}
destination: {kind: ServiceAccount, name: api, namespace: app, port: 8080}
specs: [{kind: HTTPRouteGroup, name: routes}]
sources: [{kind: ServiceAccount, name: prometheus}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: nobody, namespace: app}
spec:
  destination: {kind: ServiceAccount, name: ghost}
  rules: [{kind: HTTPRouteGroup, name: routes}]
  sources: [{kind: ServiceAccount, name: web}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: elsewhere, namespace: app}
spec:
  destination: {kind: ServiceAccount, name: api, namespace: prod}
  rules: [{kind: HTTPRouteGroup, name: routes}]
  sources: []
`);
    assert.deepEqual(found, [
      'SMI010@16:38 pathRegex "/metrics" must match the whole path (as OSM matches it), so it admits /metrics alone, not the paths below it',
      'SMI007@21:14 Server api-http and TrafficTarget t both govern pod app/api-0 port 8080; Server api-http wins, so the TrafficTarget has no effect there',
      'SMI006@29:45 destination ServiceAccount app/ghost has no meshed pod; the TrafficTarget governs nothing yet',
      "SMI005@37:61 destination namespace prod is not the TrafficTarget's namespace app; the TrafficTarget is ignored (as OSM ignores it)",
      'SMI011@39:12 TrafficTarget elsewhere admits nothing: it names no ServiceAccount source',
    ]);
  });

  it('warns when one request satisfies matches of TrafficTargets with different sources (the proxy decides on one)', () => {
    const found = lint(`${POD}apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: routes, namespace: app}
spec:
  matches: [{name: all, pathRegex: /api/.*}, {name: v1, pathRegex: /api/v1, methods: [GET]}, {name: other, pathRegex: /other}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: web, namespace: app}
spec:
  destination: {kind: ServiceAccount, name: api}
  rules: [{kind: HTTPRouteGroup, name: routes, matches: [all, other]}]
  sources: [{kind: ServiceAccount, name: web}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: bot, namespace: app}
spec:
  destination: {kind: ServiceAccount, name: api}
  rules: [{kind: HTTPRouteGroup, name: routes, matches: [v1, other]}]
  sources: [{kind: ServiceAccount, name: bot}]
`).filter((f) => !f.startsWith('SMI010') && !f.startsWith('SMI008'));
    assert.deepEqual(found, [
      'SMI013@19:10 on pod app/api-0 port 8080, GET /api/v1 matches routes:v1 and routes:all; the proxy picks routes:v1 alone, so sources only routes:all admits are denied there',
    ]);
  });

  it('does not call a destination podless when the namespace has no pod at all (policy checked alone)', () => {
    const tt = `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: t, namespace: app}
spec:
  destination: {kind: ServiceAccount, name: ghost}
  rules: [{kind: TCPRoute, name: all}]
  sources: [{kind: ServiceAccount, name: web}]
---
apiVersion: specs.smi-spec.io/v1alpha3
kind: TCPRoute
metadata: {name: all, namespace: app}
`;
    assert.deepEqual(lint(tt), []);
    assert.deepEqual(
      lint(POD + tt).map((f) => f.slice(0, 6)),
      ['SMI006'],
    );
  });

  it('warns about regexes with nested repetition, which JavaScript may run in exponential time', () => {
    const found = lint(`apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: routes, namespace: app}
spec:
  matches: [{name: a, pathRegex: "/(a+)+$", headers: {x-id: "([0-9]+-?)*"}}]
`);
    assert.deepEqual(
      found.map((f) => f.slice(0, f.indexOf(' '))),
      ['SMI014@5:34', 'SMI014@5:54'],
    );
  });

  it('finds nothing where no SMI object exists', () => {
    assert.deepEqual(lint(POD), []);
  });
});
