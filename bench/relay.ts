/**
 * Suite `relay`: the CPU the inbound proxy spends relaying one request, measured in one process
 * so that other processes' scheduling stays out of it (the mesh suite's per-process CPU at a
 * fixed rate moves by ±15 % between rounds on a shared machine, which hides a 5-10 % change;
 * this suite's runs mostly agree within ~7 %).
 *
 * A client, the application (HTTP/1 and HTTP/2 servers) and an `InboundProxy` in local mode
 * (plaintext, a policy admitting anyone on one route) share this process. The client sends
 * requests one at a time, as at a low fixed rate (no batching), first straight to the
 * application, then through the proxy; the difference in `process.cpuUsage()` per request is
 * what the proxy added: detection is done once per connection, so this is the per-request path
 * (policy, headers, the upstream request and both bodies' relay). Each case alternates direct
 * and proxied blocks and reports the median of the blocks' differences.
 */
import { createServer as createHttp1Server } from 'node:http';
import { createServer as createHttp2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { ALL_NETWORKS, type CompiledServer, compileServer, type InboundServer } from '../src/core/index.js';
import { InboundProxy } from '../src/proxy/index.js';
import { installLeanAsyncBind, silentLogger } from '../src/shared/index.js';
import { type BenchResult, median } from './harness.js';
import { grpcClient, http1Client, type LoadClient } from './mesh-load.js';

const HOST = '127.0.0.1';
const BLOCKS = 7;
const PER_BLOCK = 2000;
const WARMUP = 2000;
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

/** CPU microseconds per request over `n` sequential requests. */
async function cpuPerRequest(c: LoadClient, n: number): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) await c.request();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / n;
}

async function measure(name: string, direct: LoadClient, proxied: LoadClient): Promise<BenchResult> {
  await cpuPerRequest(direct, WARMUP);
  await cpuPerRequest(proxied, WARMUP);
  const added: number[] = [];
  const directUs: number[] = [];
  for (let b = 0; b < BLOCKS; b++) {
    const d = await cpuPerRequest(direct, PER_BLOCK);
    const p = await cpuPerRequest(proxied, PER_BLOCK);
    directUs.push(d);
    added.push(p - d);
  }
  const addedUs = median(added);
  process.stderr.write(`relay: ${name} ${addedUs.toFixed(1)} µs CPU per request added (blocks: ${added.map((a) => a.toFixed(0)).join(' ')})\n`);
  return {
    name,
    nsPerOp: addedUs * 1000,
    opsPerSec: 1e6 / addedUs,
    addedCpuUs: Math.round(addedUs * 10) / 10,
    directCpuUs: Math.round(median(directUs) * 10) / 10,
    requests: BLOCKS * PER_BLOCK,
  };
}

/** Runs the suite. */
export async function runRelaySuite(): Promise<BenchResult[]> {
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
  const bound = await proxy.start();
  const [h1Port, h2Port] = bound.appPorts as [number, number];

  const results: BenchResult[] = [];
  try {
    const h1Direct = http1Client({ kind: 'direct', host: HOST, port: app1Port }, 1);
    const h1Proxied = http1Client({ kind: 'direct', host: HOST, port: h1Port }, 1);
    results.push(await measure('inbound/http1/relay', h1Direct, h1Proxied));
    h1Direct.close();
    h1Proxied.close();
    const gDirect = await grpcClient({ kind: 'direct', host: HOST, port: app2Port });
    const gProxied = await grpcClient({ kind: 'direct', host: HOST, port: h2Port });
    results.push(await measure('inbound/grpc/relay', gDirect, gProxied));
    gDirect.close();
    gProxied.close();
  } finally {
    await proxy.close();
    app1.close();
    app2.close();
  }
  return results;
}
