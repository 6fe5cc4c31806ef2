/**
 * Public surface of `index`: resources to per-(pod, port) `InboundServer` values.
 */

export * from './authz-view.js';
export * from './cell.js';
export type { ApSpec, Converted, PolicyTarget, RouteSpec, SazSpec } from './convert.js';
export * from './explain-probe.js';
export * from './explain-request.js';
export * from './lint.js';
export * from './pod.js';
export * from './policy-index.js';
export * from './query-error.js';
export * from './targets.js';
