/**
 * OutboundMetrics: the outbound request series' labels (those of the outbound transport series
 * without `peer`), where a request is counted (the endpoint it was sent to, the endpoint last
 * tried, the target), the shared classification, and eviction of cached series.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { describe, it } from 'node:test';
import type { DestinationEndpoint } from '../../api/index.js';
import { parseOutboundAuthority } from '../outbound/resolver.js';
import { clockedRegistry } from '../testing/metrics.js';
import { MetricsRegistry } from './cells.js';
import { registerHttpFamilies } from './http.js';
import { InboundMetrics } from './inbound.js';
import { OutboundMetrics } from './outbound.js';
import { outboundLabels, TransportMetrics } from './transport.js';

const WEB_ID = 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local';

function target(authority: string) {
  const p = parseOutboundAuthority(authority, { namespace: 'emojivoto' });
  assert.ok(p.ok);
  return p.target;
}
const WEB = target('web-svc.emojivoto:80');
const meshedEp: DestinationEndpoint = {
  ip: '10.1.2.3',
  port: 8080,
  weight: 10_000,
  labels: { pod: 'web-5d8f', serviceaccount: 'web', deployment: 'web' },
  identity: WEB_ID,
  serverName: WEB_ID,
};
const plainEp: DestinationEndpoint = { ip: '10.1.2.4', port: 8080, weight: 10_000, labels: { pod: 'web-legacy' } };

const WEB_BASE =
  'direction="outbound",authority="web-svc.emojivoto.svc.cluster.local:80",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",' +
  `tls="true",server_id="${WEB_ID}",dst_service="web-svc",dst_namespace="emojivoto",dst_pod="web-5d8f",dst_serviceaccount="web",dst_deployment="web"`;

/** The sample lines of `name` (no HELP/TYPE). */
async function samples(registry: MetricsRegistry, name: string): Promise<string[]> {
  const text = await registry.metrics();
  return text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
}

