/**
 * The outbound proxy as users run it, everything on loopback: a real `ward controller` on a
 * manifests directory (namespace demo with injection; pods server-0, client-0, other-0; Service
 * server-svc → server-0:8080; a Server on 8080 admitting only the `client` identity), an HTTP app
 * in this test process, and three real `ward proxy` processes: the server's (inbound only), and
 * two client proxies with the outbound forward proxy on, running as ServiceAccounts `client` and
 * `other`. The test plays the client applications, using a client proxy as HTTP_PROXY.
 *
 * Local mode puts every pod on its own loopback address and every proxy's mesh port on 4143 of
 * that address. Here all proxies' mesh ports are on 127.0.0.1 (port 0, so parallel tests never
 * collide), the server pod's address is 127.0.0.1, and the client proxies learn its mesh port
 * through the hidden `--mesh-port-override 127.0.0.1=PORT`. The client proxies connect from
 * their own pod addresses (127.0.0.2, 127.0.0.3), so the server's `default:localhost`
 * authorization (127.0.0.1) does not admit them.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { type AddressInfo, connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type ControllerPorts, controllerPorts, initWorkdir, spawnController, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const TD = 'cluster.local';
const HOST = '127.0.0.1';
const WAIT_MS = 15_000;
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.${TD}`;
const CLIENT_ID = idOf('demo', 'client');
const SERVICE = 'server-svc.demo.svc.cluster.local:80';

const MANIFESTS = `apiVersion: v1
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
kind: ServiceAccount
metadata: {name: client, namespace: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: other, namespace: demo}
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
status: {podIP: 127.0.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: client-0, namespace: demo, labels: {app: client}}
spec:
  serviceAccountName: client
  containers: [{name: app, image: demo/client}]
status: {podIP: 127.0.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: other-0, namespace: demo, labels: {app: other}}
spec:
  serviceAccountName: other
  containers: [{name: app, image: demo/other}]
status: {podIP: 127.0.0.3}
---
apiVersion: v1
kind: Service
metadata: {name: server-svc, namespace: demo}
spec:
  selector: {app: server}
  ports:
  - {name: http, port: 80, targetPort: 8080}
---
apiVersion: policy.linkerd.io/v1beta3
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
  identities: ["${CLIENT_ID}"]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: server-http-clients, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: server-http}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: http-clients}
`;

interface ProxyPorts {
  readonly mesh: number;
  readonly admin: number;
  readonly outbound: number | undefined;
}

interface Reply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

let dir: string;
let idDir: string;
let ctl: WardProcess;
let ctlPorts: ControllerPorts;
let app: HttpServer;
const proxies: WardProcess[] = [];
let serverPorts: ProxyPorts;
let clientPorts: ProxyPorts;
let otherPorts: ProxyPorts;

/** A token minted by `ward identity token`, written to a file for `--token-file`. */
function tokenFile(sa: string, pod: string): string {
  const t = wardSync(['identity', 'token', '--identity-dir', idDir, '--sa', `demo/${sa}`, '--pod', `demo/${pod}`]);
  assert.equal(t.status, 0, t.stderr);
  const file = join(dir, `${sa}.token`);
  writeFileSync(file, `${t.stdout.trim()}\n`);
  return file;
}

function startProxy(pod: string, sa: string, extra: string[]): WardProcess {
  const p = wardSpawn([
    'proxy',
    '--workload',
    `demo/${pod}`,
    '--service-account',
    sa,
    '--trust-anchors',
    join(idDir, 'ca.crt'),
    '--token-file',
    tokenFile(sa, pod),
    '--identity-addr',
    `${HOST}:${ctlPorts.identity}`,
    '--policy-addr',
    `${HOST}:${ctlPorts.policy}`,
    '--mesh-addr',
    `${HOST}:0`,
    '--admin-addr',
    `${HOST}:0`,
    ...extra,
  ]);
  proxies.push(p);
  return p;
}

async function readyPorts(p: WardProcess): Promise<ProxyPorts> {
  const ports = await waitFor(
    `the proxy's ready line (stderr so far: ${p.stderr().slice(-500)})`,
    () => {
      if (p.child.exitCode !== null) throw new Error(`proxy exited with ${p.child.exitCode}: ${p.stderr()}`);
      const m = /ward proxy ready: identity \S+, mesh :(\d+), admin :(\d+), inbound .*?(?:, outbound :(\d+))?$/m.exec(p.stderr());
      return m === null ? undefined : { mesh: Number(m[1]), admin: Number(m[2]), outbound: m[3] === undefined ? undefined : Number(m[3]) };
    },
    20_000,
  );
  await waitFor(
    `the proxy to be ready (stderr so far: ${p.stderr().slice(-1000)})`,
    async () => ((await fetch(`http://${HOST}:${ports.admin}/ready`, { signal: AbortSignal.timeout(WAIT_MS) })).status === 200 ? true : undefined),
    WAIT_MS,
    50,
  );
  return ports;
}

/** A request through an outbound proxy, as an HTTP_PROXY client sends it (absolute-form). */
function viaProxy(outboundPort: number, url: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: HOST, port: outboundPort, path: url, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.setTimeout(WAIT_MS, () => req.destroy(new Error(`timeout on ${url}`)));
    req.end();
  });
}

