/**
 * Random SMI policies against an oracle written straight from the SMI semantics (README "SMI
 * access policy"): a request is allowed when some TrafficTarget governing the port lists the
 * caller and either admits the whole port (TCPRoute, no HTTP rules) or names a match the request
 * satisfies. The index's compiled value, decided by the proxy's engine, must never admit what the
 * oracle refuses; and it must decide exactly as the oracle wherever the request satisfies the
 * matches of at most one content (where several differ, the proxy picks one route: SMI013).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { authorizeRequest, clientInfo, compileServer, parseCidr } from '../core/index.js';
import type { HTTPRouteGroup, Pod, Resource, TCPRoute, TrafficTarget } from '../manifest/index.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const env = (name: string) => (process.env[name] === undefined ? undefined : Number(process.env[name]));
const params = (runs: number): fc.Parameters<unknown> => {
  const seed = env('WARD_FUZZ_SEED');
  return {
    numRuns: env('WARD_FUZZ_RUNS') ?? runs,
    interruptAfterTimeLimit: env('WARD_FUZZ_TIME_MS') ?? 10_000,
    markInterruptAsFailure: false,
    ...(seed === undefined ? {} : { seed }),
  };
};

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [{ net: parseCidr('10.0.0.0/8') ?? assert.fail(), except: [] }],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};
const SAS = ['web', 'bot', 'other'];
const idOf = (sa: string) => `${sa}.app.serviceaccount.identity.linkerd.cluster.local`;
const meta = (name: string) => ({ namespace: 'app', name, labels: {}, annotations: {} });

const POD: Pod = {
  kind: 'Pod',
  apiVersion: 'v1',
  metadata: { ...meta('api-0'), labels: { 'linkerd.io/control-plane-ns': 'linkerd' }, annotations: { 'config.linkerd.io/opaque-ports': '9090' } },
  spec: {
    serviceAccountName: 'api',
    containers: [
      {
        name: 'app',
        ports: [
          { name: 'http', containerPort: 8080 },
          { name: 'db', containerPort: 9090 },
        ],
      },
    ],
  },
};

const REGEXES = ['/api/.*', '/api/v1', '.*', '/metrics', '/(a|b)/x', undefined];
const match = fc.record({
  pathRegex: fc.constantFrom(...REGEXES),
  methods: fc.subarray(['GET', 'POST', '*']),
  cookie: fc.constantFrom(undefined, 'x=.*', 'y'),
});
const group = fc.array(match, { minLength: 1, maxLength: 3 });
const rule = fc.oneof(
  fc.record({
    kind: fc.constant('HTTPRouteGroup' as const),
    name: fc.constantFrom('g0', 'g1', 'gone'),
    matches: fc.option(fc.subarray(['m0', 'm1', 'm2']), { nil: undefined }),
  }),
  fc.record({ kind: fc.constant('TCPRoute' as const), name: fc.constantFrom('t0', 't1', 'gone') }),
);
const target = fc.record({
  sources: fc.subarray(SAS),
  rules: fc.array(rule, { minLength: 1, maxLength: 3 }),
  port: fc.constantFrom(undefined, 8080, 9090),
});
const setup = fc.record({
  groups: fc.tuple(group, group),
  tcpPorts: fc.tuple(fc.constantFrom(undefined, [8080], [9090], [8080, 9090]), fc.constantFrom(undefined, [8080], [9090])),
  targets: fc.array(target, { minLength: 1, maxLength: 3 }),
});
const request = fc.record({
  sa: fc.constantFrom(...SAS),
  port: fc.constantFrom(8080, 9090),
  method: fc.constantFrom('GET', 'POST', 'DELETE'),
  path: fc.constantFrom('/api/v1', '/api/x', '/metrics', '/a/x', '/other'),
  cookie: fc.constantFrom(undefined, 'x=1', 'y'),
});

type Setup = typeof setup extends fc.Arbitrary<infer T> ? T : never;
type Req = typeof request extends fc.Arbitrary<infer T> ? T : never;
type Match = Setup['groups'][0][number];

function resourcesOf(s: Setup): Resource[] {
  const groups: HTTPRouteGroup[] = s.groups.map((ms, g) => ({
    kind: 'HTTPRouteGroup',
    apiVersion: 'specs.smi-spec.io/v1alpha4',
    metadata: meta(`g${g}`),
    spec: {
      matches: ms.map((m, i) => ({
        name: `m${i}`,
        ...(m.pathRegex !== undefined ? { pathRegex: m.pathRegex } : {}),
        methods: m.methods,
        ...(m.cookie !== undefined ? { headers: [{ name: 'Cookie', value: m.cookie }] } : {}),
      })),
    },
  }));
  const tcp: TCPRoute[] = s.tcpPorts.map((ports, i) => ({
    kind: 'TCPRoute',
    apiVersion: 'specs.smi-spec.io/v1alpha4',
    metadata: meta(`t${i}`),
    spec: ports === undefined ? {} : { ports },
  }));
  const targets: TrafficTarget[] = s.targets.map((t, i) => ({
    kind: 'TrafficTarget',
    apiVersion: t.port === undefined ? 'access.smi-spec.io/v1alpha3' : 'access.smi-spec.io/v1alpha2',
    metadata: meta(`tt${i}`),
    spec: {
      destination: { kind: 'ServiceAccount', name: 'api', ...(t.port !== undefined ? { port: t.port } : {}) },
      sources: t.sources.map((name) => ({ kind: 'ServiceAccount', name })),
      rules: t.rules.map((r) => (r.kind === 'HTTPRouteGroup' && r.matches !== undefined ? r : { kind: r.kind, name: r.name })),
    },
  }));
  return [POD, ...groups, ...tcp, ...targets];
}

function matchOk(m: Match, r: Req): boolean {
  if (m.pathRegex !== undefined && !new RegExp(`^(?:${m.pathRegex})$`).test(r.path)) return false;
  if (m.methods.length > 0 && !m.methods.includes('*') && !m.methods.includes(r.method)) return false;
  return m.cookie === undefined || (r.cookie !== undefined && new RegExp(`^(?:${m.cookie})$`).test(r.cookie));
}

/** The oracle: undefined when no TrafficTarget governs the port; otherwise whether SMI allows, and the contents of the matches satisfied. */
function oracle(s: Setup, r: Req): { allowed: boolean; contents: Set<string> } | undefined {
  const contents = new Set<string>();
  let governed = false;
  let allowed = false;
  for (const t of s.targets) {
    if (t.port !== undefined && t.port !== r.port) continue;
    const tcpRules = t.rules.filter((x) => x.kind === 'TCPRoute');
    const portsOf = (name: string): readonly number[] | undefined => (name === 'gone' ? undefined : s.tcpPorts[Number(name.slice(1))]);
    if (tcpRules.length > 0 && !tcpRules.some((x) => portsOf(x.name)?.includes(r.port) ?? true)) continue;
    governed = true;
    const httpRules = t.rules.filter((x) => x.kind === 'HTTPRouteGroup');
    const listed = t.sources.includes(r.sa);
    if (httpRules.length === 0) {
      // Whole port: a resolved TCPRoute that covers it.
      if (listed && tcpRules.some((x) => x.name !== 'gone' && (portsOf(x.name)?.includes(r.port) ?? true))) allowed = true;
      continue;
    }
    if (r.port === 9090) continue; // opaque: no HTTP routes
    for (const h of httpRules) {
      if (h.name === 'gone') continue;
      const ms = s.groups[Number(h.name.slice(1))] ?? [];
      const named = 'matches' in h && h.matches !== undefined && h.matches.length > 0 ? h.matches : ms.map((_, i) => `m${i}`);
      ms.forEach((m, i) => {
        if (!named.includes(`m${i}`) || !matchOk(m, r)) return;
        const methods = m.methods.length === 0 || m.methods.includes('*') ? '*' : [...new Set(m.methods)].sort().join(',');
        contents.add(JSON.stringify([m.pathRegex ?? '', methods, m.cookie ?? '']));
        if (listed) allowed = true;
      });
    }
  }
  return governed ? { allowed, contents } : undefined;
}

