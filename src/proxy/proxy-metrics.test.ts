/**
 * Request/response and transport metrics and route filters through a live InboundProxy, read
 * back from the admin server's `/metrics`: an HTTP/1 application (200 on most paths, 500 on
 * `/fail`), a gRPC application (`grpc-status` 13 in the trailers for `Fail`), a TCP echo behind
 * an opaque port reached through the mesh port, and an outbound connection through the
 * connector. Clients connect from 127.0.0.2 so that the proxy-added `default:localhost` does not
 * admit them; the admin server is read from 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer as createHttpServer, type Server as HttpServer, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { createServer as createHttp2Server, type IncomingHttpHeaders as Http2Headers, type Http2Server, connect as http2Connect } from 'node:http2';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer, connect as netConnect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { type TLSSocket, connect as tlsConnect } from 'node:tls';
import type { DestinationEndpoint } from '../api/index.js';
import type { Authorization, GrpcRoute, HttpRoute, InboundServer, Network, ProxyProtocol, RouteFilter } from '../core/index.js';
import type { WorkloadCertificate } from '../identity/index.js';
import { AdminServer } from './admin-server.js';
import { InboundProxy } from './inbound/proxy.js';
import { MetricsRegistry } from './metrics/cells.js';
import { InboundMetrics } from './metrics/inbound.js';
import { OutboundConnector } from './outbound/connector.js';
import type { OutboundTarget } from './outbound/resolver.js';
import { mkTestMesh, TempDirs, type TestMesh, waitFor, within } from './testing/identity.js';
import { FakePolicies } from './testing/policies.js';
import { MeshTlsContext, TRANSPORT_HEADER_ALPN } from './tls/context.js';
import { encodeTransportHeader } from './transport/transport-header.js';

const HOST = '127.0.0.1';
const FROM = '127.0.0.2';
const WAIT_MS = 5000;

// === policies ===

const ALL: readonly Network[] = [
  { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
  { net: { ip: '::', prefixLen: 0 }, except: [] },
];
const authz = (name: string, authentication: Authorization['authentication']): Authorization => ({
  meta: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name },
  networks: ALL,
  authentication,
});
const anyone = authz('anyone', { kind: 'unauthenticated' });

function route(name: string, path: string, authorizations: Authorization[], filters: RouteFilter[] = []): HttpRoute {
  return {
    meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name },
    hosts: [],
    authorizations,
    rules: [{ matches: [{ path: { kind: 'prefix', value: path }, headers: [], queryParams: [] }], filters }],
  };
}

function server(name: string, protocol: ProxyProtocol, authorizations: Authorization[] = []): InboundServer {
  return { meta: { group: 'policy.linkerd.io', kind: 'server', name }, protocol, authorizations };
}

function webServer(meshOnly: Authorization): InboundServer {
  return server('web-http', {
    kind: 'http1',
    routes: [
      route('web', '/', [anyone]),
      // No authorization of its own and none on the server: 403 for everyone but localhost.
      route('secret', '/secret', []),
      route(
        'headers',
        '/headers',
        [anyone],
        [
          {
            kind: 'requestHeaderModifier',
            add: [{ name: 'X-Added', value: 'by-route' }],
            set: [{ name: 'X-Set', value: 'new' }],
            remove: ['X-Drop'],
          },
        ],
      ),
      route('redirect', '/old', [anyone], [{ kind: 'requestRedirect', path: { kind: 'prefix', value: '/new' } }]),
      route('redirect-private', '/private', [meshOnly], [{ kind: 'requestRedirect', host: 'elsewhere.example' }]),
      route('inject', '/inject', [anyone], [{ kind: 'failureInjector', status: 503, message: 'injected by policy', ratio: { numerator: 1, denominator: 1 } }]),
    ],
  });
}

const grpcRoute: GrpcRoute = {
  meta: { group: 'gateway.networking.k8s.io', kind: 'GRPCRoute', name: 'echo' },
  hosts: [],
  authorizations: [anyone],
  rules: [{ matches: [{ rpc: { service: 'test.Echo' }, headers: [] }], filters: [] }],
};

// === the applications ===

interface Seen {
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
}
const seen: Seen[] = [];

function startApp1(): HttpServer {
  return createHttpServer((req, res) => {
    seen.push({ path: req.url ?? '', headers: req.headers });
    req.resume();
    req.on('end', () => {
      res.writeHead(req.url === '/fail' ? 500 : 200, { 'content-type': 'text/plain' });
      res.end('app');
    });
  }).listen(0, HOST);
}

function startApp2(): Http2Server {
  const s = createHttp2Server();
  s.on('stream', (stream, headers: Http2Headers) => {
    stream.on('error', () => {});
    seen.push({ path: String(headers[':path']), headers: {} });
    stream.resume();
    stream.on('end', () => {
      if (headers[':path'] === '/test.Echo/Unavailable') {
        // A trailers-only answer: the status is in the only header block, which ends the stream.
        stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '14' }, { endStream: true });
        return;
      }
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': headers[':path'] === '/test.Echo/Fail' ? '13' : '0' }));
      stream.end();
    });
  });
  return s.listen(0, HOST);
}

// === clients ===

interface Reply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
}

function get(port: number, path: string, headers: Record<string, string> = {}, from = FROM): Promise<Reply> {
  const p = new Promise<Reply>((resolve, reject) => {
    const req = httpRequest({ host: HOST, port, path, localAddress: from, agent: false, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
  return within(p, WAIT_MS, `GET ${path}`);
}

function grpcCall(port: number, method: string): Promise<{ status: string; grpcStatus: string }> {
  const session = http2Connect(`http://${HOST}:${port}`, { createConnection: () => netConnect({ host: HOST, port, localAddress: FROM }) });
  session.on('error', () => {});
  const p = new Promise<{ status: string; grpcStatus: string }>((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': `/test.Echo/${method}`, 'content-type': 'application/grpc', te: 'trailers' });
    let status = '';
    let grpcStatus = '';
    stream.on('response', (h: Http2Headers) => {
      status = String(h[':status']);
      // Trailers-only: the status comes with the headers.
      if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
    });
    stream.on('trailers', (t: Http2Headers) => {
      grpcStatus = String(t['grpc-status']);
    });
    stream.on('error', reject);
    stream.resume();
    stream.on('close', () => {
      session.close();
      resolve({ status, grpcStatus });
    });
    stream.end(Buffer.from([0, 0, 0, 0, 0]));
  });
  return within(p, WAIT_MS, `gRPC ${method}`);
}

/** Writes `data` on a connected stream, waits for it echoed back, ends it and waits for the close. */
async function echoOnce(s: Socket, data: string): Promise<string> {
  let got = '';
  s.setEncoding('latin1');
  s.on('data', (c: string) => {
    got += c;
    if (got.length >= data.length) s.end();
  });
  const closed = once(s, 'close');
  s.write(data);
  await within(closed, WAIT_MS, 'the echo connection to close');
  return got;
}

