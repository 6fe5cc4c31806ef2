/**
 * startProxy against an in-process controller (identity and inbound policy gRPC services over TLS
 * on 127.0.0.1, backed by a CertificateAuthority and scripted policy cells) and a real application:
 * readiness, enforcement on pod ports served on ephemeral local ports, the mesh port, policy
 * updates, `/debug/policies` and `/metrics`. Clients connect from 127.0.0.2 so that the
 * proxy-added `default:localhost` does not admit them.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer, request as httpRequest } from 'node:http';
import { type AddressInfo, createServer as createTcpServer, connect as netConnect, type Socket, type Server as TcpServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type TLSSocket, connect as tlsConnect } from 'node:tls';
import {
  type DestinationEvent,
  type GrpcServerHandle,
  identityService,
  inboundPolicyService,
  type StreamHandlers,
  serverToProtoJson,
  startGrpcServer,
  type WireResult,
} from '../api/index.js';
import { type Authorization, DEFAULT_HTTP_ROUTE, defaultMeta, type InboundServer, probeRoute } from '../core/index.js';
import type { WorkloadCertificate } from '../identity/index.js';
import { type RunningProxy, startProxy } from './main.js';
import { MetricsRegistry } from './metrics/cells.js';
import { OutboundConnector } from './outbound/connector.js';
import { OutboundProxy } from './outbound/proxy.js';
import { DestinationCache, type DestinationSource } from './outbound/resolver.js';
import { mkTestMesh, TempDirs, type TestMesh, waitFor, within } from './testing/identity.js';
import { FakeDiscovery } from './testing/policies.js';
import { MeshTlsContext, TRANSPORT_HEADER_ALPN } from './tls/context.js';
import type { OriginalDstReader } from './transport/original-dst.js';
import { encodeTransportHeader, type TransportHeader } from './transport/transport-header.js';

const HOST = '127.0.0.1';
const FROM = '127.0.0.2';
const WAIT_MS = 10_000;
const CP = 'linkerd.serviceaccount.identity.linkerd.cluster.local';

// === fixtures ===

const discovery = new FakeDiscovery();
function setPolicy(port: number, value: InboundServer): void {
  const cell = discovery.lookup('emojivoto', 'web-0', port);
  if (cell === undefined) discovery.add('emojivoto', 'web-0', port, value);
  else cell.publish(value);
}

const ALL: Authorization['networks'] = [{ net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] }];
const meshAuthz = (name: string, identities: string[]): Authorization => ({
  meta: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name },
  networks: ALL,
  authentication: { kind: 'tlsAuthenticated', identities, suffixes: [] },
});
const defaultRoute = {
  meta: defaultMeta('default'),
  hosts: [],
  authorizations: [],
  rules: [{ matches: [{ path: { kind: 'prefix' as const, value: '/' }, headers: [], queryParams: [] }], filters: [] }],
};
const httpServer = (identities: string[]): InboundServer => ({
  meta: { group: 'policy.linkerd.io', kind: 'server', name: 'web-http' },
  protocol: { kind: 'http1', routes: [defaultRoute] },
  authorizations: [meshAuthz('web-http-authz', identities)],
});
const tcpServer = (identities: string[]): InboundServer => ({
  meta: { group: 'policy.linkerd.io', kind: 'server', name: 'web-tcp' },
  protocol: { kind: 'opaque' },
  authorizations: [meshAuthz('web-tcp-authz', identities)],
});
const adminPolicy: InboundServer = {
  meta: defaultMeta('all-unauthenticated'),
  protocol: { kind: 'detect', timeoutMs: 10_000, httpRoutes: [defaultRoute] },
  authorizations: [{ meta: defaultMeta('all-unauthenticated'), networks: ALL, authentication: { kind: 'unauthenticated' } }],
};

// === clients ===

interface Reply {
  readonly status: number | 'closed';
  readonly body: string;
}

function get(port: number, path: string, from = FROM, host = HOST): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host, port, path, localAddress: from, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', (e: NodeJS.ErrnoException) => (e.code === 'ECONNRESET' ? resolve({ status: 'closed', body: '' }) : reject(e)));
    req.setTimeout(WAIT_MS, () => req.destroy(new Error(`timeout on ${path}`)));
    req.end();
  });
}

/** A mesh TLS connection from 127.0.0.2 to the mesh port, with `header` written; undefined if the handshake fails. */
async function meshConnect(port: number, cert: WorkloadCertificate, header: TransportHeader): Promise<TLSSocket | undefined> {
  const tcp = netConnect({ host: HOST, port, localAddress: FROM });
  tcp.on('error', () => {});
  const ctx = new MeshTlsContext(cert, mesh.anchorsPem);
  const s = tlsConnect({ ...ctx.clientOptions(PROXY_ID, [TRANSPORT_HEADER_ALPN]), socket: tcp });
  s.on('error', () => {});
  const ok = await within(
    new Promise<boolean>((resolve) => {
      s.once('secureConnect', () => resolve(true));
      s.once('close', () => resolve(false));
    }),
    WAIT_MS,
    'the mesh handshake',
  );
  if (!ok) return undefined;
  s.write(encodeTransportHeader(header));
  return s;
}

