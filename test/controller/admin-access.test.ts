/**
 * The controller's admin port answers probes and the scraper from anywhere, and its JSON API, tap
 * and dashboard only to loopback peers: a real controller listens on every address, and requests
 * come from one of this host's non-loopback addresses and from loopback.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { isLoopbackPeer, isPublicAdminPath, type RunningController, startController } from '../../src/controller/index.js';
import { initIdentity } from '../../src/identity/index.js';

const MANIFESTS = new URL('../../examples/emojivoto/', import.meta.url).pathname;

/** A non-loopback address of this host in `family` (IPv6: not link-local, which needs a scope), or undefined. */
function hostAddress(family: 'IPv4' | 'IPv6'): string | undefined {
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? [])
      if (a.family === family && !a.internal && !a.address.startsWith('127.') && !a.address.toLowerCase().startsWith('fe80:')) return a.address;
  return undefined;
}

const OUTSIDE = hostAddress('IPv4');
const OUTSIDE6 = hostAddress('IPv6');
/** Dual-stack where IPv6 loopback exists: IPv4 peers then arrive as `::ffff:a.b.c.d`, the mapped form. */
const LISTEN_HOST = Object.values(networkInterfaces()).some((l) => l?.some((a) => a.address === '::1')) ? '::' : '0.0.0.0';
const skip = OUTSIDE === undefined && process.env.CI !== 'true' ? 'needs a non-loopback IPv4 address on this host (none found)' : false;

interface Answer {
  readonly status: number;
  readonly body: string;
}