describe('SMI compiled values against the SMI oracle', () => {
  it('never admit more than SMI allows, and decide exactly where one match content applies', () => {
    fc.assert(
      fc.property(setup, fc.array(request, { minLength: 1, maxLength: 8 }), (s, reqs) => {
        const index = new PolicyIndex(CONFIG);
        index.reset(resourcesOf(s));
        for (const r of reqs) {
          const want = oracle(s, r);
          const value = index.peek('app', 'api-0', r.port)?.value;
          assert.ok(value);
          assert.equal(value.meta.kind === 'traffictarget', want !== undefined, `governed ${JSON.stringify(r)}`);
          if (want === undefined) continue;
          const client = clientInfo('10.1.1.1', { kind: 'established', clientId: idOf(r.sa) }) ?? assert.fail();
          const headers = r.cookie === undefined ? {} : { cookie: r.cookie };
          const got = authorizeRequest(compileServer(value), client, { method: r.method, path: r.path, headers }).allowed;
          if (got) assert.ok(want.allowed, `over-admits ${JSON.stringify(r)}`);
          if (want.contents.size <= 1) assert.equal(got, want.allowed, `decides ${JSON.stringify(r)}`);
        }
      }),
      params(300),
    );
  });

  it('reach the same values edit by edit as all at once, in any order, with cells watching from the start', () => {
    fc.assert(
      fc.property(setup, fc.func(fc.integer()), (s, order) => {
        const all = resourcesOf(s);
        const batch = new PolicyIndex(CONFIG);
        batch.reset(all);
        const live = new PolicyIndex(CONFIG);
        live.apply(POD);
        const cells = [8080, 9090].map((port) => live.lookup('app', 'api-0', port));
        const rest = all.filter((r) => r !== POD).sort((a, b) => order(a.metadata.name) - order(b.metadata.name));
        for (const r of rest) live.apply(r);
        // Then take the TrafficTargets away one by one and put them back.
        for (const r of rest.filter((x) => x.kind === 'TrafficTarget')) live.delete({ kind: r.kind, group: '', namespace: 'app', name: r.metadata.name });
        for (const r of rest.filter((x) => x.kind === 'TrafficTarget')) live.apply(r);
        for (const [i, port] of [8080, 9090].entries()) assert.deepEqual(cells[i]?.value, batch.peek('app', 'api-0', port)?.value, `port ${port}`);
      }),
      params(200),
    );
  });
});
