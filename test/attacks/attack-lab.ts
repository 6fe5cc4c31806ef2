/**
 * The laboratory of the proxy attack suite: a real {@link InboundProxy} on 127.0.0.1 in front of
 * applications that record everything that reaches them, its policies served by a real
 * {@link PolicyWatcher} over a scripted policy stream, and identity material from in-process CAs
 * (src/proxy/identity-test-helpers).
 *
 * Pod ports (the proxy listens on ephemeral ports and applies the policy of these numbers; the
 * mesh port's transport header names them), every one admitting only identity X:
 * - 8080 `http1`, one route for everything → the HTTP/1 application;
 * - 8081 `detect` (timeout {@link DETECT_MS}), one route for everything → the HTTP/1 application;
 * - 8082 `grpc`, one route for every method → the HTTP/2 (gRPC) application;
 * - 9000 `opaque` → an echo application;
 * - 8090 `http1` and 9090 `opaque`: the policy-race ports, whose policy the race test flips;
 * - 7777 is never given a policy.
 *
 * Clients: X, the healthy meshed client, connects from 127.0.0.2; attackers from 127.0.0.3, so the
 * proxy-added `default:localhost` authorization (127.0.0.1/32) admits neither. "Admitted by
 * mistake" is observable as a record of the applications that the healthy client did not cause:
 * healthy traffic always carries a `/healthy/` or `/race/` path (or a `HEALTHY` / `RACE` first
 * chunk on TCP) and, on HTTP, `l5d-client-id` equal to X and nothing else.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import {
  Agent,
  type ClientRequestArgs,
  createServer as createHttpServer,
  type Server as HttpServer,
  request as httpRequest,
  type IncomingMessage,
} from 'node:http';
import {
  type ClientHttp2Session,
  createServer as createHttp2Server,
  type IncomingHttpHeaders as Http2Headers,
  type Http2Server,
  connect as http2Connect,
} from 'node:http2';
import { type AddressInfo, createServer as createNetServer, connect as netConnect, type Socket, type Server as TcpServer } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import { type ConnectionOptions, type TLSSocket, connect as tlsConnect } from 'node:tls';
import type { StreamHandlers, WireResult } from '../../src/api/index.js';
import type { Authorization, GrpcRoute, HttpRoute, InboundServer, Network, ProxyProtocol } from '../../src/core/index.js';
import type { WorkloadCertificate } from '../../src/identity/index.js';
import { type PolicyWatchClient, PolicyWatcher } from '../../src/proxy/inbound/policy-watch.js';
import { InboundProxy } from '../../src/proxy/inbound/proxy.js';
import { mkTestMesh, TempDirs, type TestMesh, waitFor, within } from '../../src/proxy/testing/identity.js';
import { MeshTlsContext, TRANSPORT_HEADER_ALPN } from '../../src/proxy/tls/context.js';
import { encodeTransportHeader, TRANSPORT_HEADER_PREFACE, type TransportHeader } from '../../src/proxy/transport/transport-header.js';
import { createLogger } from '../../src/shared/index.js';

export { waitFor, within };

export const HOST = '127.0.0.1';
export const HEALTHY_FROM = '127.0.0.2';
export const ATTACKER_FROM = '127.0.0.3';
/** The proxy's detect timeout (ClientHello, mesh handshake, transport header) and the `detect` port's HTTP detection timeout. */
export const DETECT_MS = 500;
/** The HTTP/1 header deadline (and, for HTTP/2, the connection-preface deadline). */
export const HEADERS_MS = 500;
/** How often node checks HTTP/1 header deadlines. */
export const CHECK_MS = 50;
/** Idle HTTP/1 keep-alive connections are closed after this. */
export const KEEP_ALIVE_MS = 3000;
/** Every healthy operation must complete within this, whatever the attack. */
export const HEALTHY_BOUND_MS = 1000;
/** Generic bound for one bounded wait. */
export const WAIT_MS = 5000;

