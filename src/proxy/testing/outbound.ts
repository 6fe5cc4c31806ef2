/**
 * The server side for the outbound proxy's tests (not part of the public surface): identity
 * material from an in-process CA and a real {@link InboundProxy} on 127.0.0.1 whose mesh port
 * serves three pod ports —
 * - 8080: HTTP/1 (`http1`), an HTTP/1 application, only the `client` identity admitted;
 * - 8081: HTTP/2 (`http2`), an HTTP/2 application (plain and gRPC-style), only `client` admitted;
 * - 9000: `opaque`, a TCP echo application, any meshed identity admitted.
 * The applications record what reached them; policies are fixed (a fake watcher).
 */
import { once } from 'node:events';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttp2Server, type IncomingHttpHeaders as Http2Headers, type Http2Server } from 'node:http2';
import { type AddressInfo, createServer as createNetServer, type Socket, type Server as TcpServer } from 'node:net';
import type { DestinationEndpoint } from '../../api/index.js';
import type { Authorization, HttpRoute, InboundServer, ProxyProtocol } from '../../core/index.js';
import type { WorkloadCertificate } from '../../identity/index.js';
import { InboundProxy } from '../inbound/proxy.js';
import { MeshTlsContext } from '../tls/context.js';
import { mkTestMesh, type TempDirs, type TestMesh } from './identity.js';
import { FakePolicies } from './policies.js';

/** Where the test endpoints and applications live. */
export const HOST = '127.0.0.1';
/** Pod ports the server side serves through its mesh port. */
export const POD_HTTP1 = 8080;
export const POD_HTTP2 = 8081;
export const POD_TCP = 9000;

/** What an application saw of one request. */
export interface SeenRequest {
  readonly version: '1' | '2';
  readonly method: string;
  readonly path: string;
  /** Header names lower-cased, every value. */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  body: string;
}

/** The server side of a test mesh; `close()` stops everything. */
export interface ServerSide {
  readonly mesh: TestMesh;
  readonly serverCert: WorkloadCertificate;
  readonly clientCert: WorkloadCertificate;
  readonly otherCert: WorkloadCertificate;
  readonly inbound: InboundProxy;
  readonly meshPort: number;
  /** Requests the HTTP applications saw, in order. */
  readonly seen: SeenRequest[];
  /** Connections the echo application accepted. */
  readonly echoConnections: () => number;
  /** A meshed endpoint of pod port `port` (identity of the server, as the controller announces it). */
  endpoint(port: number, extra?: Partial<DestinationEndpoint>): DestinationEndpoint;
  close(): Promise<void>;
}

const ALL_NETWORKS = [
  { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
  { net: { ip: '::', prefixLen: 0 }, except: [] },
];

function authz(name: string, authentication: Authorization['authentication']): Authorization {
  return { meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name }, networks: ALL_NETWORKS, authentication };
}

const everything: HttpRoute = {
  meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'all' },
  hosts: [],
  authorizations: [],
  rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
};

function server(name: string, protocol: ProxyProtocol, authorizations: Authorization[]): InboundServer {
  return { meta: { group: 'policy.linkerd.io', kind: 'Server', name }, protocol, authorizations };
}

async function listen<S extends HttpServer | Http2Server | TcpServer>(s: S): Promise<number> {
  s.listen(0, HOST);
  await once(s, 'listening');
  return (s.address() as AddressInfo).port;
}

function close(s: HttpServer | Http2Server | TcpServer): Promise<void> {
  return new Promise((resolve) => s.close(() => resolve()));
}

/** Starts the server side: certificates for demo/{server,client,other}, applications and the inbound proxy. */
export async function startServerSide(dirs: TempDirs): Promise<ServerSide> {
  const mesh = await mkTestMesh(dirs);
  const [serverCert, clientCert, otherCert] = await Promise.all([mesh.issue('demo', 'server'), mesh.issue('demo', 'client'), mesh.issue('demo', 'other')]);
  const seen: SeenRequest[] = [];

  const app1 = createHttpServer((req, res) => {
    const s: SeenRequest = { version: '1', method: req.method ?? '', path: req.url ?? '', headers: { ...req.headers }, body: '' };
    seen.push(s);
    req.setEncoding('latin1');
    req.on('data', (c: string) => {
      s.body += c;
    });
    req.on('end', () => {
      if (req.url === '/trailers') {
        res.writeHead(200, { trailer: 'x-checksum' });
        res.write('with trailers');
        res.addTrailers({ 'x-checksum': 'abc123' });
        res.end();
        return;
      }
      res.setHeader('x-app', 'h1');
      res.setHeader('content-type', 'text/plain');
      res.end(`hello ${req.url} ${s.body}`);
    });
  });
  const app2 = createHttp2Server();
  app2.on('stream', (stream, headers: Http2Headers) => {
    stream.on('error', () => {});
    const s: SeenRequest = { version: '2', method: String(headers[':method']), path: String(headers[':path']), headers: { ...headers }, body: '' };
    seen.push(s);
    stream.on('data', (c: Buffer) => {
      s.body += c.toString('latin1');
    });
    const grpc = String(headers['content-type']).startsWith('application/grpc');
    stream.on('end', () => {
      if (grpc) {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': 'ok' }));
        stream.end(Buffer.from([0, 0, 0, 0, 4, 0x70, 0x6f, 0x6e, 0x67]));
        return;
      }
      stream.respond({ ':status': 200, 'x-app': 'h2' });
      stream.end(`hello h2 ${headers[':path']}`);
    });
  });
  let echoConnections = 0;
  const echo = createNetServer({ allowHalfOpen: true }, (s: Socket) => {
    echoConnections++;
    s.on('error', () => {});
    s.pipe(s);
  });
  const [p1, p2, pTcp] = await Promise.all([listen(app1), listen(app2), listen(echo)]);

  const policies = new FakePolicies();
  const onlyClient = authz('only-client', { kind: 'tlsAuthenticated', identities: [clientCert.identity], suffixes: [] });
  policies.set(POD_HTTP1, server('http1', { kind: 'http1', routes: [everything] }, [onlyClient]));
  policies.set(POD_HTTP2, server('http2', { kind: 'http2', routes: [everything] }, [onlyClient]));
  policies.set(POD_TCP, server('tcp', { kind: 'opaque' }, [authz('meshed', { kind: 'tlsUnauthenticated' })]));
  const appPorts = new Map([
    [POD_HTTP1, p1],
    [POD_HTTP2, p2],
    [POD_TCP, pTcp],
  ]);
  const inbound = new InboundProxy({
    identity: serverCert.identity,
    tls: new MeshTlsContext(serverCert, mesh.anchorsPem),
    policies,
    appHost: HOST,
    appPortOf: (p) => appPorts.get(p) ?? 1,
    listen: { host: HOST, meshPort: 0, appPorts: [] },
    detectTimeoutMs: 2000,
  });
  const { meshPort } = await inbound.start();
  return {
    mesh,
    serverCert,
    clientCert,
    otherCert,
    inbound,
    meshPort,
    seen,
    echoConnections: () => echoConnections,
    endpoint: (port, extra = {}) => ({
      ip: HOST,
      port,
      weight: 10_000,
      labels: {},
      identity: serverCert.identity,
      serverName: serverCert.identity,
      protocolHint: 'h2',
      ...extra,
    }),
    close: async () => {
      app1.closeAllConnections();
      await inbound.close();
      await Promise.all([close(app1), close(app2), close(echo)]);
    },
  };
}
