/**
 * `ward dashboard` against a controller over a directory (the emojivoto manifests): it prints
 * the dashboard's URL, forwards a local port to the controller with --port, and says why when
 * there is nothing to point at. No browser needed.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { controllerPorts, initWorkdir, spawnController, type WardProcess, waitFor, wardSpawn, wardSync } from '../e2e/helpers.js';

const ROOT = new URL('../../', import.meta.url).pathname;

let work: string;
let controller: WardProcess | undefined;
let base: string;

describe('ward dashboard', { timeout: 180_000 }, () => {
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'ward-dashboard-cli-'));
    const { idDir, manifests } = initWorkdir(work);
    for (const sub of ['app', 'policy']) cpSync(join(ROOT, 'examples', 'emojivoto', sub), join(manifests, sub), { recursive: true });
    controller = spawnController(manifests, idDir, '127.0.0.1');
    base = `http://127.0.0.1:${(await controllerPorts(controller, 120_000)).admin}`;
  });

  after(async () => {
    await controller?.stop(5000);
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  it("prints the controller's dashboard URL", () => {
    const r = wardSync(['dashboard', '--controller', base, '--no-open']);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, `${base}/dashboard/\n`);
  });

  it('forwards a local port to the controller with --port, until stopped', async () => {
    const fwd = wardSpawn(['dashboard', '--controller', base, '--port', '0', '--no-open']);
    try {
      const url = await waitFor('the forwarded URL', () => /^(http:\/\/127\.0\.0\.1:\d+)\/dashboard\/$/m.exec(fwd.stdout())?.[1], 60_000, 50);
      const page = await fetch(`${url}/dashboard/`);
      assert.equal(page.status, 200);
      assert.match(page.headers.get('content-security-policy') ?? '', /default-src 'none'/);
      await page.body?.cancel();
      const graph = (await (await fetch(`${url}/api/v1/graph?namespace=emojivoto`)).json()) as { namespace: string; nodes: { id: string }[] };
      assert.equal(graph.namespace, 'emojivoto');
      assert.ok(graph.nodes.some((n) => n.id === 'emojivoto/Deployment/web'));
      const explain = await fetch(`${url}/api/v1/explain`, {
        method: 'POST',
        body: JSON.stringify({ to: 'deploy/web:8080', namespace: 'emojivoto', fromSa: 'bad/vote-bot', http: 'GET /api/vote' }),
      });
      assert.equal(((await explain.json()) as { decision: string }).decision, 'deny', 'a POST body goes through');
      // The forwarder rewrites Host for the controller: a page that points its own name at
      // 127.0.0.1 (DNS rebinding) must be refused here.
      const u = new URL(url);
      const rebound = await new Promise<number>((resolve, reject) => {
        httpRequest({ host: u.hostname, port: u.port, path: '/api/v1/pods', headers: { host: `rebound.example:${u.port}` } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
          .on('error', reject)
          .end();
      });
      assert.equal(rebound, 403);
    } finally {
      assert.equal(await fwd.stop(5000), 0);
    }
  });

  it('says why when there is no controller to point at', () => {
    const none = wardSync(['dashboard', '--controller', 'http://127.0.0.1:1', '--no-open']);
    assert.equal(none.status, 2);
    assert.match(none.stderr, /cannot reach the controller at http:\/\/127\.0\.0\.1:1/);
    const bad = wardSync(['dashboard', '--controller', base, '--port', 'x', '--no-open']);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /--port "x" is not a port number/);
  });

  it('answers bad graph queries with a code and a reason', async () => {
    const r = await fetch(`${base}/api/v1/graph?namespace=${encodeURIComponent('../etc')}`);
    assert.equal(r.status, 400);
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'INVALID_ARGUMENT');
    const v = (await (await fetch(`${base}/api/v1/graph`)).json()) as { version: number };
    assert.deepEqual(await (await fetch(`${base}/api/v1/graph?since=${v.version}`)).json(), { version: v.version, unchanged: true });
  });
});
