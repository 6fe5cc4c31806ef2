/**
 * The proxy issue's "done means", on the wire: a real `ward controller` on a manifests directory
 * and two real `ward proxy` processes, each pod on its own loopback address — the client pod
 * demo/client-0 (127.0.2.1: outbound forward proxy, mesh, admin) and the server pod
 * demo/server-0 (127.0.3.1: inbound ports, mesh, admin). The server's applications run in this
 * test process on the pod's private address 127.0.3.2, where only its proxy forwards to: an
 * HTTP/1 app (pod ports 8080 and 8082), a gRPC app (node:http2 with hand-made gRPC framing, pod
 * port 8081) and two TCP echo apps (opaque pod ports 9000 and 9001). The test plays the client
 * application, through the client proxy's outbound port: absolute-form HTTP/1, and CONNECT
 * tunnels carrying HTTP/1, h2c gRPC or opaque bytes; and an unmeshed caller from 127.0.0.1
 * straight to the server pod's ports.
 *
 * The client proxy reaches the server proxy's mesh port through a wire tap (a TCP relay in this
 * process at 127.0.3.1, given to the client proxy by `--mesh-port-override`; it connects on from
 * the client pod's address, so the server proxy still sees 127.0.2.1): every byte between the two
 * proxies is recorded, and the tests assert that it is mesh TLS to the server's identity and that
 * no request, header or body crosses in plaintext.
 *
 * Policy (POLICY-SEMANTICS §3, §4): 8080 `HTTP/1` with HTTPRoutes `api` (/api, admits the client
 * identity) and `admin` (/admin, no authorization); 8081 `gRPC` with GRPCRoutes `echo-say`
 * (test.Echo/Say, admits the client) and `echo-secret` (test.Echo/Secret, no authorization); 8082
 * `HTTP/1` with `accessPolicy: audit` and an AuthorizationPolicy only for a `nobody` identity;
 * 9000 `opaque` admitting the client; 9001 `opaque` admitting no one. The proxy-added
 * `default:localhost` is narrowed to the server pod's own address (`--localhost-networks`), as in
 * local mode, so the unmeshed caller on 127.0.0.1 is not admitted by it.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import {
  Agent,
  createServer as createHttpServer,
  type Server as HttpServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
} from 'node:http';
import {
  type ClientHttp2Session,
  createServer as createHttp2Server,
  type IncomingHttpHeaders as Http2IncomingHeaders,
  type Http2Server,
  connect as http2Connect,
} from 'node:http2';
import { type AddressInfo, createServer as createTcpServer, connect as netConnect, type Socket, type Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TRANSPORT_HEADER_ALPN } from '../../src/proxy/tls/context.js';
import { sniffClientHello } from '../../src/proxy/transport/client-hello.js';
import {
  type ControllerPorts,
  controllerPorts,
  initWorkdir,
  metricSum,
  type ProxyPorts,
  proxyPorts,
  spawnController,
  type WardProcess,
  waitFor,
  wardSpawn,
  writeTokenFile,
} from './helpers.js';

const HOST = '127.0.0.1';
const CLIENT_POD = '127.0.2.1';
const SERVER_POD = '127.0.3.1';
/** The server pod's private address: its applications listen here, only its proxy forwards here. */
const SERVER_APP = '127.0.3.2';
/** Where the unmeshed caller connects from: neither pod, nor the server's `default:localhost`. */
const UNMESHED_FROM = HOST;
const WAIT_MS = 15_000;
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const CLIENT_ID = idOf('demo', 'client');
const SERVER_ID = idOf('demo', 'server');
const NOBODY_ID = idOf('demo', 'nobody');
const SVC = 'server-svc.demo.svc.cluster.local';
const SPOOFED_ID = 'spoofed.demo.serviceaccount.identity.linkerd.cluster.local';
const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

const APP_YAML = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
  annotations: {linkerd.io/inject: enabled}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: server, namespace: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: demo}
---
apiVersion: v1
kind: Pod
metadata:
  name: server-0
  namespace: demo
  labels: {app: server}
  annotations: {config.linkerd.io/opaque-ports: "9000,9001"}
spec:
  serviceAccountName: server
  containers:
  - name: app
    image: demo/server
    ports:
    - {name: http, containerPort: 8080}
    - {name: grpc, containerPort: 8081}
    - {name: audited, containerPort: 8082}
    - {name: echo, containerPort: 9000}
    - {name: locked, containerPort: 9001}
status: {podIP: ${SERVER_POD}}
---
apiVersion: v1
kind: Pod
metadata: {name: client-0, namespace: demo, labels: {app: client}}
spec:
  serviceAccountName: client
  containers: [{name: app, image: demo/client}]
