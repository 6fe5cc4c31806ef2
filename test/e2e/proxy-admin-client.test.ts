/**
 * The controller's client of proxy admin servers against real `ward proxy` processes: mesh TLS as
 * the controller's identity admitted by a pod's admin Server, a 403 from another pod naming the
 * identity to authorize, and the refusals a scraper must tell apart (wrong pod identity, a
 * certificate for another name, plaintext to a mesh-only port, no listener, no answer). The
 * client connects from 127.0.0.9 so that the proxies' `default:localhost` does not admit it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import {
  controllerClientIdentity,
  type ProxyAdminTls,
  proxyAdminTlsOf,
  readProxyAdminBody,
  requestProxyAdmin,
} from '../../src/controller/observe/proxy-admin-client.js';
import { CertificateAuthority, loadIssuer } from '../../src/identity/index.js';
import {
  type ControllerPorts,
  controllerPorts,
  initWorkdir,
  type ProxyPorts,
  proxyPorts,
  spawnController,
  type WardProcess,
  wardSpawn,
  writeTokenFile,
} from './helpers.js';

const HOST = '127.0.0.1';
const FROM = '127.0.0.9';
const CLUSTER = { trustDomain: 'cluster.local', controlPlaneNamespace: 'linkerd' };
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const CONTROLLER_ID = idOf('linkerd', 'ward-controller');

const MANIFESTS = `apiVersion: v1
kind: Namespace
metadata: {name: demo, annotations: {linkerd.io/inject: enabled}}
---
apiVersion: v1
kind: Pod
metadata: {name: open-0, namespace: demo, labels: {app: open}}
spec: {serviceAccountName: open, containers: [{name: app, image: demo/open}]}
status: {podIP: 127.0.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: closed-0, namespace: demo, labels: {app: closed}}
spec: {serviceAccountName: closed, containers: [{name: app, image: demo/closed}]}
status: {podIP: 127.0.0.2}
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: open-admin, namespace: demo}
spec: {podSelector: {matchLabels: {app: open}}, port: linkerd-admin}
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: closed-admin, namespace: demo}
spec: {podSelector: {matchLabels: {app: closed}}, port: linkerd-admin}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: controller, namespace: demo}
spec: {identities: ["${CONTROLLER_ID}"]}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: prometheus, namespace: demo}
spec: {identityRefs: [{kind: ServiceAccount, name: prometheus}]}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: open-admin-controller, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: open-admin}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: controller}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: closed-admin-prometheus, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: closed-admin}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: prometheus}]
`;

let dir: string;
let idDir: string;
let ctl: WardProcess;
let ctlPorts: ControllerPorts;
const proxies: WardProcess[] = [];
let open: ProxyPorts;
let closed: ProxyPorts;
let tls: ProxyAdminTls;
let ca: CertificateAuthority;
const servers: (NetServer | TlsServer)[] = [];

function startProxy(pod: string, sa: string): WardProcess {
  const p = wardSpawn([
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
    '--mesh-addr',
    `${HOST}:0`,
    '--admin-addr',
    `${HOST}:0`,
  ]);
  proxies.push(p);
  return p;
}

async function listen<T extends NetServer | TlsServer>(s: T): Promise<number> {
  servers.push(s);
  await new Promise<void>((resolve) => s.listen(0, HOST, resolve));
  return (s.address() as { port: number }).port;
}

async function rejection(p: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await p;
  } catch (e) {
    return e as { code: string; message: string };
  }
  assert.fail('the request succeeded');
}

describe('e2e: the controller as a client of proxy admin servers', { timeout: 180_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-e2e-admin-client-'));
    const work = initWorkdir(dir);
    idDir = work.idDir;
    writeFileSync(join(work.manifests, 'demo.yaml'), MANIFESTS);
    ctl = spawnController(work.manifests, idDir, HOST);
    ctlPorts = await controllerPorts(ctl);
    [open, closed] = await Promise.all([proxyPorts(startProxy('open-0', 'open'), HOST), proxyPorts(startProxy('closed-0', 'closed'), HOST)]);
    const issuer = await loadIssuer(idDir);
    assert.ok(issuer.ok);
    ca = new CertificateAuthority({
      issuer: issuer.value,
      authenticator: { authenticate: () => Promise.reject(new Error('no tokens here')) },
      ...CLUSTER,
    });
    assert.equal(controllerClientIdentity({ ...CLUSTER, defaultPolicy: 'all-unauthenticated', clusterNetworks: [], probeNetworks: [] }), CONTROLLER_ID);
    const cert = { current: await ca.issueServerCertificate([CONTROLLER_ID]) };
    const anchors = readFileSync(join(idDir, 'ca.crt'), 'utf8');
    tls = proxyAdminTlsOf(CONTROLLER_ID, cert, () => anchors);
  });

  after(async () => {
    for (const s of servers) s.close();
    for (const p of proxies) await p.stop();
    await ctl?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('scrapes /metrics with mesh TLS as the controller, and the pod counts it under that identity', async () => {
    const target = { address: `${HOST}:${open.admin}`, identity: idOf('demo', 'open') };
    const res = await requestProxyAdmin(tls, target, '/metrics', { localAddress: FROM, timeoutMs: 10_000 });
    assert.equal(res.statusCode, 200);
    const body = await readProxyAdminBody(res, 4 << 20, 10_000, 'open-0 /metrics');
    assert.match(body, /^# TYPE inbound_http_authz_allow_total counter$/m);
    // The scrape itself is counted once served; the next scrape shows it with our identity.
    const again = await readProxyAdminBody(await requestProxyAdmin(tls, target, '/metrics', { localAddress: FROM }), 4 << 20, 10_000, 'again');
    assert.match(
      again,
      new RegExp(
        `^inbound_http_authz_allow_total\\{[^}]*srv_name="open-admin"[^}]*tls="true",client_id="${CONTROLLER_ID.replace(/\./g, '\\.')}"[^}]*authz_name="open-admin-controller"\\} [1-9]`,
        'm',
      ),
    );
  });

  it("says which identity to authorize when the pod's policy on 4191 denies it", async () => {
    const e = await rejection(
      requestProxyAdmin(tls, { address: `${HOST}:${closed.admin}`, identity: idOf('demo', 'closed') }, '/metrics', { localAddress: FROM }),
    );
    assert.equal(e.code, 'ERR_PROXY_ADMIN_DENIED');
    assert.match(e.message, /denied by the pod's policy on port 4191/);
    assert.ok(e.message.includes(CONTROLLER_ID), e.message);
  });

  it('refuses plaintext to a mesh-only admin port as a denial, never upgrading or guessing', async () => {
    const e = await rejection(requestProxyAdmin(tls, { address: `${HOST}:${open.admin}`, identity: null }, '/metrics', { localAddress: FROM }));
    assert.equal(e.code, 'ERR_PROXY_ADMIN_DENIED');
    assert.match(e.message, /no mesh identity/);
  });

  it('fails mesh TLS when the pod is not the identity expected (the proxy closes it)', async () => {
    const e = await rejection(
      requestProxyAdmin(tls, { address: `${HOST}:${open.admin}`, identity: idOf('demo', 'closed') }, '/metrics', { localAddress: FROM }),
    );
    assert.equal(e.code, 'ERR_PROXY_ADMIN_TLS');
    assert.ok(e.message.includes(idOf('demo', 'closed')), e.message);
  });

  it("rejects a certificate of the mesh's CA that does not carry the pod's identity", async () => {
    const other = await ca.issueServerCertificate([idOf('demo', 'impostor')]);
    const port = await listen(
      createTlsServer({ cert: other.certPem + other.chainPem, key: other.keyPem }, (s) => {
        s.on('error', () => {});
        s.end('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n');
      }),
    );
    const e = await rejection(requestProxyAdmin(tls, { address: `${HOST}:${port}`, identity: idOf('demo', 'open') }, '/metrics'));
    assert.equal(e.code, 'ERR_PROXY_ADMIN_TLS');
    assert.ok(e.message.includes(`does not carry its identity ${idOf('demo', 'open')}`), e.message);
  });

  it('times out on a silent server and reports a closed port as unreachable', async () => {
    const held: Socket[] = [];
    const port = await listen(createNetServer((s) => held.push(s)));
    const e = await rejection(requestProxyAdmin(tls, { address: `${HOST}:${port}`, identity: null }, '/metrics', { timeoutMs: 300 }));
    assert.equal(e.code, 'ERR_PROXY_ADMIN_TIMEOUT');
    for (const s of held) s.destroy();
    const gone = createNetServer();
    const freePort = await listen(gone);
    await new Promise<void>((resolve) => gone.close(() => resolve()));
    const refused = await rejection(requestProxyAdmin(tls, { address: `${HOST}:${freePort}`, identity: null }, '/metrics'));
    assert.equal(refused.code, 'ERR_PROXY_ADMIN_CONNECT');
    const bad = await rejection(requestProxyAdmin(tls, { address: 'not-an-address', identity: null }, '/metrics'));
    assert.equal(bad.code, 'ERR_PROXY_ADMIN_CONNECT');
  });

  it('stops reading a body past its limit', async () => {
    const port = await listen(
      createNetServer((s) => {
        s.on('error', () => {});
        s.end(`HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n${'x'.repeat(5000)}`);
      }),
    );
    const res = await requestProxyAdmin(tls, { address: `${HOST}:${port}`, identity: null }, '/metrics');
    const e = await rejection(readProxyAdminBody(res, 1000, 5000, 'big'));
    assert.equal(e.code, 'ERR_PROXY_ADMIN_TOO_LARGE');
  });
});
