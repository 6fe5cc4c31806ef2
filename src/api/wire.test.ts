/**
 * Field numbers and encodings checked against an independent implementation: bytes written by
 * the generated (ts-proto) code are read by protobufjs reflection over the same .proto files and
 * vice versa, and a few messages are compared byte by byte with hand-assembled encodings.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import protobuf from 'protobufjs';
import { destinationEventToWire } from './destination-wire.js';
import { Update } from './gen/destination.js';
import { CertifyRequest, CertifyResponse } from './gen/identity.js';
import { PortSpec, Server } from './gen/inbound.js';
import { IPAddress } from './gen/net.js';
import { serverToWire } from './inbound-wire.js';
import { ipToWire } from './ip-wire.js';
import { grpcServer, richHttpServer } from './test-fixtures.js';
import { jsonAt, jsonDelete, jsonSet } from './test-json.js';

const PROTO_DIR = join(import.meta.dirname, '../../proto');

function loadRoot(): protobuf.Root {
  const root = new protobuf.Root();
  // Our imports are relative to proto/; google/protobuf/* come with protobufjs.
  root.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : join(PROTO_DIR, target));
  root.loadSync(['inbound.proto', 'identity.proto', 'destination.proto']);
  return root;
}

const root = loadRoot();
const pbjs = (name: string) => root.lookupType(name);
const TO_OBJECT: protobuf.IConversionOptions = { longs: String, enums: String, bytes: String };

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const bytes = (h: string) => Uint8Array.from(Buffer.from(h.replace(/\s+/g, ''), 'hex'));

/** protobufjs' plain object of bytes encoded by ts-proto. */
function readWithPbjs(type: string, data: Uint8Array): unknown {
  const t = pbjs(type);
  return t.toObject(t.decode(data), TO_OBJECT);
}