status: {podIP: ${CLIENT_POD}}
---
apiVersion: v1
kind: Service
metadata: {name: server-svc, namespace: demo}
spec:
  selector: {app: server}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: grpc, port: 8081, targetPort: 8081}
  - {name: audited, port: 8082, targetPort: 8082}
  - {name: echo, port: 9000, targetPort: 9000}
  - {name: locked, port: 9001, targetPort: 9001}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: demo}
spec:
  identities: ["${CLIENT_ID}"]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: nobody, namespace: demo}
spec:
  identities: ["${NOBODY_ID}"]
`;

const server = (name: string, port: number, protocol: string, extra = '') => `---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: ${name}, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: ${port}
  proxyProtocol: ${protocol}
${extra}`;

const authorize = (name: string, target: { group: string; kind: string; name: string }, authn: string) => `---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: ${name}, namespace: demo}
spec:
  targetRef: {group: ${target.group}, kind: ${target.kind}, name: ${target.name}}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: ${authn}}
`;

const httpRoute = (name: string, prefix: string) => `---
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {name: ${name}, namespace: demo}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: server-http}]
  rules:
  - matches: [{path: {type: PathPrefix, value: ${prefix}}}]
`;

const grpcRoute = (name: string, method: string) => `---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: ${name}, namespace: demo}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: server-grpc}]
  rules:
  - matches: [{method: {type: Exact, service: test.Echo, method: ${method}}}]
