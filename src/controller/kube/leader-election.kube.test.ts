import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { waitFor } from '../../shared/testing/waits.js';
import { KubeClient, loadKubeconfig } from '../../sources/index.js';
import { describeWithKubeKit, type KubeKit, startKubeKit } from '../../sources/kube/testing/kube-kit.js';
import { LeaderElection } from './leader-election.js';

// Long enough that "before the lease expired" and "after it expired" are far apart on a busy
// machine; retries short so that takeovers are prompt.
const TIMING = { leaseDurationMs: 6000, renewDeadlineMs: 4000, retryPeriodMs: 250 } as const;

describeWithKubeKit('LeaderElection against a real API server', () => {
  let kit: KubeKit;
  let client: KubeClient;
  const electors: LeaderElection[] = [];

  before(async () => {
    kit = await startKubeKit();
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
    await kit.kubectl(['create', 'namespace', 'linkerd']);
  });
  after(async () => {
    for (const e of electors) await e.stop({ release: false });
    client?.close();
    await kit?.stop();
  });

  const lease = async (name: string) =>
    JSON.parse(await kit.kubectl(['get', 'lease', '-n', 'linkerd', name, '-o', 'json'])) as { spec: Record<string, unknown> };

  function pair(name: string) {
    const events: string[] = [];
    const mk = (identity: string) =>
      new LeaderElection({
        client,
        namespace: 'linkerd',
        name,
        identity,
        ...TIMING,
        onStartedLeading: () => events.push(`${identity} started`),
        onStoppedLeading: () => events.push(`${identity} stopped`),
      });
    const a = mk('ward-controller-a');
    const b = mk('ward-controller-b');
    electors.push(a, b);
    // Both campaign from the same instant: the API server's concurrency control picks one.
    a.start();
    b.start();
    let both = 0;
    const sampler = setInterval(() => {
      if (a.isLeader() && b.isLeader()) both++;
    }, 5);
    return { a, b, events, bothLed: () => both, done: () => clearInterval(sampler) };
  }

  it('exactly one of two replicas leads; a clean stop hands over at once', async () => {
    const p = pair('release');
    await waitFor(() => p.a.isLeader() || p.b.isLeader(), 'a leader', 30_000);
    const [leader, other] = p.a.isLeader() ? [p.a, p.b] : [p.b, p.a];
    await waitFor(() => leader.stats.renewals >= 3 && other.leader === leader.identity, 'renewals seen by the other', 30_000);
    assert.equal(other.isLeader(), false);
    const held = await lease('release');
    assert.equal(held.spec.holderIdentity, leader.identity);
    assert.equal(held.spec.leaseDurationSeconds, 6);
    assert.equal(held.spec.leaseTransitions, 0);

    const stoppedAt = performance.now();
    await leader.stop();
    assert.equal(leader.isLeader(), false);
    await waitFor(() => other.isLeader(), 'the other replica to lead', 30_000);
    const handover = performance.now() - stoppedAt;
    p.done();
    // Released, not expired: the other took over well before a lease duration could run out.
    assert.ok(handover < TIMING.leaseDurationMs, `handover took ${handover} ms`);
    assert.equal(p.bothLed(), 0);
    const taken = await lease('release');
    assert.equal(taken.spec.holderIdentity, other.identity);
    assert.equal(taken.spec.leaseTransitions, 1);
    assert.deepEqual(p.events, [`${leader.identity} started`, `${leader.identity} stopped`, `${other.identity} started`]);
    await other.stop();
    assert.equal((await lease('release')).spec.holderIdentity, '');
  });

  it('a leader killed without release is replaced once its lease expires, not before', async () => {
    const p = pair('crash');
    await waitFor(() => p.a.isLeader() || p.b.isLeader(), 'a leader', 30_000);
    const [leader, other] = p.a.isLeader() ? [p.a, p.b] : [p.b, p.a];
    await waitFor(() => leader.stats.renewals >= 2 && other.leader === leader.identity, 'renewals seen by the other', 30_000);
    const killedAt = performance.now();
    await leader.stop({ release: false });
    await waitFor(() => other.isLeader(), 'the other replica to lead', 60_000);
    const takeover = performance.now() - killedAt;
    p.done();
    // The last renewal was at most one retry period before the kill; the other waits a full
    // lease duration after it saw that renewal.
    assert.ok(takeover >= TIMING.leaseDurationMs - TIMING.retryPeriodMs, `took over after ${takeover} ms`);
    assert.equal(p.bothLed(), 0);
    const taken = await lease('crash');
    assert.equal(taken.spec.holderIdentity, other.identity);
    assert.equal(taken.spec.leaseTransitions, 1);
    await other.stop();
  });
});
