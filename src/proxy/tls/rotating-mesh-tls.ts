/**
 * Mesh TLS settings for a proxy that starts listening before its first certificate arrives: the
 * inbound TLS server is built at start with the trust anchors only, and every handshake takes the
 * certificate current at that moment through `SNICallback`. Until the first certificate, mesh TLS
 * handshakes fail (the proxy is not ready, and connections needing mesh TLS are refused).
 */
import type { SecureContext, TlsOptions } from 'node:tls';
import type { WorkloadCertificate } from '../../identity/index.js';
import { type InboundTlsSettings, MESH_SERVER_ALPN, MeshTlsContext, meshSecureContext } from './context.js';

/** {@link MeshTlsContext} that may not have a certificate yet; `use` installs or rotates one. */
export class RotatingMeshTls implements InboundTlsSettings {
  readonly #anchorsPem: string;
  #context: MeshTlsContext | undefined;

  constructor(anchorsPem: string) {
    this.#anchorsPem = anchorsPem;
  }

  /** The certificate new handshakes use, or undefined before the first one. */
  get certificate(): WorkloadCertificate | undefined {
    return this.#context?.certificate;
  }

  /** The trust anchors (PEM). */
  get anchorsPem(): string {
    return this.#anchorsPem;
  }

  /** Uses `cert` for later handshakes. Throws (keeping the current one) if it does not load. */
  use(cert: WorkloadCertificate): void {
    if (this.#context === undefined) this.#context = new MeshTlsContext(cert, this.#anchorsPem);
    else this.#context.rotate(cert);
  }

  /**
   * Options of the inbound mesh TLS server: those of {@link MeshTlsContext.serverOptions} once a
   * certificate is in use; before, the same settings without a certificate and an `SNICallback`
   * that refuses the handshake until one arrives (and uses it from then on).
   */
  serverOptions(): TlsOptions {
    if (this.#context !== undefined) return this.#context.serverOptions();
    return {
      ca: this.#anchorsPem,
      minVersion: 'TLSv1.3',
      maxVersion: 'TLSv1.3',
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: [...MESH_SERVER_ALPN],
      SNICallback: (_servername, cb) => {
        const cert = this.#context?.certificate;
        if (cert === undefined) {
          cb(new Error('no certificate yet'));
          return;
        }
        let ctx: SecureContext;
        try {
          ctx = meshSecureContext(cert, this.#anchorsPem);
        } catch (e) {
          cb(e instanceof Error ? e : new Error(String(e)));
          return;
        }
        cb(null, ctx);
      },
    };
  }
}
