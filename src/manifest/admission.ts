/**
 * The validating webhook's rules (POLICY-SEMANTICS §1.10): which decoded objects upstream's
 * `linkerd-policy-validator` would reject, each reason as an error diagnostic at the offending
 * field. Objects that do not decode are rejected outright, except Gateway API routes (lenient).
 */
import {
  type Diagnostic,
  diagnostic,
  formatNet,
  GATEWAY_GROUP,
  isValidIdentityString,
  type LabelSelector,
  type Network,
  netContainsNet,
  POLICY_GROUP,
} from '../core/index.js';
import { admitRoute, type Reject } from './admission-routes.js';
import { parseDefaultPolicy } from './annotations.js';
import type { DecodeResult, DocumentRef } from './decode.js';
import type { AuthorizationPolicy, MeshTLSAuthentication, Resource, Server, ServerAuthorization } from './types.js';

/** What admission may compare a new object with, and which Linkerd behaviour to emulate. */
export interface AdmissionContext {
  /** Objects already in the cluster (for the ≤2.17 overlapping-Server rule). */
  readonly existing?: readonly Resource[] | undefined;
  /** `latest` (default), or a Linkerd version such as `2.17`, `stable-2.14.10`, `edge-24.11.8`. */
  readonly version?: 'latest' | string | undefined;
}

/** Whether the webhook admits a document, and the admission rules' diagnostics. */
export interface AdmissionVerdict {
  readonly admitted: boolean;
  /** Rejections found by the webhook's rules; decode problems stay in the `DecodeResult`. */
  readonly diagnostics: Diagnostic[];
}

export type { Reject } from './admission-routes.js';

/**
 * The webhook's verdict on any decoded document: kinds it does not handle are admitted, objects
 * that do not deserialize are rejected (Gateway API routes are admitted: upstream is lenient),
 * and decoded objects go through `admitResource`.
 */
export function admitDecoded(result: DecodeResult, ctx: AdmissionContext = {}): AdmissionVerdict {
  switch (result.status) {
    case 'ignored':
      return { admitted: true, diagnostics: [] };
    case 'invalid':
      return { admitted: isLenientKind(result.ref), diagnostics: [] };
    case 'ok': {
      const diagnostics = admitResource(result.resource, ctx);
      return { admitted: diagnostics.length === 0, diagnostics };
    }
  }
}

function isLenientKind(ref: DocumentRef | undefined): boolean {
  return ref !== undefined && ref.group === GATEWAY_GROUP && (ref.kind === 'HTTPRoute' || ref.kind === 'GRPCRoute');
}

/** The webhook's rules for one decoded resource: every rejection reason (empty = admitted). */
export function admitResource(resource: Resource, ctx: AdmissionContext = {}): Diagnostic[] {
  const out: Diagnostic[] = [];
  const { kind, metadata, origin } = resource;
  const ref = { kind, name: metadata.name, ...(metadata.namespace !== '' ? { namespace: metadata.namespace } : {}) };
  const reject: Reject = (code, params, path) =>
    out.push(diagnostic(code, params, { resource: ref, path, ...(origin !== undefined ? { source: origin.positionOf(path) } : {}) }));
  const legacy = isLinkerdAtMost217(ctx.version);
  switch (resource.kind) {
    case 'Server':
      admitServer(resource, legacy ? (ctx.existing ?? []) : undefined, reject);
      break;
    case 'ServerAuthorization':
      admitServerAuthorization(resource, reject);
      break;
    case 'AuthorizationPolicy':
      admitAuthorizationPolicy(resource, legacy, reject);
      break;
    case 'MeshTLSAuthentication':
      admitMeshTLSAuthentication(resource, reject);
      break;
    case 'NetworkAuthentication':
      admitNetworks(resource.spec.networks, ['spec', 'networks'], reject);
      if (resource.spec.networks.length === 0) reject('POL060', {}, ['spec', 'networks']);
      break;
    case 'HTTPRoute':
    case 'GRPCRoute':
      admitRoute(resource, reject);
      break;
    default:
      break;
  }
  return out;
}

