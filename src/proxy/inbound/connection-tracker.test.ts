/** The per-port re-authorization tracker against a hand-driven policy source. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type Authorization, type ClientInfo, type CompiledServer, compileServer, type InboundServer, type ProxyProtocol, parseIp } from '../../core/index.js';
import { InboundConnectionTracker } from './connection-tracker.js';
import type { PolicyListener } from './policy-watch.js';

const fromHost = (ip: string): Authorization => ({
  meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: `from-${ip}` },
  networks: [{ net: { ip, prefixLen: 32 }, except: [] }],
  authentication: { kind: 'unauthenticated' },
});

const mkServer = (authorizations: readonly Authorization[], protocol: ProxyProtocol = { kind: 'opaque' }): InboundServer => ({
  meta: { group: 'policy.linkerd.io', kind: 'Server', name: 'db' },
  protocol,
  authorizations,
});

const client = (ip: string): ClientInfo => ({ ip: parseIp(ip) ?? assert.fail(ip), tls: { kind: 'none', reason: 'port_skipped' } });

/** Subscriptions by port; `publish` calls them like PolicyWatcher does. */
class Subscriptions {
  readonly listeners = new Map<number, Set<PolicyListener>>();
  subscribes = 0;

  subscribe(port: number, l: PolicyListener): () => void {
    this.subscribes++;
    const set = this.listeners.get(port) ?? new Set();
    this.listeners.set(port, set);
    set.add(l);
    return () => set.delete(l);
  }

  publish(port: number, server: InboundServer): void {
    const next: CompiledServer = compileServer(server);
    for (const l of [...(this.listeners.get(port) ?? [])]) l(next, undefined);
  }

  count(port: number): number {
    return this.listeners.get(port)?.size ?? 0;
  }
}

describe('InboundConnectionTracker', () => {
  it('subscribes once per port and drops the subscription with the last connection', () => {
    const subs = new Subscriptions();
    const t = new InboundConnectionTracker<string>(subs, () => assert.fail('nothing is revoked'));
    t.add(80, 'a', client('10.0.0.1'));
    t.add(80, 'b', client('10.0.0.2'));
    t.add(80, 'b', client('10.0.0.2')); // idempotent
    t.add(81, 'c', client('10.0.0.3'));
    assert.equal(subs.subscribes, 2);
    assert.deepEqual([t.size, t.subscriptions, subs.count(80), subs.count(81)], [3, 2, 1, 1]);
    t.delete(80, 'a');
    t.delete(80, 'a');
    assert.deepEqual([t.size, t.subscriptions, subs.count(80)], [2, 2, 1]);
    t.delete(80, 'b');
    assert.deepEqual([t.size, t.subscriptions, subs.count(80)], [1, 1, 0]);
    t.clear();
    assert.deepEqual([t.size, t.subscriptions, subs.count(81)], [0, 0, 0]);
  });

  it('hands over exactly the connections an update no longer admits', () => {
    const subs = new Subscriptions();
    const revoked: [string, number, string][] = [];
    const t = new InboundConnectionTracker<string>(subs, (conn, port, deny) => revoked.push([conn, port, deny.reason]));
    t.add(80, 'a', client('10.0.0.1'));
    t.add(80, 'b', client('10.0.0.2'));
    t.add(81, 'c', client('10.0.0.1'));
    subs.publish(80, mkServer([fromHost('10.0.0.2')]));
    assert.deepEqual(revoked, [['a', 80, 'connection terminated due to policy change']]);
    assert.deepEqual([t.size, subs.count(80)], [2, 1]);
    // A different authorization that still admits is fine.
    subs.publish(80, mkServer([fromHost('10.0.0.1'), fromHost('10.0.0.2')]));
    assert.equal(revoked.length, 1);
    // An HTTP-only port takes no TCP streams.
    subs.publish(80, mkServer([fromHost('10.0.0.2')], { kind: 'http2', routes: [] }));
    assert.deepEqual(revoked.at(-1)?.slice(0, 2), ['b', 80]);
    assert.match(revoked.at(-1)?.[2] ?? '', /protocol is now http2/);
    assert.deepEqual([t.size, t.subscriptions, subs.count(80), subs.count(81)], [1, 1, 0, 1]);
  });

  it('survives handlers that remove other connections while an update runs', () => {
    const subs = new Subscriptions();
    const seen: string[] = [];
    const t: InboundConnectionTracker<string> = new InboundConnectionTracker<string>(subs, (conn) => {
      seen.push(conn);
      t.delete(80, 'b'); // e.g. closing one connection closes a sibling
    });
    for (const c of ['a', 'b', 'c']) t.add(80, c, client('10.0.0.1'));
    subs.publish(80, mkServer([]));
    assert.deepEqual(seen, ['a', 'c']);
    assert.deepEqual([t.size, t.subscriptions, subs.count(80)], [0, 0, 0]);
  });
});
