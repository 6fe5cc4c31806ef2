/**
 * The proxy's identity metrics (upstream names): `identity_cert_expiration_timestamp_seconds`,
 * the NotAfter of the certificate in use (absent until the first one arrives), and
 * `identity_cert_refresh_count`, how many certificates were put in use.
 */
import type { WorkloadCertificate } from '../identity/index.js';
import { Counter, Gauge, type Registry } from '../shared/index.js';

/** What the identity metrics read and count. */
export interface IdentityMetrics {
  /** Counts a certificate put in use (the first one too). */
  onRotated(cert: WorkloadCertificate): void;
}

/** Registers the identity metrics in `registry`; `current` is read at scrape time. */
export function registerIdentityMetrics(registry: Registry, current: () => WorkloadCertificate | undefined): IdentityMetrics {
  new Gauge({
    name: 'identity_cert_expiration_timestamp_seconds',
    help: 'Time when the certificate in use expires, in seconds since the epoch',
    registers: [registry],
    collect() {
      const cert = current();
      this.reset();
      if (cert !== undefined) this.set(cert.notAfterMs / 1000);
    },
  });
  const refreshes = new Counter({ name: 'identity_cert_refresh_count', help: 'Certificates obtained and put in use', registers: [registry] });
  return { onRotated: () => refreshes.inc() };
}
