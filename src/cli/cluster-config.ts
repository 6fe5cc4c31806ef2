/**
 * Cluster-wide settings from flags (or a test suite's `cluster:` block), with upstream defaults.
 */
import { isDefaultPolicyName, type Network, parseCidr } from '../core/index.js';
import type { ClusterConfig } from '../index/index.js';
import { UsageError } from './io.js';

/** Upstream's default cluster networks (2.16+). */
export const DEFAULT_CLUSTER_NETWORKS = '10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8';
/** Upstream's default probe networks (2.16+). */
export const DEFAULT_PROBE_NETWORKS = '0.0.0.0/0,::/0';

/** Raw settings as given on the command line or in a suite. */
export interface ClusterSettings {
  readonly defaultPolicy?: string | undefined;
  readonly clusterNetworks?: string | readonly string[] | undefined;
  readonly probeNetworks?: string | readonly string[] | undefined;
  readonly trustDomain?: string | undefined;
  readonly controlPlaneNamespace?: string | undefined;
}

/** Parses a comma-separated CIDR list (or the `fallback` list); throws `UsageError` naming `what`. */
export function networks(value: string | readonly string[] | undefined, fallback: string, what: string): Network[] {
  const list = value === undefined ? fallback.split(',') : typeof value === 'string' ? value.split(',') : value;
  return list
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map((s) => {
      const net = parseCidr(s);
      if (net === undefined) throw new UsageError(`${what}: "${s}" is not a CIDR`);
      return { net, except: [] };
    });
}

/** Validates settings into a cluster configuration; throws `UsageError` on bad values. */
export function clusterConfig(s: ClusterSettings): ClusterConfig {
  const defaultPolicy = s.defaultPolicy ?? 'all-unauthenticated';
  if (!isDefaultPolicyName(defaultPolicy)) {
    throw new UsageError(
      `--default-policy "${defaultPolicy}" is not a default policy (all-unauthenticated, all-authenticated, cluster-unauthenticated, cluster-authenticated, deny, audit)`,
    );
  }
  return {
    defaultPolicy,
    clusterNetworks: networks(s.clusterNetworks, DEFAULT_CLUSTER_NETWORKS, '--cluster-networks'),
    probeNetworks: networks(s.probeNetworks, DEFAULT_PROBE_NETWORKS, '--probe-networks'),
    trustDomain: s.trustDomain ?? 'cluster.local',
    controlPlaneNamespace: s.controlPlaneNamespace ?? 'linkerd',
  };
}
