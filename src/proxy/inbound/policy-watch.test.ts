/**
 * PolicyWatcher against a real InboundServerPolicies server on 127.0.0.1 (fake index cells), and
 * against a scripted client for the cases a server cannot easily produce (invalid messages,
 * synchronous failures, timer accounting).
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { type GrpcServerHandle, InboundPolicyClient, inboundPolicyService, type StreamHandlers, startGrpcServer, type WireResult } from '../../api/index.js';
import { type Authorization, authorizeConnection, type CompiledServer, clientInfo, deepEqual, type InboundServer } from '../../core/index.js';
import type { Timers } from '../../identity/index.js';
import { createLogger, hasCode, type Logger } from '../../shared/index.js';
import { waitFor, within } from '../testing/identity.js';
import { FakeDiscovery } from '../testing/policies.js';
import { type PolicyWatchClient, PolicyWatcher, type PolicyWatcherOptions } from './policy-watch.js';

// === fixtures ===

const WORKLOAD = JSON.stringify({ ns: 'emojivoto', pod: 'web-0' });
const FAST_BACKOFF = { minMs: 10, maxMs: 80, jitter: 0 };

const meshAuthz = (name: string, identities: string[]): Authorization => ({
  meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name },
  networks: [{ net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] }],
  authentication: { kind: 'tlsAuthenticated', identities, suffixes: [] },
});

/** An opaque Server admitting the given identities. */
const mkServer = (name: string, identities: string[] = []): InboundServer => ({
  meta: { group: 'policy.linkerd.io', kind: 'Server', name },
  protocol: { kind: 'opaque' },
  authorizations: identities.length === 0 ? [] : [meshAuthz(`${name}-authz`, identities)],
});

const WEB_ID = 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local';
const BOT_ID = 'vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local';

/** Real timers that count what is pending. */
class CountingTimers implements Timers {
  readonly #pending = new Set<NodeJS.Timeout>();
  readonly delays: number[] = [];
  get pending(): number {
    return this.#pending.size;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    this.delays.push(ms);
    const t = setTimeout(() => {
      this.#pending.delete(t);
      fn();
    }, ms);
    this.#pending.add(t);
    return t;
  }
  clearTimeout(handle: unknown): void {
    this.#pending.delete(handle as NodeJS.Timeout);
    clearTimeout(handle as NodeJS.Timeout);
  }
}

/** Wraps a client, recording each WatchPort call and how it ended. */
function recording(inner: PolicyWatchClient) {
  const calls: { port: number; at: number; end?: string }[] = [];
  const client: PolicyWatchClient = {
    watchPort: (workload, port, handlers) => {
      const call: { port: number; at: number; end?: string } = { port, at: Date.now() };
      calls.push(call);
      return inner.watchPort(workload, port, {
        onMessage: (m) => handlers.onMessage(m),
        onEnd: (e) => {
          call.end = e?.code ?? 'OK';
          handlers.onEnd(e);
        },
      });
    },
  };
  return { client, calls };
}

const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function serve(discovery: FakeDiscovery, port = 0): Promise<GrpcServerHandle> {
  const server = await startGrpcServer({ host: '127.0.0.1', port, services: [inboundPolicyService(discovery)] });
  cleanups.push(() => server.close(0));
  return server;
}

function mkClient(port: number): InboundPolicyClient {
  const client = new InboundPolicyClient({ address: `127.0.0.1:${port}`, dedicatedConnection: true });
  cleanups.push(() => client.close());
  return client;
}

function mkWatcher(opts: Partial<PolicyWatcherOptions> & Pick<PolicyWatcherOptions, 'client'>): PolicyWatcher {
  const w = new PolicyWatcher({ workload: WORKLOAD, ports: [8080], backoff: FAST_BACKOFF, ...opts });
  cleanups.push(() => w.stop());
  return w;
}

