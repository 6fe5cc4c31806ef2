/** Public surface of `proxy`: the sidecar behind `ward proxy`, what starts it and what it needs. */

export { ADMIN_POLICY_PORT } from './admin-server.js';
export {
  DEFAULT_DISCOVERY_IDLE_MS,
  DEFAULT_DISCOVERY_TIMEOUT_MS,
  DEFAULT_MAX_DISCOVERED_PORTS,
  type PolicyDiscoveryOptions,
} from './inbound/policy-watch.js';
export { startProxy } from './main.js';
export { METRICS_IDLE_TIMEOUT_MS, MetricsRegistry, type MetricsRegistryOptions } from './metrics/cells.js';
export { processMetricsRegistry } from './metrics/process.js';
export { DEFAULT_MESH_PORT } from './outbound/connector.js';
export { settleHeapWhenQuiet } from './runtime/heap-settle.js';
export { loadMallocTrim } from './runtime/malloc-trim.js';
export { PROXY_NODE_OPTIONS } from './runtime/node-options.js';
export { OriginalDstAddonError } from './transport/original-dst.js';
export type * from './types.js';
