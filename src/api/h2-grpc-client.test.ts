/**
 * The HTTP/2 gRPC client over real loopback sockets: against the controller's grpc-js server
 * (the services of this module), and against raw node:http2 servers written here for the
 * protocol edges a well-behaved server never produces.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import {
  constants,
  createServer as createH2Server,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import { type AddressInfo, connect, createServer, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { InboundServer } from '../core/index.js';
import { DestinationClient } from './destination-client.js';
import { destinationService } from './destination-service.js';
import type { DestinationEvent } from './destination-wire.js';
import type { GrpcError } from './grpc-error.js';
import { decodeGrpcMessage, grpcTimeout } from './grpc-framing.js';
import { type GrpcServerHandle, startGrpcServer } from './grpc-server.js';
import { H2GrpcClient, type H2GrpcClientTuning } from './h2-grpc-client.js';
import { IdentityClient } from './identity-client.js';
import { type CertifyFunction, identityService } from './identity-service.js';
import { InboundPolicyClient } from './inbound-client.js';
import { inboundPolicyService } from './inbound-service.js';
import type { GrpcServiceDefinition, MessageCodec } from './service-definition.js';
import type { StreamHandlers } from './stream-handlers.js';
import { defaultServer, grpcServer, richHttpServer } from './test-fixtures.js';
import { FakeCell, makeTestPki, rejection, waitFor } from './test-helpers.js';
import type { WireResult } from './wire-result.js';

// === helpers ===

const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Collects a stream: messages and how it ended. */
function collect<T>() {
  const messages: T[] = [];
  let ended: { error: GrpcError | undefined } | undefined;
  const handlers: StreamHandlers<T> = {
    onMessage: (m) => messages.push(m),
    onEnd: (error) => {
      assert.equal(ended, undefined, 'onEnd called twice');
      ended = { error };
    },
  };
  return {
    messages,
    handlers,
    get ended() {
      return ended;
    },
  };
}

const values = <T>(ms: readonly WireResult<T>[]): T[] =>
  ms.map((m) => {
    assert.ok(m.ok, m.ok ? '' : m.message);
    return m.value;
  });

async function policyServer(
  cells: Record<string, FakeCell>,
  tls?: { certPem: string; keyPem: string; caPem?: string; requireClientCert?: boolean },
  host = '127.0.0.1',
) {
  const server = await startGrpcServer({
    host,
    port: 0,
    ...(tls !== undefined ? { tls } : {}),
    services: [inboundPolicyService({ lookup: (ns, pod, port) => cells[`${ns}:${pod}:${port}`] })],
  });
  cleanups.push(() => server.close(0));
  return server;
}

/** A TCP relay to `port` that counts connections and can cut them all; `dropPings` discards the client's HTTP/2 PING frames. */
async function relay(port: number, opts: { dropPings?: boolean } = {}) {
  const sockets = new Set<Socket>();
  let connections = 0;
  const server: NetServer = createServer((down) => {
    connections++;
    const up = connect(port, '127.0.0.1');
    sockets.add(down).add(up);
    const drop = () => {
      down.destroy();
      up.destroy();
    };
    down.on('error', drop).on('close', drop);
    up.on('error', drop).on('close', drop);
    up.pipe(down);
    if (opts.dropPings === true)
      down.on(
        'data',
        pingFilter((b) => up.write(b)),
      );
    else down.pipe(up);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const cut = () => {
    for (const s of sockets) s.destroy();
  };
  cleanups.push(() => {
    cut();
    return new Promise<void>((r) => server.close(() => r()));
  });
  return {
    port: (server.address() as AddressInfo).port,
    cut,
    get connections() {
      return connections;
    },
  };
}

/** Passes a client's HTTP/2 byte stream (preface, then frames) on without its PING frames (type 6). */
function pingFilter(write: (b: Buffer) => void): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0);
  let prefaceLeft = 24;
  return (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    if (prefaceLeft > 0) {
      const n = Math.min(prefaceLeft, pending.length);
      write(pending.subarray(0, n));
      pending = pending.subarray(n);
      prefaceLeft -= n;
    }
    while (pending.length >= 9) {
      const size = 9 + pending.readUIntBE(0, 3);
      if (pending.length < size) break;
      if (pending[3] !== 6) write(pending.subarray(0, size));
      pending = pending.subarray(size);
    }
  };
}

interface TestCerts {
  caPem: string;
  serverCertPem: string;
  serverKeyPem: string;
  clientCertPem: string;
  clientKeyPem: string;
}

const SERVER_NAME = 'linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local';

