/**
 * The metrics registry (prom-client). Each process owns one `Registry`; components receive it
 * and register their own metrics, so tests can create isolated registries.
 *
 * prom-client is loaded on first use, not at import: the proxy renders its own metrics
 * (`proxy/metric-cells.ts`) and, as a sidecar in every pod, should not carry prom-client and
 * its dependencies in memory (about 8 MB of RSS) just because it imports `shared`.
 */
import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';

export type { Counter, Gauge, Histogram, Registry } from 'prom-client';

const load = createRequire(import.meta.url);
let client: typeof PromClient | undefined;

/** prom-client itself (loaded on the first call). */
export function promClient(): typeof PromClient {
  client ??= load('prom-client') as typeof PromClient;
  return client;
}

/** A fresh registry, with the process metrics (`process_*`, `nodejs_*`) when asked. */
export function createRegistry(opts: { readonly processMetrics?: boolean } = {}): PromClient.Registry {
  const { Registry, collectDefaultMetrics } = promClient();
  const registry = new Registry();
  if (opts.processMetrics === true) collectDefaultMetrics({ register: registry });
  return registry;
}
