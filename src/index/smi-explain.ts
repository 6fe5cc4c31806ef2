/**
 * What `ward explain` says about a port SMI governs: which TrafficTargets, and why they apply.
 */
import type { PolicyIndex } from './policy-index.js';

/** The explain chain's server step for a port governed by TrafficTargets. */
export function explainSmiServer(index: PolicyIndex, namespace: string, pod: string, port: number): string {
  const info = index.pod(namespace, pod);
  const targets = info === undefined ? [] : (index.smi(namespace)?.governing(info, port, index.identityDomain) ?? []);
  if (info === undefined || targets.length === 0) return `No Server binds port ${port}, and no TrafficTarget governs it.`;
  const why = targets.map((t) => {
    const scope = t.port !== undefined ? `destination.port ${t.port}` : t.governedPorts !== undefined ? 'its TCPRoute ports' : 'no port given: every port';
    const admits = t.hasHttpRules ? `${t.httpMatches.length} HTTPRouteGroup match(es)` : t.tcpPorts !== undefined ? 'the whole port (TCPRoute)' : 'nothing';
    return `TrafficTarget ${t.name} (${scope}; admits its sources on ${admits})`;
  });
  return `No Server binds port ${port}; ServiceAccount ${info.serviceAccount} is the destination of ${why.join(', ')}. SMI is deny-by-default here: only what these admit is allowed, plus kubelet probes.`;
}
