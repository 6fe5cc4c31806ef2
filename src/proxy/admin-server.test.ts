/**
 * The admin server over real sockets on 127.0.0.1: every request is authorized by the port-4191
 * policy (or the fallback before one arrives), probes and endpoints answer as documented; mesh
 * TLS to the proxy's name is terminated and its requests are authorized with the client's
 * identity, plaintext is served alongside. Clients connect from 127.0.0.2 so that the
 * proxy-added `default:localhost` does not admit them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect as http2Connect } from 'node:http2';
import { connect as netConnect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import {
  ALL_NETWORKS,
  type Authorization,
  type CompiledServer,
  compileServer,
  DEFAULT_HTTP_ROUTE,
  defaultMeta,
  type InboundServer,
  probeRoute,
} from '../core/index.js';
import type { WorkloadCertificate } from '../identity/index.js';
import { ADMIN_POLICY_PORT, ADMIN_PROBE_PATHS, AdminServer } from './admin-server.js';
import { MetricsRegistry } from './metrics/cells.js';
import { InboundMetrics } from './metrics/inbound.js';
import { mkTestMesh, TempDirs, within } from './testing/identity.js';
import { MeshTlsContext } from './tls/context.js';

const HOST = '127.0.0.1';
const FROM = '127.0.0.2';

const everyone: Authorization = {
  meta: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name: 'admin-everyone' },
  networks: [{ net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] }],
  authentication: { kind: 'unauthenticated' },
};

/** An HTTP/1 Server on 4191 with only the default route (no probe route) and the given authorizations. */
function adminServer(authorizations: Authorization[], protocol: 'http1' | 'opaque' = 'http1'): InboundServer {
  return {
    meta: { group: 'policy.linkerd.io', kind: 'server', name: 'linkerd-admin' },
    protocol:
      protocol === 'opaque'
        ? { kind: 'opaque' }
        : {
            kind: 'http1',
            routes: [
              {
                meta: defaultMeta('default'),
                hosts: [],
                authorizations: [],
                rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
              },
            ],
          },
    authorizations,
  };
}

interface Reply {
  readonly status: number;
  readonly body: string;
  readonly headers: Record<string, string | string[] | undefined>;
}

function get(port: number, path: string, opts: { from?: string; method?: string } = {}): Promise<Reply | 'closed'> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: HOST, port, path, method: opts.method ?? 'GET', localAddress: opts.from ?? FROM, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    req.on('error', (e: NodeJS.ErrnoException) => (e.code === 'ECONNRESET' ? resolve('closed') : reject(e)));
    req.setTimeout(5000, () => req.destroy(new Error(`timeout on ${path}`)));
    req.end();
  });
}

async function status(port: number, path: string, from?: string): Promise<number | 'closed'> {
  const r = await get(port, path, from === undefined ? {} : { from });
  return r === 'closed' ? r : r.status;
}

