/**
 * The proxy injector on Kubernetes objects: the mutating webhook's transform of a raw Pod (plain
 * JSON as the API server sends it) and `ward inject`'s transform of workload templates. Whether a
 * pod is meshed, whether it was injected already and which annotations it inherits are decided by
 * `inject.ts` (the same functions the local mesh uses); this file adds what a real pod needs: the
 * `linkerd-init` container that writes the iptables rules (`ward proxy-init`), the `linkerd-proxy`
 * container (`ward proxy --transparent`, or a native sidecar), the projected identity token, the
 * downward-API environment, probes and resources. It returns the new pod and an RFC 6902 JSON
 * Patch against the original, as the webhook answers.
 */
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { controllerIdentity } from '../core/index.js';
import { ANNOTATIONS, checkPortSet } from './annotations.js';
import { type InjectConfig, injectPod, isInjectedPod, isMeshedPod, PROXY_CONTAINER_NAME } from './inject.js';
import type { ContainerSpec, Namespace, Pod } from './types.js';

/** A JSON object (a Kubernetes object as the API server sends it). */
export type JsonObject = { [key: string]: unknown };

/** One RFC 6902 operation (the injector only adds). */
export interface JsonPatchOperation {
  readonly op: 'add';
  /** An RFC 6901 pointer. */
  readonly path: string;
  readonly value: unknown;
}

/** Install values of the Kubernetes injector. */
export interface KubeInjectConfig extends InjectConfig {
  /** The image of both injected containers (ward's one image). */
  readonly image: string;
  /** Default `IfNotPresent`. */
  readonly imagePullPolicy?: string | undefined;
  /** Where proxies reach the controller's identity, policy and destination APIs (an IP or a DNS name). */
  readonly controllerHost: string;
  /** Trust anchors (PEM), handed to the proxy inline in its environment. */
  readonly trustAnchorsPem: string;
  /** The proxy's user: proxy-init exempts its sockets from the outbound redirect. Default 2102. */
  readonly proxyUid?: number | undefined;
  /** Default `cluster.local`. */
  readonly clusterDomain?: string | undefined;
  /** Identity trust domain, default `cluster.local`. */
  readonly trustDomain?: string | undefined;
  /** Written to `linkerd.io/proxy-version` and `linkerd.io/created-by` (default `ward`). */
  readonly version?: string | undefined;
  /**
   * The containers' `command`. Default: none, so the image's entrypoint (`node bin/ward.js` in
   * ward's image) runs and `args` are ward's subcommands.
   */
  readonly command?: readonly string[] | undefined;
  /** The controller's ports (defaults: identity 8080, policy 8090, destination 8086). */
  readonly controllerPorts?: { readonly identity?: number; readonly policy?: number; readonly destination?: number } | undefined;
}

/** Options of `injectKubePod`. */
export interface KubeInjectOptions {
  /** The namespace the pod is created in (the admission request's); else the pod's own, else `default`. */
  readonly namespace?: string | undefined;
  /**
   * Inject unless the pod opts out, whatever the namespace says (`ward inject --manual`, as
   * `linkerd inject --manual`).
   */
  readonly force?: boolean | undefined;
}

/** The outcome of `injectKubePod`. */
export interface KubeInjectResult {
  readonly injected: boolean;
  /** Why the pod was left alone (when `injected` is false). */
  readonly reason?: string | undefined;
  /** The pod as created (a new object; the input is never changed). */
  readonly pod: JsonObject;
  /** Operations that turn the input into `pod` (empty when not injected). */
  readonly patch: JsonPatchOperation[];
  /** Annotations the injector could not use (a bad value is ignored whole, as upstream does). */
  readonly warnings: string[];
}

