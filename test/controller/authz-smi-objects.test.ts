/**
 * `ward authz` of SMI objects on the emojivoto lockdown written in SMI: the pods, ports and
 * routes each TrafficTarget, HTTPRouteGroup and TCPRoute applies to, the same from manifests
 * (`-f`) as from a controller's `/api/v1/authz` (real loopback admin server).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { AdminServer } from '../../src/controller/index.js';
import { adminServerOver, cli, rowsOf } from './authz-objects-support.js';

const APP = new URL('../../examples/emojivoto/app', import.meta.url).pathname;
const SMI = new URL('../../examples/emojivoto-smi/policy', import.meta.url).pathname;
const FILES = ['-f', APP, '-f', SMI];

describe('ward authz of SMI objects', () => {
  let server: AdminServer;
  let base: string;
  before(async () => {
    ({ server, base } = await adminServerOver([APP, SMI]));
  });
  after(() => server.close());

  it('traffictarget/web-from-emojivoto: the web pod port 8080 through its HTTPRouteGroup match', async () => {
    const r = await cli(['authz', 'traffictarget/web-from-emojivoto', '-n', 'emojivoto', '-o', 'json', ...FILES]);
    assert.equal(r.status, 0, r.stderr);
    assert.deepStrictEqual(rowsOf(r.stdout), [
      'TrafficTarget/web-from-emojivoto web-0:8080 traffictarget/web-from-emojivoto httproutegroup/web-app:everything',
    ]);
  });

  it('tt -A lists every TrafficTarget; the proxy admin port stays with its Server', async () => {
    const r = await cli(['authz', 'tt', '-A', '-o', 'json', ...FILES]);
    assert.equal(r.status, 0, r.stderr);
    assert.deepStrictEqual(rowsOf(r.stdout), [
      'TrafficTarget/emoji-from-web emoji-0:8080 traffictarget/emoji-from-web httproutegroup/emoji-service:any-method',
      'TrafficTarget/voting-from-web voting-0:8080 traffictarget/voting-from-web httproutegroup/voting-service:any-method',
      'TrafficTarget/web-from-emojivoto web-0:8080 traffictarget/web-from-emojivoto httproutegroup/web-app:everything',
    ]);
  });

  it('the text output of a TCPRoute names the TrafficTargets using it, its rows and the chain', async () => {
    const r = await cli(['authz', 'tcproutes.specs.smi-spec.io/app-port', '-n', 'emojivoto', ...FILES]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stdout,
      /^TCPRoute emojivoto\/app-port: port 8080\n {2}named by TrafficTarget emojivoto\/emoji-from-web, emojivoto\/voting-from-web, emojivoto\/web-from-emojivoto\n/,
    );
    assert.match(
      r.stdout,
      /emojivoto\/emoji-0 +Deployment\/emoji +8080 +traffictarget\/emoji-from-web +httproutegroup\/emoji-service:any-method +TCPRoute app-port → TrafficTarget emoji-from-web → ServiceAccount emoji → HTTPRouteGroup emoji-service match any-method\n/,
    );
    assert.match(r.stdout, /note: TrafficTargets emoji-from-web, voting-from-web, web-from-emojivoto also have HTTPRouteGroup rules/);
  });

  for (const args of [
    ['traffictarget/emoji-from-web', '-n', 'emojivoto'],
    ['tt', '-n', 'emojivoto', '-o', 'json'],
    ['htr', '-A'],
    ['httproutegroup/voting-service', '-n', 'emojivoto', '-o', 'json'],
    ['tcproute/app-port', '-n', 'emojivoto'],
    ['tr', '-A', '-o', 'json'],
  ]) {
    it(`--controller prints what -f prints: authz ${args.join(' ')}`, async () => {
      const offline = await cli(['authz', ...args, ...FILES]);
      const online = await cli(['authz', ...args, '--controller', base]);
      assert.equal(offline.status, 0, offline.stderr);
      assert.equal(online.status, 0, online.stderr);
      assert.equal(online.stdout, offline.stdout);
      assert.ok(offline.stdout.length > 0);
    });
  }

  it('an unknown TrafficTarget is a usage error with the same message online (404) and offline', async () => {
    const offline = await cli(['authz', 'tt/web', '-n', 'emojivoto', ...FILES]);
    const online = await cli(['authz', 'tt/web', '-n', 'emojivoto', '--controller', base]);
    const message = 'TrafficTarget web not found in namespace emojivoto (TrafficTargets there: emoji-from-web, voting-from-web, web-from-emojivoto)';
    assert.equal(offline.status, 2);
    assert.equal(offline.stderr, `error: ${message}\n`);
    assert.equal(online.status, 2);
    assert.ok(online.stderr.includes(message), online.stderr);
    const res = await fetch(`${base}/api/v1/authz?resource=tt/web&namespace=emojivoto`);
    assert.equal(res.status, 404);
  });

  it('no UDPRoutes is not found, online and offline; a Gateway API TCPRoute is not an SMI kind', async () => {
    const offline = await cli(['authz', 'udproute', '-n', 'emojivoto', ...FILES]);
    const online = await cli(['authz', 'udproute', '-n', 'emojivoto', '--controller', base]);
    assert.equal(offline.status, 2);
    assert.equal(offline.stderr, 'error: no UDPRoutes in namespace emojivoto\n');
    assert.equal(online.status, 2);
    assert.ok(online.stderr.includes('no UDPRoutes in namespace emojivoto'), online.stderr);
    const gateway = await cli(['authz', 'tcproutes.gateway.networking.k8s.io/app-port', '-n', 'emojivoto', ...FILES]);
    assert.equal(gateway.status, 2);
    assert.match(gateway.stderr, /unknown resource kind "tcproutes\.gateway\.networking\.k8s\.io"/);
  });
});