/** Pod ports (see the module comment). */
export const POD = { h1: 8080, detect: 8081, grpc: 8082, opaque: 9000, raceH1: 8090, raceTcp: 9090, noPolicy: 7777 } as const;
export type PodPort = Exclude<keyof typeof POD, 'noPolicy'>;
const SERVED: readonly PodPort[] = ['h1', 'detect', 'grpc', 'opaque', 'raceH1', 'raceTcp'];

export const GRPC_SERVICE = 'healthy.Health';

// ---------------------------------------------------------------------------------------------
// Policies

const ALL_NETWORKS: readonly Network[] = [
  { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
  { net: { ip: '::', prefixLen: 0 }, except: [] },
];

function onlyIdentity(id: string): Authorization {
  return {
    meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: 'only-x' },
    networks: ALL_NETWORKS,
    authentication: { kind: 'tlsAuthenticated', identities: [id], suffixes: [] },
  };
}

const everything: HttpRoute = {
  meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'everything' },
  hosts: [],
  authorizations: [],
  rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
};

const everyMethod: GrpcRoute = {
  meta: { group: 'gateway.networking.k8s.io', kind: 'GRPCRoute', name: 'every-method' },
  hosts: [],
  authorizations: [],
  rules: [{ matches: [{ rpc: {}, headers: [] }], filters: [] }],
};

function server(name: string, protocol: ProxyProtocol, authorizations: readonly Authorization[]): InboundServer {
  return { meta: { group: 'policy.linkerd.io', kind: 'Server', name }, protocol, authorizations };
}

/** The policy of each served pod port, admitting only `x` (`allow`) or nothing at all (`deny`). */
export function policyOf(port: PodPort, x: string, allow = true): InboundServer {
  const authz = allow ? [onlyIdentity(x)] : [];
  switch (port) {
    case 'h1':
    case 'raceH1':
      return server(port, { kind: 'http1', routes: [everything] }, authz);
    case 'detect':
      return server(port, { kind: 'detect', timeoutMs: DETECT_MS, httpRoutes: [everything] }, authz);
    case 'grpc':
      return server(port, { kind: 'grpc', routes: [everyMethod] }, authz);
    case 'opaque':
    case 'raceTcp':
      return server(port, { kind: 'opaque' }, authz);
  }
}

/**
 * The policy controller's side of the WatchPort streams: `publish` sends a port's policy to its
 * open stream (the watcher compiles and publishes it synchronously).
 */
export class ScriptedPolicyStreams implements PolicyWatchClient {
  readonly #streams = new Map<number, StreamHandlers<WireResult<InboundServer>>>();
  readonly #latest = new Map<number, InboundServer>();

  watchPort(_workload: string, port: number, handlers: StreamHandlers<WireResult<InboundServer>>): () => void {
    this.#streams.set(port, handlers);
    const latest = this.#latest.get(port);
    if (latest !== undefined) queueMicrotask(() => handlers.onMessage({ ok: true, value: latest }));
    return () => {
      if (this.#streams.get(port) === handlers) this.#streams.delete(port);
    };
  }

  publish(port: number, value: InboundServer): void {
    this.#latest.set(port, value);
    this.#streams.get(port)?.onMessage({ ok: true, value });
  }
}

// ---------------------------------------------------------------------------------------------
// The applications

/** One thing an application saw. */
export interface AppRecord {
  readonly app: 'h1' | 'h2' | 'tcp-opaque' | 'tcp-race';
  readonly kind: 'request' | 'connection';
  /** Request: method and path; connection: its first line (or `<no data>`). */
  readonly what: string;
  /** Every `l5d-client-id` value of a request (names compared case-insensitively). */
  readonly clientIds: readonly string[];
}

function lowerIds(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if ((raw[i] as string).toLowerCase() === 'l5d-client-id') out.push(raw[i + 1] as string);
  return out;
}

function firstLine(b: Buffer | undefined): string {
  if (b === undefined) return '<no data>';
  const s = b.toString('latin1');
  const end = s.indexOf('\r\n');
  return end < 0 ? s.slice(0, 80) : s.slice(0, end);
}

export function grpcFrame(message: string): Buffer {
  const body = Buffer.from(message);
  const out = Buffer.alloc(5 + body.length);
  out.writeUInt32BE(body.length, 1);
  body.copy(out, 5);
  return out;
}

async function listen(s: HttpServer | Http2Server | TcpServer): Promise<number> {
  s.listen(0, HOST);
  await once(s, 'listening');
  return (s.address() as AddressInfo).port;
}

/** The applications behind the proxy; every request and connection they see is recorded. */
export class RecordingApps {
  readonly records: AppRecord[] = [];
  readonly #h1: HttpServer;
  readonly #h2: Http2Server;
  readonly #echo: { readonly opaque: TcpServer; readonly race: TcpServer };
  readonly #open = new Set<Socket>();
  ports = { h1: 0, h2: 0, opaque: 0, race: 0 };