/** Ports of the injected proxy (upstream's). */
export const PROXY_PORTS = { inbound: 4143, outbound: 4140, admin: 4191, control: 4190 } as const;
/** Default proxy user id. */
export const DEFAULT_PROXY_UID = 2102;
/** Name of the injected init container. */
export const PROXY_INIT_CONTAINER_NAME = 'linkerd-init';
/** Name of the projected ServiceAccount token volume. */
export const IDENTITY_TOKEN_VOLUME = 'linkerd-identity-token';
/** Where the token volume is mounted in the proxy. */
export const IDENTITY_TOKEN_DIR = '/var/run/secrets/tokens';
/** Audience of the identity token (the controller's TokenReview asks for it). */
export const IDENTITY_TOKEN_AUDIENCE = 'identity.l5d.io';
/** The environment variable that carries the trust anchors' PEM to the proxy. */
export const TRUST_ANCHORS_ENV = 'LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS';
/** The only client identity the proxy's `/tap` answers, as Linkerd's injector names its tap service there. */
export const TAP_IDENTITY_ENV = 'LINKERD2_PROXY_TAP_SVC_NAME';

const XTABLES_VOLUME = 'linkerd-proxy-init-xtables-lock';
const DEFAULT_CONTROLLER_PORTS = { identity: 8080, policy: 8090, destination: 8086 };

/** Annotations (beyond ANNOTATIONS) that shape the injected containers. */
export const PROXY_CONFIG_ANNOTATIONS = {
  skipOutboundPorts: 'config.linkerd.io/skip-outbound-ports',
  /** Source networks whose inbound traffic is not redirected to the proxy (comma-separated CIDRs). */
  skipSubnets: 'config.linkerd.io/skip-subnets',
  proxyUid: 'config.linkerd.io/proxy-uid',
  proxyLogLevel: 'config.linkerd.io/proxy-log-level',
  cpuRequest: 'config.linkerd.io/proxy-cpu-request',
  cpuLimit: 'config.linkerd.io/proxy-cpu-limit',
  memoryRequest: 'config.linkerd.io/proxy-memory-request',
  memoryLimit: 'config.linkerd.io/proxy-memory-limit',
  /** Native sidecar: `config.linkerd.io/…` wins over `config.beta.linkerd.io/…` over `config.alpha.linkerd.io/…`. */
  nativeSidecar: 'config.linkerd.io/proxy-enable-native-sidecar',
  nativeSidecarBeta: 'config.beta.linkerd.io/proxy-enable-native-sidecar',
  nativeSidecarAlpha: 'config.alpha.linkerd.io/proxy-enable-native-sidecar',
  createdBy: 'linkerd.io/created-by',
  trustRootSha256: 'linkerd.io/trust-root-sha256',
  workloadNs: 'linkerd.io/workload-ns',
} as const;

const WARD_LOG_LEVELS = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace']);
// Kubernetes resource quantities (decimal or binary suffix, or an exponent).
const QUANTITY = /^\+?(\d+(\.\d*)?|\.\d+)([numkMGTPE]|[KMGTPE]i|[eE][+-]?\d+)?$/;

/**
 * The mutating webhook's transform of one Pod. Pods that are not meshed (pod, workload template
 * and namespace annotations, `inject.ts`), already injected, or on the host network come back
 * unchanged with the reason. Never throws for bad input.
 */
