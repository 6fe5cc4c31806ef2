/**
 * `ward authz` of policy objects on the emojivoto example: the pods, ports and routes each one
 * applies to, the same from manifests (`-f`) as from a controller's `/api/v1/authz` (real
 * loopback admin server).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { AdminServer } from '../../src/controller/index.js';
import type { PolicyTargetsResult } from '../../src/index/index.js';
import { adminServerOver, cli, rowsOf } from './authz-objects-support.js';

const DIR = new URL('../../examples/emojivoto/', import.meta.url).pathname;
const FILES = ['-f', `${DIR}app`, '-f', `${DIR}policy`];

describe('ward authz of policy objects', () => {
  let server: AdminServer;
  let base: string;
  before(async () => {
    ({ server, base } = await adminServerOver([`${DIR}app`, `${DIR}policy`]));
  });
  after(() => server.close());

  it('server/web-http: the web pod port 8080 with its authorizations and routes', async () => {
    const r = await cli(['authz', 'server/web-http', '-n', 'emojivoto', '-o', 'json', ...FILES]);
    assert.equal(r.status, 0, r.stderr);
    assert.deepStrictEqual(rowsOf(r.stdout), ['Server/web-http web-0:8080 server/web-http *']);
    const o = (JSON.parse(r.stdout) as PolicyTargetsResult).policies[0];
    assert.deepStrictEqual(o?.authorizations, ['authorizationpolicy/web-from-emojivoto', 'authorizationpolicy/web-from-host']);
    assert.equal(o?.appliesTo[0]?.workload, 'Deployment/web');
  });

  it('meshtlsauthentication/web-only reaches emoji and voting through two policies', async () => {
    const r = await cli(['authz', 'meshtlsauthentication/web-only', '-n', 'emojivoto', '-o', 'json', ...FILES]);
    assert.equal(r.status, 0, r.stderr);
    assert.deepStrictEqual(rowsOf(r.stdout), [
      'MeshTLSAuthentication/web-only emoji-0:8080 server/emoji-grpc *',
      'MeshTLSAuthentication/web-only voting-0:8080 server/voting-grpc *',
    ]);
    assert.deepStrictEqual((JSON.parse(r.stdout) as PolicyTargetsResult).policies[0]?.usedBy, ['emojivoto/emoji-from-web', 'emojivoto/voting-from-web']);
  });

  it('srv -A lists every Server; linkerd-admin binds every pod', async () => {
    const r = await cli(['authz', 'srv', '-A', '-o', 'json', ...FILES]);
    assert.equal(r.status, 0, r.stderr);
    const names = (JSON.parse(r.stdout) as PolicyTargetsResult).policies.map((p) => `${p.namespace}/${p.name}`);
    assert.deepStrictEqual(names, ['emojivoto/emoji-grpc', 'emojivoto/linkerd-admin', 'emojivoto/voting-grpc', 'emojivoto/web-http']);
    const admin = rowsOf(r.stdout).filter((x) => x.startsWith('Server/linkerd-admin'));
    assert.deepStrictEqual(admin, [
      'Server/linkerd-admin emoji-0:4191 server/linkerd-admin *',
      'Server/linkerd-admin vote-bot-0:4191 server/linkerd-admin *',
      'Server/linkerd-admin voting-0:4191 server/linkerd-admin *',
      'Server/linkerd-admin web-0:4191 server/linkerd-admin *',
    ]);
  });

  it('the text output names each object, its rows and the chain', async () => {
    const r = await cli(['authz', 'authorizationpolicy/web-from-host', '-n', 'emojivoto', ...FILES]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^AuthorizationPolicy emojivoto\/web-from-host: targets Server web-http; requires NetworkAuthentication host\n/);
    assert.match(r.stdout, /emojivoto\/web-0 +Deployment\/web +8080 +server\/web-http +\* +AuthorizationPolicy web-from-host → Server web-http\n/);
  });

  for (const args of [
    ['server/web-http', '-n', 'emojivoto'],
    ['authorizationpolicies', '-n', 'emojivoto', '-o', 'json'],
    ['networkauthentication/host', '-n', 'emojivoto', '-o', 'json'],
    ['httproute', '-A'],
    ['srv', '-A', '-o', 'json'],
  ]) {
    it(`--controller prints what -f prints: authz ${args.join(' ')}`, async () => {
      const offline = await cli(['authz', ...args, ...FILES]);
      const online = await cli(['authz', ...args, '--controller', base]);
      assert.equal(offline.status, 0, offline.stderr);
      assert.equal(online.status, 0, online.stderr);
      assert.equal(online.stdout, offline.stdout);
    });
  }

  it('an unknown object is a usage error with the same message online (404) and offline', async () => {
    const offline = await cli(['authz', 'server/web', '-n', 'emojivoto', ...FILES]);
    const online = await cli(['authz', 'server/web', '-n', 'emojivoto', '--controller', base]);
    assert.equal(offline.status, 2);
    assert.equal(offline.stderr, 'error: Server web not found in namespace emojivoto (Servers there: emoji-grpc, linkerd-admin, voting-grpc, web-http)\n');
    assert.equal(online.status, 2);
    assert.match(online.stderr, /Server web not found in namespace emojivoto \(Servers there: emoji-grpc, linkerd-admin, voting-grpc, web-http\)/);
    const res = await fetch(`${base}/api/v1/authz?resource=server/web&namespace=emojivoto`);
    assert.equal(res.status, 404);
  });
});
