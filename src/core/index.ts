/**
 * Public surface of `core`: the policy model, compiled matchers, the decision engine and the
 * diagnostics catalog. Pure: no node:* imports, no I/O, no clock reads.
 */
export * from './model.js';
export * from './ip.js';
export * from './label-selector.js';
export * from './identity-name.js';
export * from './diagnostics.js';
