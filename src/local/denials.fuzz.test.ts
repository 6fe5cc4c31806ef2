/**
 * `parseDenial` reads proxy log lines, whose request fields (method, path, client address) a
 * client chose: under arbitrary and mutated lines it never throws and returns only well-formed
 * denials (a port 0-65535, a known decision, strings where strings belong).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { fuzzParams, mutated } from '../shared/testing/fuzz.js';
import { parseDenial } from './denials.js';

const DENY = {
  level: 30,
  time: '2026-05-01T10:00:00.000Z',
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
};
const AUDIT = { ...DENY, msg: 'Request allowed', reason: undefined, kind: undefined, authz: { group: '', kind: 'default', name: 'audit' } };
const TCP = {
  level: 30,
  time: 1,
  client: '10.0.0.1',
  port: 9000,
  server: 'default:deny',
  tls: 'no_tls_from_remote',
  reason: 'x',
  msg: 'inbound TCP connection denied',
};

function check(line: string): void {
  const d = parseDenial(line, 'ns', 'pod');
  if (d === undefined) return;
  assert.ok(Number.isInteger(d.port) && d.port >= 0 && d.port <= 65535);
  assert.ok(d.decision === 'deny' || d.decision === 'audit');
  for (const v of [d.time, d.kind, d.client, d.reason]) assert.equal(typeof v, 'string');
  for (const v of [d.clientId, d.server, d.route]) assert.ok(v === null || typeof v === 'string');
  for (const v of [d.method, d.path, d.authz]) assert.ok(v === undefined || typeof v === 'string');
}

const jsonValue = fc.oneof(fc.string(), fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.object(), fc.array(fc.string()));

describe('parseDenial under hostile input', () => {
  it('never throws on arbitrary text', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 400 }), (s) => check(s)),
      fuzzParams(300),
    );
  });

  it('never throws on valid lines with fields replaced by any JSON value', () => {
    const base = fc.constantFrom<Record<string, unknown>>(DENY, AUDIT, TCP);
    const field = fc.constantFrom('time', 'client', 'port', 'tls', 'server', 'route', 'method', 'path', 'reason', 'kind', 'msg', 'authz');
    fc.assert(
      fc.property(base, fc.array(fc.tuple(field, jsonValue), { maxLength: 4 }), (b, edits) => {
        const o: Record<string, unknown> = { ...b };
        for (const [k, v] of edits) o[k] = v;
        check(JSON.stringify(o));
      }),
      fuzzParams(300),
    );
  });

  it('never throws on mutated valid lines', () => {
    const valid = fc.constantFrom(DENY, AUDIT, TCP).map((o) => new TextEncoder().encode(JSON.stringify(o)));
    fc.assert(
      fc.property(mutated(valid), (b) => check(b.toString('utf8'))),
      fuzzParams(300),
    );
  });

  it('a time the log cannot print is replaced, not thrown on', () => {
    const d = parseDenial(JSON.stringify({ ...DENY, time: 1e300 }), 'ns', 'pod');
    assert.ok(d !== undefined && !Number.isNaN(Date.parse(d.time)));
    assert.equal(parseDenial(JSON.stringify({ ...DENY, port: 1e9 }), 'ns', 'pod'), undefined);
  });
});
