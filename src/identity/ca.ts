/**
 * Identity material on disk: creating a trust anchor + issuer (`ward identity init`) and loading
 * and validating an issuer for the CA.
 *
 * Layout of an identity directory (all PEM):
 *   ca.crt      trust anchor(s): self-signed root CA, the bundle workloads trust
 *   ca.key      the anchor's key (PKCS#8, 0600) — only needed to issue a new issuer; keep offline
 *   issuer.crt  the issuer: an intermediate CA signed by the anchor (optionally followed by
 *               further intermediates up to, not including, the anchor)
 *   issuer.key  the issuer's key (PKCS#8, 0600)
 *   token.key   the key that signs local ServiceAccount tokens (PKCS#8, 0600)
 */
import type { KeyObject } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Diagnostic, Result } from '../core/index.js';
import { errorMessage, MeshError } from '../shared/index.js';
import { anchorOf, extensionOf, hasKeyUsageBit, KEY_USAGE_BITS, type ParsedCertificate, parseCertificatesPem, validityProblem, verifyChain } from './chain.js';
import { OIDS } from './csr.js';
import { identityDiagnostic } from './diagnostics.js';
import { createIntermediateCertificate, createRootCertificate, type LeafSigner, leafSignerOf } from './issue.js';
import { type CryptoKey, generateEcKeyPair, parsePrivateKeyPem, privateKeyToPem, toSigningKey } from './keys.js';
import { certificatesToPem } from './pem.js';

/** File names inside an identity directory. */
export const IDENTITY_FILES = {
  anchorCert: 'ca.crt',
  anchorKey: 'ca.key',
  issuerCert: 'issuer.crt',
  issuerKey: 'issuer.key',
  tokenKey: 'token.key',
} as const;

const HOUR_MS = 3_600_000;
/** Default lifetime of a generated trust anchor and issuer (the linkerd CLI's 1 year). */
export const DEFAULT_CA_TTL_MS = 8760 * HOUR_MS;
/** Default trust domain. */
export const DEFAULT_TRUST_DOMAIN = 'cluster.local';
/** Generated CA certificates start this much in the past, so a peer whose clock lags a little accepts them. */
const CA_BACKDATE_MS = 20_000;

const DNS_NAME = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$/;

/** True for a lower-case DNS name (what a trust domain must be). */
export function isDnsName(s: string): boolean {
  return DNS_NAME.test(s);
}

/** Options of {@link initIdentity}. */
export interface InitIdentityOptions {
  readonly outDir: string;
  readonly trustDomain?: string;
  readonly anchorTtlMs?: number;
  readonly issuerTtlMs?: number;
  /** Replace existing files instead of refusing. */
  readonly force?: boolean;
  readonly now?: number;
}

/** One file written by {@link initIdentity}. */
export interface WrittenFile {
  readonly path: string;
  /** What it holds, for people (`trust anchor certificate`, …). */
  readonly description: string;
  readonly mode: number;
}

/** What {@link initIdentity} created. */
export interface InitIdentityOutput {
  readonly files: readonly WrittenFile[];
  readonly anchorSubject: string;
  readonly issuerSubject: string;
  readonly anchorNotAfterMs: number;
  readonly issuerNotAfterMs: number;
}

/**
 * Creates a trust anchor (self-signed root CA `root.linkerd.<td>`), an issuer (intermediate CA
 * `identity.linkerd.<td>`, pathLen 0, signed by the anchor) and a token-signing key, all ECDSA
 * P-256, as PEM files in `outDir` (keys 0600). Refuses to overwrite any existing file unless
 * `force`; bad options and existing files are diagnostics. I/O failures throw `MeshError`
 * `ERR_IDENTITY_WRITE`.
 */
