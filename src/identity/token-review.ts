/**
 * Authenticates a pod's projected ServiceAccount token with a Kubernetes TokenReview, as
 * Linkerd's identity controller does. The review itself is a callback, so `identity` stays free
 * of any Kubernetes client: the controller passes a function that POSTs
 * `authentication.k8s.io/v1` TokenReview with its own client.
 */
import { IDENTITY_TOKEN_AUDIENCE, parseServiceAccountUsername, type TokenAuthenticator, type TokenAuthResult } from './token.js';

/** The `user` of a TokenReview status (`authentication.k8s.io/v1` UserInfo). */
export interface TokenReviewUser {
  readonly username?: string;
  readonly uid?: string;
  readonly groups?: readonly string[];
  readonly extra?: Readonly<Record<string, readonly string[]>>;
}

/** The `status` of a TokenReview answer, as the API server returns it. */
export interface TokenReviewStatus {
  readonly authenticated?: boolean;
  readonly user?: TokenReviewUser;
  /** The audiences the token is valid for among those asked (empty: the API server's own). */
  readonly audiences?: readonly string[];
  readonly error?: string;
}

/**
 * Creates a TokenReview for `token` with `spec.audiences` and resolves to its `status`. Rejects
 * only when the review could not be made (API server unreachable, RBAC denied, ...).
 */
export type ReviewToken = (token: string, audiences: readonly string[]) => Promise<TokenReviewStatus>;

/** The `user.extra` key under which the API server names the pod a token is bound to. */
export const POD_NAME_EXTRA = 'authentication.kubernetes.io/pod-name';

/** Tokens longer than this are refused without asking the API server. */
const MAX_TOKEN_BYTES = 16 * 1024;

/** Options of {@link TokenReviewAuthenticator}. */
export interface TokenReviewAuthenticatorOptions {
  readonly review: ReviewToken;
  /** The audience tokens must carry (default `identity.l5d.io`). */
  readonly audience?: string;
}

/**
 * A {@link TokenAuthenticator} backed by TokenReview. A token is accepted only when the review
 * says it is authenticated, its answer's audiences include the identity audience, and the
 * username is `system:serviceaccount:<ns>:<sa>` with DNS-1123 labels. Unlike upstream, a token
 * without the identity audience is never retried as an API server token: a token minted for the
 * API server must not buy a mesh identity. A rejected review callback propagates (the CA answers
 * UNAVAILABLE); everything the API server says about the token is a refusal.
 */
export class TokenReviewAuthenticator implements TokenAuthenticator {
  readonly #review: ReviewToken;
  readonly #audience: string;

  constructor(opts: TokenReviewAuthenticatorOptions) {
    this.#review = opts.review;
    this.#audience = opts.audience ?? IDENTITY_TOKEN_AUDIENCE;
  }

  async authenticate(token: Uint8Array): Promise<TokenAuthResult> {
    const fail = (message: string): TokenAuthResult => ({ ok: false, message });
    if (token.length === 0) return fail('empty token');
    if (token.length > MAX_TOKEN_BYTES) return fail(`token is longer than ${MAX_TOKEN_BYTES} bytes`);
    const text = Buffer.from(token).toString('utf8').trim();
    if (text === '') return fail('empty token');
    const status = await this.#review(text, [this.#audience]);
    if (typeof status.error === 'string' && status.error !== '') return fail(`token review failed: ${status.error}`);
    if (status.authenticated !== true) return fail('token is not authenticated');
    // An empty answer means "valid for the API server's audience": a server that is not
    // audience-aware, or a token that is not ours. Either way no identity.
    const audiences = Array.isArray(status.audiences) ? status.audiences : [];
    if (!audiences.includes(this.#audience)) return fail(`token audiences ${JSON.stringify(audiences)} do not include ${this.#audience}`);
    const username = status.user?.username;
    const who = typeof username === 'string' ? parseServiceAccountUsername(username) : undefined;
    if (who === undefined) return fail(`token user ${JSON.stringify(username ?? '')} is not system:serviceaccount:<namespace>:<name>`);
    const pods = status.user?.extra?.[POD_NAME_EXTRA];
    const pod = Array.isArray(pods) && pods.length === 1 && typeof pods[0] === 'string' && pods[0] !== '' ? pods[0] : undefined;
    return { ok: true, ...who, ...(pod !== undefined ? { pod } : {}) };
  }
}