/** One request with the path sent byte for byte (fetch would normalise it), from `from` to `to`. */
function ask(
  to: string,
  port: number,
  path: string,
  opts: { from?: string; method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: to, port, path, method: opts.method ?? 'GET', headers: opts.headers, localAddress: opts.from, timeout: 30_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer to ${path}`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}

const PROTECTED = [
  '/api/v1/tap?resource=deploy/web&namespace=emojivoto&seconds=1&max=1',
  '/api/v1/pods',
  '/api/v1/status',
  '/api/v1/edges?allNamespaces=true',
  '/dashboard/',
  '/',
  '/no-such-path',
];

async function controller(dir: string, adminApiFrom: 'loopback' | 'any'): Promise<RunningController> {
  const any = { host: LISTEN_HOST, port: 0 };
  const loopback = { host: '127.0.0.1', port: 0 };
  return startController({
    manifestsDir: MANIFESTS,
    identityDir: join(dir, 'identity'),
    cluster: clusterConfig({}),
    listen: { policy: loopback, identity: loopback, destination: loopback, admin: any },
    grpcPlaintext: true,
    adminApiFrom,
  });
}

describe('controller admin access', { skip }, () => {
  const from = OUTSIDE ?? '';
  let dir: string;
  let ctl: RunningController;
  let open: RunningController;
  before(async () => {
    if (OUTSIDE === undefined) assert.fail('CI=true: this host has no non-loopback IPv4 address to reach the controller from');
    dir = mkdtempSync(join(tmpdir(), 'ward-admin-access-'));
    assert.ok((await initIdentity({ outDir: join(dir, 'identity') })).ok);
    ctl = await controller(dir, 'loopback');
    open = await controller(dir, 'any');
  });
  after(async () => {
    await ctl?.close();
    await open?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers /live, /ready and /metrics to a non-loopback peer', async () => {
    for (const path of ['/live', '/ready', '/metrics']) {
      const r = await ask(from, ctl.ports.admin, path, { from });
      assert.equal(r.status, 200, `${path}: ${r.body}`);
    }
    assert.match((await ask(from, ctl.ports.admin, '/metrics', { from })).body, /# TYPE /);
  });

  it('refuses the API, tap and the dashboard to a non-loopback peer, saying how to reach them', async () => {
    for (const path of PROTECTED) {
      const r = await ask(from, ctl.ports.admin, path, { from });
      assert.equal(r.status, 403, `${path}: ${r.body}`);
      const error = (JSON.parse(r.body) as { error: { code: string; message: string } }).error;
      assert.equal(error.code, 'FORBIDDEN');
      assert.match(error.message, new RegExp(`kubectl port-forward -n linkerd deploy/ward-controller ${ctl.ports.admin}:${ctl.ports.admin}`));
      assert.match(error.message, new RegExp(`--controller http://127\\.0\\.0\\.1:${ctl.ports.admin}`));
    }
  });

  it('serves everything to a loopback peer', async () => {
    for (const path of ['/metrics', ...PROTECTED.filter((p) => p !== '/no-such-path')]) {
      const r = await ask('127.0.0.1', ctl.ports.admin, path);
      assert.equal(r.status, 200, `${path}: ${r.body}`);
    }
    assert.equal((await ask('127.0.0.1', ctl.ports.admin, '/no-such-path')).status, 404);
    if (LISTEN_HOST === '::') assert.equal((await ask('::1', ctl.ports.admin, '/api/v1/pods')).status, 200);
    assert.equal((await ask('127.0.0.1', ctl.ports.admin, '/api/v1/pods')).status, 200);
    assert.equal((await ask('127.0.0.1', ctl.ports.admin, '/api/v1/tap?resource=deploy/web&namespace=emojivoto&seconds=1&max=1')).status, 200);
    assert.equal((await ask('127.0.0.1', ctl.ports.admin, '/dashboard/')).status, 200);
  });

  it('refuses the API to a loopback peer whose Host names another machine, as a DNS-rebinding page sends', async () => {
    const port = ctl.ports.admin;
    for (const path of PROTECTED) {
      const r = await ask('127.0.0.1', port, path, { headers: { host: `rebound.example:${port}` } });
      assert.equal(r.status, 403, `${path}: ${r.body}`);
      const error = (JSON.parse(r.body) as { error: { code: string; message: string } }).error;
      assert.equal(error.code, 'FORBIDDEN');
      assert.match(error.message, /"rebound\.example:\d+" does not name this machine's loopback/);
    }
    assert.equal((await ask('127.0.0.1', port, '/metrics', { headers: { host: 'rebound.example' } })).status, 200);
    assert.equal((await ask('127.0.0.1', port, '/api/v1/pods', { headers: { host: `localhost:${port}` } })).status, 200);
    // adminApiFrom any is for the user's own authenticating proxy, which names the controller as it likes.
    assert.equal((await ask('127.0.0.1', open.ports.admin, '/api/v1/pods', { headers: { host: 'ward.example' } })).status, 200);
  });

  it('no path form, method or header gets a protected route answered to a non-loopback peer', async () => {
    const tricks: { path: string; method?: string; headers?: Record<string, string>; body?: string }[] = [
      { path: '/api/v1/pods', headers: { 'x-forwarded-for': '127.0.0.1', forwarded: 'for=127.0.0.1', 'x-real-ip': '127.0.0.1' } },
      { path: '/api/v1/pods', headers: { host: '127.0.0.1' } },
      { path: '/metrics/../api/v1/pods' },
      { path: '/metrics/%2e%2e/api/v1/pods' },
      { path: '/%61pi/v1/pods' },
      { path: '/api/v1/pods/' },
      { path: '/api/v1/pods?/metrics' },
      { path: '/api/v1/pods#/metrics' },
      { path: '//api/v1/tap' },
      { path: '//metrics/api/v1/pods' },
      { path: '/api//v1/tap?seconds=1' },
      { path: 'http://127.0.0.1/api/v1/pods' },
      { path: '/api/v1/tap?resource=deploy/web&namespace=emojivoto&seconds=1', method: 'HEAD' },
      { path: '/api/v1/pods', method: 'HEAD' },
      { path: '/api/v1/explain', method: 'POST', body: '{"namespace":"emojivoto"}', headers: { 'content-type': 'application/json' } },
      { path: '/dashboard/index.html' },
    ];
    for (const t of tricks) {
      const r = await ask(from, ctl.ports.admin, t.path, { from, ...t });
      assert.equal(r.status, 403, `${t.method ?? 'GET'} ${t.path}: ${r.status} ${r.body}`);
    }
    if (LISTEN_HOST === '::' && OUTSIDE6 !== undefined) {
      assert.equal((await ask(OUTSIDE6, ctl.ports.admin, '/api/v1/pods', { from: OUTSIDE6 })).status, 403);
      assert.equal((await ask(OUTSIDE6, ctl.ports.admin, '/metrics', { from: OUTSIDE6 })).status, 200);
    }
    // Dot segments that land on a public path are that path, and nothing more.
    const dotted = await ask(from, ctl.ports.admin, '/api/v1/../../metrics', { from });
    assert.equal(dotted.status, 200);
    assert.match(dotted.body, /# TYPE /);
  });

  it('with adminApiFrom any, serves the API to a non-loopback peer', async () => {
    const r = await ask(from, open.ports.admin, '/api/v1/pods', { from });
    assert.equal(r.status, 200, r.body);
    assert.ok(Array.isArray((JSON.parse(r.body) as { pods: unknown[] }).pods));
    assert.equal((await ask(from, open.ports.admin, '/api/v1/tap?resource=deploy/web&namespace=emojivoto&seconds=1&max=1', { from })).status, 200);
  });
});

describe('admin peer and path checks', () => {
  it('knows the loopback forms and refuses a socket without an address', () => {
    for (const a of ['127.0.0.1', '127.255.1.2', '::1', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1', '::ffff:7f00:1']) assert.equal(isLoopbackPeer(a), true, a);
    for (const a of [undefined, '', '10.244.82.1', '::ffff:10.0.0.1', 'fd00::2', '::', '0.0.0.0', '128.0.0.1', 'localhost', '127.0.0.1.nip.io'])
      assert.equal(isLoopbackPeer(a), false, String(a));
  });

  it('treats only the probe and metrics paths as public', () => {
    for (const p of ['/live', '/ready', '/metrics', '/metrics/', '/metrics?x=1', '/api/../metrics']) assert.equal(isPublicAdminPath(p), true, p);
    for (const p of ['/', '/api/v1/tap', '/%6detrics', '//metrics', '/metrics/x', '/dashboard/', 'http://[', '/metrics%2F..%2Fapi'])
      assert.equal(isPublicAdminPath(p), false, p);
  });

  it('ward controller refuses an --admin-api-from it does not know, naming the choices', async () => {
    const io = bufferIo();
    const status = await main(['controller', '--manifests', MANIFESTS, '--identity-dir', '/nonexistent', '--admin-api-from', 'cluster'], io);
    assert.notEqual(status, 0);
    assert.match(io.stderr, /--admin-api-from "cluster": use loopback or any/);
  });
});
