import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { waitFor } from '../../shared/testing/waits.js';
import { KubeApiError, type KubeRequest, type KubeRequester, type KubeResponse } from '../../sources/index.js';
import { LeaderElection, LeaderElectionConfigError, microTime } from './leader-election.js';

/**
 * An in-memory Lease endpoint with the API server's optimistic concurrency: PUT must carry the
 * current resourceVersion (else 409), POST of an existing Lease is 409. `hang` makes one
 * replica's requests never answer, as a partitioned node's would.
 */
class FakeLeases {
  lease: { metadata: Record<string, unknown>; spec: Record<string, unknown> } | undefined;
  #rv = 1;
  readonly hung = new Set<string>();
  readonly puts: Record<string, unknown>[] = [];

  requester(who: string): KubeRequester {
    return { request: (req) => this.#handle(who, req) };
  }

  async #handle(who: string, req: KubeRequest): Promise<KubeResponse> {
    if (this.hung.has(who)) {
      // Unanswered until the request's own timeout, as over a partitioned network.
      await new Promise((r) => setTimeout(r, req.timeoutMs ?? 60_000));
      throw new KubeApiError(0, 'Transport', 'timed out');
    }
    await new Promise((r) => setImmediate(r));
    const ok = (body: unknown): KubeResponse => ({ status: 200, body: structuredClone(body), headers: {} });
    const body = req.body as { metadata: Record<string, unknown>; spec: Record<string, unknown> };
    switch (req.method) {
      case 'GET':
        if (this.lease === undefined) throw new KubeApiError(404, 'NotFound', 'leases "x" not found');
        return ok(this.lease);
      case 'POST':
        if (this.lease !== undefined) throw new KubeApiError(409, 'AlreadyExists', 'exists');
        this.lease = { metadata: { ...body.metadata, resourceVersion: String(this.#rv++) }, spec: body.spec };
        return ok(this.lease);
      case 'PUT':
        if (this.lease === undefined) throw new KubeApiError(404, 'NotFound', 'not found');
        if (body.metadata.resourceVersion !== this.lease.metadata.resourceVersion) throw new KubeApiError(409, 'Conflict', 'the object has been modified');
        this.puts.push(body.spec);
        this.lease = { metadata: { ...body.metadata, resourceVersion: String(this.#rv++) }, spec: body.spec };
        return ok(this.lease);
      default:
        throw new KubeApiError(405, 'MethodNotAllowed', req.method);
    }
  }
}

const TIMING = { leaseDurationMs: 2000, renewDeadlineMs: 1000, retryPeriodMs: 100 } as const;

function elector(api: FakeLeases, identity: string, events: string[] = []): LeaderElection {
  return new LeaderElection({
    client: api.requester(identity),
    namespace: 'linkerd',
    identity,
    ...TIMING,
    onStartedLeading: () => events.push(`${identity} started`),
    onStoppedLeading: () => events.push(`${identity} stopped`),
  });
}

describe('LeaderElection (Lease semantics)', () => {
  const electors: LeaderElection[] = [];
  after(async () => {
    for (const e of electors) await e.stop({ release: false });
  });

  it('writes MicroTime with six fractional digits', () => {
    assert.equal(microTime(Date.UTC(2026, 10, 28, 7, 30, 1, 234)), '2026-11-28T07:30:01.234000Z');
  });

  it('refuses timings where the renew deadline does not fit in the lease', () => {
    const api = new FakeLeases();
    const mk = (o: object) => new LeaderElection({ client: api.requester('a'), namespace: 'n', identity: 'a', ...o });
    assert.throws(() => mk({ leaseDurationMs: 10_000, renewDeadlineMs: 10_000 }), LeaderElectionConfigError);
    assert.throws(() => mk({ leaseDurationMs: 15_000, renewDeadlineMs: 2_000, retryPeriodMs: 2_000 }), LeaderElectionConfigError);
    assert.throws(() => mk({ leaseDurationMs: 1500 }), LeaderElectionConfigError);
  });

  it('creates the Lease, renews it, and keeps the holder while it renews', async () => {
    const api = new FakeLeases();
    const events: string[] = [];
    const a = elector(api, 'a', events);
    const b = elector(api, 'b', events);
    electors.push(a, b);
    a.start();
    await waitFor(() => a.isLeader(), 'a to lead');
    b.start();
    await waitFor(() => a.stats.renewals >= 5, 'a to renew');
    assert.equal(b.isLeader(), false);
    assert.equal(b.leader, 'a');
    assert.deepEqual(events, ['a started']);
    assert.equal(api.lease?.spec.holderIdentity, 'a');
    assert.equal(api.lease?.spec.leaseDurationSeconds, 2);
    assert.equal(api.lease?.spec.leaseTransitions, 0);
    await a.stop({ release: false });
    await b.stop({ release: false });
  });

  it('a leader that cannot renew stops leading at its renew deadline, before anyone takes over', async () => {
    const api = new FakeLeases();
    const events: string[] = [];
    const a = elector(api, 'a', events);
    const b = elector(api, 'b', events);
    electors.push(a, b);
    a.start();
    await waitFor(() => a.isLeader(), 'a to lead');
    b.start();
    await waitFor(() => b.leader === 'a', 'b to see a');
    // Sample both continuously: at no instant may both believe they lead.
    let both = 0;
    const sampler = setInterval(() => {
      if (a.isLeader() && b.isLeader()) both++;
    }, 2);
    api.hung.add('a');
    await waitFor(() => !a.isLeader(), 'a to stop leading', 10_000);
    assert.equal(b.isLeader(), false, 'b must wait for the lease to expire');
    await waitFor(() => events.includes('a stopped'), 'onStoppedLeading', 10_000);
    await waitFor(() => b.isLeader(), 'b to take over', 10_000);
    clearInterval(sampler);
    assert.equal(both, 0);
    assert.deepEqual(events, ['a started', 'a stopped', 'b started']);
    assert.equal(api.lease?.spec.leaseTransitions, 1);
    assert.equal(api.lease?.spec.holderIdentity, 'b');
    await b.stop({ release: false });
  });

  it('stop() releases the Lease: holder cleared, 1 s duration, transitions kept', async () => {
    const api = new FakeLeases();
    const events: string[] = [];
    const a = elector(api, 'a', events);
    electors.push(a);
    a.start();
    await waitFor(() => a.isLeader(), 'a to lead');
    await a.stop();
    assert.equal(a.isLeader(), false);
    assert.deepEqual(events, ['a started', 'a stopped']);
    assert.equal(api.lease?.spec.holderIdentity, '');
    assert.equal(api.lease?.spec.leaseDurationSeconds, 1);
    assert.equal(api.lease?.spec.leaseTransitions, 0);
    // The next candidate takes a released Lease at once and counts a transition.
    const b = elector(api, 'b', events);
    electors.push(b);
    b.start();
    await waitFor(() => b.isLeader(), 'b to lead');
    assert.equal(api.lease?.spec.leaseTransitions, 1);
    await b.stop({ release: false });
  });
});
