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
 * The controller's answers themselves (and a live edit reaching a Watch) are checked first on
 * loopback, which needs none of these.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { destinationProfileToWire, destinationProto, type GrpcError, OutboundPolicyClient, outboundPolicyToWire, outboundProto } from '../../src/api/index.js';
import { type ControllerPorts, controllerPorts, initWorkdir, metricSum, spawnController, type WardProcess, waitFor } from './helpers.js';
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

describe('e2e: ward controller answers OutboundPolicies and GetProfile from its manifests', { timeout: 120_000 }, () => {
  const DESTINATION_SERVER = 'linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local';
  const WORKLOAD = '{"ns":"demo", "pod":"client-0"}\n';
  let dir: string;
  let manifests: string;
  let ctl: WardProcess | undefined;
  let ports: ControllerPorts;
  let policy: OutboundPolicyClient;
  let destination: OutboundPolicyClient;
  const json = (m: outboundProto.OutboundPolicy) => outboundProto.OutboundPolicy.toJSON(m);
  const web = (port: number, appProtocol?: 'opaque') =>
    json(outboundPolicyToWire({ kind: 'service', namespace: 'demo', name: 'web', port, authority: `web.demo.svc.cluster.local:${port}`, appProtocol }));

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-e2e-outbound-'));
    const work = initWorkdir(dir);
    manifests = work.manifests;
    writeFileSync(join(manifests, 'demo.yaml'), MANIFESTS);
    ctl = spawnController(manifests, work.idDir, '127.0.0.1');
    ports = await controllerPorts(ctl);
    const tls = { caPem: readFileSync(join(work.idDir, 'ca.crt'), 'utf8'), serverName: DESTINATION_SERVER };
    policy = new OutboundPolicyClient({ address: `127.0.0.1:${ports.policy}`, tls });
    destination = new OutboundPolicyClient({ address: `127.0.0.1:${ports.destination}`, tls });
  });

  after(async () => {
    policy?.close();
    destination?.close();
    await ctl?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('OutboundPolicies.Get: the Service port by address and by name, the undefined port, nothing for a pod address', async () => {
    assert.deepStrictEqual(json(await policy.get(WORKLOAD, { ip: SERVICE_IP, port: 80 })), web(80));
    assert.deepStrictEqual(json(await policy.get(WORKLOAD, { authority: 'web.demo.svc.cluster.local:80' })), web(80));
    assert.deepStrictEqual(json(await policy.get(WORKLOAD, { ip: SERVICE_IP, port: 9000 })), web(9000, 'opaque'));
    assert.deepStrictEqual(
      json(await policy.get(WORKLOAD, { ip: SERVICE_IP, port: 82 })),
      json(outboundPolicyToWire({ kind: 'undefinedPort', namespace: 'demo', name: 'web', port: 82 })),
    );
    const refused = await policy.get(WORKLOAD, { ip: SERVER_IP, port: 8080 }).catch((e: GrpcError) => e);
    assert.deepStrictEqual([(refused as GrpcError).code, (refused as GrpcError).details], ['NOT_FOUND', 'No such service']);
  });

  it('GetProfile: a Service address as the Service (its fully-qualified name); a pod address as its endpoint, with the server identity', async () => {
    const first = (path: string) =>
      new Promise<destinationProto.DestinationProfile>((resolve, reject) => {
        const cancel = destination.getProfile(path, {
          onMessage: (m) => {
            cancel();
            resolve(m);
          },
          onEnd: (e) => reject(e ?? new Error('ended without a profile')),
        });
      });
    const decoded = (m: Parameters<typeof destinationProfileToWire>[0]) =>
      destinationProto.DestinationProfile.decode(destinationProto.DestinationProfile.encode(destinationProfileToWire(m)).finish());
    assert.deepStrictEqual(
      await first(`${SERVICE_IP}:80`),
      decoded({ kind: 'service', namespace: 'demo', name: 'web', port: 80, fullyQualifiedName: 'web.demo.svc.cluster.local', opaqueProtocol: false }),
    );
    const pod = await first(`${SERVER_IP}:9000`);
    assert.deepStrictEqual(
      [pod.fullyQualifiedName, pod.opaqueProtocol, pod.endpoint?.tlsIdentity?.strategy, pod.endpoint?.protocolHint],
      [
        '',
        true,
        { $case: 'dnsLikeIdentity', value: { name: SERVER_ID } },
        { protocol: { $case: 'opaque', value: {} }, opaqueTransport: { inboundPort: 4143 } },
      ],
    );
  });

  it('OutboundPolicies.Watch: an edit of the Service’s opaque ports reaches an open watch', async () => {
    const seen: outboundProto.OutboundPolicy[] = [];
    let ended: GrpcError | undefined | null = null;
    const cancel = policy.watch(WORKLOAD, { ip: SERVICE_IP, port: 80 }, { onMessage: (m) => seen.push(m), onEnd: (e) => (ended = e) });
    try {
      await waitFor('the initial policy', () => (seen.length >= 1 ? true : undefined), 10_000, 20);
      assert.deepStrictEqual(json(seen[0] as outboundProto.OutboundPolicy), web(80));
      writeFileSync(
        join(manifests, 'demo.yaml'),
        MANIFESTS.replace(
          'annotations: {config.linkerd.io/opaque-ports: "9000"}\nspec:\n  clusterIP',
          'annotations: {config.linkerd.io/opaque-ports: "80,9000"}\nspec:\n  clusterIP',
        ),
      );
      await waitFor('the opaque policy', () => (seen.length >= 2 ? true : undefined), 20_000, 20);
      assert.deepStrictEqual(seen.slice(1).map(json), [web(80, 'opaque')]);
      assert.equal(ended, null, 'the watch is still open');
    } finally {
      cancel();
    }
  });
});