export function injectKubePod(raw: unknown, namespace: unknown, cfg: KubeInjectConfig, opts: KubeInjectOptions = {}): KubeInjectResult {
  if (!isRecord(raw) || !isRecord(raw.spec) || !Array.isArray(raw.spec.containers)) {
    return { injected: false, reason: 'not a pod (no spec.containers)', pod: isRecord(raw) ? raw : {}, patch: [], warnings: [] };
  }
  const meta = isRecord(raw.metadata) ? raw.metadata : {};
  const spec = raw.spec;
  const nsName = opts.namespace ?? (typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : 'default');
  const view = podView(raw, nsName);
  const nsView = namespaceView(namespace, nsName, opts.force === true);
  const skip = (reason: string): KubeInjectResult => ({ injected: false, reason, pod: raw, patch: [], warnings: [] });
  if (spec.hostNetwork === true) return skip('hostNetwork is enabled');
  if (isInjectedPod(view)) return skip('pod has a proxy injected already');
  if (!isMeshedPod(view, nsView)) {
    if (view.metadata.annotations[ANNOTATIONS.inject] === 'disabled') return skip(`pod has the annotation "${ANNOTATIONS.inject}: disabled"`);
    return skip(`neither the namespace nor the pod have the annotation "${ANNOTATIONS.inject}: enabled"`);
  }

  // Label, annotations inherited from the namespace and opaque ports: the shared decision.
  const created = injectPod(view, nsView, cfg);
  const version = cfg.version ?? 'ward';
  const annotations: Record<string, string> = {
    ...created.metadata.annotations,
    [ANNOTATIONS.proxyVersion]: version,
    [PROXY_CONFIG_ANNOTATIONS.createdBy]: `ward/proxy-injector ${version}`,
    [PROXY_CONFIG_ANNOTATIONS.trustRootSha256]: createHash('sha256').update(cfg.trustAnchorsPem).digest('hex'),
  };
  const labels: Record<string, string> = { ...created.metadata.labels, [PROXY_CONFIG_ANNOTATIONS.workloadNs]: nsName };

  const warnings: string[] = [];
  const settings = proxySettings(annotations, cfg, warnings);
  const inbound = inboundPorts(spec, settings.skipInboundPorts);
  const proxy = proxyContainer(cfg, settings, inbound);
  const init = proxyInitContainer(cfg, settings);
  const volumes = [
    { name: XTABLES_VOLUME, emptyDir: {} },
    {
      name: IDENTITY_TOKEN_VOLUME,
      projected: { sources: [{ serviceAccountToken: { audience: IDENTITY_TOKEN_AUDIENCE, expirationSeconds: 86400, path: IDENTITY_TOKEN_VOLUME } }] },
    },
  ];

  const patch: JsonPatchOperation[] = [];
  const add = (path: string, value: unknown) => patch.push({ op: 'add', path, value: structuredClone(value) });
  if (!isRecord(raw.metadata)) add('/metadata', {});
  addMapEntries(add, '/metadata/annotations', stringMap(meta.annotations), isRecord(meta.annotations), annotations);
  addMapEntries(add, '/metadata/labels', stringMap(meta.labels), isRecord(meta.labels), labels);
  // The token projection is refused without a ServiceAccount name, and the proxy needs it for
  // its identity: name the one Kubernetes would default to when the pod does not.
  const serviceAccount = serviceAccountOf(spec);
  if (serviceAccount !== undefined) add('/spec/serviceAccountName', serviceAccount);
  appendItems(add, '/spec/volumes', Array.isArray(spec.volumes), volumes);
  const initContainers = Array.isArray(spec.initContainers) ? (spec.initContainers as unknown[]) : undefined;
  const containers = spec.containers as unknown[];
  let newInit: unknown[];
  let newContainers: unknown[];
  if (settings.nativeSidecar) {
    // Init first, then the proxy (restartPolicy Always), so later init containers are proxied.
    if (initContainers === undefined) add('/spec/initContainers', [init, proxy]);
    else {
      add('/spec/initContainers/0', init);
      add('/spec/initContainers/1', proxy);
    }
    newInit = [init, proxy, ...(initContainers ?? [])];
    newContainers = containers;
  } else {
    appendItems(add, '/spec/initContainers', initContainers !== undefined, [init]);
    add('/spec/containers/-', proxy);
    newInit = [...(initContainers ?? []), init];
    newContainers = [...containers, proxy];
  }

  const pod: JsonObject = structuredClone(raw);
  const newMeta = isRecord(pod.metadata) ? pod.metadata : {};
  pod.metadata = {
    ...newMeta,
    labels: { ...stringMapLoose(newMeta.labels), ...labels },
    annotations: { ...stringMapLoose(newMeta.annotations), ...annotations },
  };
  pod.spec = {
    ...(pod.spec as JsonObject),
    ...(serviceAccount !== undefined ? { serviceAccountName: serviceAccount } : {}),
    volumes: [...(Array.isArray(spec.volumes) ? structuredClone(spec.volumes) : []), ...structuredClone(volumes)],
    initContainers: structuredClone(newInit),
    containers: structuredClone(newContainers),
  };
  return { injected: true, pod, patch, warnings };
}