describe('wire encoding, checked with protobufjs', () => {
  it('decodes a Server with detect, HTTP routes, authorizations, networks, identities, suffixes and metadata', () => {
    const wire = serverToWire(richHttpServer);
    const obj = readWithPbjs('io.linkerd.proxy.inbound.Server', Server.encode(wire).finish());
    const json = Server.toJSON(wire);
    // Well-known types: protobufjs keeps Duration as a message, the proto3 JSON is a string.
    const timeout = ['protocol', 'detect', 'timeout'];
    assert.deepStrictEqual(jsonAt(obj, ...timeout), { seconds: '10' });
    assert.equal(jsonAt(json, ...timeout), '10s');
    jsonDelete(obj, timeout);
    jsonDelete(json, timeout);
    assert.deepStrictEqual(obj, json);
    // A few fields spelled out, so the comparison cannot pass by both sides being empty.
    const authz = jsonAt(obj, 'authorizations', 0);
    assert.equal(jsonAt(authz, 'networks', 0, 'net', 'ip', 'ipv4'), 0x0a000000);
    assert.equal(jsonAt(authz, 'networks', 1, 'net', 'ip', 'ipv6', 'first'), (0xfd00n << 48n).toString());
    const ids = jsonAt(authz, 'authentication', 'meshTLS', 'identities');
    assert.equal(jsonAt(ids, 'identities', 0, 'name'), 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local');
    assert.deepStrictEqual(jsonAt(ids, 'suffixes', 1), {});
    assert.deepStrictEqual(jsonAt(authz, 'metadata'), { resource: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: 'web-authn' } });
    assert.deepStrictEqual(jsonAt(obj, 'labels'), { group: 'policy.linkerd.io', kind: 'server', name: 'web-http' });
    assert.deepStrictEqual(jsonAt(obj, 'protocol', 'detect', 'httpRoutes', 0, 'hosts', 1), { suffix: { reverseLabels: ['com', 'example'] } });
  });

  it('decodes a gRPC Server', () => {
    const wire = serverToWire(grpcServer);
    assert.deepStrictEqual(readWithPbjs('io.linkerd.proxy.inbound.Server', Server.encode(wire).finish()), Server.toJSON(wire));
  });

  it('reads a Server encoded by protobufjs', () => {
    const t = pbjs('io.linkerd.proxy.inbound.Server');
    const json = Server.toJSON(serverToWire(richHttpServer));
    jsonSet(json, ['protocol', 'detect', 'timeout'], { seconds: 10 });
    const encoded = Uint8Array.from(t.encode(t.fromObject(json as Record<string, unknown>)).finish());
    assert.deepStrictEqual(Server.decode(encoded), Server.decode(Server.encode(serverToWire(richHttpServer)).finish()));
  });

  it('agrees on PortSpec both ways and byte by byte', () => {
    const encoded = PortSpec.encode({ workload: 'a:b', port: 4191 }).finish();
    // field 1 (LEN) "a:b"; field 2 (VARINT) 4191 = 0x105f -> df 20.
    assert.equal(hex(encoded), '0a03613a6210df20');
    assert.deepStrictEqual(readWithPbjs('io.linkerd.proxy.inbound.PortSpec', encoded), { workload: 'a:b', port: 4191 });
    const t = pbjs('io.linkerd.proxy.inbound.PortSpec');
    assert.deepStrictEqual(PortSpec.decode(Uint8Array.from(t.encode({ workload: '{"ns":"x","pod":"y"}', port: 80 }).finish())), {
      workload: '{"ns":"x","pod":"y"}',
      port: 80,
    });
  });

  it('encodes IPv4 as fixed32, first octet most significant', () => {
    const encoded = IPAddress.encode(ipToWire('10.1.2.3')).finish();
    // field 1 (I32), little-endian 0x0a010203.
    assert.equal(hex(encoded), '0d0302010a');
    assert.deepStrictEqual(readWithPbjs('io.linkerd.proxy.net.IPAddress', encoded), { ipv4: 0x0a010203 });
    assert.deepStrictEqual(IPAddress.decode(bytes('0d ff ff ff ff')), { ip: { $case: 'ipv4', value: 0xffffffff } });
  });

  it('encodes IPv6 as two fixed64 halves, most significant hextet first', () => {
    const encoded = IPAddress.encode(ipToWire('2001:db8::1')).finish();
    // field 2 (LEN, 18 bytes) { field 1 (I64) 0x20010db800000000, field 2 (I64) 1 }, little-endian.
    assert.equal(hex(encoded), '1212' + '09' + '00000000b80d0120' + '11' + '0100000000000000');
    assert.deepStrictEqual(readWithPbjs('io.linkerd.proxy.net.IPAddress', encoded), {
      ipv6: { first: (0x20010db8n << 32n).toString(), last: '1' },
    });
    const last = IPAddress.encode(ipToWire('fd00::ffff:1:2:3')).finish();
    assert.deepStrictEqual(jsonAt(readWithPbjs('io.linkerd.proxy.net.IPAddress', last), 'ipv6'), {
      first: (0xfd00n << 48n).toString(),
      last: ((0xffffn << 48n) | (1n << 32n) | (2n << 16n) | 3n).toString(),
    });
  });

  it('encodes Server fields with their numbers', () => {
    // Server { protocol (1) { opaque (2) {} }, labels (4) { "name": "x" } }
    const m: Server = { protocol: { kind: { $case: 'opaque', value: {} } }, serverIps: [], authorizations: [], labels: { name: 'x' } };
    assert.equal(hex(Server.encode(m).finish()), '0a021200' + '2209' + '0a046e616d65' + '120178');
    // Authz { networks (1), authentication (2) { meshTLS (2) { unauthenticated (1) {} } }, metadata (4) { default (1) "d" } }
    const withAuthz: Server = {
      protocol: undefined,
      serverIps: [],
      authorizations: [
        {
          networks: [{ net: { ip: { ip: { $case: 'ipv4', value: 0 } }, prefixLen: 0 }, except: [] }],
          authentication: { permit: { $case: 'meshTLS', value: { clients: { $case: 'unauthenticated', value: {} } } } },
          labels: {},
          metadata: { kind: { $case: 'default', value: 'd' } },
        },
      ],
      labels: {},
    };
    assert.equal(hex(Server.encode(withAuthz).finish()), '1a16' + '0a09' + '0a07' + '0a05' + '0d00000000' + '1204' + '12020a00' + '2203' + '0a0164');
  });

  it('agrees on CertifyRequest and CertifyResponse both ways', () => {
    const req: CertifyRequest = { identity: 'web.ns', token: bytes('0102'), certificateSigningRequest: bytes('3003') };
    const reqBytes = CertifyRequest.encode(req).finish();
    assert.equal(hex(reqBytes), '0a067765622e6e73' + '12020102' + '1a023003');
    assert.deepStrictEqual(readWithPbjs('io.linkerd.proxy.identity.CertifyRequest', reqBytes), {
      identity: 'web.ns',
      token: 'AQI=',
      certificateSigningRequest: 'MAM=',
    });

    const validUntil = new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 678));
    const res: CertifyResponse = { leafCertificate: bytes('aa'), intermediateCertificates: [bytes('bb'), bytes('cc')], validUntil };
    const resBytes = CertifyResponse.encode(res).finish();
    const obj = readWithPbjs('io.linkerd.proxy.identity.CertifyResponse', resBytes);
    assert.deepStrictEqual(obj, {
      leafCertificate: 'qg==',
      intermediateCertificates: ['uw==', 'zA=='],
      validUntil: { seconds: String(Math.floor(validUntil.getTime() / 1000)), nanos: 678_000_000 },
    });
    const t = pbjs('io.linkerd.proxy.identity.CertifyResponse');
    const back = CertifyResponse.decode(Uint8Array.from(t.encode(t.fromObject(obj as Record<string, unknown>)).finish()));
    assert.deepStrictEqual(back, res);
  });

  it('agrees on Update with WeightedAddr, TlsIdentity and ProtocolHint both ways', () => {
    const wire = destinationEventToWire({
      kind: 'add',
      endpoints: [
        {
          ip: '10.42.0.7',
          port: 8080,
          weight: 10000,
          labels: { pod: 'web-1' },
          identity: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local',
          serverName: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local',
          opaqueTransportPort: 4143,
          protocolHint: 'opaque',
        },
      ],
      setLabels: { service: 'web-svc' },
    });
    const encoded = Update.encode(wire).finish();
    const obj = readWithPbjs('io.linkerd.proxy.destination.Update', encoded);
    assert.deepStrictEqual(jsonAt(obj, 'add', 'addrs', 0, 'tlsIdentity'), {
      dnsLikeIdentity: { name: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local' },
      serverName: { name: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local' },
    });
    assert.deepStrictEqual(jsonAt(obj, 'add', 'addrs', 0, 'protocolHint'), { opaque: {}, opaqueTransport: { inboundPort: 4143 } });
    assert.deepStrictEqual(obj, Update.toJSON(wire));
    const t = pbjs('io.linkerd.proxy.destination.Update');
    assert.deepStrictEqual(Update.decode(Uint8Array.from(t.encode(t.fromObject(obj as Record<string, unknown>)).finish())), Update.decode(encoded));
    // Update { no_endpoints (3) { exists (1) true } }; WeightedAddr.weight is field 3, tls_identity 5, protocol_hint 6.
    assert.equal(hex(Update.encode(destinationEventToWire({ kind: 'noEndpoints', exists: true })).finish()), '1a020801');
    const addr = pbjs('io.linkerd.proxy.destination.WeightedAddr');
    assert.equal(hex(addr.encode({ weight: 1 }).finish()), '1801');
    assert.deepStrictEqual(
      [...addr.fieldsArray].map((f) => [f.name, f.id]).sort((a, b) => (a[1] as number) - (b[1] as number)),
      [
        ['addr', 1],
        ['weight', 3],
        ['metricLabels', 4],
        ['tlsIdentity', 5],
        ['protocolHint', 6],
        ['authorityOverride', 7],
        ['http2', 8],
        ['resourceRef', 9],
      ],
    );
  });
});
