/**
 * The inbound proxy over real sockets on 127.0.0.1: an echo server plays the application, a fake
 * policy source serves hand-built servers, identities come from an in-process CA. Clients
 * connect from 127.0.0.2 / 127.0.0.3 (Linux routes all of 127/8 to loopback) so that the
 * proxy-added `default:localhost` authorization (127.0.0.1/32) does not admit them.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { type AddressInfo, createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { after, afterEach, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type ConnectionOptions, type TLSSocket, connect as tlsConnect } from 'node:tls';
import type { Authorization, ClientAuthentication, InboundServer, Network, ProxyProtocol } from '../../core/index.js';
import type { WorkloadCertificate } from '../../identity/index.js';
import type { InboundErrorReason, InboundStats } from '../metrics/inbound-stats.js';
import { mkTestMesh, TempDirs, type TestMesh, waitFor, within } from '../testing/identity.js';
import { FakePolicies } from '../testing/policies.js';
import { MeshTlsContext, meshClientOptions, TRANSPORT_HEADER_ALPN } from '../tls/context.js';
import { HTTP2_PREFACE } from '../transport/detect-http.js';
import { encodeTransportHeader } from '../transport/transport-header.js';
import { defaultMaxConnections, INBOUND_MAX_CONNECTIONS, type InboundHttpConnection, InboundProxy, type InboundProxyOptions } from './proxy.js';

const HOST = '127.0.0.1';
const FROM = '127.0.0.2';
const FROM_OTHER = '127.0.0.3';
const DETECT_MS = 300;
const WAIT_MS = 5000;

// ---------------------------------------------------------------------------------------------
// Policies

const ALL_NETWORKS: readonly Network[] = [
  { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
  { net: { ip: '::', prefixLen: 0 }, except: [] },
];

function mkAuthz(name: string, authentication: ClientAuthentication, networks: readonly Network[] = ALL_NETWORKS): Authorization {
  return { meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name }, networks, authentication };
}

const anyone = mkAuthz('anyone', { kind: 'unauthenticated' });
const meshedOnly = mkAuthz('meshed', { kind: 'tlsUnauthenticated' });
const onlyIdentity = (id: string) => mkAuthz(`only-${id.split('.')[0]}`, { kind: 'tlsAuthenticated', identities: [id], suffixes: [] });
const fromHost = (ip: string) => mkAuthz(`from-${ip}`, { kind: 'unauthenticated' }, [{ net: { ip, prefixLen: 32 }, except: [] }]);

const OPAQUE: ProxyProtocol = { kind: 'opaque' };
const TLS: ProxyProtocol = { kind: 'tls' };
const HTTP1: ProxyProtocol = { kind: 'http1', routes: [] };
const detect = (timeoutMs = DETECT_MS): ProxyProtocol => ({ kind: 'detect', timeoutMs, httpRoutes: [] });

function mkServer(protocol: ProxyProtocol, authorizations: readonly Authorization[], name = 'test'): InboundServer {
  return { meta: { group: 'policy.linkerd.io', kind: 'Server', name }, protocol, authorizations };
}

// ---------------------------------------------------------------------------------------------
// The application: an echo server that records what reached it

interface App {
  readonly port: number;
  /** Connections accepted since start. */
  connections: number;
  readonly open: Set<Socket>;
  /** The first chunk of each connection, in order. */
  readonly firstChunks: Buffer[];
  close(): Promise<void>;
}

async function startApp(): Promise<App> {
  const open = new Set<Socket>();
  const firstChunks: Buffer[] = [];
  const app: { connections: number } = { connections: 0 };
  const server: Server = createServer({ allowHalfOpen: true }, (s) => {
    app.connections++;
    open.add(s);
    s.on('error', () => {});
    s.once('close', () => open.delete(s));
    s.once('data', (c: Buffer) => firstChunks.push(c));
    s.pipe(s);
  });
  server.listen(0, HOST);
  await once(server, 'listening');
  return Object.assign(app, {
    port: (server.address() as AddressInfo).port,
    open,
    firstChunks,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  });
}

// ---------------------------------------------------------------------------------------------
// Clients

interface Probe<S extends Socket = Socket> {
  readonly socket: S;
  received(): Buffer;
  /** The error code (or message) the socket failed with. */
  error(): string | undefined;
  /** Whether the peer's FIN arrived. */
  ended(): boolean;
  readonly closed: Promise<void>;
}

const clients = new Set<Socket>();

function probe<S extends Socket>(socket: S): Probe<S> {
  const chunks: Buffer[] = [];
  let error: string | undefined;
  let ended = false;
  clients.add(socket);
  socket.on('data', (c: Buffer) => chunks.push(c));
  socket.on('error', (e: NodeJS.ErrnoException) => {
    error ??= e.code ?? e.message;
  });
  socket.on('end', () => {
    ended = true;
  });
  const closed = new Promise<void>((resolve) =>
    socket.once('close', () => {
      clients.delete(socket);
      resolve();
    }),
  );
  return { socket, received: () => Buffer.concat(chunks), error: () => error, ended: () => ended, closed };
}

/** Resolves on `event` or on close (a refused connection may be reset before it is even connected). */
function eventOrClose(p: Probe, event: string): Promise<void> {
  return new Promise<void>((resolve) => {
    p.socket.once(event, () => resolve());
    void p.closed.then(resolve);
  });
}

