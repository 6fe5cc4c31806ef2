/**
 * Decoding: a manifest document becomes a typed `Resource` through the schema of its kind and
 * version, or the reasons it does not deserialize (upstream's index ignores such objects).
 */
import type { z } from 'zod';
import { type Diagnostic, type DiagnosticCode, diagnostic, GATEWAY_GROUP, type ResourceRef } from '../core/index.js';
import { KIND_TABLE } from './kind-table.js';
import type { ManifestDocument } from './load.js';
import type { Resource, ResourceOrigin } from './types.js';

/** Identifies a document that did not decode, as far as it can be read. */
export interface DocumentRef {
  readonly kind: string;
  readonly apiVersion: string;
  /** API group from apiVersion ('' for core). */
  readonly group: string;
  readonly namespace: string;
  /** '' when the document has no usable name. */
  readonly name: string;
}

/**
 * Outcome of decoding one document: a resource (possibly with warnings, e.g. pruned unknown
 * fields), an invalid object of a kind ward reads, or a kind ward does not read.
 */
export type DecodeResult =
  | { readonly status: 'ok'; readonly resource: Resource; readonly diagnostics: Diagnostic[] }
  | { readonly status: 'invalid'; readonly ref: DocumentRef | undefined; readonly diagnostics: Diagnostic[] }
  | { readonly status: 'ignored'; readonly diagnostics: Diagnostic[] };

type Path = readonly (string | number)[];

const KNOWN_GROUPS = new Set(Object.values(KIND_TABLE).flatMap((groups) => Object.keys(groups)));

/** Splits `group/version` (`v1` is the core group). */
export function splitApiVersion(apiVersion: string): { readonly group: string; readonly version: string } {
  const slash = apiVersion.lastIndexOf('/');
  return slash === -1 ? { group: '', version: apiVersion } : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1) };
}

/** Renders a field path as `spec.rules[0].matches[1].path`. */
export function formatPath(path: Path): string {
  let out = '';
  for (const seg of path) out += typeof seg === 'number' ? `[${seg}]` : out === '' ? seg : `.${seg}`;
  return out === '' ? '(document)' : out;
}

/** Decodes one document. Never throws; collects every schema problem with its exact position. */
export function decodeResource(doc: ManifestDocument): DecodeResult {
  const { origin } = doc;
  const value = withoutNulls(doc.value);
  if (!isRecord(value) || typeof value.kind !== 'string' || typeof value.apiVersion !== 'string') {
    const detail = !isRecord(value) ? `expected a mapping, got ${describe(value)}` : 'apiVersion and kind must be strings';
    return { status: 'invalid', ref: undefined, diagnostics: [diagnostic('POL002', { detail }, { source: origin.source })] };
  }
  const kind = value.kind;
  const apiVersion = value.apiVersion;
  const { group, version } = splitApiVersion(apiVersion);
  const groups = own(KIND_TABLE, kind);
  // A kind of the same name in a group ward does not know (e.g. a Knative Service) is not ours,
  // nor a Gateway API kind that shares a name with an SMI one (TCPRoute, UDPRoute).
  if (groups === undefined || !KNOWN_GROUPS.has(group) || (group === GATEWAY_GROUP && own(groups, group) === undefined)) {
    return { status: 'ignored', diagnostics: [diagnostic('POL004', { kind, apiVersion }, { source: origin.source })] };
  }
  const ref = documentRef(value, kind, apiVersion, group);
  const resource: ResourceRef = { kind, name: ref.name, ...(ref.namespace !== '' ? { namespace: ref.namespace } : {}) };
  const versions = own(groups, group);
  const decode = versions === undefined ? undefined : own(versions, version);
  if (decode === undefined) {
    const supported = Object.entries(groups)
      .flatMap(([g, vs]) => Object.keys(vs).map((v) => (g === '' ? v : `${g}/${v}`)))
      .join(', ');
    const d = diagnostic('POL005', { kind, apiVersion, versions: supported }, { resource, path: ['apiVersion'], source: origin.positionOf(['apiVersion']) });
    return { status: 'invalid', ref, diagnostics: [d] };
  }

  const diagnostics: Diagnostic[] = [];
  // Unknown fields are reported, pruned (as the API server would) and the document parsed again.
  for (let round = 0; ; round++) {
    const r = decode(value, { apiVersion, group, origin });
    if (r.ok) return { status: 'ok', resource: r.resource, diagnostics };
    const unknown = r.issues.filter((i) => i.code === 'unrecognized_keys');
    if (unknown.length === 0 || round === 8) {
      for (const issue of r.issues) diagnostics.push(issueDiagnostic(issue, value, origin, resource, kind, apiVersion));
      return { status: 'invalid', ref, diagnostics };
    }
    for (const issue of unknown) {
      const at = pathOf(issue);
      const parent = valueAt(value, at);
      for (const key of issue.keys) {
        const path = [...at, key];
        const field = formatPath(path);
        diagnostics.push(diagnostic('POL011', { field, kind, apiVersion }, { resource, path, source: origin.positionOf(path) }));
        if (isRecord(parent)) delete parent[key];
      }
    }
  }
}