export async function initIdentity(opts: InitIdentityOptions): Promise<Result<InitIdentityOutput>> {
  const trustDomain = opts.trustDomain ?? DEFAULT_TRUST_DOMAIN;
  const anchorTtlMs = opts.anchorTtlMs ?? DEFAULT_CA_TTL_MS;
  const issuerTtlMs = opts.issuerTtlMs ?? DEFAULT_CA_TTL_MS;
  const now = opts.now ?? Date.now();
  const problems: Diagnostic[] = [];
  if (!isDnsName(trustDomain)) problems.push(identityDiagnostic('ID012', { option: 'trustDomain', detail: `"${trustDomain}" is not a lower-case DNS name` }));
  for (const [option, ms] of [
    ['anchorTtl', anchorTtlMs],
    ['issuerTtl', issuerTtlMs],
  ] as const) {
    if (!(Number.isFinite(ms) && ms >= 60_000)) problems.push(identityDiagnostic('ID012', { option, detail: `${ms} ms; must be at least one minute` }));
  }
  const paths = {
    anchorCert: join(opts.outDir, IDENTITY_FILES.anchorCert),
    anchorKey: join(opts.outDir, IDENTITY_FILES.anchorKey),
    issuerCert: join(opts.outDir, IDENTITY_FILES.issuerCert),
    issuerKey: join(opts.outDir, IDENTITY_FILES.issuerKey),
    tokenKey: join(opts.outDir, IDENTITY_FILES.tokenKey),
  };
  if (opts.force !== true) {
    for (const path of Object.values(paths)) if (exists(path)) problems.push(identityDiagnostic('ID009', { file: path }));
  }
  if (problems.length > 0) return { ok: false, diagnostics: problems };

  const notBeforeMs = now - CA_BACKDATE_MS;
  const anchorKeys = await generateEcKeyPair();
  const anchor = await createRootCertificate({ commonName: `root.linkerd.${trustDomain}`, notBeforeMs, notAfterMs: now + anchorTtlMs }, anchorKeys);
  const issuerKeys = await generateEcKeyPair();
  const issuer = await createIntermediateCertificate(
    // An issuer outliving its anchor would fail verification after the anchor expires anyway.
    { commonName: `identity.linkerd.${trustDomain}`, notBeforeMs, notAfterMs: Math.min(now + issuerTtlMs, anchor.notAfter.getTime()), pathLength: 0 },
    issuerKeys.publicKey,
    { cert: anchor, key: anchorKeys.privateKey },
  );
  const tokenKeys = await generateEcKeyPair();

  const files: [string, string, string, number][] = [
    [paths.anchorCert, anchor.toString('pem'), 'trust anchor certificate (give to workloads)', 0o644],
    [paths.anchorKey, await privateKeyToPem(anchorKeys.privateKey), 'trust anchor key (keep offline)', 0o600],
    [paths.issuerCert, issuer.toString('pem'), 'issuer certificate', 0o644],
    [paths.issuerKey, await privateKeyToPem(issuerKeys.privateKey), 'issuer key', 0o600],
    [paths.tokenKey, await privateKeyToPem(tokenKeys.privateKey), 'token signing key', 0o600],
  ];
  try {
    mkdirSync(opts.outDir, { recursive: true, mode: 0o700 });
    for (const [path, text, , mode] of files) writeSecure(path, text.endsWith('\n') ? text : `${text}\n`, mode, opts.force === true);
  } catch (e) {
    throw new MeshError('ERR_IDENTITY_WRITE', `cannot write identity material to ${opts.outDir}: ${errorMessage(e)}`, { cause: e });
  }
  return {
    ok: true,
    value: {
      files: files.map(([path, , description, mode]) => ({ path, description, mode })),
      anchorSubject: anchor.subject,
      issuerSubject: issuer.subject,
      anchorNotAfterMs: anchor.notAfter.getTime(),
      issuerNotAfterMs: issuer.notAfter.getTime(),
    },
    diagnostics: [],
  };
}

function exists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** Creates the file with its final mode (no window where a key is readable by others); a forced write replaces the file. */
function writeSecure(path: string, text: string, mode: number, force: boolean): void {
  if (force) rmSync(path, { force: true });
  writeFileSync(path, text, { mode, flag: 'wx' });
}

/**
 * A validated issuer: the CA's signing credentials. Immutable; the reloader swaps whole issuers.
 */