describe('AdminServer', () => {
  const policies = new Map<number, CompiledServer>();
  const registry = new MetricsRegistry();
  const metrics = new InboundMetrics({ registry, targetIp: HOST });
  let ready = false;
  let admin: AdminServer;
  let port: number;

  before(async () => {
    admin = new AdminServer({
      host: HOST,
      port: 0,
      policies: { current: (p) => policies.get(p) },
      isReady: () => ready,
      registry,
      debugPolicies: () => ({ ports: [{ port: 8080 }] }),
      metrics: metrics.hooks,
    });
    port = await admin.start();
    assert.equal(admin.port, port);
  });

  after(async () => {
    await admin.close();
  });

  it('before the 4191 policy: probes from anywhere, everything else only from localhost', async () => {
    policies.delete(ADMIN_POLICY_PORT);
    assert.equal(await status(port, '/live'), 200);
    const notReady = await get(port, '/ready');
    assert.ok(notReady !== 'closed');
    assert.equal(notReady.status, 503);
    assert.equal(notReady.body, 'not ready\n');
    assert.equal(await status(port, '/metrics'), 403);
    assert.equal(await status(port, '/debug/policies'), 403);
    assert.equal(await status(port, '/metrics', HOST), 200);
    ready = true;
    assert.equal(await status(port, '/ready'), 200);
  });

  it('applies the 4191 policy to every request, probes included', async () => {
    policies.set(ADMIN_POLICY_PORT, compileServer(adminServer([])));
    assert.equal(await status(port, '/live'), 403);
    assert.equal(await status(port, '/ready'), 403);
    assert.equal(await status(port, '/live', HOST), 200);

    policies.set(ADMIN_POLICY_PORT, compileServer(adminServer([everyone])));
    assert.equal(await status(port, '/live'), 200);
    const m = await get(port, '/metrics');
    assert.ok(m !== 'closed');
    assert.equal(m.status, 200);
    assert.match(String(m.headers['content-type']), /^text\/plain/);
    assert.match(m.body, /^inbound_http_authz_deny_total\{.*srv_name="linkerd-admin",srv_port="4191".*\} 2$/m);
    assert.match(
      m.body,
      /^inbound_http_authz_allow_total\{.*srv_name="linkerd-admin".*authz_name="admin-everyone"\} 2$/m,
      'the /live and this /metrics request',
    );
  });

  it('serves /debug/policies as JSON, unknown paths 404, other methods 405', async () => {
    policies.set(ADMIN_POLICY_PORT, compileServer(adminServer([everyone])));
    const d = await get(port, '/debug/policies');
    assert.ok(d !== 'closed');
    assert.equal(d.headers['content-type'], 'application/json');
    assert.deepEqual(JSON.parse(d.body), { ports: [{ port: 8080 }] });
    assert.equal(await status(port, '/nope'), 404);
    const post = await get(port, '/live', { method: 'POST' });
    assert.ok(post !== 'closed');
    assert.equal(post.status, 405);
    assert.equal(post.headers.allow, 'GET, HEAD');
    const head = await get(port, '/ready', { method: 'HEAD' });
    assert.ok(head !== 'closed');
    assert.equal(head.status, 200);
    assert.equal(head.body, '');
  });

  it('answers 404 for no route, 500 for an invalid policy, and closes the connection on an opaque denial', async () => {
    const noRoutes: InboundServer = { ...adminServer([everyone]), protocol: { kind: 'http1', routes: [] } };
    policies.set(ADMIN_POLICY_PORT, compileServer(noRoutes));
    assert.equal(await status(port, '/live'), 404);
    const invalid: InboundServer = adminServer([{ ...everyone, networks: [] }]);
    policies.set(ADMIN_POLICY_PORT, compileServer(invalid));
    assert.equal(await status(port, '/live'), 500);
    policies.set(ADMIN_POLICY_PORT, compileServer(adminServer([], 'opaque')));
    assert.equal(await status(port, '/live'), 'closed');
    policies.set(ADMIN_POLICY_PORT, compileServer(adminServer([everyone], 'opaque')));
    assert.equal(await status(port, '/live'), 200);
  });

  it('fails to start on a port in use, with ERR_ADMIN_LISTEN', async () => {
    const other = new AdminServer({ host: HOST, port, policies: { current: () => undefined }, isReady: () => true, registry, debugPolicies: () => null });
    await assert.rejects(other.start(), (e: unknown) => (e as { code?: string }).code === 'ERR_ADMIN_LISTEN');
  });
});

