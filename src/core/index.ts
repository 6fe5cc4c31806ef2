/**
 * Public surface of `core`: the policy model, compiled matchers, the decision engine and the
 * diagnostics catalog. Pure: no node:* imports, no I/O, no clock reads.
 */

export * from './authorize.js';
export * from './default-policy.js';
export * from './denial-groups.js';
export * from './diagnostics.js';
export * from './equal.js';
export * from './explain.js';
export * from './identity-name.js';
export * from './ip.js';
export * from './label-selector.js';
export * from './model.js';
export * from './network-match.js';
export * from './policy-graph.js';
export * from './reachability.js';
export * from './request-target.js';
export * from './route-match.js';
