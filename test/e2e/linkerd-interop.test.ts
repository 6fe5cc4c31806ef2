/**
 * Linkerd's own proxy (the real linkerd2-proxy binary) on ward's control plane, in network
 * namespaces (see linkerd-lab.ts; subnet 10.244.78.0/24): `ward controller --manifests` on the
 * node (`10.244.78.1`), pod `demo/server-0` (`10.244.78.3`) with proxy-init's rules and the real
 * proxy configured as Linkerd's injector configures it, its applications behind it, and the
 * node's plaintext clients in front.
 *
 * a. The proxy is certified by ward's Identity API (over TLS without ALPN, as its control-plane
 *    client connects) and ready: the leaf it presents on its mesh port names its identity, holds
 *    the key it generated and verifies against ward's trust anchor with `openssl verify`.
 * b. Its inbound policy comes from ward's `WatchPort` and it enforces it: an authorized route is
 *    served, a Server admitting only a mesh identity answers 403, a route without authorization
 *    403, an unmatched path 404; gRPC calls get status 7 when denied, on a Server with GRPCRoutes
 *    and on one without (whose default route must carry an empty `rpc` match for the proxy to
 *    accept it); an opaque port refuses an unauthorized connection; a live edit of the manifests
 *    takes effect; an open TCP connection is closed when its authorization is removed.
 *
 * Skipped (with a message naming the binary's path) when the binary, root, iptables or openssl
 * is missing, except under CI=true where that is a failure.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { waitFor } from './helpers.js';
import { type H2Reply, identityOf, LinkerdLab, type LinkerdLabPod, type LinkerdProxy, linkerdLabMissing, linkerdLog } from './linkerd-lab.js';

const SUBNET = '10.244.78';
const NODE_IP = `${SUBNET}.1`;
const SERVER_IP = `${SUBNET}.3`;
const CLIENT_ID = identityOf('demo', 'client');

const server = (name: string, port: number, protocol: string) => `---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: ${name}, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: ${port}
  proxyProtocol: ${protocol}
`;

/** An AuthorizationPolicy on `kind/name` requiring `authn` (`node`: the node's address; `clients`: the client identity). */
const authz = (name: string, kind: 'Server' | 'HTTPRoute' | 'GRPCRoute', target: string, authn: 'node' | 'clients') => `---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: ${name}, namespace: demo}
spec:
  targetRef: {group: ${kind === 'GRPCRoute' ? 'gateway.networking.k8s.io' : 'policy.linkerd.io'}, kind: ${kind}, name: ${target}}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: ${authn === 'node' ? 'NetworkAuthentication' : 'MeshTLSAuthentication'}, name: ${authn}}
`;

const httpRoute = (name: string, parent: string, prefix: string) => `---
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {name: ${name}, namespace: demo}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: ${parent}}]
  rules:
  - matches: [{path: {type: PathPrefix, value: ${prefix}}}]
`;

const grpcRoute = (name: string, parent: string, service: string, method: string) => `---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: ${name}, namespace: demo}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: ${parent}}]
  rules:
  - matches: [{method: {type: Exact, service: ${service}, method: ${method}}}]
`;

const PORTS = { web: 8080, secret: 8081, grpcOpen: 9090, grpcSecret: 9091, grpcRoutes: 9092, tcpSecret: 9000, tcpOpen: 9001 } as const;

const BASE = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
  annotations: {linkerd.io/inject: enabled}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: server, namespace: demo}
---
apiVersion: v1
kind: Pod
metadata: {name: server-0, namespace: demo, labels: {app: server}}
spec:
  serviceAccountName: server
  containers:
  - name: app
    image: demo/server
    ports:
${Object.values(PORTS)
  .map((p) => `    - {containerPort: ${p}}`)
  .join('\n')}
status: {podIP: ${SERVER_IP}}
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
${server('web', PORTS.web, 'HTTP/1')}${httpRoute('allowed', 'web', '/allowed')}${authz('allowed', 'HTTPRoute', 'allowed', 'node')}${httpRoute('denied', 'web', '/denied')}${server('secret', PORTS.secret, 'HTTP/1')}${authz('secret', 'Server', 'secret', 'clients')}${server('grpc-open', PORTS.grpcOpen, 'gRPC')}${authz('grpc-open', 'Server', 'grpc-open', 'node')}${server('grpc-secret', PORTS.grpcSecret, 'gRPC')}${authz('grpc-secret', 'Server', 'grpc-secret', 'clients')}${server('grpc-routes', PORTS.grpcRoutes, 'gRPC')}${grpcRoute('hello', 'grpc-routes', 'demo.Greeter', 'Hello')}${authz('hello', 'GRPCRoute', 'hello', 'node')}${grpcRoute('admin', 'grpc-routes', 'demo.Greeter', 'Admin')}${server('tcp-secret', PORTS.tcpSecret, 'opaque')}${authz('tcp-secret', 'Server', 'tcp-secret', 'clients')}${server('tcp-open', PORTS.tcpOpen, 'opaque')}`;

/** Files edited while the suite runs. */
const TCP_OPEN_AUTHZ = 'tcp-open-authz.yaml';
const DENIED_AUTHZ = 'denied-authz.yaml';

const missing = linkerdLabMissing();
const mustRun = process.env.CI === 'true';

let lab: LinkerdLab | undefined;
let pod: LinkerdLabPod;
let proxy: LinkerdProxy;

function grpcStatus(r: H2Reply): string | undefined {
  return r.trailers?.['grpc-status'] ?? r.headers?.['grpc-status'];
}

function get(port: number, path: string) {
  if (lab === undefined) throw new Error('no lab');
  return lab.nodeAgent.request({ op: 'http-get', host: SERVER_IP, port, path });
}

function openssl(args: readonly string[], input?: string): string {
  const r = spawnSync('openssl', args, { encoding: 'utf8', timeout: 10_000, ...(input === undefined ? {} : { input }) });
  assert.equal(r.status, 0, `openssl ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

