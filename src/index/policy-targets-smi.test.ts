/**
 * `ward authz` of SMI objects: the pods, ports and routes a TrafficTarget, HTTPRouteGroup,
 * TCPRoute or UDPRoute applies to, read from what the index compiled and publishes, and the
 * notes saying when one applies to less than it seems.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { authorizeRequest, clientInfo, compileServer, parseCidr } from '../core/index.js';
import { admitDocuments, decodeResource, dedupeResources, loadManifests, namespacesOf, parseManifestText, podsOf, type Resource } from '../manifest/index.js';
import { authzView } from './authz-view.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';
import { type PolicyTargetsResult, policyKindOf, policyTargetsView } from './policy-targets.js';
import { QueryError } from './query-error.js';
import { parseResourceArg } from './targets.js';

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [{ net: parseCidr('10.0.0.0/8')!, except: [] }],
  probeNetworks: [{ net: parseCidr('0.0.0.0/0')!, except: [] }],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const id = (sa: string, ns = 'app') => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;

/** A meshed pod of ServiceAccount `sa` declaring `ports` (`name:number`). */
const pod = (name: string, sa: string, ports: string[], annotations = '{}') => `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: app, labels: {app: ${name}, linkerd.io/control-plane-ns: linkerd}, annotations: ${annotations}}
spec:
  serviceAccountName: ${sa}
  containers:
  - name: app
    ports: [${ports.map((p) => `{name: ${p.split(':')[0]}, containerPort: ${p.split(':')[1]}}`).join(', ')}]
---
`;

const ROUTES = `apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: api-routes, namespace: app}
spec:
  matches:
  - {name: api, pathRegex: "/api/.*", methods: ["*"]}
  - {name: metrics, pathRegex: /metrics, methods: [GET]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: other-routes, namespace: app}
spec:
  matches:
  - {name: status, pathRegex: /status, methods: [GET]}
  - {name: same-metrics, pathRegex: /metrics, methods: [GET]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: http-port, namespace: app}
spec: {matches: {ports: [8080]}}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: UDPRoute
metadata: {name: dns, namespace: app}
spec: {matches: {ports: [53]}}
---
`;

const tt = (
  name: string,
  rules: string,
  sources: string[],
  destination = '{kind: ServiceAccount, name: api, namespace: app}',
) => `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: ${name}, namespace: app}
spec:
  destination: ${destination}
  rules: ${rules}
  sources: [${sources.map((s) => `{kind: ServiceAccount, name: ${s}, namespace: app}`).join(', ')}]
---
`;

const API_POD = pod('api-0', 'api', ['http:8080', 'admin:9090']);

function mkView(text: string) {
  const loaded = parseManifestText(text, 'smi.yaml');
  assert.deepStrictEqual(loaded.diagnostics, []);
  const resources = loaded.documents.map((d) => {
    const r = decodeResource(d);
    assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
    return (r as { resource: Resource }).resource;
  });
  const index = new PolicyIndex(CONFIG);
  index.reset(resources);
  return { config: CONFIG, index };
}

const one = (r: PolicyTargetsResult) => {
  assert.equal(r.policies.length, 1);
  return r.policies[0]!;
};

/** Rows as `pod:port server route`, with the note of an inactive row. */
const rows = (r: PolicyTargetsResult) =>
  one(r).appliesTo.map((x) => `${x.pod}:${x.port ?? '-'} ${x.server ?? '-'} ${x.route ?? '*'}${x.active ? '' : ` (${x.note})`}`);