/** True when `version` names a Linkerd release before 2.18 (stable ≤2.17, edge before 25.4). */
export function isLinkerdAtMost217(version: string | undefined): boolean {
  if (version === undefined || version === 'latest') return false;
  const stable = /^(?:stable-)?v?2\.(\d+)(?:\.|$)/.exec(version);
  if (stable !== null) return Number(stable[1]) <= 17;
  const edge = /^edge-(\d+)\.(\d+)\./.exec(version);
  if (edge !== null) return Number(edge[1]) < 25 || (Number(edge[1]) === 25 && Number(edge[2]) < 4);
  return false;
}

// IANA_SVC_NAME: 1-15 of [a-z0-9-], at least one letter, no leading, trailing or double dash.
function isPortName(s: string): boolean {
  return s.length <= 15 && /^[a-z0-9]+(-[a-z0-9]+)*$/.test(s) && /[a-z]/.test(s);
}

function admitServer(srv: Server, existing: readonly Resource[] | undefined, reject: Reject): void {
  const { spec } = srv;
  if (spec.accessPolicy !== undefined && parseDefaultPolicy(spec.accessPolicy) === undefined) {
    reject('POL020', { value: spec.accessPolicy }, ['spec', 'accessPolicy']);
  }
  if ((spec.podSelector === undefined) === (spec.externalWorkloadSelector === undefined)) reject('POL023', {}, ['spec']);
  const ps = spec.podSelector;
  if (srv.apiVersion.endsWith('/v1alpha1') && ps !== undefined && (ps.matchLabels === undefined) === (ps.matchExpressions === undefined)) {
    reject('POL024', { apiVersion: srv.apiVersion }, ['spec', 'podSelector']);
  }
  // A quoted number is admitted as a (never-matching) name upstream; lint warns about it (POL100).
  if (typeof spec.port === 'string' && !/^\d+$/.test(spec.port) && !isPortName(spec.port)) {
    reject('POL025', { value: spec.port }, ['spec', 'port']);
  }
  for (const other of existing ?? []) {
    if (other.kind !== 'Server' || other.metadata.namespace !== srv.metadata.namespace || other.metadata.name === srv.metadata.name) continue;
    if (other.spec.port !== spec.port || !serversOverlap(srv, other)) continue;
    reject('POL026', { value: spec.port, namespace: srv.metadata.namespace, other: other.metadata.name }, ['spec', 'port']);
  }
}

// ≤2.17: same kind of selector, and either selects everything or both are identical.
function serversOverlap(a: Server, b: Server): boolean {
  const pair = (x: LabelSelector | undefined, y: LabelSelector | undefined): boolean =>
    x !== undefined && y !== undefined && (selectsAll(x) || selectsAll(y) || canonicalJson(x) === canonicalJson(y));
  return pair(a.spec.podSelector, b.spec.podSelector) || pair(a.spec.externalWorkloadSelector, b.spec.externalWorkloadSelector);
}

function selectsAll(s: LabelSelector): boolean {
  return Object.keys(s.matchLabels ?? {}).length === 0 && (s.matchExpressions ?? []).length === 0;
}

