/**
 * The result of decoding a wire message into the core model: bad input from a peer is data
 * (HOUSE-STYLE "errors for bad input are data"), so decoders return this instead of throwing.
 */

/** The decoded value, or what is wrong with the message (with a field path, e.g. `authorizations[0].networks`). */
export type WireResult<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly message: string };

/** A failed `WireResult`. */
export function wireError(message: string): { readonly ok: false; readonly message: string } {
  return { ok: false, message };
}