describe('policyKindOf for SMI kinds', () => {
  it('takes the singular, plural and the short names the SMI CRDs declare, and kind.group', () => {
    for (const w of ['traffictarget', 'TrafficTargets', 'tt', 'traffictargets.access.smi-spec.io', 'traffictargets.v1alpha3.access.smi-spec.io']) {
      assert.equal(policyKindOf(w), 'TrafficTarget', w);
    }
    for (const w of ['httproutegroup', 'httproutegroups', 'htr', 'httproutegroups.specs.smi-spec.io']) assert.equal(policyKindOf(w), 'HTTPRouteGroup', w);
    for (const w of ['tcproute', 'tcproutes', 'tr', 'tcproutes.specs.smi-spec.io']) assert.equal(policyKindOf(w), 'TCPRoute', w);
    for (const w of ['udproute', 'udproutes', 'ur', 'udproutes.v1alpha4.specs.smi-spec.io']) assert.equal(policyKindOf(w), 'UDPRoute', w);
  });

  it('a kind of another group is not the SMI kind', () => {
    for (const w of ['tcproutes.gateway.networking.k8s.io', 'udproute.gateway.networking.k8s.io', 'traffictargets.specs.smi-spec.io', 'tt.x', 'htr.']) {
      assert.equal(policyKindOf(w), undefined, w);
    }
  });

  it('a workload query given an SMI kind says what it is; the unknown-kind message lists them', () => {
    assert.throws(() => parseResourceArg('tt/web'), /"tt\/web" is a TrafficTarget, not a workload/);
    assert.throws(() => parseResourceArg('svc/web'), /traffictarget \(tt\), httproutegroup \(htr\), tcproute \(tr\), udproute \(ur\)\)$/);
  });
});

