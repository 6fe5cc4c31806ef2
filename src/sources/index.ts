/** Public surface of `sources`: feeders of the indexes (the directory source, the Kubernetes API). */

export {
  type ChangeSummary,
  DirectorySource,
  type DirectorySourceOptions,
  type FileStatus,
  type SourceSink,
  type SourceTx,
} from './directory-source.js';
export {
  DEFAULT_MAX_LINE_BYTES,
  inClusterConfig,
  KubeApiError,
  KubeClient,
  type KubeClientOptions,
  type KubeConfig,
  KubeConfigError,
  type KubeRequest,
  type KubeRequester,
  type KubeResponse,
  type KubeToken,
  KubeWatchStreamError,
  LineDecoder,
  type LoadKubeconfigOptions,
  loadKubeconfig,
  parseWatchLine,
  SERVICE_ACCOUNT_DIR,
  type WatchEvent,
  type WatchOptions,
} from './kube/client.js';
export {
  KubernetesSource,
  type KubernetesSourceOptions,
  type ObjectStatus,
  type PolicySource,
  podOwner,
  WATCHED_KINDS,
  type WatchedKind,
} from './kube/kubernetes-source.js';
export { type KubeSourceStats, registerKubeSourceMetrics } from './kube/metrics.js';
export {
  apiVersionOf,
  collectionPath,
  type KubeObject,
  objectKey,
  Reflector,
  type ReflectorChange,
  type ReflectorOptions,
  type ReflectorState,
  type ReflectorStats,
  type ResourceType,
} from './kube/reflector.js';
