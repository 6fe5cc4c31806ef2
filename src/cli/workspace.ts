/**
 * The offline pipeline every CLI command shares: load manifests, decode, admit (like the
 * validating webhook), lint, expand workloads into pods, inject them (like the proxy injector at
 * pod creation), and index. Bad input never stops the pipeline: every problem becomes a
 * diagnostic and the valid rest is used.
 */
import { type Diagnostic, diagnostic, type SourcePos } from '../core/index.js';
import { type ClusterConfig, lintIndex, PolicyIndex, resourceKey } from '../index/index.js';
import {
  admitResource,
  type DecodeResult,
  decodeResource,
  expandWorkloads,
  injectPod,
  lintResource,
  loadManifests,
  type ManifestDocument,
  type Namespace,
  type Resource,
} from '../manifest/index.js';

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

/** The indexed view of a set of manifests. */
export interface Workspace {
  readonly config: ClusterConfig;
  readonly index: PolicyIndex;
  /** Admitted resources plus the pods built from workloads (after injection). */
  readonly resources: readonly Resource[];
  readonly entries: readonly CheckEntry[];
  readonly diagnostics: readonly Diagnostic[];
}

/** Where the manifests come from. */
export interface WorkspaceInput {
  readonly paths?: readonly string[];
  readonly documents?: readonly ManifestDocument[];
  readonly stdin?: () => string;
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

const GATEWAY_LENIENT = new Set(['HTTPRoute', 'GRPCRoute']);

/** Builds the workspace. Never throws for bad manifests; I/O problems are diagnostics too. */
export function buildWorkspace(input: WorkspaceInput, config: ClusterConfig): Workspace {
  const diagnostics: Diagnostic[] = [];
  const documents: ManifestDocument[] = [...(input.documents ?? [])];
  if (input.paths !== undefined && input.paths.length > 0) {
    const loaded = loadManifests(input.paths, input.stdin !== undefined ? { stdin: input.stdin } : {});
    documents.push(...loaded.documents);
    diagnostics.push(...loaded.diagnostics);
  }

  const entries: CheckEntry[] = [];
  const admitted: Resource[] = [];
  for (const doc of documents) {
    const res = decodeResource(doc);
    diagnostics.push(...res.diagnostics);
    const entry = entryOf(doc, res);
    if (res.status === 'invalid' && entry !== undefined && res.ref !== undefined) {
      // Gateway API kinds are admitted even when they do not parse (upstream's lenient webhook).
      if (res.ref.group === 'gateway.networking.k8s.io' && GATEWAY_LENIENT.has(res.ref.kind)) {
        entries.push({ ...entry, admitted: true });
        continue;
      }
    }
    if (res.status !== 'ok') {
      if (entry !== undefined) entries.push(entry);
      continue;
    }
    const rejections = admitResource(res.resource, { existing: admitted });
    const lints = lintResource(res.resource);
    diagnostics.push(...rejections, ...lints);
    const ok = !rejections.some((d) => d.severity === 'error');
    entries.push({ ...(entry as CheckEntry), admitted: ok, diagnostics: [...(entry as CheckEntry).diagnostics, ...rejections, ...lints] });
    if (ok) admitted.push(res.resource);
  }

  // Later definitions of the same object replace earlier ones, as `kubectl apply` would.
  const byKey = new Map<string, Resource>();
  for (const r of admitted) {
    const k = resourceKey(r);
    const key = `${k.kind}|${k.group}|${k.namespace}|${k.name}`;
    const prev = byKey.get(key);
    if (prev !== undefined) {
      const where = r.origin !== undefined ? `${r.origin.source.file}:${r.origin.source.line}` : 'inline';
      diagnostics.push(
        diagnostic(
          'POL006',
          { kind: r.kind, namespace: r.metadata.namespace, name: r.metadata.name, where },
          { resource: { kind: r.kind, namespace: r.metadata.namespace, name: r.metadata.name }, source: prev.origin?.source },
        ),
      );
    }
    byKey.set(key, r);
  }
  const unique = [...byKey.values()];
  const namespaces = new Map(unique.filter((r): r is Namespace => r.kind === 'Namespace').map((n) => [n.metadata.name, n]));
  const inputPods = [...unique.filter((r) => r.kind === 'Pod'), ...expandWorkloads(unique)];
  const pods = inputPods.map((p) => injectPod(p, namespaces.get(p.metadata.namespace), { controlPlaneNamespace: config.controlPlaneNamespace }));
  const resources = [...unique.filter((r) => r.kind !== 'Pod'), ...pods];

  const index = new PolicyIndex(config);
  index.update((tx) => {
    for (const r of resources) tx.apply(r);
  });
  // Lint sees the pods as written: only pods that were already created before this input can
  // miss a namespace annotation (pods injected here got it copied, or override it on purpose).
  diagnostics.push(...lintIndex(index, [...unique.filter((r) => r.kind !== 'Pod'), ...inputPods]));
  return { config, index, resources, entries, diagnostics };
}