`;

const HTTP_ROUTE = (name: string) => ({ group: 'policy.linkerd.io', kind: 'HTTPRoute', name });
const GRPC_ROUTE = (name: string) => ({ group: 'gateway.networking.k8s.io', kind: 'GRPCRoute', name });
const SERVER = (name: string) => ({ group: 'policy.linkerd.io', kind: 'Server', name });

/** 8080: /api admits the client identity; /admin too once `adminOpen`; any other path has no route. */
const httpPolicy = (adminOpen: boolean) =>
  server('server-http', 8080, 'HTTP/1') +
  httpRoute('api', '/api') +
  authorize('api-client', HTTP_ROUTE('api'), 'clients') +
  httpRoute('admin', '/admin') +
  (adminOpen ? authorize('admin-client', HTTP_ROUTE('admin'), 'clients') : '');

const GRPC_POLICY =
  server('server-grpc', 8081, 'gRPC') +
  grpcRoute('echo-say', 'Say') +
  authorize('echo-say-client', GRPC_ROUTE('echo-say'), 'clients') +
  grpcRoute('echo-secret', 'Secret');

/** 8082: only `nobody` is authorized; with `audit` the Server admits everyone else in audit mode. */
const auditPolicy = (audit: boolean) =>
  server('server-audit', 8082, 'HTTP/1', audit ? '  accessPolicy: audit\n' : '') + authorize('audit-nobody', SERVER('server-audit'), 'nobody');

/** 9000 admits the MeshTLSAuthentication `authn`; 9001 admits no one (a Server without authorizations). */
const tcpPolicy = (authn: string) =>
  server('server-tcp', 9000, 'opaque') + authorize('server-tcp-clients', SERVER('server-tcp'), authn) + server('server-tcp-locked', 9001, 'opaque');

// === The applications of the server pod ===

interface Seen {
  readonly path: string;
  /** Every `l5d-client-id` value the application received. */
  readonly clientIds: readonly string[];
}

/** Every value of a header in node's flat raw pairs. */
function rawValues(raw: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if ((raw[i] as string).toLowerCase() === name) out.push(raw[i + 1] as string);
  return out;
}

/** A gRPC length-prefixed message (uncompressed). */
function grpcFrame(payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** What the HTTP/1 app (8080, 8082) and the gRPC app (8081) received, in order. */
const httpSeen: Seen[] = [];
const grpcSeen: Seen[] = [];
let httpApp: HttpServer;
let grpcApp: Http2Server;
/** Echo app of 9000 and app of 9001, with the connections each accepted. */
let echoApp: TcpServer;
let lockedApp: TcpServer;
const accepted = { echo: 0, locked: 0 };
/** Every socket the TCP apps and the tap accepted or opened, destroyed in `after`. */
const sockets = new Set<Socket>();
function tracked(s: Socket): Socket {
  sockets.add(s);
  s.once('close', () => sockets.delete(s));
  return s;
}

async function startApps(): Promise<{ http: number; grpc: number; echo: number; locked: number }> {
  httpApp = createHttpServer((req, res) => {
    const seen = { path: req.url ?? '', clientIds: rawValues(req.rawHeaders, 'l5d-client-id') };
    httpSeen.push(seen);
    req.resume();
    const body = JSON.stringify(seen);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  grpcApp = createHttp2Server();
  grpcApp.on('stream', (stream, headers: Http2IncomingHeaders) => {
    stream.on('error', () => {});
    const ids = headers['l5d-client-id'];
    const seen = { path: String(headers[':path']), clientIds: ids === undefined ? [] : Array.isArray(ids) ? ids : ids.split(', ') };
    grpcSeen.push(seen);
    stream.resume();
    stream.on('end', () => {
      if (stream.destroyed) return;
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(grpcFrame(Buffer.from(JSON.stringify(seen))));
    });
  });
  grpcApp.on('sessionError', () => {});
  echoApp = createTcpServer((s) => {
    tracked(s);
    accepted.echo++;
    s.on('error', () => {});
    s.pipe(s);
  });
  lockedApp = createTcpServer((s) => {
    tracked(s);
    accepted.locked++;
    s.on('error', () => {});
    s.pipe(s);
  });
  const apps = [httpApp, grpcApp, echoApp, lockedApp];
  await Promise.all(apps.map((a) => once(a.listen(0, SERVER_APP), 'listening')));
  const [http, grpc, echo, locked] = apps.map((a) => (a.address() as AddressInfo).port) as [number, number, number, number];
  return { http, grpc, echo, locked };
}

// === The wire tap between the two proxies ===

/** One connection through the tap: the bytes each way (bounded). */
interface TappedConnection {
  fromClient: Buffer[];
  fromServer: Buffer[];
  bytes: number;
}

const TAP_MAX_BYTES_PER_CONNECTION = 1 << 20;
const tapped: TappedConnection[] = [];
let tap: TcpServer;

/** A TCP relay at `SERVER_POD:0` to the server proxy's mesh port, connecting from the client pod's address. */
async function startTap(meshPort: number): Promise<number> {
  tap = createTcpServer({ allowHalfOpen: true }, (down) => {
    const conn: TappedConnection = { fromClient: [], fromServer: [], bytes: 0 };
    tapped.push(conn);
    tracked(down);
    const up = tracked(netConnect({ host: SERVER_POD, port: meshPort, localAddress: CLIENT_POD, allowHalfOpen: true }));
    const record = (into: Buffer[]) => (c: Buffer) => {
      if (conn.bytes + c.length > TAP_MAX_BYTES_PER_CONNECTION) return;
      conn.bytes += c.length;
      into.push(c);
    };
    down.on('data', record(conn.fromClient));
    up.on('data', record(conn.fromServer));
    // A reset on one side is a reset on the other; a FIN is relayed by the pipes.
    down.on('error', () => up.resetAndDestroy());
    up.on('error', () => down.resetAndDestroy());
    const cleanly = (s: Socket) => s.readableEnded && s.writableFinished;
    down.on('close', () => {
      if (!cleanly(down)) up.destroy();
    });
    up.on('close', () => {
      if (!cleanly(up)) down.destroy();
    });
    down.pipe(up);
    up.pipe(down);
  });
  tap.listen(0, SERVER_POD);
  await once(tap, 'listening');
  return (tap.address() as AddressInfo).port;
}

// === Callers ===

interface Reply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  /** The request went out on a connection an earlier request had used. */
  readonly reused: boolean;
}

interface CallOptions {
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly headers?: OutgoingHttpHeaders;
  readonly localAddress?: string;
  readonly agent?: Agent;
}

function call(o: CallOptions): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: o.host,
        port: o.port,
        path: o.path,
        headers: o.headers ?? {},
        agent: o.agent ?? false,
        ...(o.localAddress === undefined ? {} : { localAddress: o.localAddress }),
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          body += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, reused: req.reusedSocket }));
      },
    );
    req.on('error', reject);
    req.setTimeout(WAIT_MS, () => req.destroy(new Error(`timeout on ${o.path}`)));
    req.end();
  });
}

/** An absolute-form request through the client proxy's outbound port, as an `HTTP_PROXY` client sends it. */
function viaClientProxy(url: string, headers: OutgoingHttpHeaders = {}): Promise<Reply> {
  return call({ host: CLIENT_POD, port: outboundPort(), path: url, headers });
}

/** An unmeshed plaintext request straight to the server pod's port `podPort`. */
function unmeshed(podPort: number, path: string, headers: OutgoingHttpHeaders = {}): Promise<Reply> {
  return call({ host: SERVER_POD, port: listenPort(podPort), path, headers, localAddress: UNMESHED_FROM });
}

/** A CONNECT tunnel to `authority` through the client proxy; resolves once the proxy answered 200, with no byte lost. */
async function tunnel(authority: string): Promise<Socket> {
  const s = netConnect({ host: CLIENT_POD, port: outboundPort() });
  s.on('error', () => {});
  await once(s, 'connect');
  s.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  let head = Buffer.alloc(0);
  const timeout = AbortSignal.timeout(WAIT_MS);
  for (;;) {
    const chunk = s.read() as Buffer | null;
    if (chunk === null) {
      // Paused mode (read on 'readable'), so no byte after the proxy's answer is lost to a 'data' listener.
      const event = await Promise.race([
        once(s, 'readable', { signal: timeout }).then(() => 'readable' as const),
        once(s, 'close', { signal: timeout }).then(() => 'closed' as const),
      ]).catch(() => 'timeout' as const);
      if (event !== 'readable') {
        s.destroy();
        throw new Error(`CONNECT ${authority}: ${event === 'closed' ? 'the client proxy closed the tunnel' : 'no answer'} (${head.toString('latin1')})`);
      }
      continue;
    }
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end === -1) continue;
    assert.equal(head.subarray(0, end + 4).toString('latin1'), 'HTTP/1.1 200 Connection Established\r\n\r\n');
    if (end + 4 < head.length) s.unshift(head.subarray(end + 4));
    return s;
  }
}

/** An `http.Agent` whose only connection is `socket` (a tunnel), kept alive between requests. */
function agentOver(socket: Socket): Agent {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  agent.createConnection = () => socket;
  return agent;
}

/** Everything an opaque stream gets back until it closes (or `timeoutMs`); `closed` tells which. */
async function drainUntilClosed(s: Socket, timeoutMs = WAIT_MS): Promise<{ closed: boolean; received: string }> {
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  s.resume();
  const closed =
    s.destroyed || (await Promise.race([once(s, 'close').then(() => true), new Promise<false>((r) => setTimeout(() => r(false), timeoutMs).unref())]));
  return { closed, received: Buffer.concat(chunks).toString('latin1') };
}

/** Writes `text` on an opaque stream and waits for exactly it back. */
async function echo(s: Socket, text: string): Promise<void> {
  const chunks: Buffer[] = [];
  const onData = (c: Buffer) => chunks.push(c);
  s.on('data', onData);
  s.write(text);
  try {
    await waitFor(`the echo of ${text}`, () => {
      if (s.destroyed) throw new Error(`the tunnel closed before the echo of ${text}`);
      return Buffer.concat(chunks).toString('latin1') === text ? true : undefined;
    });
  } finally {
    s.off('data', onData);
  }
}

interface GrpcReply {
  readonly headers: Http2IncomingHeaders;
  readonly trailers: Http2IncomingHeaders | undefined;
  readonly messages: Buffer;
}

/** A unary gRPC call (hand-made framing) on an h2c session. */
function grpcCall(session: ClientHttp2Session, path: string, headers: Record<string, string> = {}): Promise<GrpcReply> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers', ...headers });
    let response: Http2IncomingHeaders | undefined;
    let trailers: Http2IncomingHeaders | undefined;
    const data: Buffer[] = [];
    stream.on('response', (h) => {
      response = h;
    });
    stream.on('trailers', (t) => {
      trailers = t;
    });
    stream.on('data', (c: Buffer) => data.push(c));
    stream.on('end', () =>
      response === undefined ? reject(new Error(`no response to ${path}`)) : resolve({ headers: response, trailers, messages: Buffer.concat(data) }),
    );
    stream.on('error', reject);
    stream.on('close', () => reject(new Error(`${path}: the stream closed without a response (code ${stream.rstCode ?? '-'})`)));
    stream.setTimeout(WAIT_MS, () => stream.close());
    stream.end(grpcFrame(Buffer.from('hello')));
  });
}

async function grpcSession(): Promise<ClientHttp2Session> {
  const t = await tunnel(`${SVC}:8081`);
  const session = http2Connect(`http://${SVC}:8081`, { createConnection: () => t });
  session.on('error', () => {});
  await Promise.race([
    once(session, 'connect'),
    once(session, 'close').then(() => {
      throw new Error('the HTTP/2 session closed before it connected');
    }),
  ]);
  return session;
}

