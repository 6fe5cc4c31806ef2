import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MetricsBackend, Sample, SeriesQuery, TargetHealth } from './metrics-backend.js';
import { computeAuthzStat, computeEdges, computeStat, type Edge, Inventory, type InventoryPod, insecureReason } from './observe-views.js';
import { histogramQuantile, latestOver, rateOver, type ScrapedSeries, TargetWindow } from './series-window.js';

const id = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const S = 1000;
const NOW = 60 * S;

/** A backend over real windows: two scrapes per pod, at 0 and 60 s; counters given as their increase. */
class FixtureBackend implements MetricsBackend {
  readonly kind = 'embedded' as const;
  readonly windows: TargetWindow[] = [];

  pod(
    ns: string,
    pod: string,
    kind: string,
    workload: string,
    series: { name: string; labels: Record<string, string>; increase?: number; value?: number }[],
  ): this {
    const w = new TargetWindow(5);
    const podLabels = { namespace: ns, pod, workload_kind: kind, workload_name: workload };
    const at = (end: boolean): ScrapedSeries[] =>
      series.map((s) => ({
        name: s.name,
        labels: { ...s.labels, ...podLabels },
        value: s.value ?? (end ? 1000 + (s.increase ?? 0) : 1000),
        cumulative: s.value === undefined,
      }));
    w.record(0, at(false), 1e6);
    w.record(NOW, at(true), 1e6);
    this.windows.push(w);
    return this;
  }

  rate(q: SeriesQuery, windowSeconds: number): Promise<readonly Sample[]> {
    return Promise.resolve(rateOver(this.windows, q, NOW - windowSeconds * S, NOW));
  }
  latest(q: SeriesQuery): Promise<readonly Sample[]> {
    return Promise.resolve(latestOver(this.windows, q, 0));
  }
  quantile(quantile: number, q: SeriesQuery, windowSeconds: number): Promise<readonly Sample[]> {
    return Promise.resolve(histogramQuantile(quantile, rateOver(this.windows, q, NOW - windowSeconds * S, NOW, `${q.metric}_bucket`, true), q.by));
  }
  targets(): Promise<readonly TargetHealth[]> {
    return Promise.resolve([]);
  }
}

const mkPod = (ns: string, name: string, sa: string, workload: string, meshed = true, kind = 'Deployment'): InventoryPod => ({
  namespace: ns,
  name,
  serviceAccount: sa,
  workload: { kind, name: workload },
  meshed,
  identity: meshed ? id(ns, sa) : null,
});

const inventory = new Inventory([
  mkPod('demo', 'server-abc', 'server', 'server'),
  mkPod('demo', 'client-abc', 'client', 'client'),
  mkPod('demo', 'batch-1', 'shared', 'batch', true, 'Job'),
  mkPod('demo', 'cron-1', 'shared', 'cron', true, 'Job'),
  mkPod('demo', 'legacy-abc', 'legacy', 'legacy', false),
  mkPod('demo', 'idle-abc', 'idle', 'idle'),
  mkPod('other', 'db-0', 'db', 'db', false, 'StatefulSet'),
]);

const target = { target_addr: '127.22.0.1:8080', target_ip: '127.22.0.1', target_port: '8080' };
const srv = { srv_group: 'policy.linkerd.io', srv_kind: 'server', srv_name: 'server-http', srv_port: '8080' };
const route = { route_group: 'policy.linkerd.io', route_kind: 'HTTPRoute', route_name: 'work' };
const fromClient = { tls: 'true', client_id: id('demo', 'client') };
const fromShared = { tls: 'true', client_id: id('demo', 'shared') };
const fromLegacy = { tls: 'no_identity', no_tls_reason: 'no_tls_from_remote' };
const authz = { authz_group: 'policy.linkerd.io', authz_kind: 'authorizationpolicy', authz_name: 'client-only' };
const inbound = { direction: 'inbound', ...target, ...srv };
const bucket = (le: string, increase: number, tls: Record<string, string>) => ({
  name: 'response_latency_ms_bucket',
  labels: { ...inbound, ...route, ...authz, ...tls, le },
  increase,
});

