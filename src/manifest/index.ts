/**
 * Public surface of `manifest`: loading manifests with positions, decoding them into typed
 * resources per CRD version, the admission webhook's rules, per-resource lint, workload
 * expansion, the injector's pod transform, and the pipeline that chains them.
 */

export {
  type AdmissionContext,
  type AdmissionVerdict,
  admitDecoded,
  admitResource,
  isGroup,
  isLinkerdAtMost217,
} from './admission.js';
export {
  ANNOTATIONS,
  checkPortSet,
  type PortSetError,
  parseDefaultPolicy,
  parsePortSet,
} from './annotations.js';
export {
  CRD_KINDS,
  type CrdKind,
  type CrdOptions,
  type CrdVersion,
  type CustomResourceDefinition,
  customResourceDefinitions,
  GATEWAY_API_BUNDLE_VERSION,
  type JsonSchema,
  type PrinterColumn,
  specSchema,
  toStructural,
  WARD_PART_OF_LABEL,
} from './crds.js';
export { type DecodeResult, type DocumentRef, decodeResource, formatPath, splitApiVersion } from './decode.js';
export { parseGoDurationMs } from './go-duration.js';
export { DEFAULT_OPAQUE_PORTS, type InjectConfig, injectPod, isInjectedPod, isMeshedPod, PROXY_CONTAINER_NAME } from './inject.js';
export {
  DEFAULT_PROXY_UID,
  escapeJsonPointer,
  IDENTITY_TOKEN_AUDIENCE,
  IDENTITY_TOKEN_DIR,
  IDENTITY_TOKEN_VOLUME,
  injectKubePod,
  injectKubeWorkload,
  type JsonObject,
  type JsonPatchOperation,
  type KubeInjectConfig,
  type KubeInjectOptions,
  type KubeInjectResult,
  type KubeWorkloadResult,
  PROXY_CONFIG_ANNOTATIONS,
  PROXY_INIT_CONTAINER_NAME,
  PROXY_PORTS,
  TRUST_ANCHORS_ENV,
  WORKLOAD_TEMPLATE_PATHS,
} from './kube-inject.js';
export { lintResource } from './lint-resource.js';
export {
  documentAt,
  documentFromObject,
  type LoadOptions,
  type LoadResult,
  loadManifests,
  type ManifestDocument,
  parseManifestText,
} from './load.js';
export {
  type AdmitOptions,
  type AdmitResult,
  type AdmittedDocument,
  admitDocuments,
  type CheckEntry,
  dedupeResources,
  duplicateDiagnostic,
  namespacesOf,
  type PodsResult,
  podsOf,
  resourceKeyOf,
  resourceKeyString,
} from './pipeline.js';
export { checkRe2Regex, hasNestedQuantifier, type Re2Problem } from './re2.js';
export { HTTP_METHODS } from './route-schemas.js';
export * from './smi-types.js';
export * from './types.js';
export { expandWorkloads, isWorkload } from './workloads.js';