/** One HTTP/1.1 request on a stream; resolves with the status and body once the proxy closes it. */
async function httpOver(s: Socket, path: string): Promise<Reply> {
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  s.write(`GET ${path} HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n`);
  await within(once(s, 'close'), WAIT_MS, 'the HTTP response');
  const text = Buffer.concat(chunks).toString('utf8');
  const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
  return { status: m === null ? 'closed' : Number(m[1]), body: text.slice(text.indexOf('\r\n\r\n') + 4) };
}

// === suite ===

const dirs = new TempDirs();
let mesh: TestMesh;
let PROXY_ID: string;
let CLIENT_ID: string;
let clientCert: WorkloadCertificate;
let otherCert: WorkloadCertificate;
let grpc: GrpcServerHandle;
let outage = true;
let httpApp: HttpServer;
let tcpApp: TcpServer;
const seenClientIds: (string | undefined)[] = [];
let tokenFile: string;
let proxy: RunningProxy;

before(async () => {
  mesh = await mkTestMesh(dirs);
  PROXY_ID = mesh.identityOf('emojivoto', 'web');
  CLIENT_ID = mesh.identityOf('emojivoto', 'client');
  [clientCert, otherCert] = await Promise.all([mesh.issue('emojivoto', 'client'), mesh.issue('emojivoto', 'other')]);
  const creds = await mesh.ca.issueServerCertificate([`linkerd-identity.${CP}`, `linkerd-destination.${CP}`]);
  grpc = await startGrpcServer({
    host: HOST,
    port: 0,
    tls: { certPem: creds.certPem + creds.chainPem, keyPem: creds.keyPem },
    services: [
      identityService(async (req) => (outage ? { ok: false, code: 'UNAVAILABLE', message: 'issuer not loaded' } : mesh.ca.certify(req))),
      inboundPolicyService(discovery),
    ],
  });
  httpApp = createHttpServer((req, res) => {
    seenClientIds.push(req.headers['l5d-client-id'] as string | undefined);
    res.end(`hello ${req.url}`);
  });
  tcpApp = createTcpServer((s) => {
    s.on('error', () => {});
    s.pipe(s);
  });
  await Promise.all([once(httpApp.listen(0, HOST), 'listening'), once(tcpApp.listen(0, HOST), 'listening')]);
  tokenFile = join(dirs.make(), 'token');
  writeFileSync(tokenFile, `${new TextDecoder().decode(mesh.token('emojivoto', 'web'))}\n`);
});

after(async () => {
  await proxy?.close();
  await grpc?.close(0);
  httpApp?.closeAllConnections();
  await Promise.all([new Promise((r) => httpApp?.close(r)), new Promise((r) => tcpApp?.close(r))]);
  dirs.cleanup();
});