const isAllowed = (cs: CompiledServer | undefined, id: string): boolean => {
  assert.ok(cs !== undefined, 'a policy');
  const client = clientInfo('10.0.0.1', { kind: 'established', clientId: id });
  assert.ok(client !== undefined);
  return authorizeConnection(cs, client).allowed;
};

// === over gRPC ===

describe('PolicyWatcher over gRPC', () => {
  it('receives and compiles the first policy, then publishes changes with the previous one', async () => {
    const discovery = new FakeDiscovery();
    const cell = discovery.add('emojivoto', 'web-0', 8080, mkServer('web-http', [BOT_ID]));
    const server = await serve(discovery);
    const updates: { port: number; next: CompiledServer; prev: CompiledServer | undefined }[] = [];
    const w = mkWatcher({ client: mkClient(server.port), onUpdate: (port, next, prev) => updates.push({ port, next, prev }) });

    assert.equal(w.isReady(), false);
    assert.equal(w.current(8080), undefined, 'no policy yet: fail closed');
    await within(w.ready(), 5000, 'the first policy');
    const first = w.current(8080);
    assert.ok(first !== undefined);
    assert.ok(deepEqual(first.server, cell.value), 'the compiled policy is the published one');
    assert.equal(first.invalid, undefined);
    assert.equal(isAllowed(first, BOT_ID), true);
    assert.equal(isAllowed(first, WEB_ID), false);
    assert.equal(updates.length, 1);
    assert.equal(updates[0]?.prev, undefined);

    const seen: { next: CompiledServer; prev: CompiledServer | undefined }[] = [];
    const unsubscribe = w.subscribe(8080, (next, prev) => seen.push({ next, prev }));
    cell.publish(mkServer('web-http', [WEB_ID]));
    await waitFor(() => seen.length === 1, 'the change');
    const change = seen[0];
    assert.ok(change !== undefined);
    assert.equal(change.prev, first, 'listeners get the policy that was replaced');
    assert.equal(change.next, w.current(8080));
    assert.equal(w.previous(8080), first);
    assert.equal(isAllowed(change.next, WEB_ID), true);
    assert.equal(isAllowed(change.next, BOT_ID), false);
    assert.equal(updates.length, 2);

    unsubscribe();
    cell.publish(mkServer('web-http', [BOT_ID, WEB_ID]));
    await waitFor(() => updates.length === 3, 'the third policy');
    assert.equal(seen.length, 1, 'no calls after unsubscribe');
  });

  it('keeps the last policy while the controller is gone and resumes when it is back on the same port', async () => {
    const discovery = new FakeDiscovery();
    discovery.add('emojivoto', 'web-0', 8080, mkServer('web-http', [BOT_ID]));
    const first = await serve(discovery);
    const port = first.port;
    const { client, calls } = recording(mkClient(port));
    const w = mkWatcher({ client });
    await within(w.ready(), 5000, 'the first policy');
    const kept = w.current(8080);

    await first.close();
    // The stream ends, and reconnects fail while nothing listens.
    await waitFor(() => calls.length >= 3, 'reconnect attempts');
    assert.equal(calls[0]?.end, 'OK', 'a server shutdown ends the stream with OK');
    assert.ok(
      calls.slice(1, -1).every((c) => c.end === 'UNAVAILABLE'),
      JSON.stringify(calls),
    );
    assert.equal(w.current(8080), kept, 'the last policy stays in force');
    assert.equal(w.isReady(), true);

    // The controller comes back, on the same port, with a newer policy.
    const discovery2 = new FakeDiscovery();
    discovery2.add('emojivoto', 'web-0', 8080, mkServer('web-http', [WEB_ID]));
    const seen: (CompiledServer | undefined)[] = [];
    w.subscribe(8080, (_next, prev) => seen.push(prev));
    const second = await serve(discovery2, port);
    assert.equal(second.port, port);
    await waitFor(() => seen.length === 1, 'the policy from the new server', 8000);
    assert.equal(seen[0], kept);
    assert.equal(isAllowed(w.current(8080), WEB_ID), true);
    assert.equal(isAllowed(w.current(8080), BOT_ID), false);
    await waitFor(() => discovery2.subscribers === 1, 'the new stream');
  });

  it('an unknown pod (NOT_FOUND) is retried with growing delays until it appears', async () => {
    const discovery = new FakeDiscovery();
    const server = await serve(discovery);
    const { client, calls } = recording(mkClient(server.port));
    const timers = new CountingTimers();
    const w = mkWatcher({ client, timers, backoff: { minMs: 10, maxMs: 40, jitter: 0 } });
    let ready = false;
    void w.ready().then(() => {
      ready = true;
    });

    await waitFor(() => calls.length >= 5, 'five attempts');
    assert.ok(
      calls.slice(0, 4).every((c) => c.end === 'NOT_FOUND'),
      JSON.stringify(calls),
    );
    assert.deepEqual(timers.delays.slice(0, 4), [10, 20, 40, 40], 'exponential, capped');
    for (let i = 1; i < 4; i++) {
      const gap = (calls[i]?.at ?? 0) - (calls[i - 1]?.at ?? 0);
      assert.ok(gap >= (timers.delays[i - 1] ?? 0) - 1, `attempt ${i} came after its delay (${gap} ms)`);
    }
    assert.equal(w.current(8080), undefined, 'fail closed meanwhile');
    assert.equal(ready, false);

    discovery.add('emojivoto', 'web-0', 8080, mkServer('web-http', [BOT_ID]));
    await within(w.ready(), 5000, 'the policy once the pod exists');
    assert.equal(isAllowed(w.current(8080), BOT_ID), true);
    w.stop();
    assert.equal(timers.pending, 0);
  });

  it('watches ports added at runtime; ready() waits for them', async () => {
    const discovery = new FakeDiscovery();
    discovery.add('emojivoto', 'web-0', 8080, mkServer('web-http', [BOT_ID]));
    const late = discovery.add('emojivoto', 'web-0', 9090, mkServer('web-admin', [WEB_ID]));
    const server = await serve(discovery);
    const w = mkWatcher({ client: mkClient(server.port) });
    await within(w.ready(), 5000, 'port 8080');

    w.watch(9090);
    w.watch(9090);
    assert.deepEqual(w.ports, [8080, 9090]);
    assert.equal(w.isReady(), false, 'a new port without policy is not ready');
    await within(w.ready(), 5000, 'port 9090');
    assert.ok(deepEqual(w.current(9090)?.server, late.value));
    assert.throws(() => w.watch(0), RangeError);
    assert.throws(() => w.watch(70000), RangeError);
  });

  it('stop() cancels the streams on the server and leaves no timer', async () => {
    const discovery = new FakeDiscovery();
    discovery.add('emojivoto', 'web-0', 8080, mkServer('web-http', [BOT_ID]));
    const server = await serve(discovery);
    const timers = new CountingTimers();
    const w = mkWatcher({ client: mkClient(server.port), timers, ports: [8080, 8081] });
    await waitFor(() => w.current(8080) !== undefined, 'port 8080');
    // 8081 is unknown: its stream keeps failing, so a reconnect is pending most of the time.
    await waitFor(() => timers.delays.length >= 2, 'retries on 8081');
    const ready = w.ready();
    w.stop();
    assert.equal(timers.pending, 0, 'no reconnect pending');
    await assert.rejects(ready, (e) => hasCode(e, 'ERR_POLICY_WATCH_STOPPED'));
    await assert.rejects(w.ready(), (e) => hasCode(e, 'ERR_POLICY_WATCH_STOPPED'));
    await waitFor(() => discovery.subscribers === 0, 'the server-side stream to end');
    const retries = timers.delays.length;
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(timers.delays.length, retries, 'nothing scheduled after stop');
    assert.ok(w.current(8080) !== undefined, 'the last policy stays readable');
    w.watch(9999);
    assert.deepEqual(w.ports, [8080, 8081], 'no new watches after stop');
  });
});

