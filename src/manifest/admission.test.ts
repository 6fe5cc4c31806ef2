import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { type AdmissionContext, admitDecoded, admitResource, isLinkerdAtMost217 } from './admission.js';
import { decodeResource } from './decode.js';
import { parseGoDurationMs } from './go-duration.js';
import { documentFromObject, parseManifestText } from './load.js';
import type { Resource } from './types.js';

const repoRoot = new URL('../../', import.meta.url);
const casesFile = new URL('../shared/conformance/policy-cases.yaml', repoRoot);

interface AdmissionCase {
  readonly id: string;
  readonly expect: 'accept' | 'reject';
  readonly resource: unknown;
}

/** Decodes and admits an object; returns the verdict and every diagnostic code (decode + admission). */
function admit(obj: unknown, ctx: AdmissionContext = {}): { admitted: boolean; codes: string[] } {
  const decoded = decodeResource(documentFromObject(obj));
  const verdict = admitDecoded(decoded, ctx);
  const codes = [...decoded.diagnostics, ...verdict.diagnostics].filter((d) => d.severity === 'error').map((d) => d.code);
  return { admitted: verdict.admitted, codes };
}

function decoded(obj: unknown): Resource {
  const r = decodeResource(documentFromObject(obj));
  assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
  return (r as Extract<typeof r, { status: 'ok' }>).resource;
}

const meta = { namespace: 'app', name: 'test' };
const mkServer = (spec: object, version = 'v1beta3', name = 'test') => ({
  apiVersion: `policy.linkerd.io/${version}`,
  kind: 'Server',
  metadata: { ...meta, name },
  spec,
});
const mkSaz = (spec: object) => ({ apiVersion: 'policy.linkerd.io/v1beta1', kind: 'ServerAuthorization', metadata: meta, spec });
const mkPolicy = (spec: object) => ({ apiVersion: 'policy.linkerd.io/v1alpha1', kind: 'AuthorizationPolicy', metadata: meta, spec });
const mkMeshTLS = (spec: object) => ({ apiVersion: 'policy.linkerd.io/v1alpha1', kind: 'MeshTLSAuthentication', metadata: meta, spec });
const mkNetAuthn = (spec: object) => ({ apiVersion: 'policy.linkerd.io/v1alpha1', kind: 'NetworkAuthentication', metadata: meta, spec });
const mkRoute = (rules: object[], apiVersion = 'policy.linkerd.io/v1beta3', extra: object = {}) => ({
  apiVersion,
  kind: 'HTTPRoute',
  metadata: meta,
  spec: { parentRefs: [{ group: 'policy.linkerd.io', kind: 'Server', name: 'web' }], rules, ...extra },
});
const mkGrpcRoute = (rules: object[]) => ({
  apiVersion: 'gateway.networking.k8s.io/v1',
  kind: 'GRPCRoute',
  metadata: meta,
  spec: { parentRefs: [{ group: 'policy.linkerd.io', kind: 'Server', name: 'web' }], rules },
});
const serverTarget = { group: 'policy.linkerd.io', kind: 'Server', name: 'web' };

describe('admission conformance cases', () => {
  const cases = (parse(readFileSync(casesFile, 'utf8')) as { admissionCases: AdmissionCase[] }).admissionCases;
  it('loads the cases', () => assert.ok(cases.length >= 17));
  for (const c of cases) {
    it(`${c.id} is ${c.expect}ed`, () => {
      const r = admit(c.resource);
      assert.equal(r.admitted ? 'accept' : 'reject', c.expect, r.codes.join(', '));
      // A rejection always says why; an acceptance carries no error.
      assert.equal(r.codes.length > 0, c.expect === 'reject');
    });
  }
});

