/**
 * startProxyIdentity against a real in-process identity service (gRPC over TLS on 127.0.0.1,
 * backed by a CertificateAuthority): first certificate, renewal, refusals, and a mesh handshake
 * between two bootstrapped proxies.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { connect, createServer, type TLSSocket } from 'node:tls';
import { type CertifyFunction, type GrpcServerHandle, identityService, startGrpcServer } from '../../api/index.js';
import type { RenewalFailure, WorkloadCertificate } from '../../identity/index.js';
import { Backoff, hasCode } from '../../shared/index.js';
import { mkTestMesh, TempDirs, type TestMesh, waitFor, within } from '../testing/identity.js';
import { clientIdentityOf, MeshTlsContext } from './context.js';
import { type ProxyIdentity, type ProxyIdentityOptions, startProxyIdentity } from './identity-bootstrap.js';

const SERVER_NAME = 'linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local';

const dirs = new TempDirs();
const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  dirs.cleanup();
});

let mesh: TestMesh;
let foreign: TestMesh;
/** Set by a test to make the CA refuse (as UNAVAILABLE) until cleared. */
let outage = false;
/** Certify requests received, by requested identity. */
const requests = new Map<string, number>();
let server: GrpcServerHandle;

async function serveIdentity(ca: TestMesh, certify: CertifyFunction, names = [SERVER_NAME]): Promise<GrpcServerHandle> {
  const creds = await ca.ca.issueServerCertificate(names);
  const s = await startGrpcServer({
    host: '127.0.0.1',
    port: 0,
    tls: { certPem: creds.certPem + creds.chainPem, keyPem: creds.keyPem },
    services: [identityService(certify)],
  });
  cleanups.push(() => s.close(0));
  return s;
}

before(async () => {
  [mesh, foreign] = await Promise.all([mkTestMesh(dirs), mkTestMesh(dirs)]);
  server = await serveIdentity(mesh, async (req) => {
    requests.set(req.identity, (requests.get(req.identity) ?? 0) + 1);
    if (outage) return { ok: false, code: 'UNAVAILABLE', message: 'Certify: issuer not initialized' };
    return mesh.ca.certify(req);
  });
});

function start(opts: Partial<ProxyIdentityOptions> & { sa?: string } = {}): ProxyIdentity {
  const sa = opts.sa ?? 'web';
  const id = startProxyIdentity({
    identity: mesh.identityOf('emojivoto', sa),
    identityAddress: `127.0.0.1:${server.port}`,
    identityServerName: SERVER_NAME,
    trustAnchorsPem: mesh.anchorsPem,
    tokenSource: () => mesh.token('emojivoto', sa),
    backoff: new Backoff({ minMs: 20, maxMs: 50, jitter: 0 }),
    ...opts,
  });
  cleanups.push(() => id.stop());
  return id;
}

const serialOf = (c: WorkloadCertificate) => new X509Certificate(c.certPem).serialNumber;