/** A plaintext connection from `from`, once connected. */
async function plain(port: number, from = FROM, allowHalfOpen = false): Promise<Probe> {
  const p = probe(netConnect({ host: HOST, port, localAddress: from, allowHalfOpen }));
  await within(eventOrClose(p, 'connect'), WAIT_MS, 'a plaintext connect');
  return p;
}

/** A TLS client socket over a TCP connection from `from` (node:tls has no `localAddress`). */
function tlsFrom(port: number, options: ConnectionOptions, from = FROM): Probe<TLSSocket> {
  const tcp = netConnect({ host: HOST, port, localAddress: from });
  tcp.on('error', () => {});
  clients.add(tcp);
  tcp.once('close', () => clients.delete(tcp));
  return probe(tlsConnect({ ...options, socket: tcp }));
}

/** A TLS connection from `from`, once the client finished its handshake or the connection closed. */
async function tls(port: number, options: ConnectionOptions, from = FROM): Promise<Probe> {
  const p = tlsFrom(port, options, from);
  await within(eventOrClose(p, 'secureConnect'), WAIT_MS, 'a TLS connect');
  return p;
}

async function expectEcho(p: Probe, message: string): Promise<void> {
  const before = p.received().length;
  p.socket.write(message);
  await waitFor(() => p.received().subarray(before).toString('latin1').includes(message), `the echo of ${JSON.stringify(message)}`, WAIT_MS);
}

/** Writes `message` (when given) and expects the connection to close without a byte coming back. */
async function expectClosed(p: Probe, message?: string | Buffer): Promise<void> {
  if (message !== undefined && !p.socket.destroyed) p.socket.write(message);
  await within(p.closed, WAIT_MS, 'the connection to close');
  assert.equal(p.received().length, 0, `no byte may come back, got ${JSON.stringify(p.received().toString('latin1'))}`);
}

// ---------------------------------------------------------------------------------------------
// Suite set-up

const dirs = new TempDirs();
let mesh: TestMesh;
let foreign: TestMesh;
let proxyCert: WorkloadCertificate;
let x: MeshTlsContext;
let y: MeshTlsContext;
let foreignCert: WorkloadCertificate;
let app: App;
const policies = new FakePolicies({ notify: true });
const events: { kind: string; port: number; tls: string; authz?: string }[] = [];
let proxy: InboundProxy;
let meshPort: number;
/** Application ports with the policies the tests set; `noPolicyPort` never gets one. */
let portA: number;
let portB: number;
let noPolicyPort: number;
const extraProxies: InboundProxy[] = [];

const tlsLabel = (t: { kind: string; clientId?: string | undefined; sni?: string; reason?: string }) =>
  t.kind === 'established' ? `mtls:${t.clientId ?? '-'}` : t.kind === 'passthrough' ? `passthrough:${t.sni}` : `none:${t.reason}`;

function proxyOptions(overrides: Partial<InboundProxyOptions> = {}): InboundProxyOptions {
  return {
    identity: proxyCert.identity,
    tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
    policies,
    appHost: HOST,
    appPortOf: () => app.port,
    listen: { host: HOST, meshPort: 0, appPorts: [0, 0, 0] },
    detectTimeoutMs: DETECT_MS,
    ...overrides,
  };
}

const meshClient = (ctx: MeshTlsContext, alpn?: readonly string[]) => ctx.clientOptions(proxyCert.identity, alpn);
const transport = (ctx: MeshTlsContext) => meshClient(ctx, [TRANSPORT_HEADER_ALPN]);

before(async () => {
  [mesh, foreign] = await Promise.all([mkTestMesh(dirs), mkTestMesh(dirs)]);
  const [p, cx, cy, f] = await Promise.all([
    mesh.issue('emojivoto', 'web'),
    mesh.issue('emojivoto', 'vote-bot'),
    mesh.issue('emojivoto', 'emoji'),
    foreign.issue('emojivoto', 'vote-bot'),
  ]);
  proxyCert = p;
  x = new MeshTlsContext(cx, mesh.anchorsPem);
  y = new MeshTlsContext(cy, mesh.anchorsPem);
  foreignCert = f;
  app = await startApp();
  proxy = new InboundProxy(
    proxyOptions({
      metrics: {
        onTcpAllow: (e) => events.push({ kind: 'allow', port: e.port, tls: tlsLabel(e.client.tls), authz: e.decision.authz.name }),
        onTcpDeny: (e) => events.push({ kind: 'deny', port: e.port, tls: tlsLabel(e.client.tls) }),
        onTcpTerminate: (e) => events.push({ kind: 'terminate', port: e.port, tls: tlsLabel(e.client.tls) }),
      },
    }),
  );
  const bound = await proxy.start();
  meshPort = bound.meshPort;
  [portA, portB, noPolicyPort] = bound.appPorts as [number, number, number];
});

afterEach(async () => {
  for (const s of clients) s.destroy();
  // Every test leaves the proxy with nothing open (checked here rather than in each test).
  await waitFor(() => proxy.stats().open === 0, 'the proxy to close every connection', WAIT_MS);
  await waitFor(() => app.open.size === 0, 'the application to see every connection closed', WAIT_MS);
  assert.equal(proxy.stats().forwarding, 0);
  assert.equal(proxy.stats().policySubscriptions, 0);
  // Other proxies of a test let go of theirs as their connections close, which may come later.
  await waitFor(() => policies.listenerCount === 0, 'every policy listener to be released', WAIT_MS);
  policies.clear();
  events.length = 0;
});

