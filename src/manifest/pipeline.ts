/**
 * The admission pipeline shared by every consumer of manifests (the offline CLI workspace, the
 * directory source): decode each document, admit it as the validating webhook would (Gateway API
 * routes leniently), lint it, keep the last definition of each object, expand workloads into
 * pods and inject those pods as the proxy injector would at pod creation. I/O-free: callers load
 * the documents and decide what to do with the result.
 */
import { type Diagnostic, diagnostic, GATEWAY_GROUP, type SourcePos } from '../core/index.js';
import { admitResource } from './admission.js';
import { type DecodeResult, decodeResource } from './decode.js';
import { type InjectConfig, injectPod } from './inject.js';
import { lintResource } from './lint-resource.js';
import type { ManifestDocument } from './load.js';
import type { Namespace, Pod, Resource, ResourceKey } from './types.js';
import { expandWorkloads } from './workloads.js';

/** One input document as `ward check` reports it. */
export interface CheckEntry {
  readonly kind: string;
  readonly apiVersion: string;
  readonly namespace: string;
  readonly name: string;
  readonly source: SourcePos;
  readonly admitted: boolean;
  readonly diagnostics: Diagnostic[];
}

/** What became of one document. */
export interface AdmittedDocument {
  readonly document: ManifestDocument;
  /** Undefined for kinds ward does not read (POL004). */
  readonly entry: CheckEntry | undefined;
  /** The decoded resource, when it decoded and the webhook admitted it. */
  readonly resource: Resource | undefined;
  /**
   * The object the document defines, when its kind and name can be read, also when it did not
   * decode or was rejected (so a consumer can keep the previous version of that object).
   */
  readonly key: ResourceKey | undefined;
}

/** Options of `admitDocuments`. */
export interface AdmitOptions {
  /** Objects already in the cluster (the webhook's ≤2.17 overlapping-Server rule compares with them). */
  readonly existing?: readonly Resource[] | undefined;
  /** Linkerd version whose webhook to emulate (default `latest`). */
  readonly version?: string | undefined;
}

/** Outcome of `admitDocuments`. */
export interface AdmitResult {
  /** One entry per document of a kind ward reads, in input order. */
  readonly entries: CheckEntry[];
  /** Decoded and admitted resources, in input order (duplicates included). */
  readonly admitted: Resource[];
  /** One outcome per input document, in input order. */
  readonly documents: AdmittedDocument[];
  /** Decode, admission and lint diagnostics, in input order. */
  readonly diagnostics: Diagnostic[];
}

const GATEWAY_LENIENT = new Set(['HTTPRoute', 'GRPCRoute']);

/**
 * Decodes, admits and lints documents. Never throws for bad input. Each document is admitted
 * against `existing` plus the documents admitted before it; Gateway API routes that do not
 * decode are admitted (upstream's lenient webhook) but yield no resource.
 */
export function admitDocuments(documents: readonly ManifestDocument[], opts: AdmitOptions = {}): AdmitResult {
  const diagnostics: Diagnostic[] = [];
  const entries: CheckEntry[] = [];
  const admitted: Resource[] = [];
  const outcomes: AdmittedDocument[] = [];
  // The live array, so each document sees those admitted before it.
  const existing = opts.existing === undefined || opts.existing.length === 0 ? admitted : undefined;
  for (const document of documents) {
    const res = decodeResource(document);
    diagnostics.push(...res.diagnostics);
    const entry = entryOf(document, res);
    if (res.status !== 'ok') {
      const lenient = res.status === 'invalid' && res.ref !== undefined && res.ref.group === GATEWAY_GROUP && GATEWAY_LENIENT.has(res.ref.kind);
      const shown = entry !== undefined && lenient ? { ...entry, admitted: true } : entry;
      if (shown !== undefined) entries.push(shown);
      const key = res.status === 'invalid' && res.ref !== undefined && res.ref.name !== '' ? refKey(res.ref) : undefined;
      outcomes.push({ document, entry: shown, resource: undefined, key });
      continue;
    }
    const ctx = { existing: existing ?? [...(opts.existing ?? []), ...admitted], version: opts.version };
    const rejections = admitResource(res.resource, ctx);
    const lints = lintResource(res.resource);
    diagnostics.push(...rejections, ...lints);
    const ok = !rejections.some((d) => d.severity === 'error');
    const base = entry as CheckEntry;
    const shown: CheckEntry = { ...base, admitted: ok, diagnostics: [...base.diagnostics, ...rejections, ...lints] };
    entries.push(shown);
    if (ok) admitted.push(res.resource);
    outcomes.push({ document, entry: shown, resource: ok ? res.resource : undefined, key: resourceKeyOf(res.resource) });
  }
  return { entries, admitted, documents: outcomes, diagnostics };
}

