/**
 * Transparent mode in-process, with a scripted SO_ORIGINAL_DST (the real one needs iptables in a
 * network namespace: test/e2e/transparent.test.ts). Inbound: an InboundProxy whose mesh port
 * receives "redirected" connections serves each as the pod port its original destination names —
 * the same detection and authorization as an application listener — and keeps direct
 * (transport-header) connections for the mesh port itself. Outbound: an OutboundProxy carries a
 * redirected connection to its original destination over mesh TLS (the far InboundProxy of
 * testing/outbound sees our identity), to an unknown address in plaintext, and still serves
 * HTTP_PROXY clients that address it directly.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer as createHttpServer, type Server as HttpServer, type IncomingHttpHeaders } from 'node:http';
import { constants as h2constants, connect as http2Connect, type OutgoingHttpHeaders } from 'node:http2';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer, connect as netConnect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import {
  type DestinationEvent,
  type GrpcServerHandle,
  InboundPolicyClient,
  inboundPolicyService,
  type StreamHandlers,
  startGrpcServer,
  type WireResult,
} from '../api/index.js';
import { ALL_NETWORKS, type Authorization, DEFAULT_HTTP_ROUTE, defaultMeta, type InboundServer, type Network, type ProxyProtocol } from '../core/index.js';
import { type PolicyWatchClient, PolicyWatcher, type PolicyWatcherOptions } from './inbound/policy-watch.js';
import { InboundProxy, type InboundProxyOptions } from './inbound/proxy.js';
import { MetricsRegistry } from './metrics/cells.js';
import { OutboundMetrics } from './metrics/outbound.js';
import { OutboundConnector } from './outbound/connector.js';
import { OutboundProxy } from './outbound/proxy.js';
import { DestinationCache, type DestinationSource } from './outbound/resolver.js';
import { TempDirs, waitFor, within } from './testing/identity.js';
import { HOST, POD_HTTP1, POD_HTTP2, POD_TCP, type ServerSide, startServerSide } from './testing/outbound.js';
import { type FakeCell, FakeDiscovery, FakePolicies } from './testing/policies.js';
import { MeshTlsContext, TRANSPORT_HEADER_ALPN } from './tls/context.js';
import type { OriginalDstReader, OriginalDstResult } from './transport/original-dst.js';
import { encodeTransportHeader, type TransportHeader } from './transport/transport-header.js';

const WAIT_MS = 5000;
/** Admitted by the inbound policies in plaintext. */
const ALLOWED = '127.0.0.2';
/** Not admitted in plaintext. */
const STRANGER = '127.0.0.3';
/** A pod address the scripted controller knows (its endpoints are the far InboundProxy). */
const POD_IP = '127.0.0.9';

/**
 * The scripted SO_ORIGINAL_DST: what the next accepted connection reports (tests run one
 * connection at a time). Undefined: not redirected.
 */
let next: OriginalDstResult | undefined;
const originalDst: OriginalDstReader = (s) =>
  next ?? { ok: true, value: { address: s.localAddress as string, port: s.localPort as number, redirected: false } };
const redirectTo = (address: string, port: number): OriginalDstResult => ({ ok: true, value: { address, port, redirected: true } });

// ---------------------------------------------------------------------------------------------
// Set-up

function authz(name: string, authentication: Authorization['authentication'], networks: readonly Network[]): Authorization {
  return { meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name }, networks, authentication };
}

function server(name: string, protocol: ProxyProtocol, authorizations: Authorization[]): InboundServer {
  return { meta: { group: 'policy.linkerd.io', kind: 'Server', name }, protocol, authorizations };
}

class TableSource implements DestinationSource {
  readonly table = new Map<string, DestinationEvent>();
  get(path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>): () => void {
    queueMicrotask(() => handlers.onMessage({ ok: true, value: this.table.get(path) ?? { kind: 'noEndpoints', exists: false } }));
    return () => {};
  }
}

const dirs = new TempDirs();
let side: ServerSide;
let inbound: InboundProxy;
let meshPort: number;
const appSeen: IncomingHttpHeaders[] = [];
let httpApp: HttpServer;
let echoApp: NetServer;
let cache: DestinationCache;
let connector: OutboundConnector;
let outbound: OutboundProxy;
let outboundPort: number;
const sockets = new Set<Socket>();

async function listen(s: HttpServer | NetServer): Promise<number> {
  s.listen(0, HOST);
  await once(s, 'listening');
  return (s.address() as AddressInfo).port;
}