describe('admitResource: Server', () => {
  it('points an invalid accessPolicy (POL020) at the field', () => {
    const text = `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: web, namespace: app}
spec:
  podSelector: {}
  port: 80
  accessPolicy: allow-all
`;
    const [doc] = parseManifestText(text, 's.yaml').documents;
    assert.ok(doc);
    const r = decodeResource(doc);
    assert.equal(r.status, 'ok');
    const v = admitDecoded(r);
    assert.equal(v.admitted, false);
    assert.deepEqual(
      v.diagnostics.map((d) => [d.code, d.message, d.source]),
      [['POL020', 'spec.accessPolicy "allow-all" is not a default policy', { file: 's.yaml', line: 7, col: 17 }]],
    );
  });

  it('needs exactly one selector (POL023) and, in v1alpha1, one of matchLabels/matchExpressions (POL024)', () => {
    assert.deepEqual(admit(mkServer({ port: 80 })).codes, ['POL023']);
    assert.deepEqual(admit(mkServer({ port: 80, podSelector: {}, externalWorkloadSelector: {} })).codes, ['POL023']);
    assert.deepEqual(admit(mkServer({ port: 80, externalWorkloadSelector: { matchLabels: { a: 'b' } } })).codes, []);
    assert.deepEqual(admit(mkServer({ port: 80, podSelector: {} }, 'v1alpha1')).codes, ['POL024']);
    assert.deepEqual(admit(mkServer({ port: 80, podSelector: { matchLabels: {} } }, 'v1alpha1')).codes, []);
    assert.deepEqual(admit(mkServer({ port: 80, podSelector: {} }, 'v1beta1')).codes, []);
  });

  it('validates port names (POL025) but admits a quoted number', () => {
    for (const bad of ['Http', 'a-very-long-port-name', '-web', 'web-', 'we--b', 'http_alt', '']) {
      assert.deepEqual(admit(mkServer({ port: bad, podSelector: {} })).codes, ['POL025'], bad);
    }
    for (const good of ['http', 'admin-http', 'h2c', '8080', 'a123456789012345'.slice(0, 15)]) {
      assert.deepEqual(admit(mkServer({ port: good, podSelector: {} })).codes, [], good);
    }
  });

  it('rejects overlapping Servers (POL026) only when emulating Linkerd 2.17 or older', () => {
    const existing = [
      decoded(mkServer({ port: 8080, podSelector: { matchLabels: { app: 'web' } } }, 'v1beta3', 'old')),
      decoded(mkServer({ port: 9090, podSelector: {} }, 'v1beta3', 'all')),
    ];
    const same = decoded(mkServer({ port: 8080, podSelector: { matchLabels: { app: 'web' } } }));
    const other = decoded(mkServer({ port: 8080, podSelector: { matchLabels: { app: 'api' } } }));
    const named = decoded(mkServer({ port: '9090', podSelector: { matchLabels: { app: 'api' } } }));
    const all = decoded(mkServer({ port: 9090, podSelector: { matchLabels: { app: 'api' } } }));
    assert.deepEqual(admitResource(same, { existing }), []);
    assert.deepEqual(admitResource(same, { existing, version: 'latest' }), []);
    const legacy = admitResource(same, { existing, version: '2.17' });
    assert.deepEqual(
      legacy.map((d) => d.message),
      ['Server port 8080 in namespace app is already defined by Server old selecting the same pods'],
    );
    assert.deepEqual(admitResource(other, { existing, version: 'stable-2.14.10' }), []);
    assert.deepEqual(admitResource(named, { existing, version: '2.17' }), [], 'ports compare as written');
    assert.deepEqual(
      admitResource(all, { existing, version: 'edge-24.11.8' }).map((d) => d.code),
      ['POL026'],
    );
    assert.deepEqual(admitResource(all, { existing, version: '2.18' }), []);
  });

  it('recognises Linkerd versions before 2.18', () => {
    for (const v of ['2.11', '2.17', 'stable-2.17.1', 'v2.14.0', 'edge-25.3.4', 'edge-24.1.1']) assert.equal(isLinkerdAtMost217(v), true, v);
    for (const v of ['latest', '2.18', '2.20.1', 'edge-25.4.1', 'edge-26.8.3', 'nonsense']) assert.equal(isLinkerdAtMost217(v), false, v);
  });
});

