/**
 * What ward's CRDs need so that the status the StatusWriter applies is stored and shown: the
 * `status` schema of the policy kinds (Server, AuthorizationPolicy, ServerAuthorization,
 * MeshTLSAuthentication, NetworkAuthentication) and their printer columns. Every version of
 * those CRDs also needs `subresources: {status: {}}`.
 *
 * `conditions` is a map keyed by `type`, so that conditions another manager adds survive ward's
 * server-side apply of its own two.
 */

/** The openAPIV3Schema of `status` for ward's policy kinds. */
export function policyStatusSchema(): Record<string, unknown> {
  return {
    type: 'object',
    properties: {
      conditions: {
        type: 'array',
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['type'],
        items: {
          type: 'object',
          required: ['type', 'status', 'reason', 'message', 'lastTransitionTime'],
          properties: {
            type: { type: 'string' },
            status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
            reason: { type: 'string' },
            message: { type: 'string' },
            observedGeneration: { type: 'integer', format: 'int64', minimum: 0 },
            lastTransitionTime: { type: 'string', format: 'date-time' },
          },
        },
      },
      selectedPods: { type: 'integer', format: 'int32', minimum: 0 },
      selectedPorts: { type: 'integer', format: 'int32', minimum: 0 },
    },
  };
}

/** Printer columns of ward's policy kinds: ACCEPTED, PODS, PORTS, and RESOLVED with `-o wide`. */
export function policyStatusPrinterColumns(): Record<string, unknown>[] {
  return [
    { name: 'Accepted', type: 'string', jsonPath: '.status.conditions[?(@.type=="Accepted")].status' },
    { name: 'Pods', type: 'integer', jsonPath: '.status.selectedPods' },
    { name: 'Ports', type: 'integer', jsonPath: '.status.selectedPorts' },
    { name: 'Resolved', type: 'string', jsonPath: '.status.conditions[?(@.type=="ResolvedRefs")].status', priority: 1 },
  ];
}
