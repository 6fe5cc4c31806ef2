/**
 * The gRPC services and clients over real loopback servers on port 0 (insecure and TLS).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, connect, createServer, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client, credentials, type ServiceError } from '@grpc/grpc-js';
import { deepEqual, type InboundServer } from '../core/index.js';
import { hasCode } from '../shared/index.js';
import { DestinationClient } from './destination-client.js';
import { type DestinationResolver, destinationService } from './destination-service.js';
import type { DestinationEvent } from './destination-wire.js';
import type { GrpcError } from './grpc-error.js';
import { type GrpcServerHandle, startGrpcServer } from './grpc-server.js';
import { IdentityClient } from './identity-client.js';
import { type CertifyFunction, identityService } from './identity-service.js';
import { InboundPolicyClient } from './inbound-client.js';
import { inboundPolicyService } from './inbound-service.js';
import { serverToProtoJson } from './proto-json.js';
import { defaultServer, grpcServer, meshIdentities, richHttpServer } from './test-fixtures.js';
import { FakeCell, makeTestPki, rejection, waitFor } from './test-helpers.js';
import type { WireResult } from './wire-result.js';

// === fakes ===

class FakeDiscovery {
  readonly cells = new Map<string, FakeCell>();

  add(ns: string, pod: string, port: number, value: InboundServer): FakeCell {
    const cell = new FakeCell(value);
    this.cells.set(`${ns}/${pod}:${port}`, cell);
    return cell;
  }

  lookup(ns: string, pod: string, port: number): FakeCell | undefined {
    if (pod === 'explode') throw new Error('index exploded');
    return this.cells.get(`${ns}/${pod}:${port}`);
  }

  get subscribers(): number {
    let n = 0;
    for (const c of this.cells.values()) n += c.listeners.size;
    return n;
  }
}

// === helpers ===

/** Collects a watch: values (or invalid messages) and how it ended. */
function collect<T>() {
  const messages: WireResult<T>[] = [];
  let ended: { error: GrpcError | undefined } | undefined;
  return {
    messages,
    get ended() {
      return ended;
    },
    handlers: {
      onMessage: (m: WireResult<T>) => messages.push(m),
      onEnd: (error: GrpcError | undefined) => {
        ended = { error };
      },
    },
    values(): T[] {
      return messages.map((m) => {
        assert.ok(m.ok, m.ok ? '' : m.message);
        return m.value;
      });
    },
  };
}

const withAuthz = (s: InboundServer, n: number): InboundServer => ({
  ...s,
  authorizations: Array.from({ length: n }, (_, i) => ({ ...meshIdentities, meta: { ...meshIdentities.meta, name: `authz-${i}` } })),
});

interface TestCerts {
  caPem: string;
  serverCertPem: string;
  serverKeyPem: string;
  otherServerCertPem: string;
  otherServerKeyPem: string;
  clientCertPem: string;
  clientKeyPem: string;
}

/** ECDSA P-256 CA, two server certificates and a client certificate, made with the openssl CLI. */
function makeCerts(dir: string): TestCerts {
  const { caPem, leaves } = makeTestPki(dir, {
    server: 'linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local',
    other: 'policy2.ward.test',
    client: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local',
  });
  return {
    caPem,
    serverCertPem: leaves.server.certPem,
    serverKeyPem: leaves.server.keyPem,
    otherServerCertPem: leaves.other.certPem,
    otherServerKeyPem: leaves.other.keyPem,
    clientCertPem: leaves.client.certPem,
    clientKeyPem: leaves.client.keyPem,
  };
}

const SERVER_NAME = 'linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local';
const WEB = '{"ns":"emojivoto","pod":"web-1"}';

// === tests ===

