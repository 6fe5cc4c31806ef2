/**
 * InboundMetrics: the §4.11 names and labels in the Prometheus text, one series per label set
 * (also across policy updates that re-create equal metadata), the TLS label variants, response
 * classification and the inbound transport series.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { describe, it } from 'node:test';
import { type ClientInfo, type Deny, defaultMeta, type Meta, type Permit, parseIp, type RequestInfo } from '../../core/index.js';
import { clockedRegistry } from '../testing/metrics.js';
import { MetricsRegistry } from './cells.js';
import { InboundMetrics } from './inbound.js';
import { tlsLabels } from './labels.js';

const IP = parseIp('10.0.0.7') as NonNullable<ReturnType<typeof parseIp>>;
const WEB_ID = 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local';
const srv = (name: string): Meta => ({ group: 'policy.linkerd.io', kind: 'server', name });
const authzMeta = (name: string): Meta => ({ group: 'policy.linkerd.io', kind: 'authorizationpolicy', name });
const route = defaultMeta('default');
const meshed: ClientInfo = { ip: IP, tls: { kind: 'established', clientId: WEB_ID } };
const plain: ClientInfo = { ip: IP, tls: { kind: 'none', reason: 'no_tls_from_remote' } };
const request: RequestInfo = { method: 'GET', path: '/', headers: {} };

const permit = (server: Meta, authz: Meta, level: 'http' | 'tcp' = 'http'): Permit => ({
  allowed: true,
  level,
  server,
  route: level === 'http' ? route : undefined,
  authz,
  isAudit: false,
});
const deny = (server: Meta, kind: Deny['kind'] = 'http403'): Deny => ({
  allowed: false,
  level: kind === 'tcp-refuse' ? 'tcp' : 'http',
  kind,
  server,
  route: kind === 'http403' ? route : undefined,
  reason: 'x',
});

/** The sample lines of `name` (no HELP/TYPE). */
async function samples(registry: MetricsRegistry, name: string): Promise<string[]> {
  const text = await registry.metrics();
  return text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
}

