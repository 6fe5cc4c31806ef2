import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DestinationProfile } from './gen/destination.js';
import { OutboundPolicy } from './gen/outbound.js';
import { type DestinationProfileModel, destinationProfileToWire, type OutboundPolicyModel, outboundPolicyToWire } from './outbound-wire.js';

/** The proto3 JSON of the encoded message (what any protobuf implementation decodes from ward's bytes). */
function policyJson(m: OutboundPolicyModel): unknown {
  return OutboundPolicy.toJSON(OutboundPolicy.decode(OutboundPolicy.encode(outboundPolicyToWire(m)).finish()));
}

function profileJson(m: DestinationProfileModel): unknown {
  return DestinationProfile.toJSON(DestinationProfile.decode(DestinationProfile.encode(destinationProfileToWire(m)).finish()));
}

const WEB: OutboundPolicyModel = { kind: 'service', namespace: 'demo', name: 'web', port: 80, authority: 'web.demo.svc.cluster.local:80' };
const WEB_META = { resource: { group: 'core', kind: 'Service', name: 'web', namespace: 'demo', port: 80 } };
/** The Service's own balancer: Destination.Get of its authority, peak EWMA 30 ms / 10 s, queue 100 / 3 s. */
const WEB_BACKEND = {
  metadata: WEB_META,
  balancer: { discovery: { dst: { path: 'web.demo.svc.cluster.local:80' } }, peakEwma: { defaultRtt: '0.030s', decay: '10s' } },
  queue: { capacity: 100, failfastTimeout: '3s' },
};
const OPAQ_ROUTE = { metadata: { default: 'opaq' }, rules: [{ backends: { firstAvailable: { backends: [{ backend: WEB_BACKEND }] } } }] };
const HTTP_ROUTE = {
  metadata: { default: 'http' },
  rules: [{ matches: [{ path: { prefix: '/' } }], backends: { firstAvailable: { backends: [{ backend: WEB_BACKEND }] } }, timeouts: {} }],
};

describe('outboundPolicyToWire: the policies Linkerd synthesizes for a Service without routes', () => {
  it('a port without a declared protocol: detect HTTP within 10 s, one default route per protocol to the Service', () => {
    assert.deepStrictEqual(policyJson(WEB), {
      protocol: { detect: { timeout: '10s', opaque: { routes: [OPAQ_ROUTE] }, http1: { routes: [HTTP_ROUTE] }, http2: { routes: [HTTP_ROUTE] } } },
      metadata: WEB_META,
    });
  });

  it('declared protocols: HTTP/1 or HTTP/2 routes only, or the opaque route only', () => {
    assert.deepStrictEqual(policyJson({ ...WEB, appProtocol: 'http1' }), { protocol: { http1: { routes: [HTTP_ROUTE] } }, metadata: WEB_META });
    assert.deepStrictEqual(policyJson({ ...WEB, appProtocol: 'http2' }), { protocol: { http2: { routes: [HTTP_ROUTE] } }, metadata: WEB_META });
    assert.deepStrictEqual(policyJson({ ...WEB, appProtocol: 'opaque' }), { protocol: { opaque: { routes: [OPAQ_ROUTE] } }, metadata: WEB_META });
  });

  it('a port the Service does not declare: an opaque route with no backend that forbids the connection', () => {
    assert.deepStrictEqual(policyJson({ kind: 'undefinedPort', namespace: 'demo', name: 'web', port: 81 }), {
      protocol: { opaque: { routes: [{ metadata: { default: 'undefined-port' }, rules: [{ backends: { empty: {} }, filters: [{ forbidden: {} }] }] }] } },
      metadata: { resource: { ...WEB_META.resource, port: 81 } },
    });
  });

  it('an address outside the cluster: detect, then forward to the address itself (weight 1, no timeouts)', () => {
    const backend = {
      metadata: { default: 'egress-fallback' },
      forward: { addr: { ip: { ipv4: 0x5db8d822 }, port: 443 }, weight: 1 },
      queue: { capacity: 100, failfastTimeout: '3s' },
    };
    const http = {
      routes: [{ metadata: { default: 'egress-fallback' }, rules: [{ matches: [{}], backends: { firstAvailable: { backends: [{ backend }] } } }] }],
    };
    assert.deepStrictEqual(policyJson({ kind: 'egressFallback', ip: '93.184.216.34', port: 443 }), {
      protocol: {
        detect: {
          timeout: '10s',
          opaque: { routes: [{ metadata: { default: 'egress-fallback' }, rules: [{ backends: { firstAvailable: { backends: [{ backend }] } } }] }] },
          http1: http,
          http2: http,
        },
      },
      metadata: { default: 'egress-fallback' },
    });
  });
});

describe('destinationProfileToWire: the profiles Linkerd serves without a ServiceProfile', () => {
  const budget = { retryRatio: 0.2, minRetriesPerSecond: 10, ttl: '10s' };

  it('a Service port: its name, the default retry budget, the Service as parent, an unnamed ServiceProfile', () => {
    const m: DestinationProfileModel = {
      kind: 'service',
      namespace: 'demo',
      name: 'web',
      port: 80,
      fullyQualifiedName: 'web.demo.svc.cluster.local',
      opaqueProtocol: false,
    };
    const json = profileJson(m) as { retryBudget: { retryRatio: number } };
    // float32 on the wire: compare the ratio as it decodes.
    assert.equal(Math.fround(json.retryBudget.retryRatio), Math.fround(0.2));
    json.retryBudget.retryRatio = 0.2;
    assert.deepStrictEqual(json, {
      fullyQualifiedName: 'web.demo.svc.cluster.local',
      retryBudget: budget,
      parentRef: WEB_META,
      profileRef: { resource: { group: 'linkerd.io' } },
    });
    assert.equal((profileJson({ ...m, opaqueProtocol: true }) as { opaqueProtocol?: boolean }).opaqueProtocol, true);
  });

  it('a pod address: the endpoint with its identity and hints, no name', () => {
    const json = profileJson({
      kind: 'endpoint',
      opaqueProtocol: true,
      endpoint: {
        ip: '10.244.0.7',
        port: 3306,
        weight: 10000,
        labels: { namespace: 'demo', pod: 'db-0' },
        identity: 'db.demo.serviceaccount.identity.linkerd.cluster.local',
        serverName: 'db.demo.serviceaccount.identity.linkerd.cluster.local',
        protocolHint: 'opaque',
        opaqueTransportPort: 4143,
      },
    }) as { retryBudget: { retryRatio: number } };
    json.retryBudget.retryRatio = 0.2;
    const name = { name: 'db.demo.serviceaccount.identity.linkerd.cluster.local' };
    assert.deepStrictEqual(json, {
      opaqueProtocol: true,
      retryBudget: budget,
      endpoint: {
        addr: { ip: { ipv4: 0x0af40007 }, port: 3306 },
        weight: 10000,
        metricLabels: { namespace: 'demo', pod: 'db-0' },
        tlsIdentity: { dnsLikeIdentity: name, serverName: name },
        protocolHint: { opaque: {}, opaqueTransport: { inboundPort: 4143 } },
      },
    });
  });

  it('a port the Service does not declare: an empty profile', () => {
    assert.deepStrictEqual(profileJson({ kind: 'undefinedPort' }), {});
    assert.equal(DestinationProfile.encode(destinationProfileToWire({ kind: 'undefinedPort' })).finish().length, 0);
  });
});
