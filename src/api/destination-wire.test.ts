import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { hasCode } from '../shared/index.js';
import { type DestinationEvent, destinationEventFromWire, destinationEventToWire } from './destination-wire.js';
import { Update } from './gen/destination.js';
import { jsonAt } from './test-json.js';

// A meshed endpoint with every identity-relevant field set.
const meshedEndpoint = {
  ip: '10.42.0.7',
  port: 8080,
  weight: 10000,
  labels: { pod: 'web-5d8f', pod_template_hash: '5d8f', serviceaccount: 'web' },
  identity: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local',
  serverName: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local',
  opaqueTransportPort: 4143,
  protocolHint: 'h2',
} as const;

const events: DestinationEvent[] = [
  {
    kind: 'add',
    endpoints: [
      meshedEndpoint,
      { ip: 'fd00::7', port: 9090, weight: 1, labels: {} },
      { ip: '10.42.0.8', port: 8080, weight: 10000, labels: {}, protocolHint: 'opaque', opaqueTransportPort: 4143, authorityOverride: 'web.example.com:80' },
      { ip: '10.42.0.9', port: 8080, weight: 10000, labels: {}, opaqueTransportPort: 4143 },
    ],
    setLabels: { namespace: 'emojivoto', service: 'web-svc' },
  },
  {
    kind: 'remove',
    addrs: [
      { ip: '10.42.0.7', port: 8080 },
      { ip: 'fd00::7', port: 9090 },
    ],
  },
  { kind: 'noEndpoints', exists: true },
  { kind: 'noEndpoints', exists: false },
];

function roundTrip(e: DestinationEvent): DestinationEvent {
  const r = destinationEventFromWire(Update.decode(Update.encode(destinationEventToWire(e)).finish()));
  assert.ok(r.ok, r.ok ? '' : r.message);
  return r.value;
}

describe('destinationEventToWire / destinationEventFromWire', () => {
  it('round-trips add, remove and noEndpoints events', () => {
    for (const e of events) assert.deepStrictEqual(roundTrip(e), e);
  });

  it('encodes the identity as dns_like_identity and server_name, and the hints', () => {
    const json = Update.toJSON(destinationEventToWire({ kind: 'add', endpoints: [meshedEndpoint], setLabels: {} }));
    assert.deepStrictEqual(jsonAt(json, 'add', 'addrs', 0), {
      addr: { ip: { ipv4: 0x0a2a0007 }, port: 8080 },
      weight: 10000,
      metricLabels: meshedEndpoint.labels,
      tlsIdentity: { dnsLikeIdentity: { name: meshedEndpoint.identity }, serverName: { name: meshedEndpoint.serverName } },
      protocolHint: { h2: {}, opaqueTransport: { inboundPort: 4143 } },
    });
  });

  it('normalises IPv4-mapped IPv6 endpoint addresses to IPv4', () => {
    const e = roundTrip({ kind: 'remove', addrs: [{ ip: '::ffff:10.1.2.3', port: 80 }] });
    assert.deepStrictEqual(e, { kind: 'remove', addrs: [{ ip: '10.1.2.3', port: 80 }] });
  });

  it('throws on an address that is not an IP (a bug in the publisher)', () => {
    assert.throws(
      () => destinationEventToWire({ kind: 'remove', addrs: [{ ip: 'web', port: 80 }] }),
      (e) => hasCode(e, 'ERR_WIRE_INVALID_IP'),
    );
  });

  const invalid: [string, unknown, string][] = [
    ['an empty update', {}, 'update: not set'],
    ['an endpoint without an address', { add: { addrs: [{ weight: 1 }] } }, 'add.addrs[0].addr: not set'],
    ['an address without an IP', { remove: { addrs: [{ port: 80 }] } }, 'remove.addrs[0].ip: IP address is not set'],
    ['port 0', { remove: { addrs: [{ ip: { ipv4: 1 }, port: 0 }] } }, 'remove.addrs[0].port: 0 is not a port'],
    [
      'a TLS identity without a strategy',
      { add: { addrs: [{ addr: { ip: { ipv4: 1 }, port: 80 }, tlsIdentity: {} }] } },
      'add.addrs[0].tlsIdentity: strategy not set',
    ],
    [
      'a URI identity',
      { add: { addrs: [{ addr: { ip: { ipv4: 1 }, port: 80 }, tlsIdentity: { uriLikeIdentity: { uri: 'spiffe://x/y' } } }] } },
      'add.addrs[0].tlsIdentity.uriLikeIdentity: URI identities are not supported',
    ],
  ];
  for (const [name, json, message] of invalid) {
    it(`rejects ${name}`, () => {
      assert.deepStrictEqual(destinationEventFromWire(Update.decode(Update.encode(Update.fromJSON(json)).finish())), { ok: false, message });
    });
  }
});
