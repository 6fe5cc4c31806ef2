/**
 * The controller's identity side: the issuer (reloaded when its files change), the token
 * authenticator, the CA, and the controller's own serving certificate for its gRPC servers,
 * renewed at 70 % of its life and whenever the issuer changes.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { GrpcServerHandle } from '../api/index.js';
import { type Diagnostic, serviceAccountIdentity } from '../core/index.js';
import {
  CertificateAuthority,
  IDENTITY_FILES,
  type Issuer,
  IssuerReloader,
  LocalTokenAuthenticator,
  type ServerCredentials,
  type TokenAuthenticator,
  TokenReviewAuthenticator,
  type TokenReviewStatus,
} from '../identity/index.js';
import type { ClusterConfig } from '../index/index.js';
import { type Logger, MeshError, type Registry } from '../shared/index.js';
import type { KubeRequester } from '../sources/index.js';
import type { ControllerOptions } from './controller-types.js';
import type { ShutdownStack } from './shutdown-stack.js';

/** The started identity side. */
export interface ControllerIdentity {
  readonly reloader: IssuerReloader;
  readonly ca: CertificateAuthority;
  readonly serverCert: ServerCertificate;
  /** The TLS server name of the identity API. */
  readonly identityServerName: string;
  /** The TLS server name of the policy and destination APIs. */
  readonly destinationServerName: string;
}

/** Identity of a control-plane component (its ServiceAccount in the control-plane namespace). */
function controlPlaneIdentity(cluster: ClusterConfig, component: string): string {
  return serviceAccountIdentity(cluster, cluster.controlPlaneNamespace, component);
}

/** Renders identity diagnostics for a start-up failure message. */
function describeDiagnostics(ds: readonly Diagnostic[]): string {
  return ds
    .map((d) => `  ${d.source !== undefined ? `${d.source.file}: ` : ''}${d.code} ${d.message}${d.hint !== undefined ? `\n    hint: ${d.hint}` : ''}`)
    .join('\n');
}

/** Starts the identity side; what it started is on `cleanups`. Throws `MeshError` `ERR_IDENTITY` for a bad identity directory. */
export async function startControllerIdentity(opts: ControllerOptions, registry: Registry, log: Logger, cleanups: ShutdownStack): Promise<ControllerIdentity> {
  const cluster = opts.cluster;
  // Set once the serving certificate renews: issuer changes before then are the start-up's business.
  let renewing: ServerCertificate | undefined;
  const reloader = await loadIssuer(opts.identityDir, log, cleanups, () => renewing);
  const authenticator: TokenAuthenticator =
    opts.kubernetes !== undefined
      ? new TokenReviewAuthenticator({ review: tokenReviewer(opts.kubernetes.client) })
      : await loadTokenAuthenticator(opts.identityDir);
  const ca = new CertificateAuthority({
    issuer: reloader,
    authenticator,
    trustDomain: cluster.trustDomain,
    controlPlaneNamespace: cluster.controlPlaneNamespace,
    registry,
    ...(opts.issuanceLifetimeMs !== undefined ? { issuanceLifetimeMs: opts.issuanceLifetimeMs } : {}),
  });
  const identityServerName = controlPlaneIdentity(cluster, 'linkerd-identity');
  const destinationServerName = controlPlaneIdentity(cluster, 'linkerd-destination');
  const serverCert = await ServerCertificate.issue(ca, [identityServerName, destinationServerName], log);
  serverCert.scheduleRenewal();
  renewing = serverCert;
  cleanups.push(() => serverCert.stop());
  return { reloader, ca, serverCert, identityServerName, destinationServerName };
}

/** Starts the issuer reloader (stopped by `cleanups`); `renewing` is the certificate to renew on an issuer change, once there is one. */
async function loadIssuer(dir: string, log: Logger, cleanups: ShutdownStack, renewing: () => ServerCertificate | undefined): Promise<IssuerReloader> {
  const reloader = new IssuerReloader({
    dir,
    logger: log,
    onReload: (issuer: Issuer) => {
      const cert = renewing();
      if (cert === undefined) return;
      log.info({ issuer: issuer.subject, notAfter: new Date(issuer.notAfterMs).toISOString() }, 'issuer rotated; renewing the controller certificate');
      void cert.refresh('issuer changed');
    },
    onReject: (ds) => {
      // At start-up the failure is reported once, by the error that stops the controller.
      if (renewing() !== undefined)
        log.error({ problems: ds.map((d) => `${d.code} ${d.message}`) }, 'new issuer material rejected; the previous issuer stays in use');
    },
  });
  const loaded = await reloader.start();
  cleanups.push(() => reloader.stop());
  if (!loaded.ok) {
    throw new MeshError('ERR_IDENTITY', `cannot load the identity issuer from ${dir}:\n${describeDiagnostics(loaded.diagnostics)}`);
  }
  return reloader;
}

