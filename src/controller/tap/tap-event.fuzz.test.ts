/**
 * What the controller reads from proxies' tap streams and from its own API's callers, under
 * arbitrary input: `parseProxyTapLine` never throws and passes on only well-formed events (a
 * mutated valid line is either refused or still well-formed; a path never carries a query
 * string), the line decoder the tap reader uses never yields a line past its bound and splits the
 * same whatever the chunking, and the `/api/v1/tap` query parser never throws and keeps its bounds.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { fuzzParams, mutated } from '../../shared/testing/fuzz.js';
import { LineDecoder } from '../../sources/index.js';
import { parseProxyTapLine } from './tap-event.js';
import { parseTapQuery, TAP_MAX_MAX, TAP_MAX_SECONDS } from './tap-query.js';

const VALID = {
  time: '2026-11-28T10:00:00.000Z',
  port: 8080,
  method: 'GET',
  authority: 'web:80',
  path: '/api/list',
  clientAddr: '10.0.0.7',
  clientId: 'vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local',
  tls: true,
  server: 'server/web-http',
  route: 'HTTPRoute/api',
  authz: 'authorizationpolicy/web',
  decision: 'allow',
  reason: null,
  kind: null,
  status: 200,
  grpcStatus: null,
  latencyMs: 1.25,
  error: null,
};

function checkEvent(line: string): void {
  const p = parseProxyTapLine(line);
  if (p.kind !== 'event') return;
  const e = p.event;
  assert.ok(Number.isInteger(e.port) && e.port >= 1 && e.port <= 65535);
  assert.ok(['allow', 'deny', 'audit'].includes(e.decision));
  assert.equal(typeof e.tls, 'boolean');
  assert.ok(!Number.isNaN(Date.parse(e.time)));
  assert.ok(e.path === null || (typeof e.path === 'string' && !e.path.includes('?')));
  for (const k of ['method', 'authority', 'clientId', 'route', 'authz', 'reason', 'kind', 'error'] as const) {
    const v = e[k];
    assert.ok(v === null || (typeof v === 'string' && v.length <= 4096), k);
  }
  for (const k of ['status', 'grpcStatus', 'latencyMs'] as const) {
    const v = e[k];
    assert.ok(v === null || Number.isFinite(v), k);
  }
}

describe('tap input (fuzz)', () => {
  it('parses a proxy event and an end line; refuses a query string, a bad port or decision', () => {
    const ok = parseProxyTapLine(JSON.stringify(VALID));
    assert.equal(ok.kind, 'event');
    assert.deepEqual(parseProxyTapLine('{"end":{"reason":"max","events":3,"dropped":{"rate":1,"slow":2}}}'), {
      kind: 'end',
      end: { reason: 'max', events: 3, dropped: { rate: 1, slow: 2 } },
    });
    for (const bad of [
      { ...VALID, path: '/a?token=x' },
      { ...VALID, port: 0 },
      { ...VALID, port: 1.5 },
      { ...VALID, decision: 'maybe' },
      { ...VALID, tls: 'yes' },
      { ...VALID, time: 'yesterday' },
      { ...VALID, status: '200' },
      { ...VALID, reason: 'x'.repeat(5000) },
      [VALID],
      null,
    ]) {
      assert.equal(parseProxyTapLine(JSON.stringify(bad)).kind, 'invalid', JSON.stringify(bad).slice(0, 80));
    }
    assert.equal(parseProxyTapLine('{"end":{"reason":"max","events":-1,"dropped":{"rate":0,"slow":0}}}').kind, 'invalid');
    assert.equal(parseProxyTapLine('not json').kind, 'invalid');
  });

  it('parseProxyTapLine never throws and passes on only well-formed events', () => {
    const base = Buffer.from(JSON.stringify(VALID));
    fc.assert(
      fc.property(
        fc.oneof(
          mutated(fc.constant(base)).map((b) => b.toString('latin1')),
          fc.string({ maxLength: 300 }),
          fc.json(),
        ),
        (line) => checkEvent(line),
      ),
      fuzzParams(400),
    );
  });

  it('the tap line decoder bounds every line and splits the same whatever the chunking', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 400 }), fc.array(fc.nat(), { maxLength: 10 }), (text, cuts) => {
        const bytes = Buffer.from(text);
        const pushOrRefuse = (d: LineDecoder, b: Buffer): string[] | undefined => {
          try {
            return d.push(b);
          } catch {
            return undefined;
          }
        };
        const whole = pushOrRefuse(new LineDecoder(64), bytes);
        const s = new LineDecoder(64);
        const pieces: string[] = [];
        let refused = false;
        let at = 0;
        for (const c of [...cuts.map((x) => x % (bytes.length + 1)).sort((a, b) => a - b), bytes.length]) {
          const got = pushOrRefuse(s, bytes.subarray(at, Math.max(at, c)));
          at = Math.max(at, c);
          if (got === undefined) {
            refused = true;
            break;
          }
          pieces.push(...got);
        }
        if (whole === undefined) {
          return;
        }
        for (const l of whole) assert.ok(Buffer.byteLength(l) <= 64);
        if (!refused) assert.deepEqual(pieces, whole);
      }),
      fuzzParams(300),
    );
  });

  it('the /api/v1/tap query parser never throws and keeps its bounds', () => {
    const keys = ['resource', 'namespace', 'allNamespaces', 'path', 'identity', 'method', 'denied', 'max', 'seconds', 'x'];
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.constantFrom(...keys), fc.string({ maxLength: 40 })), { maxLength: 8 }), (pairs) => {
        const r = parseTapQuery(new URLSearchParams(pairs));
        if (!r.ok) {
          assert.equal(r.error.code, 'INVALID_ARGUMENT');
          return;
        }
        assert.ok(r.value.max >= 1 && r.value.max <= TAP_MAX_MAX);
        assert.ok(r.value.seconds >= 1 && r.value.seconds <= TAP_MAX_SECONDS);
        assert.ok(r.value.pathPrefix === undefined || /^\/[\x21-\x3e\x40-\x7e]*$/.test(r.value.pathPrefix));
      }),
      fuzzParams(400),
    );
  });
});