before(async () => {
  side = await startServerSide(dirs);
  httpApp = createHttpServer((req, res) => {
    appSeen.push(req.headers);
    res.end(`app ${req.url}`);
  });
  echoApp = createNetServer((s) => {
    s.on('error', () => {});
    s.pipe(s);
  });
  const [httpPort, echoPort] = await Promise.all([listen(httpApp), listen(echoApp)]);
  const policies = new FakePolicies();
  const anywhere: Network = { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] };
  const client = authz('client', { kind: 'tlsAuthenticated', identities: [side.clientCert.identity], suffixes: [] }, [anywhere]);
  const allowed = authz('allowed', { kind: 'unauthenticated' }, [{ net: { ip: ALLOWED, prefixLen: 32 }, except: [] }]);
  const everything = {
    meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'all' },
    hosts: [],
    authorizations: [],
    rules: [{ matches: [{ path: { kind: 'prefix' as const, value: '/' }, headers: [], queryParams: [] }], filters: [] }],
  };
  policies.set(8080, server('web', { kind: 'http1', routes: [everything] }, [client, allowed]));
  policies.set(9000, server('tcp', { kind: 'opaque' }, [allowed]));
  const appPorts = new Map([
    [8080, httpPort],
    [9000, echoPort],
  ]);
  inbound = new InboundProxy({
    identity: side.serverCert.identity,
    tls: new MeshTlsContext(side.serverCert, side.mesh.anchorsPem),
    policies,
    appHost: HOST,
    appPortOf: (p) => appPorts.get(p) ?? 1,
    listen: { host: HOST, meshPort: 0, appPorts: [] },
    detectTimeoutMs: 1000,
    originalDst,
  });
  meshPort = (await inbound.start()).meshPort;

  const source = new TableSource();
  source.table.set(`${POD_IP}:8080`, { kind: 'add', endpoints: [side.endpoint(POD_HTTP1)], setLabels: {} });
  source.table.set(`${POD_IP}:${POD_HTTP2}`, { kind: 'add', endpoints: [side.endpoint(POD_HTTP2)], setLabels: {} });
  source.table.set(`${POD_IP}:9000`, {
    kind: 'add',
    endpoints: [side.endpoint(POD_TCP, { protocolHint: 'opaque', opaqueTransportPort: 4143 })],
    setLabels: {},
  });
  cache = new DestinationCache({ source, namespace: 'demo', lookupTimeoutMs: 2000 });
  connector = new OutboundConnector({ tls: new MeshTlsContext(side.clientCert, side.mesh.anchorsPem), meshPortOf: () => side.meshPort, localAddress: ALLOWED });
  outbound = new OutboundProxy({ listen: { host: HOST, port: 0 }, resolver: cache, connector, originalDst, tunnelDetectTimeoutMs: 500 });
  outboundPort = await outbound.start();
});

after(async () => {
  for (const s of sockets) s.destroy();
  await outbound?.close();
  connector?.close();
  cache?.close();
  await inbound?.close();
  httpApp?.closeAllConnections();
  await Promise.all([new Promise((r) => httpApp?.close(r)), new Promise((r) => echoApp?.close(r))]);
  await side?.close();
  dirs.cleanup();
});

// ---------------------------------------------------------------------------------------------
// Clients

/** A client connection and everything it received. */
interface Client {
  readonly socket: Socket;
  received(): string;
  readonly closed: Promise<void>;
}

function watch(socket: Socket): Client {
  const chunks: Buffer[] = [];
  sockets.add(socket);
  socket.on('error', () => {});
  socket.on('data', (c: Buffer) => chunks.push(c));
  const closed = new Promise<void>((resolve) =>
    socket.once('close', () => {
      sockets.delete(socket);
      resolve();
    }),
  );
  return { socket, received: () => Buffer.concat(chunks).toString('latin1'), closed };
}

/**
 * A meshed client's direct connection to `meshPort` from `from`: mesh TLS as the client identity
 * with the transport-header ALPN, then `header` written once the handshake is done.
 */
async function meshedDirect(meshPort: number, from: string, header: TransportHeader): Promise<Client> {
  const tcp = watch(netConnect({ host: HOST, port: meshPort, localAddress: from })).socket;
  const t = watch(
    tlsConnect({
      ...new MeshTlsContext(side.clientCert, side.mesh.anchorsPem).clientOptions(side.serverCert.identity, [TRANSPORT_HEADER_ALPN]),
      socket: tcp,
    }),
  );
  await within(once(t.socket, 'secureConnect'), WAIT_MS, 'the mesh handshake');
  t.socket.write(encodeTransportHeader(header));
  return t;
}

/**
 * Connects from `from` to `port`, with `next` set to `dst` for the proxy's accept; resolves once
 * connected (or closed: a refused connection may be reset before the client saw it connect).
 */
async function connectAs(port: number, from: string, dst: OriginalDstResult | undefined): Promise<Client> {
  next = dst;
  const c = watch(netConnect({ host: HOST, port, localAddress: from }));
  await within(Promise.race([new Promise((resolve) => c.socket.once('connect', resolve)), c.closed]), WAIT_MS, 'connect');
  return c;
}

/** Writes `data` (unless closed already) and resolves with everything received once the peer closed. */
async function exchange(c: Client, data: string | Buffer): Promise<string> {
  if (!c.socket.destroyed) c.socket.write(data);
  await within(c.closed, WAIT_MS, 'the connection to close');
  return c.received();
}