after(async () => {
  await Promise.all([proxy?.close(), ...extraProxies.map((p) => p.close())]);
  await app?.close();
  dirs.cleanup();
});

/** The difference of two counter snapshots (only the counters that changed). */
function delta(before: InboundStats, after: InboundStats): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of ['accepted', 'tcpAuthzAllow', 'tcpAuthzDeny', 'tcpAuthzTerminate'] as const) if (after[k] !== before[k]) out[k] = after[k] - before[k];
  for (const [k, v] of Object.entries(after.tcpErrors)) {
    const d = (v ?? 0) - (before.tcpErrors[k as InboundErrorReason] ?? 0);
    if (d !== 0) out[k] = d;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

describe('InboundProxy: application ports, plaintext', () => {
  it('forwards a permitted plaintext client to the application and echoes', async () => {
    policies.set(portA, mkServer(detect(), [anyone]));
    const s0 = proxy.stats();
    const c = await plain(portA);
    await expectEcho(c, 'ping\n');
    await expectEcho(c, 'pong\n');
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 1, tcpAuthzAllow: 1 });
    assert.deepEqual(events, [{ kind: 'allow', port: portA, tls: 'none:no_tls_from_remote', authz: 'anyone' }]);
    assert.equal(proxy.stats().forwarding, 1);
    assert.equal(proxy.stats().policySubscriptions, 1);
  });

  it('skips TLS detection on an opaque port (port_skipped)', async () => {
    policies.set(portA, mkServer(OPAQUE, [anyone]));
    const c = await plain(portA);
    await expectEcho(c, 'opaque bytes');
    assert.deepEqual(events, [{ kind: 'allow', port: portA, tls: 'none:port_skipped', authz: 'anyone' }]);
  });

  it('resets a denied client before any byte reaches the application', async () => {
    for (const protocol of [OPAQUE, detect(), TLS]) {
      policies.set(portA, mkServer(protocol, [meshedOnly]));
      const s0 = proxy.stats();
      const appBefore = app.connections;
      const c = await plain(portA);
      await expectClosed(c, 'secret\n');
      assert.match(c.error() ?? '', /ECONNRESET|EPIPE/, `${protocol.kind}: a reset, not a clean close`);
      await sleep(20);
      assert.equal(app.connections, appBefore, `${protocol.kind}: the application saw a connection`);
      assert.deepEqual(delta(s0, proxy.stats()), { accepted: 1, tcpAuthzDeny: 1 });
    }
  });

  it('admits plaintext from 127.0.0.1 through the proxy-added default:localhost', async () => {
    policies.set(portA, mkServer(OPAQUE, []));
    const c = await plain(portA, '127.0.0.1');
    await expectEcho(c, 'local');
    assert.equal(events[0]?.authz, 'localhost');
  });

  it('fails closed on a port without a policy', async () => {
    const s0 = proxy.stats();
    const appBefore = app.connections;
    const c = await plain(noPolicyPort);
    await expectClosed(c, 'hello');
    assert.equal(app.connections, appBefore);
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 1, 'no policy': 1 });
  });

  it('closes a client that sends nothing within the detect timeout', async () => {
    policies.set(portA, mkServer(detect(), [anyone]));
    const s0 = proxy.stats();
    const appBefore = app.connections;
    const silent = await plain(portA);
    // A ClientHello that never completes is no better.
    const partial = await plain(portA);
    partial.socket.write(Buffer.from([0x16, 0x03, 0x01, 0x00]));
    const t0 = Date.now();
    await expectClosed(silent);
    await expectClosed(partial);
    assert.ok(Date.now() - t0 >= DETECT_MS - 50, `closed after ${Date.now() - t0} ms`);
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 2, 'tls detection timeout': 2 });
    assert.equal(app.connections, appBefore);
  });

  it('forwards a mesh TLS stream that says nothing by the HTTP detect timeout as TCP (the server may speak first)', async () => {
    policies.set(portA, mkServer(detect(150), [anyone]));
    const s0 = proxy.stats();
    const c = await tls(portA, meshClient(x));
    await waitFor(() => proxy.stats().tcpAuthzAllow > s0.tcpAuthzAllow, 'the silent stream to be forwarded', WAIT_MS);
    await expectEcho(c, 'hello\n');
  });

  it('hands a detect-port stream still undecided at the HTTP detect timeout to the HTTP stack as HTTP/1, never forwarding it', async () => {
    const seen: string[] = [];
    const p = new InboundProxy(
      proxyOptions({
        listen: { host: HOST, meshPort: 0, appPorts: [0] },
        handleHttp: (conn) => {
          const first = conn.socket.read() as Buffer | null;
          seen.push(`${conn.version} ${conn.source} ${(first ?? Buffer.alloc(0)).toString('latin1')}`);
          conn.socket.end('strict parser\n');
        },
      }),
    );
    extraProxies.push(p);
    const port = (await p.start()).appPorts[0] as number;
    policies.set(port, mkServer(detect(150), [anyone]));
    const appBefore = app.connections;
    const c = await plain(port);
    // The rest of `GET /admin HTTP/1.1` would come after the deadline, where a lenient server would take it.
    c.socket.write('GET');
    await within(c.closed, WAIT_MS, 'the HTTP stack to answer');
    assert.deepEqual(seen, ['http1 detect GET']);
    assert.equal(c.received().toString(), 'strict parser\n');
    assert.equal(app.connections, appBefore, 'the application saw a connection');
  });

  it('forwards as TCP a stream whose line, unfinished at the HTTP detect deadline, can become no request', async () => {
    policies.set(portA, mkServer(detect(150), [anyone]));
    const c = await plain(portA);
    // A text protocol waiting for its answer: `hello 9002` could only become `hello 9002 HTTP/1.1`, which no server serves.
    await expectEcho(c, 'hello 9002');
  });

  it('after a silent HTTP detection, lets first bytes that can become no request through once the detect deadline passes', async () => {
    policies.set(portA, mkServer(detect(150), [anyone]));
    const s0 = proxy.stats();
    const c = await tls(portA, meshClient(x));
    await waitFor(() => proxy.stats().tcpAuthzAllow > s0.tcpAuthzAllow, 'the silent stream to be forwarded', WAIT_MS);
    await expectEcho(c, 'hello 9002');
  });

  it('handles garbage as plaintext on every connection-level protocol, never crashing', async () => {
    let seed = 42;
    const random = (n: number) =>
      Buffer.from(
        Array.from({ length: n }, () => {
          seed = (seed * 1_103_515_245 + 12_345) & 0x7fff_ffff;
          return seed >>> 16;
        }),
      );
    const inputs = [
      random(64),
      random(4096),
      Buffer.from([0x16, 0x03, 0x01, 0x00, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01]), // a record, but not a ClientHello
      Buffer.from([0x16, 0x02, 0x00, 0x00]), // not a TLS 1.x record
      Buffer.from('\x80\x2e\x01\x03\x01'), // SSLv2-style hello
      Buffer.from('\r\n\r\n\0\0\0'),
    ];
    for (const protocol of [detect(), OPAQUE, TLS]) {
      policies.set(portA, mkServer(protocol, [anyone]));
      for (const input of inputs) {
        const c = await plain(portA);
        c.socket.write(input);
        await waitFor(() => c.received().length >= input.length, `${input.length} garbage bytes echoed on ${protocol.kind}`, WAIT_MS);
        assert.deepEqual(c.received(), input);
        c.socket.destroy();
      }
    }
  });

  it('propagates half-close and keeps large transfers intact (backpressure)', async () => {
    policies.set(portA, mkServer(OPAQUE, [anyone]));
    const c = await plain(portA, FROM, true);
    const payload = Buffer.alloc(8 * 1024 * 1024);
    for (let i = 0; i < payload.length; i += 4) payload.writeUInt32LE(i, i);
    c.socket.end(payload);
    await within(c.closed, 20_000, 'the echo of 8 MiB and the FIN');
    assert.ok(c.ended(), 'the client gets the FIN after the echo');
    assert.equal(c.error(), undefined);
    const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    assert.equal(digest(c.received()), digest(payload));
  });
});

