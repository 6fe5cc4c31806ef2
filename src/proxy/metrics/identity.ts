/**
 * The proxy's identity metrics (upstream names): `identity_cert_expiration_timestamp_seconds`,
 * the NotAfter of the certificate in use (absent until the first one arrives), and
 * `identity_cert_refresh_count`, how many certificates were put in use.
 */
import type { WorkloadCertificate } from '../../identity/index.js';
import { CellCounter, CellGauge, type MetricsRegistry } from './cells.js';

/** What the identity metrics read and count. */
export interface IdentityMetrics {
  /** Counts a certificate put in use (the first one too). */
  onRotated(cert: WorkloadCertificate): void;
}

/** Registers the identity metrics in `registry`; `current` is read at scrape time. */
export function registerIdentityMetrics(registry: MetricsRegistry, current: () => WorkloadCertificate | undefined): IdentityMetrics {
  const expiry: CellGauge = new CellGauge(
    registry,
    'identity_cert_expiration_timestamp_seconds',
    'Time when the certificate in use expires, in seconds since the epoch',
    () => {
      const cert = current();
      if (cert === undefined) expiry.clear();
      else expiry.cell({}).value = cert.notAfterMs / 1000;
    },
  );
  const refreshes = new CellCounter(registry, 'identity_cert_refresh_count', 'Certificates obtained and put in use').cell({});
  return { onRotated: () => refreshes.value++ };
}