function fixture(): FixtureBackend {
  return new FixtureBackend()
    .pod('demo', 'server-abc', 'Deployment', 'server', [
      // client: 600 requests in 60 s, 60 of them 5xx; latency mostly under 10 ms.
      { name: 'request_total', labels: { ...inbound, ...route, ...authz, ...fromClient }, increase: 600 },
      { name: 'response_total', labels: { ...inbound, ...route, ...authz, ...fromClient, status_code: '200', classification: 'success' }, increase: 540 },
      { name: 'response_total', labels: { ...inbound, ...route, ...authz, ...fromClient, status_code: '500', classification: 'failure' }, increase: 60 },
      bucket('10', 540, fromClient),
      bucket('100', 600, fromClient),
      bucket('+Inf', 600, fromClient),
      { name: 'inbound_http_authz_allow_total', labels: { ...target, ...srv, ...route, ...authz, ...fromClient }, increase: 600 },
      { name: 'tcp_open_total', labels: { direction: 'inbound', peer: 'src', ...target, ...srv, ...fromClient }, increase: 2 },
      { name: 'tcp_open_connections', labels: { direction: 'inbound', peer: 'src', ...target, ...srv, ...fromClient }, value: 2 },
      // legacy (unmeshed): 120 requests, all denied by policy.
      { name: 'inbound_http_authz_deny_total', labels: { ...target, ...srv, ...route, ...fromLegacy }, increase: 120 },
      { name: 'tcp_open_connections', labels: { direction: 'inbound', peer: 'src', ...target, ...srv, ...fromLegacy }, value: 0 },
      // A job whose ServiceAccount two workloads share: 60 requests.
      { name: 'request_total', labels: { ...inbound, ...route, ...authz, ...fromShared }, increase: 60 },
      { name: 'inbound_http_authz_allow_total', labels: { ...target, ...srv, ...route, ...authz, ...fromShared }, increase: 60 },
      // The admin port: the collector's scrapes, denied here.
      {
        name: 'inbound_http_authz_deny_total',
        labels: {
          target_addr: '127.22.0.1:4191',
          target_ip: '127.22.0.1',
          target_port: '4191',
          srv_kind: 'default',
          srv_name: 'deny',
          srv_port: '4191',
          ...route,
          tls: 'true',
          client_id: id('linkerd', 'ward-controller'),
        },
        increase: 6,
      },
      // Old traffic, idle in the window: no edge.
      { name: 'request_total', labels: { ...inbound, ...route, ...authz, tls: 'true', client_id: id('demo', 'idle') }, increase: 0 },
    ])
    .pod('demo', 'client-abc', 'Deployment', 'client', [
      // An outbound call to an unmeshed database in another namespace.
      {
        name: 'tcp_open_total',
        labels: {
          direction: 'outbound',
          peer: 'dst',
          tls: 'no_identity',
          no_tls_reason: 'not_provided_by_service_discovery',
          target_port: '5432',
          dst_namespace: 'other',
          dst_statefulset: 'db',
          dst_pod: 'db-0',
        },
        increase: 3,
      },
    ]);
}

const edgeSummary = (e: Edge) => ({
  src: e.src === null ? null : `${e.src.kind}/${e.src.name}`,
  srcIdentity: e.srcIdentity,
  dst: `${e.dst.namespace}/${e.dst.kind}/${e.dst.name}:${e.port}`,
  secured: e.secured,
  reason: e.reason,
  rps: e.rps,
  deniedRps: e.deniedRps,
  connections: e.connections,
  ...(e.srcCandidates !== undefined ? { candidates: e.srcCandidates.map((c) => c.name) } : {}),
});

describe('edges', () => {
  it('lists secured edges with both identities, unmeshed clients with their reason, and never guesses a shared identity', async () => {
    const view = await computeEdges(fixture(), inventory, { namespace: undefined }, 60);
    assert.equal(view.window, 60);
    assert.equal(view.backend, 'embedded');
    // By destination and port, then known sources, then the others.
    assert.deepEqual(view.edges.map(edgeSummary), [
      {
        src: null,
        srcIdentity: id('linkerd', 'ward-controller'),
        dst: 'demo/Deployment/server:4191',
        secured: true,
        reason: null,
        rps: 0,
        deniedRps: 0.1,
        connections: 0,
      },
      {
        src: 'Deployment/client',
        srcIdentity: id('demo', 'client'),
        dst: 'demo/Deployment/server:8080',
        secured: true,
        reason: null,
        rps: 10,
        deniedRps: 0,
        connections: 2,
      },
      { src: null, srcIdentity: null, dst: 'demo/Deployment/server:8080', secured: false, reason: 'not meshed', rps: 0, deniedRps: 2, connections: 0 },
      {
        src: null,
        srcIdentity: id('demo', 'shared'),
        dst: 'demo/Deployment/server:8080',
        secured: true,
        reason: null,
        rps: 1,
        deniedRps: 0,
        connections: 0,
        candidates: ['batch', 'cron'],
      },
      {
        src: 'Deployment/client',
        srcIdentity: id('demo', 'client'),
        dst: 'other/StatefulSet/db:5432',
        secured: false,
        reason: 'destination not meshed',
        rps: 0,
        deniedRps: 0,
        connections: 0,
      },
    ]);
    assert.equal(view.edges[1]?.dstIdentity, id('demo', 'server'));
  });

  it('keeps the edges of a namespace or a kind at either end', async () => {
    const other = await computeEdges(fixture(), inventory, { namespace: 'other' }, 60);
    assert.deepEqual(
      other.edges.map((e) => `${e.src?.name}->${e.dst.name}`),
      ['client->db'],
    );
    const sts = await computeEdges(fixture(), inventory, { namespace: undefined, kind: 'StatefulSet' }, 60);
    assert.equal(sts.edges.length, 1);
    const none = await computeEdges(fixture(), inventory, { namespace: 'nowhere' }, 60);
    assert.deepEqual(none.edges, []);
  });

  it('says why a connection is not secured', () => {
    assert.equal(insecureReason('true', '', 'x'), null);
    assert.equal(insecureReason('true', '', ''), 'no client identity');
    assert.equal(insecureReason('no_identity', 'no_tls_from_remote', ''), 'not meshed');
    assert.equal(insecureReason('no_identity', 'port_skipped', ''), 'port skipped');
    assert.equal(insecureReason('opaque', '', ''), 'TLS passthrough');
    assert.equal(insecureReason('disabled', '', ''), 'identity disabled');
  });
});

