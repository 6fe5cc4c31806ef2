/**
 * SMI access-policy resources (the types live with the other typed resources in `types.ts`):
 * their API groups, and where a normalised field was written. The early versions keep their
 * fields at the top level of the document (TrafficTarget v1alpha1 calls its rules `specs`),
 * later ones under `spec`; `smiFieldPath` maps a normalised field back, for diagnostics.
 */
import type { SourcePos } from '../core/index.js';
import type { SmiResource } from './types.js';

/** API group of SMI TrafficTarget. */
export const SMI_ACCESS_GROUP = 'access.smi-spec.io';
/** API group of SMI HTTPRouteGroup, TCPRoute and UDPRoute. */
export const SMI_SPECS_GROUP = 'specs.smi-spec.io';

/** The SMI kinds, for membership tests. */
export const SMI_KINDS: ReadonlySet<string> = new Set(['TrafficTarget', 'HTTPRouteGroup', 'TCPRoute', 'UDPRoute']);

/** True for a resource of an SMI kind. */
export function isSmiResource(r: { readonly kind: string }): r is SmiResource {
  return SMI_KINDS.has(r.kind);
}

/** True when the document keeps its fields at the top level (no `spec`). */
function isTopLevel(r: SmiResource): boolean {
  const version = r.apiVersion.slice(r.apiVersion.lastIndexOf('/') + 1);
  if (r.kind === 'TrafficTarget') return version === 'v1alpha1';
  return version === 'v1alpha1' || version === 'v1alpha2';
}

/**
 * Where the document wrote a normalised field: `['spec', 'rules', 0]` is `['specs', 0]` in a
 * TrafficTarget v1alpha1, `['spec', 'matches', 1]` is `['matches', 1]` in an HTTPRouteGroup
 * v1alpha1; TCP/UDP `ports` live under `spec.matches`.
 */
export function smiFieldPath(r: SmiResource, path: readonly (string | number)[]): (string | number)[] {
  if (path[0] !== 'spec') return [...path];
  const rest = path.slice(1);
  if ((r.kind === 'TCPRoute' || r.kind === 'UDPRoute') && rest[0] === 'ports') return ['spec', 'matches', ...rest];
  if (!isTopLevel(r)) return [...path];
  if (r.kind === 'TrafficTarget' && rest[0] === 'rules') return ['specs', ...rest.slice(1)];
  return rest.length === 0 ? [] : rest;
}

/** The position of a normalised field of an SMI resource, when it came from a file. */
export function smiPositionOf(r: SmiResource, path: readonly (string | number)[]): SourcePos | undefined {
  return r.origin?.positionOf(smiFieldPath(r, path));
}
