/**
 * The lookup side of `InboundServerPolicies` (GetPort / WatchPort), independent of the gRPC
 * transport: workload-string parsing and status codes exactly as upstream's `check_target`
 * (POLICY-SEMANTICS §3.2, §5.3).
 */
import type { InboundServer } from '../core/index.js';

/** A workload named in `PortSpec.workload`. */
export type Workload =
  | { readonly kind: 'pod'; readonly namespace: string; readonly name: string }
  | { readonly kind: 'external'; readonly namespace: string; readonly name: string };

/** gRPC-style outcome of a lookup. */
export type LookupResult<C> = { readonly code: 'OK'; readonly cell: C } | { readonly code: 'INVALID_ARGUMENT' | 'NOT_FOUND'; readonly message: string };

/** What the lookup needs from the index (upstream's `DiscoverInboundServer`). */
export interface InboundDiscovery<C extends { readonly value: InboundServer }> {
  /** The live (watchable) policy of a pod port. */
  lookup(namespace: string, pod: string, port: number): C | undefined;
  /** The current policy for a one-off read, without keeping anything (defaults to `lookup`). */
  peek?(namespace: string, pod: string, port: number): { readonly value: InboundServer } | undefined;
}

/**
 * Parses a workload string: JSON `{"ns": ..., "pod": ...}` / `{"ns": ..., "external_workload": ...}`
 * when it starts with `{`, else legacy `<namespace>:<pod>`. Returns an error message when invalid.
 */
export function parseWorkload(s: string): Workload | string {
  if (s.startsWith('{')) {
    let v: unknown;
    try {
      v = JSON.parse(s);
    } catch (e) {
      return `invalid workload JSON: ${(e as Error).message}`;
    }
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'workload JSON must be an object';
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) if (!['ns', 'pod', 'external_workload'].includes(k)) return `unknown workload field "${k}"`;
    const ns = o.ns;
    if (typeof ns !== 'string' || ns === '') return 'workload JSON needs a non-empty "ns"';
    const hasPod = typeof o.pod === 'string' && o.pod !== '';
    const hasExt = typeof o.external_workload === 'string' && o.external_workload !== '';
    if (hasPod === hasExt) return 'workload JSON needs exactly one of "pod" and "external_workload"';
    return hasPod ? { kind: 'pod', namespace: ns, name: o.pod as string } : { kind: 'external', namespace: ns, name: o.external_workload as string };
  }
  const colon = s.indexOf(':');
  if (colon === -1) return `workload "${s}" is not <namespace>:<pod> or JSON`;
  const namespace = s.slice(0, colon);
  const name = s.slice(colon + 1);
  if (namespace === '' || name === '') return `workload "${s}" has an empty namespace or pod`;
  return { kind: 'pod', namespace, name };
}

/** Validates a `PortSpec` and looks the server up: INVALID_ARGUMENT, NOT_FOUND or the live cell. */
export function lookupPort<C extends { readonly value: InboundServer }>(d: InboundDiscovery<C>, workload: string, port: number): LookupResult<C> {
  return lookupWith(workload, port, (ns, pod, p) => d.lookup(ns, pod, p));
}

/** `lookupPort` for a one-off read (GetPort, diagnostics): uses `peek`, so nothing is kept. */
export function peekPort(
  d: InboundDiscovery<{ readonly value: InboundServer }>,
  workload: string,
  port: number,
): LookupResult<{ readonly value: InboundServer }> {
  return lookupWith(workload, port, (ns, pod, p) => (d.peek !== undefined ? d.peek(ns, pod, p) : d.lookup(ns, pod, p)));
}

function lookupWith<C>(workload: string, port: number, find: (namespace: string, pod: string, port: number) => C | undefined): LookupResult<C> {
  const w = parseWorkload(workload);
  if (typeof w === 'string') return { code: 'INVALID_ARGUMENT', message: w };
  if (!Number.isInteger(port) || port < 1 || port > 65535) return { code: 'INVALID_ARGUMENT', message: `Invalid port: ${port}` };
  // External workloads (mesh expansion) are not indexed by ward yet: unknown server.
  const cell = w.kind === 'pod' ? find(w.namespace, w.name, port) : undefined;
  if (cell === undefined) return { code: 'NOT_FOUND', message: `unknown server: ${w.namespace}/${w.name}:${port}` };
  return { code: 'OK', cell };
}