describe('stat', () => {
  it('counts requests, application success apart from denials, latency and connections per workload and port', async () => {
    const view = await computeStat(fixture(), inventory, { namespace: 'demo', kind: 'Deployment' }, 60);
    const server = view.rows.filter((r) => r.name === 'server');
    assert.deepEqual(
      server.map((r) => ({
        port: r.port,
        rps: r.rps,
        successRate: r.successRate,
        deniedRps: r.deniedRps,
        tcp: r.tcpConnections,
        meshed: r.meshed,
        pods: r.pods,
      })),
      [
        { port: null, rps: 11, successRate: 0.9, deniedRps: 2, tcp: 2, meshed: true, pods: 1 },
        { port: 8080, rps: 11, successRate: 0.9, deniedRps: 2, tcp: 2, meshed: true, pods: 1 },
      ],
    );
    const all = server[0];
    // 540 of 600 under 10 ms: the median interpolates inside the first bucket, p99 in the second.
    assert.ok(Math.abs((all?.p50Ms ?? 0) - 10 * (300 / 540)) < 1e-9, String(all?.p50Ms));
    assert.ok(Math.abs((all?.p99Ms ?? 0) - (10 + 90 * (54 / 60))) < 1e-9, String(all?.p99Ms));
    // Known workloads without traffic are listed, unmeshed ones as such; other kinds are not.
    assert.deepEqual(
      view.rows.filter((r) => r.port === null).map((r) => [r.name, r.meshed, r.rps, r.successRate]),
      [
        ['client', true, 0, null],
        ['idle', true, 0, null],
        ['legacy', false, 0, null],
        ['server', true, 11, 0.9],
      ],
    );
  });

  it('selects one workload, pods, or namespaces', async () => {
    const one = await computeStat(fixture(), inventory, { namespace: 'demo', kind: 'Deployment', name: 'server' }, 60);
    assert.deepEqual(
      one.rows.map((r) => r.port),
      [null, 8080],
    );
    const pods = await computeStat(fixture(), inventory, { namespace: 'demo', kind: 'Pod' }, 60);
    assert.equal(pods.rows.find((r) => r.name === 'server-abc' && r.port === null)?.rps, 11);
    const ns = await computeStat(fixture(), inventory, { namespace: undefined, kind: 'Namespace' }, 60);
    assert.deepEqual(
      ns.rows.filter((r) => r.port === null).map((r) => [r.name, r.pods, r.rps]),
      [
        ['demo', 6, 11],
        ['other', 1, 0],
      ],
    );
  });
});

describe('stat authz', () => {
  it('gives allowed rates per authorization and denied rates with no authorization', async () => {
    const view = await computeAuthzStat(fixture(), { namespace: 'demo', kind: 'Deployment', name: 'server' }, 60);
    assert.deepEqual(
      view.rows.map((r) => [r.port, r.server, r.route, r.authz, r.allowedRps, r.deniedRps]),
      [
        [4191, 'default/deny', 'HTTPRoute/work', null, 0, 0.1],
        [8080, 'server/server-http', 'HTTPRoute/work', 'authorizationpolicy/client-only', 11, 0],
        [8080, 'server/server-http', 'HTTPRoute/work', null, 0, 2],
      ],
    );
    const none = await computeAuthzStat(fixture(), { namespace: 'demo', kind: 'Deployment', name: 'client' }, 60);
    assert.deepEqual(none.rows, []);
  });
});