  constructor() {
    this.#h1 = createHttpServer({ keepAliveTimeout: 60_000 }, (req, res) => {
      this.records.push({ app: 'h1', kind: 'request', what: `${req.method} ${req.url}`, clientIds: lowerIds(req.rawHeaders) });
      req.resume();
      req.on('end', () => res.end(`ok ${req.url}`));
    });
    this.#h1.on('connection', (s: Socket) => this.#recordConnection('h1', s, false));
    this.#h2 = createHttp2Server();
    this.#h2.on('stream', (stream, headers: Http2Headers) => {
      stream.on('error', () => {});
      const ids = headers['l5d-client-id'];
      this.records.push({
        app: 'h2',
        kind: 'request',
        what: `${String(headers[':method'])} ${String(headers[':path'])}`,
        clientIds: ids === undefined ? [] : Array.isArray(ids) ? ids : [ids],
      });
      stream.resume();
      stream.on('end', () => {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(grpcFrame('pong'));
      });
    });
    const echo = (app: 'tcp-opaque' | 'tcp-race') =>
      createNetServer({ allowHalfOpen: true }, (s: Socket) => {
        this.#recordConnection(app, s, true);
        s.pipe(s);
      });
    this.#echo = { opaque: echo('tcp-opaque'), race: echo('tcp-race') };
  }

  #recordConnection(app: AppRecord['app'], s: Socket, echo: boolean): void {
    this.#open.add(s);
    s.on('error', () => {});
    let recorded = false;
    const record = (chunk: Buffer | undefined) => {
      if (recorded) return;
      recorded = true;
      this.records.push({ app, kind: 'connection', what: firstLine(chunk), clientIds: [] });
    };
    // A listener of its own does not change what the HTTP server reads (it already reads in flowing mode).
    if (echo) s.once('data', (c: Buffer) => record(c));
    else s.prependOnceListener('data', (c: Buffer) => record(c));
    s.once('close', () => {
      this.#open.delete(s);
      record(undefined);
    });
  }

  async start(): Promise<void> {
    const [h1, h2, opaque, race] = await Promise.all([listen(this.#h1), listen(this.#h2), listen(this.#echo.opaque), listen(this.#echo.race)]);
    this.ports = { h1, h2, opaque, race };
  }

  /** The application port behind a pod port (a closed port for anything else). */
  portFor(pod: number): number {
    switch (pod) {
      case POD.h1:
      case POD.detect:
      case POD.raceH1:
        return this.ports.h1;
      case POD.grpc:
        return this.ports.h2;
      case POD.opaque:
        return this.ports.opaque;
      case POD.raceTcp:
        return this.ports.race;
      default:
        return 1;
    }
  }

  /** Records since `mark` (an index into {@link records}) that healthy traffic of `x` cannot explain. */
  foreignSince(mark: number, x: string): AppRecord[] {
    return this.records.slice(mark).filter((r) => !isHealthy(r, x));
  }

  async close(): Promise<void> {
    for (const s of this.#open) s.destroy();
    this.#h1.closeAllConnections();
    await Promise.all(
      [this.#h1, this.#h2, this.#echo.opaque, this.#echo.race].map((s) => new Promise<void>((resolve) => (s as TcpServer).close(() => resolve()))),
    );
  }
}

function isHealthy(r: AppRecord, x: string): boolean {
  if (r.kind === 'request') return /^[A-Z]+ \/(healthy|race)[/.]/.test(r.what) && r.clientIds.length === 1 && r.clientIds[0] === x;
  switch (r.app) {
    case 'h1':
      return /^[A-Z]+ \/(healthy|race)\//.test(r.what);
    case 'h2':
      return false;
    case 'tcp-opaque':
      return r.what.startsWith('HEALTHY');
    case 'tcp-race':
      // A stream admitted under allow may be ended by a deny before its first byte (§4.8).
      return r.what.startsWith('RACE') || r.what === '<no data>';
  }
}

// ---------------------------------------------------------------------------------------------
// Clients

/** Every client socket made through these helpers, so a test can always clean up. */
export const clientSockets = new Set<Socket>();

function track<S extends Socket>(s: S): S {
  clientSockets.add(s);
  s.on('error', () => {});
  s.once('close', () => clientSockets.delete(s));
  return s;
}

/** A raw client connection: what came back, how and when it ended. */
export interface Probe<S extends Socket = Socket> {
  readonly socket: S;
  readonly openedAt: number;
  received(): Buffer;
  /** The error code the socket failed with (ECONNRESET…), if any. */
  error(): string | undefined;
  /** When the socket closed (performance.now()), if it did. */
  closedAt(): number | undefined;
  /** True when the test closed it rather than the proxy. */
  closedByUs(): boolean;
  readonly closed: Promise<void>;
  /** Closes from our side (marks the probe as closed by us if still open). */
  destroy(): void;
}

export function probe<S extends Socket>(socket: S): Probe<S> {
  const openedAt = performance.now();
  const chunks: Buffer[] = [];
  let error: string | undefined;
  let closedAt: number | undefined;
  let byUs = false;
  track(socket);
  socket.on('data', (c: Buffer) => chunks.push(c));
  socket.on('error', (e: NodeJS.ErrnoException) => {
    error ??= e.code ?? e.message;
  });
  const closed = new Promise<void>((resolve) =>
    socket.once('close', () => {
      closedAt = performance.now();
      resolve();
    }),
  );
  return {
    socket,
    openedAt,
    received: () => Buffer.concat(chunks),
    error: () => error,
    closedAt: () => closedAt,
    closedByUs: () => byUs,
    closed,
    destroy: () => {
      if (closedAt === undefined) byUs = true;
      socket.destroy();
    },
  };
}

/** A plaintext TCP connection from `from` (not awaited: bytes written before connect are queued). */
export function tcpFrom(port: number, from: string): Socket {
  return track(netConnect({ host: HOST, port, localAddress: from }));
}

/** A TLS client over a TCP connection from `from` (node:tls has no `localAddress`). */
export function tlsFrom(port: number, options: ConnectionOptions, from: string): TLSSocket {
  return track(tlsConnect({ ...options, socket: tcpFrom(port, from) }));
}

/** Writes `data` and resolves once it is flushed (or the socket failed). */
export function writeFlushed(s: Socket, data: string | Uint8Array): Promise<void> {
  return new Promise<void>((resolve) => s.write(data, () => resolve()));
}

/** A transport header for any port number, even ones the encoder refuses (0, 70000). */
export function rawTransportHeader(port: number): Buffer {
  if (port >= 1 && port <= 65_535) return encodeTransportHeader({ port });
  const varint: number[] = [];
  let n = port;
  do {
    varint.push((n & 0x7f) | (n >= 0x80 ? 0x80 : 0));
    n >>>= 7;
  } while (n > 0);
  const message = Buffer.from([0x08, ...varint]);
  const length = Buffer.alloc(4);
  length.writeUInt32BE(message.length);
  return Buffer.concat([Buffer.from(TRANSPORT_HEADER_PREFACE, 'latin1'), length, message]);
}

/** An HTTP/1 response. */
export interface H1Reply {
  readonly status: number;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

/** One HTTP/1 request over a socket of the caller's making (or a keep-alive `agent`). */
export function h1Request(opts: {
  readonly path: string;
  readonly method?: string;
  readonly headers?: Record<string, string | string[]>;
  readonly socket?: () => Duplex;
  readonly agent?: Agent;
}): Promise<H1Reply> {
  return new Promise<H1Reply>((resolve, reject) => {
    const args: ClientRequestArgs = { host: 'web', path: opts.path, method: opts.method ?? 'GET', headers: { host: 'web', ...opts.headers } };
    if (opts.agent !== undefined) args.agent = opts.agent;
    else if (opts.socket !== undefined) args.createConnection = opts.socket;
    const req = httpRequest(args);
    req.on('error', reject);
    req.on('response', (res: IncomingMessage) => {
      let body = '';
      res.setEncoding('latin1');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.end();
  });
}

/** A keep-alive agent whose single connection is made by `connect` (mesh TLS, a transport header…). */
export class SocketAgent extends Agent {
  readonly #connect: () => Duplex;
  constructor(connect: () => Duplex) {
    super({ keepAlive: true, maxSockets: 1 });
    this.#connect = connect;
  }
  override createConnection(): Duplex {
    return this.#connect();
  }
}

/** An HTTP/2 session over a socket of the caller's making. */
export function h2Session(authorityPort: number, connect: () => Duplex): ClientHttp2Session {
  const session = http2Connect(`http://${HOST}:${authorityPort}`, { createConnection: connect });
  session.on('error', () => {});
  return session;
}

/** An HTTP/2 response: headers, trailers, or how the stream failed. */
export interface H2Reply {
  readonly headers: Http2Headers | undefined;
  readonly trailers: Http2Headers | undefined;
  readonly rstCode: number | undefined;
  readonly body: Buffer;
}

/** One gRPC-shaped (or plain, without content-type) request; resolves when the stream closes. */
export function h2Request(session: ClientHttp2Session, headers: Record<string, string>, body?: Buffer): Promise<H2Reply> {
  return new Promise<H2Reply>((resolve) => {
    let response: Http2Headers | undefined;
    let trailers: Http2Headers | undefined;
    const chunks: Buffer[] = [];
    let stream: ReturnType<ClientHttp2Session['request']>;
    try {
      stream = session.request(headers, { endStream: body === undefined });
    } catch {
      resolve({ headers: undefined, trailers: undefined, rstCode: -1, body: Buffer.alloc(0) });
      return;
    }
    stream.on('response', (h: Http2Headers) => {
      response = h;
    });
    stream.on('trailers', (t: Http2Headers) => {
      trailers = t;
    });
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('error', () => {});
    stream.on('close', () => resolve({ headers: response, trailers, rstCode: stream.rstCode, body: Buffer.concat(chunks) }));
    if (body !== undefined) stream.end(body);
  });
}

export function grpcHeaders(path: string, extra: Record<string, string> = {}): Record<string, string> {
  return { ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers', ...extra };
}

// ---------------------------------------------------------------------------------------------
// The lab

/** Everything a test needs; see the module comment. Made by {@link startLab}. */
export interface AttackLab {
  readonly dirs: TempDirs;
  readonly mesh: TestMesh;
  readonly proxyId: string;
  /** The healthy client, X, and another meshed identity of the same mesh, Y. */
  readonly x: MeshTlsContext;
  readonly y: MeshTlsContext;
  /** X's name in another mesh (another trust anchor). */
  readonly foreignX: WorkloadCertificate;
  /** X's name, issued by our CA, expired a day ago. */
  readonly expiredX: WorkloadCertificate;
  readonly apps: RecordingApps;
  readonly streams: ScriptedPolicyStreams;
  readonly watcher: PolicyWatcher;
  readonly proxy: InboundProxy;
  /** The proxy's listener of each served pod port. */
  readonly port: Readonly<Record<PodPort, number>>;
  readonly meshPort: number;
  /** The proxy's log lines (level ≥ warn), parsed. */
  readonly logs: Record<string, unknown>[];
}

export async function startLab(): Promise<AttackLab> {
  const dirs = new TempDirs();
  const [mesh, foreign] = await Promise.all([mkTestMesh(dirs), mkTestMesh(dirs)]);
  const dayMs = 24 * 3600 * 1000;
  const [proxyCert, xCert, yCert, foreignX, expiredX] = await Promise.all([
    mesh.issue('emojivoto', 'web'),
    mesh.issue('emojivoto', 'vote-bot'),
    mesh.issue('emojivoto', 'emoji'),
    foreign.issue('emojivoto', 'vote-bot'),
    mesh.issue('emojivoto', 'vote-bot', { now: Date.now() - 2 * dayMs }),
  ]);
  assert.ok(expiredX.notAfterMs < Date.now(), 'the expired certificate is expired');
  const apps = new RecordingApps();
  await apps.start();
  const streams = new ScriptedPolicyStreams();
  const watcher = new PolicyWatcher({ client: streams, workload: '{"ns":"emojivoto","pod":"web-0"}', ports: SERVED.map((p) => POD[p]) });
  for (const p of SERVED) streams.publish(POD[p], policyOf(p, xCert.identity));
  await within(watcher.ready(), WAIT_MS, 'every policy');
  const logs: Record<string, unknown>[] = [];
  const proxy = new InboundProxy({
    identity: proxyCert.identity,
    tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
    policies: watcher,
    appHost: HOST,
    appPortOf: (p) => apps.portFor(p),
    listen: { host: HOST, meshPort: 0, appPorts: SERVED.map(() => 0), policyPorts: SERVED.map((p) => POD[p]) },
    detectTimeoutMs: DETECT_MS,
    http: { headersTimeoutMs: HEADERS_MS, timeoutCheckIntervalMs: CHECK_MS, keepAliveTimeoutMs: KEEP_ALIVE_MS },
    logger: createLogger({ level: 'warn', destination: { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) } }),
  });
  const bound = await proxy.start();
  const port = Object.fromEntries(SERVED.map((p, i) => [p, bound.appPorts[i] as number])) as Record<PodPort, number>;
  return {
    dirs,
    mesh,
    proxyId: proxyCert.identity,
    x: new MeshTlsContext(xCert, mesh.anchorsPem),
    y: new MeshTlsContext(yCert, mesh.anchorsPem),
    foreignX,
    expiredX,
    apps,
    streams,
    watcher,
    proxy,
    port,
    meshPort: bound.meshPort,
    logs,
  };
}

/** Mesh TLS client options for the proxy's name (SNI = its identity) with `ctx`'s certificate. */
export function meshTls(lab: AttackLab, ctx: MeshTlsContext, alpn?: readonly string[]): ConnectionOptions {
  return ctx.clientOptions(lab.proxyId, alpn);
}

/** Mesh TLS from `ctx` (default X) to the listener of an application port. */
export function meshTo(lab: AttackLab, port: number, from = HEALTHY_FROM, ctx: MeshTlsContext = lab.x): TLSSocket {
  return tlsFrom(port, meshTls(lab, ctx), from);
}

/** A direct connection to the mesh port from `ctx` (default X) with a transport header, written first. */
export function transportTo(lab: AttackLab, header: TransportHeader | Buffer, from = HEALTHY_FROM, ctx: MeshTlsContext = lab.x): TLSSocket {
  const t = tlsFrom(lab.meshPort, meshTls(lab, ctx, [TRANSPORT_HEADER_ALPN]), from);
  t.write(Buffer.isBuffer(header) ? header : encodeTransportHeader(header));
  return t;
}

/** Publishes a policy for a pod port and checks that the watcher made it current (acknowledged). */
export function publish(lab: AttackLab, port: PodPort, value: InboundServer): void {
  lab.streams.publish(POD[port], value);
  assert.equal(lab.watcher.current(POD[port])?.server, value, `the policy of ${port} was not acknowledged`);
}

/** Stops everything the lab started. */
export async function closeLab(lab: AttackLab): Promise<void> {
  for (const s of clientSockets) s.destroy();
  await lab.proxy.close();
  lab.watcher.stop();
  await lab.apps.close();
  lab.dirs.cleanup();
}

// ---------------------------------------------------------------------------------------------
// The healthy client

/** What the healthy client did while an attack ran. */
export interface HealthReport {
  readonly ops: number;
  /** Failed or too slow operations, described. */
  readonly failures: string[];
  /** The slowest operation, in ms. */
  readonly maxMs: number;
}

const HEALTHY_KINDS = ['h1', 'detect', 'grpc', 'opaque', 'mesh-h1'] as const;
type HealthyKind = (typeof HEALTHY_KINDS)[number];

/** Waits until `p` has received `marker` (or closed, then rejects). */
function echoed(p: Probe, marker: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const check = () => {
      if (p.received().toString('latin1').includes(marker)) resolve();
    };
    p.socket.on('data', check);
    void p.closed.then(() => reject(new Error(`closed before the echo of ${marker} (error ${p.error() ?? 'none'})`)));
  });
}

/** One healthy operation of X, each on a fresh connection (new handshakes under attack, not just old sessions). */
export async function healthyOp(lab: AttackLab, kind: HealthyKind, n: number): Promise<void> {
  switch (kind) {
    case 'h1':
    case 'detect':
    case 'mesh-h1': {
      const path = `/healthy/${kind}/${n}`;
      const socket =
        kind === 'mesh-h1'
          ? () => transportTo(lab, { port: POD.h1, sessionProtocol: 'http1' })
          : () => meshTo(lab, kind === 'h1' ? lab.port.h1 : lab.port.detect);
      const r = await h1Request({ path, socket });
      if (r.status !== 200 || r.body !== `ok ${path}`) throw new Error(`${path}: ${r.status} ${JSON.stringify(r.body)} ${JSON.stringify(r.headers)}`);
      return;
    }
    case 'grpc': {
      const session = h2Session(lab.port.grpc, () => meshTo(lab, lab.port.grpc));
      try {
        const r = await h2Request(session, grpcHeaders(`/${GRPC_SERVICE}/Check${n}`), grpcFrame('ping'));
        if (Number(r.headers?.[':status']) !== 200 || r.trailers?.['grpc-status'] !== '0')
          throw new Error(`gRPC #${n}: ${JSON.stringify(r.headers)} ${JSON.stringify(r.trailers)} rst ${r.rstCode}`);
      } finally {
        session.destroy();
      }
      return;
    }
    case 'opaque': {
      const p = probe(transportTo(lab, { port: POD.opaque }));
      try {
        const marker = `HEALTHY ${n}\n`;
        p.socket.write(marker);
        await echoed(p, marker);
      } finally {
        p.destroy();
      }
      return;
    }
  }
}

/** Runs `loops` loops of healthy operations (every kind in turn) until `stop()`. */
export function startHealthy(lab: AttackLab, loops = 2): { warm(): Promise<void>; stop(): Promise<HealthReport> } {
  let running = true;
  let ops = 0;
  let maxMs = 0;
  let n = 0;
  const failures: string[] = [];
  let warmed: () => void = () => {};
  const warm = new Promise<void>((resolve) => {
    warmed = resolve;
  });
  const loop = async (offset: number): Promise<void> => {
    for (let i = offset; running; i++) {
      const kind = HEALTHY_KINDS[i % HEALTHY_KINDS.length] as HealthyKind;
      const id = n++;
      const t0 = performance.now();
      try {
        await within(healthyOp(lab, kind, id), 3 * HEALTHY_BOUND_MS, `healthy ${kind} #${id}`);
      } catch (e) {
        failures.push(`${kind} #${id}: ${e instanceof Error ? e.message : String(e)}`);
      }
      const ms = performance.now() - t0;
      ops++;
      maxMs = Math.max(maxMs, ms);
      if (ms >= HEALTHY_BOUND_MS) failures.push(`${kind} #${id} took ${Math.round(ms)} ms`);
      if (ops >= loops) warmed();
    }
  };
  const done = Promise.all(Array.from({ length: loops }, (_, i) => loop(i * 2)));
  return {
    warm: () => within(warm, WAIT_MS, 'the healthy client to warm up'),
    stop: async () => {
      running = false;
      warmed();
      await done;
      return { ops, failures, maxMs };
    },
  };
}

/** One healthy operation of every kind, in turn; throws on the first failure. */
export async function healthyRound(lab: AttackLab): Promise<void> {
  for (const kind of HEALTHY_KINDS) await within(healthyOp(lab, kind, -1), 3 * HEALTHY_BOUND_MS, `healthy ${kind} after the attack`);
}

/** Closes every client socket and waits for the proxy to hold no connection, forward nothing and watch nothing extra. */
export async function settle(lab: AttackLab): Promise<void> {
  for (const s of clientSockets) s.destroy();
  await waitFor(() => lab.proxy.stats().open === 0, `the proxy's open connections to return to 0 (${lab.proxy.stats().open} open)`, WAIT_MS);
  const st = lab.proxy.stats();
  assert.equal(st.forwarding, 0, 'forwarded connections left behind');
  assert.equal(st.policySubscriptions, 0, 'policy subscriptions left behind');
}

/**
 * Runs `attack` while the healthy client X works, then checks the four promises of the suite:
 * the attack's own assertions (inside `attack`), nothing unexplained reached the applications,
 * every healthy operation succeeded fast, and the proxy is back to no connections and still serves.
 */
/** The healthy client's report of the latest {@link underAttack}, for diagnostics. */
export let lastHealthReport: HealthReport | undefined;

export async function underAttack(lab: AttackLab, attack: () => Promise<void>, opts: { readonly minOps?: number } = {}): Promise<HealthReport> {
  lastHealthReport = undefined;
  const recordsMark = lab.apps.records.length;
  const logsMark = lab.logs.length;
  const healthy = startHealthy(lab);
  let report: HealthReport | undefined;
  try {
    // The attack starts once the healthy client is at work.
    await healthy.warm();
    await attack();
  } finally {
    report = await healthy.stop();
    lastHealthReport = report;
  }
  assert.deepEqual(report.failures, [], 'the healthy client was disturbed by the attack');
  assert.ok(report.ops >= (opts.minOps ?? 4), `only ${report.ops} healthy operations ran during the attack`);
  assert.deepEqual(lab.apps.foreignSince(recordsMark, lab.x.certificate.identity), [], 'the applications saw traffic the healthy client did not send');
  await settle(lab);
  await healthyRound(lab);
  await settle(lab);
  assert.deepEqual(lab.apps.foreignSince(recordsMark, lab.x.certificate.identity), []);
  const errors = lab.logs.slice(logsMark).filter((l) => typeof l.level === 'number' && l.level >= 50);
  assert.deepEqual(errors, [], 'the proxy logged errors (a detector threw, a listener failed…)');
  return report;
}

/** Waits for `p` to be closed by the proxy within `ms`; otherwise closes it and fails, naming `what`. */
/** Waits (bounded) until `check` stops throwing, then runs it once more so a failure reports its own message. */
export async function eventually(check: () => void, ms = 2000): Promise<void> {
  const deadline = performance.now() + ms;
  for (;;) {
    try {
      check();
      return;
    } catch (e) {
      if (performance.now() > deadline) throw e;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

export async function closedByProxy(p: Probe, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), ms);
  });
  const outcome = await Promise.race([p.closed.then(() => 'closed' as const), late]);
  clearTimeout(timer);
  if (outcome === 'late') {
    p.destroy();
    assert.fail(`${what}: still open after ${ms} ms (received ${JSON.stringify(p.received().toString('latin1').slice(0, 200))})`);
  }
}

/** Milliseconds from opening to closing of a closed probe. */
export function lifetimeMs(p: Probe): number {
  return (p.closedAt() ?? Number.NaN) - p.openedAt;
}
