/**
 * Resource arguments in kubectl style: `pod/NS/NAME`, `po/NAME`, `deploy/NAME` (with -n), or a
 * bare kind for all of it. Workloads stand for their pods `<name>-0`, `<name>-1`, ...
 */
import type { PodInfo } from './pod.js';
import { policyKindOf } from './policy-targets.js';
import { type PolicyView, QueryError } from './query-error.js';

const KIND_ALIASES: Record<string, string> = {
  po: 'Pod',
  pod: 'Pod',
  pods: 'Pod',
  deploy: 'Deployment',
  deployment: 'Deployment',
  deployments: 'Deployment',
  sts: 'StatefulSet',
  statefulset: 'StatefulSet',
  statefulsets: 'StatefulSet',
  ds: 'DaemonSet',
  daemonset: 'DaemonSet',
  daemonsets: 'DaemonSet',
  rs: 'ReplicaSet',
  replicaset: 'ReplicaSet',
  replicasets: 'ReplicaSet',
  job: 'Job',
  jobs: 'Job',
  cj: 'CronJob',
  cronjob: 'CronJob',
  cronjobs: 'CronJob',
  ns: 'Namespace',
  namespace: 'Namespace',
  namespaces: 'Namespace',
};

/** Parsed `KIND[/NS]/NAME`. */
export interface ResourceArg {
  readonly kind: string;
  readonly namespace: string | undefined;
  readonly name: string | undefined;
}

/** Parses a resource argument; `pod/NS/NAME` carries its namespace. */
export function parseResourceArg(text: string): ResourceArg {
  const parts = text.split('/');
  const kind = KIND_ALIASES[(parts[0] ?? '').toLowerCase()];
  if (kind === undefined) {
    const policy = policyKindOf(parts[0] ?? '');
    if (policy !== undefined)
      throw new QueryError(
        `"${text}" is a ${policy}, not a workload: give pod, deploy, sts, ds, rs, job, cj or ns (\`ward authz ${text}\` shows where it applies)`,
      );
    throw new QueryError(
      `unknown resource kind "${parts[0]}" in "${text}" (workloads: pod, deploy, sts, ds, rs, job, cj, ns; policy objects for \`ward authz\`: server (srv), authorizationpolicy, serverauthorization (saz), meshtlsauthentication, networkauthentication, httproute, grpcroute, traffictarget (tt), httproutegroup (htr), tcproute (tr), udproute (ur))`,
    );
  }
  if (parts.length === 1) return { kind, namespace: undefined, name: undefined };
  if (parts.length === 2 && parts[1] !== '') return { kind, namespace: undefined, name: parts[1] };
  if (parts.length === 3 && parts[1] !== '' && parts[2] !== '') return { kind, namespace: parts[1], name: parts[2] };
  throw new QueryError(`"${text}" is not KIND/NAME or KIND/NAMESPACE/NAME`);
}

/** The pods a resource argument stands for, in a namespace (undefined = all namespaces). */
export function podsOf(ws: PolicyView, arg: ResourceArg, namespace: string | undefined): PodInfo[] {
  const ns = arg.namespace ?? namespace;
  const inNs = ws.index.pods().filter((p) => ns === undefined || p.namespace === ns);
  let pods: PodInfo[];
  if (arg.kind === 'Namespace') pods = ws.index.pods().filter((p) => arg.name === undefined || p.namespace === arg.name);
  else if (arg.kind === 'Pod') pods = inNs.filter((p) => arg.name === undefined || p.name === arg.name);
  else pods = inNs.filter((p) => p.pod.owner?.startsWith(`${arg.kind}/`) && (arg.name === undefined || p.pod.owner === `${arg.kind}/${arg.name}`));
  return pods.sort((a, b) => (a.namespace + a.name < b.namespace + b.name ? -1 : 1));
}

/** Parses an explain target `pod/NS/NAME:PORT` or `deploy/NAME:PORT` into a pod and port. */
export function parseTarget(ws: PolicyView, text: string, namespace: string | undefined): { namespace: string; pod: string; port: number } {
  const colon = text.lastIndexOf(':');
  if (colon === -1) throw new QueryError(`--to "${text}" needs a port: pod/NS/NAME:PORT or deploy/NAME:PORT`);
  const port = Number(text.slice(colon + 1));
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new QueryError(`--to "${text}": port must be 1-65535`);
  const arg = parseResourceArg(text.slice(0, colon));
  if (arg.name === undefined) throw new QueryError(`--to "${text}" must name one resource`);
  const ns = arg.namespace ?? namespace ?? 'default';
  if (arg.kind === 'Pod') return { namespace: ns, pod: arg.name, port };
  if (arg.kind === 'Namespace') throw new QueryError(`--to "${text}": a namespace is not a workload`);
  const pods = podsOf(ws, arg, ns);
  const first = pods[0];
  if (first === undefined) throw new QueryError(`${arg.kind} ${ns}/${arg.name} not found in the manifests (or it has no meshed pods)`, { notFound: true });
  return { namespace: ns, pod: first.name, port };
}
