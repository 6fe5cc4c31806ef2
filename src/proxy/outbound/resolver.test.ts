/**
 * DestinationCache against a scripted Destination source and virtual time (name expansion, one
 * shared stream per authority, event application, refusals, reconnects keeping the last set,
 * fail-fast after the lookup deadline, idle eviction), and once against a real Destination gRPC
 * server on 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import {
  DestinationClient,
  type DestinationEndpoint,
  type DestinationEvent,
  type DestinationResolver,
  destinationService,
  GrpcError,
  type GrpcServerHandle,
  type StreamHandlers,
  startGrpcServer,
  type WireResult,
} from '../../api/index.js';
import type { Timers } from '../../shared/index.js';
import { waitFor, within } from '../testing/identity.js';
import { DestinationCache, type DestinationCacheOptions, type DestinationSource, type OutboundTarget, parseOutboundAuthority } from './resolver.js';

// === fixtures ===

const ID = (sa: string) => `${sa}.demo.serviceaccount.identity.linkerd.cluster.local`;

function ep(ip: string, port = 8080, extra: Partial<DestinationEndpoint> = {}): DestinationEndpoint {
  return { ip, port, weight: 10_000, labels: {}, identity: ID('web'), serverName: ID('web'), protocolHint: 'h2', ...extra };
}

const add = (...endpoints: DestinationEndpoint[]): WireResult<DestinationEvent> => ({ ok: true, value: { kind: 'add', endpoints, setLabels: {} } });
const remove = (...addrs: { ip: string; port: number }[]): WireResult<DestinationEvent> => ({ ok: true, value: { kind: 'remove', addrs } });
const none = (exists: boolean): WireResult<DestinationEvent> => ({ ok: true, value: { kind: 'noEndpoints', exists } });

interface FakeStream {
  readonly path: string;
  readonly handlers: StreamHandlers<WireResult<DestinationEvent>>;
  cancelled: boolean;
}

/** A Destination source the tests drive. */
class FakeSource implements DestinationSource {
  readonly streams: FakeStream[] = [];

  get(path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>): () => void {
    const s: FakeStream = { path, handlers, cancelled: false };
    this.streams.push(s);
    return () => {
      s.cancelled = true;
    };
  }

  /** Open (not cancelled, not ended) streams of `path`. */
  open(path: string): FakeStream[] {
    return this.streams.filter((s) => s.path === path && !s.cancelled);
  }

  last(path: string): FakeStream {
    const s = this.streams.filter((x) => x.path === path).at(-1);
    assert.ok(s !== undefined, `no stream for ${path}`);
    return s;
  }

  /** Ends the latest stream of `path` like the server would (it is then no longer open). */
  end(path: string, error?: GrpcError): void {
    const s = this.last(path);
    s.cancelled = true;
    s.handlers.onEnd(error);
  }
}

/** Virtual time: timers fire on `advance`. */
class ManualClock implements Timers {
  now = 1_000_000;
  #next = 1;
  readonly #timers = new Map<number, { at: number; fn: () => void }>();

  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.#next++;
    this.#timers.set(id, { at: this.now + ms, fn });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as number);
  }

  get pending(): number {
    return this.#timers.size;
  }

  advance(ms: number): void {
    const end = this.now + ms;
    for (;;) {
      let due: [number, { at: number; fn: () => void }] | undefined;
      for (const t of this.#timers) if (t[1].at <= end && (due === undefined || t[1].at < due[1].at)) due = t;
      if (due === undefined) break;
      this.#timers.delete(due[0]);
      this.now = due[1].at;
      due[1].fn();
    }
    this.now = end;
  }
}

function mkCache(source: DestinationSource, clock: ManualClock, extra: Partial<DestinationCacheOptions> = {}): DestinationCache {
  return new DestinationCache({
    source,
    namespace: 'demo',
    backoff: { minMs: 100, maxMs: 1000, jitter: 0 },
    lookupTimeoutMs: 500,
    idleTimeoutMs: 10_000,
    negativeTtlMs: 2_000,
    timers: clock,
    now: () => clock.now,
    ...extra,
  });
}

function target(cache: DestinationCache, authority: string): OutboundTarget {
  const p = cache.parse(authority);
  assert.ok(p.ok, p.ok ? '' : p.reason);
  return p.target;
}

const WEB = 'web.demo.svc.cluster.local:80';

// === tests ===

