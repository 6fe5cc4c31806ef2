/**
 * The workload side of identity (what upstream's proxy-identity wrapper and the proxy do): an
 * ECDSA P-256 key generated once at start, a CSR with CN = DNS SAN = the identity, and a
 * certificate obtained from the CA and renewed before it expires.
 */
import { generateKeyPair, KeyObject, sign } from 'node:crypto';
import { Backoff, errorMessage, type Logger, MeshError, silentLogger, type Timers, UNREF_TIMERS } from '../shared/index.js';
import type { CertifyErrorCode, CertifyRequest, CertifyResult } from './certify.js';
import { dnsNamesOf, type ParsedCertificate, parseCertificate, parseCertificatesPem, verifyChain } from './chain.js';
import { OIDS } from './csr.js';
import { bitString, directoryString, explicit, ia5Content, implicitPrimitive, integer, octetString, oid, sequence, set } from './der.js';
import { type CryptoKey, WORKLOAD_CURVE } from './keys.js';
import { certificatesToPem, encodePem } from './pem.js';

/** A workload's key pair and its PKCS#8 PEM (for node:tls). */
export interface WorkloadKey {
  readonly privateKey: KeyObject;
  readonly publicKey: KeyObject;
  readonly keyPem: string;
}

/** A key pair {@link createCsr} signs with: node:crypto's keys or WebCrypto's. */
export interface CsrKeyPair {
  readonly privateKey: KeyObject | CryptoKey;
  readonly publicKey: KeyObject | CryptoKey;
}

/**
 * A fresh ECDSA P-256 workload key. Through node:crypto's `KeyObject`, not WebCrypto: the proxy
 * makes one key per process and never loads WebCrypto (its modules, WebIDL) for it.
 */
export function generateWorkloadKey(): Promise<WorkloadKey> {
  return new Promise((resolve, reject) => {
    generateKeyPair('ec', { namedCurve: WORKLOAD_CURVE }, (err, publicKey, privateKey) => {
      if (err !== null) reject(err);
      else resolve({ privateKey, publicKey, keyPem: encodePem('PRIVATE KEY', privateKey.export({ type: 'pkcs8', format: 'der' })) });
    });
  });
}

const keyObjectOf = (key: KeyObject | CryptoKey): KeyObject => (key instanceof KeyObject ? key : KeyObject.from(key));

const ECDSA_WITH_SHA256 = sequence(oid(OIDS.ecdsaWithSha256));

/**
 * A DER PKCS#10 request (RFC 2986) for `identity` (CN = the single DNS SAN = identity), signed
 * ECDSA with SHA-256 by `key`: the same bytes `@peculiar/x509`'s generator produced, up to the
 * signature. Rejects with `RangeError` when `identity` is not 7-bit ASCII (a DNS name must be).
 */
export function createCsr(identity: string, key: CsrKeyPair): Promise<Uint8Array> {
  return new Promise((resolve) => resolve(encodeCsr(identity, key)));
}

function encodeCsr(identity: string, key: CsrKeyPair): Uint8Array {
  const spki = new Uint8Array(keyObjectOf(key.publicKey).export({ type: 'spki', format: 'der' }));
  const subjectAltName = sequence(implicitPrimitive(2, ia5Content(identity)));
  const info = sequence(
    integer(0),
    sequence(set(sequence(oid(OIDS.commonName), directoryString(identity)))),
    spki,
    // attributes [0] IMPLICIT SET OF Attribute: one extensionRequest with one (non-critical) extension.
    explicit(0, sequence(oid(OIDS.extensionRequest), set(sequence(sequence(oid(OIDS.subjectAltName), octetString(subjectAltName)))))),
  );
  const signature = sign('sha256', info, { key: keyObjectOf(key.privateKey), dsaEncoding: 'der' });
  return sequence(info, ECDSA_WITH_SHA256, bitString(signature));
}

/** The credentials a workload presents, as PEM for `tls.createSecureContext`. */
export interface WorkloadCertificate {
  readonly identity: string;
  /** The leaf certificate. */
  readonly certPem: string;
  readonly keyPem: string;
  /** The intermediates the CA returned (no root); serve `certPem + chainPem` as `cert`. */
  readonly chainPem: string;
  readonly notAfterMs: number;
}

/** Timer functions (injectable for tests). */
export type { Timers } from '../shared/index.js';

/** A failed attempt: the CA's refusal code, or `UNKNOWN` for transport errors and bad responses. */
export interface RenewalFailure {
  readonly code: CertifyErrorCode | 'UNKNOWN' | 'BAD_CERTIFICATE' | (string & {});
  readonly message: string;
  /** When the next attempt is scheduled. */
  readonly retryInMs: number;
}

