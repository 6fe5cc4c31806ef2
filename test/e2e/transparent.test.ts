/**
 * Transparent mode as Kubernetes runs it, on one machine (root, Linux, iptables): network
 * namespaces this test creates — a "node" (`10.244.77.1`, a bridge, the real `ward controller`,
 * an unmeshed HTTP server and a plaintext client) and two pods on the bridge, `client-0`
 * (`10.244.77.2`) and `server-0` (`10.244.77.3`). Each pod gets the rules of upstream's
 * proxy-init in its own namespace and a real `ward proxy --transparent`:
 *
 *     nat PREROUTING: tcp to 4190/4191 → RETURN; any other tcp → REDIRECT 4143 (inbound)
 *     nat OUTPUT:     gid 2102 (the proxy) → RETURN; -o lo → RETURN; tcp → REDIRECT 4140 (outbound)
 *
 * Redirect loops: the proxy's sockets must be recognisable to the OUTPUT rules. Upstream runs the
 * proxy as its own user and exempts it with `-m owner --uid-owner 2102`; here the proxy runs with
 * its own group instead (`nsenter --setgid 2102`: still uid 0, so it reads the checkout and the
 * test's files wherever they are) and is exempted with `-m owner --gid-owner 2102`. Its
 * connections to the controller, to other pods' mesh ports and to unmeshed destinations leave as
 * they are; the application (root, gid 0) is redirected.
 *
 * The server pod's application (8080/8081 HTTP, 9000/9001 TCP echo) listens on 0.0.0.0 and the
 * proxy reaches it on 127.0.0.1 — its own `-o lo` traffic is exempt anyway. Policies: 8080 HTTP/1
 * only for the `client` identity, 8081 HTTP/1 for the node's address (unauthenticated), 9000
 * opaque for the node's address, 9001 opaque only for `client`. On the wire:
 * - the node's plaintext client reaches 8081 and 9000, gets 403 on 8080 and a closed connection
 *   on 9001 — the inbound redirect put the proxy in the path, SO_ORIGINAL_DST named the port;
 * - the client pod's application connects to `10.244.77.3:8080` / `:9001` with no proxy settings:
 *   the outbound redirect, a Destination lookup of `ip:port` and mesh TLS to the server's proxy
 *   (4143 → 4143: a direct connection) deliver it with `l5d-client-id`, authorized;
 * - the client pod's connection to the node's server (an address the controller does not know)
 *   goes out in plaintext from the pod's own address.
 *
 * Undeclared ports (POLICY-SEMANTICS §2.4: ports other than the pod's inbound ports are discovered
 * lazily, on first connection, with the same result): the server's application also serves
 * 8082/8083 HTTP and 9002/9003 TCP echo, which are neither `--inbound` ports of its proxy nor
 * container ports, and no Server selects them — the controller answers with the pod's default
 * server (§3.2, §3.4). The default is the cluster's, `all-unauthenticated` (no `--default-policy`,
 * no `default-inbound-policy` annotation on the namespace or the pod, §2.3), except on 8083 and
 * 9003, which the pod lists in `config.linkerd.io/proxy-require-identity-inbound-ports`: there it
 * is `all-authenticated` (§2.4; the annotation does not touch the Server-bound ports above). So
 * the node's plaintext client reaches 8082/9002 and gets 403 on 8083 and a closed connection on
 * 9003 (SO_ORIGINAL_DST names the undeclared port), while the client pod's meshed application
 * reaches 8083/9003 with its identity (a transport header names it). The proxy forwards an
 * undeclared port to the pod address the connection arrived on (10.244.77.3; never the address
 * the original destination names, which the client chooses), so the application sees the pod's
 * own address as the client, and a service the pod binds to loopback only (8084) stays out of
 * reach. Counting rules
 * in the server pod's filter OUTPUT chain (SYNs to 10.244.77.3:<port>) show whether the proxy
 * opened a connection to the application at all; the proxy's `/debug/policies` lists the
 * discovered ports.
 *
 * Only addresses inside these namespaces are used; they are deleted in `after` (processes left in
 * them are killed), and ones left by a crashed run are swept at start. Without root or iptables the
 * suite is skipped, except under CI=true where that is a failure.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ORIGINAL_DST_ADDON_PATH } from '../../src/proxy/transport/original-dst.js';
import { type ControllerPorts, controllerPorts, initWorkdir, metricSum, spawnController, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';
import { type LabPod, NetnsAgent, NetnsLab, netnsPrerequisites, sweepStaleNamespaces } from './netns.js';

const TD = 'cluster.local';
const SUBNET = '10.244.77';
/** The proxy's group: its sockets are exempt from the outbound redirect. */
const PROXY_GID = 2102;
const WAIT_MS = 20_000;
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.${TD}`;
const CLIENT_ID = idOf('demo', 'client');
const NODE_IP = `${SUBNET}.1`;
const CLIENT_IP = `${SUBNET}.2`;
const SERVER_IP = `${SUBNET}.3`;
/** The node's unmeshed HTTP server. */
const NODE_HTTP_PORT = 7070;
/**
 * Ports the server's application serves that its proxy is not told about (no `--inbound`, no
 * container port, no Server): the pod's default policy applies, `all-unauthenticated` except on
 * the `…_AUTHN` ones (require-identity ports: `all-authenticated`).
 */
const OPEN_HTTP_PORT = 8082;
const OPEN_HTTP_PORT_AUTHN = 8083;
const OPEN_TCP_PORT = 9002;
const OPEN_TCP_PORT_AUTHN = 9003;
const UNDECLARED_PORTS = [OPEN_HTTP_PORT, OPEN_HTTP_PORT_AUTHN, OPEN_TCP_PORT, OPEN_TCP_PORT_AUTHN];
/** An undeclared HTTP port the server pod's application binds to loopback only. */
const LOOPBACK_ONLY_PORT = 8084;

/** upstream proxy-init's nat rules, for iptables-restore. */
const PROXY_INIT_RULES = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:PROXY_INIT_REDIRECT - [0:0]
:PROXY_INIT_OUTPUT - [0:0]
-A PREROUTING -j PROXY_INIT_REDIRECT
-A PROXY_INIT_REDIRECT -p tcp -m multiport --dports 4190,4191 -j RETURN
-A PROXY_INIT_REDIRECT -p tcp -j REDIRECT --to-ports 4143
-A OUTPUT -j PROXY_INIT_OUTPUT
-A PROXY_INIT_OUTPUT -m owner --gid-owner ${PROXY_GID} -j RETURN
-A PROXY_INIT_OUTPUT -o lo -j RETURN
-A PROXY_INIT_OUTPUT -p tcp -j REDIRECT --to-ports 4140
COMMIT
`;

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
kind: Pod
metadata:
  name: server-0
  namespace: demo
  labels: {app: server}
  annotations:
    config.linkerd.io/proxy-require-identity-inbound-ports: "${OPEN_HTTP_PORT_AUTHN},${OPEN_TCP_PORT_AUTHN}"