/** ECDSA P-256 CA, a server certificate for SERVER_NAME and a client certificate (openssl CLI). */
function makeCerts(dir: string): TestCerts {
  const { caPem, leaves } = makeTestPki(dir, { server: SERVER_NAME, client: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local' });
  return {
    caPem,
    serverCertPem: leaves.server.certPem,
    serverKeyPem: leaves.server.keyPem,
    clientCertPem: leaves.client.certPem,
    clientKeyPem: leaves.client.keyPem,
  };
}

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

// === against the controller's grpc-js server ===

describe('H2GrpcClient against the grpc-js server', () => {
  const WEB = 'emojivoto:web-1';

  it('unary and server-streaming calls share one connection', async () => {
    const web = new FakeCell(defaultServer);
    const server = await policyServer({ 'emojivoto:web-1:8080': web, 'emojivoto:web-1:9090': new FakeCell(grpcServer) });
    const counted = await relay(server.port);
    const client = new InboundPolicyClient({ address: `127.0.0.1:${counted.port}` });
    cleanups.push(() => client.close());

    assert.deepStrictEqual(await client.getPort(WEB, 8080), defaultServer);
    const [a, b] = await Promise.all([client.getPort(WEB, 9090), client.getPort(WEB, 8080, { deadlineMs: 5000 })]);
    assert.deepStrictEqual([a, b], [grpcServer, defaultServer]);

    const w = collect<WireResult<InboundServer>>();
    const cancel = client.watchPort(WEB, 8080, w.handlers);
    await waitFor(() => w.messages.length === 1, 'the first message');
    web.publish(richHttpServer);
    web.publish(grpcServer);
    web.publish(defaultServer);
    await waitFor(() => w.messages.length === 4, 'three changes');
    assert.deepStrictEqual(values(w.messages), [defaultServer, richHttpServer, grpcServer, defaultServer]);
    cancel();
    await waitFor(() => web.listeners.size === 0, 'the server to see the cancel');
    assert.equal(w.ended, undefined, 'no onEnd after cancel');
    cancel(); // idempotent
    assert.equal(counted.connections, 1, 'every call on one HTTP/2 connection');
  });

  it('delivers status codes and messages, non-ASCII and percent signs included', async () => {
    const details = 'café ✓ 100% /ünï\tcode: ☃ 𝄞 %41 done';
    const certify: CertifyFunction = (req) => Promise.resolve({ ok: false, code: req.identity as 'PERMISSION_DENIED', message: details });
    const server = await startGrpcServer({ host: '127.0.0.1', port: 0, services: [identityService(certify)] });
    cleanups.push(() => server.close(0));
    const client = new IdentityClient({ address: `127.0.0.1:${server.port}` });
    cleanups.push(() => client.close());
    for (const code of ['PERMISSION_DENIED', 'INVALID_ARGUMENT', 'FAILED_PRECONDITION', 'UNAVAILABLE', 'INTERNAL'] as const) {
      const e = await rejection(client.certify({ identity: code, token: new Uint8Array(), csrDer: new Uint8Array() }));
      assert.deepStrictEqual([e.code, e.details], [code, details]);
    }
  });

  it('fails a call at its deadline with DEADLINE_EXCEEDED, and the server sees the call end', async () => {
    let arrived = 0;
    const certify: CertifyFunction = () => {
      arrived++;
      return new Promise(() => {});
    };
    const server = await startGrpcServer({ host: '127.0.0.1', port: 0, services: [identityService(certify)] });
    cleanups.push(() => server.close(0));
    const client = new IdentityClient({ address: `127.0.0.1:${server.port}` });
    cleanups.push(() => client.close());
    const started = Date.now();
    const e = await rejection(client.certify({ identity: 'x', token: new Uint8Array(), csrDer: new Uint8Array() }, { deadlineMs: 150 }));
    const took = Date.now() - started;
    assert.equal(e.code, 'DEADLINE_EXCEEDED');
    assert.ok(took >= 140 && took < 2000, `took ${took} ms`);
    assert.equal(arrived, 1);
    // The connection stays usable.
    const again = await rejection(client.certify({ identity: 'y', token: new Uint8Array(), csrDer: new Uint8Array() }, { deadlineMs: 50 }));
    assert.equal(again.code, 'DEADLINE_EXCEEDED');
    assert.equal(arrived, 2);
  });

  it('TLS: serves with the right server name; a wrong name, plaintext or a missing client certificate fail UNAVAILABLE', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ward-h2grpc-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const certs = makeCerts(dir);
    const cells = { 'emojivoto:web-1:8080': new FakeCell(defaultServer) };
    const server = await policyServer(cells, { certPem: certs.serverCertPem, keyPem: certs.serverKeyPem });
    const address = `127.0.0.1:${server.port}`;
    const mk = (opts: Partial<ConstructorParameters<typeof InboundPolicyClient>[0]>) => {
      const c = new InboundPolicyClient({ address, ...opts });
      cleanups.push(() => c.close());
      return c;
    };
    assert.deepStrictEqual(await mk({ tls: { caPem: certs.caPem, serverName: SERVER_NAME } }).getPort(WEB, 8080), defaultServer);
    const wrong = await rejection(mk({ tls: { caPem: certs.caPem, serverName: 'policy2.ward.test' } }).getPort(WEB, 8080));
    assert.equal(wrong.code, 'UNAVAILABLE');
    assert.match(wrong.details, /policy2\.ward\.test/);
    // A certificate from another CA.
    const otherDir = mkdtempSync(join(tmpdir(), 'ward-h2grpc-other-'));
    cleanups.push(() => rmSync(otherDir, { recursive: true, force: true }));
    const other = makeCerts(otherDir);
    assert.equal((await rejection(mk({ tls: { caPem: other.caPem, serverName: SERVER_NAME } }).getPort(WEB, 8080))).code, 'UNAVAILABLE');
    assert.equal((await rejection(mk({}).getPort(WEB, 8080))).code, 'UNAVAILABLE');

    const mutual = await policyServer(cells, { certPem: certs.serverCertPem, keyPem: certs.serverKeyPem, caPem: certs.caPem, requireClientCert: true });
    const mAddress = `127.0.0.1:${mutual.port}`;
    const anonymous = new InboundPolicyClient({ address: mAddress, tls: { caPem: certs.caPem, serverName: SERVER_NAME } });
    cleanups.push(() => anonymous.close());
    assert.equal((await rejection(anonymous.getPort(WEB, 8080))).code, 'UNAVAILABLE');
    const withCert = new InboundPolicyClient({
      address: mAddress,
      tls: { caPem: certs.caPem, serverName: SERVER_NAME, certPem: certs.clientCertPem, keyPem: certs.clientKeyPem },
    });
    cleanups.push(() => withCert.close());
    const w = collect<WireResult<InboundServer>>();
    withCert.watchPort(WEB, 8080, w.handlers);
    await waitFor(() => w.messages.length === 1, 'the first message over mutual TLS');
  });

  it('reaches an IPv6 address written [::1]:port', async (t) => {
    let server: GrpcServerHandle;
    try {
      server = await policyServer({ 'emojivoto:web-1:8080': new FakeCell(defaultServer) }, undefined, '::1');
    } catch {
      t.skip('no IPv6 loopback here');
      return;
    }
    const client = new InboundPolicyClient({ address: `[::1]:${server.port}` });
    cleanups.push(() => client.close());
    assert.deepStrictEqual(await client.getPort(WEB, 8080), defaultServer);
  });

  it('a connection cut mid-stream ends the stream with UNAVAILABLE; the next call dials again', async () => {
    const web = new FakeCell(defaultServer);
    const server = await policyServer({ 'emojivoto:web-1:8080': web });
    const cut = await relay(server.port);
    const client = new InboundPolicyClient({ address: `127.0.0.1:${cut.port}` });
    cleanups.push(() => client.close());
    const w = collect<WireResult<InboundServer>>();
    client.watchPort(WEB, 8080, w.handlers);
    await waitFor(() => w.messages.length === 1, 'the first message');
    cut.cut();
    await waitFor(() => w.ended !== undefined, 'the end');
    assert.equal(w.ended?.error?.code, 'UNAVAILABLE');
    await waitFor(() => web.listeners.size === 0, 'the server to drop the stream');
    assert.deepStrictEqual(await client.getPort(WEB, 8080), defaultServer);
    assert.equal(cut.connections, 2);
  });

  it('a server shutting down ends streams with OK; then calls fail fast with UNAVAILABLE until it is back on the same port', async () => {
    const cells = { 'emojivoto:web-1:8080': new FakeCell(defaultServer) };
    const server = await policyServer(cells);
    const port = server.port;
    const client = new InboundPolicyClient({ address: `127.0.0.1:${port}` });
    cleanups.push(() => client.close());
    const w = collect<WireResult<InboundServer>>();
    client.watchPort(WEB, 8080, w.handlers);
    await waitFor(() => w.messages.length === 1, 'the first message');
    await server.close(1000);
    await waitFor(() => w.ended !== undefined, 'the end');
    assert.equal(w.ended?.error, undefined);

    const started = Date.now();
    const e = await rejection(client.getPort(WEB, 8080));
    assert.equal(e.code, 'UNAVAILABLE');
    assert.match(e.details, /ECONNREFUSED/);
    const s = collect<WireResult<InboundServer>>();
    client.watchPort(WEB, 8080, s.handlers);
    await waitFor(() => s.ended !== undefined, 'the refused stream');
    assert.equal(s.ended?.error?.code, 'UNAVAILABLE');
    assert.ok(Date.now() - started < 1000, `refusals took ${Date.now() - started} ms`);

    const back = await startGrpcServer({
      host: '127.0.0.1',
      port,
      services: [inboundPolicyService({ lookup: (ns, pod, p) => cells[`${ns}:${pod}:${p}` as 'emojivoto:web-1:8080'] })],
    });
    cleanups.push(() => back.close(0));
    assert.deepStrictEqual(await client.getPort(WEB, 8080), defaultServer);
  });

  it('a first call to a server that is not there yet fails fast with UNAVAILABLE', async () => {
    const port = await closedPort();
    const client = new IdentityClient({ address: `127.0.0.1:${port}` });
    cleanups.push(() => client.close());
    const started = Date.now();
    const e = await rejection(client.certify({ identity: 'x', token: new Uint8Array(), csrDer: new Uint8Array() }));
    assert.equal(e.code, 'UNAVAILABLE');
    assert.ok(Date.now() - started < 1000);
    const d = new DestinationClient({ address: `127.0.0.1:${port}` });
    cleanups.push(() => d.close());
    const w = collect<WireResult<DestinationEvent>>();
    d.get('web.ns.svc.cluster.local:80', w.handlers);
    await waitFor(() => w.ended !== undefined, 'the end');
    assert.equal(w.ended?.error?.code, 'UNAVAILABLE');
  });

  it('close() ends open calls with CANCELLED (streams and unary calls), and later calls too', async () => {
    const listeners = new Set<unknown>();
    const server = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      services: [
        destinationService(() => ({
          ok: true,
          subscribe: (l) => {
            listeners.add(l);
            l({ kind: 'noEndpoints', exists: true });
            return () => listeners.delete(l);
          },
        })),
      ],
    });
    cleanups.push(() => server.close(0));
    const client = new DestinationClient({ address: `127.0.0.1:${server.port}` });
    const w = collect<WireResult<DestinationEvent>>();
    client.get('web.ns.svc.cluster.local:80', w.handlers);
    await waitFor(() => w.messages.length === 1, 'the first event');
    client.close();
    assert.equal(w.ended?.error?.code, 'CANCELLED');
    await waitFor(() => listeners.size === 0, 'the server to see the stream end');
    const later = collect<WireResult<DestinationEvent>>();
    client.get('web.ns.svc.cluster.local:80', later.handlers);
    await waitFor(() => later.ended !== undefined, 'the refused call');
    assert.equal(later.ended?.error?.code, 'CANCELLED');
    client.close(); // idempotent

    let release: (() => void) | undefined;
    const idServer = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      services: [
        identityService(
          () =>
            new Promise((r) => {
              release = () => r({ ok: false, code: 'INTERNAL', message: 'late' });
            }),
        ),
      ],
    });
    cleanups.push(() => {
      release?.();
      return idServer.close(0);
    });
    const id = new IdentityClient({ address: `127.0.0.1:${idServer.port}` });
    const pending = rejection(id.certify({ identity: 'x', token: new Uint8Array(), csrDer: new Uint8Array() }));
    await waitFor(() => release !== undefined, 'the call to arrive');
    id.close();
    assert.equal((await pending).code, 'CANCELLED');
  });
});