describe('parseOutboundAuthority', () => {
  it('expands short service names and canonicalizes IPs', () => {
    const naming = { clusterDomain: 'cluster.local', namespace: 'demo' };
    const path = (a: string, port?: number) => {
      const r = parseOutboundAuthority(a, naming, port);
      return r.ok ? r.target.path : `!${r.reason}`;
    };
    assert.equal(path('web-svc.emojivoto.svc.cluster.local:80'), 'web-svc.emojivoto.svc.cluster.local:80');
    assert.equal(path('Web-Svc.Emojivoto.svc.cluster.local.:80'), 'web-svc.emojivoto.svc.cluster.local:80');
    assert.equal(path('web-svc.emojivoto.svc:8080'), 'web-svc.emojivoto.svc.cluster.local:8080');
    assert.equal(path('web-svc.emojivoto:8080'), 'web-svc.emojivoto.svc.cluster.local:8080');
    assert.equal(path('web-svc:8080'), 'web-svc.demo.svc.cluster.local:8080');
    assert.equal(path('web-svc.emojivoto', 80), 'web-svc.emojivoto.svc.cluster.local:80');
    assert.equal(path('10.0.0.1:80'), '10.0.0.1:80');
    assert.equal(path('[::ffff:10.0.0.1]:80'), '10.0.0.1:80');
    assert.equal(path('[2001:db8::0:1]:443'), '[2001:db8::1]:443');
    const t = parseOutboundAuthority('web.ns.svc.example.org:80', { clusterDomain: 'example.org' });
    assert.deepEqual(t, { ok: true, target: { kind: 'name', host: 'web.ns.svc.example.org', port: 80, path: 'web.ns.svc.example.org:80' } });
  });

  it('refuses what is not a cluster name or a valid authority, with a reason', () => {
    const naming = { namespace: 'demo' };
    for (const [a, re] of [
      ['web-svc.emojivoto', /no port/],
      ['a.b.c.d:80', /not a cluster service name/],
      ['pod.web.ns.svc.cluster.local:80', /not a cluster service name/],
      ['web_svc.ns:80', /not a cluster service name/],
      ['web.ns:0', /bad port/],
      ['web.ns:99999', /bad port/],
      ['web.ns:http', /bad port/],
      ['::1:80', /write IPv6 addresses as \[addr\]:port/],
      ['[::1:80', /unterminated/],
      ['[web]:80', /not an IPv6 address/],
    ] as const) {
      const r = parseOutboundAuthority(a, naming);
      assert.equal(r.ok, false, a);
      assert.match(r.ok ? '' : r.reason, re, a);
    }
    const single = parseOutboundAuthority('web:80');
    assert.equal(single.ok, false, 'a single label needs the own namespace');
  });
});