describe('InboundMetrics', () => {
  it('labels HTTP allows with target, server, route, authz and TLS labels', async () => {
    const registry = new MetricsRegistry();
    const m = new InboundMetrics({ registry, targetIp: '127.0.0.1' });
    const p = permit(srv('web-http'), authzMeta('web-from-emojivoto'));
    m.hooks.onHttpAllow?.({ port: 8080, client: meshed, decision: p, request });
    m.hooks.onHttpAllow?.({ port: 8080, client: meshed, decision: p, request });
    const lines = await samples(registry, 'inbound_http_authz_allow_total');
    assert.deepEqual(lines, [
      'inbound_http_authz_allow_total{target_addr="127.0.0.1:8080",target_ip="127.0.0.1",target_port="8080",srv_group="policy.linkerd.io",srv_kind="server",srv_name="web-http",srv_port="8080",tls="true",client_id="web.emojivoto.serviceaccount.identity.linkerd.cluster.local",route_group="",route_kind="default",route_name="default",authz_group="policy.linkerd.io",authz_kind="authorizationpolicy",authz_name="web-from-emojivoto"} 2',
    ]);
  });

  it('keeps one series per label set when a policy update re-creates equal metadata', async () => {
    const registry = new MetricsRegistry();
    const m = new InboundMetrics({ registry, targetIp: '127.0.0.1' });
    m.hooks.onTcpAllow?.({ port: 9000, client: meshed, decision: permit(srv('tcp'), authzMeta('a'), 'tcp') });
    // A new compiled policy: equal values, new objects.
    m.hooks.onTcpAllow?.({ port: 9000, client: meshed, decision: permit(srv('tcp'), authzMeta('a'), 'tcp') });
    m.hooks.onTcpAllow?.({ port: 9000, client: plain, decision: permit(srv('tcp'), authzMeta('a'), 'tcp') });
    const lines = await samples(registry, 'inbound_tcp_authz_allow_total');
    assert.equal(lines.length, 2);
    assert.ok(lines.some((l) => l.includes('tls="true"') && l.endsWith(' 2')));
    assert.ok(lines.some((l) => l.includes('tls="no_identity",no_tls_reason="no_tls_from_remote"') && l.endsWith(' 1')));
    assert.ok(lines.every((l) => !l.includes('route_')));
  });

  it('counts denials, route-not-found, terminations and errors under their own names', async () => {
    const registry = new MetricsRegistry();
    const m = new InboundMetrics({ registry, targetIp: '::1' });
    m.hooks.onHttpDeny?.({ port: 8080, client: plain, decision: deny(srv('web')), request });
    m.hooks.onHttpRouteNotFound?.({ port: 8080, client: plain, decision: deny(srv('web'), 'http404'), request });
    m.hooks.onTcpDeny?.({ port: 9000, client: plain, decision: deny(srv('tcp'), 'tcp-refuse') });
    m.hooks.onTcpTerminate?.({ port: 9000, client: meshed, decision: deny(srv('tcp'), 'tcp-refuse') });
    m.hooks.onTcpError?.('tls detection timeout', 9000);
    m.hooks.onTcpError?.('tls detection timeout', 9000);
    m.hooks.onHttpError?.('app unreachable', 8080);

    const [httpDeny] = await samples(registry, 'inbound_http_authz_deny_total');
    assert.match(httpDeny ?? '', /target_addr="\[::1\]:8080".*route_name="default"\} 1$/);
    assert.doesNotMatch(httpDeny ?? '', /authz_(group|kind|name)=/);
    const [notFound] = await samples(registry, 'inbound_http_route_not_found_total');
    assert.doesNotMatch(notFound ?? '', /(route|authz)_(group|kind|name)=/);
    assert.match((await samples(registry, 'inbound_tcp_authz_deny_total'))[0] ?? '', /srv_name="tcp".* 1$/);
    assert.match(
      (await samples(registry, 'inbound_tcp_authz_terminate_total'))[0] ?? '',
      /srv_name="tcp",srv_port="9000",tls="true",client_id="web\.[^"]*"\} 1$/,
    );
    assert.deepEqual(await samples(registry, 'inbound_tcp_errors_total'), ['inbound_tcp_errors_total{error="tls detection timeout"} 2']);
    assert.deepEqual(await samples(registry, 'inbound_http_errors_total'), ['inbound_http_errors_total{error="app unreachable"} 1']);
  });

  it('spells the TLS labels as upstream does', () => {
    assert.deepEqual(tlsLabels({ kind: 'established', clientId: WEB_ID }), { tls: 'true', client_id: WEB_ID });
    assert.deepEqual(tlsLabels({ kind: 'established' }), { tls: 'true', client_id: '' });
    assert.deepEqual(tlsLabels({ kind: 'none', reason: 'port_skipped' }), { tls: 'no_identity', no_tls_reason: 'port_skipped' });
    assert.deepEqual(tlsLabels({ kind: 'none', reason: 'disabled' }), { tls: 'disabled' });
    assert.deepEqual(tlsLabels({ kind: 'passthrough', sni: 'app.example.com' }), { tls: 'opaque', sni: 'app.example.com' });
  });

  it('does not allocate a series per decision: the same decision object reuses its cell', async () => {
    const registry = new MetricsRegistry();
    const m = new InboundMetrics({ registry, targetIp: '127.0.0.1' });
    const p = permit(srv('web-http'), authzMeta('a'));
    for (let i = 0; i < 10_000; i++) m.hooks.onHttpAllow?.({ port: 8080, client: meshed, decision: p, request });
    const lines = await samples(registry, 'inbound_http_authz_allow_total');
    assert.equal(lines.length, 1);
    assert.ok(lines[0]?.endsWith(' 10000'));
  });

  it('counts permitted requests and classifies their responses as upstream does', async () => {
    const registry = new MetricsRegistry();
    const m = new InboundMetrics({ registry, targetIp: '10.0.0.7' });
    const p = permit(srv('web-http'), authzMeta('a'));
    const exchange = (end: (r: NonNullable<ReturnType<NonNullable<typeof m.hooks.onHttpRequest>>>) => void) => {
      const e = { port: 8080, client: plain, decision: { ...p }, request };
      m.hooks.onHttpAllow?.(e);
      const r = m.hooks.onHttpRequest?.(e);
      assert.ok(r);
      end(r);
    };
    exchange((r) => r.end(200, -1, -1, undefined, 3));
    exchange((r) => r.end(200, -1, -1, undefined, 0.5));
    // Not gRPC: the status decides, a grpc-status is not read.
    exchange((r) => r.end(500, -1, 0, undefined, 7));
    exchange((r) => r.end(200, 13, -1, undefined, 0.5));
    // gRPC: the code decides, from the headers or else the trailers, whatever the status.
    exchange((r) => r.end(200, -1, 13, undefined, 12, true));
    exchange((r) => r.end(200, 7, -1, undefined, 1, true));
    exchange((r) => r.end(503, -1, 0, undefined, 1, true));
    exchange((r) => r.end(200, -1, 5, undefined, 1, true));
    exchange((r) => r.end(200, -1, -1, undefined, 1, true));
    exchange((r) => r.end(0, -1, -1, 'h2(CANCEL)', Number.NaN, true));
    exchange((r) => r.end(200, -1, -1, 'app response aborted', 2));
    const base =
      'direction="inbound",target_addr="10.0.0.7:8080",target_ip="10.0.0.7",target_port="8080",tls="no_identity",no_tls_reason="no_tls_from_remote",' +
      'srv_group="policy.linkerd.io",srv_kind="server",srv_name="web-http",srv_port="8080",route_group="",route_kind="default",route_name="default",' +
      'authz_group="policy.linkerd.io",authz_kind="authorizationpolicy",authz_name="a"';
    assert.deepEqual(await samples(registry, 'request_total'), [`request_total{${base}} 11`]);
    assert.deepEqual(await samples(registry, 'response_total'), [
      `response_total{${base},status_code="200",classification="success",grpc_status="",error=""} 3`,
      `response_total{${base},status_code="500",classification="failure",grpc_status="",error=""} 1`,
      `response_total{${base},status_code="200",classification="failure",grpc_status="13",error=""} 1`,
      `response_total{${base},status_code="200",classification="failure",grpc_status="7",error=""} 1`,
      `response_total{${base},status_code="503",classification="success",grpc_status="0",error=""} 1`,
      // NOT_FOUND is not among upstream's failure codes; no code at all is UNKNOWN (2), a failure.
      `response_total{${base},status_code="200",classification="success",grpc_status="5",error=""} 1`,
      `response_total{${base},status_code="200",classification="failure",grpc_status="2",error=""} 1`,
      `response_total{${base},classification="failure",grpc_status="",error="h2(CANCEL)"} 1`,
      `response_total{${base},status_code="200",classification="failure",grpc_status="",error="app response aborted"} 1`,
    ]);
    const latency = await samples(registry, 'response_latency_ms_count');
    assert.deepEqual(latency, [
      `response_latency_ms_count{${base},status_code="200"} 8`,
      `response_latency_ms_count{${base},status_code="500"} 1`,
      `response_latency_ms_count{${base},status_code="503"} 1`,
    ]);
    const buckets = await samples(registry, 'response_latency_ms_bucket');
    assert.ok(buckets.includes(`response_latency_ms_bucket{${base},status_code="200",le="1"} 5`));
    assert.ok(buckets.includes(`response_latency_ms_bucket{${base},status_code="200",le="3"} 7`));
    assert.ok(buckets.includes(`response_latency_ms_bucket{${base},status_code="200",le="50000"} 8`));
    assert.equal(buckets.filter((l) => l.includes('status_code="200"')).length, 26, 'the 25 upstream buckets and +Inf');
    // The authorization allow counter keeps its own labels (no direction).
    assert.match((await samples(registry, 'inbound_http_authz_allow_total'))[0] ?? '', /^inbound_http_authz_allow_total\{target_addr="10\.0\.0\.7:8080".* 11$/);
  });

  it('does not count admin-style allows (no onHttpRequest) as requests', async () => {
    const registry = new MetricsRegistry();
    const m = new InboundMetrics({ registry, targetIp: '127.0.0.1' });
    m.hooks.onHttpAllow?.({ port: 4191, client: plain, decision: permit(defaultMeta('all-unauthenticated'), defaultMeta('all-unauthenticated')), request });
    assert.deepEqual(await samples(registry, 'request_total'), []);
    assert.equal((await samples(registry, 'inbound_http_authz_allow_total')).length, 1);
  });

  it('tracks inbound connections: opens, closes by errno, bytes, duration and the open gauge', async () => {
    const registry = new MetricsRegistry();
    const m = new InboundMetrics({ registry, targetIp: '10.0.0.7' });
    const sock = (read: number, written: number) => Object.assign(new EventEmitter(), { closed: false, bytesRead: read, bytesWritten: written });
    const a = sock(10, 20);
    const b = sock(1, 2);
    const server = srv('web-tcp');
    m.hooks.onTcpOpen?.({ port: 9000, server, client: meshed, socket: a as unknown as Socket });
    m.hooks.onTcpOpen?.({ port: 9000, server: { ...server }, client: meshed, socket: b as unknown as Socket });
    const labels =
      'direction="inbound",peer="src",target_addr="10.0.0.7:9000",target_ip="10.0.0.7",target_port="9000",' +
      `tls="true",client_id="${WEB_ID}",srv_group="policy.linkerd.io",srv_kind="server",srv_name="web-tcp",srv_port="9000"`;
    assert.deepEqual(await samples(registry, 'tcp_open_total'), [`tcp_open_total{${labels}} 2`]);
    assert.deepEqual(await samples(registry, 'tcp_open_connections'), [`tcp_open_connections{${labels}} 2`]);
    assert.deepEqual(await samples(registry, 'tcp_read_bytes_total'), [`tcp_read_bytes_total{${labels}} 11`]);
    a.emit('close');
    b.emit('error', Object.assign(new Error('reset'), { code: 'ECONNRESET' }));
    b.bytesRead = 5;
    b.emit('close');
    assert.deepEqual(await samples(registry, 'tcp_open_connections'), [`tcp_open_connections{${labels}} 0`]);
    assert.deepEqual(await samples(registry, 'tcp_close_total'), [`tcp_close_total{${labels},errno=""} 1`, `tcp_close_total{${labels},errno="ECONNRESET"} 1`]);
    assert.deepEqual(await samples(registry, 'tcp_read_bytes_total'), [`tcp_read_bytes_total{${labels}} 15`]);
    assert.deepEqual(await samples(registry, 'tcp_write_bytes_total'), [`tcp_write_bytes_total{${labels}} 22`]);
    assert.deepEqual(await samples(registry, 'tcp_connection_duration_ms_count'), [
      `tcp_connection_duration_ms_count{${labels},errno=""} 1`,
      `tcp_connection_duration_ms_count{${labels},errno="ECONNRESET"} 1`,
    ]);
  });
});

