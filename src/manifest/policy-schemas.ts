/**
 * zod schemas of the `policy.linkerd.io` authorization CRDs, one per served version. Versions
 * differ only in which fields exist (POLICY-SEMANTICS §1.2-1.6); rules that span fields are
 * admission's business (`admitResource`), so a webhook-rejected object may still decode.
 */
import { z } from 'zod';
import { labelSelector, localTargetRef, namespacedTargetRef, network, optString, proxyProtocol, serverPort } from './schema-parts.js';

const serverV1beta1 = {
  podSelector: labelSelector.optional(),
  port: serverPort,
  proxyProtocol: proxyProtocol.default('unknown'),
};
const serverV1beta2 = { ...serverV1beta1, externalWorkloadSelector: labelSelector.optional() };
// accessPolicy stays raw text: admission rejects bad values, the index treats them as absent.
const serverV1beta3 = { ...serverV1beta2, accessPolicy: optString };

/** Server spec per version. */
export const serverSpecs = {
  v1alpha1: z.strictObject(serverV1beta1),
  v1beta1: z.strictObject(serverV1beta1),
  v1beta2: z.strictObject(serverV1beta2),
  v1beta3: z.strictObject(serverV1beta3),
};

/** ServerAuthorization spec (v1alpha1 and v1beta1 are identical). */
export const serverAuthorizationSpec = z.strictObject({
  server: z.strictObject({ name: optString, selector: labelSelector.optional() }),
  client: z.strictObject({
    networks: z.array(network).optional(),
    unauthenticated: z.boolean().default(false),
    meshTLS: z
      .strictObject({
        unauthenticatedTLS: z.boolean().default(false),
        identities: z.array(z.string()).optional(),
        serviceAccounts: z.array(z.strictObject({ name: z.string(), namespace: optString })).optional(),
      })
      .optional(),
  }),
});

/** AuthorizationPolicy v1alpha1 spec. `requiredAuthenticationRefs` stays absent when omitted (POL045). */
export const authorizationPolicySpec = z.strictObject({
  targetRef: localTargetRef,
  requiredAuthenticationRefs: z.array(namespacedTargetRef).optional(),
});

/** MeshTLSAuthentication v1alpha1 spec. */
export const meshTLSAuthenticationSpec = z.strictObject({
  identities: z.array(z.string()).optional(),
  identityRefs: z.array(namespacedTargetRef).optional(),
});

/** NetworkAuthentication v1alpha1 spec. */
export const networkAuthenticationSpec = z.strictObject({ networks: z.array(network) });