describe('admitResource: ServerAuthorization', () => {
  const server = { name: 'web' };
  it('rejects unauthenticated with meshTLS (POL030) and unauthenticatedTLS with identities (POL031)', () => {
    assert.deepEqual(admit(mkSaz({ server, client: { unauthenticated: true, meshTLS: {} } })).codes, ['POL030']);
    assert.deepEqual(admit(mkSaz({ server, client: { meshTLS: { unauthenticatedTLS: true, serviceAccounts: [{ name: 'a' }] } } })).codes, ['POL031']);
    assert.deepEqual(admit(mkSaz({ server, client: { meshTLS: { unauthenticatedTLS: true, identities: [] } } })).codes, []);
  });

  it('needs exactly one of server.name and server.selector (POL034)', () => {
    assert.deepEqual(admit(mkSaz({ server: {}, client: { unauthenticated: true } })).codes, ['POL034']);
    assert.deepEqual(admit(mkSaz({ server: { name: 'a', selector: {} }, client: { unauthenticated: true } })).codes, ['POL034']);
    assert.deepEqual(admit(mkSaz({ server: { selector: { matchLabels: { a: 'b' } } }, client: { unauthenticated: true } })).codes, []);
  });

  it('validates identities against the DNS-like pattern (POL050)', () => {
    const ids = (identities: string[]) => admit(mkSaz({ server, client: { meshTLS: { identities } } })).codes;
    assert.deepEqual(ids(['*', '*.ns.serviceaccount.identity.linkerd.cluster.local', 'web.app']), []);
    assert.deepEqual(ids(['Web.app', 'a..b']), ['POL050', 'POL050']);
  });

  it('rejects an except that is not strictly inside its cidr (POL033)', () => {
    const nets = (networks: object[]) => admit(mkSaz({ server, client: { unauthenticated: true, networks } })).codes;
    assert.deepEqual(nets([{ cidr: '10.0.0.0/8', except: ['10.1.0.0/16', '10.2.3.4'] }]), []);
    assert.deepEqual(nets([{ cidr: '10.0.0.0/8', except: ['10.0.0.0/8'] }]), ['POL033']);
    assert.deepEqual(nets([{ cidr: '10.0.0.0/8', except: ['0.0.0.0/0'] }]), ['POL033']);
    assert.deepEqual(nets([{ cidr: '10.0.0.0/8', except: ['192.168.0.0/16', 'fd00::1'] }]), ['POL033', 'POL033']);
  });
});

