/**
 * zod schemas of HTTPRoute (`policy.linkerd.io` v1alpha1-v1beta3, `gateway.networking.k8s.io`
 * v1alpha2-v1) and GRPCRoute specs, composed from shared pieces. Each Linkerd version adds rule
 * fields (v1beta2 `backendRefs`, v1beta3 `timeouts`); the Gateway API versions share one shape.
 */
import { z } from 'zod';
import { GATEWAY_GROUP, POLICY_GROUP } from '../core/index.js';
import { optString } from './schema-parts.js';

/** HTTP methods a route match may name. */
export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT', 'OPTIONS', 'TRACE', 'PATCH'] as const;

const parentRef = (defaultGroup: string) =>
  z.strictObject({
    group: z.string().default(defaultGroup),
    kind: z.string().default('Gateway'),
    name: z.string(),
    namespace: optString,
    sectionName: optString,
    port: z.int().optional(),
  });

const valueMatch = z.strictObject({
  type: z.enum(['Exact', 'RegularExpression']).default('Exact'),
  name: z.string(),
  value: z.string(),
});

const httpMatch = z.strictObject({
  path: z
    .strictObject({
      type: z.enum(['Exact', 'PathPrefix', 'RegularExpression']).default('PathPrefix'),
      value: z.string().default('/'),
    })
    .optional(),
  headers: z.array(valueMatch).optional(),
  queryParams: z.array(valueMatch).optional(),
  method: z.enum(HTTP_METHODS).optional(),
});

const header = z.strictObject({ name: z.string(), value: z.string() });
const headerModifier = z.strictObject({
  add: z.array(header).optional(),
  set: z.array(header).optional(),
  remove: z.array(z.string()).optional(),
});
const requestRedirect = z.strictObject({
  scheme: optString,
  hostname: optString,
  path: z
    .strictObject({
      type: z.enum(['ReplaceFullPath', 'ReplacePrefixMatch']),
      replaceFullPath: optString,
      replacePrefixMatch: optString,
    })
    .optional(),
  port: z.int().optional(),
  statusCode: z.int().optional(),
});

const filterBase = {
  requestHeaderModifier: headerModifier.optional(),
  responseHeaderModifier: headerModifier.optional(),
};
/** Linkerd routes know three filter types. */
const linkerdHttpFilter = z.strictObject({
  type: z.enum(['RequestHeaderModifier', 'ResponseHeaderModifier', 'RequestRedirect']),
  ...filterBase,
  requestRedirect: requestRedirect.optional(),
});
// Gateway API filters: every type is kept (the index rejects the ones inbound does not support),
// and the fields ward does not interpret are accepted as they are.
const gatewayFilterExtras = {
  requestMirror: z.unknown().optional(),
  extensionRef: z.unknown().optional(),
  cors: z.unknown().optional(),
  externalAuth: z.unknown().optional(),
};
const gatewayHttpFilter = z.strictObject({
  type: z.string(),
  ...filterBase,
  requestRedirect: requestRedirect.optional(),
  urlRewrite: z.unknown().optional(),
  ...gatewayFilterExtras,
});
const gatewayGrpcFilter = z.strictObject({ type: z.string(), ...filterBase, ...gatewayFilterExtras });

const backendRef = z.strictObject({
  group: optString,
  kind: optString,
  name: z.string(),
  namespace: optString,
  port: z.int().optional(),
  weight: z.int().optional(),
  filters: z.array(z.unknown()).optional(),
});
const timeouts = z.strictObject({ request: optString, backendRequest: optString });

const linkerdRuleV1beta1 = { matches: z.array(httpMatch).optional(), filters: z.array(linkerdHttpFilter).optional() };
const linkerdRuleV1beta2 = { ...linkerdRuleV1beta1, backendRefs: z.array(backendRef).optional() };
const linkerdRuleV1beta3 = { ...linkerdRuleV1beta2, timeouts: timeouts.optional() };
const gatewayRuleExtras = { name: optString, sessionPersistence: z.unknown().optional() };
const gatewayHttpRule = {
  matches: z.array(httpMatch).optional(),
  filters: z.array(gatewayHttpFilter).optional(),
  backendRefs: z.array(backendRef).optional(),
  timeouts: timeouts.optional(),
  retry: z.unknown().optional(),
  ...gatewayRuleExtras,
};
const grpcRule = {
  matches: z
    .array(
      z.strictObject({
        method: z.strictObject({ type: z.enum(['Exact', 'RegularExpression']).default('Exact'), service: optString, method: optString }).optional(),
        headers: z.array(valueMatch).optional(),
      }),
    )
    .optional(),
  filters: z.array(gatewayGrpcFilter).optional(),
  backendRefs: z.array(backendRef).optional(),
  ...gatewayRuleExtras,
};

function routeSpec<R extends z.core.$ZodLooseShape>(defaultGroup: string, rule: R) {
  return z.strictObject({
    parentRefs: z.array(parentRef(defaultGroup)).default([]),
    hostnames: z.array(z.string()).default([]),
    rules: z.array(z.strictObject(rule)).default([]),
  });
}

/** `policy.linkerd.io` HTTPRoute spec per version. */
export const linkerdHttpRouteSpecs = {
  v1alpha1: routeSpec(POLICY_GROUP, linkerdRuleV1beta1),
  v1beta1: routeSpec(POLICY_GROUP, linkerdRuleV1beta1),
  v1beta2: routeSpec(POLICY_GROUP, linkerdRuleV1beta2),
  v1beta3: routeSpec(POLICY_GROUP, linkerdRuleV1beta3),
};

/** `gateway.networking.k8s.io` HTTPRoute spec (same shape in every served version). */
export const gatewayHttpRouteSpec = routeSpec(GATEWAY_GROUP, gatewayHttpRule);

/** `gateway.networking.k8s.io` GRPCRoute spec. */
export const grpcRouteSpec = routeSpec(GATEWAY_GROUP, grpcRule);
