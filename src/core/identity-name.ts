/**
 * Mesh identity names (POLICY-SEMANTICS §3.7, §7) and identity-match parsing.
 */

/** Cluster facts that identity names depend on. */
export interface IdentityDomain {
  readonly controlPlaneNamespace: string;
  readonly trustDomain: string;
}

/** `<sa>.<ns>.serviceaccount.identity.<cp-ns>.<trust-domain>`. */
export function serviceAccountIdentity(domain: IdentityDomain, namespace: string, serviceAccount: string): string {
  return `${serviceAccount}.${namespace}.serviceaccount.identity.${domain.controlPlaneNamespace}.${domain.trustDomain}`;
}

/** The ServiceAccount the controller runs as (`ward install`'s, in the control-plane namespace). */
export const CONTROLLER_SERVICE_ACCOUNT = 'ward-controller';

/** The controller's mesh identity: the client identity proxies' admin ports see when it scrapes and taps them. */
export function controllerIdentity(domain: IdentityDomain): string {
  return serviceAccountIdentity(domain, domain.controlPlaneNamespace, CONTROLLER_SERVICE_ACCOUNT);
}

/** Suffix labels matching every ServiceAccount of `namespace` (`*.<ns>.serviceaccount.identity...`). */
export function namespaceIdentitySuffix(domain: IdentityDomain, namespace: string): string[] {
  return [namespace, 'serviceaccount', 'identity', domain.controlPlaneNamespace, ...domain.trustDomain.split('.')];
}

/** A parsed identity match: exact name, or suffix labels (`[]` = any DNS-like identity). */
export type IdentityMatch = { readonly kind: 'exact'; readonly name: string } | { readonly kind: 'suffix'; readonly parts: readonly string[] };

/**
 * Parses an identity string the way the index does: `*` = any, `*.a.b` = suffix `[a, b]`,
 * anything else (SPIFFE URIs, `a.*.b`, `**.x`) = exact.
 */
export function parseIdentityMatch(s: string): IdentityMatch {
  if (s === '*') return { kind: 'suffix', parts: [] };
  if (s.startsWith('*.')) {
    const parts = s.slice(2).split('.');
    if (parts.every((p) => p.length > 0 && !p.includes('*'))) return { kind: 'suffix', parts };
  }
  return { kind: 'exact', name: s };
}

/** True for URI-like identities (e.g. `spiffe://...`); DNS-like names never contain `:`. */
export function isUriIdentity(id: string): boolean {
  return id.includes(':');
}

const DNS_IDENTITY = /^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const SPIFFE_TRUST_DOMAIN = /^[a-z0-9\-._]+$/;
const SPIFFE_SEGMENT = /^[A-Za-z0-9\-._]+$/;

/** Validates a `MeshTLSAuthentication.identities` / `meshTLS.identities` entry (admission rules). */
export function isValidIdentityString(s: string): boolean {
  if (s.startsWith('spiffe://')) {
    const rest = s.slice('spiffe://'.length);
    const slash = rest.indexOf('/');
    const td = slash === -1 ? rest : rest.slice(0, slash);
    if (td.length === 0 || !SPIFFE_TRUST_DOMAIN.test(td)) return false;
    if (slash === -1) return true;
    const segments = rest.slice(slash + 1).split('/');
    return segments.every((seg) => seg.length > 0 && seg !== '.' && seg !== '..' && SPIFFE_SEGMENT.test(seg));
  }
  return DNS_IDENTITY.test(s);
}
