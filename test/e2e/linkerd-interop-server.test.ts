/**
 * ward's proxy beside Linkerd's own (`../shared/interop/linkerd2-proxy/linkerd2-proxy`), both on
 * ward's control plane, in the lab of linkerd-lab.ts (subnet 10.244.80.0/24, node `.1` running
 * `ward controller --manifests`):
 *
 *     client-0  10.244.80.2  ward proxy --transparent (the client)
 *     server-0  10.244.80.3  the real linkerd2-proxy   (server)   apps: 8080 HTTP/1, 8081 HTTP/2 + gRPC, 9000 TCP echo (opaque)
 *     server-1  10.244.80.4  ward proxy --transparent (server)   the same apps
 *     lclient-0 10.244.80.5  the real linkerd2-proxy   (client)
 *
 * It shows (issue 25, parts c and e, and item 4):
 * - ward's proxy as the client of the real proxy: HTTP/1, HTTP/2, gRPC and opaque TCP over mesh
 *   TLS, the application seeing ward's identity in `l5d-client-id` (opaque: the server proxy's
 *   `tcp_open_total` names it);
 * - the real proxy as the client of ward's proxy with an HTTP/1 application: Destination hints
 *   `h2`, so the real proxy carries the request as HTTP/2 marked `l5d-orig-proto`, and ward's
 *   inbound hands the application HTTP/1.1 again;
 * - for the same traffic from ward's client to both servers, the two servers' `/metrics` have the
 *   same families with the same label names: the inbound authorization families, `request_total`,
 *   `response_total`, `response_latency_ms`, the `tcp_*` families and the identity families
 *   (ward's `tcp_connection_duration_ms`, which upstream no longer has, aside); and the two clients'
 *   outbound `request_total`, `response_total` and `response_latency_ms` for their HTTP/1 and gRPC
 *   requests to ward's server (ward's client in transparent mode).
 *
 * Skipped with a message naming what is missing (the binary, root, iptables, openssl) except
 * under CI=true, where that is a failure.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { WardProcess } from './helpers.js';
import { identityOf, LinkerdLab, type LinkerdLabPod, type LinkerdProxy, linkerdLabMissing, linkerdLog } from './linkerd-lab.js';

const SUBNET = '10.244.80';
const CLIENT_ID = identityOf('demo', 'client');
const LCLIENT_ID = identityOf('demo', 'lclient');
const SERVER_ID = identityOf('demo', 'server');
const HTTP1_PORT = 8080;
const HTTP2_PORT = 8081;
const TCP_PORT = 9000;

const pod = (name: string, sa: string, host: number, server: boolean) => `---
apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: demo
  labels: {app: ${server ? 'server' : name}}
  annotations:
    linkerd.io/inject: enabled
${server ? `    config.linkerd.io/opaque-ports: "${TCP_PORT}"\n` : ''}spec:
  serviceAccountName: ${sa}
  containers:
  - name: app
    image: demo/app
${server ? `    ports: [{containerPort: ${HTTP1_PORT}}, {containerPort: ${HTTP2_PORT}}, {containerPort: ${TCP_PORT}}]\n` : ''}status: {podIP: ${SUBNET}.${host}}
`;

const MANIFESTS = `apiVersion: v1
kind: Namespace
metadata: {name: demo}
${['client', 'server', 'lclient'].map((sa) => `---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: ${sa}, namespace: demo}\n`).join('')}${pod('client-0', 'client', 2, false)}${pod('server-0', 'server', 3, true)}${pod('server-1', 'server', 4, true)}${pod('lclient-0', 'lclient', 5, false)}`;

const missing = linkerdLabMissing();
const mustRun = process.env.CI === 'true';

/** A Prometheus text exposition's samples: family (sample name) → label sets. */
function samples(text: string): Map<string, Record<string, string>[]> {
  const out = new Map<string, Record<string, string>[]>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$/.exec(line);
    if (m === null) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1] as string] = l[2] as string;
    const list = out.get(m[1] as string) ?? [];
    list.push(labels);
    out.set(m[1] as string, list);
  }
  return out;
}

