/**
 * Which proxy admin server to tap for a pod: `<podIP>:4191`, over mesh TLS to the pod's
 * ServiceAccount identity (the name its proxy's certificate carries).
 */
import { serviceAccountIdentity } from '../../core/index.js';
import type { ClusterConfig, PodInfo } from '../../index/index.js';
import { PROXY_ADMIN_PORT, type ProxyAdminTarget } from '../observe/proxy-admin-client.js';
import { type TapWorkload, workloadOf } from './tap-event.js';

/** A pod to tap. */
export interface TapPod {
  readonly namespace: string;
  readonly name: string;
  readonly workload: TapWorkload;
  /** Undefined while the pod has no address. */
  readonly target: ProxyAdminTarget | undefined;
}

/** The tap target of an indexed (meshed) pod. */
export function tapPodOf(cluster: ClusterConfig, p: PodInfo): TapPod {
  const ip = p.pod.status?.podIP;
  const address = ip === undefined || ip === '' ? undefined : ip.includes(':') ? `[${ip}]:${PROXY_ADMIN_PORT}` : `${ip}:${PROXY_ADMIN_PORT}`;
  return {
    namespace: p.namespace,
    name: p.name,
    workload: workloadOf(p.name, p.pod.owner),
    target: address === undefined ? undefined : { address, identity: serviceAccountIdentity(cluster, p.namespace, p.serviceAccount) },
  };
}