/** Workload kinds whose pod template `ward inject` rewrites, and where the template is. */
export const WORKLOAD_TEMPLATE_PATHS: Readonly<Record<string, readonly string[]>> = {
  Deployment: ['spec', 'template'],
  StatefulSet: ['spec', 'template'],
  DaemonSet: ['spec', 'template'],
  ReplicaSet: ['spec', 'template'],
  ReplicationController: ['spec', 'template'],
  Job: ['spec', 'template'],
  CronJob: ['spec', 'jobTemplate', 'spec', 'template'],
  Pod: [],
};

/** The outcome of `injectKubeWorkload`. */
export interface KubeWorkloadResult {
  /** `injected` (manual), `annotated` (the inject annotation added), or `skipped` with a reason. */
  readonly outcome: 'injected' | 'annotated' | 'skipped' | 'unsupported';
  readonly reason?: string | undefined;
  /** The path of the pod template inside the object ([] for a Pod). */
  readonly templatePath: readonly string[];
  /** The new template (or pod), when changed. */
  readonly template?: JsonObject | undefined;
  readonly warnings: string[];
}

/**
 * `ward inject` on one object. By default (as `linkerd inject`) the pod template only gets
 * `linkerd.io/inject: enabled`, and the webhook injects each pod at creation; with `manual` the
 * template gets the full transform (the pod's own annotations decide, the namespace is unknown).
 * A template that opts out, runs on the host network or was injected already is left alone.
 */
export function injectKubeWorkload(obj: unknown, cfg: KubeInjectConfig | undefined, opts: { readonly manual: boolean }): KubeWorkloadResult {
  const kind = isRecord(obj) && typeof obj.kind === 'string' ? obj.kind : '';
  const templatePath = Object.hasOwn(WORKLOAD_TEMPLATE_PATHS, kind) ? WORKLOAD_TEMPLATE_PATHS[kind] : undefined;
  if (templatePath === undefined) return { outcome: 'unsupported', templatePath: [], warnings: [] };
  const template = valueAt(obj, templatePath);
  if (!isRecord(template) || !isRecord(template.spec) || !Array.isArray(template.spec.containers)) {
    return { outcome: 'skipped', reason: 'no pod template with containers', templatePath, warnings: [] };
  }
  const meta = isRecord(template.metadata) ? template.metadata : {};
  const namespace = isRecord(obj) && isRecord(obj.metadata) && typeof obj.metadata.namespace === 'string' ? obj.metadata.namespace : undefined;
  const view = podView(template, namespace ?? 'default');
  if (template.spec.hostNetwork === true) return { outcome: 'skipped', reason: 'hostNetwork is enabled', templatePath, warnings: [] };
  if (isInjectedPod(view)) return { outcome: 'skipped', reason: 'pod has a proxy injected already', templatePath, warnings: [] };
  if (view.metadata.annotations[ANNOTATIONS.inject] === 'disabled') {
    return { outcome: 'skipped', reason: `pod has the annotation "${ANNOTATIONS.inject}: disabled"`, templatePath, warnings: [] };
  }
  if (!opts.manual || cfg === undefined) {
    const annotations = { ...stringMapLoose(meta.annotations), [ANNOTATIONS.inject]: 'enabled' };
    return { outcome: 'annotated', templatePath, template: { ...template, metadata: { ...meta, annotations } }, warnings: [] };
  }
  const r = injectKubePod(template, undefined, cfg, { force: true, ...(namespace !== undefined ? { namespace } : {}) });
  if (!r.injected) return { outcome: 'skipped', reason: r.reason, templatePath, warnings: r.warnings };
  return { outcome: 'injected', templatePath, template: r.pod, warnings: r.warnings };
}