describe('InboundProxy: mesh TLS on application ports', () => {
  it('terminates mesh TLS for our SNI; the authorization sees the client identity', async () => {
    policies.set(portA, mkServer(TLS, [onlyIdentity(x.certificate.identity)]));
    const s0 = proxy.stats();
    const cx = await tls(portA, meshClient(x));
    await expectEcho(cx, 'from x');
    const cy = await tls(portA, meshClient(y));
    await expectClosed(cy, 'from y');
    assert.deepEqual(events, [
      { kind: 'allow', port: portA, tls: `mtls:${x.certificate.identity}`, authz: `only-vote-bot` },
      { kind: 'deny', port: portA, tls: `mtls:${y.certificate.identity}` },
    ]);
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 2, tcpAuthzAllow: 1, tcpAuthzDeny: 1 });
  });

  it('detects non-HTTP inside mesh TLS on a detect port and authorizes the identity', async () => {
    policies.set(portA, mkServer(detect(), [onlyIdentity(x.certificate.identity)]));
    const cx = await tls(portA, meshClient(x));
    await expectEcho(cx, 'ping inside mtls\n');
  });

  it('refuses a client certificate from another trust anchor', async () => {
    policies.set(portA, mkServer(TLS, [anyone]));
    const s0 = proxy.stats();
    const appBefore = app.connections;
    const c = await tls(portA, meshClientOptions(foreignCert, mesh.anchorsPem, proxyCert.identity));
    await expectClosed(c, 'hi');
    assert.equal(app.connections, appBefore);
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 1, 'tls handshake failed': 1 });
  });

  it('refuses our SNI without a client certificate', async () => {
    policies.set(portA, mkServer(TLS, [anyone]));
    const s0 = proxy.stats();
    const c = await tls(portA, { servername: proxyCert.identity, ca: mesh.anchorsPem, minVersion: 'TLSv1.3', checkServerIdentity: () => undefined });
    await expectClosed(c, 'hi');
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 1, 'tls handshake failed': 1 });
  });

  it('passes TLS for another SNI through untouched (passthrough)', async () => {
    policies.set(portA, mkServer(detect(), [anyone]));
    const before = app.firstChunks.length;
    const c = tlsFrom(portA, { servername: 'api.example.com', rejectUnauthorized: false });
    await waitFor(() => app.firstChunks.length > before, 'the ClientHello to reach the application', WAIT_MS);
    assert.equal(app.firstChunks[before]?.[0], 0x16, 'the application gets the raw ClientHello');
    assert.deepEqual(events, [{ kind: 'allow', port: portA, tls: 'passthrough:api.example.com', authz: 'anyone' }]);
    c.socket.destroy();
    // Passthrough is not mesh TLS: an authorization requiring it denies.
    policies.set(portB, mkServer(TLS, [meshedOnly]));
    const d = tlsFrom(portB, { servername: 'api.example.com', rejectUnauthorized: false });
    await within(d.closed, WAIT_MS, 'the passthrough connection to be refused');
    assert.equal(events[1]?.kind, 'deny');
  });
});

