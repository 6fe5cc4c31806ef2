/**
 * InboundMetrics: the §4.11 names and labels in the Prometheus text, one series per label set
 * (also across policy updates that re-create equal metadata), and the TLS label variants.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type ClientInfo, type Deny, defaultMeta, type Meta, type Permit, parseIp, type RequestInfo } from '../core/index.js';
import { createRegistry, type Registry } from '../shared/index.js';
import { InboundMetrics, tlsLabels } from './metrics-inbound.js';

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
async function samples(registry: Registry, name: string): Promise<string[]> {
  const text = await registry.metrics();
  return text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
}

describe('InboundMetrics', () => {
  it('labels HTTP allows with target, server, route, authz and TLS labels', async () => {
    const registry = createRegistry();
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
    const registry = createRegistry();
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
    const registry = createRegistry();
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
    const registry = createRegistry();
    const m = new InboundMetrics({ registry, targetIp: '127.0.0.1' });
    const p = permit(srv('web-http'), authzMeta('a'));
    for (let i = 0; i < 10_000; i++) m.hooks.onHttpAllow?.({ port: 8080, client: meshed, decision: p, request });
    const lines = await samples(registry, 'inbound_http_authz_allow_total');
    assert.equal(lines.length, 1);
    assert.ok(lines[0]?.endsWith(' 10000'));
  });
});
