/**
 * Route filters from manifests: `spec.rules[].filters` of a Linkerd and a Gateway API HTTPRoute
 * (and a GRPCRoute) become the core filters the controller sends and the proxy applies (§1.7,
 * §1.8, §4.10); ResponseHeaderModifier is dropped, filters inbound cannot apply make the route
 * invalid.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { RouteFilter } from '../core/index.js';
import { decodeResource, type GRPCRoute, type HTTPRoute, parseManifestText } from '../manifest/index.js';
import { convertGrpcRoute, convertHttpRoute } from './convert.js';

function decode<T>(yaml: string): T {
  const { documents, diagnostics } = parseManifestText(yaml, 'route.yaml');
  assert.deepEqual(diagnostics, []);
  const r = decodeResource(documents[0] as NonNullable<(typeof documents)[0]>);
  assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
  return (r as { resource: unknown }).resource as T;
}

const FILTERS = `
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: x-set, value: "1"}]
        add: [{name: x-add, value: "2"}]
        remove: [x-drop]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: x-resp, value: "3"}]
    - type: RequestRedirect
      requestRedirect:
        scheme: https
        hostname: other.example
        port: 8443
        statusCode: 301
        path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}
`;

const EXPECTED: RouteFilter[] = [
  { kind: 'requestHeaderModifier', add: [{ name: 'x-add', value: '2' }], set: [{ name: 'x-set', value: '1' }], remove: ['x-drop'] },
  { kind: 'requestRedirect', scheme: 'https', host: 'other.example', path: { kind: 'prefix', value: '/v2' }, port: 8443, status: 301 },
];

function httpRoute(apiVersion: string): string {
  return `
apiVersion: ${apiVersion}
kind: HTTPRoute
metadata: {name: api, namespace: emojivoto}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-http}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
${FILTERS}`;
}

describe('convertHttpRoute: filters', () => {
  for (const apiVersion of ['policy.linkerd.io/v1beta3', 'gateway.networking.k8s.io/v1']) {
    it(`carries RequestHeaderModifier and RequestRedirect of a ${apiVersion} HTTPRoute, without ResponseHeaderModifier`, () => {
      const c = convertHttpRoute(decode<HTTPRoute>(httpRoute(apiVersion)));
      assert.ok(c.ok, c.ok ? '' : c.reason);
      assert.deepEqual(c.value.route.rules[0]?.filters, EXPECTED);
    });
  }

  it('ignores a Gateway API HTTPRoute with a filter inbound cannot apply', () => {
    const yaml = httpRoute('gateway.networking.k8s.io/v1')
      .replace('type: ResponseHeaderModifier', 'type: URLRewrite')
      .replace('responseHeaderModifier:', 'urlRewrite:');
    const c = convertHttpRoute(decode<HTTPRoute>(yaml.replace('set: [{name: x-resp, value: "3"}]', 'hostname: x')));
    assert.equal(c.ok, false);
  });

  it('carries a GRPCRoute RequestHeaderModifier', () => {
    const c = convertGrpcRoute(
      decode<GRPCRoute>(`
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: rpc, namespace: emojivoto}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web-grpc}]
  rules:
  - matches: [{method: {service: emojivoto.v1.VotingService}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: x-grpc, value: "yes"}]}
`),
    );
    assert.ok(c.ok, c.ok ? '' : c.reason);
    assert.deepEqual(c.value.route.rules[0]?.filters, [{ kind: 'requestHeaderModifier', add: [], set: [{ name: 'x-grpc', value: 'yes' }], remove: [] }]);
  });
});
