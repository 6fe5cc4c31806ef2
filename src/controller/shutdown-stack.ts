/** What a starting controller has started, to stop in reverse order on a failed start or on close. */
import type { Logger } from '../shared/index.js';

/** Stop steps, run last first; a step that fails is logged and the others still run. */
export class ShutdownStack {
  readonly #steps: (() => Promise<void> | void)[] = [];
  readonly #log: Logger;

  constructor(log: Logger) {
    this.#log = log;
  }

  /** Adds a step, to run before every step added earlier. */
  push(step: () => Promise<void> | void): void {
    this.#steps.push(step);
  }

  /** Runs every step added so far, last first, each once. */
  async closeAll(): Promise<void> {
    for (const c of this.#steps.splice(0).reverse()) {
      try {
        await c();
      } catch (e) {
        this.#log.warn({ err: e }, 'error while shutting down');
      }
    }
  }
}