/** The emojivoto/web-0 proxy's identity and controller settings, shared by every startProxy here. */
function podIdentity() {
  return {
    namespace: 'emojivoto',
    pod: 'web-0',
    serviceAccount: 'web',
    trustDomain: 'cluster.local',
    controlPlaneNamespace: 'linkerd',
    trustAnchorsPem: mesh.anchorsPem,
    tokenFile,
    identityAddress: `${HOST}:${grpc.port}`,
    policyAddress: `${HOST}:${grpc.port}`,
  };
}

describe('startProxy', () => {
  it('listens at once and becomes ready only with a certificate and a policy for every port', async () => {
    proxy = await startProxy({
      ...podIdentity(),
      listenHost: HOST,
      appHost: HOST,
      inbound: [
        { podPort: 8080, listenPort: 0, appPort: (httpApp.address() as AddressInfo).port },
        { podPort: 9000, listenPort: 0, appPort: (tcpApp.address() as AddressInfo).port },
      ],
      mesh: { host: HOST, port: 0 },
      admin: { host: HOST, port: 0 },
      registry: new MetricsRegistry(),
      policyBackoff: { minMs: 10, maxMs: 100, jitter: 0 },
      identityBackoff: { minMs: 20, maxMs: 100, jitter: 0 },
    });
    assert.equal(proxy.identity, PROXY_ID);
    const [http, tcp] = proxy.ports.inbound;
    assert.ok(http !== undefined && tcp !== undefined && http.listenPort > 0 && tcp.listenPort > 0);
    assert.equal(http.podPort, 8080);

    // Nothing from the controller yet: not ready, live, the admin fallback applies.
    assert.equal(proxy.isReady(), false);
    assert.equal((await get(proxy.ports.admin, '/ready')).status, 503);
    assert.equal((await get(proxy.ports.admin, '/live')).status, 200);
    assert.equal((await get(proxy.ports.admin, '/metrics')).status, 403);
    const before = proxy.debugPolicies();
    assert.equal(before.certificate, null);
    assert.deepEqual(
      before.ports.map((p) => [p.port, p.policy, p.fallback ?? false]),
      [
        [8080, null, false],
        [9000, null, false],
        [4191, null, true],
      ],
    );
    // No certificate: mesh TLS is refused; no policy: the app port fails closed.
    assert.equal(await meshConnect(proxy.ports.mesh, clientCert, { port: 9000 }), undefined);
    assert.equal((await get(http.listenPort, '/')).status, 'closed');

    outage = false;
    await waitFor(() => proxy.debugPolicies().certificate !== null, 'the certificate', WAIT_MS);
    assert.equal(proxy.isReady(), false, 'no policy yet');
    setPolicy(8080, httpServer([CLIENT_ID]));
    setPolicy(9000, tcpServer([CLIENT_ID]));
    assert.equal(proxy.isReady(), false, 'no admin policy yet');
    setPolicy(4191, adminPolicy);
    await within(proxy.ready(), WAIT_MS, 'readiness');
    assert.equal((await get(proxy.ports.admin, '/ready')).status, 200);
    assert.equal((await get(proxy.ports.admin, '/metrics')).status, 200);
  });

  it("enforces each pod port's policy on its local listener and through the mesh port", async () => {
    const [http] = proxy.ports.inbound;
    assert.ok(http !== undefined);
    // Plaintext: the port requires a mesh identity.
    assert.equal((await get(http.listenPort, '/')).status, 403);

    const ok = await meshConnect(proxy.ports.mesh, clientCert, { port: 8080, sessionProtocol: 'http1' });
    assert.ok(ok !== undefined);
    const reply = await httpOver(ok, '/x');
    assert.deepEqual(reply, { status: 200, body: 'hello /x' });
    assert.equal(seenClientIds.at(-1), CLIENT_ID);

    const other = await meshConnect(proxy.ports.mesh, otherCert, { port: 8080, sessionProtocol: 'http1' });
    assert.ok(other !== undefined);
    assert.equal((await httpOver(other, '/x')).status, 403);

    // Opaque: a stream; then the policy revokes the client and the connection is terminated.
    const tcp = await meshConnect(proxy.ports.mesh, clientCert, { port: 9000 });
    assert.ok(tcp !== undefined);
    const echoed: Buffer[] = [];
    tcp.on('data', (c: Buffer) => echoed.push(c));
    tcp.write('ping');
    await waitFor(() => Buffer.concat(echoed).toString() === 'ping', 'the echo', WAIT_MS);
    const closed = once(tcp, 'close');
    setPolicy(9000, tcpServer([]));
    await within(closed, WAIT_MS, 'the termination');
    const metrics = (await get(proxy.ports.admin, '/metrics')).body;
    assert.match(metrics, /^inbound_tcp_authz_terminate_total\{[^}]*srv_name="web-tcp",srv_port="9000",tls="true",client_id="client\.emojivoto\.[^"]*"\} 1$/m);
    assert.match(metrics, /^inbound_http_authz_deny_total\{[^}]*target_port="8080"[^}]*tls="no_identity"[^}]*\} 1$/m);
    assert.match(metrics, /^inbound_http_authz_allow_total\{[^}]*srv_name="web-http"[^}]*client_id="client\.[^}]*authz_name="web-http-authz"\} 1$/m);
    // Upstream's identity families: a certificate in use that expires later, refreshed once, no failure.
    const sample = (re: RegExp) => Number(re.exec(metrics)?.[1]);
    const nowS = Date.now() / 1000;
    assert.ok(sample(/^control_identity_cert_expiration_timestamp_seconds (\S+)$/m) > nowS, metrics);
    const refreshedS = sample(/^control_identity_cert_refresh_timestamp_seconds (\S+)$/m);
    assert.ok(refreshedS <= nowS && refreshedS > nowS - 600, metrics);
    assert.match(metrics, /^control_identity_cert_refreshes_total\{result="ok"\} 1$/m);
    assert.match(metrics, /^control_identity_cert_refreshes_total\{result="error"\} 0$/m);
    assert.equal(proxy.inbound.stats().tcpAuthzTerminate, 1);
    // The HTTP stack counts into the inbound proxy's counters too.
    assert.equal(proxy.inbound.stats().httpAuthzAllow, 1);
    assert.equal(proxy.inbound.stats().httpAuthzDeny, 2);
  });

  it('shows the enforced policies and the certificate in /debug/policies', async () => {
    const res = await get(proxy.ports.admin, '/debug/policies');
    assert.equal(res.status, 200);
    const doc = JSON.parse(res.body) as ReturnType<RunningProxy['debugPolicies']>;
    assert.equal(doc.identity, PROXY_ID);
    assert.equal(doc.ready, true);
    assert.equal(doc.certificate?.identity, PROXY_ID);
    const cert = proxy.debugPolicies().certificate;
    assert.ok(cert !== null && Date.parse(cert.notAfter) > Date.now());
    const [http] = proxy.ports.inbound;
    assert.deepEqual(doc.ports[0], {
      port: 8080,
      listen: `${HOST}:${http?.listenPort}`,
      app: `${HOST}:${(httpApp.address() as AddressInfo).port}`,
      policy: serverToProtoJson(httpServer([CLIENT_ID])),
    });
    assert.deepEqual(doc.ports[1]?.policy, serverToProtoJson(tcpServer([])));
    assert.deepEqual(doc.ports[2]?.policy, serverToProtoJson(adminPolicy));
    assert.match(cert.serial, /^[0-9A-F]+$/);
    assert.equal(typeof new X509Certificate(clientCert.certPem).serialNumber, 'string');
  });

  it('closes everything, and ready() then rejects', async () => {
    const admin = proxy.ports.admin;
    await proxy.close();
    await proxy.close();
    await assert.rejects(proxy.ready(), (e: unknown) => (e as { code?: string }).code === 'ERR_PROXY_CLOSED');
    await assert.rejects(get(admin, '/live'), (e: unknown) => (e as { code?: string }).code === 'ECONNREFUSED');
  });
});