describe('InboundProxy: the mesh port (transport header)', () => {
  const header = (port: number, extra: { name?: string; sessionProtocol?: 'http1' | 'http2' } = {}) => encodeTransportHeader({ port, ...extra });

  it("applies the target port's policy with the client identity", async () => {
    policies.set(portA, mkServer(detect(), [onlyIdentity(x.certificate.identity)]));
    const cx = await tls(meshPort, transport(x));
    cx.socket.write(header(portA));
    await expectEcho(cx, 'opaque over the mesh\n');
    assert.equal(cx.received().toString(), 'opaque over the mesh\n', 'the header is not forwarded');
    const cy = await tls(meshPort, transport(y));
    cy.socket.write(header(portA));
    await expectClosed(cy, 'denied\n');
    assert.deepEqual(
      events.map((e) => [e.kind, e.port, e.tls]),
      [
        ['allow', portA, `mtls:${x.certificate.identity}`],
        ['deny', portA, `mtls:${y.certificate.identity}`],
      ],
    );
  });

  it("never relays a TCP stream for one of the proxy's own ports to the application host", async () => {
    const p = new InboundProxy(proxyOptions({ listen: { host: HOST, meshPort: 0, appPorts: [0] }, isProxyPort: (port) => port === portB }));
    extraProxies.push(p);
    const bound = await p.start();
    policies.set(portB, mkServer(OPAQUE, [anyone]));
    const appBefore = app.connections;
    const c = await tls(bound.meshPort, transport(x));
    c.socket.write(header(portB));
    await expectClosed(c, 'to the admin port\n');
    assert.equal(app.connections, appBefore);
    assert.deepEqual(p.stats().tcpErrors, { 'proxy port': 1 });
  });

  it('fails closed when the target port has no policy', async () => {
    const s0 = proxy.stats();
    const c = await tls(meshPort, transport(x));
    c.socket.write(header(noPolicyPort));
    await expectClosed(c, 'x');
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 1, 'no policy': 1 });
  });

  it('closes direct connections that are not mTLS with the transport ALPN', async () => {
    policies.set(portA, mkServer(OPAQUE, [anyone]));
    const s0 = proxy.stats();
    const noAlpn = await tls(meshPort, meshClient(x));
    await expectClosed(noAlpn, header(portA));
    const noCert = await tls(meshPort, {
      servername: proxyCert.identity,
      ca: mesh.anchorsPem,
      minVersion: 'TLSv1.3',
      ALPNProtocols: [TRANSPORT_HEADER_ALPN],
      checkServerIdentity: () => undefined,
    });
    await expectClosed(noCert, header(portA));
    const plaintext = await plain(meshPort);
    await expectClosed(plaintext, header(portA));
    const otherSni = tlsFrom(meshPort, { servername: 'api.example.com', rejectUnauthorized: false });
    await expectClosed(otherSni);
    assert.deepEqual(delta(s0, proxy.stats()), {
      accepted: 4,
      'direct connection without transport header': 1,
      'tls handshake failed': 1,
      'direct connection not mutually authenticated': 2,
    });
  });

  it('closes gateway headers and bad headers', async () => {
    policies.set(portA, mkServer(detect(), [anyone]));
    const s0 = proxy.stats();
    const g = await tls(meshPort, transport(x));
    await expectClosed(g, header(portA, { name: 'web.emojivoto.svc.cluster.local' }));
    const bad = await tls(meshPort, transport(x));
    await expectClosed(bad, 'GET / HTTP/1.1\r\n\r\n');
    const silent = await tls(meshPort, transport(x));
    await expectClosed(silent);
    assert.deepEqual(delta(s0, proxy.stats()), {
      accepted: 3,
      'gateway not supported': 1,
      'invalid transport header': 1,
      'transport header timeout': 1,
    });
  });
});

