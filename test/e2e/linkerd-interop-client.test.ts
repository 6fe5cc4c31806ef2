/**
 * Interop, part d: Linkerd's own proxy as the client. A real linkerd2-proxy in pod `client-0`
 * (`10.244.79.2`, proxy-init's rules, configured as Linkerd's injector configures it) discovers
 * everything from ward's controller on the node (`10.244.79.1`): its certificate (Identity), the
 * client policy of each destination (OutboundPolicies.Watch), its profile (Destination.GetProfile)
 * and its endpoints (Destination.Get). It reaches `ward proxy --transparent` in pod `server-0`
 * (`10.244.79.3`) in front of:
 *
 *     8080  an HTTP/1 application (the agent's: it answers with the `l5d-client-id` it saw)
 *     8081  an HTTP/2 and gRPC application (answers with `x-client-id`)
 *     9000  a TCP echo, opaque (pod and Service annotated `config.linkerd.io/opaque-ports`)
 *
 * through Service `web` (cluster IP `10.244.79.100`, ports 80, 81, 9000) and through the pod
 * address. Every port's Server admits only the client's identity (a MeshTLSAuthentication), so
 * an answer at all means ward verified the real proxy's certificate; the applications also see
 * the identity, and the real proxy's metrics show it verified ward's (`server_id`). HTTP/1 is
 * upgraded to HTTP/2 between the proxies (the endpoint's `h2` hint) and turned back into HTTP/1.1
 * by ward's inbound for the application.
 *
 * Skipped with a message when the binary, root, iptables or openssl is missing; never under CI=true.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { metricSum } from './helpers.js';
import { identityOf, LinkerdLab, type LinkerdLabPod, type LinkerdProxy, linkerdLabMissing, linkerdLog } from './linkerd-lab.js';

const SUBNET = '10.244.79';
const SERVICE_IP = `${SUBNET}.100`;
const SERVER_IP = `${SUBNET}.3`;
const CLIENT_ID = identityOf('demo', 'client');
const SERVER_ID = identityOf('demo', 'server');

const servers = [
  ['http1', 8080, 'HTTP/1'],
  ['http2', 8081, 'HTTP/2'],
  ['tcp', 9000, 'opaque'],
] as const;

const MANIFESTS = `apiVersion: v1
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
kind: ServiceAccount
metadata: {name: client, namespace: demo}
---
apiVersion: v1
kind: Pod
metadata:
  name: server-0
  namespace: demo
  labels: {app: server}
  annotations: {config.linkerd.io/opaque-ports: "9000"}
spec:
  serviceAccountName: server
  containers:
  - name: app
    image: demo/server
    ports: [{containerPort: 8080}, {containerPort: 8081}, {containerPort: 9000}]
status: {podIP: ${SERVER_IP}}
---
apiVersion: v1
kind: Pod
metadata: {name: client-0, namespace: demo, labels: {app: client}}
spec:
  serviceAccountName: client
  containers: [{name: app, image: demo/client}]
status: {podIP: ${SUBNET}.2}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: demo
  annotations: {config.linkerd.io/opaque-ports: "9000"}
spec:
  clusterIP: ${SERVICE_IP}
  selector: {app: server}
  ports:
  - {name: http1, port: 80, targetPort: 8080}
  - {name: http2, port: 81, targetPort: 8081}
  - {name: tcp, port: 9000, targetPort: 9000}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: client, namespace: demo}
spec:
  identities: ["${CLIENT_ID}"]
${servers
  .map(
    ([name, port, protocol]) => `---
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
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: client}
`,
  )
  .join('')}`;

const missing = linkerdLabMissing();
const mustRun = process.env.CI === 'true';

let lab: LinkerdLab | undefined;
let client: LinkerdLabPod;
let server: LinkerdLabPod;
let linkerd: LinkerdProxy;

/** The addresses of each application: through the Service, and at the pod. */
const targets = [
  { via: 'the Service address', host: SERVICE_IP, http1: 80, http2: 81, tcp: 9000 },
  { via: 'the pod address', host: SERVER_IP, http1: 8080, http2: 8081, tcp: 9000 },
] as const;

function log(): string {
  return linkerdLog(linkerd).slice(-4000);
}

