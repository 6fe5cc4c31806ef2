import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type DenialEvent, denialKind, groupDenials } from './denial-groups.js';

const BOT = 'vote-bot.bad.serviceaccount.identity.linkerd.cluster.local';

function mkEvent(over: Partial<DenialEvent> = {}): DenialEvent {
  return {
    time: '2026-05-01T10:00:00.000Z',
    namespace: 'emojivoto',
    pod: 'web-0',
    workload: { kind: 'Deployment', name: 'web' },
    port: 8080,
    method: 'POST',
    path: '/api/vote',
    clientAddr: '127.22.2.9:41000',
    clientId: BOT,
    server: 'server/web-http',
    route: 'httproute/web-vote',
    decision: 'deny',
    reason: 'unauthorized request on route',
    status: 403,
    grpcStatus: null,
    ...over,
  };
}

describe('groupDenials', () => {
  it('folds repeats of one denial into one group with a count, first and last seen and the latest example', () => {
    const groups = groupDenials([
      mkEvent({ time: '2026-05-01T10:00:01.000Z', path: '/api/vote?choice=a' }),
      mkEvent({ time: '2026-05-01T10:00:03.000Z', pod: 'web-1', path: '/api/vote?choice=c', clientAddr: '127.22.2.9:41002' }),
      mkEvent({ time: '2026-05-01T10:00:02.000Z', path: '/api/vote?choice=b' }),
    ]);
    assert.deepEqual(groups, [
      {
        namespace: 'emojivoto',
        workload: { kind: 'Deployment', name: 'web' },
        port: 8080,
        client: BOT,
        clientId: BOT,
        server: 'server/web-http',
        route: 'httproute/web-vote',
        reason: 'unauthorized request on route',
        kind: 'http403',
        decision: 'deny',
        count: 3,
        firstSeen: '2026-05-01T10:00:01.000Z',
        lastSeen: '2026-05-01T10:00:03.000Z',
        pods: ['web-0', 'web-1'],
        example: { time: '2026-05-01T10:00:03.000Z', pod: 'web-1', method: 'POST', path: '/api/vote?choice=c', clientAddr: '127.22.2.9:41002' },
      },
    ]);
  });

  it('keeps apart what differs in client, port, route, reason or decision, and skips allows', () => {
    const groups = groupDenials([
      mkEvent(),
      mkEvent({ clientId: null }),
      mkEvent({ port: 9090 }),
      mkEvent({ route: 'httproute/web-list' }),
      mkEvent({ reason: 'unauthorized connection on server' }),
      mkEvent({ decision: 'audit', reason: null, status: 200 }),
      mkEvent({ decision: 'allow', reason: null, status: 200 }),
    ]);
    assert.equal(groups.length, 6);
    assert.ok(groups.every((g) => g.count === 1));
    const plain = groups.find((g) => g.clientId === null);
    assert.equal(plain?.client, 'plaintext client');
    const audit = groups.find((g) => g.decision === 'audit');
    assert.equal(audit?.kind, 'audit');
  });

  it('orders groups most recently seen first, then by count', () => {
    const groups = groupDenials([
      mkEvent({ time: '2026-05-01T10:00:05.000Z', port: 1 }),
      mkEvent({ time: '2026-05-01T10:00:09.000Z', port: 2 }),
      mkEvent({ time: '2026-05-01T10:00:05.000Z', port: 3 }),
      mkEvent({ time: '2026-05-01T10:00:01.000Z', port: 3 }),
    ]);
    assert.deepEqual(
      groups.map((g) => [g.port, g.count]),
      [
        [2, 1],
        [3, 2],
        [1, 1],
      ],
    );
  });

  it('filters by namespace, pod, kind and decision before grouping', () => {
    const events = [
      mkEvent(),
      mkEvent({ pod: 'web-1' }),
      mkEvent({ namespace: 'other', workload: { kind: 'Deployment', name: 'api' } }),
      mkEvent({ method: null, path: null, status: null, route: null, reason: 'unauthorized connection on server', port: 9000 }),
      mkEvent({ grpcStatus: 7, status: 200, port: 8081 }),
      mkEvent({ decision: 'audit', reason: null }),
    ];
    assert.deepEqual(
      groupDenials(events, { namespace: 'other' }).map((g) => g.workload.name),
      ['api'],
    );
    const web1 = groupDenials(events, { pod: 'web-1' });
    assert.equal(web1.length, 1);
    assert.deepEqual(web1[0]?.pods, ['web-1']);
    assert.deepEqual(
      groupDenials(events, { kind: 'tcp-refuse' }).map((g) => g.port),
      [9000],
    );
    assert.deepEqual(
      groupDenials(events, { kind: 'grpc7' }).map((g) => g.port),
      [8081],
    );
    assert.deepEqual(
      groupDenials(events, { decision: 'audit' }).map((g) => g.kind),
      ['audit'],
    );
    assert.equal(groupDenials(events, { kind: 'audit' }).length, 1);
  });

  it('stands a pod with no workload for itself', () => {
    const [g] = groupDenials([mkEvent({ workload: null, pod: 'job-x' })]);
    assert.deepEqual(g?.workload, { kind: 'Pod', name: 'job-x' });
  });
});

describe('denialKind', () => {
  it('prefers the kind the source logged, then the status codes', () => {
    assert.equal(denialKind(mkEvent({ kind: 'tcp-terminate' })), 'tcp-terminate');
    assert.equal(denialKind(mkEvent({ status: 404 })), 'http404');
    assert.equal(denialKind(mkEvent({ grpcStatus: 5 })), 'grpc5');
    assert.equal(denialKind(mkEvent({ status: 500 })), 'http500');
    assert.equal(denialKind(mkEvent({ status: null, method: null })), 'tcp-refuse');
  });
});
