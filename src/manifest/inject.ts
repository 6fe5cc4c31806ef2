/**
 * The proxy injector's effect at pod creation (POLICY-SEMANTICS §2.3-2.4, CLI.md "Workloads in
 * manifests"): which pods get a proxy, and what the injector writes onto them. A pod that
 * already carries the injector's marks was created earlier and is left exactly as it is, so a
 * namespace annotation added since then does not reach it (as in a live cluster).
 */
import { ANNOTATIONS } from './annotations.js';
import type { ContainerSpec, Namespace, Pod } from './types.js';

/** `proxy.opaquePorts` default: ports the injector marks opaque when the pod declares them. */
export const DEFAULT_OPAQUE_PORTS: readonly number[] = [25, 587, 3306, 4444, 5432, 6379, 9300, 11211];

/** Name of the injected proxy container. */
export const PROXY_CONTAINER_NAME = 'linkerd-proxy';

/** Install values the injector uses. */
export interface InjectConfig {
  readonly controlPlaneNamespace: string;
  /** `proxy.opaquePorts` (default `DEFAULT_OPAQUE_PORTS`). */
  readonly opaquePorts?: readonly number[] | undefined;
}

const PROXY_CONTAINER: ContainerSpec = {
  name: PROXY_CONTAINER_NAME,
  ports: [
    { name: 'linkerd-proxy', containerPort: 4143 },
    { name: 'linkerd-admin', containerPort: 4191 },
  ],
  readinessProbe: { httpGet: { port: 4191, path: '/ready' } },
  livenessProbe: { httpGet: { port: 4191, path: '/live' } },
};

const INJECT_VALUES = new Set(['enabled', 'ingress']);
const CONFIG_PREFIXES = ['config.linkerd.io/', 'config.alpha.linkerd.io/'];

/**
 * True when the pod is (or will be) meshed: it has the control-plane-ns label, its own
 * `linkerd.io/inject` is `enabled`/`ingress`, or its namespace's is and the pod does not say
 * `disabled`.
 */
export function isMeshedPod(pod: Pod, namespace: Namespace | undefined): boolean {
  if (Object.hasOwn(pod.metadata.labels, ANNOTATIONS.controlPlaneNs)) return true;
  const own = pod.metadata.annotations[ANNOTATIONS.inject];
  if (own !== undefined && INJECT_VALUES.has(own)) return true;
  const inherited = namespace?.metadata.annotations[ANNOTATIONS.inject];
  return inherited !== undefined && INJECT_VALUES.has(inherited) && own !== 'disabled';
}

/**
 * True when the pod carries the injector's marks (the control-plane label, a proxy container or
 * the proxy-version annotation): it was created already, so nothing is copied onto it.
 */
export function isInjectedPod(pod: Pod): boolean {
  return (
    Object.hasOwn(pod.metadata.labels, ANNOTATIONS.controlPlaneNs) ||
    Object.hasOwn(pod.metadata.annotations, ANNOTATIONS.proxyVersion) ||
    pod.spec.containers.some((c) => c.name === PROXY_CONTAINER_NAME)
  );
}

/**
 * The pod as the injector creates it. Unmeshed pods and pods already injected come back
 * unchanged. Otherwise the namespace's `config.linkerd.io/*` (and `config.alpha.linkerd.io/*`)
 * annotations the pod lacks are copied, `opaque-ports` is set to the declared default opaque
 * ports when neither pod nor namespace sets it, and the label, version annotation and proxy
 * container are added.
 */
export function injectPod(pod: Pod, namespace: Namespace | undefined, cfg: InjectConfig): Pod {
  if (!isMeshedPod(pod, namespace) || isInjectedPod(pod)) return pod;
  const annotations: Record<string, string> = { ...pod.metadata.annotations };
  for (const [key, value] of Object.entries(namespace?.metadata.annotations ?? {})) {
    if (CONFIG_PREFIXES.some((p) => key.startsWith(p)) && !Object.hasOwn(annotations, key)) annotations[key] = value;
  }
  if (!Object.hasOwn(annotations, ANNOTATIONS.opaquePorts)) {
    const declared = new Set([...pod.spec.containers, ...(pod.spec.initContainers ?? [])].flatMap((c) => (c.ports ?? []).map((p) => p.containerPort)));
    const opaque = [...new Set(cfg.opaquePorts ?? DEFAULT_OPAQUE_PORTS)].filter((p) => declared.has(p)).sort((a, b) => a - b);
    if (opaque.length > 0) annotations[ANNOTATIONS.opaquePorts] = opaque.join(',');
  }
  annotations[ANNOTATIONS.proxyVersion] = 'ward';
  return {
    ...pod,
    metadata: {
      ...pod.metadata,
      labels: { [ANNOTATIONS.controlPlaneNs]: cfg.controlPlaneNamespace, ...pod.metadata.labels },
      annotations,
    },
    spec: { ...pod.spec, containers: [...pod.spec.containers, PROXY_CONTAINER] },
  };
}