// === against raw node:http2 servers ===

/** Raw bytes in and out, to control the wire exactly. */
const bytesCodec: MessageCodec<Uint8Array> = { encode: (m) => ({ finish: () => m }), decode: (b) => Uint8Array.from(b) };
const RAW = {
  name: 'Raw',
  fullName: 'ward.test.Raw',
  methods: {
    unary: { name: 'Unary', requestType: bytesCodec, requestStream: false, responseType: bytesCodec, responseStream: false },
    stream: { name: 'Stream', requestType: bytesCodec, requestStream: false, responseType: bytesCodec, responseStream: true },
  },
} as const satisfies GrpcServiceDefinition;

const GRPC_OK: OutgoingHttpHeaders = { ':status': 200, 'content-type': 'application/grpc' };

/** A gRPC length-prefixed message (flag 0 unless given). */
function frame(bytes: Uint8Array | string, flag = 0): Buffer {
  const b = typeof bytes === 'string' ? Buffer.from(bytes) : Buffer.from(bytes);
  const prefix = Buffer.alloc(5);
  prefix[0] = flag;
  prefix.writeUInt32BE(b.length, 1);
  return Buffer.concat([prefix, b]);
}

/** Responds with `body` (written as is) and then trailers. */
function reply(stream: ServerHttp2Stream, body: Buffer, trailers: OutgoingHttpHeaders = { 'grpc-status': '0' }): void {
  stream.respond(GRPC_OK, { waitForTrailers: true });
  stream.on('wantTrailers', () => stream.sendTrailers(trailers));
  stream.end(body);
}