describe('admitResource: AuthorizationPolicy', () => {
  /** `refs` null leaves requiredAuthenticationRefs out. */
  const policy = (targetRef: object, refs: object[] | null = []) =>
    admit(mkPolicy(refs === null ? { targetRef } : { targetRef, requiredAuthenticationRefs: refs }));

  it('accepts the supported targets, case-insensitively', () => {
    assert.deepEqual(policy(serverTarget).codes, []);
    assert.deepEqual(policy({ group: 'POLICY.linkerd.io', kind: 'server', name: 'web' }).codes, []);
    assert.deepEqual(policy({ group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'r' }).codes, []);
    assert.deepEqual(policy({ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r' }).codes, []);
    assert.deepEqual(policy({ group: 'gateway.networking.k8s.io', kind: 'GRPCRoute', name: 'r' }).codes, []);
    assert.deepEqual(policy({ group: 'core', kind: 'Namespace', name: 'app' }).codes, []);
    assert.deepEqual(policy({ group: '', kind: 'Namespace', name: 'app' }).codes, []);
  });

  it('rejects unsupported targets (POL040) and other namespaces (POL041)', () => {
    const deploy = admit(mkPolicy({ targetRef: { group: 'apps', kind: 'Deployment', name: 'web' }, requiredAuthenticationRefs: [] }));
    assert.deepEqual(deploy.codes, ['POL040']);
    assert.deepEqual(policy({ kind: 'Server', name: 'web' }).codes, ['POL040'], 'a Server without its group is not policy.linkerd.io');
    assert.deepEqual(policy({ group: 'policy.linkerd.io', kind: 'GRPCRoute', name: 'r' }).codes, ['POL040']);
    assert.deepEqual(policy({ kind: 'Namespace', name: 'other' }).codes, ['POL041']);
    const gatewayRoute = mkPolicy({ targetRef: { group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r' }, requiredAuthenticationRefs: [] });
    assert.deepEqual(admit(gatewayRoute, { version: '2.17' }).codes, ['POL040']);
  });

  it('checks the authentication references (POL042-POL045)', () => {
    const mtls = { group: 'policy.linkerd.io', kind: 'MeshTLSAuthentication', name: 'm' };
    const net = { group: 'policy.linkerd.io', kind: 'NetworkAuthentication', name: 'n' };
    const sa = { kind: 'ServiceAccount', name: 'web' };
    assert.deepEqual(policy(serverTarget, [mtls, net]).codes, []);
    assert.deepEqual(policy(serverTarget, [sa, { ...net, namespace: 'other' }]).codes, []);
    assert.deepEqual(policy(serverTarget, [{ kind: 'MeshTLSAuthentication', name: 'm' }]).codes, ['POL042']);
    assert.deepEqual(policy(serverTarget, [net, net]).codes, ['POL043']);
    assert.deepEqual(policy(serverTarget, [sa, sa]).codes, ['POL043']);
    assert.deepEqual(policy(serverTarget, [mtls, sa]).codes, ['POL044']);
    assert.deepEqual(policy(serverTarget, null).codes, ['POL045']);
    assert.deepEqual(policy(serverTarget, [{ group: 'policy.linkerd.io', kind: 'NetworkAuthentication' }]).codes, ['POL012']);
  });
});

describe('admitResource: MeshTLSAuthentication and NetworkAuthentication', () => {
  it('needs exactly one non-empty identity list (POL053)', () => {
    assert.deepEqual(admit(mkMeshTLS({})).codes, ['POL053']);
    assert.deepEqual(admit(mkMeshTLS({ identities: [] })).codes, ['POL053']);
    assert.deepEqual(admit(mkMeshTLS({ identities: ['a.b'], identityRefs: [{ kind: 'ServiceAccount', name: 'a' }] })).codes, ['POL053']);
  });

  it('validates identities, including SPIFFE IDs (POL050)', () => {
    assert.deepEqual(admit(mkMeshTLS({ identities: ['spiffe://example.org/ns/app/sa/web', '*'] })).codes, []);
    assert.deepEqual(admit(mkMeshTLS({ identities: ['spiffe://example.org/a//b', '*.*.x'] })).codes, ['POL050', 'POL050']);
  });

  it('checks identityRefs (POL051, POL052, POL054)', () => {
    const refs = (identityRefs: object[]) => admit(mkMeshTLS({ identityRefs })).codes;
    assert.deepEqual(
      refs([
        { kind: 'ServiceAccount', name: 'a', namespace: 'b' },
        { kind: 'Namespace', name: 'b' },
      ]),
      [],
    );
    assert.deepEqual(refs([{ group: 'apps', kind: 'Deployment', name: 'a' }]), ['POL051']);
    assert.deepEqual(refs([{ kind: 'Namespace', name: 'b', namespace: 'c' }]), ['POL052']);
    assert.deepEqual(refs([{ kind: 'ServiceAccount' }]), ['POL054']);
  });

  it('needs networks (POL060) with valid excepts (POL033)', () => {
    assert.deepEqual(admit(mkNetAuthn({ networks: [] })).codes, ['POL060']);
    assert.deepEqual(admit(mkNetAuthn({})).codes, ['POL012']);
    assert.deepEqual(admit(mkNetAuthn({ networks: [{ cidr: '10.1.0.0/16', except: ['10.0.0.0/8'] }] })).codes, ['POL033']);
    assert.deepEqual(admit(mkNetAuthn({ networks: [{ cidr: '::/0', except: ['fd00::/8'] }] })).codes, []);
  });
});

describe('admitResource: routes', () => {
  it('requires absolute Exact/PathPrefix paths and redirect paths (POL070)', () => {
    assert.deepEqual(admit(mkRoute([{ matches: [{ path: { type: 'PathPrefix', value: 'api' } }] }])).codes, ['POL070']);
    assert.deepEqual(admit(mkRoute([{ matches: [{ path: { type: 'RegularExpression', value: 'a.*' } }] }])).codes, []);
    const redirect = { type: 'RequestRedirect', requestRedirect: { path: { type: 'ReplaceFullPath', replaceFullPath: 'x' } } };
    assert.deepEqual(admit(mkRoute([{ filters: [redirect] }])).codes, ['POL070']);
  });

  it('validates header names and values (POL071) and regexes (POL072)', () => {
    const headers = [
      { name: 'x a', value: 'v' },
      { name: 'x-b', value: 'a\r\nb' },
      { name: 'x-c', type: 'RegularExpression', value: '(' },
      { name: 'x-d', type: 'RegularExpression', value: '^[a-z]+$' },
    ];
    const r = decodeResource(documentFromObject(mkRoute([{ matches: [{ headers }] }])));
    assert.equal(r.status, 'ok');
    const v = admitDecoded(r);
    assert.deepEqual(
      v.diagnostics.map((d) => [d.code, d.path?.slice(-2).join('.')]),
      [
        ['POL071', '0.name'],
        ['POL071', '1.value'],
        ['POL072', '2.value'],
      ],
    );
    assert.equal(v.diagnostics[1]?.message, 'header value "a\\r\\nb" is not valid');
    const modifier = { type: 'RequestHeaderModifier', requestHeaderModifier: { set: [{ name: 'x:y', value: 'v' }], remove: ['ok'] } };
    assert.deepEqual(admit(mkRoute([{ filters: [modifier] }])).codes, ['POL071']);
  });

  it('checks timeouts (POL073)', () => {
    const t = (timeouts: object, apiVersion?: string) => admit(mkRoute([{ timeouts }], apiVersion)).codes;
    assert.deepEqual(t({ request: '10s', backendRequest: '1500ms' }), []);
    assert.deepEqual(t({ request: '1m', backendRequest: '61s' }), ['POL073']);
    assert.deepEqual(t({ request: '-1s' }), ['POL073']);
    assert.deepEqual(t({ request: 'ten seconds' }), ['POL073']);
    assert.deepEqual(t({ request: '0s', backendRequest: '5s' }), ['POL073']);
    assert.deepEqual(t({ request: '0s', backendRequest: '5s' }, 'gateway.networking.k8s.io/v1'), []);
  });

  it('checks hostnames, Service backendRefs (POL075) and GRPC method regexes (POL074)', () => {
    assert.deepEqual(admit(mkRoute([], undefined, { hostnames: ['*.example.com', 'Bad_Host'] })).codes, ['POL071']);
    const many = Array.from({ length: 17 }, (_, i) => `h${i}.example.com`);
    assert.deepEqual(admit(mkRoute([], undefined, { hostnames: many })).codes, ['POL010']);
    assert.deepEqual(admit(mkRoute([{ backendRefs: [{ name: 'web' }, { name: 'x', kind: 'Other', group: 'x.io' }] }])).codes, ['POL075']);
    assert.deepEqual(admit(mkGrpcRoute([{ matches: [{ method: { type: 'RegularExpression', service: 'a.*' } }] }])).codes, ['POL074']);
    assert.deepEqual(admit(mkGrpcRoute([{ matches: [{ method: { service: 'pkg.Svc', method: 'Get' } }] }])).codes, []);
  });

  it('admits Gateway API routes that do not parse (lenient), but not Linkerd ones', () => {
    const bad = [{ matches: [{ method: 'FETCH' }] }];
    const gateway = admit(mkRoute(bad, 'gateway.networking.k8s.io/v1'));
    assert.equal(gateway.admitted, true);
    assert.deepEqual(gateway.codes, ['POL010']);
    const linkerd = admit(mkRoute(bad));
    assert.equal(linkerd.admitted, false);
    assert.equal(admit(mkGrpcRoute([{ matches: 'nope' } as object])).admitted, true);
  });

  it('admits kinds the webhook does not handle, and rejects broken core objects', () => {
    assert.equal(admit({ apiVersion: 'v1', kind: 'ConfigMap', metadata: meta }).admitted, true);
    assert.equal(admit({ apiVersion: 'v1', kind: 'Pod', metadata: meta, spec: {} }).admitted, false);
  });
});

describe('parseGoDurationMs', () => {
  it('parses Go durations', () => {
    assert.equal(parseGoDurationMs('1h30m'), 5_400_000);
    assert.equal(parseGoDurationMs('1.5s'), 1500);
    assert.equal(parseGoDurationMs('250ms'), 250);
    assert.equal(parseGoDurationMs('-2s'), -2000);
    assert.equal(parseGoDurationMs('0'), 0);
    assert.equal(parseGoDurationMs('1500us'), 1.5);
    for (const bad of ['', '10', '1d', 's', '1s ', '-']) assert.equal(parseGoDurationMs(bad), undefined, bad);
  });
});
