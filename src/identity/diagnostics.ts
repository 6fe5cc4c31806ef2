/**
 * Problems with identity material (trust anchors, issuer, keys), as data: the controller logs
 * them and refuses to start, the reloader keeps the old issuer, the CLI prints them. The codes
 * `ID0xx` live in the one catalog of `core`; messages name the file and what is wrong.
 */
import { type Diagnostic, type DiagnosticCode, diagnostic } from '../core/index.js';

/** A code of the identity part of the catalog. */
export type IdentityDiagnosticCode = Extract<DiagnosticCode, `ID${string}`>;

/** Builds an error diagnostic from the identity part of the catalog. */
export function identityDiagnostic(code: IdentityDiagnosticCode, params: Readonly<Record<string, string | number>>): Diagnostic {
  return diagnostic(code, params);
}
