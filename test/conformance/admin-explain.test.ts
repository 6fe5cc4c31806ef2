/**
 * `ward explain` and the proxy's admin server agree on port 4191: the same manifests (an injected
 * pod whose admin port is bound by a Server admitting the Prometheus ServiceAccount through a
 * MeshTLSAuthentication) are explained through the CLI and enforced by a real AdminServer given
 * the policy the controller's index computes for (pod, 4191), with the localhost authorization
 * the index gives the proxy. Each client — Prometheus and another identity over mesh TLS to the
 * pod's name, a plaintext client — sends each request over real sockets, and the status the
 * admin server answers must be the one the explain verdict names.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { stringify } from 'yaml';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { buildWorkspace } from '../../src/cli/workspace.js';
import { compileAuthz, compileServer } from '../../src/core/index.js';
import type { WorkloadCertificate } from '../../src/identity/index.js';
import { type ExplainResult, localhostAuthzOf } from '../../src/index/index.js';
import { documentFromObject } from '../../src/manifest/index.js';
import { AdminServer } from '../../src/proxy/admin-server.js';
import { ADMIN_POLICY_PORT, MetricsRegistry } from '../../src/proxy/index.js';
import { mkTestMesh, TempDirs, type TestMesh, within } from '../../src/proxy/testing/identity.js';
import { MeshTlsContext } from '../../src/proxy/tls/context.js';
import { podManifest } from './harness.js';

const HOST = '127.0.0.1';
/** The client address, outside the proxy-added `default:localhost`. */
const FROM = '127.0.0.2';

const manifests = [
  podManifest({
    namespace: 'emojivoto',
    name: 'web-0',
    serviceAccount: 'web',
    injectedProxyContainer: true,
    containers: [{ name: 'web', ports: [{ name: 'http', containerPort: 8080 }] }],
  }),
  {
    apiVersion: 'policy.linkerd.io/v1beta3',
    kind: 'Server',
    metadata: { namespace: 'emojivoto', name: 'linkerd-admin' },
    spec: { podSelector: {}, port: 'linkerd-admin' },
  },
  {
    apiVersion: 'policy.linkerd.io/v1alpha1',
    kind: 'MeshTLSAuthentication',
    metadata: { namespace: 'emojivoto', name: 'prometheus' },
    spec: { identityRefs: [{ kind: 'ServiceAccount', name: 'prometheus', namespace: 'monitoring' }] },
  },
  {
    apiVersion: 'policy.linkerd.io/v1alpha1',
    kind: 'AuthorizationPolicy',
    metadata: { namespace: 'emojivoto', name: 'admin-prometheus' },
    spec: {
      targetRef: { group: 'policy.linkerd.io', kind: 'Server', name: 'linkerd-admin' },
      requiredAuthenticationRefs: [{ group: 'policy.linkerd.io', kind: 'MeshTLSAuthentication', name: 'prometheus' }],
    },
  },
];

/** The HTTP status the proxy answers for an explain verdict (readiness holds). */
function statusOf(r: ExplainResult): number | 'closed' {
  if (r.decision !== 'deny') return 200;
  switch (r.denyKind) {
    case 'http403':
      return 403;
    case 'http404':
      return 404;
    case 'http500':
      return 500;
    default:
      return 'closed';
  }
}

