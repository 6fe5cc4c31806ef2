/**
 * The controller's JSON API answers exactly what the offline CLI computes, and the CLI's
 * `--controller URL` mode prints the same output as `-f` mode. The server is real (loopback).
 */
import assert from 'node:assert/strict';
import { type AddressInfo, createServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { buildWorkspace } from '../../src/cli/workspace.js';
import { type AdminServer, startAdminServer } from '../../src/controller/index.js';
import { serviceAccountIdentity } from '../../src/core/index.js';
import { silentLogger } from '../../src/shared/index.js';

/** A loopback port that nothing listens on (bound, then released). */
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

const DIR = new URL('../../examples/emojivoto/', import.meta.url).pathname;
const FILES = ['-f', `${DIR}app`, '-f', `${DIR}policy`];

async function cli(args: string[]): Promise<{ status: number; stdout: string; stderr: string }> {
  const io = bufferIo();
  const status = await main(args, io);
  return { status, stdout: io.stdout, stderr: io.stderr };
}

describe('controller admin API', () => {
  let server: AdminServer;
  let base: string;
  let ready = false;
  before(async () => {
    const config = clusterConfig({});
    const ws = buildWorkspace({ paths: [`${DIR}app`, `${DIR}policy`] }, config);
    server = await startAdminServer(
      {
        view: ws,
        isReady: () => ready,
        settings: () => ({ trustDomain: config.trustDomain }),
        files: () => [],
        resources: () =>
          ws.entries.map((e) => ({
            kind: e.kind,
            apiVersion: e.apiVersion,
            namespace: e.namespace,
            name: e.name,
            source: e.source,
            stale: false,
            diagnostics: e.diagnostics,
          })),
        metrics: () => Promise.resolve({ contentType: 'text/plain; version=0.0.4', text: 'ward_test_metric 1\n' }),
        identityOf: (ns, sa) => serviceAccountIdentity(config, ns, sa),
      },
      '127.0.0.1',
      0,
      silentLogger(),
    );
    base = `http://127.0.0.1:${server.port}`;
  });
  after(() => server.close());

  it('/live is always up; /ready follows the controller', async () => {
    assert.equal((await fetch(`${base}/live`)).status, 200);
    assert.equal((await fetch(`${base}/ready`)).status, 503);
    ready = true;
    assert.equal((await fetch(`${base}/ready`)).status, 200);
  });

  it('serves /metrics in the registry content type', async () => {
    const res = await fetch(`${base}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /version=0\.0\.4/);
    assert.equal(await res.text(), 'ward_test_metric 1\n');
  });

  const same: [string, string[]][] = [
    [
      'explain, allowed gRPC call',
      ['explain', '--to', 'deploy/emoji:8080', '-n', 'emojivoto', '--from-sa', 'emojivoto/web', '--grpc', 'emojivoto.v1.EmojiService/ListAll', '-o', 'json'],
    ],
    [
      'explain, denied HTTP request (text output)',
      ['explain', '--to', 'deploy/web:8080', '-n', 'emojivoto', '--from-sa', 'bad/vote-bot', '--http', 'GET /api/list', '--header', 'x-a: b'],
    ],
    ['explain, TCP from an IP', ['explain', '--to', 'pod/emojivoto/voting-0:8801', '--from-ip', '10.1.2.3', '--tcp', '-o', 'json']],
    ['authz, one deployment', ['authz', '-n', 'emojivoto', 'deploy/web', '-o', 'json']],
    ['authz, all namespaces (table)', ['authz', '-A', 'po']],
    ['diagnostics policy', ['diagnostics', 'policy', 'pod/emojivoto/web-0', '8080', '-o', 'json']],
    ['diagnostics policy (yaml)', ['diagnostics', 'policy', '-n', 'emojivoto', 'pod/emoji-0', '4191']],
  ];
  for (const [name, args] of same) {
    it(`--controller prints what -f prints: ${name}`, async () => {
      const offline = await cli([...args, ...FILES]);
      const online = await cli([...args, '--controller', base]);
      assert.equal(offline.status, 0, offline.stderr);
      assert.equal(online.status, 0, online.stderr);
      assert.equal(online.stdout, offline.stdout);
    });
  }

  it('--controller reports unknown pods and bad input as usage errors (exit 2), like -f', async () => {
    const r = await cli(['explain', '--to', 'pod/emojivoto/nope-0:8080', '--tcp', '--controller', base]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /nope-0 not found/);
    const bad = await cli(['explain', '--to', 'deploy/web:8080', '-n', 'emojivoto', '--http', 'GET', '--controller', base]);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /--http wants 'METHOD PATH'/);
  });

  it('--controller and -f together, or an unreachable controller, are usage errors', async () => {
    const both = await cli(['authz', 'po', '--controller', base, ...FILES]);
    assert.equal(both.status, 2);
    assert.match(both.stderr, /either -f manifests or --controller/);
    const closed = await freePort();
    const down = await cli(['authz', 'po', '--controller', `127.0.0.1:${closed}`]);
    assert.equal(down.status, 2);
    assert.match(down.stderr, new RegExp(`cannot reach the controller at http://127\\.0\\.0\\.1:${closed}: ECONNREFUSED`));
  });

  it('policy lookups give the GetPort status codes', async () => {
    const notFound = await fetch(`${base}/api/v1/policy?workload=emojivoto:ghost&port=8080`);
    assert.equal(notFound.status, 404);
    assert.equal(((await notFound.json()) as { error: { code: string } }).error.code, 'NOT_FOUND');
    for (const q of [
      'workload=emojivoto:web-0&port=0',
      'workload=emojivoto:web-0&port=70000',
      'workload=emojivoto:web-0&port=abc',
      'workload=:web-0&port=80',
      'workload={"ns":"x","bogus":1}&port=80',
    ]) {
      const res = await fetch(`${base}/api/v1/policy?${q.replace('{', '%7B').replace('}', '%7D')}`);
      assert.equal(res.status, 400, q);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'INVALID_ARGUMENT');
    }
  });

  it('one-off reads of undeclared ports do not change what authz lists', async () => {
    const before = await (await fetch(`${base}/api/v1/authz?resource=deploy/emoji&namespace=emojivoto`)).text();
    assert.equal((await fetch(`${base}/api/v1/policy?workload=emojivoto:emoji-0&port=7777`)).status, 200);
    const explained = await fetch(`${base}/api/v1/explain`, { method: 'POST', body: JSON.stringify({ to: 'pod/emojivoto/emoji-0:9999', tcp: true }) });
    assert.equal(explained.status, 200);
    assert.equal(await (await fetch(`${base}/api/v1/authz?resource=deploy/emoji&namespace=emojivoto`)).text(), before);
    assert.equal((await fetch(`${base}/api/v1/pods/%E0%A4%A/x`)).status, 400);
  });

  it('explain rejects malformed bodies precisely and never crashes', async () => {
    const cases: [string, RegExp][] = [
      ['not json', /not JSON/],
      ['[1,2]', /JSON object/],
      ['{}', /"to" is required/],
      ['{"to": 5}', /"to" must be a string/],
      ['{"to": "deploy/web:8080", "evil": true}', /unknown field "evil"/],
      ['{"to": "deploy/web:8080", "header": "x"}', /"header" must be an array/],
      ['{"to": "deploy/web:8080", "tcp": "yes"}', /"tcp" must be a boolean/],
    ];
    for (const [body, re] of cases) {
      const res = await fetch(`${base}/api/v1/explain`, { method: 'POST', body });
      assert.equal(res.status, 400, body);
      assert.match(((await res.json()) as { error: { message: string } }).error.message, re);
    }
    const huge = await fetch(`${base}/api/v1/explain`, { method: 'POST', body: 'x'.repeat(200_000) });
    assert.equal(huge.status, 413);
    assert.equal((await fetch(`${base}/api/v1/explain`)).status, 405);
    assert.equal((await fetch(`${base}/api/v1/pods`, { method: 'DELETE' })).status, 405);
    assert.equal((await fetch(`${base}/api/v1/nothing`)).status, 404);
  });

  it('lists pods with identity, ports and effective policy, and one pod with its wire policies', async () => {
    const all = (await (await fetch(`${base}/api/v1/pods?namespace=emojivoto`)).json()) as {
      pods: { name: string; identity: string; ports: { port: number; server: { name: string } }[] }[];
    };
    const web = all.pods.find((p) => p.name === 'web-0');
    assert.ok(web);
    assert.equal(web.identity, 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local');
    assert.deepEqual(web.ports.find((p) => p.port === 8080)?.server, { kind: 'server', name: 'web-http' });
    const one = (await (await fetch(`${base}/api/v1/pods/emojivoto/web-0`)).json()) as { policies: Record<string, { labels: Record<string, string> }> };
    assert.equal(one.policies['8080']?.labels.name, 'web-http');
    assert.equal((await fetch(`${base}/api/v1/pods/emojivoto/ghost`)).status, 404);
  });

  it('lists resources with their source positions, filtered by namespace and kind', async () => {
    const r = (await (await fetch(`${base}/api/v1/resources?namespace=emojivoto&kind=server`)).json()) as {
      resources: { kind: string; name: string; source: { file: string; line: number } }[];
    };
    assert.deepEqual(r.resources.map((x) => x.name).sort(), ['emoji-grpc', 'linkerd-admin', 'voting-grpc', 'web-http']);
    assert.ok(r.resources.every((x) => x.kind === 'Server' && x.source.file.endsWith('.yaml') && x.source.line >= 1));
  });
});
