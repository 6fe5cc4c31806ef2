/**
 * The proxy as users run it: a real `ward controller` on a manifests directory and a real
 * `ward proxy` for pod demo/server-0 in front of an HTTP app (pod port 8080, `HTTP/1`, only the
 * `client` identity admitted) and a TCP echo app (pod port 9000, `opaque`, any meshed identity),
 * everything on loopback. Callers are this test process: plaintext from 127.0.0.2 (so the
 * proxy-added `default:localhost` does not admit it), and meshed clients with certificates from
 * the controller's Certify, speaking mesh TLS + the transport header to the proxy's mesh port.
 * Policy edits reach the proxy; a policy change closes a revoked opaque connection; the proxy keeps
 * enforcing while the controller is dead and follows edits again once it is back.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer, request as httpRequest } from 'node:http';
import { type AddressInfo, createServer as createTcpServer, connect as netConnect, type Socket, type Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type TLSSocket, connect as tlsConnect } from 'node:tls';
import { IdentityClient } from '../../src/api/index.js';
import { createCsr, generateWorkloadKey, type WorkloadCertificate } from '../../src/identity/index.js';
import { MeshTlsContext, TRANSPORT_HEADER_ALPN } from '../../src/proxy/tls/context.js';
import { encodeTransportHeader, type TransportHeader } from '../../src/proxy/transport/transport-header.js';
import { type ControllerPorts, controllerPorts, initWorkdir, spawnController, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const TD = 'cluster.local';
const HOST = '127.0.0.1';
/** Plaintext and meshed callers connect from here (not 127.0.0.1, which `default:localhost` admits). */
const FROM = '127.0.0.2';
const WAIT_MS = 15_000;
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.${TD}`;
const SERVER_ID = idOf('demo', 'server');
const CLIENT_ID = idOf('demo', 'client');
const OTHER_ID = idOf('demo', 'other');
const IDENTITY_SERVER = `linkerd-identity.linkerd.serviceaccount.identity.linkerd.${TD}`;

const APP_YAML = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
  annotations:
    linkerd.io/inject: enabled
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: server, namespace: demo}
---
apiVersion: v1
kind: Pod
metadata:
  name: server-0
  namespace: demo
  labels: {app: server}
spec:
  serviceAccountName: server
  containers:
  - name: app
    image: demo/server
    ports:
    - {name: http, containerPort: 8080}
    - {name: tcp, containerPort: 9000}
`;

function httpPolicy(identities: string[]): string {
  return `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: server-http, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: 8080
  proxyProtocol: HTTP/1
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: http-clients, namespace: demo}
spec:
  identities: [${identities.map((i) => JSON.stringify(i)).join(', ')}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: server-http-clients, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: server-http}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: http-clients}
`;
}

function tcpPolicy(identities: string[]): string {
  return `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: server-tcp, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: 9000
  proxyProtocol: opaque
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: tcp-clients, namespace: demo}
spec:
  identities: [${identities.map((i) => JSON.stringify(i)).join(', ')}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: server-tcp-clients, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: server-tcp}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: tcp-clients}
`;
}

/** A token minted by `ward identity token`. */
function token(sa: string, pod?: string): string {
  const t = wardSync(['identity', 'token', '--identity-dir', idDir, '--sa', sa, ...(pod === undefined ? [] : ['--pod', pod])]);
  assert.equal(t.status, 0, t.stderr);
  return t.stdout.trim();
}

/** A workload certificate for demo/<sa> from the controller's Certify. */
async function certify(sa: string): Promise<WorkloadCertificate> {
  const identity = idOf('demo', sa);
  const key = await generateWorkloadKey();
  const client = new IdentityClient({ address: `${HOST}:${ctlPorts.identity}`, tls: { caPem: anchor, serverName: IDENTITY_SERVER } });
  try {
    const res = await client.certify({ identity, token: new TextEncoder().encode(token(`demo/${sa}`)), csrDer: await createCsr(identity, key) });
    return {
      identity,
      certPem: new X509Certificate(res.leafDer).toString(),
      keyPem: key.keyPem,
      chainPem: res.chainDer.map((d) => new X509Certificate(d).toString()).join(''),
      notAfterMs: res.validUntilMs,
    };
  } finally {
    client.close();
  }
}