describe('InboundServerPolicies over loopback', () => {
  const discovery = new FakeDiscovery();
  const web = discovery.add('emojivoto', 'web-1', 8080, defaultServer);
  discovery.add('emojivoto', 'web-1', 9090, grpcServer);
  const counts = { open: 0, close: 0, sent: 0 };
  let server: GrpcServerHandle;
  let client: InboundPolicyClient;
  let address: string;

  before(async () => {
    server = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      services: [
        inboundPolicyService(discovery, {
          onStreamOpen: () => counts.open++,
          onStreamClose: () => counts.close++,
          onUpdateSent: () => counts.sent++,
        }),
      ],
    });
    address = `127.0.0.1:${server.port}`;
    client = new InboundPolicyClient({ address });
  });
  after(async () => {
    client.close();
    await server.close(100);
  });

  it('GetPort answers the current policy', async () => {
    assert.ok(server.port > 0);
    assert.deepStrictEqual(await client.getPort(WEB, 8080), defaultServer);
    assert.deepStrictEqual(await client.getPort('emojivoto:web-1', 9090), grpcServer);
    const wire = await client.getPortWire(WEB, 8080, { deadlineMs: 5000 });
    assert.deepStrictEqual(await import('./gen/inbound.js').then((m) => m.Server.toJSON(wire)), serverToProtoJson(defaultServer));
  });

  it('GetPort answers NOT_FOUND for an unknown pod or port', async () => {
    const e = await rejection(client.getPort('{"ns":"emojivoto","pod":"nope"}', 8080));
    assert.equal(e.code, 'NOT_FOUND');
    assert.equal(e.details, 'unknown server: emojivoto/nope:8080');
    assert.equal((await rejection(client.getPort(WEB, 1234))).code, 'NOT_FOUND');
    assert.equal((await rejection(client.getPort('{"ns":"emojivoto","external_workload":"vm"}', 8080))).code, 'NOT_FOUND');
  });

  for (const [workload, port, details] of [
    [WEB, 0, 'Invalid port: 0'],
    [WEB, 70000, 'Invalid port: 70000'],
    ['no-colon', 8080, 'workload "no-colon" is not <namespace>:<pod> or JSON'],
    [':web-1', 8080, 'workload ":web-1" has an empty namespace or pod'],
    ['emojivoto:', 8080, 'workload "emojivoto:" has an empty namespace or pod'],
    ['{"ns":"emojivoto","pod":"web-1","extra":1}', 8080, 'unknown workload field "extra"'],
    ['{"ns":"emojivoto"', 8080, undefined],
    ['{"ns":"emojivoto"}', 8080, 'workload JSON needs exactly one of "pod" and "external_workload"'],
    ['', 8080, 'workload "" is not <namespace>:<pod> or JSON'],
  ] as const) {
    it(`GetPort answers INVALID_ARGUMENT for ${JSON.stringify(workload)}:${port}`, async () => {
      const e = await rejection(client.getPort(workload, port));
      assert.equal(e.code, 'INVALID_ARGUMENT');
      if (details !== undefined) assert.equal(e.details, details);
    });
  }

  it('answers INTERNAL when the lookup throws, and keeps serving', async () => {
    const e = await rejection(client.getPort('emojivoto:explode', 8080));
    assert.deepStrictEqual([e.code, e.details], ['INTERNAL', 'index exploded']);
    const w = collect<InboundServer>();
    client.watchPort('emojivoto:explode', 8080, w.handlers);
    await waitFor(() => w.ended !== undefined, 'the watch to fail');
    assert.equal(w.ended?.error?.code, 'INTERNAL');
    assert.deepStrictEqual(await client.getPort(WEB, 8080), defaultServer);
  });

  it('WatchPort sends the current value, then only real changes, and unsubscribes on cancel', async () => {
    const before = { ...counts };
    const w = collect<InboundServer>();
    const cancel = client.watchPort(WEB, 8080, w.handlers);
    await waitFor(() => w.messages.length === 1, 'the first message');
    assert.deepStrictEqual(w.values(), [defaultServer]);
    assert.equal(web.listeners.size, 1);

    web.publish(structuredClone(defaultServer)); // equal: not published
    web.publish(richHttpServer);
    await waitFor(() => w.messages.length === 2, 'the change');
    web.publish(richHttpServer); // same again: nothing
    web.publish(defaultServer);
    await waitFor(() => w.messages.length === 3, 'the second change');
    assert.deepStrictEqual(w.values(), [defaultServer, richHttpServer, defaultServer]);

    cancel();
    await waitFor(() => web.listeners.size === 0, 'the unsubscribe');
    assert.equal(w.ended, undefined, 'no end callback after cancel');
    assert.equal(counts.open - before.open, 1);
    await waitFor(() => counts.close - before.close === 1, 'onStreamClose');
    assert.equal(counts.sent - before.sent, 3);
  });

  it('WatchPort fails with NOT_FOUND / INVALID_ARGUMENT', async () => {
    const nf = collect<InboundServer>();
    client.watchPort('emojivoto:nope', 8080, nf.handlers);
    const ia = collect<InboundServer>();
    client.watchPort(WEB, 0, ia.handlers);
    await waitFor(() => nf.ended !== undefined && ia.ended !== undefined, 'both errors');
    assert.equal(nf.ended?.error?.code, 'NOT_FOUND');
    assert.deepStrictEqual([ia.ended?.error?.code, ia.ended?.error?.details], ['INVALID_ARGUMENT', 'Invalid port: 0']);
    assert.deepStrictEqual([nf.messages, ia.messages], [[], []]);
  });

  it('coalesces a burst of changes for a stream whose buffer is full: the last value always arrives', async () => {
    const cell = discovery.add('emojivoto', 'burst', 8080, defaultServer);
    const w = collect<InboundServer>();
    const cancel = client.watchPort('emojivoto:burst', 8080, w.handlers);
    await waitFor(() => w.messages.length === 1, 'the first message');
    const values = Array.from({ length: 200 }, (_, i) => withAuthz(defaultServer, 1 + (i % 50) + (i >= 50 ? 50 : 0)));
    for (const v of values) cell.publish(v);
    const last = values.at(-1) as InboundServer;
    await waitFor(() => w.messages.length > 1 && deepEqual(w.values().at(-1), last), 'the last value');
    assert.ok(w.messages.length < values.length, `expected coalescing, got ${w.messages.length} messages`);
    cancel();
    await waitFor(() => cell.listeners.size === 0, 'the unsubscribe');
  });

  it('answers malformed request bytes with INTERNAL or INVALID_ARGUMENT and keeps serving', async () => {
    const raw = new Client(address, credentials.createInsecure());
    const call = (method: string, bytes: number[]) =>
      new Promise<ServiceError | null>((resolve) => {
        raw.makeUnaryRequest(
          `/io.linkerd.proxy.inbound.InboundServerPolicies/${method}`,
          (b: Buffer) => b,
          (b: Buffer) => b,
          Buffer.from(bytes),
          (err) => resolve(err),
        );
      });
    try {
      // Field 1 claims 255 bytes that are not there.
      const truncated = await call('GetPort', [0x0a, 0xff, 0x01]);
      assert.equal(truncated?.code, 13);
      // Field 2 sent as a string: skipped as unknown, so the port is 0.
      const wrongType = await call('GetPort', [0x0a, 0x03, 0x61, 0x3a, 0x62, 0x12, 0x01, 0x00]);
      assert.deepStrictEqual([wrongType?.code, wrongType?.details], [3, 'Invalid port: 0']);
      const stream = raw.makeServerStreamRequest(
        '/io.linkerd.proxy.inbound.InboundServerPolicies/WatchPort',
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.from([0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
      );
      const code = await new Promise<number>((resolve) => stream.on('error', (e: ServiceError) => resolve(e.code)));
      assert.ok(code === 13 || code === 3, `code ${code}`);
    } finally {
      raw.close();
    }
    assert.deepStrictEqual(await client.getPort(WEB, 8080), defaultServer);
  });

  it('200 watch streams cancelled abruptly leave no subscribers', async () => {
    const cell = discovery.add('emojivoto', 'many', 8080, defaultServer);
    // Half are cancelled by the client, half lose their connection (through a proxy we cut).
    const sockets = new Set<Socket>();
    const proxy: NetServer = createServer((down) => {
      const up = connect(server.port, '127.0.0.1');
      sockets.add(down).add(up);
      down.pipe(up).pipe(down);
      const drop = () => {
        down.destroy();
        up.destroy();
      };
      down.on('error', drop).on('close', drop);
      up.on('error', drop).on('close', drop);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const viaProxy = new InboundPolicyClient({ address: `127.0.0.1:${(proxy.address() as AddressInfo).port}` });
    try {
      const watches = Array.from({ length: 200 }, (_, i) => {
        const w = collect<InboundServer>();
        const cancel = (i % 2 === 0 ? client : viaProxy).watchPort('emojivoto:many', 8080, w.handlers);
        return { w, cancel };
      });
      await waitFor(() => watches.every(({ w }) => w.messages.length === 1), 'every first message', 15_000);
      assert.equal(cell.listeners.size, 200);
      for (const [i, { cancel }] of watches.entries()) if (i % 2 === 0) cancel();
      for (const s of sockets) s.destroy();
      await waitFor(() => cell.listeners.size === 0, 'zero subscribers', 15_000);
      cell.publish(richHttpServer);
      await waitFor(() => watches.every(({ w }, i) => i % 2 === 0 || w.ended !== undefined), 'the cut watches to end');
      assert.ok(watches.every(({ w }) => w.messages.length === 1));
      await waitFor(() => counts.open === counts.close, 'every stream closed');
    } finally {
      viaProxy.close();
      await new Promise<void>((r) => proxy.close(() => r()));
    }
  });
});

describe('server shutdown', () => {
  it('ends watch streams with OK, unsubscribes, and stops accepting calls', async () => {
    const discovery = new FakeDiscovery();
    const cell = discovery.add('ns', 'pod', 80, defaultServer);
    const counts = { open: 0, close: 0 };
    const server = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      services: [inboundPolicyService(discovery, { onStreamOpen: () => counts.open++, onStreamClose: () => counts.close++ })],
    });
    const client = new InboundPolicyClient({ address: `127.0.0.1:${server.port}` });
    try {
      const watches = [collect<InboundServer>(), collect<InboundServer>(), collect<InboundServer>()];
      for (const w of watches) client.watchPort('ns:pod', 80, w.handlers);
      await waitFor(() => watches.every((w) => w.messages.length === 1), 'first messages');
      const started = Date.now();
      await server.close(2000);
      assert.ok(Date.now() - started < 1500, 'closed without waiting for the grace period');
      await waitFor(() => watches.every((w) => w.ended !== undefined), 'stream ends');
      for (const w of watches) assert.equal(w.ended?.error, undefined, `ended with ${w.ended?.error?.code}`);
      assert.equal(cell.listeners.size, 0);
      assert.deepStrictEqual(counts, { open: 3, close: 3 });
      await server.close(); // idempotent
      const e = await rejection(client.getPort('ns:pod', 80, { deadlineMs: 2000 }));
      assert.ok(e.code === 'UNAVAILABLE' || e.code === 'DEADLINE_EXCEEDED', e.code);
    } finally {
      client.close();
    }
  });

  it('cuts calls that outlive the grace period', async () => {
    let release: (() => void) | undefined;
    const certify: CertifyFunction = () =>
      new Promise((resolve) => {
        release = () => resolve({ ok: false, code: 'INTERNAL', message: 'late' });
      });
    const server = await startGrpcServer({ host: '127.0.0.1', port: 0, services: [identityService(certify)] });
    const client = new IdentityClient({ address: `127.0.0.1:${server.port}` });
    try {
      const pending = rejection(client.certify({ identity: 'x', token: new Uint8Array(), csrDer: new Uint8Array() }));
      await waitFor(() => release !== undefined, 'the call to arrive');
      const started = Date.now();
      await server.close(100);
      assert.ok(Date.now() - started < 1000);
      assert.ok(['UNAVAILABLE', 'CANCELLED', 'INTERNAL'].includes((await pending).code));
    } finally {
      release?.();
      client.close();
    }
  });
});