/**
 * Asks the API server about a token: creates an `authentication.k8s.io/v1` TokenReview and answers
 * its status. Rejects when the review cannot be made (unreachable, RBAC), which the CA reports as
 * UNAVAILABLE rather than as a refused token.
 */
export function tokenReviewer(client: KubeRequester): (token: string, audiences: readonly string[]) => Promise<TokenReviewStatus> {
  return async (token, audiences) => {
    const res = await client.request({
      method: 'POST',
      path: '/apis/authentication.k8s.io/v1/tokenreviews',
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token, audiences: [...audiences] } },
      timeoutMs: 10_000,
    });
    const body = res.body as { status?: TokenReviewStatus } | undefined;
    return body?.status ?? {};
  };
}

/** The authenticator of ServiceAccount tokens, from the identity directory's signing key. */
async function loadTokenAuthenticator(dir: string): Promise<LocalTokenAuthenticator> {
  const tokenKeyPath = join(dir, IDENTITY_FILES.tokenKey);
  let tokenKeyPem: string;
  try {
    tokenKeyPem = await readFile(tokenKeyPath, 'utf8');
  } catch (e) {
    throw new MeshError(
      'ERR_IDENTITY',
      `cannot read the token signing key ${tokenKeyPath}: ${(e as Error).message}\n  hint: create the identity directory with \`ward identity init --out ${dir}\``,
      { cause: e },
    );
  }
  try {
    return new LocalTokenAuthenticator({ keyPem: tokenKeyPem });
  } catch (e) {
    throw new MeshError('ERR_IDENTITY', `the token signing key ${tokenKeyPath} is not a usable EC key: ${(e as Error).message}`, { cause: e });
  }
}

/** The controller's serving certificate, put in use by every gRPC server given to `serve`. */
export class ServerCertificate {
  readonly #ca: CertificateAuthority;
  readonly #names: readonly string[];
  readonly #log: Logger;
  readonly #servers: GrpcServerHandle[] = [];
  #cert: ServerCredentials;
  #renewTimer: NodeJS.Timeout | undefined;
  #stopped = false;

  private constructor(ca: CertificateAuthority, names: readonly string[], log: Logger, cert: ServerCredentials) {
    this.#ca = ca;
    this.#names = names;
    this.#log = log;
    this.#cert = cert;
  }

  /** Issues the first certificate for `names`. */
  static async issue(ca: CertificateAuthority, names: readonly string[], log: Logger): Promise<ServerCertificate> {
    return new ServerCertificate(ca, names, log, await ca.issueServerCertificate([...names]));
  }

  /** The certificate in use. */
  get current(): ServerCredentials {
    return this.#cert;
  }

  /** Renewals reach `server` from now on. */
  serve(server: GrpcServerHandle): void {
    this.#servers.push(server);
  }

  /** Renews at 70 % of the certificate's life (at least 10 s from now). */
  scheduleRenewal(): void {
    if (this.#stopped) return;
    if (this.#renewTimer !== undefined) clearTimeout(this.#renewTimer);
    const lifeMs = Math.max(10_000, (this.#cert.notAfterMs - Date.now()) * 0.7);
    this.#renewTimer = setTimeout(() => void this.refresh('renewal'), Math.min(lifeMs, 2 ** 31 - 1));
    this.#renewTimer.unref();
  }

  /** Issues a new certificate and puts it in use; on failure retries in 30 s. */
  async refresh(why: string): Promise<void> {
    if (this.#stopped) return;
    try {
      this.#cert = await this.#ca.issueServerCertificate([...this.#names]);
      if (this.#stopped) return;
      const cert = this.#cert;
      for (const s of this.#servers) s.updateTls?.({ certPem: cert.certPem + cert.chainPem, keyPem: cert.keyPem });
      this.#log.info({ why, notAfter: new Date(cert.notAfterMs).toISOString() }, 'controller certificate renewed');
    } catch (e) {
      if (this.#stopped) return;
      this.#log.error({ err: e, why }, 'cannot renew the controller certificate; retrying in 30 s');
      if (this.#renewTimer !== undefined) clearTimeout(this.#renewTimer);
      this.#renewTimer = setTimeout(() => void this.refresh('retry'), 30_000);
      this.#renewTimer.unref();
      return;
    }
    this.scheduleRenewal();
  }

  /** Cancels renewals. */
  stop(): void {
    this.#stopped = true;
    if (this.#renewTimer !== undefined) clearTimeout(this.#renewTimer);
  }
}