// === scripted client ===

/** A client whose streams the test drives by hand. */
class ScriptedClient implements PolicyWatchClient {
  readonly streams: { port: number; handlers: StreamHandlers<WireResult<InboundServer>>; cancelled: boolean }[] = [];
  /** When set, the next watchPort throws it / ends synchronously. */
  throwNext: Error | undefined;
  endSynchronously = false;

  watchPort(_workload: string, port: number, handlers: StreamHandlers<WireResult<InboundServer>>): () => void {
    if (this.throwNext !== undefined) {
      const e = this.throwNext;
      this.throwNext = undefined;
      throw e;
    }
    const s = { port, handlers, cancelled: false };
    this.streams.push(s);
    if (this.endSynchronously) handlers.onEnd(undefined);
    return () => {
      s.cancelled = true;
    };
  }

  last() {
    const s = this.streams.at(-1);
    assert.ok(s !== undefined, 'a stream');
    return s;
  }
}

describe('PolicyWatcher message handling', () => {
  it('ignores invalid messages and keeps the last good policy', () => {
    const client = new ScriptedClient();
    const w = mkWatcher({ client });
    let calls = 0;
    w.subscribe(8080, () => calls++);

    client.last().handlers.onMessage({ ok: false, message: 'authorizations[0].networks: empty' });
    assert.equal(w.current(8080), undefined, 'an invalid first message leaves the port closed');
    assert.equal(w.isReady(), false);

    client.last().handlers.onMessage({ ok: true, value: mkServer('a', [BOT_ID]) });
    const good = w.current(8080);
    assert.ok(good !== undefined);
    client.last().handlers.onMessage({ ok: false, message: 'bad' });
    assert.equal(w.current(8080), good);
    assert.equal(calls, 1);
  });

  it('an equal message (e.g. after a reconnect) publishes nothing; a listener that throws does not stop others', () => {
    const client = new ScriptedClient();
    const w = mkWatcher({ client });
    const order: string[] = [];
    w.subscribe(8080, () => {
      order.push('bad');
      throw new Error('boom');
    });
    w.subscribe(8080, () => order.push('good'));
    client.last().handlers.onMessage({ ok: true, value: mkServer('a', [BOT_ID]) });
    const compiled = w.current(8080);
    client.last().handlers.onMessage({ ok: true, value: mkServer('a', [BOT_ID]) });
    assert.equal(w.current(8080), compiled, 'same object: nothing to re-check');
    assert.deepEqual(order, ['bad', 'good']);
  });

  it('a policy that does not compile is published and fails closed', () => {
    const client = new ScriptedClient();
    const w = mkWatcher({ client });
    const broken: InboundServer = { ...mkServer('a'), authorizations: [{ ...meshAuthz('x', [BOT_ID]), networks: [] }] };
    client.last().handlers.onMessage({ ok: true, value: broken });
    const cs = w.current(8080);
    assert.ok(cs?.invalid !== undefined);
    assert.equal(isAllowed(cs, BOT_ID), false);
  });

  it('reconnects after a stream ends, and a message resets the backoff', async () => {
    const client = new ScriptedClient();
    const timers = new CountingTimers();
    const w = mkWatcher({ client, timers, backoff: { minMs: 5, maxMs: 1000, jitter: 0 } });
    for (let i = 0; i < 3; i++) {
      client.last().handlers.onEnd(undefined);
      await waitFor(() => client.streams.length === i + 2, `reconnect ${i + 1}`);
    }
    assert.deepEqual(timers.delays, [5, 10, 20]);
    client.last().handlers.onMessage({ ok: true, value: mkServer('a') });
    client.last().handlers.onEnd(undefined);
    assert.deepEqual(timers.delays, [5, 10, 20, 5], 'reset by the message');
    // A stale stream's callbacks are ignored once it has ended.
    const stale = client.streams[0];
    stale?.handlers.onMessage({ ok: true, value: mkServer('stale') });
    stale?.handlers.onEnd(undefined);
    assert.equal(w.current(8080)?.server.meta.name, 'a');
    assert.equal(timers.pending, 1);
    w.stop();
    assert.equal(timers.pending, 0);
  });

  it('survives a client that throws or ends synchronously', async () => {
    const client = new ScriptedClient();
    client.throwNext = new Error('channel closed');
    const timers = new CountingTimers();
    const w = mkWatcher({ client, timers });
    assert.equal(client.streams.length, 0);
    assert.equal(timers.pending, 1);
    client.endSynchronously = true;
    await waitFor(() => client.streams.length >= 2, 'synchronous ends to be retried');
    assert.ok(client.streams.every((s) => s.cancelled));
    client.endSynchronously = false;
    await waitFor(() => client.streams.some((s) => !s.cancelled), 'an open stream');
    w.stop();
    assert.ok(
      client.streams.every((s) => s.cancelled),
      'stop cancels the open stream',
    );
    assert.equal(timers.pending, 0);
  });
});