// === settings from annotations ===

interface ProxySettings {
  readonly uid: number;
  readonly nativeSidecar: boolean;
  /** Ports and ranges (`a` or `a-b`) as proxy-init takes them. */
  readonly skipInbound: readonly string[];
  readonly skipOutbound: readonly string[];
  readonly skipSubnets: readonly string[];
  readonly skipInboundPorts: ReadonlySet<number>;
  readonly logLevel: string | undefined;
  readonly resources: JsonObject | undefined;
}

function proxySettings(ann: Readonly<Record<string, string>>, cfg: KubeInjectConfig, warnings: string[]): ProxySettings {
  const warn = (key: string, value: string, why: string) => warnings.push(`annotation ${key}="${value}" ignored: ${why}`);
  let uid = cfg.proxyUid ?? DEFAULT_PROXY_UID;
  const uidText = ann[PROXY_CONFIG_ANNOTATIONS.proxyUid];
  if (uidText !== undefined) {
    if (/^\d{1,10}$/.test(uidText) && Number(uidText) > 0 && Number(uidText) < 2 ** 31) uid = Number(uidText);
    else warn(PROXY_CONFIG_ANNOTATIONS.proxyUid, uidText, 'not a user id above 0');
  }
  const native =
    ann[PROXY_CONFIG_ANNOTATIONS.nativeSidecar] ?? ann[PROXY_CONFIG_ANNOTATIONS.nativeSidecarBeta] ?? ann[PROXY_CONFIG_ANNOTATIONS.nativeSidecarAlpha];
  const portRanges = (key: string): { items: string[]; ports: Set<number> } => {
    const text = ann[key];
    if (text === undefined) return { items: [], ports: new Set() };
    const r = checkPortSet(text);
    if ('error' in r) {
      warn(key, text, r.error.kind === 'name' ? `"${r.error.item}" is not a port number or range` : `"${r.error.item}" is not in 1-65535`);
      return { items: [], ports: new Set() };
    }
    const items = text
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '')
      .map((s) => s.replace(/\s+/g, ''));
    return { items, ports: r.ports };
  };
  const skipIn = portRanges(ANNOTATIONS.skipInboundPorts);
  const skipOut = portRanges(PROXY_CONFIG_ANNOTATIONS.skipOutboundPorts);
  let logLevel: string | undefined;
  const level = ann[PROXY_CONFIG_ANNOTATIONS.proxyLogLevel];
  if (level !== undefined) {
    // Upstream's levels are tracing filters (`warn,linkerd=info`): ward takes the default level.
    const first = level.split(',')[0]?.trim().toLowerCase() ?? '';
    if (WARD_LOG_LEVELS.has(first)) logLevel = first;
    else warn(PROXY_CONFIG_ANNOTATIONS.proxyLogLevel, level, `the default level must be one of ${[...WARD_LOG_LEVELS].join(', ')}`);
  }
  const quantity = (key: string): string | undefined => {
    const v = ann[key];
    if (v === undefined) return undefined;
    if (QUANTITY.test(v.trim())) return v.trim();
    warn(key, v, 'not a Kubernetes quantity');
    return undefined;
  };
  const requests = compact({ cpu: quantity(PROXY_CONFIG_ANNOTATIONS.cpuRequest), memory: quantity(PROXY_CONFIG_ANNOTATIONS.memoryRequest) });
  const limits = compact({ cpu: quantity(PROXY_CONFIG_ANNOTATIONS.cpuLimit), memory: quantity(PROXY_CONFIG_ANNOTATIONS.memoryLimit) });
  const resources = requests === undefined && limits === undefined ? undefined : compact({ requests, limits });
  return {
    uid,
    nativeSidecar: native?.trim().toLowerCase() === 'true',
    skipInbound: skipIn.items,
    skipOutbound: skipOut.items,
    skipSubnets: subnets(ann[PROXY_CONFIG_ANNOTATIONS.skipSubnets], (v, why) => warn(PROXY_CONFIG_ANNOTATIONS.skipSubnets, v, why)),
    skipInboundPorts: skipIn.ports,
    logLevel,
    resources,
  };
}

