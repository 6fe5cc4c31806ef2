/**
 * Public surface of `shared` (node-only helpers any module but `core` may use): errors, backoff,
 * logging, metrics, the lean AsyncResource#bind of hot-path processes.
 */

export * from './async-bind.js';
export * from './backoff.js';
export * from './errors.js';
export * from './logger.js';
export * from './loopback.js';
export * from './metrics.js';
export * from './package-root.js';
export * from './timers.js';
