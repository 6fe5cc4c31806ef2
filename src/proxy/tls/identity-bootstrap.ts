/**
 * The proxy's own identity (POLICY-SEMANTICS §5.4, §7): a key generated at start, a certificate
 * obtained from the controller's identity service over TLS — the controller must present a
 * certificate chaining to the trust anchors and naming `identityServerName` — and renewed at
 * 70 % of its life. A failed renewal keeps the current certificate and retries with backoff.
 */
import { IdentityClient } from '../../api/index.js';
import { type RenewalFailure, type WorkloadCertificate, WorkloadIdentity, type WorkloadKey } from '../../identity/index.js';
import { type Backoff, errorMessage, type Logger, silentLogger } from '../../shared/index.js';

/** Options of {@link startProxyIdentity}. */
export interface ProxyIdentityOptions {
  /** This proxy's identity (`LINKERD2_PROXY_IDENTITY_LOCAL_NAME`). */
  readonly identity: string;
  /** `host:port` of the identity service (upstream port 8080). */
  readonly identityAddress: string;
  /** The identity the identity service's certificate must carry (`linkerd-identity.<ns>.serviceaccount.identity.<ns>.<td>`). */
  readonly identityServerName: string;
  /** Trust anchors (PEM bundle): for the identity service's certificate and for our own issued chain. */
  readonly trustAnchorsPem: string;
  /** The ServiceAccount token, read again for every request (projected tokens rotate). */
  readonly tokenSource: () => Promise<Uint8Array> | Uint8Array;
  readonly logger?: Logger;
  /** Bounds of the renewal delay (upstream MIN_REFRESH / MAX_REFRESH; defaults 10 s, 24 h). */
  readonly minRefreshMs?: number;
  readonly maxRefreshMs?: number;
  /** Delays between failed attempts (default 1 s doubling to 60 s). */
  readonly backoff?: Backoff;
  /** Deadline of one Certify call (default 10 s), so a hung controller cannot stall renewal. */
  readonly certifyTimeoutMs?: number;
  /** Reuse a key instead of generating one. */
  readonly key?: WorkloadKey;
  /** An attempt failed; the previous certificate (if any) stays in use. */
  readonly onFailure?: (failure: RenewalFailure) => void;
}

/** A running proxy identity. */
export interface ProxyIdentity {
  /** The identity requested. */
  readonly identity: string;
  /** The certificate in use, or undefined before the first one arrives. */
  current(): WorkloadCertificate | undefined;
  /**
   * Resolves with the first certificate (retrying until one is issued); rejects with `MeshError`
   * `ERR_IDENTITY_STOPPED` if `stop()` comes first. Callers bound the wait.
   */
  ready(): Promise<WorkloadCertificate>;
  /**
   * Calls `listener` with every certificate put in use from now on (the first one too, if it has
   * not arrived yet). Returns the unsubscribe function.
   */
  onRotated(listener: (cert: WorkloadCertificate) => void): () => void;
  /** Cancels renewals and closes the connection to the identity service. The current certificate stays readable. Idempotent. */
  stop(): void;
}

const DEFAULT_CERTIFY_TIMEOUT_MS = 10_000;

/**
 * Starts obtaining this proxy's certificate and keeps it renewed. Returns at once; the first
 * certificate arrives asynchronously (`ready()`). Throws `MeshError` `ERR_IDENTITY_ANCHORS`
 * when the trust anchors do not parse.
 */
export function startProxyIdentity(opts: ProxyIdentityOptions): ProxyIdentity {
  const log = opts.logger ?? silentLogger();
  const listeners = new Set<(cert: WorkloadCertificate) => void>();
  const client = new IdentityClient({ address: opts.identityAddress, tls: { caPem: opts.trustAnchorsPem, serverName: opts.identityServerName } });
  const deadlineMs = opts.certifyTimeoutMs ?? DEFAULT_CERTIFY_TIMEOUT_MS;
  let workload: WorkloadIdentity;
  try {
    workload = new WorkloadIdentity({
      identity: opts.identity,
      tokenSource: opts.tokenSource,
      certify: (req) => client.certify(req, { deadlineMs }),
      trustAnchorsPem: opts.trustAnchorsPem,
      logger: log,
      ...(opts.minRefreshMs !== undefined ? { minRefreshMs: opts.minRefreshMs } : {}),
      ...(opts.maxRefreshMs !== undefined ? { maxRefreshMs: opts.maxRefreshMs } : {}),
      ...(opts.backoff !== undefined ? { backoff: opts.backoff } : {}),
      ...(opts.key !== undefined ? { key: opts.key } : {}),
      ...(opts.onFailure !== undefined ? { onFailure: opts.onFailure } : {}),
      onRotated: (cert) => {
        for (const l of [...listeners]) {
          try {
            l(cert);
          } catch (e) {
            log.error({ identity: opts.identity, err: errorMessage(e) }, 'certificate rotation listener failed');
          }
        }
      },
    });
  } catch (e) {
    client.close();
    throw e;
  }
  const first = workload.start();
  let stopped = false;
  return {
    identity: opts.identity,
    current: () => workload.current(),
    ready: () => first,
    onRotated: (listener) => {
      listeners.add(listener);
      return () => {
        listeners.delete(listener);
      };
    },
    stop: () => {
      if (stopped) return;
      stopped = true;
      workload.stop();
      listeners.clear();
      client.close();
    },
  };
}
