/**
 * The `relay` suite's fixture: the application (HTTP/1 and HTTP/2 servers) and an `InboundProxy`
 * in local mode (plaintext, a policy admitting anyone on one route) in this process, and for each
 * protocol a client straight to the application and one through the proxy. Shared by the CPU
 * measurement (bench/relay.ts) and the old-generation one (bench/relay-garbage.ts, a child process
 * started with the proxy's node options).
 */
import { createServer as createHttp1Server } from 'node:http';
import { createServer as createHttp2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { ALL_NETWORKS, type CompiledServer, compileServer, type InboundServer } from '../src/core/index.js';
import { InboundProxy } from '../src/proxy/inbound/proxy.js';
import { installLeanAsyncBind, silentLogger } from '../src/shared/index.js';
import { grpcClient, http1Client, type LoadClient } from './mesh-load.js';

const HOST = '127.0.0.1';
/** The application's gRPC reply: uncompressed, 4-byte length, 4 bytes of payload. */
const GRPC_MESSAGE = Buffer.from([0, 0, 0, 0, 4, 0x0a, 0x02, 0x68, 0x69]);
const noop = (): void => {};

/** Admits anyone on every path (a route-level authorization), HTTP/1 and HTTP/2 detected. */
function openServer(): CompiledServer {
  const anyone = {
    meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: 'anyone' },
    networks: ALL_NETWORKS,
    authentication: { kind: 'unauthenticated' as const },
  };
  const server: InboundServer = {
    meta: { group: 'policy.linkerd.io', kind: 'Server', name: 'bench' },
    protocol: {
      kind: 'detect',
      timeoutMs: 1000,
      httpRoutes: [
        {
          meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'all' },
          hosts: [],
          authorizations: [anyone],
          rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
        },
      ],
    },
    authorizations: [],
  };
  return compileServer(server);
}

/** One protocol's pair of clients: the same requests, straight to the application and through the proxy. */
export interface RelayCase {
  readonly name: string;
  open(): Promise<{ readonly direct: LoadClient; readonly proxied: LoadClient }>;
}

/** The running application and proxy. */
export interface RelayFixture {
  readonly cases: readonly RelayCase[];
  close(): Promise<void>;
}

/** Starts the application and the proxy on loopback. */
export async function startRelayFixture(): Promise<RelayFixture> {
  // As in the proxy process (`ward proxy` installs it; so does grpcClient): node's own bind costs
  // ~10 µs per HTTP/2 request.
  installLeanAsyncBind();
  const app1 = createHttp1Server({ keepAliveTimeout: 60_000 }, (req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '4' });
      res.end('pong');
    });
  });
  const app2 = createHttp2Server();
  app2.on('stream', (stream) => {
    stream.on('data', noop);
    stream.on('end', () => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(GRPC_MESSAGE);
    });
  });
  app2.on('sessionError', noop);
  await Promise.all([new Promise<void>((r) => app1.listen(0, HOST, r)), new Promise<void>((r) => app2.listen(0, HOST, r))]);
  const app1Port = (app1.address() as AddressInfo).port;
  const app2Port = (app2.address() as AddressInfo).port;

  const policy = openServer();
  const proxy = new InboundProxy({
    identity: 'bench.default.serviceaccount.identity.linkerd.cluster.local',
    // Plaintext only: no ClientHello ever arrives, so the TLS server is never used.
    tls: { serverOptions: () => ({}) },
    policies: { current: () => policy, subscribe: () => noop },
    appHost: HOST,
    // Each listener serves the pod port its application listens on (the application port is the pod port).
    listen: { host: HOST, meshPort: 0, appPorts: [0, 0], policyPorts: [app1Port, app2Port] },
    logger: silentLogger(),
  });
  let bound: Awaited<ReturnType<InboundProxy['start']>>;
  try {
    bound = await proxy.start();
  } catch (e) {
    app1.close();
    app2.close();
    throw e;
  }
  const [h1Port, h2Port] = bound.appPorts as [number, number];
  return {
    cases: [
      {
        name: 'inbound/http1/relay',
        open: () =>
          Promise.resolve({
            direct: http1Client({ kind: 'direct', host: HOST, port: app1Port }, 1),
            proxied: http1Client({ kind: 'direct', host: HOST, port: h1Port }, 1),
          }),
      },
      {
        name: 'inbound/grpc/relay',
        open: async () => ({
          direct: await grpcClient({ kind: 'direct', host: HOST, port: app2Port }),
          proxied: await grpcClient({ kind: 'direct', host: HOST, port: h2Port }),
        }),
      },
    ],
    close: async () => {
      await proxy.close();
      app1.close();
      app2.close();
    },
  };
}