describe('AdminServer with mesh TLS', () => {
  const dirs = new TempDirs();
  const policies = new Map<number, CompiledServer>();
  const registry = new MetricsRegistry();
  const metrics = new InboundMetrics({ registry, targetIp: HOST });
  let admin: AdminServer;
  let port: number;
  let proxyId: string;
  let scraper: WorkloadCertificate;
  let other: WorkloadCertificate;

  /** The admin policy of a pod whose only authorization admits the scraper's identity; probes from anywhere. */
  function meshOnly(identity: string): InboundServer {
    return {
      meta: { group: 'policy.linkerd.io', kind: 'server', name: 'linkerd-admin' },
      protocol: { kind: 'detect', timeoutMs: 10_000, httpRoutes: [DEFAULT_HTTP_ROUTE, probeRoute(ADMIN_PROBE_PATHS, ALL_NETWORKS)] },
      authorizations: [
        {
          meta: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name: 'admin-scraper' },
          networks: ALL_NETWORKS,
          authentication: { kind: 'tlsAuthenticated', identities: [identity], suffixes: [] },
        },
      ],
    };
  }

  /** GET over mesh TLS to the proxy's name (SNI `sni`), HTTP/1.1. */
  function meshGet(cert: WorkloadCertificate, path: string, sni = proxyId): Promise<Reply | 'closed'> {
    const ctx = new MeshTlsContext(cert, mesh.anchorsPem);
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        {
          host: HOST,
          port,
          path,
          // No agent: an agent (even `agent: false`) dials with its own createConnection.
          createConnection: () => tlsConnect({ ...ctx.clientOptions(sni), socket: tcpFrom() }),
        },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            body += c;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
        },
      );
      req.on('error', (e: NodeJS.ErrnoException) =>
        e.code === 'ECONNRESET' || e.code === 'ERR_TLS_CERT_ALTNAME_INVALID' || /socket hang up|disconnected/.test(e.message) ? resolve('closed') : reject(e),
      );
      req.setTimeout(5000, () => req.destroy(new Error(`timeout on ${path}`)));
      req.end();
    });
  }

  let mesh: Awaited<ReturnType<typeof mkTestMesh>>;

  /** A TCP connection from {@link FROM} to the admin server, for a TLS client to run over. */
  function tcpFrom(): Socket {
    const tcp = netConnect({ host: HOST, port, localAddress: FROM });
    tcp.on('error', () => {});
    return tcp;
  }

  before(async () => {
    mesh = await mkTestMesh(dirs);
    const server = await mesh.issue('emojivoto', 'web');
    [scraper, other] = await Promise.all([mesh.issue('monitoring', 'prometheus'), mesh.issue('monitoring', 'other')]);
    proxyId = server.identity;
    policies.set(ADMIN_POLICY_PORT, compileServer(meshOnly(scraper.identity)));
    admin = new AdminServer({
      host: HOST,
      port: 0,
      policies: { current: (p) => policies.get(p) },
      isReady: () => true,
      registry,
      debugPolicies: () => null,
      identity: proxyId,
      tls: new MeshTlsContext(server, mesh.anchorsPem),
      detectTimeoutMs: 2000,
      metrics: metrics.hooks,
    });
    port = await admin.start();
  });

  after(async () => {
    await admin.close();
    dirs.cleanup();
  });

  it('authorizes mesh TLS requests by the client identity, and serves plaintext alongside', async () => {
    const scrape = await meshGet(scraper, '/metrics');
    assert.ok(scrape !== 'closed');
    assert.equal(scrape.status, 200);
    assert.match(String(scrape.headers['content-type']), /^text\/plain/);
    const denied = await meshGet(other, '/metrics');
    assert.ok(denied !== 'closed');
    assert.equal(denied.status, 403);
    // Plaintext: the probes as before, /metrics not (no identity).
    assert.equal(await status(port, '/ready'), 200);
    assert.equal(await status(port, '/live'), 200);
    assert.equal(await status(port, '/metrics'), 403);
    // The probes over mesh TLS too (the probe route admits everyone).
    const live = await meshGet(other, '/live');
    assert.ok(live !== 'closed');
    assert.equal(live.status, 200);

    const m = await meshGet(scraper, '/metrics');
    assert.ok(m !== 'closed');
    assert.match(
      m.body,
      /^inbound_http_authz_allow_total\{[^}]*srv_port="4191"[^}]*tls="true",client_id="prometheus\.monitoring\.[^"]*"[^}]*authz_name="admin-scraper"\} 2$/m,
      'the two scrapes',
    );
    assert.match(m.body, /^inbound_http_authz_deny_total\{[^}]*srv_port="4191"[^}]*tls="true",client_id="other\.monitoring\.[^"]*"[^}]*\} 1$/m);
    assert.match(m.body, /^inbound_http_authz_deny_total\{[^}]*srv_port="4191"[^}]*tls="no_identity"[^}]*\} 1$/m);
  });

  it('serves HTTP/2 over mesh TLS (ALPN h2) with the client identity', async () => {
    const ctx = new MeshTlsContext(scraper, mesh.anchorsPem);
    const session = http2Connect(`https://${HOST}:${port}`, {
      createConnection: () => tlsConnect({ ...ctx.clientOptions(proxyId, ['h2']), socket: tcpFrom() }),
    });
    session.on('error', () => {});
    try {
      const statusOf = (path: string) =>
        within(
          new Promise<number>((resolve, reject) => {
            const stream = session.request({ ':path': path });
            stream.on('response', (h) => resolve(Number(h[':status'])));
            stream.on('error', reject);
            stream.resume();
          }),
          5000,
          `h2 ${path}`,
        );
      assert.equal(await statusOf('/metrics'), 200);
      policies.set(ADMIN_POLICY_PORT, compileServer(meshOnly(other.identity)));
      assert.equal(await statusOf('/metrics'), 403, 'each request reads the current policy');
    } finally {
      policies.set(ADMIN_POLICY_PORT, compileServer(meshOnly(scraper.identity)));
      session.destroy();
    }
  });

  it('closes TLS that is not for the proxy, and a mesh TLS client without a certificate', async () => {
    /** What a TLS client (certificate not checked) gets back for `GET /live`. */
    const tlsExchange = (servername: string, cert?: WorkloadCertificate) =>
      within(
        new Promise<string>((resolve) => {
          const t = tlsConnect({
            socket: tcpFrom(),
            servername,
            minVersion: 'TLSv1.3',
            rejectUnauthorized: false,
            ...(cert === undefined ? {} : { cert: cert.certPem + cert.chainPem, key: cert.keyPem }),
          });
          t.on('error', () => {});
          t.once('secureConnect', () => t.write('GET /live HTTP/1.1\r\nHost: admin\r\n\r\n'));
          let got = '';
          t.on('data', (c: Buffer) => {
            got += c.toString('latin1');
            if (got.includes('\r\n\r\n')) t.destroy();
          });
          t.once('close', () => resolve(got));
        }),
        5000,
        `TLS to ${servername}`,
      );
    assert.match(await tlsExchange(proxyId, scraper), /^HTTP\/1\.1 200 /, 'the same client with the proxy name is served');
    assert.equal(await tlsExchange('someone-else.example', scraper), '', 'another name is not terminated');
    assert.equal(await tlsExchange(proxyId), '', 'nothing is served without a client certificate');
    // Plaintext that is not HTTP gets node's 400, as before.
    const garbage = await within(
      new Promise<string>((resolve) => {
        const s = netConnect({ host: HOST, port, localAddress: FROM });
        let got = '';
        s.on('data', (c: Buffer) => {
          got += c.toString('latin1');
        });
        s.on('error', () => {});
        s.once('close', () => resolve(got));
        s.end('hello\r\n\r\n');
      }),
      5000,
      'the answer to garbage',
    );
    assert.match(garbage, /^HTTP\/1\.1 400 /);
  });
});