describe('ward explain agrees with the admin server on port 4191', () => {
  const dirs = new TempDirs();
  const dir = mkdtempSync(join(tmpdir(), 'ward-admin-explain-'));
  const file = join(dir, 'manifests.yaml');
  let mesh: TestMesh;
  let admin: AdminServer;
  let port: number;
  const certs = new Map<string, WorkloadCertificate>();

  before(async () => {
    writeFileSync(file, manifests.map((m) => stringify(m)).join('---\n'));
    const config = clusterConfig({});
    const ws = buildWorkspace({ documents: manifests.map((m) => documentFromObject(m)) }, config);
    const cell = ws.index.lookup('emojivoto', 'web-0', ADMIN_POLICY_PORT);
    assert.ok(cell !== undefined);
    assert.equal(cell.value.meta.name, 'linkerd-admin', 'the Server binds the admin port');
    const policy = compileServer(cell.value, { localhost: compileAuthz(localhostAuthzOf(config, ws.index.pod('emojivoto', 'web-0'))) });

    mesh = await mkTestMesh(dirs);
    const [web, prometheus, grafana] = await Promise.all([
      mesh.issue('emojivoto', 'web'),
      mesh.issue('monitoring', 'prometheus'),
      mesh.issue('monitoring', 'grafana'),
    ]);
    certs.set('monitoring/prometheus', prometheus);
    certs.set('monitoring/grafana', grafana);
    admin = new AdminServer({
      host: HOST,
      port: 0,
      policies: { current: (p) => (p === ADMIN_POLICY_PORT ? policy : undefined) },
      isReady: () => true,
      registry: new MetricsRegistry(),
      debugPolicies: () => null,
      identity: web.identity,
      tls: new MeshTlsContext(web, mesh.anchorsPem),
    });
    port = await admin.start();
  });

  after(async () => {
    await admin?.close();
    dirs.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  /** `ward explain` of `GET path` (TCP without a path) from {@link FROM}, as the ServiceAccount or plaintext. */
  async function explain(path: string | undefined, sa: string | undefined): Promise<ExplainResult> {
    const io = bufferIo();
    const args = ['explain', '-f', file, '--to', `pod/emojivoto/web-0:${ADMIN_POLICY_PORT}`, '--from-ip', FROM, '-o', 'json'];
    if (path !== undefined) args.push('--http', `GET ${path}`);
    if (sa !== undefined) args.push('--from-sa', sa);
    await main(args, io);
    return JSON.parse(io.stdout) as ExplainResult;
  }

  /** A connection from {@link FROM}: mesh TLS to the pod's name with the ServiceAccount's certificate, or plaintext. */
  function connect(sa: string | undefined) {
    const cert = sa === undefined ? undefined : certs.get(sa);
    const tcp = netConnect({ host: HOST, port, localAddress: FROM });
    tcp.on('error', () => {});
    return cert === undefined
      ? tcp
      : tlsConnect({ ...new MeshTlsContext(cert, mesh.anchorsPem).clientOptions(mesh.identityOf('emojivoto', 'web')), socket: tcp });
  }

  /** GET `path` over {@link connect}. */
  function get(path: string, sa: string | undefined): Promise<number | 'closed'> {
    return within(
      new Promise((resolve, reject) => {
        const req = httpRequest({ host: HOST, port, path, createConnection: () => connect(sa) }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', (e: NodeJS.ErrnoException) => (e.code === 'ECONNRESET' ? resolve('closed') : reject(e)));
        req.end();
      }),
      5000,
      `GET ${path} as ${sa ?? 'plaintext'}`,
    );
  }

  for (const sa of ['monitoring/prometheus', 'monitoring/grafana', undefined]) {
    for (const path of ['/metrics', '/ready', '/live']) {
      it(`GET ${path} ${sa === undefined ? 'in plaintext' : `as ${sa}`}`, async () => {
        const verdict = await explain(path, sa);
        assert.equal(await get(path, sa), statusOf(verdict), `explain said ${verdict.decision} ${verdict.denyKind ?? ''}`);
      });
    }
  }

  it('a stream that is not HTTP: explain says closed, and the admin server serves nothing', async () => {
    const verdict = await explain(undefined, 'monitoring/prometheus');
    assert.equal(verdict.denyKind, 'tcp-refuse');
    assert.equal(verdict.level, 'tcp');
    const reply = await within(
      new Promise<string>((resolve) => {
        const s = connect('monitoring/prometheus');
        let got = '';
        s.on('data', (c: Buffer) => {
          got += c.toString('latin1');
        });
        s.on('error', () => {});
        s.once('close', () => resolve(got));
        s.end('\x00\x01 not http\r\n\r\n');
      }),
      5000,
      'the close',
    );
    // The HTTP parser's refusal, then the close: nothing is relayed anywhere.
    assert.ok(reply === '' || reply.startsWith('HTTP/1.1 400 Bad Request\r\n'), JSON.stringify(reply));
  });

  it('admits the Prometheus scrape and denies the others, as the policy says', async () => {
    assert.equal((await explain('/metrics', 'monitoring/prometheus')).decision, 'allow');
    assert.equal((await explain('/metrics', 'monitoring/grafana')).denyKind, 'http403');
    assert.equal((await explain('/metrics', undefined)).denyKind, 'http403');
  });
});