describe('startProxyIdentity', () => {
  it('obtains a certificate for its identity over TLS and renews it', async () => {
    const rotated: WorkloadCertificate[] = [];
    const id = start({ maxRefreshMs: 100 });
    id.onRotated((c) => rotated.push(c));
    assert.equal(id.current(), undefined);

    const first = await within(id.ready(), 10_000, 'the first certificate');
    assert.equal(first.identity, mesh.identityOf('emojivoto', 'web'));
    assert.equal(new X509Certificate(first.certPem).subjectAltName, `DNS:${first.identity}`);
    assert.ok(new X509Certificate(first.certPem).checkIssued(new X509Certificate(first.chainPem)), 'issued by the issuer it sent');
    assert.ok(first.notAfterMs > Date.now() + 23 * 3_600_000);

    await waitFor(() => rotated.length >= 3, 'two renewals', 10_000);
    assert.equal(rotated[0], first, 'listeners see the first certificate too');
    const serials = new Set(rotated.map(serialOf));
    assert.equal(serials.size, rotated.length, 'each renewal is a new certificate');
    assert.ok(
      rotated.every((c) => c.keyPem === first.keyPem),
      'the key is generated once and reused',
    );
    assert.equal(id.current(), rotated.at(-1));
    // Every certificate loads as mesh TLS material.
    new MeshTlsContext(rotated.at(-1) as WorkloadCertificate, mesh.anchorsPem);

    id.stop();
    const count = rotated.length;
    await new Promise((r) => setTimeout(r, 250));
    assert.equal(rotated.length, count, 'no renewal after stop');
    assert.equal(id.current(), rotated.at(-1), 'the certificate stays readable');
  });

  it('keeps the current certificate when a renewal fails, and recovers', async () => {
    const failures: RenewalFailure[] = [];
    const rotated: WorkloadCertificate[] = [];
    const id = start({ maxRefreshMs: 50, onFailure: (f) => failures.push(f) });
    id.onRotated((c) => rotated.push(c));
    const first = await within(id.ready(), 10_000, 'the first certificate');
    outage = true;
    try {
      await waitFor(() => failures.length >= 2, 'failed renewals');
      assert.equal(failures[0]?.code, 'UNAVAILABLE');
      assert.equal(id.current(), rotated.at(-1), 'the last certificate stays in use');
    } finally {
      outage = false;
    }
    const n = rotated.length;
    await waitFor(() => rotated.length > n, 'a renewal after the outage');
    assert.notEqual(serialOf(id.current() as WorkloadCertificate), serialOf(first));
    id.stop();
  });

  it('refuses an identity server that does not prove the expected name', async () => {
    const failures: RenewalFailure[] = [];
    const id = start({
      sa: 'wrong-name',
      identityServerName: 'linkerd-identity.other.serviceaccount.identity.linkerd.cluster.local',
      onFailure: (f) => failures.push(f),
    });
    await waitFor(() => failures.length >= 2, 'failures');
    assert.equal(failures[0]?.code, 'UNAVAILABLE');
    assert.equal(id.current(), undefined);
    assert.equal(requests.get(id.identity), undefined, 'no request reached the server');
    const ready = id.ready();
    id.stop();
    await assert.rejects(ready, (e) => hasCode(e, 'ERR_IDENTITY_STOPPED'));
  });

  it('refuses an identity server whose certificate chains to other anchors', async () => {
    let reached = 0;
    const impostor = await serveIdentity(foreign, async (req) => {
      reached++;
      return foreign.ca.certify(req);
    });
    const failures: RenewalFailure[] = [];
    const id = start({ identityAddress: `127.0.0.1:${impostor.port}`, onFailure: (f) => failures.push(f) });
    await waitFor(() => failures.length >= 2, 'failures');
    assert.equal(failures[0]?.code, 'UNAVAILABLE');
    assert.equal(reached, 0);
    assert.equal(id.current(), undefined);
  });

  it('reports the CA refusing a token for another ServiceAccount', async () => {
    const failures: RenewalFailure[] = [];
    const id = start({ tokenSource: () => mesh.token('emojivoto', 'emoji'), onFailure: (f) => failures.push(f) });
    await waitFor(() => failures.length >= 1, 'a failure');
    assert.equal(failures[0]?.code, 'FAILED_PRECONDITION');
    assert.match(failures[0]?.message ?? '', /did not match/);
    assert.equal(id.current(), undefined);
  });

  it('two bootstrapped proxies speak mesh TLS with each other', async () => {
    const web = start({ sa: 'web' });
    const bot = start({ sa: 'vote-bot' });
    const [webCert, botCert] = await within(Promise.all([web.ready(), bot.ready()]), 10_000, 'both certificates');
    const webTls = new MeshTlsContext(webCert, mesh.anchorsPem);
    web.onRotated((c) => webTls.rotate(c));
    const botTls = new MeshTlsContext(botCert, mesh.anchorsPem);

    const tlsServer = createServer(webTls.serverOptions(), (socket: TLSSocket) => socket.end(`${clientIdentityOf(socket) ?? '-'}\n`));
    await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => tlsServer.close(resolve)));
    const port = (tlsServer.address() as AddressInfo).port;

    const line = await within(
      new Promise<string>((resolve, reject) => {
        const socket = connect({ ...botTls.clientOptions(web.identity), host: '127.0.0.1', port });
        let data = '';
        socket.setEncoding('utf8');
        socket.on('data', (d: string) => {
          data += d;
        });
        socket.on('end', () => resolve(data.trim()));
        socket.on('error', reject);
      }),
      5000,
      'the handshake',
    );
    assert.equal(line, bot.identity);
  });

  it('throws for trust anchors that do not parse, without leaking a channel', () => {
    assert.throws(
      () =>
        startProxyIdentity({
          identity: mesh.identityOf('emojivoto', 'web'),
          identityAddress: '127.0.0.1:1',
          identityServerName: SERVER_NAME,
          trustAnchorsPem: 'not a certificate',
          tokenSource: () => new Uint8Array([1]),
        }),
      (e) => hasCode(e, 'ERR_IDENTITY_ANCHORS'),
    );
  });
});
