/**
 * The tap hub and its query over in-memory sinks: filters, the per-subscriber rate cap and its
 * count of what it dropped, a slow reader's events dropped rather than queued, the ends (max,
 * seconds, closed), the subscriber limit, and hostile queries refused with TAP_BAD_QUERY.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { type ClientInfo, type Deny, type Permit, parseIp, type RequestInfo } from '../../core/index.js';
import type { ProxyTapEvent } from './tap-event.js';
import { TapHub, type TapSink } from './tap-hub.js';
import { parseTapQuery, type TapFilter } from './tap-query.js';

const server = { group: 'policy.linkerd.io', kind: 'server', name: 'web-http' };
const route = { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'api' };
const authz = { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name: 'web-from-vote' };
const PERMIT: Permit = { allowed: true, level: 'http', server, route, authz, isAudit: false };
const AUDIT: Permit = { ...PERMIT, authz: { group: '', kind: 'default', name: 'audit' }, isAudit: true };
const DENY: Deny = { allowed: false, level: 'http', kind: 'http403', server, route, reason: 'unauthorized request on route' };
const TCP_DENY: Deny = { allowed: false, level: 'tcp', kind: 'tcp-refuse', server, route: undefined, reason: 'unauthorized connection on server web-http' };
const VOTE_ID = 'vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local';

function client(id?: string): ClientInfo {
  const ip = parseIp('10.0.0.7');
  assert.ok(ip !== undefined);
  return { ip, tls: id === undefined ? { kind: 'none', reason: 'no_tls_from_remote' } : { kind: 'established', clientId: id } };
}

function req(method: string, path: string): RequestInfo {
  return { method, path, authority: 'web.emojivoto:80', headers: { authorization: 'Bearer s3cr3t', cookie: 'session=abc' } };
}

class MemorySink implements TapSink {
  readonly lines: string[] = [];
  buffered = 0;
  ended = false;
  write(line: string): void {
    this.lines.push(line);
  }
  bufferedBytes(): number {
    return this.buffered;
  }
  end(line: string): void {
    this.lines.push(line);
    this.ended = true;
  }
  events(): ProxyTapEvent[] {
    return this.lines.map((l) => JSON.parse(l) as ProxyTapEvent & { end?: unknown }).filter((e) => e.end === undefined);
  }
  last(): { end: { reason: string; events: number; dropped: { rate: number; slow: number } } } {
    return JSON.parse(this.lines.at(-1) ?? '{}') as never;
  }
}

function filter(over: Partial<TapFilter> = {}): TapFilter {
  return { pathPrefix: undefined, identity: undefined, method: undefined, denied: false, max: 1000, seconds: 60, ...over };
}

function allow(hub: TapHub, path: string, id?: string, d: Permit = PERMIT): void {
  hub.httpPermitted(8080, client(id), req('GET', path), d, undefined).end(200, -1, -1, undefined, 1.5, false);
}

describe('TapHub', () => {
  it('does nothing, and builds nothing, without subscribers', () => {
    const hub = new TapHub();
    assert.equal(hub.active, false);
    let inner = 0;
    // The metrics' recorder still gets the end.
    hub.httpPermitted(8080, client(), req('GET', '/'), PERMIT, { end: () => inner++ }).end(200, -1, -1, undefined, 1, false);
    hub.httpDenied(8080, client(), req('GET', '/'), DENY, false);
    assert.equal(inner, 1);
  });

  it('publishes allowed requests with their authorization and denials with their reason, never header values or the query', () => {
    const hub = new TapHub();
    const sink = new MemorySink();
    assert.ok(hub.subscribe(filter(), sink));
    assert.equal(hub.active, true);
    allow(hub, '/api/list?token=s3cr3t', VOTE_ID);
    hub.httpDenied(8080, client(), req('POST', '/api/vote?sig=abc'), DENY, false);
    hub.httpDenied(8080, client(VOTE_ID), req('POST', '/emojivoto.v1.VotingService/Vote'), { ...DENY, kind: 'grpc7' }, true);
    hub.tcpDenied(9090, client(), TCP_DENY, false);
    hub.tcpDenied(9090, client(VOTE_ID), TCP_DENY, true);
    allow(hub, '/audited', undefined, AUDIT);
    const [ok, denied, grpc, tcp, terminated, audited] = sink.events();
    assert.deepEqual(
      { ...ok, time: 'T' },
      {
        time: 'T',
        port: 8080,
        method: 'GET',
        authority: 'web.emojivoto:80',
        path: '/api/list',
        clientAddr: '10.0.0.7',
        clientId: VOTE_ID,
        tls: true,
        server: 'server/web-http',
        route: 'HTTPRoute/api',
        authz: 'authorizationpolicy/web-from-vote',
        decision: 'allow',
        reason: null,
        kind: null,
        status: 200,
        grpcStatus: null,
        latencyMs: 1.5,
        error: null,
      },
    );
    assert.match(ok?.time ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.deepEqual(
      [denied?.decision, denied?.reason, denied?.status, denied?.authz, denied?.clientId, denied?.tls, denied?.path, denied?.kind],
      ['deny', 'unauthorized request on route', 403, null, null, false, '/api/vote', 'http403'],
    );
    assert.deepEqual([grpc?.status, grpc?.grpcStatus, grpc?.kind], [200, 7, 'grpc7']);
    assert.deepEqual([tcp?.method, tcp?.path, tcp?.port, tcp?.kind, tcp?.decision], [null, null, 9090, 'tcp-refuse', 'deny']);
    assert.equal(terminated?.kind, 'tcp-terminate');
    assert.deepEqual([audited?.decision, audited?.authz], ['audit', 'default/audit']);
    const all = sink.lines.join('');
    for (const secret of ['s3cr3t', 'session=abc', 'Bearer', 'sig=abc']) assert.ok(!all.includes(secret), `${secret} leaked`);
  });

  it('filters by path prefix, method, identity and denials (audit counts as a denial)', () => {
    const hub = new TapHub();
    const byPath = new MemorySink();
    const byMethod = new MemorySink();
    const byId = new MemorySink();
    const denied = new MemorySink();
    hub.subscribe(filter({ pathPrefix: '/api' }), byPath);
    hub.subscribe(filter({ method: 'POST' }), byMethod);
    hub.subscribe(filter({ identity: VOTE_ID }), byId);
    hub.subscribe(filter({ denied: true }), denied);
    allow(hub, '/api/a', VOTE_ID);
    allow(hub, '/web', undefined);
    allow(hub, '/x', undefined, AUDIT);
    hub.httpDenied(8080, client(), req('POST', '/api/b'), DENY, false);
    hub.tcpDenied(9090, client(VOTE_ID), TCP_DENY, false);
    assert.deepEqual(
      byPath.events().map((e) => e.path),
      ['/api/a', '/api/b'],
    );
    assert.deepEqual(
      byMethod.events().map((e) => e.path),
      ['/api/b'],
    );
    assert.deepEqual(
      byId.events().map((e) => e.path),
      ['/api/a', null],
    );
    assert.deepEqual(
      denied.events().map((e) => e.decision),
      ['audit', 'deny', 'deny'],
    );
  });

  it('ends after max events with a summary line, and leaves the hub', () => {
    const hub = new TapHub();
    const sink = new MemorySink();
    hub.subscribe(filter({ max: 3 }), sink);
    for (let i = 0; i < 10; i++) allow(hub, `/p${i}`);
    assert.equal(sink.events().length, 3);
    assert.ok(sink.ended);
    assert.deepEqual(sink.last(), { end: { reason: 'max', events: 3, dropped: { rate: 0, slow: 0 } } });
    assert.equal(hub.subscribers, 0);
    assert.equal(hub.active, false);
  });

  it('caps each subscriber at its rate and counts what it dropped', () => {
    const hub = new TapHub({ eventsPerSecond: 5 });
    const sink = new MemorySink();
    const sub = hub.subscribe(filter(), sink);
    for (let i = 0; i < 50; i++) allow(hub, `/p${i}`);
    // A burst of one second's worth passes; the rest of a same-instant burst is dropped.
    const kept = sink.events().length;
    assert.ok(kept >= 5 && kept <= 6, `kept ${kept}`);
    sub?.end('seconds');
    const last = sink.last();
    assert.equal(last.end.events, kept);
    assert.equal(last.end.dropped.rate, 50 - kept);
  });

  it('drops, rather than queues, events for a reader whose buffer is full', () => {
    const hub = new TapHub({ maxBufferedBytes: 1000 });
    const slow = new MemorySink();
    const fast = new MemorySink();
    const sub = hub.subscribe(filter(), slow);
    hub.subscribe(filter(), fast);
    allow(hub, '/a');
    slow.buffered = 5000;
    allow(hub, '/b');
    allow(hub, '/c');
    slow.buffered = 0;
    allow(hub, '/d');
    assert.deepEqual(
      slow.events().map((e) => e.path),
      ['/a', '/d'],
    );
    assert.equal(fast.events().length, 4);
    sub?.end('seconds');
    assert.deepEqual(slow.last().end.dropped, { rate: 0, slow: 2 });
  });

  it('ends after its seconds, and a closed client leaves without a line', async () => {
    const hub = new TapHub();
    const timed = new MemorySink();
    hub.subscribe(filter({ seconds: 1 }), timed);
    const gone = new MemorySink();
    hub.subscribe(filter(), gone)?.end('closed');
    assert.equal(gone.lines.length, 0);
    await sleep(1300);
    assert.ok(timed.ended);
    assert.equal(timed.last().end.reason, 'seconds');
    assert.equal(hub.subscribers, 0);
  });

  it('refuses subscribers beyond its limit until one ends', () => {
    const hub = new TapHub({ maxSubscribers: 2 });
    const a = hub.subscribe(filter(), new MemorySink());
    assert.ok(hub.subscribe(filter(), new MemorySink()));
    assert.equal(hub.subscribe(filter(), new MemorySink()), undefined);
    a?.end('closed');
    assert.ok(hub.subscribe(filter(), new MemorySink()));
    hub.close();
    assert.equal(hub.subscribers, 0);
  });
});

describe('parseTapQuery', () => {
  const parse = (q: string) => parseTapQuery(new URLSearchParams(q));

  it('reads every parameter, with defaults', () => {
    assert.deepEqual(parse(''), { ok: true, value: filter({ max: 100, seconds: 30 }) });
    assert.deepEqual(parse(`path=/api&identity=${VOTE_ID}&method=post&denied=true&max=5&seconds=10`), {
      ok: true,
      value: { pathPrefix: '/api', identity: VOTE_ID, method: 'POST', denied: true, max: 5, seconds: 10 },
    });
  });

  it('refuses hostile and malformed queries with TAP_BAD_QUERY and a hint', () => {
    for (const [q, msg] of [
      ['bogus=1', /unknown tap parameter "bogus"/],
      ['max=1&max=2', /given twice/],
      ['max=0', /out of range 1-1000000/],
      ['max=-1', /not a whole number/],
      ['max=1e3', /not a whole number/],
      ['max=99999999999999999999', /not a whole number/],
      ['seconds=3601', /out of range 1-3600/],
      ['path=api', /must start with \//],
      ['path=/a%0d%0aX-Injected:1', /printable characters only/],
      ['path=/a%3Fb', /query string/],
      ['identity=a%20b', /not a mesh identity/],
      ['method=GE%20T', /not an HTTP method/],
      ['denied=yes', /true or false/],
      [`path=/${'a'.repeat(5000)}`, /must start with/],
    ] as const) {
      const r = parse(q);
      assert.ok(!r.ok, q);
      assert.equal(r.error.code, 'TAP_BAD_QUERY');
      assert.match(r.error.message, msg, q);
      assert.ok(r.error.hint.length > 0);
      assert.ok(r.error.message.length < 200, 'a long value is shown cut');
    }
  });
});
