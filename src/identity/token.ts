/**
 * ServiceAccount tokens. In a cluster the CA authenticates the pod's projected token with a
 * Kubernetes TokenReview (a later `TokenAuthenticator`); without one, ward signs its own
 * Kubernetes-shaped JWTs (ES256 with `token.key`) and verifies them here.
 */
import { createPrivateKey, createPublicKey, type KeyObject, sign, verify } from 'node:crypto';
import { errorMessage } from '../shared/index.js';

/** Audience of identity tokens (upstream's projected-token audience). */
export const IDENTITY_TOKEN_AUDIENCE = 'identity.l5d.io';
/** Issuer claim of locally minted tokens. */
export const LOCAL_TOKEN_ISSUER = 'ward';
/** Default lifetime of a minted token. */
export const DEFAULT_TOKEN_TTL_MS = 3_600_000;
/** Clock skew tolerated on `exp`/`nbf`/`iat`. */
export const TOKEN_SKEW_MS = 30_000;
/** Tokens longer than this are refused before parsing. */
const MAX_TOKEN_BYTES = 16 * 1024;

/** Who a token says the caller is. */
export interface TokenIdentity {
  readonly namespace: string;
  readonly serviceAccount: string;
  readonly pod?: string;
}

/** Outcome of authenticating a token. */
export type TokenAuthResult = ({ readonly ok: true } & TokenIdentity) | { readonly ok: false; readonly message: string };

/**
 * Authenticates a workload's token (Certify's `token` field). Implementations: {@link LocalTokenAuthenticator};
 * a Kubernetes TokenReview one later. A rejected token is `{ok: false}`; a thrown error means the
 * authenticator itself failed (e.g. API server unreachable).
 */
export interface TokenAuthenticator {
  /** `nowMs` is the CA's clock for the request; implementations that ask a server may ignore it. */
  authenticate(token: Uint8Array, nowMs?: number): Promise<TokenAuthResult>;
}

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** True for a Kubernetes DNS-1123 label (namespace and ServiceAccount names in identities). */
export function isDns1123Label(s: string): boolean {
  return s.length <= 63 && DNS1123_LABEL.test(s);
}

/**
 * Parses a TokenReview username `system:serviceaccount:<ns>:<sa>` (both DNS-1123 labels), as
 * upstream's validator does.
 */
export function parseServiceAccountUsername(username: string): { namespace: string; serviceAccount: string } | undefined {
  const parts = username.split(':');
  if (parts.length !== 4 || parts[0] !== 'system' || parts[1] !== 'serviceaccount') return undefined;
  const [, , namespace, serviceAccount] = parts as [string, string, string, string];
  if (!isDns1123Label(namespace) || !isDns1123Label(serviceAccount)) return undefined;
  return { namespace, serviceAccount };
}

/** Options of {@link mintToken}. */
export interface MintTokenOptions {
  /** PEM private key (`token.key`), ECDSA P-256. */
  readonly signerKeyPem: string;
  readonly namespace: string;
  readonly serviceAccount: string;
  /** Pod name (same namespace), recorded like a pod-bound projected token. */
  readonly pod?: string;
  readonly ttlMs?: number;
  readonly now?: number;
  readonly audience?: string;
}

const b64url = (data: string | Uint8Array) => Buffer.from(data).toString('base64url');

/**
 * A Kubernetes-shaped ServiceAccount JWT (ES256): `iss: ward`, `aud: identity.l5d.io`,
 * `sub: system:serviceaccount:<ns>:<sa>`, `kubernetes.io` claims, `iat`/`nbf`/`exp`.
 * Throws `TypeError` for names that are not DNS-1123 labels or a key that is not ECDSA P-256.
 */
