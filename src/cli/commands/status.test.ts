import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { DenialGroup } from '../../core/index.js';
import { bufferIo } from '../io.js';
import { main } from '../main.js';
import { denialEvent } from './status.js';

const GROUP: DenialGroup = {
  namespace: 'emojivoto',
  workload: { kind: 'Deployment', name: 'web' },
  port: 8080,
  client: 'vote-bot.bad.serviceaccount.identity.linkerd.cluster.local',
  clientId: 'vote-bot.bad.serviceaccount.identity.linkerd.cluster.local',
  server: 'server/web-http',
  route: 'HTTPRoute/web-vote',
  reason: 'unauthorized request on route',
  kind: 'http403',
  decision: 'deny',
  count: 7,
  firstSeen: '2026-11-28T10:00:00.000Z',
  lastSeen: '2026-11-28T10:05:00.000Z',
  pods: ['web-0'],
  example: { time: '2026-11-28T10:05:00.000Z', pod: 'web-0', method: 'POST', path: '/api/vote', clientAddr: '10.0.0.9' },
};

describe('ward status --controller', () => {
  let server: Server;
  let base: string;
  let answer: unknown = {};
  const asked: string[] = [];
  before(async () => {
    server = createServer((req, res) => {
      asked.push(req.url ?? '');
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(answer));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => server.close());

  const ward = async (...args: string[]) => {
    const io = bufferIo();
    const status = await main(['status', '--controller', base, ...args], io);
    return { status, stdout: io.stdout, stderr: io.stderr };
  };

  it('passes the filters and prints the groups, watched pods, unwatched ones and drops', async () => {
    answer = {
      groups: [GROUP],
      watched: 3,
      unwatched: [{ namespace: 'bad', pod: 'vote-bot-0', code: 'PERMISSION_DENIED', message: 'its admin port policy refuses the controller' }],
      dropped: 4,
    };
    const r = await ward('-n', 'emojivoto', '--pod', 'web-0', '--kind', 'http403');
    assert.equal(r.status, 0, r.stderr);
    assert.equal(asked.at(-1), '/api/v1/denials?namespace=emojivoto&pod=web-0&kind=http403');
    assert.match(r.stdout, /^denials seen by the controller at http:\/\/127\.0\.0\.1:\d+ \(watching 3 pods\)\n\nRECENT DENIALS\n/);
    assert.match(
      r.stdout,
      /10:05:00 +7 +emojivoto\/deploy\/web +8080 +vote-bot\.bad\.serviceaccount\.identity\.linkerd\.cluster\.local +http403 +server\/web-http +HTTPRoute\/web-vote +unauthorized request on route +POST \/api\/vote from 10\.0\.0\.9\n/,
    );
    assert.match(r.stdout, /AUDITED .*\nnone\n/);
    assert.match(r.stdout, /not watched: bad\/vote-bot-0: its admin port policy refuses the controller \(PERMISSION_DENIED\)\n/);
    assert.match(r.stdout, /4 events were dropped/);
    const j = await ward('-o', 'json');
    assert.deepStrictEqual(JSON.parse(j.stdout), answer);
  });

  it('a malformed answer or a bad --kind is a usage error, never a crash', async () => {
    answer = { groups: [{ ...GROUP, workload: null }] };
    const bad = await ward();
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /answered \/api\/v1\/denials with a malformed group \(groups\[0\]\)/);
    answer = { nothing: true };
    assert.match((await ward()).stderr, /without "groups"/);
    const kind = await ward('--kind', 'http418');
    assert.equal(kind.status, 2);
    assert.match(kind.stderr, /--kind "http418" is not a denial kind/);
  });
});

describe('denialEvent', () => {
  it('reads the workload from the pod owner; an entry without a decision is a denial', () => {
    const e = denialEvent(
      { time: 't', namespace: 'ns', pod: 'web-0', port: 80, kind: 'http403', client: '10.0.0.1', clientId: null, server: null, route: null, reason: 'r' },
      'Deployment/web',
    );
    assert.deepStrictEqual([e.workload, e.decision, e.method, e.clientAddr], [{ kind: 'Deployment', name: 'web' }, 'deny', null, '10.0.0.1']);
    assert.equal(denialEvent({ ...e, client: 'x', decision: 'audit' } as never, null).workload, null);
  });
});
