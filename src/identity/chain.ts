/**
 * Parsed certificates (node:crypto for verification, @peculiar/x509 for extensions) and chain
 * verification against trust anchors.
 */
import { X509Certificate as NodeX509Certificate } from 'node:crypto';
import { errorMessage } from '../shared/index.js';
import { certificatesFromPem } from './pem.js';
import { OID, x509 } from './x509.js';

/** One certificate, parsed once. */
export interface ParsedCertificate {
  readonly der: Uint8Array;
  readonly node: NodeX509Certificate;
  readonly x: x509.X509Certificate;
  readonly subject: string;
  readonly notBeforeMs: number;
  readonly notAfterMs: number;
}

/** Parses one DER certificate; throws on malformed input. */
export function parseCertificate(der: Uint8Array): ParsedCertificate {
  const node = new NodeX509Certificate(der);
  const x = new x509.X509Certificate(der);
  return { der, node, x, subject: x.subject || '(empty subject)', notBeforeMs: x.notBefore.getTime(), notAfterMs: x.notAfter.getTime() };
}

/** Every certificate of a PEM text, or why not. */
export function parseCertificatesPem(text: string): { ok: true; certs: ParsedCertificate[] } | { ok: false; detail: string } {
  const ders = certificatesFromPem(text);
  if (ders.length === 0) return { ok: false, detail: 'no PEM "CERTIFICATE" block found' };
  const certs: ParsedCertificate[] = [];
  for (const [i, der] of ders.entries()) {
    try {
      certs.push(parseCertificate(der));
    } catch (e) {
      return { ok: false, detail: `certificate #${i + 1} is malformed (${errorMessage(e)})` };
    }
  }
  return { ok: true, certs };
}

/** The DNS SANs of a certificate, in order. */
export function dnsNamesOf(cert: ParsedCertificate): string[] {
  return sansOf(cert)
    .filter((n) => n.type === 'dns')
    .map((n) => n.value);
}

/** All SANs as `{type, value}` (`dns`, `ip`, `url`, `email`, …). */
export function sansOf(cert: ParsedCertificate): { type: string; value: string }[] {
  const ext = cert.x.getExtension<x509.SubjectAlternativeNameExtension>(OID.subjectAltName);
  if (ext === null) return [];
  return ext.names.items.map((n) => ({ type: n.type, value: n.value }));
}

const iso = (ms: number) => new Date(ms).toISOString();

/** Why `cert` is not valid at `nowMs`, or undefined when it is. */
export function validityProblem(cert: ParsedCertificate, nowMs: number): string | undefined {
  if (nowMs < cert.notBeforeMs) return `${cert.subject} is not valid before ${iso(cert.notBeforeMs)}`;
  if (nowMs > cert.notAfterMs) return `${cert.subject} expired at ${iso(cert.notAfterMs)}`;
  return undefined;
}

function signedBy(child: ParsedCertificate, parent: ParsedCertificate): boolean {
  try {
    return parent.node.ca && child.node.checkIssued(parent.node) && child.node.verify(parent.node.publicKey);
  } catch {
    return false;
  }
}

/**
 * Verifies that `chain[0]` is signed by `chain[1]` … and the last one by (or is) one of the
 * `anchors`; every signer must be a CA. With `nowMs`, every certificate used (anchor included)
 * must also be valid at that time. Returns why not, or undefined when the chain verifies.
 */
export function verifyChain(chain: readonly ParsedCertificate[], anchors: readonly ParsedCertificate[], nowMs?: number): string | undefined {
  if (chain.length === 0) return 'no certificate';
  if (anchors.length === 0) return 'no trust anchors';
  for (const [i, cert] of chain.entries()) {
    if (nowMs !== undefined) {
      const problem = validityProblem(cert, nowMs);
      if (problem !== undefined) return problem;
    }
    const parent = chain[i + 1];
    if (parent !== undefined && !signedBy(cert, parent)) return `${cert.subject} is not signed by the next certificate in the chain (${parent.subject})`;
  }
  const last = chain[chain.length - 1] as ParsedCertificate;
  const fp = last.node.fingerprint256;
  const candidates = anchors.filter((a) => a.node.fingerprint256 === fp || signedBy(last, a));
  if (candidates.length === 0) return `${last.subject} is not signed by any trust anchor (issuer ${last.x.issuer})`;
  if (nowMs === undefined) return undefined;
  const valid = candidates.find((a) => validityProblem(a, nowMs) === undefined);
  if (valid === undefined) return `trust anchor ${validityProblem(candidates[0] as ParsedCertificate, nowMs)}`;
  return undefined;
}

/** The anchor that signed (or is) the last certificate of a verified chain. */
export function anchorOf(chain: readonly ParsedCertificate[], anchors: readonly ParsedCertificate[]): ParsedCertificate | undefined {
  const last = chain[chain.length - 1];
  if (last === undefined) return undefined;
  return anchors.find((a) => a.node.fingerprint256 === last.node.fingerprint256 || signedBy(last, a));
}