interface Reply {
  readonly status: number | 'closed';
  readonly body: string;
}

/** A plaintext GET from 127.0.0.2. */
function plainGet(port: number, path: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: HOST, port, path, localAddress: FROM, agent: false }, (res) => {
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

/** GET on the proxy's admin port (from 127.0.0.1). */
async function admin(path: string): Promise<Response> {
  return fetch(`http://${HOST}:${proxyPorts.admin}${path}`, { signal: AbortSignal.timeout(WAIT_MS) });
}

/** Mesh TLS from 127.0.0.2 to the proxy's mesh port with ALPN transport.l5d.io/v1, then `header`. */
async function meshConnect(cert: WorkloadCertificate, header: TransportHeader): Promise<TLSSocket> {
  const tcp = netConnect({ host: HOST, port: proxyPorts.mesh, localAddress: FROM });
  tcp.on('error', () => {});
  const s = tlsConnect({ ...new MeshTlsContext(cert, anchor).clientOptions(SERVER_ID, [TRANSPORT_HEADER_ALPN]), socket: tcp });
  s.on('error', () => {});
  await Promise.race([
    once(s, 'secureConnect'),
    once(s, 'close').then(() => {
      throw new Error('the mesh handshake failed');
    }),
  ]);
  s.write(encodeTransportHeader(header));
  return s;
}

/** One HTTP/1.1 request on a stream; resolves once the proxy answered and closed it. */
async function httpOver(s: Socket, path: string): Promise<Reply> {
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  const closed = once(s, 'close');
  s.write(`GET ${path} HTTP/1.1\r\nHost: server.demo\r\nConnection: close\r\n\r\n`);
  await closed;
  const text = Buffer.concat(chunks).toString('utf8');
  const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
  return { status: m === null ? 'closed' : Number(m[1]), body: text.slice(text.indexOf('\r\n\r\n') + 4) };
}

/** A meshed HTTP request to pod port 8080 through the mesh port. */
async function meshedGet(cert: WorkloadCertificate, path: string): Promise<Reply> {
  return httpOver(await meshConnect(cert, { port: 8080, sessionProtocol: 'http1' }), path);
}

/** An opaque stream to pod port 9000 through the mesh port: resolves with what came back, or 'closed'. */
async function meshedEcho(cert: WorkloadCertificate, text: string): Promise<string | 'closed'> {
  const s = await meshConnect(cert, { port: 9000 });
  const chunks: Buffer[] = [];
  let timer: NodeJS.Timeout | undefined;
  const got = await new Promise<string>((resolve, reject) => {
    s.on('data', (c: Buffer) => {
      chunks.push(c);
      if (Buffer.concat(chunks).toString() === text) resolve(text);
    });
    s.once('close', () => resolve('closed'));
    timer = setTimeout(() => reject(new Error(`no echo of ${text} and no close`)), WAIT_MS);
    s.write(text);
  }).finally(() => clearTimeout(timer));
  s.destroy();
  return got;
}

let dir: string;
let idDir: string;
let manifests: string;
let anchor: string;
let ctl: WardProcess;
let ctlPorts: ControllerPorts;
let proxy: WardProcess;
let proxyPorts: { mesh: number; admin: number; http: number; tcp: number };
let httpApp: HttpServer;
let tcpApp: TcpServer;
let clientCert: WorkloadCertificate;
let otherCert: WorkloadCertificate;
const extraProcesses: WardProcess[] = [];

describe('e2e: ward proxy', { timeout: 180_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-e2e-proxy-'));
    ({ idDir, manifests } = initWorkdir(dir));
    anchor = readFileSync(join(idDir, 'ca.crt'), 'utf8');
    writeFileSync(join(manifests, 'app.yaml'), APP_YAML);
    writeFileSync(join(manifests, 'http-policy.yaml'), httpPolicy([CLIENT_ID]));
    writeFileSync(join(manifests, 'tcp-policy.yaml'), tcpPolicy(['*']));
    ctl = spawnController(manifests, idDir, HOST);
    ctlPorts = await controllerPorts(ctl);

    httpApp = createHttpServer((req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ path: req.url, clientId: req.headers['l5d-client-id'] ?? null }));
    });
    tcpApp = createTcpServer((s) => {
      s.on('error', () => {});
      s.pipe(s);
    });
    await Promise.all([once(httpApp.listen(0, HOST), 'listening'), once(tcpApp.listen(0, HOST), 'listening')]);

    const tokenFile = join(dir, 'server.token');
    writeFileSync(tokenFile, `${token('demo/server', 'demo/server-0')}\n`);
    proxy = wardSpawn([
      'proxy',
      '--workload',
      'demo/server-0',
      '--service-account',
      'server',
      '--trust-anchors',
      join(idDir, 'ca.crt'),
      '--token-file',
      tokenFile,
      '--identity-addr',
      `${HOST}:${ctlPorts.identity}`,
      '--policy-addr',
      `${HOST}:${ctlPorts.policy}`,
      '--inbound',
      `8080@0=${HOST}:${(httpApp.address() as AddressInfo).port}`,
      '--inbound',
      `9000@0=${HOST}:${(tcpApp.address() as AddressInfo).port}`,
      '--mesh-addr',
      `${HOST}:0`,
      '--admin-addr',
      `${HOST}:0`,
    ]);
    proxyPorts = await waitFor(
      `the proxy's ready line (stderr so far: ${proxy.stderr().slice(-500)})`,
      () => {
        if (proxy.child.exitCode !== null) throw new Error(`proxy exited with ${proxy.child.exitCode}: ${proxy.stderr()}`);
        const m = /ward proxy ready: identity (\S+), mesh :(\d+), admin :(\d+), inbound 8080@(\d+)->[^,]+, 9000@(\d+)->/.exec(proxy.stderr());
        if (m === null) return undefined;
        assert.equal(m[1], SERVER_ID);
        return { mesh: Number(m[2]), admin: Number(m[3]), http: Number(m[4]), tcp: Number(m[5]) };
      },
      20_000,
    );
    await waitFor('the proxy to be ready', async () => ((await admin('/ready')).status === 200 ? true : undefined), WAIT_MS, 50);
    [clientCert, otherCert] = await Promise.all([certify('client'), certify('other')]);
  });

  after(async () => {
    await proxy?.stop();
    await ctl?.stop();
    for (const p of extraProcesses) await p.stop();
    httpApp?.closeAllConnections();
    await Promise.all([new Promise((r) => httpApp?.close(r)), new Promise((r) => tcpApp?.close(r))]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('(a) answers a plaintext caller on the HTTP port with 403', async () => {
    const r = await plainGet(proxyPorts.http, '/hello');
    assert.equal(r.status, 403);
    assert.equal(r.body, '');
  });

  it('(b) forwards a meshed client with its identity, and refuses another identity with 403', async () => {
    const ok = await meshedGet(clientCert, '/hello');
    assert.equal(ok.status, 200);
    assert.deepEqual(JSON.parse(ok.body), { path: '/hello', clientId: CLIENT_ID });
    const denied = await meshedGet(otherCert, '/hello');
    assert.equal(denied.status, 403);
  });

  it('(c) carries an opaque stream for a meshed client and closes it when a policy edit revokes it', async () => {
    assert.equal(await meshedEcho(otherCert, 'any meshed identity'), 'any meshed identity');
    const s = await meshConnect(clientCert, { port: 9000 });
    const chunks: Buffer[] = [];
    s.on('data', (c: Buffer) => chunks.push(c));
    s.write('ping');
    await waitFor('the echo', () => (Buffer.concat(chunks).toString() === 'ping' ? true : undefined), WAIT_MS);
    const closed = once(s, 'close');
    writeFileSync(join(manifests, 'tcp-policy.yaml'), tcpPolicy([idOf('demo', 'nobody')]));
    await Promise.race([closed, new Promise((_, reject) => setTimeout(() => reject(new Error('the revoked connection stayed open')), WAIT_MS).unref())]);
    assert.equal(await meshedEcho(clientCert, 'again'), 'closed');
    const metrics = await (await admin('/metrics')).text();
    assert.match(
      metrics,
      /^inbound_tcp_authz_terminate_total\{[^}]*srv_kind="server",srv_name="server-tcp",srv_port="9000",tls="true",client_id="client\.demo\.[^"]*"\} 1$/m,
    );
    assert.match(metrics, /^inbound_tcp_authz_deny_total\{[^}]*srv_name="server-tcp"[^}]*\} [1-9]/m);
    assert.match(
      metrics,
      /^inbound_http_authz_allow_total\{[^}]*srv_name="server-http"[^}]*client_id="client\.demo\.[^}]*authz_kind="authorizationpolicy",authz_name="server-http-clients"\} 1$/m,
    );
    assert.match(metrics, /^inbound_http_authz_deny_total\{[^}]*target_port="8080"[^}]*tls="no_identity",no_tls_reason="no_tls_from_remote"[^}]*\} 1$/m);
    assert.match(metrics, /^control_identity_cert_expiration_timestamp_seconds \d+$/m);
  });

  it('(d) keeps enforcing its last policy while the controller is dead, and follows edits once it is back', async () => {
    ctl.child.kill('SIGKILL');
    await ctl.exited;
    assert.equal((await plainGet(proxyPorts.http, '/')).status, 403);
    assert.equal((await meshedGet(clientCert, '/')).status, 200);
    assert.equal((await meshedGet(otherCert, '/')).status, 403);
    assert.equal(await meshedEcho(clientCert, 'x'), 'closed');
    assert.equal((await admin('/ready')).status, 200);

    // Back on the same ports; then an edit admits `other` on 8080.
    ctl = spawnController(manifests, idDir, HOST, ctlPorts);
    await controllerPorts(ctl);
    writeFileSync(join(manifests, 'http-policy.yaml'), httpPolicy([CLIENT_ID, OTHER_ID]));
    const started = Date.now();
    await waitFor('the edit to reach the proxy', async () => ((await meshedGet(otherCert, '/')).status === 200 ? true : undefined), WAIT_MS, 200);
    assert.ok(Date.now() - started <= WAIT_MS);
    assert.equal((await plainGet(proxyPorts.http, '/')).status, 403);
    assert.equal((await admin('/ready')).status, 200);
  });

  it('(e) shows the enforced policies and its certificate in /debug/policies', async () => {
    const res = await admin('/debug/policies');
    assert.equal(res.status, 200);
    const doc = (await res.json()) as {
      identity: string;
      ready: boolean;
      certificate: { identity: string; notAfter: string; serial: string };
      ports: { port: number; listen: string; policy: { authorizations?: { metadata?: { resource?: { name?: string } } }[] } | null }[];
    };
    assert.equal(doc.identity, SERVER_ID);
    assert.equal(doc.ready, true);
    assert.equal(doc.certificate.identity, SERVER_ID);
    assert.ok(Date.parse(doc.certificate.notAfter) > Date.now());
    assert.match(doc.certificate.serial, /^[0-9A-F]+$/);
    assert.deepEqual(
      doc.ports.map((p) => p.port),
      [8080, 9000, 4191],
    );
    assert.equal(doc.ports[0]?.listen, `${HOST}:${proxyPorts.http}`);
    assert.ok(doc.ports.every((p) => p.policy !== null));
    assert.match(JSON.stringify(doc.ports[0]?.policy), /server-http-clients/);
  });

  it('shuts down cleanly on SIGTERM', async () => {
    const code = await proxy.stop(10_000);
    assert.equal(code, 0, proxy.stderr().slice(-2000));
  });
});