export function mintToken(opts: MintTokenOptions): string {
  if (!isDns1123Label(opts.namespace)) throw new TypeError(`namespace "${opts.namespace}" is not a DNS-1123 label`);
  if (!isDns1123Label(opts.serviceAccount)) throw new TypeError(`service account "${opts.serviceAccount}" is not a DNS-1123 label`);
  if (opts.pod !== undefined && !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(opts.pod)) throw new TypeError(`pod "${opts.pod}" is not a DNS-1123 subdomain`);
  const key = createPrivateKey(opts.signerKeyPem);
  assertP256(key);
  const nowS = Math.floor((opts.now ?? Date.now()) / 1000);
  const ttlS = Math.max(1, Math.floor((opts.ttlMs ?? DEFAULT_TOKEN_TTL_MS) / 1000));
  const header = { alg: 'ES256', typ: 'JWT' };
  const payload = {
    iss: LOCAL_TOKEN_ISSUER,
    aud: [opts.audience ?? IDENTITY_TOKEN_AUDIENCE],
    sub: `system:serviceaccount:${opts.namespace}:${opts.serviceAccount}`,
    'kubernetes.io': {
      namespace: opts.namespace,
      serviceaccount: { name: opts.serviceAccount },
      ...(opts.pod !== undefined ? { pod: { name: opts.pod } } : {}),
    },
    iat: nowS,
    nbf: nowS,
    exp: nowS + ttlS,
  };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`;
  const signature = sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' });
  return `${input}.${b64url(signature)}`;
}

function assertP256(key: KeyObject): void {
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
    throw new TypeError(`token keys must be ECDSA P-256 (got ${key.asymmetricKeyType ?? key.type})`);
  }
}

/** Options of {@link LocalTokenAuthenticator}. */
export interface LocalTokenAuthenticatorOptions {
  /** `token.key` (private; its public half is used) or the public key, PEM. */
  readonly keyPem: string;
  readonly audience?: string;
  readonly issuer?: string;
  readonly skewMs?: number;
  /** Clock used when `authenticate` gets no `nowMs`. */
  readonly now?: () => number;
}

const B64URL = /^[A-Za-z0-9_-]*$/;
type Json = Record<string, unknown>;

function decodeJson(part: string): Json | undefined {
  try {
    const v: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined;
  } catch {
    return undefined;
  }
}

const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/**
 * Verifies tokens minted by {@link mintToken}: exactly `alg: ES256` (never `none`, HMAC or
 * anything else), the ECDSA signature, issuer, audience, `exp`/`nbf` (with skew), and a
 * `sub` of `system:serviceaccount:<ns>:<sa>` consistent with the `kubernetes.io` claims.
 */
export class LocalTokenAuthenticator implements TokenAuthenticator {
  readonly #key: KeyObject;
  readonly #audience: string;
  readonly #issuer: string;
  readonly #skewMs: number;
  readonly #now: () => number;

  constructor(opts: LocalTokenAuthenticatorOptions) {
    const key = createPublicKey(opts.keyPem);
    assertP256(key);
    this.#key = key;
    this.#audience = opts.audience ?? IDENTITY_TOKEN_AUDIENCE;
    this.#issuer = opts.issuer ?? LOCAL_TOKEN_ISSUER;
    this.#skewMs = opts.skewMs ?? TOKEN_SKEW_MS;
    this.#now = opts.now ?? Date.now;
  }

  authenticate(token: Uint8Array, nowMs?: number): Promise<TokenAuthResult> {
    try {
      return Promise.resolve(this.#check(token, nowMs ?? this.#now()));
    } catch (e) {
      // Nothing above should throw on any input; if it does, the token is still just invalid.
      return Promise.resolve({ ok: false, message: `unreadable token: ${errorMessage(e)}` });
    }
  }

  #check(token: Uint8Array, nowMs: number): TokenAuthResult {
    const fail = (message: string): TokenAuthResult => ({ ok: false, message });
    if (token.length === 0) return fail('empty token');
    if (token.length > MAX_TOKEN_BYTES) return fail(`token is longer than ${MAX_TOKEN_BYTES} bytes`);
    const text = Buffer.from(token).toString('utf8').trim();
    const parts = text.split('.');
    if (parts.length !== 3 || !parts.every((p) => B64URL.test(p))) return fail('not a JWT (want three base64url parts)');
    const [h, p, s] = parts as [string, string, string];
    const header = decodeJson(h);
    if (header === undefined) return fail('JWT header is not a JSON object');
    if (header.alg !== 'ES256') return fail(`JWT algorithm ${JSON.stringify(header.alg)} is not accepted (want ES256)`);
    if (header.crit !== undefined) return fail('JWT "crit" header is not supported');
    const signature = Buffer.from(s, 'base64url');
    if (signature.length !== 64) return fail('JWT signature has the wrong length for ES256');
    if (!verify('sha256', Buffer.from(`${h}.${p}`), { key: this.#key, dsaEncoding: 'ieee-p1363' }, signature)) return fail('JWT signature does not verify');
    const claims = decodeJson(p);
    if (claims === undefined) return fail('JWT payload is not a JSON object');
    if (claims.iss !== this.#issuer) return fail(`token issuer ${JSON.stringify(claims.iss)} is not ${this.#issuer}`);
    const aud = typeof claims.aud === 'string' ? [claims.aud] : Array.isArray(claims.aud) ? claims.aud : [];
    if (!aud.includes(this.#audience)) return fail(`token audience ${JSON.stringify(claims.aud)} does not include ${this.#audience}`);
    if (!isNumber(claims.exp)) return fail('token has no exp');
    if (nowMs > claims.exp * 1000 + this.#skewMs) return fail(`token expired at ${new Date(claims.exp * 1000).toISOString()}`);
    if (claims.nbf !== undefined && !(isNumber(claims.nbf) && nowMs >= claims.nbf * 1000 - this.#skewMs)) return fail('token is not valid yet (nbf)');
    if (claims.iat !== undefined && !(isNumber(claims.iat) && claims.iat * 1000 <= nowMs + this.#skewMs)) return fail('token was issued in the future (iat)');
    const who = typeof claims.sub === 'string' ? parseServiceAccountUsername(claims.sub) : undefined;
    if (who === undefined) return fail(`token subject ${JSON.stringify(claims.sub)} is not system:serviceaccount:<namespace>:<name>`);
    const k8s = claims['kubernetes.io'];
    let pod: string | undefined;
    if (k8s !== undefined) {
      const k = (typeof k8s === 'object' && k8s !== null ? k8s : {}) as { namespace?: unknown; serviceaccount?: { name?: unknown }; pod?: { name?: unknown } };
      if (k.namespace !== who.namespace || k.serviceaccount?.name !== who.serviceAccount) return fail('token kubernetes.io claims disagree with its subject');
      if (k.pod !== undefined) {
        if (typeof k.pod?.name !== 'string') return fail('token kubernetes.io.pod has no name');
        pod = k.pod.name;
      }
    }
    return { ok: true, ...who, ...(pod !== undefined ? { pod } : {}) };
  }
}