describe('Identity.Certify', () => {
  const leaf = Uint8Array.from([0x30, 0x82, 0x01]);
  const chain = [Uint8Array.from([0x30, 1]), Uint8Array.from([0x30, 2])];
  const validUntilMs = Date.UTC(2030, 0, 1, 12, 0, 0, 250);
  const seen: { identity: string; token: Uint8Array; csrDer: Uint8Array }[] = [];
  const certify: CertifyFunction = (req) => {
    seen.push({ identity: req.identity, token: Uint8Array.from(req.token), csrDer: Uint8Array.from(req.csrDer) });
    switch (req.identity) {
      case 'ok':
        return Promise.resolve({ ok: true, leafDer: leaf, chainDer: chain, validUntilMs });
      case 'throw':
        throw new Error('certify threw');
      case 'reject':
        return Promise.reject(new Error('certify rejected'));
      default:
        return Promise.resolve({ ok: false, code: req.identity as 'INVALID_ARGUMENT', message: `no: ${req.identity}` });
    }
  };
  let server: GrpcServerHandle;
  let client: IdentityClient;
  before(async () => {
    server = await startGrpcServer({ host: '127.0.0.1', port: 0, services: [identityService(certify)] });
    client = new IdentityClient({ address: `127.0.0.1:${server.port}` });
  });
  after(async () => {
    client.close();
    await server.close(100);
  });

  it('returns the certificate, chain and expiry', async () => {
    const r = await client.certify({ identity: 'ok', token: Uint8Array.from([1, 2, 3]), csrDer: Uint8Array.from([0x30, 0]) });
    assert.deepStrictEqual(Uint8Array.from(r.leafDer), leaf);
    assert.deepStrictEqual(
      r.chainDer.map((c) => Uint8Array.from(c)),
      chain,
    );
    assert.equal(r.validUntilMs, validUntilMs);
    assert.deepStrictEqual(seen.at(-1), { identity: 'ok', token: Uint8Array.from([1, 2, 3]), csrDer: Uint8Array.from([0x30, 0]) });
  });

  for (const code of ['INVALID_ARGUMENT', 'FAILED_PRECONDITION', 'UNAVAILABLE', 'PERMISSION_DENIED', 'INTERNAL'] as const) {
    it(`maps ${code}`, async () => {
      const e = await rejection(client.certify({ identity: code, token: new Uint8Array(), csrDer: new Uint8Array() }));
      assert.deepStrictEqual([e.code, e.details], [code, `no: ${code}`]);
    });
  }

  it('maps a throwing or rejecting certify function to INTERNAL', async () => {
    for (const identity of ['throw', 'reject']) {
      const e = await rejection(client.certify({ identity, token: new Uint8Array(), csrDer: new Uint8Array() }));
      assert.deepStrictEqual([e.code, e.details], ['INTERNAL', `certify ${identity === 'throw' ? 'threw' : 'rejected'}`]);
    }
  });
});

