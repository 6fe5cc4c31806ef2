/**
 * Problems with identity material (trust anchors, issuer, keys), as data: the controller logs
 * them and refuses to start, the reloader keeps the old issuer, the CLI prints them. Codes
 * `ID0xx` are stable; messages name the file and what is wrong.
 */
import type { Diagnostic } from '../core/index.js';

interface Entry {
  readonly message: string;
  readonly hint?: string;
}

/** Every identity-material problem ward reports. */
export const IDENTITY_CATALOG = {
  ID001: { message: 'cannot read {file}: {detail}', hint: 'create the identity material with `ward identity init --out DIR`' },
  ID002: { message: '{file}: {detail}', hint: 'the file must hold PEM "CERTIFICATE" blocks' },
  ID003: { message: '{file}: {detail}', hint: 'the key must be a PEM private key (PKCS#8 "PRIVATE KEY"), ECDSA P-256' },
  ID004: {
    message: '{file}: the issuer certificate {subject} is not a CA: {detail}',
    hint: 'the issuer must be an intermediate CA (basicConstraints CA:TRUE, keyUsage keyCertSign)',
  },
  ID005: {
    message: '{keyFile} does not match the certificate in {file} ({subject})',
    hint: 'the issuer certificate and key are a pair: replace both together',
  },
  ID006: {
    message: '{file}: the issuer certificate {subject} does not chain to the trust anchors in {anchorFile}: {detail}',
    hint: 'sign the issuer with a trust anchor key, or add its root to {anchorFile}',
  },
  ID007: { message: '{file}: certificate {subject} expired at {notAfter}', hint: 'issue a new one (`ward identity init --force` for a fresh set)' },
  ID008: { message: '{file}: certificate {subject} is not valid before {notBefore}', hint: 'check the clock of this machine' },
  ID009: { message: '{file} already exists; refusing to overwrite it', hint: 'pass --force to replace the identity material' },
  ID010: {
    message: '{keyFile}: the issuer key is {keyType}; ward signs certificates with ECDSA (P-256 or P-384)',
    hint: 'create the issuer with an ECDSA P-256 key',
  },
  ID011: { message: '{file}: trust anchor {subject} is not a CA certificate', hint: 'trust anchors are self-signed root CAs (basicConstraints CA:TRUE)' },
  ID012: { message: 'invalid identity option {option}: {detail}' },
} as const satisfies Record<string, Entry>;

/** A code of the identity catalog. */
export type IdentityDiagnosticCode = keyof typeof IDENTITY_CATALOG;

function fill(template: string, params: Readonly<Record<string, string | number>>): string {
  return template.replace(/\{(\w+)\}/g, (whole, key: string) => {
    const v = params[key];
    return v === undefined ? whole : String(v);
  });
}

/** Builds an error diagnostic from the identity catalog. */
export function identityDiagnostic(code: IdentityDiagnosticCode, params: Readonly<Record<string, string | number>>): Diagnostic {
  const entry: Entry = IDENTITY_CATALOG[code];
  return {
    code,
    severity: 'error',
    message: fill(entry.message, params),
    ...(entry.hint !== undefined ? { hint: fill(entry.hint, params) } : {}),
  };
}
