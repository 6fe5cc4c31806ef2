/**
 * The proxy's identity metrics, as linkerd2-proxy names them (`linkerd/identity/src/metrics.rs`,
 * registered under `control_identity_cert_`), so a Linkerd dashboard or alert on certificate
 * expiry works unchanged:
 * - `control_identity_cert_expiration_timestamp_seconds`: the NotAfter of the certificate in use;
 * - `control_identity_cert_refresh_timestamp_seconds`: when it was put in use;
 * - `control_identity_cert_refreshes_total{result="ok"|"error"}`: certificates put in use, and
 *   certificates obtained that could not be (upstream: the local credential store refused them).
 * As upstream, every series exists from the start: the gauges are 0 until the first certificate.
 */
import type { WorkloadCertificate } from '../../identity/index.js';
import { CellCounter, CellGauge, type MetricsRegistry, SeriesGroup } from './cells.js';

/** What the identity metrics count. */
export interface IdentityMetrics {
  /** A certificate was put in use (the first one too), at `nowMs`. */
  onRotated(cert: WorkloadCertificate, nowMs?: number): void;
  /** A certificate was obtained but could not be put in use. */
  onRefreshFailed(): void;
}

/** Registers the identity metrics in `registry`. */
export function registerIdentityMetrics(registry: MetricsRegistry): IdentityMetrics {
  const expiry = new CellGauge(
    registry,
    'control_identity_cert_expiration_timestamp_seconds',
    "Time when this proxy's current mTLS identity certificate will expire (in seconds since the UNIX epoch)",
  ).cell({});
  const refreshedAt = new CellGauge(
    registry,
    'control_identity_cert_refresh_timestamp_seconds',
    "Time when this proxy's current mTLS identity certificate was last updated",
  ).cell({});
  const refreshes = new CellCounter(
    registry,
    'control_identity_cert_refreshes_total',
    "The total number of times this proxy's mTLS identity certificate has been refreshed by the Identity provider",
  );
  // Held for good: both series stay (at 0 too, as upstream's), never evicted as idle.
  const kept = new SeriesGroup();
  kept.hold();
  const ok = refreshes.cell({ result: 'ok' }, kept);
  const error = refreshes.cell({ result: 'error' }, kept);
  return {
    onRotated: (cert, nowMs = Date.now()) => {
      ok.value++;
      refreshedAt.value = nowMs / 1000;
      expiry.value = cert.notAfterMs / 1000;
    },
    onRefreshFailed: () => {
      error.value++;
    },
  };
}
