import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { authorizeConnection, authorizeRequest, clientInfo, compileServer, type Decision, type InboundServer, parseCidr } from '../core/index.js';
import { decodeResource, parseManifestText, type Resource } from '../manifest/index.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [{ net: parseCidr('10.0.0.0/8') ?? assert.fail(), except: [] }],
  probeNetworks: [{ net: parseCidr('0.0.0.0/0') ?? assert.fail(), except: [] }],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const id = (sa: string, ns = 'app') => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;

function resources(text: string): Resource[] {
  const r = parseManifestText(text, 't.yaml');
  return r.documents.map((d) => {
    const res = decodeResource(d);
    assert.equal(res.status, 'ok', JSON.stringify(res.diagnostics));
    return (res as { resource: Resource }).resource;
  });
}

/** A meshed pod of ServiceAccount `sa` declaring `ports` (`name:number`), with a readiness probe on /ready. */
const pod = (name: string, sa: string, ports: string[], annotations = '{}') => `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: app, labels: {app: ${name}, linkerd.io/control-plane-ns: linkerd}, annotations: ${annotations}}
spec:
  serviceAccountName: ${sa}
  containers:
  - name: app
    ports: [${ports.map((p) => `{name: ${p.split(':')[0]}, containerPort: ${p.split(':')[1]}}`).join(', ')}]
    readinessProbe: {httpGet: {port: ${ports[0]?.split(':')[1]}, path: /ready}}
---
`;

const ROUTES = `apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: api-routes, namespace: app}
spec:
  matches:
  - {name: api, pathRegex: "/api/.*", methods: ["*"]}
  - {name: metrics, pathRegex: /metrics, methods: [GET]}
  - {name: insiders, pathRegex: "/beta/.*", headers: {cookie: "(.*;)?type=insider(;.*)?"}}
---
`;

const tt = (name: string, rules: string, sources: string[], extra = '', version = 'v1alpha3') => `apiVersion: access.smi-spec.io/${version}
kind: TrafficTarget
metadata: {name: ${name}, namespace: app}
spec:
  destination: {kind: ServiceAccount, name: api, namespace: app${extra}}
  rules: ${rules}
  sources: [${sources.map((s) => `{kind: ServiceAccount, name: ${s.split('/')[1] ?? s}, namespace: ${s.includes('/') ? s.split('/')[0] : 'app'}}`).join(', ')}]
---
`;

function indexOf(text: string): PolicyIndex {
  const index = new PolicyIndex(CONFIG);
  index.reset(resources(text));
  return index;
}

function portValue(index: PolicyIndex, port: number, podName = 'api'): InboundServer {
  const v = index.peek('app', podName, port)?.value;
  assert.ok(v);
  return v;
}

const mesh = (identity: string | undefined) =>
  clientInfo('10.1.2.3', identity === undefined ? { kind: 'none', reason: 'no_tls_from_remote' } : { kind: 'established', clientId: identity }) ??
  assert.fail();

function request(v: InboundServer, identity: string | undefined, method: string, path: string, headers: Record<string, string> = {}): Decision {
  return authorizeRequest(compileServer(v), mesh(identity), { method, path, headers });
}

const verdict = (d: Decision) => (d.allowed ? `allow ${d.route?.name ?? '-'} ${d.authz.kind}/${d.authz.name}` : `deny ${d.kind}`);

const API_POD = pod('api', 'api', ['http:8080', 'admin:9090']);