/** Transparent mode's pod address: the mesh listener's, where redirected connections arrive. */
const POD_IP = '127.0.0.3';

describe('startProxy in transparent mode (scripted original destinations)', () => {
  /** The port the next accepted connection was headed for; undefined: not redirected. */
  let redirect: number | undefined;
  /** The address its original destination names (the client's choice: the proxy must not connect there). */
  let podAddress = POD_IP;
  const reader: OriginalDstReader = (s) =>
    redirect === undefined
      ? { ok: true, value: { address: s.localAddress as string, port: s.localPort as number, redirected: false } }
      : { ok: true, value: { address: podAddress, port: redirect, redirected: true } };
  let transparent: RunningProxy;
  const DISCOVERY_MS = 300;

  /** The pod's application on its own address (the one on HOST stands for a loopback-only service). */
  let podApp: HttpServer;

  after(async () => {
    await transparent?.close();
    podApp?.close();
  });

  it('discovers an undeclared port on its first connection, shows it in /debug/policies, and stays ready without it', async () => {
    outage = false;
    setPolicy(8080, httpServer([CLIENT_ID]));
    setPolicy(4191, adminPolicy);
    const registry = new MetricsRegistry();
    transparent = await startProxy({
      ...podIdentity(),
      // The pod's configured address; the mesh listener (where every port arrives) is on POD_IP.
      listenHost: '127.0.0.5',
      appHost: HOST,
      inbound: [{ podPort: 8080, listenPort: 0, appPort: (httpApp.address() as AddressInfo).port }],
      mesh: { host: POD_IP, port: 0 },
      admin: { host: HOST, port: 0 },
      registry,
      transparent: true,
      originalDstReader: reader,
      policyBackoff: { minMs: 10, maxMs: 100, jitter: 0 },
      policyDiscovery: { discoveryTimeoutMs: DISCOVERY_MS },
    });
    await within(transparent.ready(), WAIT_MS, 'readiness');
    const meshPort = transparent.ports.mesh;

    // An application port on the pod's address that is not declared: the controller serves the
    // pod's default for it, and the proxy forwards to the address the connection arrived on.
    podApp = createHttpServer((req, res) => {
      req.resume();
      res.end(`pod ${req.url}`);
    });
    await once(podApp.listen(0, POD_IP), 'listening');
    const undeclared = (podApp.address() as AddressInfo).port;
    const open: InboundServer = { ...adminPolicy, meta: defaultMeta('all-unauthenticated') };
    setPolicy(undeclared, open);
    redirect = undeclared;
    assert.deepEqual(await get(meshPort, '/lazy', FROM, POD_IP), { status: 200, body: 'pod /lazy' });
    // Not the declared ports' host: the app on HOST only (like a service a pod binds to loopback)
    // is not reached through an undeclared port…
    const loopbackOnly = (httpApp.address() as AddressInfo).port;
    setPolicy(loopbackOnly, open);
    redirect = loopbackOnly;
    assert.equal((await get(meshPort, '/loopback-only', FROM, POD_IP)).status, 502);
    // …nor when the original destination names it (a packet for 127.0.0.1 sent to the pod's
    // interface is redirected too): that address is the client's choice, never connected to.
    podAddress = HOST;
    assert.equal((await get(meshPort, '/loopback-claimed', FROM, POD_IP)).status, 502);
    podAddress = POD_IP;

    // A port the controller has nothing for: closed after the bound, the proxy stays ready.
    // Meanwhile the wait shows in /metrics.
    const unknown = 7999;
    const startedAt = Date.now();
    redirect = unknown;
    const waiting = get(meshPort, '/unknown', FROM, POD_IP);
    await waitFor(() => registry.render().includes('\ninbound_policy_discovery_waiting_connections 1\n'), 'the waiting connection in /metrics', WAIT_MS);
    assert.equal((await waiting).status, 'closed');
    assert.ok(Date.now() - startedAt >= DISCOVERY_MS - 20, 'closed only after the discovery bound');
    assert.equal(transparent.isReady(), true);
    redirect = undefined;
    const metrics = (await get(transparent.ports.admin, '/metrics')).body;
    assert.match(metrics, /\ninbound_policy_discovery_waiting_connections 0\n/);
    assert.match(metrics, /\ninbound_policy_discovered_ports 3\n/, 'the undeclared, loopback-only and unknown ports');

    const res = await get(transparent.ports.admin, '/debug/policies');
    assert.equal(res.status, 200);
    const doc = JSON.parse(res.body) as ReturnType<RunningProxy['debugPolicies']>;
    assert.equal(doc.ready, true);
    assert.deepEqual(
      doc.ports.map((p) => [p.port, p.discovered ?? false]),
      [
        [8080, false],
        [4191, false],
        [undeclared, true],
        [loopbackOnly, true],
        [unknown, true],
      ],
    );
    assert.equal(doc.ports[0]?.listen, `${POD_IP}:${meshPort}`, 'a declared port arrives through the mesh listener too');
    assert.deepEqual(doc.ports[2], {
      port: undeclared,
      listen: `${POD_IP}:${meshPort}`,
      app: `127.0.0.5:${undeclared}`,
      policy: serverToProtoJson(open),
      discovered: true,
    });
    assert.equal(doc.ports[4]?.policy, null, 'no policy: failing closed');
  });
});