function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (typeof v === 'object' && v !== null) {
    const entries = Object.entries(v).filter(([, x]) => x !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

// The ServerAuthorization schema only allows DNS-like identities (no SPIFFE URIs).
const SAZ_IDENTITY = /^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function admitServerAuthorization(saz: ServerAuthorization, reject: Reject): void {
  const { server, client } = saz.spec;
  if ((server.name === undefined) === (server.selector === undefined)) reject('POL034', {}, ['spec', 'server']);
  const mtls = client.meshTLS;
  if (mtls !== undefined) {
    if (client.unauthenticated) reject('POL030', {}, ['spec', 'client', 'unauthenticated']);
    const ids = mtls.identities ?? [];
    if (mtls.unauthenticatedTLS && ids.length + (mtls.serviceAccounts ?? []).length > 0) {
      reject('POL031', {}, ['spec', 'client', 'meshTLS', 'unauthenticatedTLS']);
    }
    ids.forEach((id, i) => {
      if (!SAZ_IDENTITY.test(id)) reject('POL050', { value: id }, ['spec', 'client', 'meshTLS', 'identities', i]);
    });
  }
  admitNetworks(client.networks ?? [], ['spec', 'client', 'networks'], reject);
}

/** Every `except` must lie strictly inside its `cidr` (POL033). */
function admitNetworks(networks: readonly Network[], path: readonly (string | number)[], reject: Reject): void {
  networks.forEach((n, i) => {
    n.except.forEach((e, j) => {
      if (netContainsNet(e, n.net) || !netContainsNet(n.net, e)) {
        reject('POL033', { except: formatNet(e), cidr: formatNet(n.net) }, [...path, i, 'except', j]);
      }
    });
  });
}

/** Case-insensitive group test where absent, '' and `core` all mean the core group. */
export function isGroup(group: string | undefined, want: string): boolean {
  const norm = (g: string | undefined) => (g === undefined || g === '' ? 'core' : g.toLowerCase());
  return norm(group) === norm(want);
}

function isKind(ref: { readonly group?: string | undefined; readonly kind: string }, group: string, kind: string): boolean {
  return isGroup(ref.group, group) && ref.kind.toLowerCase() === kind.toLowerCase();
}

/** `kind.group` as kubectl writes it (`Namespace` for core kinds). */
function kindText(ref: { readonly group?: string | undefined; readonly kind: string }): string {
  return isGroup(ref.group, '') ? ref.kind : `${ref.kind}.${ref.group}`;
}

/** `kind.group/name` as kubectl writes it. */
function refText(ref: { readonly group?: string | undefined; readonly kind: string; readonly name?: string | undefined }): string {
  return `${kindText(ref)}/${ref.name ?? ''}`;
}

function admitAuthorizationPolicy(ap: AuthorizationPolicy, legacy: boolean, reject: Reject): void {
  const t = ap.spec.targetRef;
  if (isKind(t, '', 'Namespace')) {
    if (t.name !== ap.metadata.namespace) reject('POL041', { namespace: ap.metadata.namespace, value: t.name }, ['spec', 'targetRef', 'name']);
  } else {
    const supported =
      isKind(t, POLICY_GROUP, 'Server') ||
      isKind(t, POLICY_GROUP, 'HTTPRoute') ||
      (isKind(t, GATEWAY_GROUP, 'HTTPRoute') && !legacy) ||
      isKind(t, GATEWAY_GROUP, 'GRPCRoute');
    if (!supported) reject('POL040', { target: refText(t) }, ['spec', 'targetRef']);
  }

  const refs = ap.spec.requiredAuthenticationRefs;
  if (refs === undefined) {
    reject('POL045', {}, ['spec']);
    return;
  }
  const path = ['spec', 'requiredAuthenticationRefs'];
  const counts = { MeshTLSAuthentication: 0, NetworkAuthentication: 0, ServiceAccount: 0 };
  refs.forEach((r, i) => {
    if (isKind(r, POLICY_GROUP, 'MeshTLSAuthentication')) counts.MeshTLSAuthentication++;
    else if (isKind(r, POLICY_GROUP, 'NetworkAuthentication')) counts.NetworkAuthentication++;
    else if (isKind(r, '', 'ServiceAccount')) counts.ServiceAccount++;
    else reject('POL042', { target: refText(r) }, [...path, i]);
    if (r.name === undefined) reject('POL012', { field: `${path.join('.')}[${i}].name` }, [...path, i]);
  });
  for (const [kind, n] of Object.entries(counts)) if (n > 1) reject('POL043', { kind }, path);
  if (counts.MeshTLSAuthentication > 0 && counts.ServiceAccount > 0) reject('POL044', {}, path);
}

function admitMeshTLSAuthentication(m: MeshTLSAuthentication, reject: Reject): void {
  const { identities, identityRefs } = m.spec;
  const given = identities ?? identityRefs;
  if ((identities === undefined) === (identityRefs === undefined) || given?.length === 0) reject('POL053', {}, ['spec']);
  identities?.forEach((id, i) => {
    if (!isValidIdentityString(id)) reject('POL050', { value: id }, ['spec', 'identities', i]);
  });
  identityRefs?.forEach((r, i) => {
    const path = ['spec', 'identityRefs', i];
    if (isKind(r, '', 'Namespace')) {
      if (r.namespace !== undefined) reject('POL052', {}, [...path, 'namespace']);
    } else if (!isKind(r, '', 'ServiceAccount')) {
      reject('POL051', { value: kindText(r) }, [...path, 'kind']);
    }
    if (r.name === undefined) reject('POL054', {}, path);
  });
}
