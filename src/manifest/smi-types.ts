/**
 * Typed SMI access-policy resources (Service Mesh Interface: `access.smi-spec.io` TrafficTarget
 * v1alpha1-v1alpha3, `specs.smi-spec.io` HTTPRouteGroup v1alpha1-v1alpha4, TCPRoute
 * v1alpha1-v1alpha4, UDPRoute v1alpha4), normalised across versions: the early versions keep
 * their fields at the top level of the document (TrafficTarget v1alpha1 calls its rules
 * `specs`), later ones under `spec`; `smiFieldPath` maps a normalised field back to where the
 * document wrote it, for diagnostics.
 */
import type { SourcePos } from '../core/index.js';
import type { ObjectMeta, ResourceOrigin } from './types.js';

/** API group of SMI TrafficTarget. */
export const SMI_ACCESS_GROUP = 'access.smi-spec.io';
/** API group of SMI HTTPRouteGroup, TCPRoute and UDPRoute. */
export const SMI_SPECS_GROUP = 'specs.smi-spec.io';

interface SmiTyped<K extends string, S> {
  readonly kind: K;
  readonly apiVersion: string;
  readonly metadata: ObjectMeta;
  readonly spec: S;
  readonly origin?: ResourceOrigin | undefined;
}

/** A TrafficTarget subject (destination or source) as written; `namespace` absent = the TrafficTarget's. */
export interface SmiSubject {
  readonly kind: string;
  readonly name: string;
  readonly namespace?: string | undefined;
}

/** A TrafficTarget rule: a route object of the TrafficTarget's namespace, and which of its matches (absent = all). */
export interface SmiRule {
  readonly kind: 'HTTPRouteGroup' | 'TCPRoute' | 'UDPRoute';
  readonly name: string;
  readonly matches?: readonly string[] | undefined;
}

/** `access.smi-spec.io` TrafficTarget, any version. */
export type TrafficTarget = SmiTyped<
  'TrafficTarget',
  {
    /** `port` exists in v1alpha1 (number or text) and v1alpha2 (number) only. */
    readonly destination: SmiSubject & { readonly port?: number | string | undefined };
    readonly sources: readonly SmiSubject[];
    readonly rules: readonly SmiRule[];
  }
>;

/** One named HTTPRouteGroup match as written; header values are regexes. */
export interface SmiHttpMatch {
  readonly name: string;
  readonly pathRegex?: string | undefined;
  /** `*` stands for every method; absent or empty = every method. */
  readonly methods?: readonly string[] | undefined;
  /** Header name and value regex, every one required (v1alpha2 and later). */
  readonly headers?: readonly { readonly name: string; readonly value: string }[] | undefined;
}

/** `specs.smi-spec.io` HTTPRouteGroup, any version. */
export type HTTPRouteGroup = SmiTyped<'HTTPRouteGroup', { readonly matches: readonly SmiHttpMatch[] }>;

/** `specs.smi-spec.io` TCPRoute: `ports` absent or empty = every port (v1alpha1-v1alpha3 name no ports). */
export type TCPRoute = SmiTyped<'TCPRoute', { readonly ports?: readonly number[] | undefined }>;

/** `specs.smi-spec.io/v1alpha4` UDPRoute (read and validated; a TCP mesh cannot enforce it). */
export type UDPRoute = SmiTyped<'UDPRoute', { readonly ports?: readonly number[] | undefined }>;

/** Every SMI kind ward reads. */
export type SmiResource = TrafficTarget | HTTPRouteGroup | TCPRoute | UDPRoute;

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