describe('DestinationCache', () => {
  it('parses an authority the same however often and with whichever default port it is asked', () => {
    const cache = mkCache(new FakeSource(), new ManualClock());
    const path = (a: string, port?: number): string => {
      const r = cache.parse(a, port);
      return r.ok ? r.target.path : `!${r.reason}`;
    };
    for (let round = 0; round < 2; round++) {
      assert.equal(path('web', 80), 'web.demo.svc.cluster.local:80');
      assert.match(path('web'), /no port/);
      assert.equal(path('web', 8080), 'web.demo.svc.cluster.local:8080');
      assert.match(path('a.b.c.d:80', 80), /not a cluster service name/);
      assert.equal(path('web:9090', 80), 'web.demo.svc.cluster.local:9090');
    }
    // Past the memo's bound (it is emptied), parses stay right.
    for (let i = 0; i < 1500; i++) assert.equal(path(`web-${i}`, 80), `web-${i}.demo.svc.cluster.local:80`);
    assert.equal(path('web', 80), 'web.demo.svc.cluster.local:80');
    assert.match(path('web'), /no port/);
  });

  it('shares one stream per authority and keeps the set from add / remove / noEndpoints', async () => {
    const source = new FakeSource();
    const clock = new ManualClock();
    const cache = mkCache(source, clock);
    const t = target(cache, 'web.demo:80');
    assert.equal(t.path, WEB);
    const p1 = cache.resolve(t);
    const p2 = cache.resolve(target(cache, 'web.demo.svc.cluster.local:80'));
    assert.equal(source.streams.length, 1, 'one stream for both lookups');
    source.last(WEB).handlers.onMessage(add(ep('10.0.0.1'), ep('10.0.0.2')));
    const [r1, r2] = await Promise.all([p1, p2]);
    assert.deepEqual(r1, { kind: 'endpoints', endpoints: [ep('10.0.0.1'), ep('10.0.0.2')] });
    assert.deepEqual(r2, r1);
    // A snapshot: an unchanged set is handed out as the same array.
    const endpointsOf = () => (cache.lookup(t) as { endpoints?: unknown }).endpoints;
    assert.equal(endpointsOf(), endpointsOf());
    assert.equal(endpointsOf(), (r1 as { endpoints?: unknown }).endpoints);

    const s = source.last(WEB);
    s.handlers.onMessage(add(ep('10.0.0.2', 8080, { weight: 5 }), ep('10.0.0.3')));
    s.handlers.onMessage(remove({ ip: '10.0.0.1', port: 8080 }));
    assert.deepEqual(cache.lookup(t), { kind: 'endpoints', endpoints: [ep('10.0.0.2', 8080, { weight: 5 }), ep('10.0.0.3')] });
    // An invalid update is ignored.
    s.handlers.onMessage({ ok: false, message: 'add.addrs[0].addr: not set' });
    assert.equal(cache.lookup(t)?.kind, 'endpoints');
    s.handlers.onMessage(none(true));
    assert.deepEqual(cache.lookup(t), { kind: 'no-endpoints', reason: `service ${WEB} has no endpoints` });
    s.handlers.onMessage(none(false));
    assert.deepEqual(cache.lookup(t), { kind: 'unknown', reason: `unknown service ${WEB}` });
    assert.equal(source.open(WEB).length, 1, 'the stream stays open: the service may appear');
    s.handlers.onMessage(add(ep('10.0.0.9')));
    assert.deepEqual(cache.lookup(t), { kind: 'endpoints', endpoints: [ep('10.0.0.9')] });
    assert.equal(source.streams.length, 1);
    cache.close();
    assert.equal(source.open(WEB).length, 0);
    assert.equal(clock.pending, 0);
  });

  it('falls back to a direct connection for an IP the controller does not know', async () => {
    const source = new FakeSource();
    const clock = new ManualClock();
    const cache = mkCache(source, clock);
    const t = target(cache, '10.1.2.3:5432');
    const p = cache.resolve(t);
    source.last('10.1.2.3:5432').handlers.onMessage(none(false));
    assert.deepEqual(await p, { kind: 'direct', ip: '10.1.2.3', port: 5432 });
    const t6 = target(cache, '[fd00::1]:80');
    const p6 = cache.resolve(t6);
    source.end('[fd00::1]:80', new GrpcError('NOT_FOUND', 'no such pod'));
    assert.deepEqual(await p6, { kind: 'direct', ip: 'fd00::1', port: 80 });
    cache.close();
  });

  it('believes a refusal for a while, then asks again', async () => {
    const source = new FakeSource();
    const clock = new ManualClock();
    const cache = mkCache(source, clock);
    const t = target(cache, 'nope.demo:80');
    const p = cache.resolve(t);
    source.end(t.path, new GrpcError('INVALID_ARGUMENT', 'bad path'));
    assert.deepEqual(await p, { kind: 'unknown', reason: `unknown service ${t.path}: bad path` });
    clock.advance(1_000);
    assert.equal(cache.lookup(t)?.kind, 'unknown');
    assert.equal(source.streams.length, 1, 'no reconnect after a refusal');
    clock.advance(1_500);
    assert.equal(cache.lookup(t), undefined, 'asked again once the refusal expired');
    assert.equal(source.streams.length, 2);
    source.last(t.path).handlers.onMessage(add(ep('10.0.0.1')));
    assert.equal(cache.lookup(t)?.kind, 'endpoints');
    cache.close();
  });

  it('keeps the last set while reconnecting with backoff, and replaces it from the new stream', () => {
    const source = new FakeSource();
    const clock = new ManualClock();
    const cache = mkCache(source, clock);
    const t = target(cache, 'web.demo:80');
    cache.lookup(t);
    source.last(WEB).handlers.onMessage(add(ep('10.0.0.1'), ep('10.0.0.2')));
    source.end(WEB, new GrpcError('UNAVAILABLE', 'controller gone'));
    assert.equal(cache.lookup(t)?.kind, 'endpoints', 'the last set stays in force');
    assert.equal(source.streams.length, 1);
    clock.advance(99);
    assert.equal(source.streams.length, 1);
    clock.advance(1);
    assert.equal(source.streams.length, 2, 'reconnected after 100 ms');
    source.end(WEB, new GrpcError('UNAVAILABLE', 'still gone'));
    clock.advance(150);
    assert.equal(source.streams.length, 2, 'the second delay doubles');
    clock.advance(50);
    assert.equal(source.streams.length, 3);
    assert.deepEqual(cache.lookup(t), { kind: 'endpoints', endpoints: [ep('10.0.0.1'), ep('10.0.0.2')] });
    // The new stream's first event is the full state: 10.0.0.1 went away meanwhile.
    source.last(WEB).handlers.onMessage(add(ep('10.0.0.2')));
    assert.deepEqual(cache.lookup(t), { kind: 'endpoints', endpoints: [ep('10.0.0.2')] });
    // A clean end (server shutdown) reconnects too, and the backoff was reset by the message.
    source.end(WEB, undefined);
    clock.advance(100);
    assert.equal(source.streams.length, 4);
    // A late message of an ended stream is ignored.
    source.streams[0]?.handlers.onMessage(add(ep('10.9.9.9')));
    assert.deepEqual(cache.lookup(t), { kind: 'endpoints', endpoints: [ep('10.0.0.2')] });
    cache.close();
    assert.equal(clock.pending, 0);
  });

  it('answers unavailable after the lookup deadline and fails fast until an answer arrives', async () => {
    const source = new FakeSource();
    const clock = new ManualClock();
    const cache = mkCache(source, clock);
    const t = target(cache, 'web.demo:80');
    const p = cache.resolve(t);
    const q = cache.resolve(t);
    clock.advance(500);
    const [r, s] = await Promise.all([p, q]);
    assert.equal(r.kind, 'unavailable');
    assert.equal(s.kind, 'unavailable');
    assert.equal((await cache.resolve(t)).kind, 'unavailable', 'fails fast');
    source.last(WEB).handlers.onMessage(add(ep('10.0.0.1')));
    assert.equal((await cache.resolve(t)).kind, 'endpoints');
    cache.close();
  });

  it('forgets idle authorities and cancels their streams', () => {
    const source = new FakeSource();
    const clock = new ManualClock();
    const cache = mkCache(source, clock);
    const web = target(cache, 'web.demo:80');
    const api = target(cache, 'api.demo:80');
    cache.lookup(web);
    cache.lookup(api);
    source.last(WEB).handlers.onMessage(add(ep('10.0.0.1')));
    source.last(api.path).handlers.onMessage(add(ep('10.0.0.2')));
    clock.advance(6_000);
    cache.lookup(web);
    clock.advance(6_000);
    assert.deepEqual(
      source.streams.map((s) => [s.path, s.cancelled]),
      [
        [WEB, false],
        [api.path, true],
      ],
    );
    assert.equal(cache.stats().authorities, 1);
    assert.equal(cache.stats().evicted, 1);
    clock.advance(20_000);
    assert.equal(cache.stats().authorities, 0);
    assert.equal(source.open(WEB).length, 0);
    assert.equal(clock.pending, 0, 'no sweep without entries');
    cache.lookup(web);
    assert.equal(source.streams.length, 3, 'a forgotten authority is looked up afresh');
    cache.close();
  });

  it('resolves through a real Destination server and follows it across a restart', async () => {
    const events = new Map<string, DestinationEvent[]>();
    events.set(WEB, [{ kind: 'add', endpoints: [ep('10.0.0.1')], setLabels: {} }]);
    const listeners = new Set<(e: DestinationEvent) => void>();
    const resolve: DestinationResolver = (req) => {
      const initial = events.get(req.path);
      if (initial === undefined) return { ok: false, code: 'INVALID_ARGUMENT', message: `unknown ${req.path}` };
      return {
        ok: true,
        subscribe(listener) {
          for (const e of initial) listener(e);
          listeners.add(listener);
          return () => listeners.delete(listener);
        },
      };
    };
    let server: GrpcServerHandle = await startGrpcServer({ host: '127.0.0.1', port: 0, services: [destinationService(resolve)] });
    const port = server.port;
    const client = new DestinationClient({ address: `127.0.0.1:${port}`, dedicatedConnection: true });
    const cache = new DestinationCache({ source: client, namespace: 'demo', backoff: { minMs: 20, maxMs: 100 } });
    after(async () => {
      cache.close();
      client.close();
      await server.close(0);
    });
    const t = target(cache, 'web.demo:80');
    assert.deepEqual(await within(cache.resolve(t), 5000, 'the first answer'), { kind: 'endpoints', endpoints: [ep('10.0.0.1')] });
    const unknown = target(cache, 'nope.demo:80');
    assert.equal((await within(cache.resolve(unknown), 5000, 'the refusal')).kind, 'unknown');
    for (const l of listeners) l({ kind: 'add', endpoints: [ep('10.0.0.2')], setLabels: {} });
    await waitFor(() => (cache.lookup(t) as { endpoints?: unknown[] }).endpoints?.length === 2, 'the added endpoint');

    await server.close(0);
    assert.equal(cache.lookup(t)?.kind, 'endpoints', 'kept while the server is down');
    events.set(WEB, [{ kind: 'add', endpoints: [ep('10.0.0.3')], setLabels: {} }]);
    server = await startGrpcServer({ host: '127.0.0.1', port, services: [destinationService(resolve)] });
    await waitFor(
      () => {
        const r = cache.lookup(t);
        return r?.kind === 'endpoints' && r.endpoints.length === 1 && r.endpoints[0]?.ip === '10.0.0.3';
      },
      'the new server state to replace the old set',
      10_000,
    );
  });
});
