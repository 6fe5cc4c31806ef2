/**
 * The offline pipeline every CLI command shares: load manifests, decode, admit (like the
 * validating webhook), lint, expand workloads into pods, inject them (like the proxy injector at
 * pod creation), and index. Bad input never stops the pipeline: every problem becomes a
 * diagnostic and the valid rest is used. The I/O-free steps live in manifest's pipeline.
 */
import type { Diagnostic } from '../core/index.js';
import { type ClusterConfig, lintIndex, PolicyIndex } from '../index/index.js';
import {
  admitDocuments,
  type CheckEntry,
  dedupeResources,
  loadManifests,
  type ManifestDocument,
  namespacesOf,
  podsOf,
  type Resource,
} from '../manifest/index.js';

export type { CheckEntry } from '../manifest/index.js';

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

/** Builds the workspace. Never throws for bad manifests; I/O problems are diagnostics too. */
export function buildWorkspace(input: WorkspaceInput, config: ClusterConfig): Workspace {
  const diagnostics: Diagnostic[] = [];
  const documents: ManifestDocument[] = [...(input.documents ?? [])];
  if (input.paths !== undefined && input.paths.length > 0) {
    const loaded = loadManifests(input.paths, input.stdin !== undefined ? { stdin: input.stdin } : {});
    documents.push(...loaded.documents);
    diagnostics.push(...loaded.diagnostics);
  }

  const admission = admitDocuments(documents);
  diagnostics.push(...admission.diagnostics);
  // Later definitions of the same object replace earlier ones, as `kubectl apply` would.
  const deduped = dedupeResources(admission.admitted);
  diagnostics.push(...deduped.diagnostics);
  const unique = deduped.resources;
  const { written, pods } = podsOf(unique, namespacesOf(unique), { controlPlaneNamespace: config.controlPlaneNamespace });
  const resources = [...unique.filter((r) => r.kind !== 'Pod'), ...pods];

  const index = new PolicyIndex(config);
  index.update((tx) => {
    for (const r of resources) tx.apply(r);
  });
  // Lint sees the pods as written: only pods that were already created before this input can
  // miss a namespace annotation (pods injected here got it copied, or override it on purpose).
  diagnostics.push(...lintIndex(index, [...unique.filter((r) => r.kind !== 'Pod'), ...written]));
  return { config, index, resources, entries: admission.entries, diagnostics };
}