const IPV4_CIDR = /^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}\/(3[0-2]|[12]?\d)$/;

/** The IPv4 CIDRs of `config.linkerd.io/skip-subnets` (proxy-init writes IPv4 rules); all or none. */
function subnets(text: string | undefined, warn: (value: string, why: string) => void): string[] {
  if (text === undefined) return [];
  const items = text
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '');
  const bad = items.find((x) => !IPV4_CIDR.test(x));
  if (bad === undefined) return items;
  warn(text, `"${bad}" is not an IPv4 CIDR`);
  return [];
}

/** The TCP ports the application containers declare, minus skipped ones and the proxy's own. */
function inboundPorts(spec: JsonObject, skip: ReadonlySet<number>): number[] {
  const own = new Set<number>(Object.values(PROXY_PORTS));
  const containers = [
    ...(spec.containers as unknown[]),
    ...(Array.isArray(spec.initContainers) ? spec.initContainers.filter((c) => isRecord(c) && c.restartPolicy === 'Always') : []),
  ];
  const ports = new Set<number>();
  for (const c of containers) {
    if (!isRecord(c) || !Array.isArray(c.ports)) continue;
    for (const p of c.ports) {
      if (!isRecord(p) || typeof p.containerPort !== 'number' || !Number.isInteger(p.containerPort)) continue;
      if (p.protocol !== undefined && p.protocol !== 'TCP') continue;
      const port = p.containerPort;
      if (port >= 1 && port <= 65535 && !own.has(port) && !skip.has(port)) ports.add(port);
    }
  }
  return [...ports].sort((a, b) => a - b);
}

/** The ServiceAccount name to write when the pod has none: the deprecated field's, else `default`. */
function serviceAccountOf(spec: JsonObject): string | undefined {
  if (typeof spec.serviceAccountName === 'string' && spec.serviceAccountName !== '') return undefined;
  return typeof spec.serviceAccount === 'string' && spec.serviceAccount !== '' ? spec.serviceAccount : 'default';
}

// === containers ===

function dial(host: string, port: number): string {
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}

function fieldEnv(name: string, fieldPath: string): JsonObject {
  return { name, valueFrom: { fieldRef: { fieldPath } } };
}

