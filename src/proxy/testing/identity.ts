/**
 * Identity material for this module's tests (not part of the public surface): a trust anchor,
 * issuer and token key made with `initIdentity` in a temp directory, and workload certificates
 * issued in-process by a `CertificateAuthority`.
 */
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CertificateAuthority,
  type CertificateAuthorityOptions,
  createCsr,
  generateWorkloadKey,
  IDENTITY_FILES,
  initIdentity,
  LocalTokenAuthenticator,
  loadIssuer,
  mintToken,
  type WorkloadCertificate,
  type WorkloadKey,
} from '../../identity/index.js';

export { waitFor, within } from '../../shared/testing/waits.js';

/** Temp directories of a test file; `cleanup()` removes them all. */
export class TempDirs {
  readonly #dirs: string[] = [];

  /** A fresh empty directory. */
  make(prefix = 'ward-proxy-'): string {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    this.#dirs.push(dir);
    return dir;
  }

  /** Removes every directory made. */
  cleanup(): void {
    for (const d of this.#dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  }
}

/** A test mesh: one trust anchor + issuer, a CA over them, and helpers to issue credentials. */
export interface TestMesh {
  readonly dir: string;
  readonly anchorsPem: string;
  readonly tokenKeyPem: string;
  readonly ca: CertificateAuthority;
  /** `<sa>.<ns>.serviceaccount.identity.linkerd.cluster.local`. */
  identityOf(ns: string, sa: string): string;
  /** A ServiceAccount token for ns/sa, as bytes. */
  token(ns: string, sa: string, now?: number): Uint8Array;
  /** A certificate for ns/sa issued by the CA as if at `now` (default: now). */
  issue(ns: string, sa: string, opts?: { now?: number; key?: WorkloadKey }): Promise<WorkloadCertificate>;
}

/** Makes identity material in a new temp dir and a CA over it (trust domain cluster.local, control plane `linkerd`). */
export async function mkTestMesh(dirs: TempDirs, caOpts: Partial<CertificateAuthorityOptions> = {}): Promise<TestMesh> {
  const dir = dirs.make();
  const init = await initIdentity({ outDir: dir, force: true });
  if (!init.ok) throw new Error(`initIdentity: ${init.diagnostics.map((d) => d.message).join('; ')}`);
  const issuer = await loadIssuer(dir);
  if (!issuer.ok) throw new Error(`loadIssuer: ${issuer.diagnostics.map((d) => d.message).join('; ')}`);
  const tokenKeyPem = readFileSync(join(dir, IDENTITY_FILES.tokenKey), 'utf8');
  const ca = new CertificateAuthority({
    issuer: issuer.value,
    authenticator: new LocalTokenAuthenticator({ keyPem: tokenKeyPem }),
    trustDomain: 'cluster.local',
    controlPlaneNamespace: 'linkerd',
    ...caOpts,
  });
  const token = (ns: string, sa: string, now = Date.now()) =>
    new TextEncoder().encode(mintToken({ signerKeyPem: tokenKeyPem, namespace: ns, serviceAccount: sa, now }));
  return {
    dir,
    anchorsPem: readFileSync(join(dir, IDENTITY_FILES.anchorCert), 'utf8'),
    tokenKeyPem,
    ca,
    identityOf: (ns, sa) => ca.identityOf(ns, sa),
    token,
    issue: async (ns, sa, opts = {}) => {
      const now = opts.now ?? Date.now();
      const identity = ca.identityOf(ns, sa);
      const key = opts.key ?? (await generateWorkloadKey());
      const res = await ca.certify({ identity, token: token(ns, sa, now), csrDer: await createCsr(identity, key) }, now);
      if (!res.ok) throw new Error(`certify: ${res.code} ${res.message}`);
      return {
        identity,
        certPem: new X509Certificate(res.leafDer).toString(),
        keyPem: key.keyPem,
        chainPem: res.chainDer.map((d) => new X509Certificate(d).toString()).join(''),
        notAfterMs: res.validUntilMs,
      };
    },
  };
}