export interface Issuer {
  /** The issuer certificate first (what signs leaves), then any further intermediates (never the root), DER. */
  readonly chainDer: readonly Uint8Array[];
  /** The same chain as PEM. */
  readonly chainPem: string;
  /** The trust anchors (ca.crt) as PEM. */
  readonly anchorsPem: string;
  /** Subject of the issuer certificate (`CN=identity.linkerd.cluster.local`). */
  readonly subject: string;
  readonly notBeforeMs: number;
  /** NotAfter of the issuer certificate itself. */
  readonly notAfterMs: number;
  /** The earliest NotAfter across the issuer chain and the anchor that verifies it; leaves never outlive it. */
  readonly chainNotAfterMs: number;
  /** SHA-256 fingerprint of the issuer certificate (`AB:CD:…`), to tell issuers apart in logs. */
  readonly fingerprintSha256: string;
  /** The issuer's private key (non-extractable WebCrypto key), e.g. to sign an intermediate CA below it. */
  readonly signingKey: CryptoKey;
  /** What signing workload certificates needs (issuer name, AKI, the key as a KeyObject), precomputed. */
  readonly leafSigner: LeafSigner;
}

/** PEM texts of an issuer, plus the names to use for them in messages. */
export interface IssuerMaterial {
  readonly anchorsPem: string;
  readonly certPem: string;
  readonly keyPem: string;
  readonly files?: { readonly anchors: string; readonly cert: string; readonly key: string };
}

/**
 * Reads `ca.crt`, `issuer.crt` and `issuer.key` from `dir` and validates them
 * ({@link validateIssuer}). Unreadable files are diagnostics (`ID001`), never exceptions.
 */
export async function loadIssuer(dir: string, now: number = Date.now()): Promise<Result<Issuer>> {
  const files = {
    anchors: join(dir, IDENTITY_FILES.anchorCert),
    cert: join(dir, IDENTITY_FILES.issuerCert),
    key: join(dir, IDENTITY_FILES.issuerKey),
  };
  const texts: Partial<Record<keyof typeof files, string>> = {};
  const problems: Diagnostic[] = [];
  for (const [k, file] of Object.entries(files) as [keyof typeof files, string][]) {
    try {
      texts[k] = readFileSync(file, 'utf8');
    } catch (e) {
      problems.push(identityDiagnostic('ID001', { file, detail: ioDetail(e) }));
    }
  }
  if (texts.anchors === undefined || texts.cert === undefined || texts.key === undefined) return { ok: false, diagnostics: problems };
  return validateIssuer({ anchorsPem: texts.anchors, certPem: texts.cert, keyPem: texts.key, files }, now);
}