describe('InboundMetrics: idle series eviction', () => {
  const IDLE = 60_000;

  it('resolves a cached series again after its eviction: the next request is counted, from zero', async () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const m = new InboundMetrics({ registry, targetIp: '10.0.0.7' });
    // One decision object, as a compiled policy hands out: the hooks cache its series by identity.
    const e = { port: 8080, client: meshed, decision: permit(srv('web-http'), authzMeta('a')), request };
    const exchange = (status: number) => {
      m.hooks.onHttpAllow?.(e);
      m.hooks.onHttpRequest?.(e)?.end(status, -1, -1, undefined, 2);
    };
    exchange(200);
    exchange(200);
    m.hooks.onHttpDeny?.({ port: 8080, client: plain, decision: deny(srv('web-http')), request });
    await registry.metrics();
    advance(IDLE + 1);
    assert.deepEqual(await samples(registry, 'request_total'), []);
    assert.deepEqual(await samples(registry, 'inbound_http_authz_allow_total'), []);
    assert.deepEqual(await samples(registry, 'inbound_http_authz_deny_total'), []);
    exchange(503);
    m.hooks.onHttpDeny?.({ port: 8080, client: plain, decision: deny(srv('web-http')), request });
    assert.equal((await samples(registry, 'request_total')).length, 1);
    assert.match((await samples(registry, 'request_total'))[0] ?? '', /\} 1$/);
    assert.match((await samples(registry, 'inbound_http_authz_allow_total'))[0] ?? '', /\} 1$/);
    assert.deepEqual(
      (await samples(registry, 'response_total')).map((l) => l.replace(/\{.*,status_code/, '{…,status_code')),
      ['response_total{…,status_code="503",classification="failure",grpc_status="",error=""} 1'],
    );
    assert.match((await samples(registry, 'inbound_http_authz_deny_total'))[0] ?? '', /\} 1$/);
  });

  it('keeps the series of a request in flight, however long it takes', async () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const m = new InboundMetrics({ registry, targetIp: '10.0.0.7' });
    const e = { port: 8080, client: meshed, decision: permit(srv('grpc'), authzMeta('a')), request };
    m.hooks.onHttpAllow?.(e);
    const stream = m.hooks.onHttpRequest?.(e);
    await registry.metrics();
    advance(IDLE * 5);
    assert.equal((await samples(registry, 'request_total')).length, 1, 'held by the stream in flight');
    stream?.end(200, -1, 0, undefined, IDLE * 5, true);
    assert.match((await samples(registry, 'request_total'))[0] ?? '', /\} 1$/, 'not reset under the request');
    assert.match((await samples(registry, 'response_total'))[0] ?? '', /status_code="200",classification="success",grpc_status="0",error=""\} 1$/);
    advance(IDLE + 1);
    assert.deepEqual(await samples(registry, 'request_total'), [], 'released at its end: evicted once idle');
    assert.deepEqual(await samples(registry, 'response_total'), []);
  });

  it('keeps the transport series of an open connection; after its close and the idle period, a new one counts from 1', async () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const m = new InboundMetrics({ registry, targetIp: '10.0.0.7' });
    const sock = () => Object.assign(new EventEmitter(), { closed: false, bytesRead: 3, bytesWritten: 4 });
    const server = srv('web-tcp');
    const a = sock();
    m.hooks.onTcpOpen?.({ port: 9000, server, client: meshed, socket: a as unknown as Socket });
    await registry.metrics();
    advance(IDLE * 3);
    assert.match((await samples(registry, 'tcp_open_total'))[0] ?? '', /\} 1$/, 'the counter is idle, but the connection is open');
    a.emit('close');
    assert.match((await samples(registry, 'tcp_close_total'))[0] ?? '', /errno=""\} 1$/);
    advance(IDLE + 1);
    for (const name of ['tcp_open_total', 'tcp_open_connections', 'tcp_close_total', 'tcp_read_bytes_total', 'tcp_connection_duration_ms_count']) {
      assert.deepEqual(await samples(registry, name), [], name);
    }
    // The same server and client: the cached series was evicted, a new one is resolved.
    const b = sock();
    m.hooks.onTcpOpen?.({ port: 9000, server, client: meshed, socket: b as unknown as Socket });
    assert.match((await samples(registry, 'tcp_open_total'))[0] ?? '', /\} 1$/);
    assert.match((await samples(registry, 'tcp_open_connections'))[0] ?? '', /\} 1$/);
    b.emit('close');
    assert.match((await samples(registry, 'tcp_read_bytes_total'))[0] ?? '', /\} 3$/, 'bytes start again from the new connection');
  });

  it('forgets the series of client identities that stopped calling', async () => {
    const { registry, advance } = clockedRegistry(IDLE);
    const m = new InboundMetrics({ registry, targetIp: '10.0.0.7' });
    const p = permit(srv('web-http'), authzMeta('a'));
    for (let i = 0; i < 100; i++) {
      const client: ClientInfo = { ip: IP, tls: { kind: 'established', clientId: `c${i}.ns.serviceaccount.identity.linkerd.cluster.local` } };
      // authorizeRequest answers a new decision object per request.
      const e = { port: 8080, client, decision: { ...p }, request };
      m.hooks.onHttpAllow?.(e);
      m.hooks.onHttpRequest?.(e)?.end(200, -1, -1, undefined, 1);
    }
    assert.equal((await samples(registry, 'request_total')).length, 100);
    advance(IDLE + 1);
    const text = await registry.metrics();
    assert.doesNotMatch(text, /client_id="c\d+\./);
  });
});