describe('e2e interop: linkerd2-proxy (client) through ward’s Destination and outbound policy → ward proxy (server)', {
  timeout: 300_000,
  skip: missing !== undefined && !mustRun ? `needs ${missing}` : false,
}, () => {
  before(async () => {
    if (missing !== undefined) throw new Error(`the interop test needs ${missing} (CI=true: not skipped)`);
    lab = await LinkerdLab.start({ subnet: SUBNET, manifests: { 'demo.yaml': MANIFESTS }, name: 'linkerd-client' });
    client = lab.addPod(2, { namespace: 'demo', name: 'client-0', sa: 'client' });
    server = lab.addPod(3, { namespace: 'demo', name: 'server-0', sa: 'server' });
    const serverAgent = lab.agent(server);
    const serving = await Promise.all([
      serverAgent.request({ op: 'http-serve', host: '0.0.0.0', port: 8080 }),
      serverAgent.request({ op: 'echo-serve', host: '0.0.0.0', port: 9000 }),
    ]);
    for (const r of serving) assert.equal(r.error, undefined, `an application could not listen: ${r.error}`);
    await lab.serveH2(server, '0.0.0.0', 8081);
    const ward = lab.startWardProxy(server, { inboundPorts: [8080, 8081, 9000] });
    linkerd = lab.startLinkerdProxy(client);
    await Promise.all([lab.waitWardReady(ward), lab.waitLinkerdReady(linkerd)]);
  });

  after(async () => {
    await lab?.stop();
  });

  for (const t of targets) {
    it(`HTTP/1 to ${t.via}: the HTTP/1 application behind ward answers and sees the real proxy's identity`, async () => {
      const r = await lab?.agent(client).request({ op: 'http-get', host: t.host, port: t.http1, path: `/h1/${t.http1}`, timeoutMs: 15_000 });
      assert.equal(r?.status, 200, `${JSON.stringify(r)}\n${log()}`);
      const body = JSON.parse(r?.body ?? 'null') as { path: string; clientId: string | null };
      assert.deepStrictEqual({ path: body.path, clientId: body.clientId }, { path: `/h1/${t.http1}`, clientId: CLIENT_ID });
    });

    it(`HTTP/2 to ${t.via}: answered, with the real proxy's identity`, async () => {
      const r = await lab?.h2Request(client, { host: t.host, port: t.http2, path: `/h2/${t.http2}`, timeoutMs: 15_000 });
      assert.equal(r?.status, 200, `${JSON.stringify(r)}\n${log()}`);
      assert.deepStrictEqual([r?.body, r?.headers?.['x-client-id']], [`h2 /h2/${t.http2}`, CLIENT_ID]);
    });

    it(`gRPC to ${t.via}: status 0, with the real proxy's identity`, async () => {
      const r = await lab?.grpcCall(client, t.host, t.http2, '/demo.Echo/Say');
      assert.equal(r?.status, 200, `${JSON.stringify(r)}\n${log()}`);
      assert.deepStrictEqual([r?.trailers?.['grpc-status'] ?? r?.headers?.['grpc-status'], r?.headers?.['x-client-id']], ['0', CLIENT_ID]);
    });

    it(`opaque TCP to ${t.via}: echoed through the transport header, admitted for the real proxy's identity`, async () => {
      const r = await lab?.agent(client).request({ op: 'echo', host: t.host, port: t.tcp, data: `bytes via ${t.via}`, timeoutMs: 15_000 });
      assert.equal(r?.echoed, `bytes via ${t.via}`, `${JSON.stringify(r)}\n${log()}`);
    });
  }

  it('the real proxy routed by ward’s policies: the Service ports by their client policy, the pod by its profile endpoint', async () => {
    if (lab === undefined) return assert.fail('no lab');
    const m = await lab.admin(client, '/metrics');
    const web = (port: number) => ({ parent_group: 'core', parent_kind: 'Service', parent_namespace: 'demo', parent_name: 'web', parent_port: String(port) });
    const endpoint = { parent_kind: 'default', parent_name: 'endpoint' };
    // The three HTTP requests to the Service (80 and 81): the default route `http` of the Service's
    // policy, to the Service's balancer. (The proxy files them under one of the Service's ports.)
    const route = { parent_kind: 'Service', parent_name: 'web', route_kind: 'default', route_name: 'http', backend_kind: 'Service', backend_name: 'web' };
    assert.equal(metricSum(m, 'outbound_http_route_backend_requests_total', route), 3, m);
    // 9000: opaque, as the Service's annotation says.
    assert.equal(metricSum(m, 'outbound_tcp_protocol_connections_total', { ...web(9000), protocol: 'opaq' }), 1, m);
    // The pod address has no client policy (NOT_FOUND): the proxy used the endpoint of its profile.
    assert.equal(metricSum(m, 'outbound_http_route_backend_requests_total', { ...endpoint, route_name: 'endpoint' }), 3, m);
    assert.equal(metricSum(m, 'outbound_tcp_protocol_connections_total', { ...endpoint, protocol: 'opaq' }), 1, m);
  });

  it('ward authorized every connection for the real proxy’s identity; the real proxy verified ward’s server identity', async () => {
    if (lab === undefined) return assert.fail('no lab');
    const wardMetrics = await lab.admin(server, '/metrics');
    for (const [name, port] of servers) {
      const family = name === 'tcp' ? 'inbound_tcp_authz_allow_total' : 'inbound_http_authz_allow_total';
      assert.ok(
        metricSum(wardMetrics, family, { target_port: String(port), client_id: CLIENT_ID }) > 0,
        `${family} on ${port} for ${CLIENT_ID}:\n${wardMetrics}`,
      );
    }
    const linkerdMetrics = await lab.admin(client, '/metrics');
    const outbound = linkerdMetrics.split('\n').filter((l) => l.startsWith('tcp_open_total{') && l.includes('direction="outbound"'));
    const toServer = outbound.filter((l) => l.includes(`server_id="${SERVER_ID}"`) && l.includes('tls="true"'));
    assert.ok(toServer.length > 0, `outbound mTLS connections to ${SERVER_ID}:\n${outbound.join('\n')}`);
    assert.deepStrictEqual(
      outbound.filter((l) => l.includes(`dst_pod="server-0"`) && !l.includes('tls="true"')),
      [],
      'no plaintext connection to the server pod',
    );
  });
});
