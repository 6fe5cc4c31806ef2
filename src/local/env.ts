/**
 * The environment and command line of a container run locally. The runtime sets the pod's
 * facts (`POD_NAME`, `POD_NAMESPACE`, `POD_IP`), where the application listens
 * (`WARD_APP_HOST`) and, in meshed pods, where its proxy's outbound port is (`HTTP_PROXY`,
 * `http_proxy`, `grpc_proxy`); then the container's `env` follows in order, with the kubelet's
 * `$(VAR)` expansion, and the kubelet's expansion applies to `command` and `args` too.
 */
import type { ContainerSpec } from '../controller/index.js';

/** The upstream outbound port of the proxy. */
export const OUTBOUND_PORT = 4140;

/**
 * Inherited variables dropped from every container's and every proxy's environment: a host's
 * proxy settings would take an app's traffic off the mesh (grpc-js, for one, honours them).
 * The proxy's own gRPC client never uses them; they are dropped from its environment all the
 * same, so that nothing it may load later picks them up.
 */
export const HOST_PROXY_VARIABLES: readonly string[] = [
  'HTTP_PROXY',
  'http_proxy',
  'HTTPS_PROXY',
  'https_proxy',
  'ALL_PROXY',
  'all_proxy',
  'NO_PROXY',
  'no_proxy',
  'GRPC_PROXY',
  'grpc_proxy',
  'NO_GRPC_PROXY',
  'no_grpc_proxy',
];

/** `inherited` without its unset variables and the host's proxy settings ({@link HOST_PROXY_VARIABLES}). */
export function withoutHostProxies(inherited: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(inherited)) if (v !== undefined && !HOST_PROXY_VARIABLES.includes(k)) env[k] = v;
  return env;
}

/** The facts of a pod the environment is built from. */
export interface PodEnvFacts {
  readonly namespace: string;
  readonly name: string;
  readonly serviceAccount: string;
  readonly podIp: string;
  /** Where the application listens: the private address in meshed pods, the pod address otherwise. */
  readonly appHost: string;
  readonly meshed: boolean;
  /** The "node" address (`status.hostIP`). */
  readonly hostIp: string;
}

/** A container's environment, and the variables it could not set. */
export interface ContainerEnv {
  /** The whole environment of the process. */
  readonly env: Record<string, string>;
  /** The runtime's and the container's own variables (what `$(VAR)` in command and args may name). */
  readonly declared: Record<string, string>;
  /** `valueFrom` sources local mode cannot fill: `[name, what]`. */
  readonly unsupported: readonly (readonly [string, string])[];
}

/**
 * Kubernetes' `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion):
 * `$(NAME)` becomes the value when `lookup` knows NAME and stays as written otherwise, `$$` is a
 * literal `$`, and any other `$` stays.
 */
export function expandKubeVars(input: string, lookup: (name: string) => string | undefined): string {
  let out = '';
  let checkpoint = 0;
  for (let cursor = 0; cursor < input.length; cursor++) {
    if (input[cursor] !== '$' || cursor + 1 >= input.length) continue;
    out += input.slice(checkpoint, cursor);
    const next = input[cursor + 1];
    let advance = 1;
    if (next === '$') {
      out += '$';
    } else if (next === '(') {
      const close = input.indexOf(')', cursor + 2);
      if (close === -1) {
        out += '$(';
      } else {
        const name = input.slice(cursor + 2, close);
        out += lookup(name) ?? `$(${name})`;
        advance = close - cursor;
      }
    } else {
      out += `$${next}`;
    }
    cursor += advance;
    checkpoint = cursor + 1;
  }
  return out + input.slice(checkpoint);
}

/** The value of a `fieldRef` local mode knows, or undefined. */
function fieldValue(path: string, pod: PodEnvFacts): string | undefined {
  switch (path) {
    case 'metadata.name':
      return pod.name;
    case 'metadata.namespace':
      return pod.namespace;
    case 'spec.serviceAccountName':
      return pod.serviceAccount;
    case 'status.podIP':
      return pod.podIp;
    case 'status.hostIP':
      return pod.hostIp;
    default:
      return undefined;
  }
}

/** The variables the runtime sets for every container of the pod. */
export function runtimeEnv(pod: PodEnvFacts): Record<string, string> {
  const env: Record<string, string> = {
    POD_NAME: pod.name,
    POD_NAMESPACE: pod.namespace,
    POD_IP: pod.podIp,
    WARD_APP_HOST: pod.appHost,
  };
  if (pod.meshed) {
    const proxy = `http://${pod.podIp}:${OUTBOUND_PORT}`;
    env.HTTP_PROXY = proxy;
    env.http_proxy = proxy;
    env.grpc_proxy = proxy;
  }
  return env;
}

/**
 * The environment of one container: `inherited` (ward up's own, minus proxy settings), then the
 * runtime's variables, then the container's `env` in order (each value expanded against the
 * container's and the runtime's variables defined before it, as the kubelet does).
 */
export function containerEnv(container: ContainerSpec, pod: PodEnvFacts, inherited: Readonly<Record<string, string | undefined>>): ContainerEnv {
  const env = withoutHostProxies(inherited);
  const own = new Map<string, string>(Object.entries(runtimeEnv(pod)));
  const unsupported: [string, string][] = [];
  for (const e of container.env ?? []) {
    if (e.valueFrom !== undefined && e.value === undefined) {
      const path = e.valueFrom.fieldRef?.fieldPath;
      const value = path === undefined ? undefined : fieldValue(path, pod);
      if (value === undefined) {
        unsupported.push([e.name, path === undefined ? 'valueFrom other than fieldRef' : `fieldRef ${path}`]);
        continue;
      }
      own.set(e.name, value);
      continue;
    }
    own.set(
      e.name,
      expandKubeVars(e.value ?? '', (n) => own.get(n)),
    );
  }
  for (const [k, v] of own) env[k] = v;
  return { env, declared: Object.fromEntries(own), unsupported };
}

/**
 * The argv of a container (`command` then `args`, each expanded against `declared`: the
 * runtime's and the container's variables, not the inherited ones, as the kubelet knows only
 * those), or undefined without a command.
 */
export function containerArgv(container: ContainerSpec, declared: Readonly<Record<string, string>>): readonly string[] | undefined {
  const command = container.command ?? [];
  if (command.length === 0) return undefined;
  const lookup = (n: string) => (Object.hasOwn(declared, n) ? declared[n] : undefined);
  return [...command, ...(container.args ?? [])].map((s) => expandKubeVars(s, lookup));
}