describe('e2e: ward proxy outbound', { timeout: 180_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-e2e-outbound-'));
    const work = initWorkdir(dir);
    idDir = work.idDir;
    writeFileSync(join(work.manifests, 'demo.yaml'), MANIFESTS);
    ctl = spawnController(work.manifests, idDir, HOST);
    ctlPorts = await controllerPorts(ctl);

    app = createHttpServer((req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ path: req.url, host: req.headers.host ?? null, clientId: req.headers['l5d-client-id'] ?? null }));
    });
    app.listen(0, HOST);
    await once(app, 'listening');

    const server = startProxy('server-0', 'server', ['--inbound', `8080@0=${HOST}:${(app.address() as AddressInfo).port}`]);
    serverPorts = await readyPorts(server);
    assert.equal(serverPorts.outbound, undefined, 'no outbound without --destination-addr');
    const outboundFlags = (listenHost: string) => [
      '--listen-host',
      listenHost,
      '--destination-addr',
      `${HOST}:${ctlPorts.destination}`,
      '--outbound-addr',
      `${HOST}:0`,
      '--mesh-port-override',
      `${HOST}=${serverPorts.mesh}`,
    ];
    const [client, other] = [startProxy('client-0', 'client', outboundFlags('127.0.0.2')), startProxy('other-0', 'other', outboundFlags('127.0.0.3'))];
    [clientPorts, otherPorts] = await Promise.all([readyPorts(client), readyPorts(other)]);
    assert.ok(clientPorts.outbound !== undefined && otherPorts.outbound !== undefined);
  });

  after(async () => {
    for (const p of proxies) await p.stop();
    await ctl?.stop();
    app?.closeAllConnections();
    await new Promise((r) => app?.close(r));
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('(a) carries a request to a service over mesh TLS: the app sees the client identity', async () => {
    const r = await viaProxy(clientPorts.outbound as number, `http://${SERVICE}/hello`);
    assert.equal(r.status, 200, `${r.body} ${String(r.headers['l5d-proxy-error'])}`);
    assert.deepEqual(JSON.parse(r.body), { path: '/hello', host: SERVICE, clientId: CLIENT_ID });
    const short = await viaProxy(clientPorts.outbound as number, 'http://server-svc.demo/short');
    assert.equal(short.status, 200);
    assert.equal((JSON.parse(short.body) as { clientId: string }).clientId, CLIENT_ID);
  });

  it('(b) a client proxy with another identity is refused by the server with 403', async () => {
    const r = await viaProxy(otherPorts.outbound as number, `http://${SERVICE}/hello`);
    assert.equal(r.status, 403);
    assert.match(String(r.headers['l5d-proxy-error']), /unauthorized/);
  });

  it('(c) answers 502 for a service the controller does not know', async () => {
    const r = await viaProxy(clientPorts.outbound as number, 'http://nope.demo.svc.cluster.local:80/');
    assert.equal(r.status, 502);
    assert.match(String(r.headers['l5d-proxy-error']), /unknown service nope\.demo\.svc\.cluster\.local:80/);
  });

  it('(d) tunnels CONNECT to the service; HTTP inside the tunnel is still authorized per request', async () => {
    const s: Socket = netConnect({ host: HOST, port: clientPorts.outbound as number });
    s.on('error', () => {});
    const chunks: Buffer[] = [];
    s.on('data', (c: Buffer) => chunks.push(c));
    const text = () => Buffer.concat(chunks).toString('latin1');
    try {
      s.write(`CONNECT ${SERVICE} HTTP/1.1\r\nHost: ${SERVICE}\r\n\r\n`);
      await waitFor('the tunnel', () => (text().includes('\r\n\r\n') ? true : undefined), WAIT_MS);
      assert.match(text(), /^HTTP\/1\.1 200 Connection Established\r\n\r\n$/);
      chunks.length = 0;
      s.write('GET /tunnelled HTTP/1.1\r\nHost: server-svc\r\nConnection: close\r\n\r\n');
      await waitFor('the response', () => (text().includes('/tunnelled') ? true : undefined), WAIT_MS);
      assert.match(text(), /^HTTP\/1\.1 200 OK/);
      assert.match(text(), new RegExp(`"clientId":"${CLIENT_ID.replace(/\./g, '\\.')}"`));
    } finally {
      s.destroy();
    }
  });

  it("(e) counts the HTTP requests in the client proxies' outbound metrics (not the tunnel)", async () => {
    const scrape = async (ports: ProxyPorts) => {
      const r = await fetch(`http://${HOST}:${ports.admin}/metrics`, { signal: AbortSignal.timeout(WAIT_MS) });
      assert.equal(r.status, 200);
      return r.text();
    };
    const svc = `direction="outbound",authority="${SERVICE}",target_addr="${HOST}:8080",[^}]*tls="true",server_id="${idOf('demo', 'server')}"[^}]*dst_service="server-svc",dst_namespace="demo"`;
    const client = await scrape(clientPorts);
    assert.match(client, new RegExp(`^request_total\\{${svc}[^}]*\\} 2$`, 'm'), '(a): two requests, the tunnel of (d) is none');
    assert.match(client, new RegExp(`^response_total\\{${svc}[^}]*,status_code="200",classification="success",grpc_status="",error=""\\} 2$`, 'm'));
    assert.match(client, new RegExp(`^response_latency_ms_count\\{${svc}[^}]*,status_code="200"\\} 2$`, 'm'));
    assert.match(
      client,
      /^response_total\{direction="outbound",authority="nope\.demo\.svc\.cluster\.local:80",dst_service="nope",dst_namespace="demo",classification="failure",grpc_status="",error="unknown service"\} 1$/m,
    );
    // The server's 403 is the application-level answer of a response that arrived: not a failure.
    assert.match(
      await scrape(otherPorts),
      new RegExp(`^response_total\\{${svc}[^}]*,status_code="403",classification="success",grpc_status="",error=""\\} 1$`, 'm'),
    );
  });

  it('shuts down cleanly on SIGTERM', async () => {
    for (const p of proxies) assert.equal(await p.stop(10_000), 0, p.stderr().slice(-2000));
  });
});