function ioDetail(e: unknown): string {
  const code = (e as { code?: unknown }).code;
  if (code === 'ENOENT') return 'no such file';
  if (code === 'EACCES') return 'permission denied';
  if (code === 'EISDIR') return 'is a directory';
  return errorMessage(e);
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Validates issuer material: the anchors parse and are CAs; the issuer certificate parses, is a
 * CA allowed to sign certificates, matches the key (an ECDSA key), chains to an anchor by
 * signature, and every certificate involved is valid at `now`. Collects every problem found.
 */
export async function validateIssuer(material: IssuerMaterial, now: number = Date.now()): Promise<Result<Issuer>> {
  const files = material.files ?? { anchors: IDENTITY_FILES.anchorCert, cert: IDENTITY_FILES.issuerCert, key: IDENTITY_FILES.issuerKey };
  const problems: Diagnostic[] = [];

  const anchorsParsed = parseCertificatesPem(material.anchorsPem);
  let anchors: ParsedCertificate[] = [];
  if (!anchorsParsed.ok) problems.push(identityDiagnostic('ID002', { file: files.anchors, detail: anchorsParsed.detail }));
  else {
    for (const a of anchorsParsed.certs) if (!a.node.ca) problems.push(identityDiagnostic('ID011', { file: files.anchors, subject: a.subject }));
    anchors = anchorsParsed.certs.filter((a) => a.node.ca);
  }

  const chainParsed = parseCertificatesPem(material.certPem);
  if (!chainParsed.ok) problems.push(identityDiagnostic('ID002', { file: files.cert, detail: chainParsed.detail }));
  const key = parsePrivateKeyPem(material.keyPem);
  if (!key.ok) problems.push(identityDiagnostic('ID003', { file: files.key, detail: key.detail }));
  else if (key.curve !== 'P-256' && key.curve !== 'P-384') problems.push(identityDiagnostic('ID010', { keyFile: files.key, keyType: key.description }));
  if (!chainParsed.ok) return { ok: false, diagnostics: problems };

  const chain = chainParsed.certs;
  const issuer = chain[0] as ParsedCertificate;
  const subject = issuer.subject;
  const notCa = caProblem(issuer);
  if (notCa !== undefined) problems.push(identityDiagnostic('ID004', { file: files.cert, subject, detail: notCa }));
  if (key.ok && !safeCheckPrivateKey(issuer, key.key)) problems.push(identityDiagnostic('ID005', { file: files.cert, keyFile: files.key, subject }));
  for (const cert of chain) {
    if (now > cert.notAfterMs) problems.push(identityDiagnostic('ID007', { file: files.cert, subject: cert.subject, notAfter: iso(cert.notAfterMs) }));
    else if (now < cert.notBeforeMs) problems.push(identityDiagnostic('ID008', { file: files.cert, subject: cert.subject, notBefore: iso(cert.notBeforeMs) }));
  }
  if (anchors.length > 0) {
    const broken = verifyChain(chain, anchors);
    if (broken !== undefined) problems.push(identityDiagnostic('ID006', { file: files.cert, subject, anchorFile: files.anchors, detail: broken }));
    else {
      const anchor = anchorOf(chain, anchors) as ParsedCertificate;
      const anchorProblem = validityProblem(anchor, now);
      if (anchorProblem !== undefined) {
        const code = now > anchor.notAfterMs ? 'ID007' : 'ID008';
        problems.push(
          identityDiagnostic(code, { file: files.anchors, subject: anchor.subject, notAfter: iso(anchor.notAfterMs), notBefore: iso(anchor.notBeforeMs) }),
        );
      }
    }
  }
  let leafSigner: LeafSigner | undefined;
  if (key.ok) {
    try {
      leafSigner = leafSignerOf(issuer.der, key.key);
    } catch (e) {
      problems.push(identityDiagnostic('ID002', { file: files.cert, detail: `the issuer certificate is not strict DER (${errorMessage(e)})` }));
    }
  }
  if (problems.length > 0 || !key.ok || leafSigner === undefined) return { ok: false, diagnostics: problems };

  const anchor = anchorOf(chain, anchors) as ParsedCertificate;
  return {
    ok: true,
    value: {
      chainDer: chain.map((c) => c.der),
      chainPem: certificatesToPem(chain.map((c) => c.der)),
      anchorsPem: material.anchorsPem,
      subject,
      notBeforeMs: issuer.notBeforeMs,
      notAfterMs: issuer.notAfterMs,
      chainNotAfterMs: Math.min(...chain.map((c) => c.notAfterMs), anchor.notAfterMs),
      fingerprintSha256: issuer.node.fingerprint256,
      signingKey: await toSigningKey(key.key),
      leafSigner,
    },
    diagnostics: [],
  };
}

function caProblem(cert: ParsedCertificate): string | undefined {
  if (!cert.node.ca) return 'basicConstraints CA:TRUE is missing';
  const ku = extensionOf(cert, OIDS.keyUsage);
  // A CA without a keyUsage extension may sign (RFC 5280 4.2.1.3).
  if (ku !== undefined && !hasKeyUsageBit(ku.value, KEY_USAGE_BITS.keyCertSign)) return 'keyUsage lacks keyCertSign';
  return undefined;
}

function safeCheckPrivateKey(cert: ParsedCertificate, key: KeyObject): boolean {
  try {
    return cert.node.checkPrivateKey(key);
  } catch {
    return false;
  }
}