/** The distinct label-name lists (sorted, joined) of a family's samples that `keep` selects. */
function labelShapes(all: Map<string, Record<string, string>[]>, family: string, keep: (l: Record<string, string>) => boolean = () => true): string[] {
  const shapes = new Set<string>();
  for (const l of all.get(family) ?? []) if (keep(l)) shapes.add(Object.keys(l).sort().join(','));
  return [...shapes].sort();
}

describe('linkerd2-proxy interop: ward client → Linkerd server, Linkerd client → ward server, metrics side by side', {
  skip: missing !== undefined && !mustRun ? `needs ${missing}` : false,
}, () => {
  let lab: LinkerdLab;
  let client: LinkerdLabPod;
  let linkerdServer: LinkerdLabPod;
  let wardServer: LinkerdLabPod;
  let linkerdClient: LinkerdLabPod;
  let linkerdServerProxy: LinkerdProxy;
  let linkerdClientProxy: LinkerdProxy;
  let wardClientProxy: WardProcess;
  let wardServerProxy: WardProcess;

  before(async () => {
    if (missing !== undefined) throw new Error(`the linkerd2-proxy interop test needs ${missing} (CI=true: not skipped)`);
    lab = await LinkerdLab.start({ subnet: SUBNET, manifests: { 'demo.yaml': MANIFESTS }, name: 'linkerd-interop-server' });
    client = lab.addPod(2, { namespace: 'demo', name: 'client-0', sa: 'client' });
    linkerdServer = lab.addPod(3, { namespace: 'demo', name: 'server-0', sa: 'server' });
    wardServer = lab.addPod(4, { namespace: 'demo', name: 'server-1', sa: 'server' });
    linkerdClient = lab.addPod(5, { namespace: 'demo', name: 'lclient-0', sa: 'lclient' });
    for (const server of [linkerdServer, wardServer]) {
      const agent = lab.agent(server);
      const served = await Promise.all([
        agent.request({ op: 'http-serve', host: '0.0.0.0', port: HTTP1_PORT }),
        agent.request({ op: 'echo-serve', host: '0.0.0.0', port: TCP_PORT }),
      ]);
      for (const r of served) assert.equal(r.error, undefined, `an application could not listen in ${server.name}: ${r.error}`);
      await lab.serveH2(server, '0.0.0.0', HTTP2_PORT);
    }
    const ports = [HTTP1_PORT, HTTP2_PORT, TCP_PORT];
    linkerdServerProxy = lab.startLinkerdProxy(linkerdServer, { inboundPorts: ports, opaquePorts: [TCP_PORT] });
    linkerdClientProxy = lab.startLinkerdProxy(linkerdClient);
    wardServerProxy = lab.startWardProxy(wardServer, { inboundPorts: ports });
    wardClientProxy = lab.startWardProxy(client);
    await Promise.all([
      lab.waitLinkerdReady(linkerdServerProxy),
      lab.waitLinkerdReady(linkerdClientProxy),
      lab.waitWardReady(wardServerProxy),
      lab.waitWardReady(wardClientProxy),
    ]);
  });

  after(async () => {
    await lab?.stop();
  });

  /** What the failing test's message carries: the proxies' recent logs. */
  const logs = () =>
    `\n--- linkerd server:\n${linkerdLog(linkerdServerProxy).slice(-2000)}\n--- linkerd client:\n${linkerdLog(linkerdClientProxy).slice(-2000)}` +
    `\n--- ward client:\n${wardClientProxy.stderr().slice(-2000)}\n--- ward server:\n${wardServerProxy.stderr().slice(-2000)}`;

  for (const [side, host] of [
    ['the real linkerd2-proxy', 3],
    ['ward’s proxy', 4],
  ] as const) {
    it(`ward client → ${side}: HTTP/1, HTTP/2 and gRPC over mesh TLS, the application seeing ward’s identity`, async () => {
      const ip = `${SUBNET}.${host}`;
      const h1 = await lab.agent(client).request({ op: 'http-get', host: ip, port: HTTP1_PORT, path: '/c-h1' });
      assert.equal(h1.status, 200, `${JSON.stringify(h1)}${logs()}`);
      assert.deepEqual(JSON.parse(h1.body ?? '{}').clientId, CLIENT_ID);
      const h2 = await lab.h2Request(client, { host: ip, port: HTTP2_PORT, path: '/c-h2' });
      assert.equal(h2.status, 200, `${JSON.stringify(h2)}${logs()}`);
      assert.deepEqual([h2.headers?.['x-path'], h2.headers?.['x-client-id'], h2.body], ['/c-h2', CLIENT_ID, 'h2 /c-h2']);
      const grpc = await lab.grpcCall(client, ip, HTTP2_PORT, '/demo.Svc/Call');
      assert.equal(grpc.status, 200, `${JSON.stringify(grpc)}${logs()}`);
      assert.equal(grpc.trailers?.['grpc-status'], '0', JSON.stringify(grpc));
      assert.equal(grpc.headers?.['x-client-id'], CLIENT_ID);
    });

    it(`ward client → ${side}: opaque TCP over mesh TLS, the server proxy naming ward’s identity`, async () => {
      const ip = `${SUBNET}.${host}`;
      const r = await lab.agent(client).request({ op: 'echo', host: ip, port: TCP_PORT, data: 'opaque bytes' });
      assert.equal(r.echoed, 'opaque bytes', `${JSON.stringify(r)}${logs()}`);
      const metrics = samples(await lab.admin(host === 3 ? linkerdServer : wardServer, '/metrics'));
      const opened = (metrics.get('tcp_open_total') ?? []).filter((l) => l.direction === 'inbound' && l.target_port === String(TCP_PORT));
      assert.ok(
        opened.some((l) => l.tls === 'true' && l.client_id === CLIENT_ID),
        `an inbound connection to ${TCP_PORT} from ${CLIENT_ID}: ${JSON.stringify(opened)}`,
      );
    });
  }

  it('Linkerd client → ward’s proxy: HTTP/1 upgraded to HTTP/2 between the proxies (l5d-orig-proto) reaches the HTTP/1 application', async () => {
    const agent = lab.agent(linkerdClient);
    for (const path of ['/orig-1', '/orig-2']) {
      const r = await agent.request({ op: 'http-get', host: `${SUBNET}.4`, port: HTTP1_PORT, path, timeoutMs: 15_000 });
      assert.equal(r.status, 200, `${JSON.stringify(r)}${logs()}`);
      assert.deepEqual(JSON.parse(r.body ?? '{}'), { path, clientId: LCLIENT_ID, remote: '127.0.0.1' });
    }
    // The real proxy's outbound counted them on an endpoint it reached with mesh TLS, naming ward's server identity.
    const out = samples(await lab.admin(linkerdClient, '/metrics'));
    const responses = (out.get('response_total') ?? []).filter((l) => l.direction === 'outbound' && l.target_addr === `${SUBNET}.4:${HTTP1_PORT}`);
    assert.ok(
      responses.some((l) => l.status_code === '200' && l.tls === 'true' && l.server_id === SERVER_ID),
      `the real proxy's outbound responses: ${JSON.stringify(responses)}`,
    );
  });

  it('for the same traffic, both servers’ (and both clients’ outbound) metric families have the same label names', async () => {
    // The traffic of the tests above reached both servers alike; once more, so this test stands alone.
    for (const ip of [`${SUBNET}.3`, `${SUBNET}.4`]) {
      assert.equal((await lab.agent(client).request({ op: 'http-get', host: ip, port: HTTP1_PORT, path: '/same' })).status, 200);
      assert.equal((await lab.grpcCall(client, ip, HTTP2_PORT, '/demo.Svc/Call')).status, 200);
      assert.equal((await lab.agent(client).request({ op: 'echo', host: ip, port: TCP_PORT, data: 'same' })).echoed, 'same');
    }
    const linkerd = samples(await lab.admin(linkerdServer, '/metrics'));
    const ward = samples(await lab.admin(wardServer, '/metrics'));
    const fromClient = (l: Record<string, string>) =>
      l.direction === 'inbound' && [HTTP1_PORT, HTTP2_PORT, TCP_PORT].map(String).includes(l.target_port ?? '') && (l.client_id ?? CLIENT_ID) === CLIENT_ID;
    const appPort = (l: Record<string, string>) => [HTTP1_PORT, HTTP2_PORT, TCP_PORT].map(String).includes(l.target_port ?? '');
    const families: [string, (l: Record<string, string>) => boolean][] = [
      ['inbound_http_authz_allow_total', appPort],
      ['inbound_tcp_authz_allow_total', appPort],
      ['request_total', fromClient],
      ['response_total', fromClient],
      ['response_latency_ms_bucket', fromClient],
      ['tcp_open_total', fromClient],
      ['tcp_open_connections', fromClient],
      ['tcp_read_bytes_total', fromClient],
      ['tcp_write_bytes_total', fromClient],
      ['tcp_close_total', fromClient],
      // (ward's tcp_connection_duration_ms has no upstream counterpart any more: not compared.)
      ['control_identity_cert_expiration_timestamp_seconds', () => true],
      ['control_identity_cert_refresh_timestamp_seconds', () => true],
      ['control_identity_cert_refreshes_total', () => true],
    ];
    const differences: string[] = [];
    for (const [family, keep] of families) {
      const l = labelShapes(linkerd, family, keep);
      const w = labelShapes(ward, family, keep);
      if (l.length === 0) differences.push(`${family}: no sample from the real proxy`);
      if (JSON.stringify(l) !== JSON.stringify(w)) differences.push(`${family}:\n  linkerd ${JSON.stringify(l)}\n  ward    ${JSON.stringify(w)}`);
    }
    // The clients' outbound HTTP/1 and gRPC requests to ward's server: the real proxy's and ward's (transparent mode).
    const fromLinkerd = await lab.grpcCall(linkerdClient, `${SUBNET}.4`, HTTP2_PORT, '/demo.Svc/Call');
    assert.equal(fromLinkerd.trailers?.['grpc-status'], '0', `${JSON.stringify(fromLinkerd)}${logs()}`);
    const lc = samples(await lab.admin(linkerdClient, '/metrics'));
    const wc = samples(await lab.admin(client, '/metrics'));
    for (const port of [HTTP1_PORT, HTTP2_PORT]) {
      const toWardServer = (l: Record<string, string>) => l.direction === 'outbound' && l.target_addr === `${SUBNET}.4:${port}`;
      for (const family of ['request_total', 'response_total', 'response_latency_ms_bucket']) {
        const l = labelShapes(lc, family, toWardServer);
        const w = labelShapes(wc, family, toWardServer);
        if (l.length === 0) differences.push(`${family}: no outbound sample to ${port} from the real proxy`);
        if (JSON.stringify(l) !== JSON.stringify(w))
          differences.push(`outbound ${family} to ${port}:\n  linkerd ${JSON.stringify(l)}\n  ward    ${JSON.stringify(w)}`);
      }
    }
    assert.deepEqual(differences, [], differences.join('\n'));
    // The gRPC response's classification labels, as upstream writes them.
    const grpc = (m: Map<string, Record<string, string>[]>) =>
      (m.get('response_total') ?? []).filter((l) => fromClient(l) && l.target_port === String(HTTP2_PORT) && l.grpc_status === '0');
    for (const [name, m] of [
      ['linkerd', linkerd],
      ['ward', ward],
    ] as const) {
      assert.ok(
        grpc(m).some((l) => l.classification === 'success' && l.error === '' && l.status_code === '200'),
        `${name}: ${JSON.stringify(m.get('response_total'))}`,
      );
    }
  });
});