/**
 * What a certify call may answer: a {@link CertifyResult} (in-process CA), or just the issued
 * certificate (a gRPC client, which rejects with a `{code}` error instead of returning a refusal).
 */
export type CertifyAnswer = CertifyResult | { readonly ok?: undefined; readonly leafDer: Uint8Array; readonly chainDer: readonly Uint8Array[] };

/** Options of {@link WorkloadIdentity}. */
export interface WorkloadIdentityOptions {
  readonly identity: string;
  /** The ServiceAccount token, re-read for every request (projected tokens rotate). */
  readonly tokenSource: () => Promise<Uint8Array> | Uint8Array;
  /** Calls the CA (gRPC client, or a CertificateAuthority in-process). May reject with a `{code}` error. */
  readonly certify: (req: CertifyRequest) => Promise<CertifyAnswer>;
  /** Trust anchors (PEM bundle) the issued chain must verify against. */
  readonly trustAnchorsPem: string;
  /** Bounds of the renewal delay (upstream MIN_REFRESH/MAX_REFRESH; defaults 10 s, 24 h). */
  readonly minRefreshMs?: number;
  readonly maxRefreshMs?: number;
  /** Delays between failed attempts (default 1 s doubling to 60 s). */
  readonly backoff?: Backoff;
  /** Reuse a key (default: a fresh P-256 key generated by `start()`). */
  readonly key?: WorkloadKey;
  readonly now?: () => number;
  readonly timers?: Timers;
  readonly logger?: Logger;
  /** A new certificate is in use (also for the first one). */
  readonly onRotated?: (cert: WorkloadCertificate) => void;
  /** An attempt failed; the previous certificate (if any) stays in use. */
  readonly onFailure?: (failure: RenewalFailure) => void;
}

/** Fraction of the remaining validity after which a certificate is renewed. */
const REFRESH_FRACTION = 0.7;

/**
 * Obtains and renews a workload's certificate. Renewal only swaps what {@link current} returns:
 * TLS connections established with the old certificate are never dropped; only new handshakes
 * (which should call `current()`, e.g. from an `SNICallback` or a `secureContext` refresh) use
 * the new one. A failed renewal keeps the old certificate and retries with exponential backoff.
 * The key is generated once and reused for every renewal, as upstream's proxy does.
 */
export class WorkloadIdentity {
  readonly #opts: WorkloadIdentityOptions;
  readonly #timers: Timers;
  readonly #now: () => number;
  readonly #backoff: Backoff;
  readonly #log: Logger;
  readonly #anchors: ParsedCertificate[];
  #key: WorkloadKey | undefined;
  #csr: Uint8Array | undefined;
  #current: WorkloadCertificate | undefined;
  #timer: unknown;
  #stopped = false;
  #started: Promise<WorkloadCertificate> | undefined;
  #firstWaiter: { resolve: (c: WorkloadCertificate) => void; reject: (e: unknown) => void } | undefined;

  constructor(opts: WorkloadIdentityOptions) {
    const anchors = parseCertificatesPem(opts.trustAnchorsPem);
    if (!anchors.ok) throw new MeshError('ERR_IDENTITY_ANCHORS', `trust anchors: ${anchors.detail}`);
    this.#anchors = anchors.certs;
    this.#opts = opts;
    this.#timers = opts.timers ?? UNREF_TIMERS;
    this.#now = opts.now ?? Date.now;
    this.#backoff = opts.backoff ?? new Backoff({ minMs: 1000, maxMs: 60_000 });
    this.#log = opts.logger ?? silentLogger();
  }

  /** The identity this workload requests. */
  get identity(): string {
    return this.#opts.identity;
  }

