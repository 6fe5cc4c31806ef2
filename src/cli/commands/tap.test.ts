/**
 * `ward tap`'s lines (one per request, `linkerd viz tap` style) and its refusals of bad flags
 * before any controller is asked.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { bufferIo, UsageError } from '../io.js';
import { formatTapEvent, runTap } from './tap.js';

const base = {
  time: '2026-11-28T10:00:00.000Z',
  namespace: 'emojivoto',
  pod: 'web-0',
  workload: { kind: 'Deployment', name: 'web' },
  port: 8080,
  method: 'GET',
  authority: 'web-svc:80',
  path: '/api/list',
  clientAddr: '10.42.0.9',
  clientId: 'vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local',
  tls: true,
  server: 'server/web-http',
  route: 'HTTPRoute/web-api',
  authz: 'authorizationpolicy/web-api',
  decision: 'allow',
  reason: null,
  status: 200,
  grpcStatus: null,
  latencyMs: 1.25,
};

describe('ward tap', () => {
  it('prints an allowed request with its authorization, a denial with its reason, a refused connection without HTTP fields', () => {
    assert.equal(
      formatTapEvent(base, 0, false),
      'req id=0 proxy=in src=10.42.0.9 dst=emojivoto/web-0:8080 tls=true identity=vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local :method=GET :authority=web-svc:80 :path=/api/list :status=200 latency=1.25ms authz=authorizationpolicy/web-api\n',
    );
    assert.equal(
      formatTapEvent(
        { ...base, decision: 'deny', authz: null, status: 403, latencyMs: null, clientId: null, tls: false, reason: 'unauthorized request on route' },
        1,
        false,
      ),
      'req id=1 proxy=in src=10.42.0.9 dst=emojivoto/web-0:8080 tls=false identity=- :method=GET :authority=web-svc:80 :path=/api/list :status=403 latency=- denied="unauthorized request on route"\n',
    );
    assert.equal(
      formatTapEvent(
        { ...base, method: null, authority: null, path: null, status: null, latencyMs: null, decision: 'deny', authz: null, reason: 'unauthorized connection' },
        2,
        false,
      ),
      'conn id=2 proxy=in src=10.42.0.9 dst=emojivoto/web-0:8080 tls=true identity=vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local denied="unauthorized connection"\n',
    );
    assert.match(formatTapEvent({ ...base, decision: 'audit', authz: 'default/audit' }, 3, false), / audit=would-deny authz=default\/audit\n$/);
    assert.match(
      formatTapEvent(base, 4, true),
      / authz=authorizationpolicy\/web-api workload=Deployment\/web server=server\/web-http route=HTTPRoute\/web-api time=2026-11-28T10:00:00\.000Z\n$/,
    );
  });

  it('refuses bad flags before asking a controller', async () => {
    const io = bufferIo();
    for (const [flags, msg] of [
      [{ output: 'yaml' }, /-o "yaml": use wide or json/],
      [{ output: 'text', max: '0' }, /--max "0" is not a positive whole number/],
      [{ output: 'text', seconds: '1.5' }, /--seconds "1.5" is not a positive whole number/],
      [{ output: 'text', controller: 'ftp://x' }, /only http:\/\/ and https:\/\//],
    ] as const) {
      await assert.rejects(runTap('deploy/web', flags, io, undefined), (e: unknown) => e instanceof UsageError && msg.test(e.message));
    }
  });

  it('prints the events a controller sends, and stops with a usage error at a line past 1 MiB instead of buffering it', async () => {
    const event = JSON.stringify({ time: '2026-11-28T10:00:00.000Z', namespace: 'default', pod: 'web-1', method: 'GET', path: '/ok', decision: 'allow' });
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${event}\n`);
      // A line that never ends: the CLI must give up on it rather than hold it all.
      const chunk = 'x'.repeat(64 * 1024);
      let sent = 0;
      const more = (): void => {
        while (sent < 64 && !res.destroyed) {
          sent++;
          if (!res.write(chunk)) return void res.once('drain', more);
        }
        res.end();
      };
      more();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const io = bufferIo();
      const controller = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      await assert.rejects(
        runTap('deploy/web', { output: 'json', controller }, io, new AbortController().signal),
        (e: unknown) => e instanceof UsageError && /tap line longer than 1048576 bytes/.test(e.message),
      );
      assert.equal(io.stdout, `${event}\n`);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
