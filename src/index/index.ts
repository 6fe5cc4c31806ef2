/**
 * Public surface of `index`: resources to per-(pod, port) `InboundServer` values.
 */

export * from './cell.js';
export type { ApSpec, Converted, PolicyTarget, RouteSpec, SazSpec } from './convert.js';
export * from './lint.js';
export * from './pod.js';
export * from './policy-index.js';
