/**
 * PEM encoding and decoding (RFC 7468), and a strict DER framing check.
 */

/** One PEM block: its label (`CERTIFICATE`, `PRIVATE KEY`, …) and DER bytes. */
export interface PemBlock {
  readonly label: string;
  readonly der: Uint8Array;
}

const BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\s]*?)-----END \1-----/g;

/** Every PEM block in `text`, in order. Text between blocks (comments, `openssl` headers) is ignored. */
export function pemBlocks(text: string): PemBlock[] {
  const out: PemBlock[] = [];
  for (const m of text.matchAll(BLOCK)) {
    const body = (m[2] as string).replace(/\s+/g, '');
    out.push({ label: m[1] as string, der: new Uint8Array(Buffer.from(body, 'base64')) });
  }
  return out;
}

/** The DER of every `CERTIFICATE` block in `text`. */
export function certificatesFromPem(text: string): Uint8Array[] {
  return pemBlocks(text)
    .filter((b) => b.label === 'CERTIFICATE')
    .map((b) => b.der);
}

/** One PEM block with 64-character lines and a trailing newline. */
export function encodePem(label: string, der: Uint8Array | ArrayBuffer): string {
  const b64 = Buffer.from(der instanceof ArrayBuffer ? new Uint8Array(der) : der).toString('base64');
  const lines = b64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

/** Concatenated `CERTIFICATE` blocks. */
export function certificatesToPem(ders: readonly Uint8Array[]): string {
  return ders.map((d) => encodePem('CERTIFICATE', d)).join('');
}

/**
 * True when `bytes` is exactly one DER SEQUENCE (tag 0x30, definite minimal-form length covering
 * the whole buffer). ASN.1 parsers accept PEM, Base64 or trailing bytes; the Certify API takes DER only.
 */
export function isDerSequence(bytes: Uint8Array): boolean {
  if (bytes.length < 2 || bytes[0] !== 0x30) return false;
  const first = bytes[1] as number;
  if (first < 0x80) return 2 + first === bytes.length;
  const n = first & 0x7f;
  if (n === 0 || n > 4 || bytes.length < 2 + n) return false;
  if (bytes[2] === 0) return false;
  let len = 0;
  for (let i = 0; i < n; i++) len = len * 256 + (bytes[2 + i] as number);
  if (len < 0x80) return false;
  return 2 + n + len === bytes.length;
}