function proxyContainer(cfg: KubeInjectConfig, s: ProxySettings, inbound: readonly number[]): JsonObject {
  const ports = { ...DEFAULT_CONTROLLER_PORTS, ...cfg.controllerPorts };
  const host = cfg.controllerHost;
  const args = [
    'proxy',
    '--transparent',
    // Kubernetes expands $(VAR) from the container's environment (downward API below).
    '--workload',
    '$(_pod_ns)/$(_pod_name)',
    '--service-account',
    '$(_pod_sa)',
    '--token-file',
    `${IDENTITY_TOKEN_DIR}/${IDENTITY_TOKEN_VOLUME}`,
    '--identity-addr',
    dial(host, ports.identity),
    '--policy-addr',
    dial(host, ports.policy),
    '--destination-addr',
    dial(host, ports.destination),
    '--listen-host',
    '$(_pod_ip)',
    '--admin-addr',
    `0.0.0.0:${PROXY_PORTS.admin}`,
    '--control-plane-namespace',
    cfg.controlPlaneNamespace,
    '--trust-domain',
    cfg.trustDomain ?? 'cluster.local',
    '--cluster-domain',
    cfg.clusterDomain ?? 'cluster.local',
    ...(s.logLevel !== undefined ? ['--log-level', s.logLevel] : []),
    // The application is reached on the pod's address: a service bound to loopback stays private.
    // Brackets take an IPv4 or an IPv6 address alike.
    ...inbound.flatMap((p) => ['--inbound', `${p}=[$(_pod_ip)]:${p}`]),
  ];
  const probe = (path: string, initialDelaySeconds: number) => ({ httpGet: { path, port: PROXY_PORTS.admin }, initialDelaySeconds, timeoutSeconds: 1 });
  return {
    name: PROXY_CONTAINER_NAME,
    image: cfg.image,
    imagePullPolicy: cfg.imagePullPolicy ?? 'IfNotPresent',
    ...(cfg.command !== undefined ? { command: [...cfg.command] } : {}),
    args,
    env: [
      fieldEnv('_pod_name', 'metadata.name'),
      fieldEnv('_pod_ns', 'metadata.namespace'),
      fieldEnv('_pod_uid', 'metadata.uid'),
      fieldEnv('_pod_ip', 'status.podIP'),
      fieldEnv('_pod_sa', 'spec.serviceAccountName'),
      { name: TRUST_ANCHORS_ENV, value: cfg.trustAnchorsPem },
      // Tap is the controller's alone (ward's tap API), as Linkerd's proxies answer only its tap service.
      {
        name: TAP_IDENTITY_ENV,
        value: controllerIdentity({ controlPlaneNamespace: cfg.controlPlaneNamespace, trustDomain: cfg.trustDomain ?? 'cluster.local' }),
      },
    ],
    ports: [
      { name: 'linkerd-proxy', containerPort: PROXY_PORTS.inbound },
      { name: 'linkerd-admin', containerPort: PROXY_PORTS.admin },
    ],
    readinessProbe: probe('/ready', 2),
    livenessProbe: probe('/live', 10),
    ...(s.nativeSidecar
      ? { startupProbe: { httpGet: { path: '/ready', port: PROXY_PORTS.admin }, initialDelaySeconds: 0, periodSeconds: 1, failureThreshold: 120 } }
      : {}),
    ...(s.resources !== undefined ? { resources: s.resources } : {}),
    securityContext: {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      runAsUser: s.uid,
      seccompProfile: { type: 'RuntimeDefault' },
    },
    terminationMessagePolicy: 'FallbackToLogsOnError',
    volumeMounts: [{ name: IDENTITY_TOKEN_VOLUME, mountPath: IDENTITY_TOKEN_DIR, readOnly: true }],
    ...(s.nativeSidecar ? { restartPolicy: 'Always' } : {}),
  };
}

function proxyInitContainer(cfg: KubeInjectConfig, s: ProxySettings): JsonObject {
  const args = [
    'proxy-init',
    '--incoming-proxy-port',
    String(PROXY_PORTS.inbound),
    '--outgoing-proxy-port',
    String(PROXY_PORTS.outbound),
    '--proxy-uid',
    String(s.uid),
    '--inbound-ports-to-ignore',
    [String(PROXY_PORTS.control), String(PROXY_PORTS.admin), ...s.skipInbound].join(','),
    ...(s.skipOutbound.length > 0 ? ['--outbound-ports-to-ignore', s.skipOutbound.join(',')] : []),
    ...(s.skipSubnets.length > 0 ? ['--subnets-to-ignore', s.skipSubnets.join(',')] : []),
  ];
  return {
    name: PROXY_INIT_CONTAINER_NAME,
    image: cfg.image,
    imagePullPolicy: cfg.imagePullPolicy ?? 'IfNotPresent',
    ...(cfg.command !== undefined ? { command: [...cfg.command] } : {}),
    args,
    securityContext: {
      allowPrivilegeEscalation: false,
      capabilities: { add: ['NET_ADMIN', 'NET_RAW'] },
      privileged: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: false,
      runAsUser: 0,
      runAsGroup: 0,
      seccompProfile: { type: 'RuntimeDefault' },
    },
    terminationMessagePolicy: 'FallbackToLogsOnError',
    // iptables takes its lock under /run.
    volumeMounts: [{ name: XTABLES_VOLUME, mountPath: '/run' }],
  };
}