describe('a meshed scrape of the admin port', () => {
  /** Answers Destination lookups from a table, as the controller would for a pod address. */
  class TableSource implements DestinationSource {
    readonly table = new Map<string, DestinationEvent>();
    get(path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>): () => void {
      queueMicrotask(() => handlers.onMessage({ ok: true, value: this.table.get(path) ?? { kind: 'noEndpoints', exists: false } }));
      return () => {};
    }
  }

  let scraped: RunningProxy;
  const outbounds: { proxy: OutboundProxy; connector: OutboundConnector; cache: DestinationCache }[] = [];
  let PROM_ID: string;
  let promCert: WorkloadCertificate;

  after(async () => {
    for (const o of outbounds) {
      await o.proxy.close();
      o.connector.close();
      o.cache.close();
    }
    await scraped?.close();
  });

  /**
   * The outbound proxy of a meshed scraper with `cert` (in-process, as `ward proxy` runs it),
   * resolving the scraped pod's address 127.0.0.1:4191 to a meshed endpoint (the pod's identity,
   * as the controller announces a meshed pod's port) whose proxy's mesh port is `meshPort`.
   */
  async function scraperOutbound(cert: WorkloadCertificate, meshPort: number): Promise<number> {
    const source = new TableSource();
    source.table.set(`${HOST}:4191`, {
      kind: 'add',
      endpoints: [{ ip: HOST, port: 4191, weight: 10_000, labels: {}, identity: PROXY_ID, serverName: PROXY_ID, protocolHint: 'h2' }],
      setLabels: {},
    });
    const cache = new DestinationCache({ source, namespace: 'monitoring', lookupTimeoutMs: 2000 });
    const connector = new OutboundConnector({ tls: new MeshTlsContext(cert, mesh.anchorsPem), meshPortOf: () => meshPort, localAddress: FROM });
    const proxy = new OutboundProxy({ listen: { host: HOST, port: 0 }, resolver: cache, connector });
    outbounds.push({ proxy, connector, cache });
    return proxy.start();
  }

  /** GET `url` (absolute form) through the forward proxy on `port`. */
  function viaOutbound(port: number, url: string): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: HOST, port, path: url, agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          body += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.setTimeout(WAIT_MS, () => req.destroy(new Error(`timeout on ${url}`)));
      req.end();
    });
  }

  it('admits the authorized identity through the mesh port and directly, denies another (403), serves plaintext probes', async () => {
    outage = false;
    PROM_ID = mesh.identityOf('monitoring', 'prometheus');
    promCert = await mesh.issue('monitoring', 'prometheus');
    const otherScraper = await mesh.issue('monitoring', 'grafana');
    setPolicy(8080, httpServer([CLIENT_ID]));
    setPolicy(9000, tcpServer([CLIENT_ID]));
    // The admin port admits the Prometheus identity only; the probes from anywhere.
    setPolicy(4191, {
      meta: { group: 'policy.linkerd.io', kind: 'server', name: 'linkerd-admin' },
      protocol: { kind: 'detect', timeoutMs: 10_000, httpRoutes: [DEFAULT_HTTP_ROUTE, probeRoute(['/live', '/ready'], ALL)] },
      authorizations: [meshAuthz('admin-prometheus', [PROM_ID])],
    });
    scraped = await startProxy({
      ...podIdentity(),
      listenHost: HOST,
      appHost: HOST,
      inbound: [{ podPort: 8080, listenPort: 0, appPort: (httpApp.address() as AddressInfo).port }],
      mesh: { host: HOST, port: 0 },
      admin: { host: HOST, port: 0 },
      registry: new MetricsRegistry(),
      policyBackoff: { minMs: 10, maxMs: 100, jitter: 0 },
    });
    await within(scraped.ready(), WAIT_MS, 'readiness');

    // Through the scraper's outbound: mesh TLS to the pod's mesh port, transport header naming 4191.
    const prometheus = await scraperOutbound(promCert, scraped.ports.mesh);
    const scrape = await viaOutbound(prometheus, `http://${HOST}:4191/metrics`);
    assert.equal(scrape.status, 200);
    assert.match(scrape.body, /^# TYPE inbound_http_authz_allow_total counter$/m);
    const grafana = await scraperOutbound(otherScraper, scraped.ports.mesh);
    assert.equal((await viaOutbound(grafana, `http://${HOST}:4191/metrics`)).status, 403);
    assert.equal((await viaOutbound(grafana, `http://${HOST}:4191/ready`)).status, 200, 'the probe route admits every client');

    // Directly to the admin port with mesh TLS to the pod's name (how linkerd's outbound reaches it).
    const direct = await new Promise<Reply>((resolve, reject) => {
      const ctx = new MeshTlsContext(promCert, mesh.anchorsPem);
      const req = httpRequest(
        {
          host: HOST,
          port: scraped.ports.admin,
          path: '/metrics',
          createConnection: () => {
            const tcp = netConnect({ host: HOST, port: scraped.ports.admin, localAddress: FROM });
            tcp.on('error', () => {});
            return tlsConnect({ ...ctx.clientOptions(PROXY_ID), socket: tcp });
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: '' }));
        },
      );
      req.on('error', reject);
      req.end();
    });
    assert.equal(direct.status, 200);

    // Plaintext (the kubelet, an unmeshed scraper): probes yes, metrics no.
    assert.equal((await get(scraped.ports.admin, '/ready')).status, 200);
    assert.equal((await get(scraped.ports.admin, '/live')).status, 200);
    assert.equal((await get(scraped.ports.admin, '/metrics')).status, 403);

    const metrics = (await get(scraped.ports.admin, '/metrics', HOST)).body;
    assert.match(
      metrics,
      /^inbound_http_authz_allow_total\{[^}]*srv_port="4191"[^}]*tls="true",client_id="prometheus\.monitoring\.[^"]*"[^}]*authz_name="admin-prometheus"\} 2$/m,
      'the scrape through the mesh port and the direct one',
    );
    assert.match(metrics, /^inbound_http_authz_deny_total\{[^}]*srv_port="4191"[^}]*client_id="grafana\.monitoring\.[^"]*"[^}]*\} 1$/m);
  });
});
