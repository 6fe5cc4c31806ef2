/**
 * Builders shared by this module's tests (not part of the public surface).
 */
import { execFileSync } from 'node:child_process';
import { createPrivateKey, type webcrypto } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IDENTITY_FILES, type InitIdentityOptions, type Issuer, initIdentity, loadIssuer } from './ca.js';
import { CertificateAuthority, type CertificateAuthorityOptions } from './certify.js';
import { createIntermediateCertificate, createRootCertificate } from './issue.js';
import { ECDSA_P256_SHA256, type EcKeyPair, generateEcKeyPair, privateKeyToPem, toSigningKey } from './keys.js';
import { LocalTokenAuthenticator, mintToken } from './token.js';
import { x509 } from './x509.js';

/** Temp directories created by a test file; `cleanup()` removes them all. */
export class TempDirs {
  readonly #dirs: string[] = [];
  make(prefix = 'ward-identity-'): string {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    this.#dirs.push(dir);
    return dir;
  }
  cleanup(): void {
    for (const d of this.#dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  }
}

/** `ward identity init` into a fresh directory; throws if it reports problems. */
export async function mkIdentityDir(dirs: TempDirs, opts: Partial<InitIdentityOptions> = {}): Promise<string> {
  const outDir = dirs.make();
  const res = await initIdentity({ outDir, force: true, ...opts });
  if (!res.ok) throw new Error(`init failed: ${res.diagnostics.map((d) => d.message).join('; ')}`);
  return outDir;
}

/** Loads an issuer that must be valid. */
export async function mustLoadIssuer(dir: string, now = Date.now()): Promise<Issuer> {
  const res = await loadIssuer(dir, now);
  if (!res.ok) throw new Error(`load failed: ${res.diagnostics.map((d) => `${d.code} ${d.message}`).join('; ')}`);
  return res.value;
}

/** The token key PEM of an identity dir. */
export function tokenKeyOf(dir: string): string {
  return readFileSync(join(dir, IDENTITY_FILES.tokenKey), 'utf8');
}

/** A CA over an identity dir's issuer and token key (trust domain cluster.local, control plane linkerd). */
export async function mkCa(dir: string, opts: Partial<CertificateAuthorityOptions> = {}, now = Date.now()): Promise<CertificateAuthority> {
  return new CertificateAuthority({
    issuer: await mustLoadIssuer(dir, now),
    authenticator: new LocalTokenAuthenticator({ keyPem: tokenKeyOf(dir) }),
    trustDomain: 'cluster.local',
    controlPlaneNamespace: 'linkerd',
    ...opts,
  });
}

/** `<sa>.<ns>.serviceaccount.identity.linkerd.cluster.local`. */
export const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;

/** A token for ns/sa signed with the dir's token key, as bytes. */
export function tokenFor(dir: string, ns: string, sa: string, now = Date.now()): Uint8Array {
  return new TextEncoder().encode(mintToken({ signerKeyPem: tokenKeyOf(dir), namespace: ns, serviceAccount: sa, now }));
}

/** A CSR with arbitrary subject and SANs (for refusal cases). */
export async function mkCsr(opts: {
  cn?: string | undefined;
  sans?: { type: 'dns' | 'ip' | 'url' | 'email'; value: string }[];
  keys?: EcKeyPair | webcrypto.CryptoKeyPair;
  signingAlgorithm?: { name: string; hash: string; namedCurve?: string };
}): Promise<Uint8Array> {
  const keys = opts.keys ?? (await generateEcKeyPair());
  const lib = x509();
  const csr = await lib.Pkcs10CertificateRequestGenerator.create({
    ...(opts.cn !== undefined ? { name: [{ CN: [opts.cn] }] } : {}),
    keys,
    signingAlgorithm: opts.signingAlgorithm ?? ECDSA_P256_SHA256,
    extensions: opts.sans !== undefined && opts.sans.length > 0 ? [new lib.SubjectAlternativeNameExtension(opts.sans)] : [],
  });
  return new Uint8Array(csr.rawData);
}

/** Runs the openssl CLI; returns stdout+stderr and the exit status. */
export function openssl(args: string[]): { status: number; output: string } {
  try {
    const out = execFileSync('openssl', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 10_000 });
    return { status: 0, output: out };
  } catch (e) {
    const err = e as { status?: number; stdout?: string; stderr?: string };
    return { status: err.status ?? 1, output: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

/** Writes `text` to `dir/name` and returns the path. */
export function put(dir: string, name: string, text: string | Uint8Array): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/**
 * An identity dir whose issuer sits below an extra intermediate: ca.crt = root,
 * issuer.crt = issuer + intermediate, issuer.key. Optional lifetimes per level.
 */
export async function mkThreeLevelDir(dirs: TempDirs, opts: { now?: number; intermediateTtlMs?: number } = {}): Promise<string> {
  const now = opts.now ?? Date.now();
  const dir = dirs.make();
  const rootKeys = await generateEcKeyPair();
  const root = await createRootCertificate({ commonName: 'root.test', notBeforeMs: now - 60_000, notAfterMs: now + 100 * 3_600_000 }, rootKeys);
  const midKeys = await generateEcKeyPair();
  const mid = await createIntermediateCertificate(
    { commonName: 'mid.test', notBeforeMs: now - 60_000, notAfterMs: now + (opts.intermediateTtlMs ?? 50 * 3_600_000), pathLength: 1 },
    midKeys.publicKey,
    { cert: root, key: rootKeys.privateKey },
  );
  const issuerKeys = await generateEcKeyPair();
  const issuer = await createIntermediateCertificate(
    { commonName: 'issuer.test', notBeforeMs: now - 60_000, notAfterMs: now + 90 * 3_600_000, pathLength: 0 },
    issuerKeys.publicKey,
    { cert: mid, key: midKeys.privateKey },
  );
  put(dir, IDENTITY_FILES.anchorCert, root.toString('pem'));
  put(dir, IDENTITY_FILES.issuerCert, `${issuer.toString('pem')}\n${mid.toString('pem')}\n`);
  put(dir, IDENTITY_FILES.issuerKey, await privateKeyToPem(issuerKeys.privateKey));
  put(dir, IDENTITY_FILES.tokenKey, await privateKeyToPem((await generateEcKeyPair()).privateKey));
  return dir;
}

/** A new issuer (key + certificate) signed by the dir's anchor, as PEM; optionally written into the dir. */
export async function rotateIssuer(dir: string, opts: { write?: boolean; commonName?: string } = {}): Promise<{ certPem: string; keyPem: string }> {
  const anchorPem = readFileSync(join(dir, IDENTITY_FILES.anchorCert), 'utf8');
  const anchorKey = await toSigningKey(createPrivateKey(readFileSync(join(dir, IDENTITY_FILES.anchorKey), 'utf8')));
  const anchor = new (x509().X509Certificate)(anchorPem);
  const keys = await generateEcKeyPair();
  const now = Date.now();
  const cert = await createIntermediateCertificate(
    { commonName: opts.commonName ?? 'identity.linkerd.cluster.local', notBeforeMs: now - 60_000, notAfterMs: now + 10 * 3_600_000, pathLength: 0 },
    keys.publicKey,
    { cert: anchor, key: anchorKey },
  );
  const out = { certPem: `${cert.toString('pem')}\n`, keyPem: await privateKeyToPem(keys.privateKey) };
  if (opts.write !== false) {
    put(dir, IDENTITY_FILES.issuerCert, out.certPem);
    put(dir, IDENTITY_FILES.issuerKey, out.keyPem);
  }
  return out;
}

/** `next()` resolves with the next value passed to `callback` (queued if it came earlier), or rejects after `ms`. */
export function nextCall<T>(defaultMs = 5000): { callback: (v: T) => void; next: (ms?: number) => Promise<T> } {
  let waiters: ((v: T) => void)[] = [];
  const queue: T[] = [];
  return {
    callback: (v: T) => {
      const w = waiters.shift();
      if (w !== undefined) w(v);
      else queue.push(v);
    },
    next: (ms = defaultMs) => {
      const queued = queue.shift();
      if (queued !== undefined) return Promise.resolve(queued);
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters = waiters.filter((w) => w !== done);
          reject(new Error(`no call within ${ms} ms`));
        }, ms);
        const done = (v: T) => {
          clearTimeout(timer);
          resolve(v);
        };
        waiters.push(done);
      });
    },
  };
}