describe('Destination.Get', () => {
  const listeners = new Set<(e: DestinationEvent) => void>();
  const initial: DestinationEvent = {
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
        protocolHint: 'h2',
      },
    ],
    setLabels: { service: 'web-svc', namespace: 'emojivoto' },
  };
  const requests: { path: string; contextToken: string }[] = [];
  const resolve: DestinationResolver = (req) => {
    requests.push({ ...req });
    if (req.path === 'bad') return { ok: false, code: 'INVALID_ARGUMENT', message: 'bad path' };
    if (req.path !== 'web-svc.emojivoto.svc.cluster.local:80') return { ok: false, code: 'NOT_FOUND', message: `unknown ${req.path}` };
    return {
      ok: true,
      subscribe: (listener) => {
        listener(initial);
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
    };
  };
  let server: GrpcServerHandle;
  let client: DestinationClient;
  before(async () => {
    server = await startGrpcServer({ host: '127.0.0.1', port: 0, services: [destinationService(resolve)] });
    client = new DestinationClient({ address: `127.0.0.1:${server.port}` });
  });
  after(async () => {
    client.close();
    await server.close(100);
  });

  it('streams the initial events and every change until cancelled', async () => {
    const w = collect<DestinationEvent>();
    const cancel = client.get('web-svc.emojivoto.svc.cluster.local:80', w.handlers, '{"ns":"emojivoto"}');
    await waitFor(() => w.messages.length === 1, 'the initial event');
    assert.deepStrictEqual(requests.at(-1), { path: 'web-svc.emojivoto.svc.cluster.local:80', contextToken: '{"ns":"emojivoto"}' });
    const removed: DestinationEvent = { kind: 'remove', addrs: [{ ip: '10.42.0.7', port: 8080 }] };
    const none: DestinationEvent = { kind: 'noEndpoints', exists: true };
    for (const l of listeners) l(removed);
    for (const l of listeners) l(none);
    await waitFor(() => w.messages.length === 3, 'the changes');
    assert.deepStrictEqual(w.values(), [initial, removed, none]);
    cancel();
    await waitFor(() => listeners.size === 0, 'the unsubscribe');
  });

  it('fails with the resolver code', async () => {
    const bad = collect<DestinationEvent>();
    client.get('bad', bad.handlers);
    const unknown = collect<DestinationEvent>();
    client.get('nope.ns.svc.cluster.local:80', unknown.handlers);
    await waitFor(() => bad.ended !== undefined && unknown.ended !== undefined, 'both errors');
    assert.deepStrictEqual([bad.ended?.error?.code, bad.ended?.error?.details], ['INVALID_ARGUMENT', 'bad path']);
    assert.equal(unknown.ended?.error?.code, 'NOT_FOUND');
  });

  it('ends streams with OK on shutdown', async () => {
    const own = await startGrpcServer({ host: '127.0.0.1', port: 0, services: [destinationService(resolve)] });
    const c = new DestinationClient({ address: `127.0.0.1:${own.port}` });
    try {
      const w = collect<DestinationEvent>();
      c.get('web-svc.emojivoto.svc.cluster.local:80', w.handlers);
      await waitFor(() => w.messages.length === 1, 'the initial event');
      await own.close(1000);
      await waitFor(() => w.ended !== undefined, 'the end');
      assert.equal(w.ended?.error, undefined);
      assert.equal(listeners.size, 0);
    } finally {
      c.close();
    }
  });
});