describe('OutboundMetrics', () => {
  it('labels a request sent to an endpoint as the outbound transport series, without peer', async () => {
    const registry = new MetricsRegistry();
    const m = new OutboundMetrics({ registry });
    for (const ep of [meshedEp, plainEp]) {
      const ex = m.exchange();
      ex.to(WEB);
      ex.attempt(ep);
      ex.sent();
      ex.head(200, -1);
      ex.end();
    }
    const requests = await samples(registry, 'request_total');
    assert.deepEqual(requests, [
      `request_total{${WEB_BASE}} 1`,
      'request_total{direction="outbound",authority="web-svc.emojivoto.svc.cluster.local:80",target_addr="10.1.2.4:8080",target_ip="10.1.2.4",target_port="8080",' +
        'tls="no_identity",no_tls_reason="not_provided_by_service_discovery",dst_service="web-svc",dst_namespace="emojivoto",dst_pod="web-legacy"} 1',
    ]);
    // Exactly the transport labels of the same endpoint, `peer` aside.
    const { peer, ...transport } = outboundLabels(meshedEp, WEB);
    assert.equal(peer, 'dst');
    assert.deepEqual(m.endpointSeries(meshedEp, WEB).labels, transport);
    assert.deepEqual(Object.keys(m.endpointSeries(meshedEp, WEB).labels), Object.keys(transport), 'in the same order');
    assert.deepEqual(await samples(registry, 'response_total'), [
      `response_total{${WEB_BASE},status_code="200",classification="success",grpc_status="",error=""} 1`,
      `response_total{${requests[1]?.slice('request_total{'.length, -'} 1'.length)},status_code="200",classification="success",grpc_status="",error=""} 1`,
    ]);
    assert.deepEqual((await samples(registry, 'response_latency_ms_count')).length, 2);
  });

  it('classifies responses as the inbound side does (HTTP status, gRPC status in headers or trailers)', async () => {
    const registry = new MetricsRegistry();
    const m = new OutboundMetrics({ registry });
    const send = (status: number, headerGrpc: number, trailerGrpc: number, error?: string) => {
      const ex = m.exchange();
      // The gRPC cases: a gRPC status somewhere.
      ex.isGrpc = headerGrpc >= 0 || trailerGrpc >= 0;
      ex.to(WEB);
      ex.attempt(meshedEp);
      ex.sent();
      if (status > 0) ex.head(status, headerGrpc);
      if (trailerGrpc >= 0) ex.trailers(trailerGrpc);
      if (error !== undefined) ex.fail(error);
      ex.end();
    };
    send(200, -1, 0);
    send(200, -1, 13);
    send(200, 14, -1);
    send(503, -1, -1);
    send(404, -1, -1);
    send(200, -1, -1, 'response aborted');
    send(0, -1, -1, 'h2(CANCEL)');
    assert.deepEqual(await samples(registry, 'request_total'), [`request_total{${WEB_BASE}} 7`]);
    assert.deepEqual(await samples(registry, 'response_total'), [
      `response_total{${WEB_BASE},status_code="200",classification="success",grpc_status="0",error=""} 1`,
      `response_total{${WEB_BASE},status_code="200",classification="failure",grpc_status="13",error=""} 1`,
      `response_total{${WEB_BASE},status_code="200",classification="failure",grpc_status="14",error=""} 1`,
      `response_total{${WEB_BASE},status_code="503",classification="failure",grpc_status="",error=""} 1`,
      `response_total{${WEB_BASE},status_code="404",classification="success",grpc_status="",error=""} 1`,
      `response_total{${WEB_BASE},status_code="200",classification="failure",grpc_status="",error="response aborted"} 1`,
      `response_total{${WEB_BASE},classification="failure",grpc_status="",error="h2(CANCEL)"} 1`,
    ]);
    assert.deepEqual(await samples(registry, 'response_latency_ms_count'), [
      `response_latency_ms_count{${WEB_BASE},status_code="200"} 4`,
      `response_latency_ms_count{${WEB_BASE},status_code="503"} 1`,
      `response_latency_ms_count{${WEB_BASE},status_code="404"} 1`,
    ]);
  });

  it("counts the proxy's own answers as failures: on the endpoint last tried, else on the target, else unlabelled", async () => {
    const registry = new MetricsRegistry();
    const m = new OutboundMetrics({ registry });
    const other: DestinationEndpoint = { ...meshedEp, ip: '10.1.2.9', labels: { pod: 'web-dead' } };
    // Retried after a connect failure: only the endpoint that served it counts.
    let ex = m.exchange();
    ex.to(WEB);
    ex.attempt(other);
    ex.attempt(meshedEp);
    ex.sent();
    ex.head(200, -1);
    ex.end();
    // Both attempts failed: a 502 of the proxy's, on the endpoint tried last.
    ex = m.exchange();
    ex.to(WEB);
    ex.attempt(meshedEp);
    ex.attempt(other);
    ex.fail('connect failed');
    ex.end();
    // No endpoints: the target's series.
    ex = m.exchange();
    ex.to(WEB);
    ex.fail('no endpoints');
    ex.end();
    ex = m.exchange();
    ex.to(target('10.9.9.9:8080'));
    ex.fail('destination unavailable');
    ex.end();
    // Not even a target.
    ex = m.exchange();
    ex.fail('bad request');
    ex.end();
    ex.end();

    const otherBase = WEB_BASE.replaceAll('10.1.2.3', '10.1.2.9').replace(
      ',dst_pod="web-5d8f",dst_serviceaccount="web",dst_deployment="web"',
      ',dst_pod="web-dead"',
    );
    const webTarget = 'direction="outbound",authority="web-svc.emojivoto.svc.cluster.local:80",dst_service="web-svc",dst_namespace="emojivoto"';
    const ipTarget = 'direction="outbound",target_addr="10.9.9.9:8080",target_ip="10.9.9.9",target_port="8080"';
    assert.deepEqual(await samples(registry, 'request_total'), [
      `request_total{${WEB_BASE}} 1`,
      `request_total{${otherBase}} 1`,
      `request_total{${webTarget}} 1`,
      `request_total{${ipTarget}} 1`,
      'request_total{direction="outbound"} 1',
    ]);
    assert.deepEqual(await samples(registry, 'response_total'), [
      `response_total{${WEB_BASE},status_code="200",classification="success",grpc_status="",error=""} 1`,
      `response_total{${otherBase},classification="failure",grpc_status="",error="connect failed"} 1`,
      `response_total{${webTarget},classification="failure",grpc_status="",error="no endpoints"} 1`,
      `response_total{${ipTarget},classification="failure",grpc_status="",error="destination unavailable"} 1`,
      'response_total{direction="outbound",classification="failure",grpc_status="",error="bad request"} 1',
    ]);
    assert.deepEqual(await samples(registry, 'response_latency_ms_count'), [`response_latency_ms_count{${WEB_BASE},status_code="200"} 1`]);
  });

  it('finds one series for the endpoints made up per request for an IP address the controller does not know', () => {
    const m = new OutboundMetrics({ registry: new MetricsRegistry() });
    const ip = target('192.0.2.10:8080');
    const direct = (): DestinationEndpoint => ({ ip: '192.0.2.10', port: 8080, weight: 1, labels: {} });
    const s = m.endpointSeries(direct(), ip);
    assert.equal(m.endpointSeries(direct(), ip), s);
    assert.equal(s.labels.tls, 'no_identity');
    assert.equal(s.labels.target_addr, '192.0.2.10:8080');
    // The same address announced with labels by the controller is another series.
    assert.notEqual(m.endpointSeries({ ...direct(), labels: { pod: 'x' } }, ip), s);
  });

  it('shares the request families with the inbound side', async () => {
    const registry = new MetricsRegistry();
    const inbound = new InboundMetrics({ registry, targetIp: '10.0.0.7' });
    const m = new OutboundMetrics({ registry, http: inbound.http });
    assert.throws(() => new OutboundMetrics({ registry }), { code: 'ERR_METRIC_DUPLICATE' });
    const ex = m.exchange();
    ex.to(WEB);
    ex.attempt(meshedEp);
    ex.sent();
    ex.head(200, -1);
    ex.end();
    const text = await registry.metrics();
    assert.equal(text.match(/^# TYPE request_total counter$/gm)?.length, 1);
    assert.match(text, /^request_total\{direction="outbound",[^}]*\} 1$/m);
    assert.throws(() => registerHttpFamilies(registry), { code: 'ERR_METRIC_DUPLICATE' });
  });

  describe('eviction', () => {
    const IDLE = 60_000;
    const request = (m: OutboundMetrics, ep: DestinationEndpoint | undefined, status = 200, to = true) => {
      const ex = m.exchange();
      if (to) ex.to(WEB);
      if (ep !== undefined) {
        ex.attempt(ep);
        ex.sent();
        ex.head(status, -1);
      } else {
        ex.fail('no endpoints');
      }
      ex.end();
    };

    it('resolves a series cached by endpoint again after its eviction: the next request is visible, from 1', async () => {
      const { registry, advance } = clockedRegistry(IDLE);
      const m = new OutboundMetrics({ registry });
      request(m, meshedEp);
      request(m, meshedEp);
      request(m, undefined);
      request(m, undefined, 0, false);
      const before = m.endpointSeries(meshedEp, WEB);
      await registry.metrics();
      advance(IDLE + 1);
      assert.deepEqual(await samples(registry, 'request_total'), []);
      assert.equal(before.evicted, true);
      request(m, meshedEp, 503);
      request(m, undefined);
      request(m, undefined, 0, false);
      assert.deepEqual(await samples(registry, 'request_total'), [
        `request_total{${WEB_BASE}} 1`,
        'request_total{direction="outbound",authority="web-svc.emojivoto.svc.cluster.local:80",dst_service="web-svc",dst_namespace="emojivoto"} 1',
        'request_total{direction="outbound"} 1',
      ]);
      assert.deepEqual(await samples(registry, 'response_total'), [
        `response_total{${WEB_BASE},status_code="503",classification="failure",grpc_status="",error=""} 1`,
        'response_total{direction="outbound",authority="web-svc.emojivoto.svc.cluster.local:80",dst_service="web-svc",dst_namespace="emojivoto",classification="failure",grpc_status="",error="no endpoints"} 1',
        'response_total{direction="outbound",classification="failure",grpc_status="",error="no endpoints"} 1',
      ]);
      assert.notEqual(m.endpointSeries(meshedEp, WEB), before);
    });

    it('keeps the series of a request in flight; after it ends and the idle period, it goes', async () => {
      const { registry, advance } = clockedRegistry(IDLE);
      const m = new OutboundMetrics({ registry });
      const ex = m.exchange();
      ex.to(WEB);
      ex.attempt(meshedEp);
      ex.sent();
      await registry.metrics();
      advance(IDLE * 4);
      assert.deepEqual(await samples(registry, 'request_total'), [`request_total{${WEB_BASE}} 1`]);
      ex.isGrpc = true;
      ex.head(200, -1);
      ex.trailers(0);
      ex.end();
      assert.deepEqual(await samples(registry, 'response_total'), [
        `response_total{${WEB_BASE},status_code="200",classification="success",grpc_status="0",error=""} 1`,
      ]);
      assert.deepEqual(await samples(registry, 'request_total'), [`request_total{${WEB_BASE}} 1`], 'not reset under the request');
      advance(IDLE + 1);
      assert.equal((await registry.metrics()).includes('direction="outbound"'), false);
    });

    it('resolves the outbound transport series of an endpoint again after its eviction', async () => {
      const { registry, advance } = clockedRegistry(IDLE);
      const transport = new TransportMetrics(registry);
      const sock = () => Object.assign(new EventEmitter(), { closed: false, bytesRead: 1, bytesWritten: 1 }) as unknown as Socket;
      const a = sock();
      transport.trackOutbound(a, meshedEp, WEB);
      const tcp = `direction="outbound",peer="dst",${WEB_BASE.slice('direction="outbound",'.length)}`;
      assert.deepEqual(await samples(registry, 'tcp_open_total'), [`tcp_open_total{${tcp}} 1`]);
      advance(IDLE * 3);
      assert.deepEqual(await samples(registry, 'tcp_open_total'), [`tcp_open_total{${tcp}} 1`], 'kept while the connection is open');
      a.emit('close');
      await registry.metrics();
      advance(IDLE + 1);
      assert.deepEqual(await samples(registry, 'tcp_open_total'), []);
      transport.trackOutbound(sock(), meshedEp, WEB);
      assert.deepEqual(await samples(registry, 'tcp_open_total'), [`tcp_open_total{${tcp}} 1`]);
      assert.deepEqual(await samples(registry, 'tcp_open_connections'), [`tcp_open_connections{${tcp}} 1`]);
    });
  });
});
