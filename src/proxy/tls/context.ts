/**
 * node:tls settings for mesh TLS (POLICY-SEMANTICS §4.3, §7): TLS 1.3 only, mutual, verified
 * against the trust anchors alone; a client's identity is the first DNS/URI SAN of its verified
 * certificate; an originating proxy accepts a server only if its certificate carries the
 * expected identity as a DNS SAN.
 *
 * Certificates rotate (tls/identity-bootstrap); a `SecureContext` is built once per certificate and
 * cached, so a rotation only changes what later handshakes use — established connections keep
 * the context they were made with.
 */
import { type ConnectionOptions, createSecureContext, type PeerCertificate, type SecureContext, type TLSSocket, type TlsOptions } from 'node:tls';
import type { WorkloadCertificate } from '../../identity/index.js';
import { dnsSans, firstIdentitySan } from './san.js';

/** What the inbound proxy needs of the mesh TLS settings (structurally, `MeshTlsContext`). */
export interface InboundTlsSettings {
  /** Options of the mesh TLS server; read once, at `start()` (rotation goes through their `SNICallback`). */
  serverOptions(): TlsOptions;
}

/** ALPN of a connection that starts with a transport header (§4.2). */
export const TRANSPORT_HEADER_ALPN = 'transport.l5d.io/v1';

/** The ALPN protocols the inbound mesh server offers, in preference order. */
export const MESH_SERVER_ALPN: readonly string[] = [TRANSPORT_HEADER_ALPN, 'h2', 'http/1.1'];

const TLS13 = { minVersion: 'TLSv1.3', maxVersion: 'TLSv1.3' } as const;

/** cert -> anchors PEM -> context. Keyed by the certificate object: a rotation is a new object. */
const contexts = new WeakMap<WorkloadCertificate, Map<string, SecureContext>>();

/**
 * The `SecureContext` of a workload certificate (leaf + issuer chain, key, the anchors as the only
 * trusted roots, TLS 1.3 only), usable for both the server and the client side. Built once per
 * (certificate, anchors) and cached for as long as the certificate object is referenced.
 * Throws what `tls.createSecureContext` throws for material that does not load.
 */
export function meshSecureContext(cert: WorkloadCertificate, anchorsPem: string): SecureContext {
  let byAnchors = contexts.get(cert);
  if (byAnchors === undefined) {
    byAnchors = new Map();
    contexts.set(cert, byAnchors);
  }
  let ctx = byAnchors.get(anchorsPem);
  if (ctx === undefined) {
    ctx = createSecureContext({ cert: certChainPem(cert), key: cert.keyPem, ca: anchorsPem, ...TLS13 });
    byAnchors.set(anchorsPem, ctx);
  }
  return ctx;
}

/** The leaf followed by the issuer chain, as served to peers. */
function certChainPem(cert: WorkloadCertificate): string {
  return cert.certPem.endsWith('\n') ? cert.certPem + cert.chainPem : `${cert.certPem}\n${cert.chainPem}`;
}

/**
 * Options for the inbound mesh TLS server (`tls.createServer`, or `server.setSecureContext` to
 * rotate): TLS 1.3 only, client certificates requested and required to verify against
 * `anchorsPem` (handshakes without one, or with an expired or foreign one, are refused), ALPN
 * `transport.l5d.io/v1`, `h2`, `http/1.1`. Feed detected sockets to the server with
 * `server.emit('connection', socket)`: node:tls enforces `rejectUnauthorized` for a server's
 * sockets only, not for a bare `TLSSocket`.
 */
export function meshServerOptions(cert: WorkloadCertificate, anchorsPem: string): TlsOptions {
  return {
    cert: certChainPem(cert),
    key: cert.keyPem,
    ca: anchorsPem,
    ...TLS13,
    requestCert: true,
    rejectUnauthorized: true,
    ALPNProtocols: [...MESH_SERVER_ALPN],
  };
}

/**
 * The identity of the peer of a mesh TLS connection: the first DNS or URI SAN of its verified
 * certificate (never the CN). `undefined` when the peer sent no certificate or it did not verify.
 * Read it once, on `secureConnection` / `secureConnect`, and keep it with the connection: on the
 * client side of TLS 1.3, the peer certificate may no longer be readable after a session ticket
 * arrives.
 */
