/**
 * Public surface of `controller`: the long-running control plane behind `ward controller`.
 */

// What the local runtime (`ward up`) needs from the modules below the controller.
export { DEFAULT_TOKEN_TTL_MS, IDENTITY_FILES, initIdentity, mintToken } from '../identity/index.js';
export type { ClusterConfig, PodInfo } from '../index/index.js';
export { type ContainerSpec, type Pod, PROXY_CONTAINER_NAME, type ProbeSpec } from '../manifest/index.js';
export * from './admin-api.js';
export * from './admin-server.js';
export * from './controller.js';
