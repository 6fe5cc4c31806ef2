import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DenialLog, parseDenial } from './denials.js';

const HTTP_DENY = JSON.stringify({
  level: 30,
  time: '2026-05-01T10:00:00.000Z',
  name: 'proxy',
  client: '127.20.0.7',
  port: 8080,
  tls: 'mtls vote-bot.bad.serviceaccount.identity.linkerd.cluster.local',
  server: { group: 'policy.linkerd.io', kind: 'server', name: 'web-http' },
  route: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'vote' },
  method: 'POST',
  path: '/api/vote',
  reason: 'unauthorized request on route',
  kind: 'http403',
  msg: 'Request denied',
});

describe('parseDenial', () => {
  it('reads an HTTP denial', () => {
    assert.deepEqual(parseDenial(HTTP_DENY, 'emojivoto', 'web-0'), {
      time: '2026-05-01T10:00:00.000Z',
      namespace: 'emojivoto',
      pod: 'web-0',
      port: 8080,
      kind: 'http403',
      decision: 'deny',
      client: '127.20.0.7',
      clientId: 'vote-bot.bad.serviceaccount.identity.linkerd.cluster.local',
      server: 'server/web-http',
      route: 'HTTPRoute/vote',
      reason: 'unauthorized request on route',
      method: 'POST',
      path: '/api/vote',
    });
  });

  it('reads gRPC kinds, and infers the kind from the reason when the proxy did not log one', () => {
    const grpc = { ...JSON.parse(HTTP_DENY), kind: 'grpc7', tls: 'no_tls_from_remote' };
    const d = parseDenial(JSON.stringify(grpc), 'ns', 'p');
    assert.equal(d?.kind, 'grpc7');
    assert.equal(d?.clientId, null);
    const old = { ...JSON.parse(HTTP_DENY), kind: undefined, route: undefined, reason: 'no route found for request' };
    const n = parseDenial(JSON.stringify(old), 'ns', 'p');
    assert.equal(n?.kind, 'http404');
    assert.equal(n?.route, null);
  });

  it('reads TCP denials, terminations and admin denials', () => {
    const tcp = {
      level: 30,
      time: 't',
      client: '127.0.0.1',
      port: 9000,
      server: 'default:deny',
      tls: 'no_tls_from_remote',
      reason: 'unauthorized connection on server',
      msg: 'inbound TCP connection denied',
    };
    assert.deepEqual(parseDenial(JSON.stringify(tcp), 'ns', 'p'), {
      time: 't',
      namespace: 'ns',
      pod: 'p',
      port: 9000,
      kind: 'tcp-refuse',
      decision: 'deny',
      client: '127.0.0.1',
      clientId: null,
      server: 'default/deny',
      route: null,
      reason: 'unauthorized connection on server',
    });
    assert.equal(parseDenial(JSON.stringify({ ...tcp, msg: 'Connection terminated due to policy change', tls: 'mtls a.b' }), 'ns', 'p')?.kind, 'tcp-terminate');
    const admin = {
      client: '127.0.0.1',
      port: 4191,
      server: 'default:deny',
      method: 'GET',
      path: '/metrics',
      reason: 'unauthorized request on route',
      msg: 'admin request denied',
    };
    assert.equal(parseDenial(JSON.stringify(admin), 'ns', 'p')?.kind, 'http403');
  });

  it('reads a request the audit default policy let through as an audit', () => {
    const audit = {
      ...JSON.parse(HTTP_DENY),
      msg: 'Request allowed',
      reason: undefined,
      kind: undefined,
      route: { group: '', kind: 'default', name: 'default' },
      authz: { group: '', kind: 'default', name: 'audit' },
    };
    assert.deepEqual(parseDenial(JSON.stringify(audit), 'emojivoto', 'web-0'), {
      time: '2026-05-01T10:00:00.000Z',
      namespace: 'emojivoto',
      pod: 'web-0',
      port: 8080,
      kind: 'audit',
      decision: 'audit',
      client: '127.20.0.7',
      clientId: 'vote-bot.bad.serviceaccount.identity.linkerd.cluster.local',
      server: 'server/web-http',
      route: 'default/default',
      authz: 'default/audit',
      reason: 'allowed only by the audit default policy',
      method: 'POST',
      path: '/api/vote',
    });
    // Any other permit is not a would-be denial.
    const allowed = { ...audit, authz: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name: 'audit' } };
    assert.equal(parseDenial(JSON.stringify(allowed), 'ns', 'p'), undefined);
  });

  it('reads an opaque connection the audit default policy let through as an audit', () => {
    const line = {
      level: 30,
      time: 't',
      client: '127.20.0.9',
      port: 9000,
      server: 'default:audit',
      tls: 'mtls vote-bot.bad.serviceaccount.identity.linkerd.cluster.local',
      authz: { group: '', kind: 'default', name: 'audit' },
      msg: 'inbound TCP connection allowed',
    };
    const d = parseDenial(JSON.stringify(line), 'ns', 'p');
    assert.equal(d?.decision, 'audit');
    assert.equal(d?.kind, 'audit');
    assert.equal(d?.clientId, 'vote-bot.bad.serviceaccount.identity.linkerd.cluster.local');
    assert.equal(
      parseDenial(JSON.stringify({ ...line, authz: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name: 'db' } }), 'ns', 'p'),
      undefined,
    );
  });

  it('ignores everything else', () => {
    for (const line of [
      '',
      'ward proxy ready: identity x',
      '{"msg":"Request allowed","port":8080}',
      '{"msg":"Request allowed","port":8080,"authz":"audit"}',
      '{"msg":"Request denied"}',
      '{not json denied',
      JSON.stringify({ msg: 'inbound policy in force', port: 1, note: 'denied' }),
    ])
      assert.equal(parseDenial(line, 'ns', 'p'), undefined, line);
  });
});

describe('DenialLog', () => {
  it('keeps audits apart, so that many audits do not push the denials out', () => {
    const log = new DenialLog(2);
    const deny = parseDenial(HTTP_DENY, 'ns', 'd') as NonNullable<ReturnType<typeof parseDenial>>;
    log.add(deny);
    for (let i = 0; i < 5; i++) log.add({ ...deny, pod: `a${i}`, kind: 'audit', decision: 'audit' });
    assert.deepEqual(
      log.list().map((d) => d.pod),
      ['d', 'a3', 'a4'],
    );
  });

  it('keeps the last N, oldest first', () => {
    const log = new DenialLog(3);
    for (let i = 0; i < 5; i++) log.add({ ...(parseDenial(HTTP_DENY, 'ns', `p${i}`) as NonNullable<ReturnType<typeof parseDenial>>) });
    assert.deepEqual(
      log.list().map((d) => d.pod),
      ['p2', 'p3', 'p4'],
    );
  });
});
