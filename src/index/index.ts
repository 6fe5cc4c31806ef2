/**
 * Public surface of `index`: resources to per-(pod, port) `InboundServer` values.
 */
export * from './policy-index.js';
export * from './cell.js';
export * from './pod.js';
export * from './lint.js';
export type { ApSpec, SazSpec, RouteSpec, PolicyTarget, Converted } from './convert.js';
