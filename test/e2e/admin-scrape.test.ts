/**
 * A meshed scrape of a proxy's admin port as users run it, everything on loopback: a real
 * `ward controller` on a manifests directory (namespace demo with injection; pod server-0 at
 * 127.0.0.1 whose admin port is bound by a Server admitting only the `prometheus` identity,
 * scraper pods prometheus-0 and grafana-0), the server pod's `ward proxy`, and a `ward proxy`
 * with the outbound forward proxy for each scraper. The test plays Prometheus: it fetches
 * `http://<pod IP>:4191/metrics` through a scraper's outbound, which resolves the pod address
 * with the controller (a meshed endpoint) and reaches the pod's mesh port with mesh TLS and a
 * transport header naming 4191 (`--mesh-port-override`: every proxy here listens on 127.0.0.1).
 * `ward explain` on the same manifests must give the verdicts the proxy enforces.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  type ControllerPorts,
  controllerPorts,
  initWorkdir,
  type ProxyPorts,
  proxyPorts,
  spawnController,
  type WardProcess,
  wardSpawn,
  wardSync,
  writeTokenFile,
} from './helpers.js';

const HOST = '127.0.0.1';
const WAIT_MS = 15_000;
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;

const MANIFESTS = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
  annotations:
    linkerd.io/inject: enabled
---
apiVersion: v1
kind: Pod
metadata: {name: server-0, namespace: demo, labels: {app: server}}
spec:
  serviceAccountName: server
  containers: [{name: app, image: demo/server}]
status: {podIP: 127.0.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: prometheus-0, namespace: demo, labels: {app: prometheus}}
spec:
  serviceAccountName: prometheus
  containers: [{name: app, image: demo/prometheus}]
status: {podIP: 127.0.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: grafana-0, namespace: demo, labels: {app: grafana}}
spec:
  serviceAccountName: grafana
  containers: [{name: app, image: demo/grafana}]
status: {podIP: 127.0.0.3}
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: server-admin, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: linkerd-admin
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: prometheus, namespace: demo}
spec:
  identityRefs: [{kind: ServiceAccount, name: prometheus}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: admin-prometheus, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: server-admin}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: prometheus}
`;

let dir: string;
let idDir: string;
let manifests: string;
let ctl: WardProcess;
let ctlPorts: ControllerPorts;
const proxies: WardProcess[] = [];
let server: ProxyPorts;
let prometheus: ProxyPorts;
let grafana: ProxyPorts;

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
    writeTokenFile(idDir, join(dir, `${sa}.token`), 'demo', sa, pod),
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

/** GET `url` (absolute form) through the outbound forward proxy on `port`: status and body. */
function viaOutbound(port: number, url: string): Promise<{ status: number; body: string }> {
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

/** `ward explain` of `GET path` on the server pod's admin port, as a demo ServiceAccount. */
function explain(path: string, sa: string): { decision: string; denyKind: string | null } {
  const r = wardSync(['explain', '-f', manifests, '--to', 'pod/demo/server-0:4191', '--from-sa', `demo/${sa}`, '--http', `GET ${path}`, '-o', 'json']);
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as { decision: string; denyKind: string | null };
}

describe('e2e: a meshed scrape of the admin port', { timeout: 180_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-e2e-admin-scrape-'));
    const work = initWorkdir(dir);
    idDir = work.idDir;
    manifests = work.manifests;
    writeFileSync(join(manifests, 'demo.yaml'), MANIFESTS);
    ctl = spawnController(manifests, idDir, HOST);
    ctlPorts = await controllerPorts(ctl);
    server = await proxyPorts(startProxy('server-0', 'server', []), HOST);
    const outboundFlags = (listenHost: string) => [
      '--listen-host',
      listenHost,
      '--destination-addr',
      `${HOST}:${ctlPorts.destination}`,
      '--outbound-addr',
      `${HOST}:0`,
      '--mesh-port-override',
      `${HOST}=${server.mesh}`,
    ];
    [prometheus, grafana] = await Promise.all([
      proxyPorts(startProxy('prometheus-0', 'prometheus', outboundFlags('127.0.0.2')), HOST),
      proxyPorts(startProxy('grafana-0', 'grafana', outboundFlags('127.0.0.3')), HOST),
    ]);
  });

  after(async () => {
    for (const p of proxies) await p.stop();
    await ctl?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('admits the prometheus identity, denies another with 403, and ward explain says the same', async () => {
    const scrape = await viaOutbound(prometheus.outbound as number, `http://${HOST}:4191/metrics`);
    assert.equal(scrape.status, 200, scrape.body);
    assert.match(scrape.body, /^# TYPE inbound_http_authz_allow_total counter$/m);
    assert.equal(explain('/metrics', 'prometheus').decision, 'allow');

    const denied = await viaOutbound(grafana.outbound as number, `http://${HOST}:4191/metrics`);
    assert.equal(denied.status, 403);
    assert.equal(explain('/metrics', 'grafana').denyKind, 'http403');

    // The server proxy counted the scrape with the client's identity.
    // On a new connection: `ward explain` ran with spawnSync, which blocks this process, so a
    // pooled one (fetch's, from the readiness check) may have been closed by the proxy meanwhile.
    const own = await new Promise<string>((resolve, reject) => {
      const req = httpRequest({ host: HOST, port: server.admin, path: '/metrics', agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          body += c;
        });
        res.on('end', () => resolve(body));
      });
      req.on('error', reject);
      req.setTimeout(WAIT_MS, () => req.destroy(new Error('timeout on the server proxy /metrics')));
      req.end();
    });
    assert.match(
      own,
      new RegExp(
        `^inbound_http_authz_allow_total\\{[^}]*srv_name="server-admin",srv_port="4191",tls="true",client_id="${idOf('demo', 'prometheus').replace(/\./g, '\\.')}"[^}]*authz_name="admin-prometheus"\\} 1$`,
        'm',
      ),
    );
    assert.match(
      own,
      new RegExp(
        `^inbound_http_authz_deny_total\\{[^}]*srv_port="4191",tls="true",client_id="${idOf('demo', 'grafana').replace(/\./g, '\\.')}"[^}]*\\} 1$`,
        'm',
      ),
    );
  });
});
