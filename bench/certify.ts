/**
 * `npm run bench -- certify`: certificates the CA issues per second on one core (one Node
 * thread): token verification (ES256), CSR parse and signature check, leaf signing. Measured
 * in-process (the CA's own cost) and through the real gRPC Identity API on loopback with TLS
 * (what a proxy sees; the client shares the core budget of this machine). Target: > 300/s.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { IdentityClient, identityService, startGrpcServer } from '../src/api/index.js';
import { CertificateAuthority, createCsr, generateWorkloadKey, initIdentity, LocalTokenAuthenticator, loadIssuer, mintToken } from '../src/identity/index.js';
import type { BenchResult } from './harness.js';

const TARGET_PER_SEC = 300;
const REGRESSION_FLOOR_PER_SEC = 1000;
const REQUESTS = 3000;
const TIME_BOUND_MS = 20_000;

interface Request {
  readonly identity: string;
  readonly token: Uint8Array;
  readonly csrDer: Uint8Array;
}

/** Runs the certify suite. */
export async function runCertifySuite(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'ward-bench-certify-'));
  try {
    const init = await initIdentity({ outDir: dir });
    if (!init.ok) throw new Error(`identity init failed: ${init.diagnostics.map((d) => d.message).join('; ')}`);
    const issuer = await loadIssuer(dir);
    if (!issuer.ok) throw new Error('issuer does not load');
    const signerKeyPem = readFileSync(join(dir, 'token.key'), 'utf8');
    const ca = new CertificateAuthority({
      issuer: issuer.value,
      authenticator: new LocalTokenAuthenticator({ keyPem: signerKeyPem }),
      trustDomain: 'cluster.local',
      controlPlaneNamespace: 'linkerd',
    });
    // Distinct workloads: 50 ServiceAccounts, each its own key, CSR and token.
    const requests: Request[] = [];
    for (let i = 0; i < 50; i++) {
      const sa = `sa-${i}`;
      const identity = `${sa}.bench.serviceaccount.identity.linkerd.cluster.local`;
      const key = await generateWorkloadKey();
      requests.push({
        identity,
        token: new TextEncoder().encode(mintToken({ signerKeyPem, namespace: 'bench', serviceAccount: sa, ttlMs: 3_600_000 })),
        csrDer: await createCsr(identity, key),
      });
    }
    const results: BenchResult[] = [];

    // In-process, sequential: the CA's cost per certificate.
    for (let i = 0; i < 20; i++) await ca.certify(requests[i % requests.length] as Request); // warm-up
    let issued = 0;
    const t0 = performance.now();
    for (let i = 0; i < REQUESTS && performance.now() - t0 < TIME_BOUND_MS; i++) {
      const r = await ca.certify(requests[i % requests.length] as Request);
      if (!r.ok) throw new Error(`certify refused: ${r.message}`);
      issued++;
    }
    const inProcessMs = performance.now() - t0;
    const perSec = (issued * 1000) / inProcessMs;
    results.push({
      name: 'certify in-process (one core)',
      nsPerOp: (inProcessMs * 1e6) / issued,
      opsPerSec: perSec,
      targetPerSec: TARGET_PER_SEC,
      meetsTarget: perSec > TARGET_PER_SEC,
      // The issue's target is 300/s; we hold ourselves to this floor to catch regressions.
      regressionFloorPerSec: REGRESSION_FLOOR_PER_SEC,
      meetsFloor: perSec > REGRESSION_FLOOR_PER_SEC,
      issued,
    });

    // Through gRPC + TLS on loopback, 16 in flight (server and client share this process).
    const serverCert = await ca.issueServerCertificate(['linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local']);
    const server = await startGrpcServer({
      host: '127.0.0.1',
      port: 0,
      tls: { certPem: serverCert.certPem + serverCert.chainPem, keyPem: serverCert.keyPem },
      services: [
        identityService(async (req) => {
          const r = await ca.certify(req);
          return r.ok
            ? { ok: true, leafDer: r.leafDer, chainDer: [...r.chainDer], validUntilMs: r.validUntilMs }
            : { ok: false, code: r.code, message: r.message };
        }),
      ],
    });
    const client = new IdentityClient({
      address: `127.0.0.1:${server.port}`,
      tls: { caPem: issuer.value.anchorsPem, serverName: 'linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local' },
    });
    try {
      await client.certify(requests[0] as Request);
      let next = 0;
      let done = 0;
      const t1 = performance.now();
      const worker = async () => {
        while (next < REQUESTS && performance.now() - t1 < TIME_BOUND_MS) {
          const req = requests[next++ % requests.length] as Request;
          await client.certify(req);
          done++;
        }
      };
      await Promise.all(Array.from({ length: 16 }, worker));
      const grpcMs = performance.now() - t1;
      results.push({
        name: 'certify over gRPC+TLS, 16 in flight',
        nsPerOp: (grpcMs * 1e6) / done,
        opsPerSec: (done * 1000) / grpcMs,
        issued: done,
      });
    } finally {
      client.close();
      await server.close(1000);
    }
    return results;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