spec:
  serviceAccountName: server
  containers:
  - name: app
    image: demo/server
    ports:
    - {name: http, containerPort: 8080}
    - {name: http-open, containerPort: 8081}
    - {name: tcp-open, containerPort: 9000}
    - {name: tcp, containerPort: 9001}
status: {podIP: ${SERVER_IP}}
---
apiVersion: v1
kind: Pod
metadata: {name: client-0, namespace: demo, labels: {app: client}}
spec:
  serviceAccountName: client
  containers: [{name: app, image: demo/client}]
status: {podIP: ${CLIENT_IP}}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: demo}
spec:
  identities: ["${CLIENT_ID}"]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: NetworkAuthentication
metadata: {name: node, namespace: demo}
spec:
  networks: [{cidr: ${NODE_IP}/32}]
${[
  ['http', 8080, 'HTTP/1', 'MeshTLSAuthentication', 'clients'],
  ['http-open', 8081, 'HTTP/1', 'NetworkAuthentication', 'node'],
  ['tcp-open', 9000, 'opaque', 'NetworkAuthentication', 'node'],
  ['tcp', 9001, 'opaque', 'MeshTLSAuthentication', 'clients'],
]
  .map(
    ([name, port, protocol, authKind, authName]) => `---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: ${name}, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: ${port}
  proxyProtocol: ${protocol}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: ${name}, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: ${name}}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: ${authKind}, name: ${authName}}
`,
  )
  .join('')}`;

const missing = netnsPrerequisites();
const mustRun = process.env.CI === 'true';

let dir: string;
let idDir: string;
let lab: NetnsLab | undefined;
let client: LabPod;
let server: LabPod;
let ctl: WardProcess | undefined;
let ctlPorts: ControllerPorts;
const proxies: WardProcess[] = [];
const agents: NetnsAgent[] = [];
let nodeAgent: NetnsAgent;
let clientAgent: NetnsAgent;

/** A token for demo/<sa> bound to demo/<pod>. */
function tokenFile(sa: string, pod: string): string {
  const t = wardSync(['identity', 'token', '--identity-dir', idDir, '--sa', `demo/${sa}`, '--pod', `demo/${pod}`]);
  assert.equal(t.status, 0, t.stderr);
  const file = join(dir, `${sa}.token`);
  writeFileSync(file, `${t.stdout.trim()}\n`);
  return file;
}

/** `ward proxy --transparent` for `pod`, inside its namespace, with the proxy's group. */
function startProxy(pod: LabPod, name: string, sa: string, extra: readonly string[]): WardProcess {
  const p = wardSpawn(
    [
      'proxy',
      '--transparent',
      '--workload',
      `demo/${name}`,
      '--service-account',
      sa,
      '--trust-anchors',
      join(idDir, 'ca.crt'),
      '--token-file',
      tokenFile(sa, name),
      '--identity-addr',
      `${NODE_IP}:${ctlPorts.identity}`,
      '--policy-addr',
      `${NODE_IP}:${ctlPorts.policy}`,
      '--listen-host',
      pod.ip,
      '--admin-addr',
      `0.0.0.0:4191`,
      ...extra,
    ],
    {},
    ['nsenter', `--net=/run/netns/${pod.ns}`, `--setgid=${PROXY_GID}`, '--'],
  );
  proxies.push(p);
  return p;
}

/** Waits for the proxy's ready line and its `proxy ready` log (certificate and every policy in). */
async function ready(p: WardProcess): Promise<string> {
  return waitFor(
    `the proxy to be ready (stderr so far: ${p.stderr().slice(-1500)})`,
    () => {
      if (p.child.exitCode !== null) throw new Error(`proxy exited with ${p.child.exitCode}: ${p.stderr()}`);
      const line = /^ward proxy ready: .*$/m.exec(p.stderr())?.[0];
      return line !== undefined && p.stderr().includes('"msg":"proxy ready"') ? line : undefined;
    },
    WAIT_MS,
    50,
  );
}

function body(r: { body?: string }): { path: string; clientId: string | null; remote: string | null } {
  return JSON.parse(r.body ?? 'null') as { path: string; clientId: string | null; remote: string | null };
}

/** How many connections the server pod's proxy has opened to its application on each undeclared port (SYNs counted by iptables). */
function appConnections(): Map<number, number> {
  const counts = new Map<number, number>();
  for (const line of lab?.exec(server.ns, 'iptables', ['-w', '-L', 'OUTPUT', '-n', '-v', '-x']).split('\n') ?? []) {
    const m = /^\s*(\d+)\s+\d+\s.*\bdpt:(\d+)\b/.exec(line);
    if (m !== null) counts.set(Number(m[2]), Number(m[1]));
  }
  assert.deepEqual([...counts.keys()].sort(), [...UNDECLARED_PORTS].sort(), 'the counting rules');
  return counts;
}

/** GET `path` from the server proxy's admin port (4191, not redirected), from the node. */
async function serverAdmin(path: string): Promise<string> {
  const r = await nodeAgent.request({ op: 'http-get', host: SERVER_IP, port: 4191, path });
  assert.equal(r.status, 200, JSON.stringify(r));
  return r.body ?? '';
}

describe('e2e: ward proxy --transparent (iptables, network namespaces)', {
  timeout: 240_000,
  skip: missing !== undefined && !mustRun ? `needs ${missing}` : false,
}, () => {
  before(async () => {
    if (missing !== undefined) throw new Error(`the transparent-mode e2e test needs ${missing} (CI=true: not skipped)`);
    if (!existsSync(ORIGINAL_DST_ADDON_PATH)) {
      const b = spawnSync('npm', ['run', 'build:native'], { encoding: 'utf8', timeout: 120_000 });
      assert.equal(b.status, 0, `npm run build:native failed:\n${b.stdout}\n${b.stderr}`);
    }
    sweepStaleNamespaces();

    dir = mkdtempSync(join(tmpdir(), 'ward-e2e-transparent-'));
    const work = initWorkdir(dir);
    idDir = work.idDir;
    writeFileSync(join(work.manifests, 'demo.yaml'), MANIFESTS);

    lab = new NetnsLab(SUBNET);
    client = lab.addPod('client', 2);
    server = lab.addPod('server', 3);
    for (const pod of [client, server]) lab.exec(pod.ns, 'iptables-restore', [], PROXY_INIT_RULES);
    // Counting rules (no target): the proxy's connections to the application's undeclared ports.
    for (const port of UNDECLARED_PORTS) {
      lab.exec(server.ns, 'iptables', ['-w', '-A', 'OUTPUT', '-o', 'lo', '-d', SERVER_IP, '-p', 'tcp', '--syn', '--dport', String(port)]);
    }

    ctl = spawnController(work.manifests, idDir, NODE_IP, undefined, ['ip', 'netns', 'exec', lab.node.ns]);
    ctlPorts = await controllerPorts(ctl);

    const serverAgent = new NetnsAgent(server.ns);
    nodeAgent = new NetnsAgent(lab.node.ns);
    clientAgent = new NetnsAgent(client.ns);
    agents.push(serverAgent, nodeAgent, clientAgent);
    const serving = await Promise.all([
      serverAgent.request({ op: 'http-serve', host: '0.0.0.0', port: 8080 }),
      serverAgent.request({ op: 'http-serve', host: '0.0.0.0', port: 8081 }),
      serverAgent.request({ op: 'echo-serve', host: '0.0.0.0', port: 9000 }),
      serverAgent.request({ op: 'echo-serve', host: '0.0.0.0', port: 9001 }),
      serverAgent.request({ op: 'http-serve', host: '0.0.0.0', port: OPEN_HTTP_PORT }),
      serverAgent.request({ op: 'http-serve', host: '127.0.0.1', port: LOOPBACK_ONLY_PORT }),
      serverAgent.request({ op: 'http-serve', host: '0.0.0.0', port: OPEN_HTTP_PORT_AUTHN }),
      serverAgent.request({ op: 'echo-serve', host: '0.0.0.0', port: OPEN_TCP_PORT }),
      serverAgent.request({ op: 'echo-serve', host: '0.0.0.0', port: OPEN_TCP_PORT_AUTHN }),
      nodeAgent.request({ op: 'http-serve', host: NODE_IP, port: NODE_HTTP_PORT }),
    ]);
    for (const r of serving) assert.equal(r.error, undefined, `an application could not listen: ${r.error}`);

    const inbound = (port: number) => ['--inbound', `${port}=127.0.0.1:${port}`];
    // The server pod runs the outbound proxy too (127.0.0.1:4140): the attack case below aims at it.
    const serverProxy = startProxy(server, 'server-0', 'server', [
      ...inbound(8080),
      ...inbound(8081),
      ...inbound(9000),
      ...inbound(9001),
      '--destination-addr',
      `${NODE_IP}:${ctlPorts.destination}`,
    ]);
    const clientProxy = startProxy(client, 'client-0', 'client', ['--destination-addr', `${NODE_IP}:${ctlPorts.destination}`]);
    const [serverLine, clientLine] = await Promise.all([ready(serverProxy), ready(clientProxy)]);
    assert.match(serverLine, /mesh :4143, admin :4191, inbound 8080@4143->127\.0\.0\.1:8080, .*, transparent$/);
    assert.match(clientLine, /mesh :4143, admin :4191, inbound none, outbound :4140, transparent$/);
  });

  after(async () => {
    for (const p of proxies) await p.stop();
    await ctl?.stop();
    for (const a of agents) await a.stop();
    lab?.cleanup();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('inbound: a plaintext client reaching app port 8081 is authorized by its policy (the node network) and forwarded', async () => {
    const r = await nodeAgent.request({ op: 'http-get', host: SERVER_IP, port: 8081, path: '/open' });
    assert.equal(r.status, 200, JSON.stringify(r));
    // Through the proxy: the application sees a connection from 127.0.0.1, without a client id.
    assert.deepEqual(body(r), { path: '/open', clientId: null, remote: '127.0.0.1' });
  });

  it('inbound: a plaintext request to app port 8080 (only the client identity admitted) gets 403', async () => {
    const r = await nodeAgent.request({ op: 'http-get', host: SERVER_IP, port: 8080, path: '/secret' });
    assert.equal(r.status, 403, JSON.stringify(r));
  });

  it('inbound: an opaque port is authorized per connection — 9000 echoes for the node, 9001 closes without a byte', async () => {
    const open = await nodeAgent.request({ op: 'echo', host: SERVER_IP, port: 9000, data: 'hello 9000' });
    assert.equal(open.echoed, 'hello 9000', JSON.stringify(open));
    const denied = await nodeAgent.request({ op: 'echo', host: SERVER_IP, port: 9001, data: 'hello 9001' });
    assert.deepEqual({ closed: denied.closed, received: denied.received }, { closed: true, received: '' }, JSON.stringify(denied));
  });

  it('outbound: the client pod’s plain connection to 10.244.77.3:8080 is meshed; the server app sees the client identity', async () => {
    const r = await clientAgent.request({ op: 'http-get', host: SERVER_IP, port: 8080, path: '/meshed' });
    assert.equal(r.status, 200, JSON.stringify(r));
    assert.deepEqual(body(r), { path: '/meshed', clientId: CLIENT_ID, remote: '127.0.0.1' });
  });

  it('outbound: an opaque connection to 10.244.77.3:9001 is meshed (transport header) and admitted for the client identity', async () => {
    const r = await clientAgent.request({ op: 'echo', host: SERVER_IP, port: 9001, data: 'meshed bytes' });
    assert.equal(r.echoed, 'meshed bytes', JSON.stringify(r));
  });

  it('outbound: a destination the controller does not know is reached directly, in plaintext, from the pod’s address', async () => {
    const r = await clientAgent.request({ op: 'http-get', host: NODE_IP, port: NODE_HTTP_PORT, path: '/outside' });
    assert.equal(r.status, 200, JSON.stringify(r));
    assert.deepEqual(body(r), { path: '/outside', clientId: null, remote: CLIENT_IP });
  });

  it('inbound, undeclared port: a plaintext client reaches app ports 8082 and 9002 under the pod’s default policy (all-unauthenticated), discovered on first use', async () => {
    const before = appConnections();
    // Three concurrent first connections: they wait together for the port's policy, then each is served.
    const rs = await Promise.all([1, 2, 3].map((i) => nodeAgent.request({ op: 'http-get', host: SERVER_IP, port: OPEN_HTTP_PORT, path: `/undeclared/${i}` })));
    for (const [i, r] of rs.entries()) {
      assert.equal(r.status, 200, JSON.stringify(r));
      // The application's answer, through the proxy (a connection from the pod's address, no client id).
      assert.deepEqual(body(r), { path: `/undeclared/${i + 1}`, clientId: null, remote: SERVER_IP });
    }
    const echo = await nodeAgent.request({ op: 'echo', host: SERVER_IP, port: OPEN_TCP_PORT, data: 'hello 9002' });
    assert.equal(echo.echoed, 'hello 9002', JSON.stringify(echo));
    const after = appConnections();
    assert.ok((after.get(OPEN_HTTP_PORT) ?? 0) > (before.get(OPEN_HTTP_PORT) ?? 0), 'the proxy connected to the application on 8082');
    assert.equal((after.get(OPEN_TCP_PORT) ?? 0) - (before.get(OPEN_TCP_PORT) ?? 0), 1, 'the proxy connected to the application on 9002 once');
  });

  it("attack: a redirected connection to the pod's outbound port 4140 is closed, never discovered nor forwarded to the proxy's own listener", async () => {
    // Discovered like any undeclared port, 4140 would get the open default and be forwarded to
    // 127.0.0.1:4140 — the server pod's outbound proxy — lending the node's plaintext client the
    // pod's identity toward anything (here: the node's own server, through CONNECT).
    const before = await serverAdmin('/debug/policies');
    const attempt = await nodeAgent.request({
      op: 'echo',
      host: SERVER_IP,
      port: 4140,
      data: `CONNECT ${NODE_IP}:${NODE_HTTP_PORT} HTTP/1.1\r\nHost: ${NODE_IP}:${NODE_HTTP_PORT}\r\n\r\n`,
    });
    assert.deepEqual({ closed: attempt.closed, received: attempt.received }, { closed: true, received: '' }, JSON.stringify(attempt));
    const debug = JSON.parse(await serverAdmin('/debug/policies')) as { ports: { port: number }[] };
    assert.equal(
      debug.ports.some((p) => p.port === 4140),
      false,
      `4140 is not a discovered port: ${before}`,
    );
    assert.match(await serverAdmin('/metrics'), /inbound_tcp_errors_total\{[^}]*error="proxy port"[^}]*\} 1/);
  });

  it('inbound, undeclared require-identity port: plaintext gets 403 on 8083 and a closed connection on 9003 (all-authenticated); the app sees neither', async () => {
    const metricsBefore = await serverAdmin('/metrics');
    const before = appConnections();
    const denied = await nodeAgent.request({ op: 'http-get', host: SERVER_IP, port: OPEN_HTTP_PORT_AUTHN, path: '/needs-identity' });
    // The proxy's 403 (content-length 0), not the application's JSON.
    assert.deepEqual({ status: denied.status, body: denied.body }, { status: 403, body: '' }, JSON.stringify(denied));
    const closed = await nodeAgent.request({ op: 'echo', host: SERVER_IP, port: OPEN_TCP_PORT_AUTHN, data: 'hello 9003' });
    assert.deepEqual({ closed: closed.closed, received: closed.received }, { closed: true, received: '' }, JSON.stringify(closed));
    const after = appConnections();
    assert.deepEqual(
      UNDECLARED_PORTS.map((p) => (after.get(p) ?? 0) - (before.get(p) ?? 0)),
      UNDECLARED_PORTS.map(() => 0),
      'no connection reached the application',
    );
    // Denied by the default policy (a decision, not a failure to find a policy).
    const metrics = await serverAdmin('/metrics');
    const srv = { srv_kind: 'default', srv_name: 'all-authenticated' };
    const delta = (name: string, port: number) =>
      metricSum(metrics, name, { ...srv, target_port: String(port) }) - metricSum(metricsBefore, name, { ...srv, target_port: String(port) });
    assert.equal(delta('inbound_http_authz_deny_total', OPEN_HTTP_PORT_AUTHN), 1, metrics);
    assert.equal(delta('inbound_tcp_authz_deny_total', OPEN_TCP_PORT_AUTHN), 1, metrics);
  });

  it('outbound → inbound, undeclared require-identity port: the client pod’s meshed application reaches 8083 and 9003 with its identity', async () => {
    const before = appConnections();
    const r = await clientAgent.request({ op: 'http-get', host: SERVER_IP, port: OPEN_HTTP_PORT_AUTHN, path: '/meshed-undeclared' });
    assert.equal(r.status, 200, JSON.stringify(r));
    assert.deepEqual(body(r), { path: '/meshed-undeclared', clientId: CLIENT_ID, remote: SERVER_IP });
    const echo = await clientAgent.request({ op: 'echo', host: SERVER_IP, port: OPEN_TCP_PORT_AUTHN, data: 'meshed 9003' });
    assert.equal(echo.echoed, 'meshed 9003', JSON.stringify(echo));
    const after = appConnections();
    assert.ok((after.get(OPEN_HTTP_PORT_AUTHN) ?? 0) > (before.get(OPEN_HTTP_PORT_AUTHN) ?? 0), 'the proxy connected to the application on 8083');
    assert.equal((after.get(OPEN_TCP_PORT_AUTHN) ?? 0) - (before.get(OPEN_TCP_PORT_AUTHN) ?? 0), 1, 'the proxy connected to the application on 9003 once');
  });

  it('admin: /debug/policies lists the discovered ports (discovered: true, their default servers) after the declared ones; /metrics labels them', async () => {
    const doc = JSON.parse(await serverAdmin('/debug/policies')) as {
      ports: { port: number; app: string | null; discovered?: boolean; policy: { labels?: Record<string, string> } | null }[];
    };
    const declared = [8080, 8081, 9000, 9001, 4191];
    assert.deepEqual(
      doc.ports.slice(0, declared.length).map((p) => ({ port: p.port, discovered: p.discovered ?? false })),
      declared.map((port) => ({ port, discovered: false })),
      JSON.stringify(doc.ports),
    );
    // In the order they were discovered (the tests' order), which is not asserted.
    const discovered = doc.ports
      .slice(declared.length)
      .map((p) => ({ port: p.port, discovered: p.discovered, app: p.app, kind: p.policy?.labels?.kind, name: p.policy?.labels?.name }))
      .sort((a, b) => a.port - b.port);
    assert.deepEqual(
      discovered,
      UNDECLARED_PORTS.map((port) => ({
        port,
        discovered: true,
        app: `${SERVER_IP}:${port}`,
        kind: 'default',
        name: port === OPEN_HTTP_PORT_AUTHN || port === OPEN_TCP_PORT_AUTHN ? 'all-authenticated' : 'all-unauthenticated',
      })),
      JSON.stringify(doc.ports),
    );
    const metrics = await serverAdmin('/metrics');
    const open = { srv_kind: 'default', srv_name: 'all-unauthenticated', authz_kind: 'default', authz_name: 'all-unauthenticated' };
    const authn = { srv_kind: 'default', srv_name: 'all-authenticated', authz_kind: 'default', authz_name: 'all-authenticated' };
    assert.equal(metricSum(metrics, 'inbound_http_authz_allow_total', { ...open, target_port: String(OPEN_HTTP_PORT) }), 3, metrics);
    assert.equal(metricSum(metrics, 'inbound_tcp_authz_allow_total', { ...open, target_port: String(OPEN_TCP_PORT) }), 1, metrics);
    assert.equal(
      metricSum(metrics, 'inbound_http_authz_allow_total', { ...authn, target_port: String(OPEN_HTTP_PORT_AUTHN), client_id: CLIENT_ID }),
      1,
      metrics,
    );
    assert.equal(metricSum(metrics, 'inbound_tcp_authz_allow_total', { ...authn, target_port: String(OPEN_TCP_PORT_AUTHN), client_id: CLIENT_ID }), 1, metrics);
  });

  it('attack: an undeclared port the application binds to loopback only stays out of reach (the proxy forwards to the pod address, not 127.0.0.1)', async () => {
    // Its default admits anyone; forwarded to 127.0.0.1:8084 the loopback-only service would answer.
    const r = await nodeAgent.request({ op: 'http-get', host: SERVER_IP, port: LOOPBACK_ONLY_PORT, path: '/private' });
    assert.equal(r.status, 502, JSON.stringify(r));
    assert.doesNotMatch(r.body ?? '', /private/, 'the loopback-only application did not answer');
  });

  it('shuts down cleanly on SIGTERM', async () => {
    for (const p of proxies) assert.equal(await p.stop(10_000), 0, p.stderr().slice(-2000));
  });
});
