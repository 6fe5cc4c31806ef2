/**
 * Public surface of `local`: the local mesh runtime behind `ward up` (pods as processes on
 * their own loopback addresses), and what `ward status|logs|restart` need to find it.
 */

export { AddressAllocator, appAddressOf, FIRST_POD_ADDRESS, NODE_ADDRESS, POD_RANGE, podRangeOffset } from './addresses.js';
export type { LocalApiHandlers, LogSource } from './api-server.js';
export { type Denial, DenialLog, parseDenial } from './denials.js';
export { containerArgv, containerEnv, expandKubeVars, OUTBOUND_PORT, runtimeEnv } from './env.js';
export { checkLocalPods, declaredPorts, PROXY_PORTS } from './plan.js';
export type { ContainerStatus, PodStatus } from './pod.js';
export { type LocalEvent, type LocalMesh, type LocalMeshOptions, type LocalStatus, type SummaryRow, startLocalMesh } from './runtime.js';
export {
  isProcessAlive,
  killSurvivors,
  MESH_MARKER_ENV,
  type MeshState,
  meshAnswers,
  meshStatePath,
  podStateDir,
  readMeshState,
  runningMesh,
  stateDirOf,
} from './state.js';