// === JSON patch ===

/** Escapes one RFC 6901 reference token (`~` → `~0`, `/` → `~1`). */
export function escapeJsonPointer(token: string): string {
  return token.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** Adds the entries of `want` that `have` lacks or holds with another value; the whole map when absent. */
function addMapEntries(
  add: (path: string, value: unknown) => void,
  path: string,
  have: Readonly<Record<string, string>>,
  present: boolean,
  want: Readonly<Record<string, string>>,
): void {
  const changed = Object.entries(want).filter(([k, v]) => have[k] !== v);
  if (changed.length === 0) return;
  if (!present) {
    add(path, Object.fromEntries(changed));
    return;
  }
  for (const [k, v] of changed) add(`${path}/${escapeJsonPointer(k)}`, v);
}

function appendItems(add: (path: string, value: unknown) => void, path: string, present: boolean, items: readonly unknown[]): void {
  if (!present) add(path, [...items]);
  else for (const item of items) add(`${path}/-`, item);
}

// === views for the shared decision ===

/** The pod as `inject.ts` sees it: labels, annotations, container names and ports. */
function podView(raw: JsonObject, namespace: string): Pod {
  const meta = isRecord(raw.metadata) ? raw.metadata : {};
  const spec = isRecord(raw.spec) ? raw.spec : {};
  const init = Array.isArray(spec.initContainers) ? spec.initContainers : [];
  // Native sidecars (init containers that restart) run beside the application: containers too.
  const sidecars = init.filter((c) => isRecord(c) && c.restartPolicy === 'Always');
  const containers = [...(Array.isArray(spec.containers) ? spec.containers : []), ...sidecars];
  return {
    kind: 'Pod',
    apiVersion: 'v1',
    metadata: {
      namespace,
      name: typeof meta.name === 'string' ? meta.name : typeof meta.generateName === 'string' ? meta.generateName : '',
      labels: stringMap(meta.labels),
      annotations: stringMap(meta.annotations),
    },
    spec: { containers: containers.map(containerView), initContainers: init.filter((c) => !sidecars.includes(c)).map(containerView) },
  };
}

function containerView(c: unknown): ContainerSpec {
  if (!isRecord(c)) return { name: '' };
  const ports = Array.isArray(c.ports)
    ? c.ports.flatMap((p) => (isRecord(p) && typeof p.containerPort === 'number' ? [{ containerPort: p.containerPort }] : []))
    : [];
  return { name: typeof c.name === 'string' ? c.name : '', ports };
}

function namespaceView(raw: unknown, name: string, force: boolean): Namespace {
  const meta = isRecord(raw) && isRecord(raw.metadata) ? raw.metadata : {};
  const annotations = stringMap(meta.annotations);
  return {
    kind: 'Namespace',
    apiVersion: 'v1',
    metadata: { namespace: '', name, labels: stringMap(meta.labels), annotations: force ? { ...annotations, [ANNOTATIONS.inject]: 'enabled' } : annotations },
    spec: {},
  };
}

// === helpers ===

function isRecord(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The string entries of a map (others are not labels or annotations the injector reads). */
function stringMap(v: unknown): Record<string, string> {
  if (!isRecord(v)) return {};
  return Object.fromEntries(Object.entries(v).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

/** A map kept as it is (non-string values included), for writing back. */
function stringMapLoose(v: unknown): JsonObject {
  return isRecord(v) ? { ...v } : {};
}

function compact<T extends Record<string, unknown>>(o: T): T | undefined {
  const entries = Object.entries(o).filter(([, v]) => v !== undefined);
  return entries.length === 0 ? undefined : (Object.fromEntries(entries) as T);
}

function valueAt(root: unknown, path: readonly string[]): unknown {
  let v = root;
  for (const seg of path) {
    if (!isRecord(v)) return undefined;
    v = v[seg];
  }
  return v;
}
