/** Public surface of `proxy`: the sidecar behind `ward proxy`. */

export * from './admin-server.js';
export * from './client-hello.js';
export * from './detect-http.js';
export * from './identity-bootstrap.js';
export * from './inbound-http.js';
export * from './inbound-proxy.js';
export * from './inbound-stats.js';
export { EXPOSITION_CONTENT_TYPE, METRICS_IDLE_TIMEOUT_MS, MetricsRegistry, type MetricsRegistryOptions } from './metric-cells.js';
export { type HttpFamilies, registerHttpFamilies } from './metrics-http.js';
export * from './metrics-identity.js';
export * from './metrics-inbound.js';
export * from './metrics-labels.js';
export * from './metrics-outbound.js';
export * from './metrics-transport.js';
export { PROXY_NODE_OPTIONS } from './node-options.js';
export * from './original-dst.js';
export * from './outbound-balancer.js';
export * from './outbound-connector.js';
export * from './outbound-proxy.js';
export * from './outbound-resolver.js';
export * from './policy-watch.js';
export * from './prefix-reader.js';
export * from './proxy-main.js';
export * from './proxy-tls.js';
export * from './tls-context.js';
export * from './tls-san.js';
export * from './transport-header.js';