describe('SMI TrafficTargets compile into the inbound values the proxy enforces', () => {
  it('a TrafficTarget without port governs every port of the destination: deny by default, its matches admit its sources', () => {
    const index = indexOf(API_POD + ROUTES + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api]}]', ['web']));
    for (const port of [8080, 9090, 7777]) {
      const v = portValue(index, port);
      assert.deepEqual(v.meta, { group: 'access.smi-spec.io', kind: 'traffictarget', name: 'web-api' });
      assert.deepEqual(v.authorizations, [], 'no whole-port authorization');
    }
    const v = portValue(index, 8080);
    assert.equal(verdict(request(v, id('web'), 'POST', '/api/vote?x=1')), 'allow api-routes:api traffictarget/web-api');
    assert.equal(verdict(request(v, id('other'), 'POST', '/api/vote')), 'deny http403');
    // Whole-path match, as OSM: /api alone is not /api/.*; nor is a match the rule did not name.
    assert.equal(verdict(request(v, id('web'), 'GET', '/api')), 'deny http403');
    assert.equal(verdict(request(v, id('web'), 'GET', '/metrics')), 'deny http403');
    assert.equal(verdict(request(v, id('web'), 'GET', '/x/api/y')), 'deny http403');
    // Non-HTTP traffic has no whole-port authorization.
    assert.equal(authorizeConnection(compileServer(v), mesh(id('web'))).allowed, false);
    // The kubelet's probe stays admitted.
    assert.equal(verdict(authorizeRequest(compileServer(v), mesh(undefined), { method: 'GET', path: '/ready', headers: {} })), 'allow probe default/probe');
  });

  it('omitted matches mean all of the group; methods and header regexes must hold', () => {
    const index = indexOf(API_POD + ROUTES + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes}]', ['web']));
    const v = portValue(index, 8080);
    assert.equal(verdict(request(v, id('web'), 'GET', '/metrics')), 'allow api-routes:metrics traffictarget/web-api');
    assert.equal(verdict(request(v, id('web'), 'POST', '/metrics')), 'deny http403');
    assert.equal(verdict(request(v, id('web'), 'GET', '/beta/x', { cookie: 'a=b;type=insider' })), 'allow api-routes:insiders traffictarget/web-api');
    assert.equal(verdict(request(v, id('web'), 'GET', '/beta/x', { cookie: 'type=outsider' })), 'deny http403');
  });

  it('a match without pathRegex admits every path (OSM reads it as .*), ahead of the catch-all route', () => {
    const headerOnly = `apiVersion: specs.smi-spec.io/v1alpha2
kind: HTTPRouteGroup
metadata: {name: insiders, namespace: app}
matches: [{name: cookie, headers: {cookie: "type=insider"}}, {name: any}]
---
`;
    const index = indexOf(
      API_POD +
        headerOnly +
        tt('bot-any', '[{kind: HTTPRouteGroup, name: insiders, matches: [any]}]', ['bot']) +
        tt('web-insiders', '[{kind: HTTPRouteGroup, name: insiders, matches: [cookie]}]', ['web']),
    );
    const v = portValue(index, 8080);
    assert.equal(verdict(request(v, id('bot'), 'PUT', '/a/b')), 'allow insiders:any traffictarget/bot-any');
    assert.equal(verdict(request(v, id('bot'), 'GET', '/')), 'allow insiders:any traffictarget/bot-any');
    assert.equal(verdict(request(v, id('web'), 'GET', '/x', { cookie: 'type=insider' })), 'allow insiders:cookie traffictarget/web-insiders');
    assert.equal(verdict(request(v, id('web'), 'GET', '/x')), 'deny http403');
  });

  it('v1alpha1/v1alpha2 destination.port limits the TrafficTarget to that port (number or container port name)', () => {
    const byNumber = indexOf(API_POD + ROUTES + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes}]', ['web'], ', port: 8080', 'v1alpha2'));
    assert.equal(portValue(byNumber, 8080).meta.kind, 'traffictarget');
    assert.deepEqual(portValue(byNumber, 9090).meta, { group: '', kind: 'default', name: 'all-unauthenticated' });
    const byName = indexOf(`${API_POD}${ROUTES}apiVersion: access.smi-spec.io/v1alpha1
kind: TrafficTarget
metadata: {name: web-api, namespace: app}
destination: {kind: ServiceAccount, name: api, namespace: app, port: admin}
specs: [{kind: HTTPRouteGroup, name: api-routes}]
sources: [{kind: ServiceAccount, name: web}]
`);
    assert.equal(portValue(byName, 9090).meta.kind, 'traffictarget');
    assert.equal(portValue(byName, 8080).meta.kind, 'default');
  });

  it('several TrafficTargets on one destination add up; one match named by both admits both sources', () => {
    const index = indexOf(
      API_POD +
        ROUTES +
        tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api]}]', ['web']) +
        tt('bot-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api, metrics]}]', ['emojivoto/bot']),
    );
    const v = portValue(index, 8080);
    assert.equal(v.meta.name, 'bot-api,web-api');
    assert.equal(verdict(request(v, id('web'), 'GET', '/api/x')), 'allow api-routes:api traffictarget/web-api');
    assert.equal(verdict(request(v, id('bot', 'emojivoto'), 'GET', '/api/x')), 'allow api-routes:api traffictarget/bot-api');
    assert.equal(verdict(request(v, id('bot', 'emojivoto'), 'GET', '/metrics')), 'allow api-routes:metrics traffictarget/bot-api');
    assert.equal(verdict(request(v, id('web'), 'GET', '/metrics')), 'deny http403');
  });

  it('a TCPRoute alone admits its sources on its whole ports; with HTTP rules it only picks the ports', () => {
    const tcp = `apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: http-port, namespace: app}
spec: {matches: {ports: [8080]}}
---
`;
    const whole = indexOf(API_POD + tcp + tt('db', '[{kind: TCPRoute, name: http-port}]', ['web']));
    const v = portValue(whole, 8080);
    assert.deepEqual(
      v.authorizations.map((a) => a.meta.name),
      ['db'],
    );
    assert.equal(authorizeConnection(compileServer(v), mesh(id('web'))).allowed, true);
    assert.equal(authorizeConnection(compileServer(v), mesh(id('other'))).allowed, false);
    assert.equal(verdict(request(v, id('web'), 'DELETE', '/anything')), 'allow default traffictarget/db');
    assert.equal(portValue(whole, 9090).meta.kind, 'default', 'a port the TCPRoute does not list is not governed');

    const scoped = indexOf(
      API_POD + ROUTES + tcp + tt('prom', '[{kind: TCPRoute, name: http-port}, {kind: HTTPRouteGroup, name: api-routes, matches: [metrics]}]', ['prometheus']),
    );
    const s = portValue(scoped, 8080);
    assert.deepEqual(s.authorizations, []);
    assert.equal(verdict(request(s, id('prometheus'), 'GET', '/metrics')), 'allow api-routes:metrics traffictarget/prom');
    assert.equal(verdict(request(s, id('prometheus'), 'GET', '/api/x')), 'deny http403');
    assert.equal(portValue(scoped, 9090).meta.kind, 'default');
  });

  it('on an opaque port HTTP rules admit nothing, TCPRoutes still admit the whole port', () => {
    const opaquePod = pod('api', 'api', ['http:8080'], '{config.linkerd.io/opaque-ports: "8080"}');
    const http = indexOf(opaquePod + ROUTES + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes}]', ['web']));
    const v = portValue(http, 8080);
    assert.deepEqual(v.protocol, { kind: 'opaque' });
    assert.equal(authorizeConnection(compileServer(v), mesh(id('web'))).allowed, false);
    const tcp = indexOf(
      `${opaquePod}apiVersion: specs.smi-spec.io/v1alpha3\nkind: TCPRoute\nmetadata: {name: all, namespace: app}\nspec: {}\n---\n${tt('web-api', '[{kind: TCPRoute, name: all}]', ['web'])}`,
    );
    assert.equal(authorizeConnection(compileServer(portValue(tcp, 8080)), mesh(id('web'))).allowed, true);
  });

  it('a Linkerd Server on the port wins; SMI governs the ports no Server binds', () => {
    const server = `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: api-http, namespace: app}
spec: {podSelector: {matchLabels: {app: api}}, port: 8080, proxyProtocol: HTTP/1}
---
`;
    const index = indexOf(API_POD + ROUTES + server + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes}]', ['web']));
    assert.deepEqual(portValue(index, 8080).meta, { group: 'policy.linkerd.io', kind: 'server', name: 'api-http' });
    assert.equal(portValue(index, 9090).meta.kind, 'traffictarget');
  });

  it('fails closed on a missing HTTPRouteGroup, ignores a foreign destination namespace and non-ServiceAccount sources', () => {
    const missing = indexOf(API_POD + tt('web-api', '[{kind: HTTPRouteGroup, name: nope}]', ['web']));
    const v = portValue(missing, 8080);
    assert.equal(v.meta.kind, 'traffictarget');
    assert.equal(verdict(request(v, id('web'), 'GET', '/api/x')), 'deny http403');
    const foreign = indexOf(
      API_POD + ROUTES + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes}]', ['web']).replace('namespace: app}\n  rules', 'namespace: other}\n  rules'),
    );
    assert.equal(portValue(foreign, 8080).meta.kind, 'default');
    const group = indexOf(
      API_POD +
        ROUTES +
        tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes}]', ['web']).replace('{kind: ServiceAccount, name: web', '{kind: Group, name: web'),
    );
    assert.equal(verdict(request(portValue(group, 8080), id('web'), 'GET', '/api/x')), 'deny http403');
  });

  it('follows edits: a new TrafficTarget republishes, deleting it restores the default, an unrelated edit keeps the value', () => {
    const index = indexOf(API_POD + ROUTES);
    const cell = index.lookup('app', 'api', 8080);
    assert.ok(cell);
    assert.equal(cell.value.meta.kind, 'default');
    const [target] = resources(tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api]}]', ['web']));
    assert.ok(target);
    index.apply(target);
    assert.equal(cell.value.meta.kind, 'traffictarget');
    const before = cell.value;
    const [other] = resources(`apiVersion: specs.smi-spec.io/v1alpha4\nkind: TCPRoute\nmetadata: {name: unused, namespace: app}\nspec: {}\n`);
    assert.ok(other);
    index.apply(other);
    assert.equal(cell.value, before, 'same value, same object');
    index.delete({ kind: 'TrafficTarget', group: '', namespace: 'app', name: 'web-api' });
    assert.equal(cell.value.meta.kind, 'default');
  });

  it('an edit republishes exactly the pods it can affect: a route object edit reaches the TrafficTargets naming it, a moved destination both ServiceAccounts', () => {
    const index = indexOf(
      API_POD + pod('db', 'db', ['sql:5432']) + ROUTES + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api]}]', ['web']),
    );
    const api = index.lookup('app', 'api', 8080);
    const db = index.lookup('app', 'db', 5432);
    assert.ok(api && db);
    assert.equal(db.value.meta.kind, 'default');
    const [narrower] = resources(ROUTES.replace('"/api/.*"', '"/api/v2/.*"'));
    assert.ok(narrower);
    index.apply(narrower);
    assert.equal(verdict(request(api.value, id('web'), 'GET', '/api/v1')), 'deny http403');
    assert.equal(verdict(request(api.value, id('web'), 'GET', '/api/v2/x')), 'allow api-routes:api traffictarget/web-api');
    const [moved] = resources(
      tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api]}]', ['web']).replace('name: api, namespace: app}', 'name: db, namespace: app}'),
    );
    assert.ok(moved);
    index.apply(moved);
    assert.equal(api.value.meta.kind, 'default');
    assert.deepEqual(db.value.meta, { group: 'access.smi-spec.io', kind: 'traffictarget', name: 'web-api' });
  });
});
