/**
 * What the index extracts from a Pod (POLICY-SEMANTICS §3.1): labels, settings from annotations,
 * named TCP container ports, and HTTP probe paths per port.
 */
import { type DefaultPolicyName, isDefaultPolicyName } from '../core/index.js';
import { ANNOTATIONS, type ContainerSpec, type Pod, type ProbeSpec, parsePortSet } from '../manifest/index.js';

/** A probe as the index records it (for lint and the local runtime). */
export interface ProbeInfo {
  readonly container: string;
  readonly type: 'liveness' | 'readiness' | 'startup';
  readonly port: number;
  readonly path: string;
}

/** Policy-relevant facts of one pod. */
export interface PodInfo {
  readonly namespace: string;
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly serviceAccount: string;
  /** Valid `default-inbound-policy` annotation value, if any. */
  readonly defaultPolicy: DefaultPolicyName | undefined;
  readonly opaquePorts: ReadonlySet<number>;
  readonly requireIdentityPorts: ReadonlySet<number>;
  /** Named TCP container ports: name -> numbers (a name may map to several across containers). */
  readonly namedPorts: ReadonlyMap<string, readonly number[]>;
  /** Every declared TCP container port number. */
  readonly declaredPorts: ReadonlySet<number>;
  /** HTTP probe paths per port, sorted. */
  readonly probePaths: ReadonlyMap<number, readonly string[]>;
  readonly httpProbes: readonly ProbeInfo[];
  readonly pod: Pod;
}

function isTcp(protocol: string | undefined): boolean {
  return protocol === undefined || protocol.toUpperCase() === 'TCP';
}

/** Reduces a probe path to its path component (query dropped); undefined when unparseable. */
export function probePath(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return '/';
  try {
    const u = new URL(raw, 'http://probe.invalid');
    return u.pathname;
  } catch {
    return undefined;
  }
}

function containerProbes(c: ContainerSpec): [ProbeInfo['type'], ProbeSpec | undefined][] {
  return [
    ['liveness', c.livenessProbe],
    ['readiness', c.readinessProbe],
    ['startup', c.startupProbe],
  ];
}

/** Extracts the pod's policy-relevant facts. */
export function podInfo(pod: Pod): PodInfo {
  const ann = pod.metadata.annotations;
  const dp = ann[ANNOTATIONS.defaultInboundPolicy];
  const containers = [...pod.spec.containers, ...(pod.spec.initContainers ?? [])];
  const namedPorts = new Map<string, number[]>();
  const declaredPorts = new Set<number>();
  const probes: ProbeInfo[] = [];
  for (const c of containers) {
    const own = new Map<string, number>();
    for (const p of c.ports ?? []) {
      if (!isTcp(p.protocol)) continue;
      declaredPorts.add(p.containerPort);
      if (p.name === undefined || p.name === '') continue;
      own.set(p.name.toLowerCase(), p.containerPort);
      const list = namedPorts.get(p.name) ?? [];
      if (!list.includes(p.containerPort)) list.push(p.containerPort);
      namedPorts.set(p.name, list);
    }
    for (const [type, probe] of containerProbes(c)) {
      const get = probe?.httpGet;
      if (get === undefined) continue;
      // A named probe port resolves only against this same container's ports.
      const port = typeof get.port === 'number' ? get.port : own.get(get.port.toLowerCase());
      const path = probePath(get.path);
      if (port === undefined || path === undefined) continue;
      probes.push({ container: c.name, type, port, path });
    }
  }
  const probePaths = new Map<number, string[]>();
  for (const p of probes) {
    const paths = probePaths.get(p.port) ?? [];
    if (!paths.includes(p.path)) paths.push(p.path);
    probePaths.set(p.port, paths);
  }
  for (const paths of probePaths.values()) paths.sort();
  return {
    namespace: pod.metadata.namespace,
    name: pod.metadata.name,
    labels: pod.metadata.labels,
    serviceAccount: pod.spec.serviceAccountName ?? 'default',
    defaultPolicy: dp !== undefined && isDefaultPolicyName(dp) ? dp : undefined,
    opaquePorts: parsePortSet(ann[ANNOTATIONS.opaquePorts] ?? '') ?? new Set(),
    requireIdentityPorts: parsePortSet(ann[ANNOTATIONS.requireIdentityPorts] ?? '') ?? new Set(),
    namedPorts,
    declaredPorts,
    probePaths,
    httpProbes: probes,
    pod,
  };
}

/** True when the pod is meshed (carries the control-plane label) and so is indexed. */
export function isMeshed(pod: Pod): boolean {
  return Object.hasOwn(pod.metadata.labels, ANNOTATIONS.controlPlaneNs);
}