interface Received {
  readonly stream: ServerHttp2Stream;
  readonly headers: IncomingHttpHeaders;
  readonly body: Promise<Buffer>;
}

/** A raw HTTP/2 server on loopback; `handle` answers each stream. */
async function rawServer(handle: (r: Received) => void) {
  const server = createH2Server();
  const sessions: ServerHttp2Session[] = [];
  const streams: Received[] = [];
  server.on('session', (s) => sessions.push(s));
  server.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    const body = new Promise<Buffer>((resolve) => {
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => resolve(Buffer.concat(chunks)));
    });
    stream.on('error', () => {});
    const r = { stream, headers, body };
    streams.push(r);
    handle(r);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => {
    for (const s of sessions) s.destroy();
    return new Promise<void>((r) => server.close(() => r()));
  });
  return { port: (server.address() as AddressInfo).port, sessions, streams };
}

function rawClient(port: number, tuning: H2GrpcClientTuning = {}): H2GrpcClient {
  const client = new H2GrpcClient({ address: `127.0.0.1:${port}` }, tuning);
  cleanups.push(() => client.close());
  return client;
}

const unary = (client: H2GrpcClient, body = 'ping', deadlineMs?: number) =>
  client.unary(RAW, RAW.methods.unary, Buffer.from(body), deadlineMs === undefined ? undefined : { deadlineMs });

