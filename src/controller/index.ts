/**
 * Public surface of `controller`: the long-running control plane behind `ward controller`.
 */

export * from './admin-api.js';
export * from './admin-server.js';
export * from './controller.js';