describe('ward authz of the emojivoto lockdown written in SMI', () => {
  const EX = (p: string) => fileURLToPath(new URL(`../../examples/${p}`, import.meta.url));
  const docs = loadManifests([EX('emojivoto/app'), EX('emojivoto-smi/policy')]);
  const admitted = dedupeResources(admitDocuments(docs.documents).admitted).resources;
  // Workloads stand for their pods, as the CLI's workspace builds them.
  const { pods } = podsOf(admitted, namespacesOf(admitted), { controlPlaneNamespace: 'linkerd' });
  const index = new PolicyIndex(CONFIG);
  index.reset([...admitted.filter((r) => r.kind !== 'Pod'), ...pods] as Resource[]);
  const view = { config: CONFIG, index };
  const all = (kind: Parameters<typeof policyTargetsView>[1]) =>
    policyTargetsView(view, kind, undefined, 'emojivoto').policies.flatMap((o) =>
      o.appliesTo.map((x) => `${o.name} ${x.pod}:${x.port} ${x.server} ${x.route ?? '*'}${x.active ? '' : ' inactive'}`),
    );

  it('each TrafficTarget governs its destination pods on the TCPRoute port, through its match', () => {
    assert.deepStrictEqual(all('TrafficTarget'), [
      'emoji-from-web emoji-0:8080 traffictarget/emoji-from-web httproutegroup/emoji-service:any-method',
      'voting-from-web voting-0:8080 traffictarget/voting-from-web httproutegroup/voting-service:any-method',
      'web-from-emojivoto web-0:8080 traffictarget/web-from-emojivoto httproutegroup/web-app:everything',
    ]);
    const web = one(policyTargetsView(view, 'TrafficTarget', 'web-from-emojivoto', 'emojivoto'));
    assert.equal(
      web.summary,
      'destination ServiceAccount web; sources ServiceAccount web, ServiceAccount emoji, ServiceAccount voting, ServiceAccount vote-bot; rules TCPRoute app-port, HTTPRouteGroup web-app (every match)',
    );
    assert.equal(web.appliesTo[0]?.via, 'TrafficTarget web-from-emojivoto → ServiceAccount web → HTTPRouteGroup web-app match everything');
    assert.equal(web.appliesTo[0]?.workload, 'Deployment/web');
    assert.deepStrictEqual(web.notes, []);
  });

  it('the admin port stays with the linkerd-admin Server: no TrafficTarget row names 4191', () => {
    assert.ok(all('TrafficTarget').every((r) => !r.includes(':4191')));
  });

  it('an HTTPRouteGroup reaches pods through the TrafficTargets naming it', () => {
    const r = policyTargetsView(view, 'HTTPRouteGroup', 'emoji-service', 'emojivoto');
    assert.deepStrictEqual(rows(r), ['emoji-0:8080 traffictarget/emoji-from-web httproutegroup/emoji-service:any-method']);
    assert.deepStrictEqual(one(r).usedBy, ['emojivoto/emoji-from-web']);
    assert.equal(one(r).summary, 'matches any-method (POST /emojivoto\\.v1\\.EmojiService/.*)');
  });

  it('a TCPRoute lists the ports it admits through each TrafficTarget, and says the routes decide', () => {
    const r = one(policyTargetsView(view, 'TCPRoute', 'app-port', 'emojivoto'));
    assert.equal(r.summary, 'port 8080');
    assert.deepStrictEqual(r.usedBy, ['emojivoto/emoji-from-web', 'emojivoto/voting-from-web', 'emojivoto/web-from-emojivoto']);
    assert.deepStrictEqual(
      r.appliesTo.map((x) => `${x.pod}:${x.port} ${x.route}`),
      [
        'emoji-0:8080 httproutegroup/emoji-service:any-method',
        'voting-0:8080 httproutegroup/voting-service:any-method',
        'web-0:8080 httproutegroup/web-app:everything',
      ],
    );
    assert.deepStrictEqual(r.notes, [
      "TrafficTargets emoji-from-web, voting-from-web, web-from-emojivoto also have HTTPRouteGroup rules: this TCPRoute only picks the ports, those rules' routes admit the sources",
    ]);
  });

  it('every route row is a route of the published policy carrying that TrafficTarget', () => {
    for (const o of policyTargetsView(view, 'TrafficTarget', undefined, 'emojivoto').policies) {
      for (const x of o.appliesTo) {
        const port = authzView(view, `pod/${x.pod}`, 'emojivoto');
        assert.ok('pods' in port);
        const p = port.pods[0]?.ports.find((q) => q.port === x.port);
        const route = p?.routes.find((q) => `${q.kind}/${q.name}` === x.route);
        assert.ok(
          route?.authorizations.some((a) => a.kind === 'traffictarget' && a.name === o.name),
          `${o.name} ${x.pod}:${x.port} ${x.route}`,
        );
      }
    }
  });

  it('wherever the lockdown suite expects a TrafficTarget to admit a caller, its view lists that pod, port and route', () => {
    type Case = { to: { workload?: string; pod?: string; port: number }; expect: { decision: string; authz?: string; route?: string } };
    const suite = parse(readFileSync(EX('emojivoto-smi/lockdown-test.yaml'), 'utf8')) as { tests: Case[] };
    let checked = 0;
    for (const c of suite.tests) {
      const authz = c.expect.authz;
      if (c.expect.decision !== 'allow' || authz?.startsWith('traffictarget/') !== true) continue;
      const pod = c.to.pod?.split('/')[1] ?? `${c.to.workload?.split('/')[1]}-0`;
      const listed = all('TrafficTarget').filter((r) => r.startsWith(`${authz.slice('traffictarget/'.length)} ${pod}:${c.to.port} `));
      assert.ok(
        listed.some((r) => r.endsWith(` ${c.expect.route ?? '*'}`)),
        `${authz} admits ${pod}:${c.to.port} on ${c.expect.route}, but ward authz lists ${JSON.stringify(listed)}`,
      );
      checked++;
    }
    assert.ok(checked >= 3, `only ${checked} admissions checked`);
  });

  it('bare kinds with nothing of theirs are a not-found query error', () => {
    assert.throws(
      () => policyTargetsView(view, 'UDPRoute', undefined, 'emojivoto'),
      (e: unknown) => e instanceof QueryError && e.code === 'ERR_QUERY_NOT_FOUND' && e.message === 'no UDPRoutes in namespace emojivoto',
    );
    assert.throws(
      () => policyTargetsView(view, 'TrafficTarget', 'web', 'emojivoto'),
      /^QueryError: TrafficTarget web not found in namespace emojivoto \(TrafficTargets there: emoji-from-web, voting-from-web, web-from-emojivoto\)$/,
    );
  });
});