function documentRef(value: Record<string, unknown>, kind: string, apiVersion: string, group: string): DocumentRef {
  const meta = isRecord(value.metadata) ? value.metadata : {};
  const name = typeof meta.name === 'string' ? meta.name : '';
  const ns = typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : 'default';
  return { kind, apiVersion, group, namespace: kind === 'Namespace' ? '' : ns, name };
}

function issueDiagnostic(issue: z.core.$ZodIssue, root: unknown, origin: ResourceOrigin, resource: ResourceRef, kind: string, apiVersion: string): Diagnostic {
  const path = pathOf(issue);
  const ctx = { resource, path, source: origin.positionOf(path) };
  const field = formatPath(path);
  const found = valueAt(root, path);
  switch (issue.code) {
    case 'custom': {
      const params = (issue.params ?? {}) as Record<string, string | number>;
      const code = params.ward as DiagnosticCode | undefined;
      if (code !== undefined) return diagnostic(code, params, ctx);
      return diagnostic('POL010', { field, detail: issue.message }, ctx);
    }
    case 'invalid_type':
      if (found === undefined) return diagnostic('POL012', { field }, ctx);
      return diagnostic('POL010', { field, detail: `expected ${article(issue.expected)}, got ${describe(found)}` }, ctx);
    case 'invalid_union': {
      const expected = issue.errors.flatMap((alt) => alt.flatMap((i) => (i.code === 'invalid_type' && i.path.length === 0 ? [i.expected] : [])));
      if (found === undefined) return diagnostic('POL012', { field }, ctx);
      const detail = expected.length > 0 ? `expected ${expected.map(article).join(' or ')}, got ${describe(found)}` : 'does not match any allowed shape';
      return diagnostic('POL010', { field, detail }, ctx);
    }
    case 'invalid_value':
      return diagnostic('POL010', { field, detail: `invalid option ${JSON.stringify(found)} (expected one of ${issue.values.map(String).join(', ')})` }, ctx);
    case 'too_small':
      return diagnostic('POL010', { field, detail: boundDetail('at least', issue.origin, issue.minimum) }, ctx);
    case 'too_big':
      return diagnostic('POL010', { field, detail: boundDetail('at most', issue.origin, issue.maximum) }, ctx);
    case 'unrecognized_keys':
      return diagnostic('POL011', { field, kind, apiVersion }, ctx);
    default:
      return diagnostic('POL010', { field, detail: issue.message }, ctx);
  }
}

function boundDetail(relation: string, origin: string, bound: number | bigint): string {
  if (origin === 'string') return Number(bound) === 1 ? 'must not be empty' : `must have ${relation} ${bound} characters`;
  if (origin === 'array') return `must have ${relation} ${bound} items`;
  return `must be ${relation} ${bound}`;
}

function article(expected: string): string {
  if (expected === 'int') return 'an integer';
  if (expected === 'record' || expected === 'object') return 'a mapping';
  if (expected === 'array') return 'a list';
  return /^[aeiou]/.test(expected) ? `an ${expected}` : `a ${expected}`;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  if (typeof v === 'number' || typeof v === 'boolean') return `${typeof v} ${String(v)}`;
  if (typeof v === 'object') return 'a mapping';
  return typeof v;
}

function pathOf(issue: z.core.$ZodIssue): (string | number)[] {
  return issue.path.filter((s): s is string | number => typeof s !== 'symbol');
}

function valueAt(root: unknown, path: Path): unknown {
  let v = root;
  for (const seg of path) {
    if (Array.isArray(v) && typeof seg === 'number') v = v[seg];
    else if (isRecord(v) && typeof seg === 'string' && Object.hasOwn(v, seg)) v = v[seg];
    else return undefined;
  }
  return v;
}

// The API server prunes null-valued fields before validation, so `labels:` alone means absent.
function withoutNulls(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(withoutNulls);
  if (!isRecord(v)) return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) if (x !== null && x !== undefined) out[k] = withoutNulls(x);
  return out;
}

function own<T>(table: Readonly<Record<string, T>>, key: string): T | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