const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n`;

/** Writes `data` and resolves once it came back (the connection stays open). */
async function echoes(c: Client, data: string): Promise<void> {
  const before = c.received().length;
  c.socket.write(data);
  await waitFor(() => c.received().slice(before).includes(data), `the echo of ${data}`, WAIT_MS);
}

// ---------------------------------------------------------------------------------------------

describe('InboundProxy with originalDst (transparent mode)', () => {
  it('serves a plaintext connection redirected from pod port 8080 with 8080’s policy: allowed → the app, denied → 403', async () => {
    const ok = await exchange(await connectAs(meshPort, ALLOWED, redirectTo('10.0.0.5', 8080)), get('/allowed'));
    assert.match(ok, /^HTTP\/1\.1 200 /);
    assert.match(ok, /app \/allowed$/);
    const denied = await exchange(await connectAs(meshPort, STRANGER, redirectTo('10.0.0.5', 8080)), get('/denied'));
    assert.match(denied, /^HTTP\/1\.1 403 /);
  });

  it('terminates mesh TLS without a transport header on a redirected connection: Established, the app sees the client id', async () => {
    next = redirectTo('10.0.0.5', 8080);
    const tcp = watch(netConnect({ host: HOST, port: meshPort, localAddress: STRANGER })).socket;
    const t = watch(tlsConnect({ ...new MeshTlsContext(side.clientCert, side.mesh.anchorsPem).clientOptions(side.serverCert.identity), socket: tcp }));
    await within(once(t.socket, 'secureConnect'), WAIT_MS, 'the mesh handshake');
    const before = appSeen.length;
    const r = await exchange(t, get('/meshed'));
    assert.match(r, /^HTTP\/1\.1 200 /);
    assert.equal(appSeen.slice(before)[0]?.['l5d-client-id'], side.clientCert.identity);
  });

  it('authorizes a redirected opaque port per connection: allowed → echoed, denied → closed without a byte', async () => {
    const s = await connectAs(meshPort, ALLOWED, redirectTo('10.0.0.5', 9000));
    await echoes(s, 'ping');
    s.socket.destroy();
    assert.equal(await exchange(await connectAs(meshPort, STRANGER, redirectTo('10.0.0.5', 9000)), 'ping'), '');
  });

  it('keeps the mesh port direct when the original destination is the mesh port itself (or not redirected)', async () => {
    const before = inbound.stats().tcpErrors['direct connection not mutually authenticated'] ?? 0;
    assert.equal(await exchange(await connectAs(meshPort, ALLOWED, redirectTo('10.0.0.5', meshPort)), get('/')), '');
    assert.equal(await exchange(await connectAs(meshPort, ALLOWED, undefined), get('/')), '');
    assert.equal((inbound.stats().tcpErrors['direct connection not mutually authenticated'] ?? 0) - before, 2);
    // A transport-header connection redirected to 4143 (port 4143 → 4143) works as ever.
    next = redirectTo('10.0.0.5', meshPort);
    const t = await meshedDirect(meshPort, STRANGER, { port: 8080, sessionProtocol: 'http1' });
    assert.match(await exchange(t, get('/direct')), /^HTTP\/1\.1 200 [\s\S]*app \/direct$/);
  });

  it('closes a connection whose original destination cannot be read', async () => {
    const before = inbound.stats().tcpErrors['original destination unknown'] ?? 0;
    const r = await exchange(await connectAs(meshPort, ALLOWED, { ok: false, code: 'ENOPROTOOPT', message: 'Protocol not available' }), get('/'));
    assert.equal(r, '');
    assert.equal((inbound.stats().tcpErrors['original destination unknown'] ?? 0) - before, 1);
  });
});

describe('OutboundProxy with originalDst (transparent mode)', () => {
  it('carries a redirected HTTP connection to a meshed pod over mesh TLS: the far side sees our identity', async () => {
    const before = side.seen.length;
    const r = await exchange(await connectAs(outboundPort, HOST, redirectTo(POD_IP, 8080)), get('/transparent'));
    assert.match(r, /^HTTP\/1\.1 200 /);
    const seen = side.seen.slice(before);
    assert.equal(seen.length, 1);
    assert.equal(seen[0]?.path, '/transparent');
    assert.equal(seen[0]?.headers['l5d-client-id'], side.clientCert.identity);
    assert.equal(outbound.stats().redirected >= 1, true);
  });

  it('counts the requests of a redirected HTTP/1 connection on the endpoint, as upstream counts outbound requests', async () => {
    const registry = new MetricsRegistry();
    const counted = new OutboundProxy({
      listen: { host: HOST, port: 0 },
      resolver: cache,
      connector,
      originalDst,
      tunnelDetectTimeoutMs: 500,
      metrics: new OutboundMetrics({ registry }),
    });
    const port = await counted.start();
    try {
      const c = await connectAs(port, HOST, redirectTo(POD_IP, 8080));
      // Keep-alive: a GET, a HEAD (no body follows its head), a POST with a body, then the last one closes.
      const keep = (method: string, path: string, body = '') => `${method} ${path} HTTP/1.1\r\nHost: web\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
      c.socket.write(keep('GET', '/one'));
      await waitFor(() => c.received().includes('hello /one'), 'the first response', WAIT_MS);
      c.socket.write(keep('HEAD', '/two'));
      await waitFor(() => (c.received().match(/HTTP\/1\.1 200 /g) ?? []).length === 2, 'the HEAD response', WAIT_MS);
      c.socket.write(keep('POST', '/three', 'abc'));
      await waitFor(() => c.received().includes('hello /three abc'), 'the POST response', WAIT_MS);
      assert.match(await exchange(c, get('/trailers')), /with trailers/);
      const lines = registry.render().split('\n');
      const series = `direction="outbound",target_addr="${HOST}:${POD_HTTP1}"`;
      const requests = lines.filter((l) => l.startsWith('request_total{'));
      assert.equal(requests.length, 1, requests.join('\n'));
      assert.match(requests[0] ?? '', new RegExp(`^request_total\\{${series},[^}]*tls="true",server_id="${side.serverCert.identity}"[^}]*\\} 4$`));
      const responses = lines.filter((l) => l.startsWith('response_total{'));
      assert.deepEqual(
        responses.map((l) => l.replace(/\{.*,status_code/, '{…,status_code')),
        ['response_total{…,status_code="200",classification="success",grpc_status="",error=""} 4'],
      );
      assert.ok(
        lines.some((l) => /^response_latency_ms_count\{.*status_code="200"\} 4$/.test(l)),
        lines.join('\n'),
      );
    } finally {
      await counted.close();
    }
  });

  it('counts the streams of a redirected HTTP/2 connection on the endpoint: status, gRPC status, a reset', async () => {
    const registry = new MetricsRegistry();
    const counted = new OutboundProxy({
      listen: { host: HOST, port: 0 },
      resolver: cache,
      connector,
      originalDst,
      tunnelDetectTimeoutMs: 500,
      metrics: new OutboundMetrics({ registry }),
    });
    const port = await counted.start();
    const c = await connectAs(port, HOST, redirectTo(POD_IP, POD_HTTP2));
    const session = http2Connect(`http://${POD_IP}:${POD_HTTP2}`, { createConnection: () => c.socket });
    session.on('error', () => {});
    try {
      const call = (headers: OutgoingHttpHeaders, body?: Buffer) =>
        within(
          new Promise<{ status: number; trailers: IncomingHttpHeaders }>((resolve, reject) => {
            const st = session.request(headers, { endStream: body === undefined });
            let status = 0;
            let trailers: IncomingHttpHeaders = {};
            st.on('response', (h) => {
              status = Number(h[':status']);
            });
            st.on('trailers', (t) => {
              trailers = t;
            });
            st.on('error', reject);
            st.resume();
            st.on('end', () => resolve({ status, trailers }));
            if (body !== undefined) st.end(body);
          }),
          WAIT_MS,
          'an HTTP/2 exchange',
        );
      for (const path of ['/a', '/b']) assert.equal((await call({ ':path': path })).status, 200);
      const grpc = await call({ ':method': 'POST', ':path': '/s/M', 'content-type': 'application/grpc', te: 'trailers' }, Buffer.from([0, 0, 0, 0, 0]));
      assert.equal(grpc.trailers['grpc-status'], '0');
      const lines = () => registry.render().split('\n');
      const series = `direction="outbound",target_addr="${HOST}:${POD_HTTP2}"`;
      await waitFor(() => lines().some((l) => l.startsWith(`request_total{${series}`) && l.endsWith(' 3')), 'three streams counted', WAIT_MS);
      const responses = lines()
        .filter((l) => l.startsWith('response_total{'))
        .map((l) => l.replace(/\{.*,status_code/, '{…,status_code'));
      assert.deepEqual(responses.sort(), [
        'response_total{…,status_code="200",classification="success",grpc_status="",error=""} 2',
        'response_total{…,status_code="200",classification="success",grpc_status="0",error=""} 1',
      ]);
      assert.match(lines().find((l) => l.startsWith('request_total{')) ?? '', new RegExp(`tls="true",server_id="${side.serverCert.identity}"`));
      // A stream the client resets before any response: a failure named by the reset.
      const hung = session.request({ ':method': 'POST', ':path': '/unfinished' }, { endStream: false });
      hung.on('error', () => {});
      hung.write('part of a body');
      await waitFor(() => lines().some((l) => l.startsWith(`request_total{${series}`) && l.endsWith(' 4')), 'the fourth stream counted', WAIT_MS);
      hung.close(h2constants.NGHTTP2_CANCEL);
      await waitFor(
        () => lines().some((l) => l.startsWith(`response_total{${series}`) && l.endsWith(',classification="failure",grpc_status="",error="h2(CANCEL)"} 1')),
        'the reset stream counted as a failure',
        WAIT_MS,
      );
    } finally {
      session.destroy();
      await counted.close();
    }
  });

  it('carries a redirected opaque connection (transport header without a session protocol)', async () => {
    const s = await connectAs(outboundPort, HOST, redirectTo(POD_IP, 9000));
    await echoes(s, 'opaque bytes');
    s.socket.destroy();
  });

  it('connects to an address the controller does not know directly, in plaintext', async () => {
    const before = appSeen.length;
    const httpPort = (httpApp.address() as AddressInfo).port;
    const r = await exchange(await connectAs(outboundPort, HOST, redirectTo(HOST, httpPort)), get('/unmeshed'));
    assert.match(r, /^HTTP\/1\.1 200 [\s\S]*app \/unmeshed$/);
    assert.equal(appSeen.slice(before)[0]?.['l5d-client-id'], undefined);
  });

  it('serves a connection that was not redirected as the forward proxy (HTTP_PROXY clients)', async () => {
    const httpPort = (httpApp.address() as AddressInfo).port;
    const r = await exchange(
      await connectAs(outboundPort, HOST, undefined),
      `GET http://${HOST}:${httpPort}/forward HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
    );
    assert.match(r, /^HTTP\/1\.1 200 [\s\S]*app \/forward$/);
  });

  it('resets a connection whose original destination cannot be read, or that cannot be carried', async () => {
    const before = outbound.stats().errors['original destination unknown'] ?? 0;
    assert.equal(await exchange(await connectAs(outboundPort, HOST, { ok: false, code: 'EBADF', message: 'bad fd' }), get('/')), '');
    assert.equal((outbound.stats().errors['original destination unknown'] ?? 0) - before, 1);
    // Nothing listens there: no status line, just the close.
    assert.equal(await exchange(await connectAs(outboundPort, HOST, redirectTo(HOST, 1)), get('/')), '');
  });
});

// ---------------------------------------------------------------------------------------------
// Lazy discovery: ports nobody declared, their policy from a real InboundServerPolicies server

describe('InboundProxy with originalDst: ports discovered on first connection', () => {
  const WORKLOAD = JSON.stringify({ ns: 'emojivoto', pod: 'web-0' });
  const DISCOVERY_MS = 300;
  /** Undeclared ports: HTTP under a cluster-unauthenticated-like default (only ALLOWED), `deny`, all-unauthenticated TCP, and one the controller never answers for. */
  const HTTP_DEFAULT = 7001;
  const DENY_DEFAULT = 7002;
  const OPEN_TCP = 7003;
  const HUNG = 7004;
  /** Answered (all-unauthenticated TCP) only once the test opens the gate. */
  const GATED = 7005;
  let openGate: (() => void) | undefined;
  /** All-unauthenticated HTTP, for the idle-eviction test (its own cell, so updates stay local). */
  const IDLE = 7006;
  let idleCell: FakeCell;
  const onlyAllowed: Network[] = [{ net: { ip: ALLOWED, prefixLen: 32 }, except: [] }];
  const defaultServer = (name: string, protocol: ProxyProtocol, authorizations: Authorization[]): InboundServer => ({
    meta: defaultMeta(name),
    protocol,
    authorizations,
  });
  const unauthenticated = (name: string, networks: readonly Network[]): Authorization => ({
    meta: defaultMeta(name),
    networks,
    authentication: { kind: 'unauthenticated' },
  });

  const discovery = new FakeDiscovery();
  const watchCalls: number[] = [];
  const lazySeen: string[] = [];
  let appConnections = 0;
  let grpc: GrpcServerHandle;
  let policyClient: InboundPolicyClient;
  let lazyHttp: HttpServer;
  let lazyEcho: NetServer;
  const started: { proxy: InboundProxy; watcher: PolicyWatcher }[] = [];

  /** An InboundProxy in transparent mode over a PolicyWatcher that declares 8080 only. */
  async function startLazy(
    extra: Partial<PolicyWatcherOptions> = {},
    isProxyPort?: (port: number) => boolean,
    proxyOpts: Partial<InboundProxyOptions> = {},
  ): Promise<{ proxy: InboundProxy; watcher: PolicyWatcher; meshPort: number }> {
    const httpPort = (lazyHttp.address() as AddressInfo).port;
    const echoPort = (lazyEcho.address() as AddressInfo).port;
    const client: PolicyWatchClient = {
      watchPort: (workload, port, handlers) => {
        watchCalls.push(port);
        // The controller never answers for HUNG: the stream stays open and silent.
        if (port === HUNG) return () => {};
        if (port !== GATED) return policyClient.watchPort(workload, port, handlers);
        let cancel: (() => void) | undefined;
        let cancelled = false;
        openGate = () => {
          if (!cancelled) cancel = policyClient.watchPort(workload, port, handlers);
        };
        return () => {
          cancelled = true;
          cancel?.();
        };
      },
    };
    const watcher = new PolicyWatcher({
      client,
      workload: WORKLOAD,
      ports: [8080],
      backoff: { minMs: 10, maxMs: 50 },
      discoveryTimeoutMs: DISCOVERY_MS,
      ...extra,
    });
    const proxy = new InboundProxy({
      identity: side.serverCert.identity,
      tls: new MeshTlsContext(side.serverCert, side.mesh.anchorsPem),
      policies: watcher,
      appHost: HOST,
      appPortOf: (p) => (p === HTTP_DEFAULT || p === IDLE || p === 8080 ? httpPort : echoPort),
      listen: { host: HOST, meshPort: 0, appPorts: [] },
      detectTimeoutMs: 1000,
      originalDst,
      ...(isProxyPort !== undefined ? { isProxyPort } : {}),
      ...proxyOpts,
    });
    started.push({ proxy, watcher });
    const meshPort = (await proxy.start()).meshPort;
    await within(watcher.ready(), WAIT_MS, 'the declared port’s policy');
    return { proxy, watcher, meshPort };
  }

  let lazy: { proxy: InboundProxy; watcher: PolicyWatcher; meshPort: number };

  before(async () => {
    const detectAll: ProxyProtocol = { kind: 'detect', timeoutMs: 1000, httpRoutes: [DEFAULT_HTTP_ROUTE] };
    discovery.add('emojivoto', 'web-0', 8080, server('web', { kind: 'http1', routes: [DEFAULT_HTTP_ROUTE] }, [unauthenticated('all', onlyAllowed)]));
    discovery.add(
      'emojivoto',
      'web-0',
      HTTP_DEFAULT,
      defaultServer('cluster-unauthenticated', detectAll, [unauthenticated('cluster-unauthenticated', onlyAllowed)]),
    );
    discovery.add('emojivoto', 'web-0', DENY_DEFAULT, defaultServer('deny', { kind: 'opaque' }, []));
    for (const port of [OPEN_TCP, GATED]) {
      discovery.add(
        'emojivoto',
        'web-0',
        port,
        defaultServer('all-unauthenticated', { kind: 'opaque' }, [unauthenticated('all-unauthenticated', ALL_NETWORKS)]),
      );
    }
    idleCell = discovery.add(
      'emojivoto',
      'web-0',
      IDLE,
      defaultServer('all-unauthenticated', detectAll, [unauthenticated('all-unauthenticated', ALL_NETWORKS)]),
    );
    grpc = await startGrpcServer({ host: HOST, port: 0, services: [inboundPolicyService(discovery)] });
    policyClient = new InboundPolicyClient({ address: `${HOST}:${grpc.port}`, dedicatedConnection: true });
    lazyHttp = createHttpServer((req, res) => {
      lazySeen.push(`${req.url} ${req.headers['l5d-client-id'] ?? '-'}`);
      res.end(`lazy app ${req.url}`);
    });
    lazyEcho = createNetServer((s) => {
      appConnections++;
      s.on('error', () => {});
      s.pipe(s);
    });
    await Promise.all([listen(lazyHttp), listen(lazyEcho)]);
    lazy = await startLazy();
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    for (const { proxy, watcher } of started) {
      watcher.stop();
      await proxy.close();
    }
    policyClient?.close();
    await grpc?.close(0);
    lazyHttp?.closeAllConnections();
    await Promise.all([new Promise((r) => lazyHttp?.close(r)), new Promise((r) => lazyEcho?.close(r))]);
  });

  it('serves a redirected connection to an undeclared port with the policy the controller gives it: allowed → the app, denied → 403', async () => {
    assert.equal(lazy.watcher.current(HTTP_DEFAULT), undefined, 'not watched before the first connection');
    const ok = await exchange(await connectAs(lazy.meshPort, ALLOWED, redirectTo('10.0.0.5', HTTP_DEFAULT)), get('/lazy'));
    assert.match(ok, /^HTTP\/1\.1 200 [\s\S]*lazy app \/lazy$/);
    assert.deepEqual(lazy.watcher.discoveredPorts, [HTTP_DEFAULT]);
    const before = lazySeen.length;
    const denied = await exchange(await connectAs(lazy.meshPort, STRANGER, redirectTo('10.0.0.5', HTTP_DEFAULT)), get('/denied'));
    assert.match(denied, /^HTTP\/1\.1 403 /);
    assert.equal(lazySeen.length, before, 'the denied request never reached the app');
    assert.equal(watchCalls.filter((p) => p === HTTP_DEFAULT).length, 1, 'one stream for the port');
    assert.equal(lazy.watcher.isReady(), true);
  });

  it('applies a discovered port’s policy to the port a transport header names', async () => {
    next = redirectTo('10.0.0.5', lazy.meshPort);
    const t = await meshedDirect(lazy.meshPort, ALLOWED, { port: HTTP_DEFAULT, sessionProtocol: 'http1' });
    assert.match(await exchange(t, get('/header')), /^HTTP\/1\.1 200 [\s\S]*lazy app \/header$/);
    assert.equal(lazySeen.at(-1), `/header ${side.clientCert.identity}`);
  });

  it('denies on an undeclared port under a deny default: closed without a byte, the app never sees it', async () => {
    const before = appConnections;
    const deniedBefore = lazy.proxy.stats().tcpAuthzDeny;
    assert.equal(await exchange(await connectAs(lazy.meshPort, ALLOWED, redirectTo('10.0.0.5', DENY_DEFAULT)), 'ping'), '');
    assert.equal(lazy.proxy.stats().tcpAuthzDeny - deniedBefore, 1);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(appConnections, before);
  });

  it("never discovers the proxy's own ports: redirected there or named by a transport header, the connection is closed before any policy stream", async () => {
    // Were it discovered, the controller's open default would admit it and the proxy would forward
    // it to appHost:4140 — in a pod, its own outbound listener, with the pod's identity behind it.
    const OUTBOUND_PORT = 4140;
    discovery.add(
      'emojivoto',
      'web-0',
      OUTBOUND_PORT,
      defaultServer('all-unauthenticated', { kind: 'opaque' }, [unauthenticated('all-unauthenticated', ALL_NETWORKS)]),
    );
    const guarded = await startLazy({}, (port) => port === OUTBOUND_PORT);
    const before = appConnections;
    const errorsBefore = guarded.proxy.stats().tcpErrors['proxy port'] ?? 0;
    assert.equal(await exchange(await connectAs(guarded.meshPort, ALLOWED, redirectTo('10.0.0.5', OUTBOUND_PORT)), 'ping'), '');
    for (const port of [OUTBOUND_PORT, guarded.meshPort]) {
      next = redirectTo('10.0.0.5', guarded.meshPort);
      const t = await meshedDirect(guarded.meshPort, ALLOWED, { port });
      assert.equal(await exchange(t, 'ping'), '', `transport header naming ${port}`);
    }
    assert.equal((guarded.proxy.stats().tcpErrors['proxy port'] ?? 0) - errorsBefore, 3);
    assert.deepEqual(
      watchCalls.filter((p) => p === OUTBOUND_PORT || p === guarded.meshPort),
      [],
      'no policy stream for a proxy port',
    );
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(appConnections, before);
  });

  it('forwards an undeclared port to the pod address the connection arrived on, never to the host its original destination names', async () => {
    // A packet for ELSEWHERE:port (another pod, the cloud metadata service, 127.0.0.1) sent to
    // the pod's interface (same L2 segment, a route via the pod) is redirected like any other:
    // SO_ORIGINAL_DST names ELSEWHERE, while the connection arrived on the pod's own address.
    const ELSEWHERE = '127.0.0.4';
    let reached = 0;
    const elsewhere = createNetServer((s) => {
      reached++;
      s.on('error', () => {});
      s.pipe(s);
    });
    elsewhere.listen(0, ELSEWHERE);
    await once(elsewhere, 'listening');
    try {
      const port = (elsewhere.address() as AddressInfo).port;
      discovery.add(
        'emojivoto',
        'web-0',
        port,
        defaultServer('all-unauthenticated', { kind: 'opaque' }, [unauthenticated('all-unauthenticated', ALL_NETWORKS)]),
      );
      // Wired as main wires transparent mode: an undeclared port goes to the pod address.
      const relay = await startLazy({}, undefined, { appHostOf: (_port, podIp) => podIp ?? HOST, appPortOf: (p) => p });
      /** Writes, and resolves once the proxy closed the connection or something came back. */
      const attempt = async (c: Client): Promise<string> => {
        if (!c.socket.destroyed) c.socket.write('ping');
        await waitFor(() => c.socket.destroyed || c.received() !== '', 'the connection to close or answer', WAIT_MS);
        c.socket.destroy();
        return c.received();
      };
      // Redirected: an unauthenticated stranger.
      assert.equal(await attempt(await connectAs(relay.meshPort, STRANGER, redirectTo(ELSEWHERE, port))), '');
      // Direct, headed for ELSEWHERE:4143: any mesh identity, the transport header naming the port.
      next = redirectTo(ELSEWHERE, relay.meshPort);
      const t = await meshedDirect(relay.meshPort, STRANGER, { port });
      assert.equal(await attempt(t), '');
      assert.equal(reached, 0, 'the proxy never connected to another host');
    } finally {
      await new Promise((r) => elsewhere.close(r));
    }
  });

  it('holds first connections until the policy arrives, sharing one discovery, with no byte lost or forwarded early', async () => {
    const before = appConnections;
    const a = await connectAs(lazy.meshPort, STRANGER, redirectTo('10.0.0.5', GATED));
    a.socket.write('early');
    const b = await connectAs(lazy.meshPort, STRANGER, redirectTo('10.0.0.5', GATED));
    await waitFor(() => lazy.proxy.stats().open === 2, 'both connections accepted');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(appConnections, before, 'nothing forwarded without a policy');
    assert.equal(a.received(), '');
    assert.equal(watchCalls.filter((p) => p === GATED).length, 1, 'one stream for both connections');
    openGate?.();
    await waitFor(() => a.received() === 'early', 'the bytes written while waiting, echoed', WAIT_MS);
    await echoes(b, 'second');
    assert.equal(appConnections - before, 2);
    a.socket.destroy();
    b.socket.destroy();
  });

  it('closes a connection after the discovery bound when the controller never answers; the app never sees it', async () => {
    const before = appConnections;
    const errorsBefore = lazy.proxy.stats().tcpErrors['policy discovery timeout'] ?? 0;
    const startedAt = Date.now();
    const c = await connectAs(lazy.meshPort, ALLOWED, redirectTo('10.0.0.5', HUNG));
    assert.equal(await exchange(c, 'hello?'), '');
    const waited = Date.now() - startedAt;
    assert.ok(waited >= DISCOVERY_MS - 20, `closed only after the bound (${waited} ms)`);
    assert.equal((lazy.proxy.stats().tcpErrors['policy discovery timeout'] ?? 0) - errorsBefore, 1);
    assert.equal(appConnections, before);
    assert.equal(lazy.watcher.isReady(), true, 'readiness depends on the declared ports only');
  });

  it('keeps a discovered port while a connection uses it (requests and updates still see its policy), and drops it once idle', async () => {
    const IDLE_MS = 60;
    const short = await startLazy({ discoveryIdleMs: IDLE_MS });
    const c = await connectAs(short.meshPort, STRANGER, redirectTo('10.0.0.5', IDLE));
    /** One keep-alive request; resolves with the status code once the whole response is in. */
    const request = async (path: string): Promise<string> => {
      const before = c.received().length;
      c.socket.write(`GET ${path} HTTP/1.1\r\nHost: web\r\n\r\n`);
      const response = () => c.received().slice(before);
      const isComplete = (r: string): boolean => {
        const head = r.indexOf('\r\n\r\n');
        const length = /content-length: (\d+)/i.exec(r)?.[1];
        return head !== -1 && length !== undefined && r.length - (head + 4) >= Number(length);
      };
      await waitFor(() => isComplete(response()), `the response to ${path}`, WAIT_MS);
      return response().split(' ')[1] ?? '';
    };
    assert.equal(await request('/one'), '200');
    await new Promise((r) => setTimeout(r, IDLE_MS * 5));
    assert.deepEqual(short.watcher.discoveredPorts, [IDLE], 'in use: not dropped');
    assert.equal(await request('/two'), '200', 'the open connection still finds the policy');
    // An update from the controller still reaches the port.
    idleCell.publish(defaultServer('deny', { kind: 'detect', timeoutMs: 1000, httpRoutes: [DEFAULT_HTTP_ROUTE] }, []));
    await waitFor(() => short.watcher.current(IDLE)?.server.meta.name === 'deny', 'the update');
    assert.equal(await request('/three'), '403');
    c.socket.destroy();
    // Nothing uses the port any more: after the idle period its stream is cancelled on the controller too.
    await waitFor(() => short.watcher.discoveredPorts.length === 0, 'the idle port to be dropped', WAIT_MS);
    await waitFor(() => idleCell.listeners.size === 0, 'the controller-side stream to end', WAIT_MS);
    assert.equal(short.watcher.current(IDLE), undefined);
    // The next connection discovers it again.
    assert.match(await exchange(await connectAs(short.meshPort, STRANGER, redirectTo('10.0.0.5', IDLE)), get('/again')), /^HTTP\/1\.1 403 /);
    assert.equal(watchCalls.filter((p) => p === IDLE).length, 2, 'a second stream for the second discovery');
  });

  it('fails closed on new undeclared ports beyond the cap, while discovered ones keep working', async () => {
    const capped = await startLazy({ maxDiscoveredPorts: 1 });
    const first = await connectAs(capped.meshPort, STRANGER, redirectTo('10.0.0.5', OPEN_TCP));
    await echoes(first, 'within the cap');
    const before = lazySeen.length;
    const refused = await connectAs(capped.meshPort, ALLOWED, redirectTo('10.0.0.5', HTTP_DEFAULT));
    assert.equal(await exchange(refused, get('/over')), '');
    assert.equal(capped.proxy.stats().tcpErrors['policy discovery limit'], 1);
    assert.equal(lazySeen.length, before);
    assert.deepEqual(capped.watcher.discoveredPorts, [OPEN_TCP]);
    const again = await connectAs(capped.meshPort, STRANGER, redirectTo('10.0.0.5', OPEN_TCP));
    await echoes(again, 'still served');
    first.socket.destroy();
    again.socket.destroy();
  });
});
