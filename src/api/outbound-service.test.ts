/**
 * OutboundPolicies and Destination/GetProfile over a real loopback server on port 0, called as a
 * proxy calls them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { destinationService, type ProfileResolver } from './destination-service.js';
import { DestinationDefinition, DestinationProfile } from './gen/destination.js';
import { OutboundPoliciesDefinition, type OutboundPolicy, type TrafficSpec } from './gen/outbound.js';
import type { GrpcError } from './grpc-error.js';
import { type GrpcServerHandle, startGrpcServer } from './grpc-server.js';
import { H2GrpcClient } from './h2-grpc-client.js';
import { ipToWire } from './ip-wire.js';
import { type OutboundResolver, outboundPolicyService } from './outbound-service.js';
import { type DestinationProfileModel, destinationProfileToWire, type OutboundPolicyModel, outboundPolicyToWire } from './outbound-wire.js';
import { rejection, waitFor } from './test-helpers.js';

const WORKLOAD = '{"ns":"demo", "pod":"client-0"}\n';
const WEB: OutboundPolicyModel = { kind: 'service', namespace: 'demo', name: 'web', port: 80, authority: 'web.demo.svc.cluster.local:80' };
const WEB_OPAQUE: OutboundPolicyModel = { ...WEB, appProtocol: 'opaque' };

function stream<T>() {
  const messages: T[] = [];
  let ended: { error: GrpcError | undefined } | undefined;
  return {
    messages,
    get ended() {
      return ended;
    },
    handlers: { onMessage: (m: T) => messages.push(m), onEnd: (error: GrpcError | undefined) => (ended = { error }) },
  };
}

describe('OutboundPolicies and GetProfile over gRPC', () => {
  const listeners = new Set<(m: OutboundPolicyModel) => void>();
  const requests: unknown[] = [];
  const resolve: OutboundResolver = (req) => {
    requests.push(req);
    if (req.target.kind === 'addr' && req.target.ip === '10.244.0.7') return { ok: false, code: 'NOT_FOUND', message: 'No such service' };
    return {
      ok: true,
      subscribe: (listener) => {
        listener(WEB);
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
    };
  };
  const profileListeners = new Set<(m: DestinationProfileModel) => void>();
  const profile: DestinationProfileModel = {
    kind: 'service',
    namespace: 'demo',
    name: 'web',
    port: 80,
    fullyQualifiedName: 'web.demo.svc.cluster.local',
    opaqueProtocol: false,
  };
  const resolveProfile: ProfileResolver = (req) =>
    req.path === 'bad'
      ? { ok: false, code: 'INVALID_ARGUMENT', message: 'invalid authority' }
      : {
          ok: true,
          subscribe: (listener) => {
            listener(profile);
            profileListeners.add(listener);
            return () => profileListeners.delete(listener);
          },
        };
  let server: GrpcServerHandle;
  let client: H2GrpcClient;
  const spec = (ip: string, port: number): TrafficSpec => ({ sourceWorkload: WORKLOAD, target: { $case: 'addr', value: { ip: ipToWire(ip), port } } });

  before(async () => {
    server = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      services: [outboundPolicyService(resolve), destinationService(() => ({ ok: false, code: 'NOT_FOUND', message: 'unused' }), resolveProfile)],
    });
    client = new H2GrpcClient({ address: `127.0.0.1:${server.port}` });
  });
  after(async () => {
    client.close();
    await server.close(100);
  });

  it('Get answers the current policy of an address, with the client namespace from the workload', async () => {
    const got = await client.unary(OutboundPoliciesDefinition, OutboundPoliciesDefinition.methods.get, spec('10.96.0.10', 80));
    assert.deepStrictEqual(got, outboundPolicyToWire(WEB));
    assert.deepStrictEqual(requests.at(-1), { sourceNamespace: 'demo', target: { kind: 'addr', ip: '10.96.0.10', port: 80 } });
    assert.equal(listeners.size, 0, 'Get keeps no subscription');
  });

  it('Watch sends the policy and each change until cancelled', async () => {
    const w = stream<OutboundPolicy>();
    const cancel = client.serverStream(OutboundPoliciesDefinition, OutboundPoliciesDefinition.methods.watch, spec('10.96.0.10', 80), w.handlers);
    await waitFor(() => w.messages.length === 1, 'the initial policy');
    for (const l of listeners) l(WEB_OPAQUE);
    await waitFor(() => w.messages.length === 2, 'the change');
    assert.deepStrictEqual(w.messages, [outboundPolicyToWire(WEB), outboundPolicyToWire(WEB_OPAQUE)]);
    cancel();
    await waitFor(() => listeners.size === 0, 'the unsubscribe');
  });

  it('refuses what upstream refuses: no target, a bad workload, port 0, and passes NOT_FOUND through', async () => {
    const call = (s: TrafficSpec) => rejection(client.unary(OutboundPoliciesDefinition, OutboundPoliciesDefinition.methods.get, s));
    const noTarget = await call({ sourceWorkload: WORKLOAD, target: undefined });
    assert.deepStrictEqual([noTarget.code, noTarget.details], ['INVALID_ARGUMENT', 'target is required']);
    const badWorkload = await call({ ...spec('10.96.0.10', 80), sourceWorkload: 'nope' });
    assert.equal(badWorkload.code, 'INVALID_ARGUMENT');
    const zero = await call(spec('10.96.0.10', 0));
    assert.deepStrictEqual([zero.code, zero.details], ['INVALID_ARGUMENT', 'port cannot be zero']);
    const pod = await call(spec('10.244.0.7', 8080));
    assert.deepStrictEqual([pod.code, pod.details], ['NOT_FOUND', 'No such service']);
    const w = stream<OutboundPolicy>();
    client.serverStream(OutboundPoliciesDefinition, OutboundPoliciesDefinition.methods.watch, spec('10.244.0.7', 8080), w.handlers);
    await waitFor(() => w.ended !== undefined, 'the refusal');
    assert.deepStrictEqual([w.messages.length, w.ended?.error?.code], [0, 'NOT_FOUND']);
  });

  it('GetProfile streams the profile and its changes; refusals carry the resolver code', async () => {
    const w = stream<DestinationProfile>();
    const cancel = client.serverStream(
      DestinationDefinition,
      DestinationDefinition.methods.getProfile,
      { scheme: '', path: '10.96.0.10:80', contextToken: '' },
      w.handlers,
    );
    await waitFor(() => w.messages.length === 1, 'the initial profile');
    const opaque = { ...profile, opaqueProtocol: true };
    for (const l of profileListeners) l(opaque);
    await waitFor(() => w.messages.length === 2, 'the change');
    // As decoded (the retry ratio is a float32 on the wire).
    const decoded = (m: DestinationProfileModel) => DestinationProfile.decode(DestinationProfile.encode(destinationProfileToWire(m)).finish());
    assert.deepStrictEqual(w.messages, [decoded(profile), decoded(opaque)]);
    cancel();
    await waitFor(() => profileListeners.size === 0, 'the unsubscribe');
    const bad = stream<DestinationProfile>();
    client.serverStream(DestinationDefinition, DestinationDefinition.methods.getProfile, { scheme: '', path: 'bad', contextToken: '' }, bad.handlers);
    await waitFor(() => bad.ended !== undefined, 'the refusal');
    assert.deepStrictEqual([bad.ended?.error?.code, bad.ended?.error?.details], ['INVALID_ARGUMENT', 'invalid authority']);
  });

  it('ends Watch and GetProfile streams with OK on shutdown', async () => {
    const own = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      services: [outboundPolicyService(resolve), destinationService(() => ({ ok: false, code: 'NOT_FOUND', message: '' }), resolveProfile)],
    });
    const c = new H2GrpcClient({ address: `127.0.0.1:${own.port}` });
    try {
      const w = stream<OutboundPolicy>();
      c.serverStream(OutboundPoliciesDefinition, OutboundPoliciesDefinition.methods.watch, spec('10.96.0.10', 80), w.handlers);
      const p = stream<DestinationProfile>();
      c.serverStream(DestinationDefinition, DestinationDefinition.methods.getProfile, { scheme: '', path: '10.96.0.10:80', contextToken: '' }, p.handlers);
      await waitFor(() => w.messages.length === 1 && p.messages.length === 1, 'the initial values');
      await own.close(1000);
      await waitFor(() => w.ended !== undefined && p.ended !== undefined, 'the ends');
      assert.deepStrictEqual([w.ended?.error, p.ended?.error], [undefined, undefined]);
      assert.deepStrictEqual([listeners.size, profileListeners.size], [0, 0]);
    } finally {
      c.close();
    }
  });
});
