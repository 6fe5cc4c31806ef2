/**
 * The metrics registry (prom-client). Each process owns one `Registry`; components receive it
 * and register their own metrics, so tests can create isolated registries.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

export { Counter, Gauge, Histogram, Registry };

/** A fresh registry, with the process metrics (`process_*`, `nodejs_*`) when asked. */
export function createRegistry(opts: { readonly processMetrics?: boolean } = {}): Registry {
  const registry = new Registry();
  if (opts.processMetrics === true) collectDefaultMetrics({ register: registry });
  return registry;
}
