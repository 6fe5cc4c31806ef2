/**
 * Suite `metrics`: the proxy's per-request and per-connection metrics work — what the inbound
 * HTTP stack adds to a permitted request (authorization allow, `request_total`, `response_total`
 * and `response_latency_ms` through the request's cached series) and to a connection (the `tcp_*`
 * series), beside the same counts done the plain prom-client way (`labels(...)` per request) for
 * reference. Decisions are fresh objects per request, as `authorizeRequest` makes them; their
 * `Meta`s are the compiled policy's, as in the proxy.
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { type ClientInfo, type Meta, type Permit, parseIp, type RequestInfo } from '../src/core/index.js';
import { processMetricsRegistry } from '../src/proxy/index.js';
import { InboundMetrics } from '../src/proxy/metrics/inbound.js';
import { createRegistry, promClient } from '../src/shared/index.js';
import { type BenchResult, type MicroTask, runMicro } from './harness.js';

const server: Meta = { group: 'policy.linkerd.io', kind: 'server', name: 'orders-http' };
const route: Meta = { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'route-40' };
const authz: Meta = { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name: 'orders-from-shop' };
const PERMIT: Permit = { allowed: true, level: 'http', server, route, authz, isAudit: false, filters: [], pathMatch: undefined };
const request: RequestInfo = { method: 'GET', path: '/api/v5/orders/8812', headers: { host: 'orders' } };

function client(): ClientInfo {
  const ip = parseIp('10.42.7.201');
  if (ip === undefined) throw new Error('bad ip');
  return { ip, tls: { kind: 'established', clientId: 'checkout.shop.serviceaccount.identity.linkerd.cluster.local' } };
}

/** Runs the suite. */
export async function runMetricsSuite(): Promise<BenchResult[]> {
  const proxyRegistry = processMetricsRegistry();
  const metrics = new InboundMetrics({ registry: proxyRegistry, targetIp: '10.42.0.9' });
  const hooks = metrics.hooks;
  const c = client();
  const allow = hooks.onHttpAllow;
  const onRequest = hooks.onHttpRequest;
  const onOpen = hooks.onTcpOpen;
  if (allow === undefined || onRequest === undefined || onOpen === undefined) throw new Error('metrics: hooks missing');

  // The naive way: a prom-client child lookup (`labels`, hashing every label) for each count.
  const registry = createRegistry();
  const { Counter, Histogram } = promClient();
  const names = [
    'direction',
    'target_addr',
    'target_ip',
    'target_port',
    'tls',
    'client_id',
    'srv_group',
    'srv_kind',
    'srv_name',
    'srv_port',
    'route_group',
    'route_kind',
    'route_name',
    'authz_group',
    'authz_kind',
    'authz_name',
  ];
  const requests = new Counter({ name: 'request_total', help: 'x', labelNames: names, registers: [registry] });
  const responses = new Counter({ name: 'response_total', help: 'x', labelNames: [...names, 'status_code', 'classification'], registers: [registry] });
  const latency = new Histogram({ name: 'response_latency_ms', help: 'x', labelNames: [...names, 'status_code'], registers: [registry] });
  const labels: Record<string, string> = {
    direction: 'inbound',
    target_addr: '10.42.0.9:8080',
    target_ip: '10.42.0.9',
    target_port: '8080',
    tls: 'true',
    client_id: 'checkout.shop.serviceaccount.identity.linkerd.cluster.local',
    srv_group: server.group,
    srv_kind: server.kind,
    srv_name: server.name,
    srv_port: '8080',
    route_group: route.group,
    route_kind: route.kind,
    route_name: route.name,
    authz_group: authz.group,
    authz_kind: authz.kind,
    authz_name: authz.name,
  };

  // Series for the scrape task: 40 routes, two statuses each.
  for (let i = 0; i < 40; i++) {
    const e = { port: 8080, client: c, decision: { ...PERMIT, route: { ...route, name: `route-${i}` } }, request };
    allow(e);
    onRequest(e)?.end(200, -1, -1, undefined, i);
    onRequest(e)?.end(500, -1, -1, undefined, i);
  }

  let n = 0;
  const tasks: MicroTask[] = [
    {
      name: 'http/authz-allow',
      op: () => {
        allow({ port: 8080, client: c, decision: { ...PERMIT }, request });
        return 1;
      },
      batch: 1000,
    },
    {
      name: 'http/allow+request+response',
      op: () => {
        const e = { port: 8080, client: c, decision: { ...PERMIT }, request };
        allow(e);
        const r = onRequest(e);
        r?.end(200, -1, -1, undefined, (n++ & 63) / 4);
        return 1;
      },
      batch: 1000,
    },
    {
      name: 'http/allow+request+grpc-response',
      op: () => {
        const e = { port: 8080, client: c, decision: { ...PERMIT }, request };
        allow(e);
        const r = onRequest(e);
        r?.end(200, -1, n & 1 ? 0 : 13, undefined, (n++ & 63) / 4);
        return 1;
      },
      batch: 1000,
    },
    {
      name: 'http/prom-client-labels (reference)',
      op: () => {
        requests.labels(labels).inc();
        responses.inc({ ...labels, status_code: '200', classification: 'success' });
        latency.observe({ ...labels, status_code: '200' }, (n++ & 63) / 4);
        return 1;
      },
      batch: 200,
    },
    {
      name: 'scrape/render (request, response, latency and tcp series of 40 routes)',
      op: () => proxyRegistry.render().length,
      batch: 5,
    },
    {
      name: 'tcp/fake-socket (baseline)',
      op: () => {
        const socket = Object.assign(new EventEmitter(), { closed: false, bytesRead: 100, bytesWritten: 200 });
        socket.emit('close');
        return socket.bytesRead;
      },
      batch: 200,
    },
    {
      name: 'tcp/open+close',
      op: () => {
        const socket = Object.assign(new EventEmitter(), { closed: false, bytesRead: 100, bytesWritten: 200 }) as unknown as Socket;
        onOpen({ port: 9000, server, client: c, socket });
        socket.emit('close');
        return 1;
      },
      batch: 200,
    },
  ];
  return runMicro(tasks);
}
