/**
 * The admin server over real sockets on 127.0.0.1: every request is authorized by the port-4191
 * policy (or the fallback before one arrives), probes and endpoints answer as documented. Clients
 * connect from 127.0.0.2 so that the proxy-added `default:localhost` does not admit them.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { type Authorization, type CompiledServer, compileServer, defaultMeta, type InboundServer } from '../core/index.js';
import { ADMIN_POLICY_PORT, AdminServer } from './admin-server.js';
import { MetricsRegistry } from './metric-cells.js';
import { InboundMetrics } from './metrics-inbound.js';

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
