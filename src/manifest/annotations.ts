/**
 * Linkerd annotations that shape inbound policy, parsed the way the policy controller parses
 * them (POLICY-SEMANTICS §1.1, §2.3-2.4): a value the controller cannot parse is ignored whole.
 */
import { type DefaultPolicyName, isDefaultPolicyName } from '../core/index.js';

/**
 * Keys of the annotations (and the one label) ward reads or writes. `controlPlaneNs` is a label:
 * only pods carrying it are meshed and indexed.
 */
export const ANNOTATIONS = {
  /** Default inbound policy of a pod (or, copied at injection, of its namespace). */
  defaultInboundPolicy: 'config.linkerd.io/default-inbound-policy',
  /** Ports served as opaque TCP. */
  opaquePorts: 'config.linkerd.io/opaque-ports',
  /** Inbound ports the proxy does not intercept (traffic to them bypasses mesh TLS). */
  skipInboundPorts: 'config.linkerd.io/skip-inbound-ports',
  /** Ports whose unauthenticated default becomes the authenticated one. */
  requireIdentityPorts: 'config.linkerd.io/proxy-require-identity-inbound-ports',
  /** Whether the injector adds a proxy (`enabled`, `ingress`, `disabled`). */
  inject: 'linkerd.io/inject',
  /** Label of meshed pods: the control-plane namespace. */
  controlPlaneNs: 'linkerd.io/control-plane-ns',
  /** Set by the injector on the pods it injected. */
  proxyVersion: 'linkerd.io/proxy-version',
} as const;

/** The policy named exactly by `text`, or undefined when it names none. */
export function parseDefaultPolicy(text: string): DefaultPolicyName | undefined {
  return isDefaultPolicyName(text) ? text : undefined;
}

/** Why a port-set annotation is ignored: it names a port, or a number/range is out of bounds. */
export type PortSetError = { readonly kind: 'name' | 'range'; readonly item: string };

/**
 * Parses a port set (`3306, 8000-8080`): comma-separated numbers or inclusive ranges, blanks
 * trimmed, empty items skipped. Returns the first problem instead when the controller would
 * ignore the whole value.
 */
export function checkPortSet(text: string): { readonly ports: Set<number> } | { readonly error: PortSetError } {
  const ports = new Set<number>();
  for (const raw of text.split(',')) {
    const item = raw.trim();
    if (item === '') continue;
    const dash = item.indexOf('-');
    const bounds = dash === -1 ? [item] : [item.slice(0, dash).trim(), item.slice(dash + 1).trim()];
    if (!bounds.every((b) => /^\d+$/.test(b))) return { error: { kind: /[a-z]/i.test(item) ? 'name' : 'range', item } };
    const [lo, hi] = bounds.map(Number) as [number, number?];
    const top = hi ?? lo;
    if (lo < 1 || top > 65535 || lo > top) return { error: { kind: 'range', item } };
    for (let p = lo; p <= top; p++) ports.add(p);
  }
  return { ports };
}

/** The ports of a port-set annotation, or undefined when the controller ignores it (§1.1). */
export function parsePortSet(text: string): Set<number> | undefined {
  const r = checkPortSet(text);
  return 'ports' in r ? r.ports : undefined;
}