describe('InboundProxy: HTTP', () => {
  it('serves HTTP with the default HTTP stack: per request, never by connection (details in inbound-http.test)', async () => {
    // No routes: every request is answered 404 by the proxy and the connection stays open.
    policies.set(portA, mkServer(detect(), [anyone]));
    policies.set(portB, mkServer(HTTP1, [anyone]));
    const s0 = proxy.stats();
    const appBefore = app.connections;
    for (const port of [portA, portB]) {
      const c = await plain(port);
      for (let i = 1; i <= 2; i++) {
        c.socket.write('GET / HTTP/1.1\r\nhost: web\r\n\r\n');
        await waitFor(() => c.received().toString('latin1').split('HTTP/1.1 404 ').length === i + 1, `404 number ${i}`, WAIT_MS);
      }
      assert.equal(c.socket.destroyed, false);
      c.socket.destroy();
    }
    const h2 = await plain(portA);
    h2.socket.write(HTTP2_PREFACE);
    // The HTTP/2 server answers the preface with its SETTINGS frame (type 4).
    await waitFor(() => h2.received().length >= 9 && h2.received()[3] === 4, 'the server SETTINGS frame', WAIT_MS);
    assert.equal(app.connections, appBefore);
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 3 });
    assert.equal(proxy.stats().httpRouteNotFound - s0.httpRouteNotFound, 4);
  });

  it('hands HTTP to handleHttp with the bytes intact and the client facts', async () => {
    const seen: Omit<InboundHttpConnection, 'socket' | 'raw' | 'policy'>[] = [];
    const p = new InboundProxy(
      proxyOptions({
        listen: { host: HOST, meshPort: 0, appPorts: [0] },
        handleHttp: (conn) => {
          seen.push({ port: conn.port, client: conn.client, version: conn.version, source: conn.source });
          // The detected bytes are still in the stream: answer with the request line read back.
          const first = conn.socket.read() as Buffer | null;
          const line = (first ?? Buffer.alloc(0)).toString('latin1').split('\r\n')[0] ?? '';
          conn.socket.end(`${line}\n`);
        },
      }),
    );
    extraProxies.push(p);
    const bound = await p.start();
    const port = bound.appPorts[0] as number;
    policies.set(port, mkServer(detect(), [anyone]));
    const c = await plain(port);
    c.socket.write('GET /vote HTTP/1.1\r\nhost: web\r\n\r\n');
    await within(c.closed, WAIT_MS, 'the handler to answer');
    assert.equal(c.received().toString(), 'GET /vote HTTP/1.1\n');
    const m = await tls(bound.meshPort, transport(x));
    m.socket.write(Buffer.concat([encodeTransportHeader({ port, sessionProtocol: 'http2' }), Buffer.from(HTTP2_PREFACE)]));
    await within(m.closed, WAIT_MS, 'the handler to answer the mesh stream');
    assert.equal(m.received().toString(), 'PRI * HTTP/2.0\n');
    assert.equal(seen.length, 2);
    assert.deepEqual(seen[0], { port, client: seen[0]?.client, version: 'http1', source: 'detect' });
    assert.equal(tlsLabel(seen[0]?.client.tls ?? { kind: '?' }), 'none:no_tls_from_remote');
    assert.deepEqual({ ...seen[1], client: undefined }, { port, client: undefined, version: 'http2', source: 'transport-header' });
    assert.equal(tlsLabel(seen[1]?.client.tls ?? { kind: '?' }), `mtls:${x.certificate.identity}`);
    await p.close();
    assert.equal(p.stats().open, 0);
  });
});

describe('InboundProxy: policy changes', () => {
  it('terminates the connections an update revokes and keeps the others', async () => {
    policies.set(portA, mkServer(OPAQUE, [anyone]));
    const c1 = await plain(portA, FROM);
    const c2 = await plain(portA, FROM_OTHER);
    await expectEcho(c1, 'one');
    await expectEcho(c2, 'two');
    assert.equal(policies.listenerCount, 1, 'one subscription per port, not per connection');
    const s0 = proxy.stats();
    policies.set(portA, mkServer(OPAQUE, [fromHost(FROM_OTHER)]));
    await within(c1.closed, WAIT_MS, 'the revoked connection to close');
    assert.match(c1.error() ?? '', /ECONNRESET/);
    await expectEcho(c2, 'still here');
    assert.deepEqual(delta(s0, proxy.stats()), { tcpAuthzTerminate: 1 });
    assert.deepEqual(events.at(-1), { kind: 'terminate', port: portA, tls: 'none:port_skipped' });
    // A port that becomes HTTP-only takes no TCP streams.
    policies.set(portA, mkServer(HTTP1, [anyone]));
    await within(c2.closed, WAIT_MS, 'the opaque connection on a now-HTTP port to close');
    assert.deepEqual(delta(s0, proxy.stats()), { tcpAuthzTerminate: 2 });
  });

  it('re-checks mesh identities on update', async () => {
    policies.set(portA, mkServer(TLS, [onlyIdentity(x.certificate.identity)]));
    policies.set(portB, mkServer(TLS, [onlyIdentity(x.certificate.identity)]));
    const onA = await tls(portA, meshClient(x));
    const onB = await tls(portB, meshClient(x));
    await expectEcho(onA, 'a');
    await expectEcho(onB, 'b');
    assert.equal(policies.listenerCount, 2);
    policies.set(portA, mkServer(TLS, [onlyIdentity(x.certificate.identity), meshedOnly])); // still admitted
    await expectEcho(onA, 'a again');
    policies.set(portA, mkServer(TLS, [onlyIdentity(y.certificate.identity)]));
    await within(onA.closed, WAIT_MS, 'the revoked mTLS connection to close');
    await expectEcho(onB, 'b again');
    assert.equal(policies.listenerCount, 1, 'the subscription of a port without connections is dropped');
  });
});