describe('ward authz of SMI objects: what each applies to', () => {
  it('a TrafficTarget without port governs every published port; each named match is a route row', () => {
    const view = mkView(API_POD + ROUTES + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes}]', ['web']));
    assert.deepStrictEqual(rows(policyTargetsView(view, 'TrafficTarget', 'web-api', 'app')), [
      'api-0:8080 traffictarget/web-api httproutegroup/api-routes:api',
      'api-0:8080 traffictarget/web-api httproutegroup/api-routes:metrics',
      'api-0:9090 traffictarget/web-api httproutegroup/api-routes:api',
      'api-0:9090 traffictarget/web-api httproutegroup/api-routes:metrics',
    ]);
  });

  it('a TCPRoute-only TrafficTarget admits its sources on the whole port, only on the TCPRoute ports', () => {
    const view = mkView(API_POD + ROUTES + tt('web-tcp', '[{kind: TCPRoute, name: http-port}]', ['web']));
    assert.deepStrictEqual(rows(policyTargetsView(view, 'TrafficTarget', 'web-tcp', 'app')), ['api-0:8080 traffictarget/web-tcp *']);
    assert.deepStrictEqual(rows(policyTargetsView(view, 'TCPRoute', 'http-port', 'app')), ['api-0:8080 traffictarget/web-tcp *']);
    assert.equal(
      one(policyTargetsView(view, 'TCPRoute', 'http-port', 'app')).appliesTo[0]?.via,
      'TCPRoute http-port → TrafficTarget web-tcp → ServiceAccount api',
    );
  });

  it('an HTTPRouteGroup lists only its own matches, not those of other groups the TrafficTarget names', () => {
    const view = mkView(
      API_POD +
        ROUTES +
        tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api]}, {kind: HTTPRouteGroup, name: other-routes, matches: [status]}]', ['web']),
    );
    assert.deepStrictEqual(rows(policyTargetsView(view, 'HTTPRouteGroup', 'other-routes', 'app')), [
      'api-0:8080 traffictarget/web-api httproutegroup/other-routes:status',
      'api-0:9090 traffictarget/web-api httproutegroup/other-routes:status',
    ]);
    assert.equal(
      one(policyTargetsView(view, 'HTTPRouteGroup', 'other-routes', 'app')).appliesTo[0]?.via,
      'HTTPRouteGroup other-routes match status → TrafficTarget web-api → ServiceAccount api',
    );
  });

  it('matches of equal content share one route, and the row says so', () => {
    const view = mkView(
      API_POD +
        ROUTES +
        tt('a-metrics', '[{kind: TCPRoute, name: http-port}, {kind: HTTPRouteGroup, name: api-routes, matches: [metrics]}]', ['prom']) +
        tt('b-metrics', '[{kind: TCPRoute, name: http-port}, {kind: HTTPRouteGroup, name: other-routes, matches: [same-metrics]}]', ['scraper']),
    );
    const b = one(policyTargetsView(view, 'HTTPRouteGroup', 'other-routes', 'app'));
    assert.deepStrictEqual(
      b.appliesTo.map((x) => `${x.pod}:${x.port} ${x.server} ${x.route} ${x.note}`),
      [
        'api-0:8080 traffictarget/a-metrics,b-metrics httproutegroup/api-routes:metrics match other-routes:same-metrics equals api-routes:metrics: one route carries both',
      ],
    );
  });

  it('a UDPRoute applies to nothing, saying why', () => {
    const view = mkView(API_POD + ROUTES + tt('dns', '[{kind: UDPRoute, name: dns}]', ['web']));
    const u = one(policyTargetsView(view, 'UDPRoute', 'dns', 'app'));
    assert.equal(u.summary, 'port 53');
    assert.deepStrictEqual(u.appliesTo, []);
    assert.deepStrictEqual(u.usedBy, ['app/dns']);
    assert.deepStrictEqual(u.notes, [
      "ward's proxy intercepts and authorizes TCP only; UDP does not pass through it, so a UDPRoute admits nothing and governs no port (SMI009)",
    ]);
    const t = one(policyTargetsView(view, 'TrafficTarget', 'dns', 'app'));
    assert.deepStrictEqual(t.appliesTo, []);
    assert.deepStrictEqual(t.notes, ["its rules are all UDPRoutes and ward's proxy carries TCP only: it governs no port (SMI009)"]);
  });
});

