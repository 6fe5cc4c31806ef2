/**
 * zod schemas of the SMI access-policy kinds, one per served version, after the CRDs OSM and the
 * SMI SDK install. The objects are strict like the Linkerd policy CRDs: an unknown field is
 * reported (POL011) and pruned, as the API server prunes fields a structural schema lacks (so a
 * `destination.port` in a v1alpha3 TrafficTarget is dropped, as it would be in a cluster).
 *
 * Regexes (`pathRegex`, header values) must be RE2 that JavaScript reads the same way (SMI001, at
 * the offending value); match names are keys, so a repeated name is an error (SMI012).
 */
import { z } from 'zod';
import { checkRe2Regex } from './re2.js';
import { HTTP_METHODS } from './route-schemas.js';
import { addCodedIssue, intOrString, objectMeta, optString, portNumber } from './schema-parts.js';
import type { SmiHttpMatch } from './types.js';

const subject = { kind: z.string(), name: z.string().min(1), namespace: optString };

const re2 = (field: string) =>
  z.string().superRefine((value, ctx) => {
    const p = checkRe2Regex(value);
    if (p !== undefined) addCodedIssue(ctx, 'SMI001', { field, value, detail: p.detail, fix: p.fix });
  });

/** TrafficTarget rule kinds per version: UDPRoute arrived with v1alpha3. */
const ruleOf = (kinds: readonly [string, ...string[]]) =>
  z.strictObject({
    kind: z.enum(kinds as ['HTTPRouteGroup' | 'TCPRoute' | 'UDPRoute', ...('HTTPRouteGroup' | 'TCPRoute' | 'UDPRoute')[]]),
    name: z.string().min(1),
    matches: z.array(z.string()).optional(),
  });

const destinationWithPort = z.strictObject({ ...subject, port: intOrString.optional() });
const destination = z.strictObject(subject);
const sources = z.array(z.strictObject(subject)).default([]);

/** TrafficTarget v1alpha2 and v1alpha3 `spec`. */
export const trafficTargetSpecs = {
  v1alpha2: z.strictObject({ destination: destinationWithPort, sources, rules: z.array(ruleOf(['HTTPRouteGroup', 'TCPRoute'])).default([]) }),
  v1alpha3: z.strictObject({ destination, sources, rules: z.array(ruleOf(['HTTPRouteGroup', 'TCPRoute', 'UDPRoute'])).default([]) }),
};

/** TrafficTarget v1alpha1 top-level fields (the rules are called `specs`). */
export const trafficTargetV1alpha1Fields = {
  destination: destinationWithPort,
  sources,
  specs: z.array(ruleOf(['HTTPRouteGroup', 'TCPRoute'])).default([]),
};

// Headers: the SMI text and SDK write a map of name to regex; OSM's CRD a list of such maps.
const headerMap = z.record(z.string().min(1), re2('header value'));
const headers = z
  .union([headerMap, z.array(headerMap)])
  .transform((h) => (Array.isArray(h) ? h : [h]).flatMap((m) => Object.entries(m).map(([name, value]) => ({ name, value }))));

const matchFields = {
  name: z.string().min(1),
  pathRegex: re2('pathRegex').optional(),
  methods: z.array(z.enum(['*', ...HTTP_METHODS])).optional(),
};
const httpMatchV1alpha1 = z.strictObject(matchFields);
const httpMatch = z.strictObject({ ...matchFields, headers: headers.optional() });

// Match names are keys: a repeated one is an error at its own position.
const uniqueNames = <T extends { readonly name: string }>(matches: readonly T[], ctx: z.RefinementCtx) => {
  const seen = new Set<string>();
  matches.forEach((m, i) => {
    if (seen.has(m.name)) ctx.addIssue({ code: 'custom', message: 'SMI012', path: [i, 'name'], params: { ward: 'SMI012', value: m.name } });
    seen.add(m.name);
  });
};

/** HTTPRouteGroup top-level `matches` (v1alpha1 without headers, v1alpha2 with) and `spec` (v1alpha3, v1alpha4). */
export const httpRouteGroupFields = {
  v1alpha1: { matches: z.array(httpMatchV1alpha1).superRefine(uniqueNames) },
  v1alpha2: { matches: z.array(httpMatch).superRefine(uniqueNames) },
};
/** HTTPRouteGroup v1alpha3/v1alpha4 `spec`. */
export const httpRouteGroupSpec = z.strictObject({ matches: z.array(httpMatch).superRefine(uniqueNames) });

/** TCPRoute / UDPRoute v1alpha4 `spec` (ports absent or empty = every port). */
export const portRouteSpec = z.strictObject({
  matches: z.strictObject({ ports: z.array(portNumber).optional() }).optional(),
});

/** The document around top-level fields (v1alpha1/v1alpha2) or a `spec`. */
export const smiDoc = <F extends z.core.$ZodLooseShape>(fields: F) =>
  z.strictObject({ apiVersion: z.string(), kind: z.string(), metadata: objectMeta, status: z.unknown().optional(), ...fields });

/** Normalises a parsed match (headers absent in v1alpha1). */
export function toSmiMatch(m: {
  name: string;
  pathRegex?: string | undefined;
  methods?: string[] | undefined;
  headers?: { name: string; value: string }[] | undefined;
}): SmiHttpMatch {
  return {
    name: m.name,
    ...(m.pathRegex !== undefined ? { pathRegex: m.pathRegex } : {}),
    ...(m.methods !== undefined ? { methods: m.methods } : {}),
    ...(m.headers !== undefined ? { headers: m.headers } : {}),
  };
}
