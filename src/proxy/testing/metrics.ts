/** Test helpers of the proxy's metrics: a registry on a clock the test moves. */
import { MetricsRegistry } from '../metrics/cells.js';

/** A registry whose clock only moves with `advance` (and `idleTimeoutMs` when given). */
export function clockedRegistry(idleTimeoutMs?: number): { registry: MetricsRegistry; advance(ms: number): void } {
  let now = 1_000_000;
  const registry = new MetricsRegistry({ now: () => now, ...(idleTimeoutMs !== undefined ? { idleTimeoutMs } : {}) });
  return {
    registry,
    advance: (ms) => {
      now += ms;
    },
  };
}
