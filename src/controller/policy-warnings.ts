/**
 * The cross-resource policy warnings of what is in force (`ward check`'s lint: an identity naming
 * nothing, a Server port name no container declares, a probe the policy denies, …), kept current
 * after each batch the indexes apply. Each warning is logged at warn once when it appears (so a
 * live edit that introduces one is reported like a file error, on `ward up`'s terminal too), and
 * the admin API lists the current ones with their resources (`/api/v1/resources`).
 */
import { performance } from 'node:perf_hooks';
import type { Diagnostic } from '../core/index.js';
import { lintIndex, type PolicyIndex } from '../index/index.js';
import type { Resource } from '../manifest/index.js';
import type { Logger } from '../shared/index.js';

/** The `msg` of the log line that reports new warnings. */
export const POLICY_WARNINGS_MSG = 'policy warnings';

/** `file:line:col: warning CODE message [Kind ns/name]`, as the controller logs it. */
export function formatWarning(d: Diagnostic): string {
  const where = d.source === undefined ? '' : d.source.line > 0 ? `${d.source.file}:${d.source.line}:${d.source.col}: ` : `${d.source.file}: `;
  const res = d.resource !== undefined ? ` [${d.resource.kind} ${d.resource.namespace ? `${d.resource.namespace}/` : ''}${d.resource.name}]` : '';
  return `${where}${d.severity} ${d.code} ${d.message}${res}`;
}

/** The lint warnings of the resources in force, refreshed after each batch. */
export class PolicyWarnings {
  readonly #index: PolicyIndex;
  readonly #inForce: ReadonlyMap<string, Resource>;
  readonly #log: Logger;
  #current: readonly Diagnostic[] = [];
  #logged = new Set<string>();

  constructor(index: PolicyIndex, inForce: ReadonlyMap<string, Resource>, log: Logger) {
    this.#index = index;
    this.#inForce = inForce;
    this.#log = log;
  }

  /** Lints again; logs, at warn, the warnings that were not there after the previous batch. */
  refresh(): void {
    // Pods in force are the built, injected ones: the lint reads pods from the index instead.
    const resources = [...this.#inForce.values()].filter((r) => r.kind !== 'Pod');
    const t0 = performance.now();
    const found = lintIndex(this.#index, resources).filter((d) => d.severity !== 'info');
    const ms = performance.now() - t0;
    this.#current = found;
    const now = new Set(found.map(formatWarning));
    const fresh = [...now].filter((w) => !this.#logged.has(w)).sort();
    this.#logged = now;
    if (fresh.length > 0) this.#log.warn({ warnings: fresh.length, diagnostics: fresh, lintMs: +ms.toFixed(1) }, POLICY_WARNINGS_MSG);
    else this.#log.debug({ warnings: found.length, lintMs: +ms.toFixed(1) }, 'policy lint');
  }

  /** The current warnings. */
  current(): readonly Diagnostic[] {
    return this.#current;
  }
}