// === Proxy output ===

async function metrics(admin: string, port: number): Promise<string> {
  const res = await fetch(`http://${admin}:${port}/metrics`, { signal: AbortSignal.timeout(WAIT_MS) });
  assert.equal(res.status, 200);
  return res.text();
}

const serverMetrics = () => metrics(SERVER_POD, serverPorts.admin);
const clientMetrics = () => metrics(CLIENT_POD, clientPorts.admin);

/** The proxy's pino JSON lines (stderr; the ready line and other plain text are skipped). */
function logLines(p: WardProcess): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const line of `${p.stdout()}\n${p.stderr()}`.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      out.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // a line still being written
    }
  }
  return out;
}

// === The mesh ===

let dir: string;
let idDir: string;
let manifests: string;
let ctl: WardProcess | undefined;
let ctlPorts: ControllerPorts;
let serverProxy: WardProcess | undefined;
let clientProxy: WardProcess | undefined;
let serverPorts: ProxyPorts;
let clientPorts: ProxyPorts;

const outboundPort = () => clientPorts.outbound as number;
function listenPort(podPort: number): number {
  const p = serverPorts.inbound.get(podPort);
  assert.ok(p !== undefined, `pod port ${podPort} is served`);
  return p;
}

function proxyArgs(pod: string, sa: string, podIp: string): string[] {
  return [
    'proxy',
    '--workload',
    `demo/${pod}`,
    '--service-account',
    sa,
    '--trust-anchors',
    join(idDir, 'ca.crt'),
    '--token-file',
    writeTokenFile(idDir, join(dir, `${sa}.token`), 'demo', sa, pod),
    '--identity-addr',
    `${HOST}:${ctlPorts.identity}`,
    '--policy-addr',
    `${HOST}:${ctlPorts.policy}`,
    '--listen-host',
    podIp,
    '--mesh-addr',
    `${podIp}:0`,
    '--admin-addr',
    `${podIp}:0`,
    '--localhost-networks',
    `${podIp}/32`,
  ];
}

