/**
 * zod building blocks shared by the per-version schemas. Policy CRD objects are strict: a key
 * the version does not define is reported (POL011) and pruned, as the API server would. Core
 * objects are loose: ward models a fraction of their fields and ignores the rest silently.
 *
 * A check with a more precise catalog code than POL010 raises a custom issue whose `params.ward`
 * names the code; `decodeResource` turns it into that diagnostic.
 */
import { z } from 'zod';
import { type DiagnosticCode, type Network, parseCidr } from '../core/index.js';
import type { ServerProtocol } from './types.js';

/** Raises a custom issue that becomes diagnostic `code` with `params`. */
export function addCodedIssue(ctx: z.RefinementCtx, code: DiagnosticCode, params: Readonly<Record<string, string | number>>): void {
  ctx.addIssue({ code: 'custom', message: code, params: { ward: code, ...params } });
}

/** `map<string, string>`, e.g. labels. */
export const stringMap = z.record(z.string(), z.string());
/** Optional string. */
export const optString = z.string().optional();
/** Kubernetes int-or-string. */
export const intOrString = z.union([z.int(), z.string()]);
/** A TCP/UDP port number. */
export const portNumber = z.int().min(1).max(65535);

/** Object metadata: only the fields ward uses; everything else is ignored. */
export const objectMeta = z.object({
  name: z.string().min(1),
  namespace: z.string().min(1).optional(),
  labels: stringMap.default({}),
  annotations: stringMap.default({}),
  creationTimestamp: optString,
  deletionTimestamp: optString,
  uid: optString,
  resourceVersion: optString,
});

/** Label selector as written (operators are checked when evaluated, as upstream does). */
export const labelSelector = z.strictObject({
  matchLabels: stringMap.optional(),
  matchExpressions: z.array(z.strictObject({ key: z.string(), operator: z.string(), values: z.array(z.string()).optional() })).optional(),
});

const PROTOCOLS: readonly string[] = ['unknown', 'HTTP/1', 'HTTP/2', 'gRPC', 'opaque', 'TLS'] satisfies ServerProtocol[];

/** `Server.spec.proxyProtocol` (exact spelling; POL021 otherwise). */
export const proxyProtocol = z.string().transform((s, ctx): ServerProtocol => {
  if (PROTOCOLS.includes(s)) return s as ServerProtocol;
  addCodedIssue(ctx, 'POL021', { value: s });
  return z.NEVER;
});

/** `Server.spec.port`: a number 1-65535 (POL022 otherwise) or a port name, kept as a string. */
export const serverPort = intOrString.superRefine((p, ctx) => {
  if (typeof p === 'number' && (p < 1 || p > 65535)) addCodedIssue(ctx, 'POL022', { value: p });
});

const cidr = z.string().transform((s, ctx) => {
  const net = parseCidr(s);
  if (net !== undefined) return net;
  addCodedIssue(ctx, 'POL032', { value: s });
  return z.NEVER;
});

/** A client network `{cidr, except?}` parsed into a core `Network` (POL032 for bad text). */
export const network = z.strictObject({ cidr, except: z.array(cidr).optional() }).transform((n): Network => ({ net: n.cidr, except: n.except ?? [] }));

/** A reference to an object in the same namespace. */
export const localTargetRef = z.strictObject({ group: optString, kind: z.string(), name: z.string() });

/** A reference that may name another namespace (`name` may be absent: POL054 at admission). */
export const namespacedTargetRef = z.strictObject({ group: optString, kind: z.string(), name: optString, namespace: optString });