  /**
   * Generates the key and CSR, then obtains the first certificate, retrying with backoff until
   * it succeeds. Resolves with it; rejects (`ERR_IDENTITY_STOPPED`) if `stop()` comes first.
   */
  start(): Promise<WorkloadCertificate> {
    this.#started ??= new Promise<WorkloadCertificate>((resolve, reject) => {
      this.#firstWaiter = { resolve, reject };
      void this.#attempt();
    });
    // Being stopped is a normal shutdown: callers that await start() see the rejection, but an
    // un-awaited start() followed by stop() must not become an unhandled rejection.
    this.#started.catch(() => undefined);
    return this.#started;
  }

  /** The certificate in use, or undefined before the first one arrives. */
  current(): WorkloadCertificate | undefined {
    return this.#current;
  }

  /** Cancels pending renewals. The current certificate stays readable. */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) this.#timers.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#firstWaiter?.reject(new MeshError('ERR_IDENTITY_STOPPED', `stopped before a certificate for ${this.#opts.identity} was issued`));
    this.#firstWaiter = undefined;
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    this.#timer = this.#timers.setTimeout(() => {
      this.#timer = undefined;
      void this.#attempt();
    }, ms);
  }

  async #attempt(): Promise<void> {
    if (this.#stopped) return;
    let outcome: { ok: true; cert: WorkloadCertificate } | { ok: false; code: string; message: string };
    try {
      outcome = await this.#request();
    } catch (e) {
      outcome = { ok: false, code: codeOf(e), message: errorMessage(e) };
    }
    if (this.#stopped) return;
    if (outcome.ok) {
      this.#backoff.reset();
      this.#current = outcome.cert;
      const remaining = outcome.cert.notAfterMs - this.#now();
      const delay = Math.min(this.#opts.maxRefreshMs ?? 86_400_000, Math.max(this.#opts.minRefreshMs ?? 10_000, remaining * REFRESH_FRACTION));
      this.#log.info(
        { identity: this.#opts.identity, notAfter: new Date(outcome.cert.notAfterMs).toISOString(), refreshInMs: Math.round(delay) },
        'certificate issued',
      );
      this.#schedule(delay);
      this.#firstWaiter?.resolve(outcome.cert);
      this.#firstWaiter = undefined;
      this.#notify(() => this.#opts.onRotated?.(outcome.cert));
      return;
    }
    const retryInMs = this.#backoff.next();
    this.#log.warn(
      { identity: this.#opts.identity, code: outcome.code, err: outcome.message, retryInMs, keeping: this.#current !== undefined },
      'certificate request failed',
    );
    this.#schedule(retryInMs);
    this.#notify(() => this.#opts.onFailure?.({ code: outcome.code, message: outcome.message, retryInMs }));
  }

  #notify(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.#log.error({ err: errorMessage(e) }, 'identity callback failed');
    }
  }

  async #request(): Promise<{ ok: true; cert: WorkloadCertificate } | { ok: false; code: string; message: string }> {
    this.#key ??= this.#opts.key ?? (await generateWorkloadKey());
    this.#csr ??= await createCsr(this.#opts.identity, this.#key);
    const token = await this.#opts.tokenSource();
    const res = await this.#opts.certify({ identity: this.#opts.identity, token, csrDer: this.#csr });
    if (res.ok === false) return { ok: false, code: res.code, message: res.message };
    const problem = this.#check(res.leafDer, res.chainDer);
    if (problem !== undefined) return { ok: false, code: 'BAD_CERTIFICATE', message: `the CA returned an unusable certificate: ${problem}` };
    const leaf = parseCertificate(res.leafDer);
    return {
      ok: true,
      cert: {
        identity: this.#opts.identity,
        certPem: encodePem('CERTIFICATE', res.leafDer),
        keyPem: this.#key.keyPem,
        chainPem: certificatesToPem(res.chainDer),
        notAfterMs: leaf.notAfterMs,
      },
    };
  }

  /** Accept a leaf only if it chains to the anchors now, names our identity and certifies our key. */
  #check(leafDer: Uint8Array, chainDer: readonly Uint8Array[]): string | undefined {
    let chain: ParsedCertificate[];
    try {
      chain = [leafDer, ...chainDer].map(parseCertificate);
    } catch (e) {
      return `malformed certificate (${errorMessage(e)})`;
    }
    const leaf = chain[0] as ParsedCertificate;
    const broken = verifyChain(chain, this.#anchors, this.#now());
    if (broken !== undefined) return broken;
    if (leaf.node.ca) return 'the leaf is a CA certificate';
    if (!dnsNamesOf(leaf).includes(this.#opts.identity))
      return `the leaf does not carry the identity ${this.#opts.identity} (SANs: ${dnsNamesOf(leaf).join(', ') || 'none'})`;
    const ours = (this.#key as WorkloadKey).publicKey.export({ type: 'spki', format: 'der' });
    const theirs = leaf.node.publicKey.export({ type: 'spki', format: 'der' });
    if (!ours.equals(theirs)) return 'the leaf certifies a different key';
    return undefined;
  }
}

function codeOf(e: unknown): string {
  const code = typeof e === 'object' && e !== null ? (e as { code?: unknown }).code : undefined;
  return typeof code === 'string' ? code : typeof code === 'number' ? String(code) : 'UNKNOWN';
}