const writeManifest = (name: string, text: string) => writeFileSync(join(manifests, name), text);

describe('e2e: a mesh of a controller and two proxies', { timeout: 120_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-e2e-mesh-'));
    ({ idDir, manifests } = initWorkdir(dir));
    writeManifest('app.yaml', APP_YAML);
    writeManifest('http-policy.yaml', httpPolicy(false));
    writeManifest('grpc-policy.yaml', GRPC_POLICY);
    writeManifest('audit-policy.yaml', auditPolicy(true));
    writeManifest('tcp-policy.yaml', tcpPolicy('clients'));
    ctl = spawnController(manifests, idDir, HOST);
    const [ports, apps] = await Promise.all([controllerPorts(ctl), startApps()]);
    ctlPorts = ports;

    serverProxy = wardSpawn([
      ...proxyArgs('server-0', 'server', SERVER_POD),
      ...[`8080@0=${SERVER_APP}:${apps.http}`, `8081@0=${SERVER_APP}:${apps.grpc}`, `8082@0=${SERVER_APP}:${apps.http}`].flatMap((s) => ['--inbound', s]),
      ...[`9000@0=${SERVER_APP}:${apps.echo}`, `9001@0=${SERVER_APP}:${apps.locked}`].flatMap((s) => ['--inbound', s]),
    ]);
    serverPorts = await proxyPorts(serverProxy, SERVER_POD);
    assert.equal(serverPorts.identity, SERVER_ID);
    const tapPort = await startTap(serverPorts.mesh);
    clientProxy = wardSpawn([
      ...proxyArgs('client-0', 'client', CLIENT_POD),
      '--destination-addr',
      `${HOST}:${ctlPorts.destination}`,
      '--outbound-addr',
      `${CLIENT_POD}:0`,
      '--mesh-port-override',
      `${SERVER_POD}=${tapPort}`,
    ]);
    clientPorts = await proxyPorts(clientProxy, CLIENT_POD);
    assert.equal(clientPorts.identity, CLIENT_ID);
    assert.ok(clientPorts.outbound !== undefined);
  });

  after(async () => {
    await Promise.allSettled([clientProxy, serverProxy, ctl].flatMap((p) => (p === undefined ? [] : [p.stop()])));
    httpApp?.closeAllConnections();
    for (const s of sockets) s.destroy();
    for (const s of [httpApp, grpcApp, echoApp, lockedApp, tap]) s?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('(1) mTLS between the proxies carries the client identity to the app; a spoofed l5d-client-id never arrives', async () => {
    const r = await viaClientProxy(`http://${SVC}/api/hello`, { 'l5d-client-id': SPOOFED_ID });
    assert.equal(r.status, 200, `${r.body} ${String(r.headers['l5d-proxy-error'])}`);
    assert.deepEqual(JSON.parse(r.body), { path: '/api/hello', clientIds: [CLIENT_ID] });

    // In a tunnel the client proxy relays bytes: only the server proxy can drop the spoofed headers.
    const t = await tunnel(`${SVC}:80`);
    const agent = agentOver(t);
    try {
      const headers = { host: SVC, 'l5d-client-id': SPOOFED_ID, 'L5D-CLIENT-ID': 'x', 'l5d-dst-override': 'elsewhere' };
      const inTunnel = await call({ host: SVC, port: 80, path: '/api/tunnelled', headers, agent });
      assert.equal(inTunnel.status, 200);
      assert.deepEqual(JSON.parse(inTunnel.body), { path: '/api/tunnelled', clientIds: [CLIENT_ID] });
    } finally {
      agent.destroy();
    }
    assert.ok(
      httpSeen.every((s) => s.clientIds.length === 1 && s.clientIds[0] === CLIENT_ID),
      JSON.stringify(httpSeen),
    );

    // On the wire: every connection between the proxies opens with a ClientHello to the server's
    // identity with the transport-header ALPN, and nothing of the requests crosses in plaintext.
    assert.ok(tapped.length >= 1, 'the client proxy went through the tap');
    for (const c of tapped) {
      const hello = sniffClientHello(Buffer.concat(c.fromClient));
      assert.ok(hello.kind === 'hello', `the connection does not open with a ClientHello: ${JSON.stringify(hello)}`);
      assert.equal(hello.sni, SERVER_ID);
      assert.deepEqual(hello.alpn, [TRANSPORT_HEADER_ALPN]);
      const wire = Buffer.concat([...c.fromClient, ...c.fromServer]).toString('latin1');
      for (const plain of ['/api/', 'l5d-client-id', SPOOFED_ID, CLIENT_ID, 'application/json'])
        assert.ok(!wire.includes(plain), `"${plain}" crossed in plaintext`);
    }

    const server = await serverMetrics();
    const allowed = metricSum(server, 'inbound_http_authz_allow_total', {
      srv_name: 'server-http',
      tls: 'true',
      client_id: CLIENT_ID,
      route_kind: 'HTTPRoute',
      route_name: 'api',
      authz_kind: 'authorizationpolicy',
      authz_name: 'api-client',
    });
    assert.equal(allowed, 2, server);
    assert.match(
      server,
      new RegExp(`^inbound_http_authz_allow_total\\{[^}]*srv_name="server-http"[^}]*,tls="true",client_id="${escapeRe(CLIENT_ID)}"[^}]*\\} 2$`, 'm'),
    );
    // The client proxy's side: its connections to the endpoint are mesh TLS to the server identity.
    const client = await clientMetrics();
    assert.ok(metricSum(client, 'tcp_open_total', { direction: 'outbound', tls: 'true', server_id: SERVER_ID }) >= 1, client);
  });

  it('(2) answers each deny kind as §4.7 says', async () => {
    const seenBefore = httpSeen.length;
    const before = await serverMetrics();

    // 403 for a matched route without authorization, with the reason for the meshed caller.
    const denied = await viaClientProxy(`http://${SVC}/admin/users`);
    assert.equal(denied.status, 403);
    assert.equal(denied.headers['content-length'], '0');
    assert.equal(denied.body, '');
    assert.match(String(denied.headers['l5d-proxy-error']), /unauthorized request on route/);

    // The denied connection is kept: the next request on it is served.
    const t = await tunnel(`${SVC}:80`);
    const agent = agentOver(t);
    try {
      const first = await call({ host: SVC, port: 80, path: '/admin/tunnelled', agent });
      assert.equal(first.status, 403);
      assert.equal(first.headers['content-length'], '0');
      assert.match(String(first.headers['l5d-proxy-error']), /unauthorized request on route/);
      const second = await call({ host: SVC, port: 80, path: '/api/after-403', agent });
      assert.equal(second.reused, true, 'the second request went out on the connection of the 403');
      assert.equal(second.status, 200);
      assert.deepEqual(JSON.parse(second.body), { path: '/api/after-403', clientIds: [CLIENT_ID] });
      assert.equal(t.destroyed, false);
    } finally {
      agent.destroy();
    }

    // 404 when no route matches.
    const noRoute = await viaClientProxy(`http://${SVC}/elsewhere`);
    assert.equal(noRoute.status, 404);
    assert.equal(noRoute.body, '');
    assert.match(String(noRoute.headers['l5d-proxy-error']), /no route found for request/);

    // The same 403 for an unmeshed plaintext caller straight to the pod port, without the reason.
    const plain = await unmeshed(8080, '/api/hello', { 'l5d-client-id': CLIENT_ID });
    assert.equal(plain.status, 403);
    assert.equal(plain.headers['content-length'], '0');
    assert.equal(plain.headers['l5d-proxy-error'], undefined);

    assert.deepEqual(
      httpSeen.slice(seenBefore).map((s) => s.path),
      ['/api/after-403'],
      'only the permitted request reached the app',
    );

    // gRPC: PERMISSION_DENIED and NOT_FOUND as trailers-only 200s, on a session that keeps serving.
    const session = await grpcSession();
    try {
      const ok = await grpcCall(session, '/test.Echo/Say', { 'l5d-client-id': SPOOFED_ID });
      assert.equal(ok.headers[':status'], 200);
      assert.equal(ok.trailers?.['grpc-status'], '0');
      assert.deepEqual(JSON.parse(ok.messages.subarray(5).toString()), { path: '/test.Echo/Say', clientIds: [CLIENT_ID] });

      const secret = await grpcCall(session, '/test.Echo/Secret');
      assert.equal(secret.headers[':status'], 200);
      assert.equal(secret.headers['grpc-status'], '7');
      assert.match(String(secret.headers['content-type']), /^application\/grpc/);
      assert.match(String(secret.headers['l5d-proxy-error']), /unauthorized request on route/);
      assert.notEqual(secret.headers['grpc-message'], undefined);
      assert.equal(secret.trailers, undefined, 'trailers-only');
      assert.equal(secret.messages.length, 0);

      const missing = await grpcCall(session, '/test.Echo/Missing');
      assert.equal(missing.headers[':status'], 200);
      assert.equal(missing.headers['grpc-status'], '5');
      assert.match(String(missing.headers['l5d-proxy-error']), /no route found for request/);
      assert.equal(missing.trailers, undefined, 'trailers-only');

      const again = await grpcCall(session, '/test.Echo/Say');
      assert.equal(again.trailers?.['grpc-status'], '0');
      assert.deepEqual(
        grpcSeen.map((s) => s.path),
        ['/test.Echo/Say', '/test.Echo/Say'],
      );
    } finally {
      session.destroy();
    }

    // Opaque TCP: the denied connection is closed before any byte reaches the application.
    const locked = await tunnel(`${SVC}:9001`);
    locked.write('knock knock');
    const r = await drainUntilClosed(locked);
    assert.equal(r.closed, true, 'the denied tunnel was closed');
    assert.equal(r.received, '');
    assert.equal(accepted.locked, 0, 'no connection reached the app of the denied port');

    const after = await serverMetrics();
    const delta = (name: string, labels: Record<string, string>) => metricSum(after, name, labels) - metricSum(before, name, labels);
    assert.equal(delta('inbound_http_authz_deny_total', { srv_name: 'server-http', route_name: 'admin', tls: 'true', client_id: CLIENT_ID }), 2, after);
    assert.equal(delta('inbound_http_authz_deny_total', { srv_name: 'server-http', route_name: 'api', tls: 'no_identity' }), 1, after);
    assert.equal(delta('inbound_http_route_not_found_total', { srv_name: 'server-http' }), 1, after);
    assert.equal(delta('inbound_http_authz_deny_total', { srv_name: 'server-grpc', route_name: 'echo-secret' }), 1, after);
    assert.equal(delta('inbound_http_route_not_found_total', { srv_name: 'server-grpc' }), 1, after);
    assert.equal(delta('inbound_tcp_authz_deny_total', { srv_name: 'server-tcp-locked', tls: 'true', client_id: CLIENT_ID }), 1, after);
  });

  it('(3) audit mode admits a caller its authorizations deny, logs it at info and labels it authz_name="audit"', async () => {
    const r = await viaClientProxy(`http://${SVC}:8082/audited`);
    assert.equal(r.status, 200, `${r.body} ${String(r.headers['l5d-proxy-error'])}`);
    assert.deepEqual(JSON.parse(r.body), { path: '/audited', clientIds: [CLIENT_ID] });
    const plain = await unmeshed(8082, '/audited-plain', { 'l5d-client-id': SPOOFED_ID });
    assert.equal(plain.status, 200);
    assert.deepEqual(JSON.parse(plain.body), { path: '/audited-plain', clientIds: [] });

    const line = await waitFor('the audit log line', () =>
      logLines(serverProxy as WardProcess).find((l) => l.msg === 'Request allowed' && l.path === '/audited'),
    );
    assert.equal(line.level, 30, JSON.stringify(line));
    assert.deepEqual(line.authz, { group: '', kind: 'default', name: 'audit' });
    assert.deepEqual(line.server, { group: 'policy.linkerd.io', kind: 'server', name: 'server-audit' });
    assert.equal(line.tls, `mtls ${CLIENT_ID}`);
    assert.equal(line.client, CLIENT_POD);

    const m = await serverMetrics();
    const audit = { srv_name: 'server-audit', authz_kind: 'default', authz_name: 'audit' };
    assert.equal(metricSum(m, 'inbound_http_authz_allow_total', { ...audit, tls: 'true', client_id: CLIENT_ID }), 1, m);
    assert.equal(metricSum(m, 'inbound_http_authz_allow_total', { ...audit, tls: 'no_identity' }), 1, m);

    // Without audit mode the same caller is denied: it was admitted by `audit` alone.
    writeManifest('audit-policy.yaml', auditPolicy(false));
    await waitFor(
      'the Server without audit mode to deny',
      async () => ((await viaClientProxy(`http://${SVC}:8082/audited`)).status === 403 ? true : undefined),
      WAIT_MS,
      100,
    );
  });

  it('(4) a policy change closes a now-unauthorized tunnel between the proxies', async () => {
    const s = await tunnel(`${SVC}:9000`);
    await echo(s, 'ping 1');
    await echo(s, 'ping 2');
    assert.equal(accepted.echo, 1);
    const terminated = () =>
      serverMetrics().then((m) => metricSum(m, 'inbound_tcp_authz_terminate_total', { srv_name: 'server-tcp', tls: 'true', client_id: CLIENT_ID }));
    const terminatedBefore = await terminated();
    const started = Date.now();
    writeManifest('tcp-policy.yaml', tcpPolicy('nobody'));
    const r = await drainUntilClosed(s);
    assert.equal(r.closed, true, 'the revoked tunnel was closed');
    assert.ok(Date.now() - started <= WAIT_MS);
    assert.equal(r.received, '');
    assert.equal(await terminated(), terminatedBefore + 1);
    const line = await waitFor('the termination log line', () =>
      logLines(serverProxy as WardProcess).find((l) => l.msg === 'Connection terminated due to policy change' && l.port === 9000),
    );
    assert.equal(line.level, 30);
    assert.equal(line.client, CLIENT_POD);
    assert.equal(line.server, 'server:server-tcp');
    assert.equal(line.tls, `mtls ${CLIENT_ID}`);

    // A new tunnel is refused now.
    const again = await tunnel(`${SVC}:9000`);
    again.write('ping 3');
    const r2 = await drainUntilClosed(again);
    assert.deepEqual(r2, { closed: true, received: '' });
    assert.equal(accepted.echo, 1);
  });

  it('(5) the proxies keep their last policy and endpoints while the controller is dead, and follow edits once it is back', async () => {
    const c = ctl as WardProcess;
    const [server, client] = [serverProxy as WardProcess, clientProxy as WardProcess];
    const [serverLinesBefore, clientLinesBefore] = [logLines(server).length, logLines(client).length];
    c.child.kill('SIGKILL');
    await c.exited;
    await assert.rejects(fetch(`http://${HOST}:${ctlPorts.admin}/`, { signal: AbortSignal.timeout(WAIT_MS) }));
    // Both proxies noticed: the server's policy watch and the client's destination watch are down.
    await waitFor('the server proxy to lose its policy stream', () =>
      logLines(server)
        .slice(serverLinesBefore)
        .find((l) => l.msg === 'inbound policy stream ended; reconnecting' && l.port === 8080 && l.keeping === true),
    );
    await waitFor('the client proxy to lose its destination stream', () =>
      logLines(client)
        .slice(clientLinesBefore)
        .find((l) => l.msg === 'destination stream ended; reconnecting' && l.path === `${SVC}:80`),
    );

    const allowed = await viaClientProxy(`http://${SVC}/api/while-dead`);
    assert.equal(allowed.status, 200, `${allowed.body} ${String(allowed.headers['l5d-proxy-error'])}`);
    assert.deepEqual(JSON.parse(allowed.body), { path: '/api/while-dead', clientIds: [CLIENT_ID] });
    assert.equal((await viaClientProxy(`http://${SVC}/admin/while-dead`)).status, 403);
    assert.equal((await unmeshed(8080, '/api/while-dead')).status, 403);
    const session = await grpcSession();
    try {
      assert.equal((await grpcCall(session, '/test.Echo/Secret')).headers['grpc-status'], '7');
      assert.equal((await grpcCall(session, '/test.Echo/Say')).trailers?.['grpc-status'], '0');
    } finally {
      session.destroy();
    }

    // Back on the same ports with the same identity; then an edit opens /admin to the client.
    ctl = spawnController(manifests, idDir, HOST, ctlPorts);
    await controllerPorts(ctl);
    writeManifest('http-policy.yaml', httpPolicy(true));
    await waitFor(
      'the edit after the restart to reach the server proxy',
      async () => ((await viaClientProxy(`http://${SVC}/admin/after-restart`)).status === 200 ? true : undefined),
      WAIT_MS,
      200,
    );
    assert.deepEqual(httpSeen.at(-1), { path: '/admin/after-restart', clientIds: [CLIENT_ID] });
    assert.equal((await unmeshed(8080, '/admin/after-restart')).status, 403);
    assert.equal((await viaClientProxy(`http://${SVC}/elsewhere`)).status, 404);
    for (const [host, port] of [
      [SERVER_POD, serverPorts.admin],
      [CLIENT_POD, clientPorts.admin],
    ] as const) {
      assert.equal((await fetch(`http://${host}:${port}/ready`, { signal: AbortSignal.timeout(WAIT_MS) })).status, 200);
    }
  });
});