// === suite ===

const dirs = new TempDirs();
let mesh: TestMesh;
let proxyCert: WorkloadCertificate;
let clientCert: WorkloadCertificate;
let app1: HttpServer;
let app2: Http2Server;
let echo: NetServer;
let registry: MetricsRegistry;
let proxy: InboundProxy;
let admin: AdminServer;
let connector: OutboundConnector;
let webPort: number;
let grpcPort: number;
let tcpPort: number;
let meshPort: number;
let adminPort: number;

const portOf = (s: { address(): AddressInfo | string | null }) => (s.address() as AddressInfo).port;

/** The sample lines of `name` in the admin server's `/metrics` (read from 127.0.0.1). */
async function scrape(name: string): Promise<string[]> {
  const text = await new Promise<string>((resolve, reject) => {
    const req = httpRequest({ host: HOST, port: adminPort, path: '/metrics', agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
  return text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
}

/** Scrapes until `name` has a sample line for which `ok` holds (exchanges are counted when they end). */
async function eventually(name: string, ok: (lines: string[]) => boolean): Promise<string[]> {
  let lines: string[] = [];
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    lines = await scrape(name);
    if (ok(lines) || Date.now() > deadline) return lines;
    await new Promise((r) => setTimeout(r, 20));
  }
}

const target = (port: number) => `target_addr="${HOST}:${port}",target_ip="${HOST}",target_port="${port}"`;
const srv = (name: string, port: number) => `srv_group="policy.linkerd.io",srv_kind="server",srv_name="${name}",srv_port="${port}"`;
const PLAIN = 'tls="no_identity",no_tls_reason="no_tls_from_remote"';
const ANYONE = 'authz_group="policy.linkerd.io",authz_kind="authorizationpolicy",authz_name="anyone"';
const httpRouteLabels = (name: string) => `route_group="policy.linkerd.io",route_kind="HTTPRoute",route_name="${name}"`;
/** The request/response labels of a permitted request on the web port from the plaintext client. */
const webLabels = (routeName: string) => `direction="inbound",${target(webPort)},${PLAIN},${srv('web-http', webPort)},${httpRouteLabels(routeName)},${ANYONE}`;

before(async () => {
  mesh = await mkTestMesh(dirs);
  [proxyCert, clientCert] = await Promise.all([mesh.issue('emojivoto', 'web'), mesh.issue('emojivoto', 'vote-bot')]);
  app1 = startApp1();
  app2 = startApp2();
  echo = createNetServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    s.pipe(s);
  }).listen(0, HOST);
  await Promise.all([once(app1, 'listening'), once(app2, 'listening'), once(echo, 'listening')]);

  registry = new MetricsRegistry();
  const metrics = new InboundMetrics({ registry, targetIp: HOST });
  const policies = new FakePolicies();
  proxy = new InboundProxy({
    identity: proxyCert.identity,
    tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
    policies,
    appHost: HOST,
    appPortOf: (p) => (p === grpcPort ? portOf(app2) : p === tcpPort ? portOf(echo) : portOf(app1)),
    listen: { host: HOST, meshPort: 0, appPorts: [0, 0, 0] },
    detectTimeoutMs: 2000,
    metrics: metrics.hooks,
  });
  const bound = await proxy.start();
  meshPort = bound.meshPort;
  [webPort, grpcPort, tcpPort] = bound.appPorts as [number, number, number];
  policies.set(webPort, webServer(authz('mesh-only', { kind: 'tlsAuthenticated', identities: [clientCert.identity], suffixes: [] })));
  policies.set(grpcPort, server('echo-grpc', { kind: 'grpc', routes: [grpcRoute] }));
  policies.set(tcpPort, server('web-tcp', { kind: 'opaque' }, [authz('meshed', { kind: 'tlsUnauthenticated' })]));

  admin = new AdminServer({
    host: HOST,
    port: 0,
    policies: { current: () => undefined },
    isReady: () => true,
    registry,
    debugPolicies: () => ({}),
    metrics: metrics.hooks,
  });
  adminPort = await admin.start();

  connector = new OutboundConnector({
    tls: { certificate: clientCert, anchorsPem: mesh.anchorsPem },
    meshPortOf: () => meshPort,
    localAddress: FROM,
    onConnection: (socket, endpoint) => metrics.transport.trackOutbound(socket, endpoint, WEB_TARGET),
  });
});

const WEB_TARGET: OutboundTarget = { kind: 'name', host: 'web.emojivoto.svc.cluster.local', port: 9000, path: 'web.emojivoto.svc.cluster.local:9000' };

after(async () => {
  connector?.close();
  await admin?.close();
  await proxy?.close();
  app1?.closeAllConnections();
  await Promise.all([app1, app2, echo].map((s) => new Promise<void>((resolve) => (s === undefined ? resolve() : s.close(() => resolve())))));
  dirs.cleanup();
});

describe('request and response metrics through a live proxy', () => {
  it('counts permitted requests by outcome; a policy 403 is only an authorization denial', async () => {
    assert.equal((await get(webPort, '/ok')).status, 200);
    assert.equal((await get(webPort, '/fail')).status, 500);
    assert.equal((await get(webPort, '/secret/x')).status, 403);
    assert.deepEqual(await grpcCall(grpcPort, 'Fail'), { status: '200', grpcStatus: '13' });
    assert.deepEqual(await grpcCall(grpcPort, 'Unavailable'), { status: '200', grpcStatus: '14' });

    const web = webLabels('web');
    assert.deepEqual(await scrape('request_total').then((l) => l.filter((x) => x.includes('route_name="web"') || x.includes('route_name="secret"'))), [
      `request_total{${web}} 2`,
    ]);
    const responses = await eventually('response_total', (l) => l.filter((x) => x.includes('route_name="echo"')).length === 2);
    const grpc = `direction="inbound",${target(grpcPort)},${PLAIN},${srv('echo-grpc', grpcPort)},route_group="gateway.networking.k8s.io",route_kind="GRPCRoute",route_name="echo",${ANYONE}`;
    assert.deepEqual(
      responses.filter((x) => /route_name="(web|secret|echo)"/.test(x)),
      [
        `response_total{${web},status_code="200",classification="success",grpc_status="",error=""} 1`,
        `response_total{${web},status_code="500",classification="failure",grpc_status="",error=""} 1`,
        `response_total{${grpc},status_code="200",classification="failure",grpc_status="13",error=""} 1`,
        `response_total{${grpc},status_code="200",classification="failure",grpc_status="14",error=""} 1`,
      ],
    );
    assert.deepEqual(await scrape('inbound_http_authz_deny_total'), [
      `inbound_http_authz_deny_total{${target(webPort)},${srv('web-http', webPort)},${PLAIN},${httpRouteLabels('secret')}} 1`,
    ]);
    const latency = await scrape('response_latency_ms_count');
    assert.ok(latency.includes(`response_latency_ms_count{${web},status_code="200"} 1`), latency.join('\n'));
    assert.ok(latency.includes(`response_latency_ms_count{${grpc},status_code="200"} 2`), latency.join('\n'));
    assert.ok(!latency.some((l) => l.includes('route_name="secret"')));
  });
});

describe('route filters through a live proxy', () => {
  it('modifies the request headers the application sees', async () => {
    seen.length = 0;
    const r = await get(webPort, '/headers/a', { 'X-Set': 'old', 'X-Drop': 'please', 'X-Keep': 'yes' });
    assert.equal(r.status, 200);
    assert.equal(seen.length, 1);
    const h = seen[0]?.headers ?? {};
    assert.equal(h['x-added'], 'by-route');
    assert.equal(h['x-set'], 'new');
    assert.equal(h['x-drop'], undefined);
    assert.equal(h['x-keep'], 'yes');
  });

  it('answers a redirect without reaching the application', async () => {
    seen.length = 0;
    const r = await get(webPort, '/old/page?x=1', { host: 'web.local:8080' });
    assert.equal(r.status, 302);
    assert.equal(r.headers.location, 'http://web.local:8080/new/page?x=1');
    assert.equal(r.headers['content-length'], '0');
    assert.deepEqual(seen, []);
    const lines = await eventually('response_total', (l) => l.some((x) => x.includes('route_name="redirect"')));
    assert.ok(
      lines.includes(`response_total{${webLabels('redirect')},status_code="302",classification="success",grpc_status="",error=""} 1`),
      lines.join('\n'),
    );
  });

  it('injects a failure for every request at ratio 1/1', async () => {
    seen.length = 0;
    for (let i = 0; i < 3; i++) {
      const r = await get(webPort, `/inject/${i}`);
      assert.equal(r.status, 503);
      // The message is for meshed clients only, like every proxy-made response.
      assert.equal(r.headers['l5d-proxy-error'], undefined);
    }
    assert.deepEqual(seen, []);
    const lines = await eventually('response_total', (l) => l.some((x) => x.includes('route_name="inject"') && x.endsWith(' 3')));
    assert.ok(lines.includes(`response_total{${webLabels('inject')},status_code="503",classification="failure",grpc_status="",error=""} 3`), lines.join('\n'));
    assert.deepEqual(await scrape('inbound_http_errors_total'), [], 'an injected failure is not a proxy error');
  });

  it('gives a denied request its 403, not the route redirect', async () => {
    seen.length = 0;
    const r = await get(webPort, '/private/x', { host: 'web.local' });
    assert.equal(r.status, 403);
    assert.equal(r.headers.location, undefined);
    assert.deepEqual(seen, []);
    const denials = await scrape('inbound_http_authz_deny_total');
    assert.ok(denials.some((l) => l.includes('route_name="redirect-private"') && l.endsWith(' 1')));
    assert.ok(!(await scrape('response_total')).some((l) => l.includes('route_name="redirect-private"')));
    assert.ok(!(await scrape('request_total')).some((l) => l.includes('route_name="redirect-private"')));
  });
});

describe('transport metrics through a live proxy', () => {
  it('counts an opaque connection from a meshed client with its TLS labels, from open to close', async () => {
    const t: TLSSocket = tlsConnect({
      ...new MeshTlsContext(clientCert, mesh.anchorsPem).clientOptions(proxyCert.identity, [TRANSPORT_HEADER_ALPN]),
      socket: netConnect({ host: HOST, port: meshPort, localAddress: FROM }),
    });
    t.on('error', () => {});
    await within(once(t, 'secureConnect'), WAIT_MS, 'the mesh handshake');
    t.write(encodeTransportHeader({ port: tcpPort }));
    assert.equal(await echoOnce(t, 'ping'), 'ping');

    const labels = `direction="inbound",peer="src",${target(tcpPort)},tls="true",client_id="${clientCert.identity}",${srv('web-tcp', tcpPort)}`;
    const closes = await eventually('tcp_close_total', (l) => l.some((x) => x.includes(`client_id="${clientCert.identity}"`)));
    assert.deepEqual(
      closes.filter((l) => l.includes('srv_name="web-tcp"')),
      [`tcp_close_total{${labels},errno=""} 1`],
    );
    assert.deepEqual(
      (await scrape('tcp_open_total')).filter((l) => l.includes('srv_name="web-tcp"')),
      [`tcp_open_total{${labels}} 1`],
    );
    assert.deepEqual(
      (await scrape('tcp_open_connections')).filter((l) => l.includes('srv_name="web-tcp"')),
      [`tcp_open_connections{${labels}} 0`],
    );
    assert.deepEqual(
      (await scrape('tcp_connection_duration_ms_count')).filter((l) => l.includes('srv_name="web-tcp"')),
      [`tcp_connection_duration_ms_count{${labels},errno=""} 1`],
    );
    const read = (await scrape('tcp_read_bytes_total')).find((l) => l.startsWith(`tcp_read_bytes_total{${labels}}`));
    assert.ok(read !== undefined && Number(read.split(' ').at(-1)) > 4, `mesh TLS bytes are counted: ${read}`);
    assert.ok(
      (await scrape('inbound_tcp_authz_allow_total')).some((l) => l.includes(`client_id="${clientCert.identity}"`) && l.includes('authz_name="meshed"')),
    );
  });

  it('counts a plaintext connection to the opaque port, which policy refuses, as opened and closed', async () => {
    const s = netConnect({ host: HOST, port: tcpPort, localAddress: FROM });
    // The proxy resets it: `once` would reject on the client's ECONNRESET.
    s.on('error', () => {});
    await within(new Promise((resolve) => s.once('close', resolve)), WAIT_MS, 'the refused connection to close');
    const labels = `direction="inbound",peer="src",${target(tcpPort)},tls="no_identity",no_tls_reason="port_skipped",${srv('web-tcp', tcpPort)}`;
    const closes = await eventually('tcp_close_total', (l) => l.some((x) => x.includes('port_skipped')));
    assert.deepEqual(
      closes.filter((l) => l.includes('port_skipped')),
      [`tcp_close_total{${labels},errno=""} 1`],
    );
    assert.deepEqual(await scrape('inbound_tcp_authz_deny_total'), [
      `inbound_tcp_authz_deny_total{${target(tcpPort)},${srv('web-tcp', tcpPort)},tls="no_identity",no_tls_reason="port_skipped"} 1`,
    ]);
  });

  it('labels outbound connections with the authority, the endpoint, its identity and its dst_* labels', async () => {
    const endpoint: DestinationEndpoint = {
      ip: HOST,
      port: tcpPort,
      weight: 10_000,
      labels: { namespace: 'emojivoto', pod: 'web-0', serviceaccount: 'web', deployment: 'web' },
      identity: proxyCert.identity,
      serverName: proxyCert.identity,
      protocolHint: 'opaque',
    };
    const link = await connector.open(endpoint);
    link.start('opaque');
    assert.equal(await echoOnce(link.socket, 'pong'), 'pong');
    const labels =
      `direction="outbound",peer="dst",authority="web.emojivoto.svc.cluster.local:9000",${target(tcpPort)},tls="true",server_id="${proxyCert.identity}",` +
      'dst_service="web",dst_namespace="emojivoto",dst_pod="web-0",dst_serviceaccount="web",dst_deployment="web"';
    await waitFor(() => link.socket.closed, 'the outbound socket to close', WAIT_MS);
    assert.deepEqual(
      (await scrape('tcp_open_total')).filter((l) => l.includes('direction="outbound"')),
      [`tcp_open_total{${labels}} 1`],
    );
    assert.deepEqual(
      (await scrape('tcp_close_total')).filter((l) => l.includes('direction="outbound"')),
      [`tcp_close_total{${labels},errno=""} 1`],
    );
  });
});