describe('e2e: the real linkerd2-proxy on ward’s control plane (network namespaces)', {
  timeout: 300_000,
  skip: missing !== undefined && !mustRun ? `needs ${missing}` : false,
}, () => {
  before(async () => {
    if (missing !== undefined) throw new Error(`the Linkerd interop e2e test needs ${missing} (CI=true: not skipped)`);
    lab = await LinkerdLab.start({
      subnet: SUBNET,
      name: 'linkerd-interop',
      manifests: { 'demo.yaml': BASE, [TCP_OPEN_AUTHZ]: authz('tcp-open', 'Server', 'tcp-open', 'node') },
    });
    pod = lab.addPod(3, { namespace: 'demo', name: 'server-0', sa: 'server' });
    const apps = lab.agent(pod);
    const serving = await Promise.all([
      apps.request({ op: 'http-serve', host: '0.0.0.0', port: PORTS.web }),
      apps.request({ op: 'http-serve', host: '0.0.0.0', port: PORTS.secret }),
      apps.request({ op: 'echo-serve', host: '0.0.0.0', port: PORTS.tcpSecret }),
      apps.request({ op: 'echo-serve', host: '0.0.0.0', port: PORTS.tcpOpen }),
    ]);
    for (const r of serving) assert.equal(r.error, undefined, `an application could not listen: ${r.error}`);
    for (const port of [PORTS.grpcOpen, PORTS.grpcSecret, PORTS.grpcRoutes]) await lab.serveH2(pod, '0.0.0.0', port);
    proxy = lab.startLinkerdProxy(pod, { inboundPorts: Object.values(PORTS) });
  });

  after(async () => {
    await lab?.stop();
  });

  it('a. the proxy gets its certificate from ward’s Identity API and becomes ready; the leaf verifies against ward’s anchor', async (t) => {
    const l = lab as LinkerdLab;
    const started = Date.now();
    await l.waitLinkerdReady(proxy);
    t.diagnostic(`linkerd2-proxy ready ${Date.now() - started} ms after it was started`);
    const chain = l.peerCertificates(pod);
    assert.ok(chain.length >= 1, 'the proxy presented a certificate on its mesh port');
    const [leaf, ...intermediates] = chain as [string, ...string[]];
    const verified = l.verifyWithAnchor(leaf, intermediates);
    assert.ok(verified.ok, `openssl verify: ${verified.output}`);
    assert.match(openssl(['x509', '-noout', '-ext', 'subjectAltName'], leaf), new RegExp(`DNS:${pod.identity.replaceAll('.', '\\.')}\\b`));
    // Issued for the key the proxy's identity directory holds (the CSR the proxy sent), not some other.
    const leafKey = openssl(['x509', '-noout', '-pubkey'], leaf);
    const ownKey = openssl(['pkey', '-inform', 'DER', '-in', join(proxy.identityDir, 'key.p8'), '-pubout']);
    assert.equal(leafKey, ownKey);
    // The same check against another anchor fails: it is not vacuous.
    const otherKey = join(l.dir, 'other-ca.key');
    const otherCa = join(l.dir, 'other-ca.crt');
    openssl([
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-subj',
      '/CN=other',
      '-days',
      '1',
      '-keyout',
      otherKey,
      '-out',
      otherCa,
    ]);
    const leafFile = join(l.dir, 'leaf.pem');
    writeFileSync(leafFile, leaf);
    assert.notEqual(spawnSync('openssl', ['verify', '-CAfile', otherCa, leafFile], { timeout: 10_000 }).status, 0);
  });

  it('b. an HTTP route authorized for the node is served (the policy came from WatchPort)', async () => {
    // The first policy may still be on its way right after readiness: wait for it, boundedly.
    const r = await waitFor(
      `the authorized route to be served (proxy log: ${linkerdLog(proxy).slice(-2000)})`,
      async () => {
        const r = await get(PORTS.web, '/allowed/1');
        return r.status === 200 ? r : undefined;
      },
      30_000,
      100,
    );
    // linkerd2-proxy connects to the application on the pod's address (the original destination's).
    assert.deepEqual(JSON.parse(r.body ?? 'null'), { path: '/allowed/1', clientId: null, remote: SERVER_IP });
  });

  it('b. a Server admitting only a mesh identity answers a plaintext request with 403', async () => {
    const r = await get(PORTS.secret, '/x');
    assert.equal(r.status, 403, JSON.stringify(r));
  });

  it('b. a route without an authorization answers 403; a path no route matches answers 404', async () => {
    const denied = await get(PORTS.web, '/denied');
    assert.equal(denied.status, 403, JSON.stringify(denied));
    const unmatched = await get(PORTS.web, '/elsewhere');
    assert.equal(unmatched.status, 404, JSON.stringify(unmatched));
  });

  it('b. gRPC without a GRPCRoute: an authorized call reaches the application, a denied one gets status 7', async () => {
    const l = lab as LinkerdLab;
    const ok = await l.grpcCall(l.node, SERVER_IP, PORTS.grpcOpen, '/demo.Greeter/Hello');
    assert.equal(ok.status, 200, JSON.stringify(ok));
    assert.equal(grpcStatus(ok), '0', JSON.stringify(ok));
    assert.equal(ok.headers?.['x-path'], '/demo.Greeter/Hello', 'the application answered');
    const denied = await l.grpcCall(l.node, SERVER_IP, PORTS.grpcSecret, '/demo.Greeter/Hello');
    assert.equal(denied.status, 200, JSON.stringify(denied));
    assert.equal(grpcStatus(denied), '7', JSON.stringify(denied));
    assert.equal(denied.headers?.['x-path'], undefined, 'the application did not answer');
  });

  it('b. gRPC with GRPCRoutes: the authorized method reaches the application, a route without authorization gets status 7', async () => {
    const l = lab as LinkerdLab;
    const ok = await l.grpcCall(l.node, SERVER_IP, PORTS.grpcRoutes, '/demo.Greeter/Hello');
    assert.equal(grpcStatus(ok), '0', JSON.stringify(ok));
    assert.equal(ok.headers?.['x-path'], '/demo.Greeter/Hello');
    const denied = await l.grpcCall(l.node, SERVER_IP, PORTS.grpcRoutes, '/demo.Greeter/Admin');
    assert.equal(grpcStatus(denied), '7', JSON.stringify(denied));
    assert.equal(denied.headers?.['x-path'], undefined, 'the application did not answer');
  });

  it('b. an opaque port refuses an unauthorized connection without a byte; an authorized one echoes', async () => {
    const l = lab as LinkerdLab;
    const refused = await l.nodeAgent.request({ op: 'echo', host: SERVER_IP, port: PORTS.tcpSecret, data: 'hello' });
    assert.deepEqual({ closed: refused.closed, received: refused.received }, { closed: true, received: '' }, JSON.stringify(refused));
    const open = await l.nodeAgent.request({ op: 'echo', host: SERVER_IP, port: PORTS.tcpOpen, data: 'hello' });
    assert.equal(open.echoed, 'hello', JSON.stringify(open));
  });

  it('b. a live edit (an authorization for the denied route) takes effect', async (t) => {
    const l = lab as LinkerdLab;
    assert.equal((await get(PORTS.web, '/denied')).status, 403);
    const started = Date.now();
    l.writeManifest(DENIED_AUTHZ, authz('denied', 'HTTPRoute', 'denied', 'node'));
    const r = await waitFor(
      'the edited policy to be enforced',
      async () => {
        const r = await get(PORTS.web, '/denied');
        return r.status === 200 ? r : undefined;
      },
      20_000,
      20,
    );
    t.diagnostic(`the edit was in force ${Date.now() - started} ms after the manifest was written`);
    assert.equal(JSON.parse(r.body ?? 'null').path, '/denied');
  });

  it('b. an open TCP connection is closed when its authorization is removed', async (t) => {
    const l = lab as LinkerdLab;
    const conn = await l.openTcp(l.node, SERVER_IP, PORTS.tcpOpen);
    try {
      assert.equal(await conn.exchange('before'), 'before');
      const started = Date.now();
      l.removeManifest(TCP_OPEN_AUTHZ);
      await Promise.race([conn.closed, new Promise((_, reject) => setTimeout(() => reject(new Error('the connection stayed open for 20 s')), 20_000))]);
      t.diagnostic(`the connection was closed ${Date.now() - started} ms after the authorization was removed`);
      assert.ok(conn.isClosed());
      // A new connection is refused too.
      const again = await l.nodeAgent.request({ op: 'echo', host: SERVER_IP, port: PORTS.tcpOpen, data: 'after' });
      assert.deepEqual({ closed: again.closed, received: again.received }, { closed: true, received: '' }, JSON.stringify(again));
    } finally {
      await conn.end();
    }
  });
});