function entryOf(doc: ManifestDocument, res: DecodeResult): CheckEntry | undefined {
  const source = doc.origin.source;
  if (res.status === 'ok') {
    const r = res.resource;
    return {
      kind: r.kind,
      apiVersion: r.apiVersion,
      namespace: r.metadata.namespace,
      name: r.metadata.name,
      source,
      admitted: true,
      diagnostics: [...res.diagnostics],
    };
  }
  if (res.status === 'invalid') {
    const ref = res.ref;
    return {
      kind: ref?.kind ?? '',
      apiVersion: ref?.apiVersion ?? '',
      namespace: ref?.namespace ?? '',
      name: ref?.name ?? '',
      source,
      admitted: false,
      diagnostics: [...res.diagnostics],
    };
  }
  return undefined;
}

// === keys ===

/**
 * The key of a resource: kind, group (only for HTTPRoute, which exists in two groups), namespace
 * and name. The same key the policy index uses.
 */
export function resourceKeyOf(r: Resource): ResourceKey {
  const group = r.kind === 'HTTPRoute' ? r.spec.group : '';
  return { kind: r.kind, group, namespace: r.metadata.namespace, name: r.metadata.name };
}

function refKey(ref: { readonly kind: string; readonly group: string; readonly namespace: string; readonly name: string }): ResourceKey {
  return { kind: ref.kind, group: ref.kind === 'HTTPRoute' ? ref.group : '', namespace: ref.namespace, name: ref.name };
}

/** A key as one string (`kind|group|namespace|name`), for maps. */
export function resourceKeyString(k: ResourceKey): string {
  return `${k.kind}|${k.group}|${k.namespace}|${k.name}`;
}

// === objects and pods ===

/**
 * Keeps the last definition of each object, as `kubectl apply` of the inputs in order would;
 * every redefinition gets a POL006 warning at the replaced definition. The result keeps the
 * position of each object's first definition.
 */
export function dedupeResources(resources: readonly Resource[]): { readonly resources: Resource[]; readonly diagnostics: Diagnostic[] } {
  const diagnostics: Diagnostic[] = [];
  const byKey = new Map<string, Resource>();
  for (const r of resources) {
    const key = resourceKeyString(resourceKeyOf(r));
    const prev = byKey.get(key);
    if (prev !== undefined) diagnostics.push(duplicateDiagnostic(prev, r));
    byKey.set(key, r);
  }
  return { resources: [...byKey.values()], diagnostics };
}

/** POL006 about `replaced`, which `winner` (a later definition of the same object) overrides. */
export function duplicateDiagnostic(replaced: Resource, winner: Resource): Diagnostic {
  const where = winner.origin !== undefined ? `${winner.origin.source.file}:${winner.origin.source.line}` : 'inline';
  const ref = { kind: winner.kind, namespace: winner.metadata.namespace, name: winner.metadata.name };
  return diagnostic('POL006', { ...ref, where }, { resource: ref, source: replaced.origin?.source });
}

/** The Namespaces among `resources`, by name. */
export function namespacesOf(resources: readonly Resource[]): Map<string, Namespace> {
  return new Map(resources.filter((r): r is Namespace => r.kind === 'Namespace').map((n) => [n.metadata.name, n]));
}

/** Pods as written and as created. */
export interface PodsResult {
  /** The Pods among the resources, then the pods their workloads stand for, as written. */
  readonly written: Pod[];
  /** `written[i]` as the injector creates it (same order). */
  readonly pods: Pod[];
}

/**
 * The pods `resources` stand for (their Pods, then the pods of their workloads), each injected
 * with its namespace from `namespaces` as the proxy injector would at pod creation.
 */
export function podsOf(resources: readonly Resource[], namespaces: ReadonlyMap<string, Namespace>, cfg: InjectConfig): PodsResult {
  const written = [...resources.filter((r): r is Pod => r.kind === 'Pod'), ...expandWorkloads(resources)];
  const pods = written.map((p) => injectPod(p, namespaces.get(p.metadata.namespace), cfg));
  return { written, pods };
}