export function clientIdentityOf(socket: TLSSocket): string | undefined {
  if (!socket.authorized) return undefined;
  const peer: Partial<PeerCertificate> = socket.getPeerCertificate();
  return firstIdentitySan(peer.subjectaltname);
}

/**
 * The `checkServerIdentity` of mesh TLS: accepts only a certificate carrying `serverIdentity` as a
 * DNS SAN, compared exactly (no wildcards, no CN fallback, no case folding). Returns the error
 * node:tls reports (the connection is then destroyed), or undefined.
 */
export function checkMeshServerIdentity(serverIdentity: string, peer: Pick<PeerCertificate, 'subjectaltname'>): Error | undefined {
  const names = dnsSans(peer.subjectaltname);
  if (names.includes(serverIdentity)) return undefined;
  const err = new Error(`server certificate does not carry the identity ${serverIdentity} (DNS SANs: ${names.join(', ') || 'none'})`);
  Object.assign(err, { code: 'ERR_TLS_CERT_ALTNAME_INVALID', reason: 'identity mismatch', host: serverIdentity });
  return err;
}

/**
 * Options for originating mesh TLS to a peer proxy (`tls.connect({ ...these, host, port })` or
 * `{ ...these, socket }`): SNI = `serverIdentity`, TLS 1.3 only, this workload's certificate as
 * the client certificate, the server chain verified against `anchorsPem` and its identity by
 * {@link checkMeshServerIdentity}; ALPN as given (none by default, `transport.l5d.io/v1` when a
 * transport header follows). Uses the cached context of `cert`.
 */
export function meshClientOptions(cert: WorkloadCertificate, anchorsPem: string, serverIdentity: string, alpn?: readonly string[]): ConnectionOptions {
  const options: ConnectionOptions = {
    secureContext: meshSecureContext(cert, anchorsPem),
    servername: serverIdentity,
    ...TLS13,
    rejectUnauthorized: true,
    checkServerIdentity: (_host, peer) => checkMeshServerIdentity(serverIdentity, peer),
  };
  if (alpn !== undefined && alpn.length > 0) options.ALPNProtocols = [...alpn];
  return options;
}

/**
 * The mesh TLS settings of a proxy whose certificate rotates: `rotate` switches the certificate
 * used by later handshakes, in both directions, without touching established connections.
 */
export class MeshTlsContext {
  readonly #anchorsPem: string;
  #cert: WorkloadCertificate;

  /** Loads `cert` right away (throws if it does not load). */
  constructor(cert: WorkloadCertificate, anchorsPem: string) {
    this.#anchorsPem = anchorsPem;
    meshSecureContext(cert, anchorsPem);
    this.#cert = cert;
  }

  /** The certificate new handshakes use. */
  get certificate(): WorkloadCertificate {
    return this.#cert;
  }

  /** The trust anchors (PEM). */
  get anchorsPem(): string {
    return this.#anchorsPem;
  }

  /** Uses `cert` for later handshakes. Throws (keeping the current one) if it does not load. */
  rotate(cert: WorkloadCertificate): void {
    meshSecureContext(cert, this.#anchorsPem);
    this.#cert = cert;
  }

  /**
   * {@link meshServerOptions} for the current certificate plus an `SNICallback` that hands every
   * later handshake the then-current certificate, so one `tls.Server` follows rotations. (Mesh
   * clients always send SNI; a handshake without it gets the certificate the server was made with.)
   */
  serverOptions(): TlsOptions {
    return {
      ...meshServerOptions(this.#cert, this.#anchorsPem),
      SNICallback: (_servername, cb) => {
        let ctx: SecureContext;
        try {
          ctx = meshSecureContext(this.#cert, this.#anchorsPem);
        } catch (e) {
          cb(e instanceof Error ? e : new Error(String(e)));
          return;
        }
        cb(null, ctx);
      },
    };
  }

  /** {@link meshClientOptions} for the current certificate. */
  clientOptions(serverIdentity: string, alpn?: readonly string[]): ConnectionOptions {
    return meshClientOptions(this.#cert, this.#anchorsPem, serverIdentity, alpn);
  }
}
