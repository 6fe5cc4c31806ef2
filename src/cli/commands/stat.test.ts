import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { bufferIo } from '../io.js';
import { runEdges, shortIdentity } from './edges.js';
import { formatRps, runStat } from './stat.js';

const id = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;
const ref = (name: string, namespace = 'demo') => ({ namespace, kind: 'Deployment', name });

/** What the fake controller answers, by path; the last request's query is kept. */
const answers = new Map<string, { status: number; body: unknown }>();
const asked: URL[] = [];
let server: Server;
let controller: string;

before(async () => {
  server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    asked.push(url);
    const a = answers.get(url.pathname) ?? { status: 404, body: { error: { code: 'NOT_FOUND', message: `no such endpoint ${url.pathname}` } } };
    res.writeHead(a.status, { 'content-type': 'application/json' }).end(JSON.stringify(a.body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  controller = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(() => server.close());

const flags = (extra: Record<string, unknown> = {}) => ({ output: 'text', window: '1m', controller, ...extra });

describe('ward edges', () => {
  it('prints edges as linkerd viz edges does, with short identities, √ or the reason, connections and rates', async () => {
    answers.set('/api/v1/edges', {
      status: 200,
      body: {
        window: 60,
        backend: 'embedded',
        edges: [
          {
            src: ref('client'),
            srcIdentity: id('demo', 'client'),
            dst: ref('server'),
            dstIdentity: id('demo', 'server'),
            port: 8080,
            secured: true,
            reason: null,
            connections: 2,
            rps: 3.25,
            deniedRps: 0,
          },
          {
            src: null,
            srcIdentity: null,
            dst: ref('server'),
            dstIdentity: id('demo', 'server'),
            port: 8080,
            secured: false,
            reason: 'not meshed',
            connections: 0,
            rps: 0.5,
            deniedRps: 0.1,
          },
          {
            src: null,
            srcIdentity: id('jobs', 'shared'),
            srcCandidates: [ref('a', 'jobs'), ref('b', 'jobs')],
            dst: ref('server'),
            dstIdentity: id('demo', 'server'),
            port: 8080,
            secured: true,
            reason: null,
            connections: 0,
            rps: 0.01,
            deniedRps: 0,
          },
        ],
      },
    });
    const io = bufferIo();
    assert.equal(await runEdges('deploy', flags({ namespace: 'demo' }), io), 0);
    assert.equal(
      io.stdout,
      [
        'SRC      DST      SRC_NS   DST_NS   CLIENT_ID     SERVER_ID     SECURED      CONN   RPS',
        'client   server   demo     demo     client.demo   server.demo   √            2      3.3rps',
        '-        server   -        demo     -             server.demo   not meshed   0      0.5rps',
        'a|b?     server   jobs     demo     shared.jobs   server.demo   √            0      0.01rps',
        '',
      ].join('\n'),
    );
    const q = asked.at(-1)?.searchParams;
    assert.deepEqual([q?.get('namespace'), q?.get('resource'), q?.get('window')], ['demo', 'deploy', '1m']);
    const wide = bufferIo();
    await runEdges(undefined, flags({ allNamespaces: true, output: 'wide' }), wide);
    assert.match(wide.stdout, /^SRC\s+DST\s+SRC_NS\s+DST_NS\s+PORT\s+CLIENT_ID\s+SERVER_ID\s+SECURED\s+CONN\s+RPS\s+DENIED$/m);
    assert.match(wide.stdout, /client\.demo\.serviceaccount\.identity\.linkerd\.cluster\.local/);
    assert.equal(asked.at(-1)?.searchParams.get('allNamespaces'), 'true');
  });

  it('says why the window is empty: the scrape interval and the pods that cannot be scraped', async () => {
    answers.set('/api/v1/edges', { status: 200, body: { window: 300, backend: 'embedded', edges: [] } });
    answers.set('/api/v1/observe/targets', {
      status: 200,
      body: {
        backend: 'embedded',
        scrapeIntervalSeconds: 10,
        targets: [
          {
            namespace: 'demo',
            pod: 'web-0',
            up: false,
            lastScrape: '2026-01-01T00:00:00Z',
            error: "denied by the pod's policy on port 4191: authorize the identity x",
          },
          { namespace: 'demo', pod: 'api-0', up: true, lastScrape: '2026-01-01T00:00:00Z' },
        ],
      },
    });
    const io = bufferIo();
    await runEdges(undefined, flags({ window: '5m' }), io);
    assert.equal(
      io.stdout,
      "no traffic observed in the last 5m: the collector scrapes every 10s\n1 of 2 pods cannot be scraped:\n  demo/web-0: denied by the pod's policy on port 4191: authorize the identity x\n",
    );
  });

  it('refuses bad flags and reports a controller without the views', async () => {
    await assert.rejects(runEdges(undefined, flags({ window: 'soon' }), bufferIo()), /--window "soon" is not a duration/);
    await assert.rejects(runEdges('deploy/web', flags(), bufferIo()), /takes a kind/);
    await assert.rejects(runEdges(undefined, flags({ namespace: 'a', allNamespaces: true }), bufferIo()), /either -n NAMESPACE or -A/);
    await assert.rejects(runEdges(undefined, flags({ output: 'yaml' }), bufferIo()), /-o "yaml"/);
    answers.delete('/api/v1/edges');
    await assert.rejects(runEdges(undefined, flags(), bufferIo()), /does not serve traffic views/);
    answers.set('/api/v1/edges', {
      status: 400,
      body: { error: { code: 'INVALID_ARGUMENT', message: 'window 10h is longer than the 600 s the metrics backend keeps' } },
    });
    await assert.rejects(runEdges(undefined, flags({ window: '10h' }), bufferIo()), /^UsageError: controller: window 10h is longer/);
    assert.equal(shortIdentity('web.demo.serviceaccount.identity.linkerd.cluster.local'), 'web.demo');
    assert.equal(shortIdentity('spiffe://x'), 'spiffe://x');
  });
});

describe('ward stat', () => {
  const row = (name: string, port: number | null, extra: Record<string, unknown> = {}) => ({
    namespace: 'demo',
    kind: 'Deployment',
    name,
    port,
    meshed: true,
    pods: 1,
    meshedPods: 1,
    rps: 2,
    successRate: 0.875,
    deniedRps: 0.25,
    p50Ms: 1.26,
    p95Ms: 20.4,
    p99Ms: 99.5,
    tcpConnections: 3,
    ...extra,
  });

  it('prints one row per workload, dashes without traffic, and rows per port with -o wide', async () => {
    answers.set('/api/v1/stat', {
      status: 200,
      body: {
        window: 60,
        backend: 'embedded',
        rows: [
          row('idle', null, {
            rps: 0,
            successRate: null,
            deniedRps: 0,
            p50Ms: null,
            p95Ms: null,
            p99Ms: null,
            tcpConnections: 0,
            meshedPods: 0,
            meshed: false,
            pods: 2,
          }),
          row('web', null),
          row('web', 8080),
        ],
      },
    });
    const io = bufferIo();
    await runStat(['deploy'], flags(), io);
    assert.equal(
      io.stdout,
      [
        'NAME   MESHED   SUCCESS   RPS      DENIED   LATENCY_P50   LATENCY_P95   LATENCY_P99   TCP_CONN',
        'idle   0/2      -         -        -        -             -             -             -',
        'web    1/1      87.50%    2.0rps   0.3rps   1.3ms         20ms          100ms         3',
        '',
      ].join('\n'),
    );
    const wide = bufferIo();
    await runStat(['deploy'], flags({ output: 'wide', allNamespaces: true }), wide);
    assert.match(wide.stdout, /^NAMESPACE\s+NAME\s+PORT\s+MESHED/m);
    assert.match(wide.stdout, /^demo\s+web\s+8080\s+1\/1/m);
    await assert.rejects(runStat([], flags(), bufferIo()), /needs KIND\[\/NAME\]/);
    await assert.rejects(runStat(['deploy', 'extra'], flags(), bufferIo()), /unexpected argument "extra"/);
  });

  it('flags denied rows of stat authz UNAUTHORIZED', async () => {
    answers.set('/api/v1/stat/authz', {
      status: 200,
      body: {
        window: 60,
        backend: 'embedded',
        rows: [
          {
            namespace: 'demo',
            kind: 'Deployment',
            name: 'web',
            port: 8080,
            server: 'server/web-http',
            route: 'HTTPRoute/api',
            authz: 'authorizationpolicy/api',
            allowedRps: 1.5,
            deniedRps: 0,
          },
          {
            namespace: 'demo',
            kind: 'Deployment',
            name: 'web',
            port: 8080,
            server: 'server/web-http',
            route: 'HTTPRoute/api',
            authz: null,
            allowedRps: 0,
            deniedRps: 0.5,
          },
        ],
      },
    });
    const io = bufferIo();
    await runStat(['authz', 'deploy/web'], flags({ namespace: 'demo' }), io);
    assert.equal(
      io.stdout,
      [
        'SERVER            ROUTE           AUTHORIZATION             ALLOWED   DENIED',
        'server/web-http   HTTPRoute/api   authorizationpolicy/api   1.5rps    0.0rps',
        'server/web-http   HTTPRoute/api   UNAUTHORIZED              0.0rps    0.5rps',
        '',
      ].join('\n'),
    );
    assert.equal(asked.at(-1)?.searchParams.get('resource'), 'deploy/web');
    assert.equal(formatRps(0.004), '0.00rps');
  });
});