function stream(client: H2GrpcClient, body = 'watch') {
  const w = collect<Uint8Array>();
  const cancel = client.serverStream(RAW, RAW.methods.stream, Buffer.from(body), w.handlers);
  return {
    messages: w.messages,
    get ended() {
      return w.ended;
    },
    cancel,
    text: () => w.messages.map((m) => Buffer.from(m).toString()),
  };
}

describe('H2GrpcClient against a raw HTTP/2 server', () => {
  it('sends a well-formed request: headers, grpc-timeout, one length-prefixed message', async () => {
    const server = await rawServer((r) => reply(r.stream, frame('pong')));
    const client = rawClient(server.port);
    assert.equal(Buffer.from(await unary(client, 'hello', 12_345)).toString(), 'pong');
    const r = server.streams[0] as Received;
    assert.equal(r.headers[':method'], 'POST');
    assert.equal(r.headers[':path'], '/ward.test.Raw/Unary');
    assert.equal(r.headers[':scheme'], 'http');
    assert.equal(r.headers[':authority'], `127.0.0.1:${server.port}`);
    assert.equal(r.headers['content-type'], 'application/grpc');
    assert.equal(r.headers.te, 'trailers');
    assert.equal(r.headers['grpc-timeout'], '12345m');
    assert.match(String(r.headers['user-agent']), /^ward-grpc\//);
    assert.deepStrictEqual(await r.body, frame('hello'));
    // No deadline, no grpc-timeout.
    await unary(client);
    assert.equal(server.streams[1]?.headers['grpc-timeout'], undefined);
  });

  it('reassembles messages split across many DATA frames and splits several messages in one frame', async () => {
    const big = Buffer.alloc(70_000, 'x');
    const server = await rawServer((r) => {
      void (async () => {
        r.stream.respond(GRPC_OK, { waitForTrailers: true });
        r.stream.on('wantTrailers', () => r.stream.sendTrailers({ 'grpc-status': '0' }));
        // Three messages in one write, then one written in 7-byte pieces across turns (so the
        // prefix itself is split), then a large one crossing the flow-control window.
        r.stream.write(Buffer.concat([frame('a'), frame(''), frame('ccc')]));
        const split = frame('split across frames');
        for (let i = 0; i < split.length; i += 7) {
          r.stream.write(split.subarray(i, i + 7));
          await nextTurn();
        }
        r.stream.write(frame(big));
        r.stream.end();
      })();
    });
    const client = rawClient(server.port);
    const s = stream(client);
    await waitFor(() => s.ended !== undefined, 'the end');
    assert.equal(s.ended?.error, undefined);
    assert.deepStrictEqual(s.text().slice(0, 4), ['a', '', 'ccc', 'split across frames']);
    assert.equal(s.messages.length, 5);
    assert.deepStrictEqual(Buffer.from(s.messages[4] as Uint8Array), big);
  });

  it('reads the status of a trailers-only response, percent-decoding grpc-message', async () => {
    const server = await rawServer((r) =>
      r.stream.respond({ ...GRPC_OK, 'grpc-status': '5', 'grpc-message': 'no such %E2%80%9Cpod%E2%80%9D: 100%25 gone %zz' }, { endStream: true }),
    );
    const client = rawClient(server.port);
    const e = await rejection(unary(client));
    assert.deepStrictEqual([e.code, e.details], ['NOT_FOUND', 'no such “pod”: 100% gone %zz']);
    const s = stream(client);
    await waitFor(() => s.ended !== undefined, 'the end');
    assert.equal(s.ended?.error?.code, 'NOT_FOUND');
  });

  for (const [http, code] of [
    [503, 'UNAVAILABLE'],
    [502, 'UNAVAILABLE'],
    [429, 'UNAVAILABLE'],
    [504, 'UNAVAILABLE'],
    [400, 'INTERNAL'],
    [401, 'UNAUTHENTICATED'],
    [403, 'PERMISSION_DENIED'],
    [404, 'UNIMPLEMENTED'],
    [500, 'UNKNOWN'],
  ] as const) {
    it(`maps HTTP ${http} without gRPC headers to ${code}`, async () => {
      const server = await rawServer((r) => {
        r.stream.respond({ ':status': http, 'content-type': 'text/plain' });
        r.stream.end('upstream said no');
      });
      const e = await rejection(unary(rawClient(server.port)));
      assert.equal(e.code, code);
      assert.match(e.details, new RegExp(String(http)));
    });
  }

  it('fails a 200 response that is not gRPC with UNKNOWN, and one without a status', async () => {
    const server = await rawServer((r) => {
      if (r.headers[':path'] === '/ward.test.Raw/Unary') {
        r.stream.respond({ ':status': 200, 'content-type': 'text/html' });
        r.stream.end('<html>');
      } else {
        // Messages, then the end of the stream without trailers.
        r.stream.respond(GRPC_OK);
        r.stream.end(frame('only'));
      }
    });
    const client = rawClient(server.port);
    const e = await rejection(unary(client));
    assert.equal(e.code, 'UNKNOWN');
    assert.match(e.details, /content-type/);
    const s = stream(client);
    await waitFor(() => s.ended !== undefined, 'the end');
    assert.deepStrictEqual([s.text(), s.ended?.error?.code], [['only'], 'UNKNOWN']);
  });

  it('fails a stream that ends inside a message with INTERNAL', async () => {
    const server = await rawServer((r) => reply(r.stream, frame('truncated').subarray(0, 8)));
    const s = stream(rawClient(server.port));
    await waitFor(() => s.ended !== undefined, 'the end');
    assert.equal(s.ended?.error?.code, 'INTERNAL');
  });

  it('refuses a compressed message (INTERNAL) and one over 4 MiB (RESOURCE_EXHAUSTED), resetting the stream', async () => {
    const server = await rawServer((r) => {
      const body = r.headers[':path'] === '/ward.test.Raw/Unary' ? frame('zz', 1) : frame(Buffer.alloc(4 * 1024 * 1024 + 1));
      r.stream.respond(GRPC_OK);
      r.stream.write(body);
    });
    const client = rawClient(server.port);
    const compressed = await rejection(unary(client));
    assert.equal(compressed.code, 'INTERNAL');
    assert.match(compressed.details, /compress/);
    const s = stream(client);
    await waitFor(() => s.ended !== undefined, 'the end');
    assert.equal(s.ended?.error?.code, 'RESOURCE_EXHAUSTED');
    await waitFor(() => server.streams.every((r) => r.stream.closed), 'the server streams to be reset');
    assert.deepStrictEqual(
      server.streams.map((r) => r.stream.rstCode),
      [constants.NGHTTP2_CANCEL, constants.NGHTTP2_CANCEL],
    );
  });

  it('a unary call with no response message, or two, is UNIMPLEMENTED', async () => {
    const server = await rawServer((r) => reply(r.stream, server.streams.length === 1 ? Buffer.alloc(0) : Buffer.concat([frame('1'), frame('2')])));
    const client = rawClient(server.port);
    assert.equal((await rejection(unary(client))).code, 'UNIMPLEMENTED');
    assert.equal((await rejection(unary(client))).code, 'UNIMPLEMENTED');
  });

  for (const [rst, code] of [
    [constants.NGHTTP2_REFUSED_STREAM, 'UNAVAILABLE'],
    [constants.NGHTTP2_CANCEL, 'CANCELLED'],
    [constants.NGHTTP2_INTERNAL_ERROR, 'INTERNAL'],
    [constants.NGHTTP2_ENHANCE_YOUR_CALM, 'RESOURCE_EXHAUSTED'],
    [constants.NGHTTP2_PROTOCOL_ERROR, 'INTERNAL'],
    [constants.NGHTTP2_INADEQUATE_SECURITY, 'PERMISSION_DENIED'],
  ] as const) {
    it(`maps RST_STREAM ${rst} to ${code}`, async () => {
      const server = await rawServer((r) => {
        // Waiting for trailers keeps the server's side open, so that close() resets the stream
        // (Node would otherwise end it with END_STREAM first).
        r.stream.respond(GRPC_OK, { waitForTrailers: true });
        r.stream.write(frame('one'));
        setTimeout(() => r.stream.close(rst), 20);
      });
      const client = rawClient(server.port);
      const s = stream(client);
      await waitFor(() => s.ended !== undefined, 'the end');
      assert.deepStrictEqual([s.text(), s.ended?.error?.code], [['one'], code]);
      // Only the stream was reset: the connection carries the next call.
      assert.equal((await rejection(unary(client))).code, code);
      assert.equal(server.sessions.length, 1);
    });
  }

  it('maps a reset before any response: REFUSED_STREAM to UNAVAILABLE, CANCEL to CANCELLED', async () => {
    const server = await rawServer((r) => r.stream.close(server.streams.length === 1 ? constants.NGHTTP2_REFUSED_STREAM : constants.NGHTTP2_CANCEL));
    const client = rawClient(server.port);
    assert.equal((await rejection(unary(client))).code, 'UNAVAILABLE');
    assert.equal((await rejection(unary(client))).code, 'CANCELLED');
  });

  it('after GOAWAY, the call in flight completes and the next call uses a new connection', async () => {
    const server = await rawServer((r) => {
      if (server.streams.length === 1) r.stream.session?.goaway(constants.NGHTTP2_NO_ERROR, r.stream.id);
      reply(r.stream, frame(`answer ${server.streams.length}`));
    });
    const client = rawClient(server.port);
    assert.equal(Buffer.from(await unary(client)).toString(), 'answer 1');
    assert.equal(Buffer.from(await unary(client)).toString(), 'answer 2');
    assert.equal(server.sessions.length, 2);
    assert.equal(Buffer.from(await unary(client)).toString(), 'answer 3');
    assert.equal(server.sessions.length, 2);
  });

  it('after a GOAWAY with an error code, calls in flight fail UNAVAILABLE and the next call uses a new connection', async () => {
    const server = await rawServer((r) => {
      if (server.streams.length === 1) {
        r.stream.respond(GRPC_OK);
        r.stream.write(frame('first'));
        setTimeout(() => r.stream.session?.goaway(constants.NGHTTP2_INTERNAL_ERROR, r.stream.id), 20);
      } else {
        reply(r.stream, frame('fresh'));
      }
    });
    const client = rawClient(server.port);
    const s = stream(client);
    await waitFor(() => s.ended !== undefined, 'the end');
    assert.deepStrictEqual([s.text(), s.ended?.error?.code], [['first'], 'UNAVAILABLE']);
    assert.equal(Buffer.from(await unary(client)).toString(), 'fresh');
    assert.equal(server.sessions.length, 2);
  });

  it('a deadline cancels the stream (RST_STREAM CANCEL) and fails DEADLINE_EXCEEDED; cancel() resets without onEnd', async () => {
    const server = await rawServer((r) => r.stream.respond(GRPC_OK));
    const client = rawClient(server.port);
    const e = await rejection(unary(client, 'x', 100));
    assert.equal(e.code, 'DEADLINE_EXCEEDED');
    assert.equal(server.streams[0]?.headers['grpc-timeout'], '100m');
    await waitFor(() => server.streams[0]?.stream.closed === true, 'the reset');
    assert.equal(server.streams[0]?.stream.rstCode, constants.NGHTTP2_CANCEL);

    const s = stream(client);
    await waitFor(() => server.streams.length === 2, 'the stream to arrive');
    s.cancel();
    await waitFor(() => server.streams[1]?.stream.closed === true, 'the reset');
    assert.equal(server.streams[1]?.stream.rstCode, constants.NGHTTP2_CANCEL);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(s.ended, undefined);
  });

  it('stops delivering messages as soon as the caller cancels, even within one frame', async () => {
    const server = await rawServer((r) => {
      r.stream.respond(GRPC_OK);
      r.stream.write(Buffer.concat([frame('1'), frame('2'), frame('3')]));
    });
    const client = rawClient(server.port);
    const got: string[] = [];
    let ended = false;
    const cancel = client.serverStream(RAW, RAW.methods.stream, Buffer.from('x'), {
      onMessage: (m) => {
        got.push(Buffer.from(m).toString());
        if (got.length === 2) cancel();
      },
      onEnd: () => {
        ended = true;
      },
    });
    await waitFor(() => server.streams[0]?.stream.closed === true, 'the reset');
    assert.deepStrictEqual(got, ['1', '2']);
    assert.equal(ended, false);
  });

  it('keepalive: pings while calls are open; a server that does not answer is cut (UNAVAILABLE), one that does is kept', async () => {
    const server = await rawServer((r) => {
      r.stream.respond(GRPC_OK);
      r.stream.write(frame('hello'));
    });
    const tuning = { keepaliveIntervalMs: 40, keepaliveTimeoutMs: 100 };
    let pings = 0;
    const answering = rawClient(server.port, tuning);
    const alive = stream(answering);
    await waitFor(() => alive.messages.length === 1, 'the first message');
    server.sessions[0]?.on('ping', () => pings++);
    await waitFor(() => pings >= 4, 'pings to arrive');
    assert.equal(alive.ended, undefined, 'answered pings keep the connection');

    const silent = await relay(server.port, { dropPings: true });
    const client = rawClient(silent.port, tuning);
    const started = Date.now();
    const s = stream(client);
    await waitFor(() => s.ended !== undefined, 'the keepalive to give up', 3000);
    assert.equal(s.ended?.error?.code, 'UNAVAILABLE');
    assert.match(s.ended?.error?.details ?? '', /keepalive/);
    assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
    // A new connection for the next call.
    const again = stream(client);
    await waitFor(() => again.messages.length === 1, 'a message on a new connection');
    assert.equal(silent.connections, 2);
    again.cancel();
    alive.cancel();
  });

  it('credits the window back as messages are read: a stream far larger than its window arrives whole', async () => {
    const piece = frame(Buffer.alloc(1000, 'm'));
    const count = 3000;
    const server = await rawServer((r) => {
      r.stream.respond(GRPC_OK, { waitForTrailers: true });
      r.stream.on('wantTrailers', () => r.stream.sendTrailers({ 'grpc-status': '0' }));
      for (let i = 0; i < count; i++) r.stream.write(piece);
      r.stream.end();
    });
    const s = stream(rawClient(server.port));
    await waitFor(() => s.ended !== undefined, 'the end', 20_000);
    assert.equal(s.ended?.error, undefined);
    assert.equal(s.messages.length, count);
  });

  it('takes the receive limit from its tuning', async () => {
    const server = await rawServer((r) => reply(r.stream, frame(Buffer.alloc(101))));
    const e = await rejection(unary(rawClient(server.port, { maxReceiveBytes: 100 })));
    assert.equal(e.code, 'RESOURCE_EXHAUSTED');
    assert.equal(Buffer.from(await unary(rawClient(server.port, { maxReceiveBytes: 101 }))).length, 101);
  });

  it('closes a connection without calls after the idle timeout; the next call dials again', async () => {
    const server = await rawServer((r) => reply(r.stream, frame('pong')));
    const client = rawClient(server.port, { idleTimeoutMs: 50 });
    await unary(client);
    await waitFor(() => server.sessions[0]?.closed === true, 'the idle connection to close');
    await unary(client);
    assert.equal(server.sessions.length, 2);
  });

  it('fails calls UNAVAILABLE when TLS is not established within the connect timeout', async () => {
    // Accepts TCP and never answers the TLS handshake.
    const sockets: Socket[] = [];
    const silent = createServer((s) => sockets.push(s.on('error', () => {})));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    cleanups.push(() => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => silent.close(() => r()));
    });
    const port = (silent.address() as AddressInfo).port;
    const client = new H2GrpcClient({ address: `127.0.0.1:${port}`, tls: { caPem: '', serverName: SERVER_NAME } }, { connectTimeoutMs: 100 });
    cleanups.push(() => client.close());
    const e = await rejection(unary(client));
    assert.equal(e.code, 'UNAVAILABLE');
    assert.match(e.details, /no connection to .* within 100 ms/);
  });

  it('an invalid address fails calls with UNAVAILABLE instead of throwing', async () => {
    const client = new H2GrpcClient({ address: 'no port:here:1' });
    cleanups.push(() => client.close());
    const e = await rejection(unary(client));
    assert.equal(e.code, 'UNAVAILABLE');
    assert.match(e.details, /invalid address/);
  });
});

describe('grpc-framing', () => {
  it('formats grpc-timeout with at most 8 digits', () => {
    assert.deepStrictEqual([0, 0.2, 123, 99_999_999, 100_000_000, 1e14].map(grpcTimeout), ['1m', '1m', '123m', '99999999m', '100000S', '27777778H']);
  });

  it('decodes grpc-message leniently', () => {
    assert.equal(decodeGrpcMessage('plain text'), 'plain text');
    assert.equal(decodeGrpcMessage('caf%C3%A9 %25 %2'), 'café % %2');
    // Raw UTF-8 bytes (not percent-encoded) as Node hands them over: latin1.
    assert.equal(decodeGrpcMessage(Buffer.from('café', 'utf8').toString('latin1')), 'café');
  });
});