describe('ward authz of SMI objects: notes when one applies to less than it seems', () => {
  it('SMI007: a Linkerd Server on a governed port wins, and the row says so', () => {
    const server = `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: admin, namespace: app}
spec: {podSelector: {matchLabels: {app: api-0}}, port: admin, proxyProtocol: HTTP/1}
---
`;
    const view = mkView(API_POD + ROUTES + server + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api]}]', ['web']));
    assert.deepStrictEqual(rows(policyTargetsView(view, 'TrafficTarget', 'web-api', 'app')), [
      'api-0:8080 traffictarget/web-api httproutegroup/api-routes:api',
      'api-0:9090 server/admin * (Server admin binds this port and wins over SMI: the TrafficTarget has no effect here (SMI007))',
    ]);
    assert.deepStrictEqual(rows(policyTargetsView(view, 'HTTPRouteGroup', 'api-routes', 'app')), [
      'api-0:8080 traffictarget/web-api httproutegroup/api-routes:api',
      'api-0:9090 server/admin * (Server admin binds this port and wins over SMI: the TrafficTarget has no effect here (SMI007))',
    ]);
  });

  it('SMI005: a destination in another namespace is ignored', () => {
    const view = mkView(
      API_POD + ROUTES + tt('elsewhere', '[{kind: TCPRoute, name: http-port}]', ['web'], '{kind: ServiceAccount, name: api, namespace: other}'),
    );
    const t = one(policyTargetsView(view, 'TrafficTarget', 'elsewhere', 'app'));
    assert.deepStrictEqual(t.appliesTo, []);
    assert.deepStrictEqual(t.notes, ['its destination is in namespace other, not app: it is ignored, as OSM ignores it (SMI005)']);
    assert.equal(view.index.peek('app', 'api-0', 8080)?.value.meta.kind, 'default', 'the index ignores it too');
    const r = one(policyTargetsView(view, 'TCPRoute', 'http-port', 'app'));
    assert.deepStrictEqual(r.appliesTo, []);
    assert.deepStrictEqual(r.notes, [
      'TrafficTarget elsewhere names it but is ignored (its destination is not a ServiceAccount of namespace app: SMI004, SMI005)',
      'the TrafficTargets naming it govern no pod port',
    ]);
  });

  it('SMI008: HTTP rules on an opaque port admit nothing there; a TCPRoute-only TrafficTarget still admits the port', () => {
    const opaque = pod('api-0', 'api', ['http:8080', 'admin:9090'], '{config.linkerd.io/opaque-ports: "8080"}');
    const view = mkView(
      opaque +
        ROUTES +
        tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [api]}]', ['web']) +
        tt('web-tcp', '[{kind: TCPRoute, name: http-port}]', ['db']),
    );
    assert.deepStrictEqual(rows(policyTargetsView(view, 'TrafficTarget', 'web-api', 'app')), [
      'api-0:8080 traffictarget/web-api,web-tcp * (the port is opaque, so HTTP rules admit nothing here (SMI008))',
      'api-0:9090 traffictarget/web-api httproutegroup/api-routes:api',
    ]);
    assert.deepStrictEqual(rows(policyTargetsView(view, 'HTTPRouteGroup', 'api-routes', 'app')), [
      'api-0:8080 traffictarget/web-api,web-tcp * (the port is opaque, so HTTP rules admit nothing here (SMI008))',
      'api-0:9090 traffictarget/web-api httproutegroup/api-routes:api',
    ]);
    assert.deepStrictEqual(rows(policyTargetsView(view, 'TrafficTarget', 'web-tcp', 'app')), ['api-0:8080 traffictarget/web-api,web-tcp *']);
  });

  it('SMI006: a destination ServiceAccount without pods applies to no pod', () => {
    const view = mkView(API_POD + ROUTES + tt('ghost', '[{kind: TCPRoute, name: http-port}]', ['web'], '{kind: ServiceAccount, name: ghost}'));
    const t = one(policyTargetsView(view, 'TrafficTarget', 'ghost', 'app'));
    assert.deepStrictEqual(t.appliesTo, []);
    assert.deepStrictEqual(t.notes, ['ServiceAccount ghost has no meshed pod in namespace app: it applies to no pod (SMI006)']);
  });

  it('SMI002 and SMI003: a missing route object or match admits nothing', () => {
    const view = mkView(
      API_POD +
        ROUTES +
        tt('missing', '[{kind: TCPRoute, name: nope}, {kind: HTTPRouteGroup, name: gone}, {kind: HTTPRouteGroup, name: api-routes, matches: [typo]}]', ['web']),
    );
    const t = one(policyTargetsView(view, 'TrafficTarget', 'missing', 'app'));
    assert.deepStrictEqual(t.notes, [
      'its rule names TCPRoute nope, which does not exist in namespace app: it counts as every port and admits nothing (SMI002)',
      'its rule names HTTPRouteGroup gone, which does not exist in namespace app: its matches admit nothing (SMI002)',
      'HTTPRouteGroup api-routes defines no match "typo" (SMI003)',
    ]);
    // Governed (deny by default) but admitting nobody: inactive rows, as the index publishes them.
    assert.deepStrictEqual(rows({ policies: [t] }), [
      'api-0:8080 traffictarget/missing * (its HTTPRouteGroup rules resolve to no match: it admits nothing here (SMI002, SMI003))',
      'api-0:9090 traffictarget/missing * (its HTTPRouteGroup rules resolve to no match: it admits nothing here (SMI002, SMI003))',
    ]);
    const g = one(policyTargetsView(view, 'HTTPRouteGroup', 'api-routes', 'app'));
    assert.ok(g.notes.includes('TrafficTarget missing names match "typo", which it does not define (SMI003)'), JSON.stringify(g.notes));
  });

  it('an unused route object admits nobody', () => {
    const view = mkView(API_POD + ROUTES + tt('web-tcp', '[{kind: TCPRoute, name: http-port}]', ['web']));
    const g = one(policyTargetsView(view, 'HTTPRouteGroup', 'api-routes', 'app'));
    assert.deepStrictEqual(g.appliesTo, []);
    assert.deepStrictEqual(g.notes, ['no TrafficTarget names it, so it admits nobody anywhere']);
  });

  it('rows agree with the decision engine: the listed route admits the source there', () => {
    const view = mkView(API_POD + ROUTES + tt('web-api', '[{kind: HTTPRouteGroup, name: api-routes, matches: [metrics]}]', ['web']));
    const [row] = one(policyTargetsView(view, 'TrafficTarget', 'web-api', 'app')).appliesTo;
    assert.ok(row?.port);
    const value = view.index.peek('app', row.pod, row.port)?.value;
    assert.ok(value);
    const client = clientInfo('10.1.2.3', { kind: 'established', clientId: id('web') });
    assert.ok(client);
    const d = authorizeRequest(compileServer(value), client, { method: 'GET', path: '/metrics', headers: {} });
    assert.ok(d.allowed);
    assert.equal(`httproutegroup/${d.route?.name}`, row.route);
  });
});