describe('TLS', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ward-grpc-tls-'));
  let certs: TestCerts;
  const discovery = new FakeDiscovery();
  discovery.add('emojivoto', 'web-1', 8080, defaultServer);
  before(() => {
    certs = makeCerts(dir);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('serves over TLS, checks the server name, and replaces the certificate', async () => {
    const server = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      tls: { certPem: certs.serverCertPem, keyPem: certs.serverKeyPem },
      services: [inboundPolicyService(discovery)],
    });
    const address = `127.0.0.1:${server.port}`;
    const good = new InboundPolicyClient({ address, tls: { caPem: certs.caPem, serverName: SERVER_NAME } });
    const wrongName = new InboundPolicyClient({ address, tls: { caPem: certs.caPem, serverName: 'policy2.ward.test' } });
    const plaintext = new InboundPolicyClient({ address });
    try {
      assert.deepStrictEqual(await good.getPort(WEB, 8080), defaultServer);
      assert.equal((await rejection(wrongName.getPort(WEB, 8080))).code, 'UNAVAILABLE');
      assert.equal((await rejection(plaintext.getPort(WEB, 8080))).code, 'UNAVAILABLE');

      assert.ok(server.updateTls !== undefined);
      // Material that does not load (or a key that does not match) is refused; the old certificate stays.
      for (const bad of [
        { certPem: 'garbage', keyPem: certs.serverKeyPem },
        { certPem: certs.otherServerCertPem, keyPem: certs.serverKeyPem },
      ]) {
        assert.throws(
          () => server.updateTls?.(bad),
          (e) => hasCode(e, 'ERR_GRPC_TLS_INVALID'),
        );
      }
      const again = new InboundPolicyClient({ address, tls: { caPem: certs.caPem, serverName: SERVER_NAME } });
      try {
        assert.deepStrictEqual(await again.getPort(WEB, 8080), defaultServer);
      } finally {
        again.close();
      }
      server.updateTls({ certPem: certs.otherServerCertPem, keyPem: certs.otherServerKeyPem });
      const renamed = new InboundPolicyClient({ address, tls: { caPem: certs.caPem, serverName: 'policy2.ward.test' } });
      try {
        assert.deepStrictEqual(await renamed.getPort(WEB, 8080), defaultServer);
      } finally {
        renamed.close();
      }
    } finally {
      good.close();
      wrongName.close();
      plaintext.close();
      await server.close(100);
    }
  });

  it('refuses to start with TLS material that does not load', async () => {
    await assert.rejects(
      startGrpcServer({ host: '127.0.0.1', port: 0, tls: { certPem: certs.serverCertPem, keyPem: certs.otherServerKeyPem }, services: [] }),
      (e) => hasCode(e, 'ERR_GRPC_TLS_INVALID'),
    );
  });

  it('requires a client certificate signed by the CA when asked to', async () => {
    const server = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      tls: { certPem: certs.serverCertPem, keyPem: certs.serverKeyPem, caPem: certs.caPem, requireClientCert: true },
      services: [inboundPolicyService(discovery)],
    });
    const address = `127.0.0.1:${server.port}`;
    const anonymous = new InboundPolicyClient({ address, tls: { caPem: certs.caPem, serverName: SERVER_NAME } });
    const mutual = new InboundPolicyClient({
      address,
      tls: { caPem: certs.caPem, serverName: SERVER_NAME, certPem: certs.clientCertPem, keyPem: certs.clientKeyPem },
    });
    try {
      assert.deepStrictEqual(await mutual.getPort(WEB, 8080), defaultServer);
      assert.equal((await rejection(anonymous.getPort(WEB, 8080))).code, 'UNAVAILABLE');
      const w = collect<InboundServer>();
      const cancel = mutual.watchPort(WEB, 8080, w.handlers);
      await waitFor(() => w.messages.length === 1, 'the first message over mTLS');
      cancel();
    } finally {
      anonymous.close();
      mutual.close();
      await server.close(100);
    }
  });
});
