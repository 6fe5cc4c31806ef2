/**
 * How a pod runs locally, decided from its manifest before anything starts: each container's
 * argv, environment and working directory, the ports its proxy serves, and the problems that
 * keep it from running (reported like `ward check` diagnostics, with the manifest position).
 */
import { statSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import type { ContainerSpec, Pod } from '../controller/index.js';
import { PROXY_CONTAINER_NAME } from '../controller/index.js';
import { type Diagnostic, diagnostic } from '../core/index.js';
import { ADMIN_POLICY_PORT, DEFAULT_MESH_PORT } from '../proxy/index.js';
import { appAddressOf, NODE_ADDRESS } from './addresses.js';
import { containerArgv, containerEnv, OUTBOUND_PORT, type PodEnvFacts } from './env.js';
import type { RestartPolicy } from './supervisor.js';

/** Ports the local proxy itself listens on at the pod address. */
export const PROXY_PORTS: readonly number[] = [OUTBOUND_PORT, DEFAULT_MESH_PORT, ADMIN_POLICY_PORT];

/** One container, ready to run. */
export interface ContainerPlan {
  readonly name: string;
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd: string;
  readonly spec: ContainerSpec;
}

/** A pod, ready to run. */
export interface PodPlan {
  readonly namespace: string;
  readonly name: string;
  readonly ip: string;
  /** Where its applications listen. */
  readonly appHost: string;
  readonly meshed: boolean;
  readonly serviceAccount: string;
  readonly restartPolicy: RestartPolicy;
  readonly initContainers: readonly ContainerPlan[];
  readonly containers: readonly ContainerPlan[];
  /** Declared TCP container ports (the proxy serves each), sorted. */
  readonly ports: readonly number[];
  readonly pod: Pod;
}

/** What planning a pod needs besides the pod. */
export interface PlanContext {
  /** The manifests directory: `workingDir` is relative to it, and it is the default. */
  readonly dir: string;
  /** The environment containers inherit (ward up's own). */
  readonly inheritedEnv: Readonly<Record<string, string | undefined>>;
}

/** The application containers of a pod (the injected proxy container is the runtime's own proxy). */
function appContainers(pod: Pod): { c: ContainerSpec; i: number; init: boolean }[] {
  return [
    ...(pod.spec.initContainers ?? []).map((c, i) => ({ c, i, init: true })),
    ...pod.spec.containers.map((c, i) => ({ c, i, init: false })).filter((x) => x.c.name !== PROXY_CONTAINER_NAME),
  ];
}

/** The probes of a container: what people call them, and their field. */
const PROBES = [
  ['readiness', 'readinessProbe'],
  ['liveness', 'livenessProbe'],
  ['startup', 'startupProbe'],
] as const;

function restartPolicyOf(pod: Pod): RestartPolicy {
  const p = pod.spec.restartPolicy;
  return p === 'OnFailure' || p === 'Never' ? p : 'Always';
}

/** The TCP ports a pod's application containers declare. */
export function declaredPorts(pod: Pod): number[] {
  const ports = new Set<number>();
  for (const { c } of appContainers(pod))
    for (const p of c.ports ?? []) if (p.protocol === undefined || p.protocol.toUpperCase() === 'TCP') ports.add(p.containerPort);
  return [...ports].sort((a, b) => a - b);
}

/**
 * Problems that keep pods from running locally (LOC001-LOC005), positioned in their manifests.
 * `meshed` tells which pods get a proxy (whose ports they must not declare).
 */
export function checkLocalPods(pods: readonly Pod[], meshed: (pod: Pod) => boolean, ctx: Pick<PlanContext, 'dir'>): Diagnostic[] {
  const out: Diagnostic[] = [];
  for (const pod of pods) {
    const podName = `${pod.metadata.namespace}/${pod.metadata.name}`;
    const resource = { kind: 'Pod', namespace: pod.metadata.namespace, name: pod.metadata.name };
    const at = (path: (string | number)[]) => ({ resource, path, ...(pod.origin !== undefined ? { source: pod.origin.positionOf(path) } : {}) });
    const isMeshed = meshed(pod);
    for (const { c, i, init } of appContainers(pod)) {
      const base = ['spec', init ? 'initContainers' : 'containers', i];
      if ((c.command ?? []).length === 0) out.push(diagnostic('LOC001', { container: c.name, pod: podName }, at([...base])));
      if (c.workingDir !== undefined && c.workingDir !== '') {
        const abs = isAbsolute(c.workingDir) ? c.workingDir : resolve(ctx.dir, c.workingDir);
        let isDir = false;
        try {
          isDir = statSync(abs).isDirectory();
        } catch {
          isDir = false;
        }
        if (!isDir) out.push(diagnostic('LOC004', { container: c.name, pod: podName, dir: abs }, at([...base, 'workingDir'])));
      }
      (c.env ?? []).forEach((e, j) => {
        if (e.value !== undefined || e.valueFrom === undefined) return;
        const path = e.valueFrom.fieldRef?.fieldPath;
        const known = ['metadata.name', 'metadata.namespace', 'spec.serviceAccountName', 'status.podIP', 'status.hostIP'];
        if (path !== undefined && known.includes(path)) return;
        const detail = path === undefined ? 'valueFrom other than fieldRef' : `fieldRef ${path} is not supported`;
        out.push(diagnostic('LOC002', { name: e.name, container: c.name, pod: podName, detail }, at([...base, 'env', j, 'valueFrom'])));
      });
      if (!init) {
        const named = new Set((c.ports ?? []).flatMap((p) => (p.name !== undefined ? [p.name.toLowerCase()] : [])));
        for (const [kind, key] of PROBES) {
          const probe = c[key];
          for (const handler of ['httpGet', 'tcpSocket'] as const) {
            const port = probe?.[handler]?.port;
            // A number written as a string is a number to the kubelet too.
            if (typeof port !== 'string' || named.has(port.toLowerCase()) || /^\d+$/.test(port)) continue;
            out.push(diagnostic('LOC005', { probe: kind, container: c.name, pod: podName, port }, at([...base, key, handler, 'port'])));
          }
        }
      }
      if (isMeshed) {
        (c.ports ?? []).forEach((p, j) => {
          if (PROXY_PORTS.includes(p.containerPort))
            out.push(diagnostic('LOC003', { container: c.name, pod: podName, port: p.containerPort }, at([...base, 'ports', j, 'containerPort'])));
        });
      }
    }
  }
  return out;
}

/** How the pod runs, or the reasons it cannot (one line each). */
export function planPod(pod: Pod, ip: string, meshed: boolean, ctx: PlanContext): { ok: true; plan: PodPlan } | { ok: false; problems: string[] } {
  const problems = checkLocalPods([pod], () => meshed, ctx)
    .filter((d) => d.severity === 'error')
    .map((d) => d.message);
  if (problems.length > 0) return { ok: false, problems };
  const appHost = meshed ? appAddressOf(ip) : ip;
  const serviceAccount = pod.spec.serviceAccountName ?? 'default';
  const facts: PodEnvFacts = { namespace: pod.metadata.namespace, name: pod.metadata.name, serviceAccount, podIp: ip, appHost, meshed, hostIp: NODE_ADDRESS };
  const plan = (c: ContainerSpec): ContainerPlan => {
    const { env, declared } = containerEnv(c, facts, ctx.inheritedEnv);
    const argv = containerArgv(c, declared) ?? [];
    const wd = c.workingDir;
    const cwd = wd === undefined || wd === '' ? ctx.dir : isAbsolute(wd) ? wd : resolve(ctx.dir, wd);
    return { name: c.name, argv, env, cwd, spec: c };
  };
  const all = appContainers(pod);
  return {
    ok: true,
    plan: {
      namespace: pod.metadata.namespace,
      name: pod.metadata.name,
      ip,
      appHost,
      meshed,
      serviceAccount,
      restartPolicy: restartPolicyOf(pod),
      initContainers: all.filter((x) => x.init).map((x) => plan(x.c)),
      containers: all.filter((x) => !x.init).map((x) => plan(x.c)),
      ports: declaredPorts(pod),
      pod,
    },
  };
}