describe('AdminServer: node:http2 only for HTTP/2 clients', () => {
  // In a fresh process, where nothing else has asked for node:http2 through getBuiltinModule. (Its
  // module list cannot tell: under tsx, node:http's ES module facade loads node:http2 itself; the
  // bundles take node:http through require, which does not.)
  const CHILD = `
const asked = [];
const getBuiltinModule = process.getBuiltinModule;
process.getBuiltinModule = (id) => { asked.push(id); return getBuiltinModule(id); };
const { AdminServer } = await import(new URL('src/proxy/admin-server.ts', process.env.WARD_ROOT_URL));
const { MetricsRegistry } = await import(new URL('src/proxy/metrics/cells.ts', process.env.WARD_ROOT_URL));
const { connect } = await import('node:net');
const { request } = await import('node:http');
const http2Asked = () => asked.filter((id) => id === 'node:http2').length;
const admin = new AdminServer({ host: '127.0.0.1', port: 0, policies: { current: () => undefined }, isReady: () => true, registry: new MetricsRegistry(), debugPolicies: () => null });
const port = await admin.start();
const out = { afterStart: http2Asked() };
out.http1Status = await new Promise((resolve, reject) => request({ host: '127.0.0.1', port, path: '/live' }, (res) => { res.resume(); resolve(res.statusCode); }).on('error', reject).end());
out.afterHttp1 = http2Asked();
const http2FirstFrame = () => new Promise((resolve, reject) => {
  const s = connect({ host: '127.0.0.1', port }, () => s.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])])));
  let got = Buffer.alloc(0);
  s.on('data', (d) => { got = Buffer.concat([got, d]); if (got.length >= 9) { resolve(got[3]); s.destroy(); } });
  s.on('error', reject);
});
out.http2FirstFrameType = await http2FirstFrame();
out.http2SecondFrameType = await http2FirstFrame();
out.afterHttp2 = http2Asked();
await admin.close();
console.log(JSON.stringify(out));
`;

  it('asks for node:http2 on the first HTTP/2 connection, not at start nor for HTTP/1', () => {
    const root = new URL('../../', import.meta.url);
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', CHILD], {
      cwd: root.pathname,
      env: { ...process.env, NODE_TEST_CONTEXT: undefined, WARD_ROOT_URL: root.href },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(run.status, 0, `child failed:\n${run.stderr}`);
    const out = JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '') as Record<string, unknown>;
    // 0x4: the server's SETTINGS, so the HTTP/2 server took each connection; it was made once.
    assert.deepEqual(out, { afterStart: 0, http1Status: 200, afterHttp1: 0, http2FirstFrameType: 4, http2SecondFrameType: 4, afterHttp2: 1 });
  });

  it('imports node:http2 for its types only', () => {
    const source = readFileSync(new URL('./admin-server.ts', import.meta.url), 'utf8');
    assert.deepEqual(
      [...source.matchAll(/^import (type )?[^;]*from 'node:http2';/gm)].map((m) => (m[1] === undefined ? 'value' : 'type')),
      ['type'],
    );
  });
});