describe('InboundProxy: resources', () => {
  it('leaves nothing behind after 200 concurrent connections are opened and aborted', async () => {
    policies.set(portA, mkServer(detect(), [anyone]));
    policies.set(portB, mkServer(OPAQUE, [anyone]));
    const hello = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);
    const s0 = proxy.stats();
    const conns = await Promise.all(
      Array.from({ length: 200 }, async (_, i) => {
        const kind = i % 5;
        if (kind === 4) return tlsFrom(meshPort, transport(x));
        const c = await plain(kind === 3 ? portB : portA, i % 2 === 0 ? FROM : FROM_OTHER);
        if (kind === 1) c.socket.write(hello); // a ClientHello that never completes
        if (kind === 2 || kind === 3) c.socket.write('data'); // forwarded to the application
        return c;
      }),
    );
    await sleep(30);
    for (const c of conns) c.socket.destroy();
    await Promise.all(conns.map((c) => within(c.closed, WAIT_MS, 'a client to close')));
    await waitFor(() => proxy.stats().open === 0, 'the proxy to close all 200', WAIT_MS);
    await waitFor(() => app.open.size === 0, 'the application to see them closed', WAIT_MS);
    const st = proxy.stats();
    assert.equal(st.accepted - s0.accepted, 200);
    assert.equal(st.forwarding, 0);
    assert.equal(st.policySubscriptions, 0);
    assert.equal(policies.listenerCount, 0);
  });

  it('sheds the oldest unfinished connection beyond maxUnfinished', async () => {
    const p = new InboundProxy(proxyOptions({ listen: { host: HOST, meshPort: 0, appPorts: [0] }, limits: { maxUnfinished: 3 } }));
    extraProxies.push(p);
    const port = (await p.start()).appPorts[0] as number;
    policies.set(port, mkServer(detect(), [anyone]));
    // Half-open handshakes: a ClientHello's first bytes, then nothing.
    const hello = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);
    const conns: Probe[] = [];
    for (let i = 0; i < 4; i++) {
      const c = await plain(port);
      c.socket.write(hello);
      conns.push(c);
      await waitFor(() => p.stats().accepted === i + 1, 'the proxy to accept it', WAIT_MS);
    }
    await within((conns[0] as Probe).closed, WAIT_MS, 'the oldest to be shed');
    assert.deepEqual(p.stats().tcpErrors, { 'unfinished connection limit': 1 });
    for (const c of conns.slice(1)) assert.equal(c.socket.destroyed, false);
    // A healthy client still gets through (the next oldest makes room), and once established it
    // no longer counts: the connections after it are not shed for it.
    const ok = await tls(port, meshClient(x));
    await expectEcho(ok, 'still served\n');
    await within((conns[1] as Probe).closed, WAIT_MS, 'the next oldest to be shed');
    const later = await plain(port);
    later.socket.write(hello);
    await waitFor(() => p.stats().accepted === 6, 'the proxy to accept it', WAIT_MS);
    assert.deepEqual(p.stats().tcpErrors, { 'unfinished connection limit': 2 });
    for (const c of [...conns.slice(2), later]) assert.equal(c.socket.destroyed, false);
  });

  it('bounds connections by default from the descriptor limit, and at most 10,000', () => {
    assert.equal(defaultMaxConnections(20_000), 9488);
    assert.equal(defaultMaxConnections(1_048_576), INBOUND_MAX_CONNECTIONS);
    assert.equal(INBOUND_MAX_CONNECTIONS, 10_000);
    assert.equal(defaultMaxConnections(1024), 64);
    assert.equal(defaultMaxConnections(undefined), 4096);
  });

  it('at maxConnections sheds plaintext before meshed connections, and never a meshed one for another', async () => {
    const p = new InboundProxy(proxyOptions({ listen: { host: HOST, meshPort: 0, appPorts: [0, 0] }, limits: { maxConnections: 3 } }));
    extraProxies.push(p);
    const [meshedPort, plainPort] = (await p.start()).appPorts as [number, number];
    policies.set(meshedPort, mkServer(TLS, [anyone]));
    policies.set(plainPort, mkServer(OPAQUE, [anyone]));
    const a = await tls(meshedPort, meshClient(x));
    await expectEcho(a, 'a\n');
    const plainC = await plain(plainPort);
    await expectEcho(plainC, 'c\n');
    const b = await tls(meshedPort, meshClient(y));
    await expectEcho(b, 'b\n');
    assert.equal(plainC.socket.destroyed, false);
    // A fourth: the plaintext one goes.
    const d = await tls(meshedPort, meshClient(x));
    await expectEcho(d, 'd\n');
    await within(plainC.closed, WAIT_MS, 'the plaintext connection to be shed');
    // A fifth: only meshed connections are held, so it is refused.
    const e = await plain(plainPort);
    await within(e.closed, WAIT_MS, 'the new connection to be refused');
    assert.deepEqual(p.stats().tcpErrors, { 'connection limit': 2 });
    for (const m of [a, b, d]) await expectEcho(m, 'meshed still served\n');
  });

  it('at maxConnections sheds the oldest plaintext connection before a newer handshake in progress', async () => {
    // An attacker holding the limit in plaintext connections, still opening more, must not cut a
    // meshed client's connection that is mid-handshake: the oldest connection without a verified
    // identity goes, whether finished or not.
    const p = new InboundProxy(proxyOptions({ listen: { host: HOST, meshPort: 0, appPorts: [0, 0] }, limits: { maxConnections: 3 } }));
    extraProxies.push(p);
    const [meshedPort, plainPort] = (await p.start()).appPorts as [number, number];
    policies.set(meshedPort, mkServer(TLS, [anyone]));
    policies.set(plainPort, mkServer(OPAQUE, [anyone]));
    const held1 = await plain(plainPort);
    await expectEcho(held1, 'held 1\n');
    const held2 = await plain(plainPort);
    await expectEcho(held2, 'held 2\n');
    // The meshed client's TCP connection is accepted; its ClientHello has not come yet.
    const tcp = netConnect({ host: HOST, port: meshedPort, localAddress: FROM });
    tcp.on('error', () => {});
    clients.add(tcp);
    tcp.once('close', () => clients.delete(tcp));
    await within(once(tcp, 'connect'), WAIT_MS, 'a plaintext connect');
    await waitFor(() => p.stats().accepted === 3, 'the proxy to accept it', WAIT_MS);
    const held3 = await plain(plainPort);
    await within(held1.closed, WAIT_MS, 'the oldest plaintext connection to be shed');
    const meshed = probe(tlsConnect({ ...meshClient(x), socket: tcp }));
    await within(eventOrClose(meshed, 'secureConnect'), WAIT_MS, 'a TLS connect');
    await expectEcho(meshed, 'handshake finished after the limit was reached\n');
    assert.equal(held2.socket.destroyed, false);
    await expectEcho(held3, 'held 3\n');
    assert.deepEqual(p.stats().tcpErrors, { 'connection limit': 1 });
  });

  it('closes a forwarded TCP connection idle for tcpIdleTimeoutMs, and not one that carries bytes', async () => {
    const p = new InboundProxy(proxyOptions({ listen: { host: HOST, meshPort: 0, appPorts: [0] }, limits: { tcpIdleTimeoutMs: 300 } }));
    extraProxies.push(p);
    const port = (await p.start()).appPorts[0] as number;
    policies.set(port, mkServer(OPAQUE, [anyone]));
    const idle = await plain(port);
    await expectEcho(idle, 'then nothing\n');
    const busy = await plain(port);
    const ticker = setInterval(() => busy.socket.write('.'), 50);
    try {
      await within(idle.closed, WAIT_MS, 'the idle connection to close');
      assert.equal(busy.socket.destroyed, false, 'a connection carrying bytes stays');
    } finally {
      clearInterval(ticker);
    }
    assert.deepEqual(p.stats().tcpErrors, { 'tcp idle timeout': 1 });
  });

  it('closes a stream silent until the HTTP detect deadline whose first bytes then are HTTP', async () => {
    policies.set(portA, mkServer(detect(150), [anyone]));
    const s0 = proxy.stats();
    const c = await tls(portA, meshClient(x));
    await waitFor(() => proxy.stats().tcpAuthzAllow > s0.tcpAuthzAllow, 'the silent stream to be forwarded', WAIT_MS);
    const chunksBefore = app.firstChunks.length;
    await expectClosed(c, `GET /admin HTTP/1.1\r\nHost: web\r\nl5d-client-id: ${y.certificate.identity}\r\n\r\n`);
    assert.equal(app.firstChunks.length, chunksBefore, 'no byte reached the application');
    assert.deepEqual(delta(s0, proxy.stats()), { accepted: 1, tcpAuthzAllow: 1, 'http after detect timeout': 1 });
  });

  it('closes the client when the application refuses the connection', async () => {
    const gone = createServer();
    gone.listen(0, HOST);
    await once(gone, 'listening');
    const deadPort = (gone.address() as AddressInfo).port;
    await new Promise<void>((resolve) => gone.close(() => resolve()));
    const p = new InboundProxy(proxyOptions({ appPortOf: () => deadPort, listen: { host: HOST, meshPort: 0, appPorts: [0] } }));
    extraProxies.push(p);
    const port = (await p.start()).appPorts[0] as number;
    policies.set(port, mkServer(OPAQUE, [anyone]));
    const c = await plain(port);
    await expectClosed(c, 'anyone there?');
    await waitFor(() => p.stats().open === 0 && p.stats().forwarding === 0, 'the proxy to drop the connection', WAIT_MS);
    assert.deepEqual(p.stats().tcpErrors, { 'app connect failed': 1 });
    assert.equal(p.stats().tcpAuthzAllow, 1);
    await p.close();
  });

  it('close() closes listeners and connections; start() fails cleanly on a taken port', async () => {
    const p = new InboundProxy(proxyOptions({ listen: { host: HOST, meshPort: 0, appPorts: [0] } }));
    extraProxies.push(p);
    const bound = await p.start();
    const port = bound.appPorts[0] as number;
    policies.set(port, mkServer(OPAQUE, [anyone]));
    const c = await plain(port);
    await expectEcho(c, 'before close');
    await p.close();
    await within(c.closed, WAIT_MS, 'the forwarded connection to close');
    assert.deepEqual(p.stats().open, 0);
    const refused = probe(netConnect({ host: HOST, port }));
    await within(refused.closed, WAIT_MS, 'a refused connect');
    assert.equal(refused.error(), 'ECONNREFUSED');

    const clash = new InboundProxy(proxyOptions({ listen: { host: HOST, meshPort: 0, appPorts: [0, portA] } }));
    await assert.rejects(clash.start(), { code: 'ERR_INBOUND_LISTEN' });
    assert.equal(clash.ports, undefined);
    assert.throws(() => new InboundProxy(proxyOptions({ detectTimeoutMs: 0 })), RangeError);
  });
});
