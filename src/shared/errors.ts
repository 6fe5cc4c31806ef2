/**
 * The base of every exception ward throws for I/O and bugs (bad input is data, not exceptions).
 * Callers branch on `code`, never on the message text.
 */

/** An error with a stable `ERR_*` code. */
export class MeshError extends Error {
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'MeshError';
    this.code = code;
  }
}

/** True when `e` is a MeshError with the given code (works across duplicate module copies). */
export function hasCode(e: unknown, code: string): boolean {
  return typeof e === 'object' && e !== null && (e as { code?: unknown }).code === code;
}

/** The message of any thrown value. */
export function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