// === lazy discovery ===

/** A logger keeping every line as an object. */
function recordingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  return { logger, lines };
}

/** The outcome of a promise once it settled: the value, or the error's code. */
async function outcome<T>(p: Promise<T>): Promise<{ value: T } | { code: unknown }> {
  try {
    return { value: await p };
  } catch (e) {
    return { code: (e as { code?: unknown }).code };
  }
}

describe('PolicyWatcher lazy discovery', () => {
  it('discovers an undeclared port over one stream shared by concurrent callers; it then behaves like a declared one', async () => {
    const discovery = new FakeDiscovery();
    discovery.add('emojivoto', 'web-0', 8080, mkServer('web-http', [BOT_ID]));
    const lazy = discovery.add('emojivoto', 'web-0', 9090, mkServer('default', [WEB_ID]));
    const server = await serve(discovery);
    const { client, calls } = recording(mkClient(server.port));
    const updates: number[] = [];
    const w = mkWatcher({ client, onUpdate: (port) => updates.push(port) });
    await within(w.ready(), 5000, 'the declared port');

    const asks = [w.discover(9090), w.discover(9090), w.discover(9090)];
    const policies = await within(Promise.all(asks), 5000, 'the discovered policy');
    assert.equal(calls.filter((c) => c.port === 9090).length, 1, 'one stream for every caller');
    assert.ok(
      policies.every((p) => p === w.current(9090)),
      'every caller gets the port’s current policy',
    );
    assert.ok(deepEqual(w.current(9090)?.server, lazy.value), 'the policy the controller serves for the port');
    assert.equal(isAllowed(w.current(9090), WEB_ID), true);
    assert.equal(isAllowed(w.current(9090), BOT_ID), false);
    assert.deepEqual(w.discoveredPorts, [9090]);
    assert.deepEqual(w.ports, [8080, 9090]);
    assert.equal(await w.discover(9090), w.current(9090), 'a discovered port answers at once');
    assert.equal(await w.discover(8080), w.current(8080), 'so does a declared one');
    assert.equal(calls.length, 2, 'no new stream for either');

    // Updates of a discovered port reach its subscribers, as for a declared port.
    const seen: (CompiledServer | undefined)[] = [];
    w.subscribe(9090, (_next, prev) => seen.push(prev));
    const first = w.current(9090);
    lazy.publish(mkServer('default', [BOT_ID]));
    await waitFor(() => seen.length === 1, 'the update of the discovered port');
    assert.equal(seen[0], first);
    assert.equal(isAllowed(w.current(9090), BOT_ID), true);
    assert.equal(isAllowed(w.current(9090), WEB_ID), false);
    assert.deepEqual(updates, [8080, 9090, 9090]);
  });

  it('fails a discovery after its bound while the stream goes on; readiness ignores discovered ports', async () => {
    const client = new ScriptedClient();
    const timers = new CountingTimers();
    const w = mkWatcher({ client, timers, discoveryTimeoutMs: 60 });
    client.last().handlers.onMessage({ ok: true, value: mkServer('web-http', [BOT_ID]) });
    assert.equal(w.isReady(), true);

    const started = Date.now();
    const failed = await within(outcome(w.discover(9090)), 5000, 'the discovery to fail');
    const waited = Date.now() - started;
    assert.deepEqual(failed, { code: 'ERR_POLICY_DISCOVERY_TIMEOUT' });
    assert.ok(waited >= 55, `it waited for the bound (${waited} ms)`);
    const stream = client.last();
    assert.equal(stream.port, 9090);
    assert.equal(stream.cancelled, false, 'the stream stays open');
    assert.equal(w.current(9090), undefined);
    assert.equal(w.isReady(), true, 'a discovered port without a policy does not make the proxy unready');
    await within(w.ready(), 1000, 'ready() does not wait for it either');

    // The next caller waits again, on the same stream, and gets the policy once it comes.
    const again = w.discover(9090);
    stream.handlers.onMessage({ ok: false, message: 'garbage' });
    stream.handlers.onMessage({ ok: true, value: mkServer('default', [WEB_ID]) });
    assert.equal(isAllowed(await again, WEB_ID), true);
    assert.equal(client.streams.length, 2);
    w.stop();
    assert.equal(timers.pending, 0);
  });

  it('caps the lazily discovered ports; beyond the cap it refuses at once and warns once per port', async () => {
    const client = new ScriptedClient();
    const { logger, lines } = recordingLogger();
    const w = mkWatcher({ client, logger, maxDiscoveredPorts: 2, ports: [8080, 8081] });
    const pending = [outcome(w.discover(9001)), outcome(w.discover(9002))];
    assert.deepEqual(w.discoveredPorts, [9001, 9002]);
    const streams = client.streams.length;

    for (const port of [9003, 9003, 9004, 9003]) {
      assert.deepEqual(await outcome(w.discover(port)), { code: 'ERR_POLICY_DISCOVERY_LIMIT' });
    }
    assert.equal(client.streams.length, streams, 'no stream for a refused port');
    assert.deepEqual(w.discoveredPorts, [9001, 9002]);
    const warned = lines.filter((l) => String(l.msg).startsWith('inbound policy discovery refused')).map((l) => l.port);
    assert.deepEqual(warned, [9003, 9004], 'one warning per refused port');

    // Declared ports are not discoveries: they neither count nor are refused.
    const declared = w.discover(8081);
    client.streams.find((s) => s.port === 8081)?.handlers.onMessage({ ok: true, value: mkServer('declared') });
    assert.equal((await declared).server.meta.name, 'declared');
    // A discovered port that got its policy is still served at the cap.
    client.streams.find((s) => s.port === 9001)?.handlers.onMessage({ ok: true, value: mkServer('default') });
    assert.equal((await w.discover(9001)).server.meta.name, 'default');
    w.stop();
    assert.deepEqual(await pending[1], { code: 'ERR_POLICY_WATCH_STOPPED' }, 'stop() fails pending discoveries');
    assert.deepEqual(await outcome(w.discover(9005)), { code: 'ERR_POLICY_WATCH_STOPPED' });
  });

  it('stops watching a discovered port once idle (never while in use), frees its slot, and never drops a declared port', async () => {
    const client = new ScriptedClient();
    const timers = new CountingTimers();
    const w = mkWatcher({ client, timers, discoveryIdleMs: 40, maxDiscoveredPorts: 1 });
    const declared = client.last();
    const asked = w.discover(9090);
    const stream = client.last();
    stream.handlers.onMessage({ ok: true, value: mkServer('default', [WEB_ID]) });
    await asked;

    const release = w.use(9090);
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(w.discoveredPorts, [9090], 'kept while a connection uses it');
    assert.equal(stream.cancelled, false);
    release();
    release();
    await waitFor(() => stream.cancelled, 'the idle port’s stream to be cancelled', 2000);
    assert.deepEqual(w.ports, [8080], 'the declared port stays');
    assert.equal(declared.cancelled, false);
    assert.equal(w.current(9090), undefined, 'an evicted port has no policy any more');
    // Later updates on the cancelled stream are ignored.
    stream.handlers.onMessage({ ok: true, value: mkServer('stale') });
    assert.equal(w.current(9090), undefined);

    // Its slot is free; and the port is discovered again on its next use, over a new stream.
    const other = w.discover(9091);
    client.last().handlers.onMessage({ ok: true, value: mkServer('other') });
    assert.equal((await other).server.meta.name, 'other');
    const releaseOther = w.use(9091);
    assert.deepEqual(await outcome(w.discover(9090)), { code: 'ERR_POLICY_DISCOVERY_LIMIT' }, 'at the cap again');
    releaseOther();
    await waitFor(() => w.discoveredPorts.length === 0, '9091 to be evicted', 2000);
    const again = w.discover(9090);
    assert.notEqual(client.last(), stream);
    client.last().handlers.onMessage({ ok: true, value: mkServer('default', [BOT_ID]) });
    assert.equal(isAllowed(await again, BOT_ID), true);
    w.stop();
    assert.equal(timers.pending, 0, 'no sweep or reconnect left after stop');
  });

  it('a client that touched `maxDiscoveredPorts` ports once and left cannot keep another port from being discovered', async () => {
    // Any client that reaches the pod (even one every policy denies) makes the proxy discover the
    // port it connects to, and each discovery refreshes the port's idle clock: one connection per
    // port every few minutes keeps all the slots taken, and a first connection to any other
    // undeclared port fails closed ('policy discovery limit') for everyone, for as long as it goes on.
    const client = new ScriptedClient();
    const w = mkWatcher({ client, maxDiscoveredPorts: 2 });
    const answer = (port: number, name: string): void =>
      client.streams.find((s) => s.port === port && !s.cancelled)?.handlers.onMessage({ ok: true, value: mkServer(name) });
    for (const port of [9001, 9002]) {
      const asked = w.discover(port);
      answer(port, 'deny');
      await asked;
    }
    // A legitimate first connection to another undeclared port, while nothing uses 9001 or 9002.
    const release = w.use(9002);
    const legit = outcome(w.discover(9003));
    answer(9003, 'default');
    const got = await legit;
    assert.ok('value' in got, `discovered, not refused (${JSON.stringify(got)})`);
    assert.equal(got.value.server.meta.name, 'default');
    assert.ok(w.discoveredPorts.includes(9002), 'a port in use is never given up for another');
    release();
  });

  it('a discovered port with subscribers is not evicted; with no discovered port no sweep is pending', async () => {
    const client = new ScriptedClient();
    const timers = new CountingTimers();
    const w = mkWatcher({ client, timers, discoveryIdleMs: 30 });
    assert.equal(timers.pending, 0, 'nothing scheduled without discovered ports');
    const asked = w.discover(9090);
    client.last().handlers.onMessage({ ok: true, value: mkServer('default') });
    await asked;
    const unsubscribe = w.subscribe(9090, () => {});
    await new Promise((r) => setTimeout(r, 150));
    assert.deepEqual(w.discoveredPorts, [9090]);
    unsubscribe();
    await waitFor(() => w.discoveredPorts.length === 0, 'the eviction', 2000);
    await waitFor(() => timers.pending === 0, 'the sweep to stop re-arming', 2000);
  });

  it('rejects bad bounds and bad ports', async () => {
    const client = new ScriptedClient();
    assert.throws(() => mkWatcher({ client, discoveryTimeoutMs: 0 }), RangeError);
    assert.throws(() => mkWatcher({ client, discoveryIdleMs: -1 }), RangeError);
    assert.throws(() => mkWatcher({ client, maxDiscoveredPorts: 1.5 }), RangeError);
    const w = mkWatcher({ client });
    await assert.rejects(w.discover(0), RangeError);
    await assert.rejects(w.discover(65536), RangeError);
  });
});
