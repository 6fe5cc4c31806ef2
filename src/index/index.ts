/**
 * Public surface of `index`: resources to per-(pod, port) `InboundServer` values, and to the
 * endpoints the Destination API serves.
 */

export * from './authz-view.js';
export * from './cell.js';
export type { ApSpec, Converted, PolicyTarget, RouteSpec, SazSpec } from './convert.js';
export * from './endpoints.js';
export * from './explain-probe.js';
export * from './explain-request.js';
export * from './graph.js';
export * from './lint.js';
export * from './outbound-policy.js';
export * from './pod.js';
export * from './policy-index.js';
export * from './policy-targets.js';
export * from './query-error.js';
export * from './status.js';
export * from './targets.js';
