/**
 * When a source applies what is pending: after `debounceMs` without a new change, but never
 * later than `maxDelayMs` after the first pending one, so a steady stream of changes still lands.
 */
export class BatchTimer {
  readonly #debounceMs: number;
  readonly #maxDelayMs: number;
  readonly #fire: () => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(debounceMs: number, maxDelayMs: number, fire: () => void) {
    this.#debounceMs = debounceMs;
    this.#maxDelayMs = maxDelayMs;
    this.#fire = fire;
  }

  /** (Re)arms the timer for changes pending since `firstPendingAtMs` (epoch ms; undefined: now). */
  arm(firstPendingAtMs: number | undefined): void {
    const now = Date.now();
    const due = Math.min(now + this.#debounceMs, (firstPendingAtMs ?? now) + this.#maxDelayMs);
    this.cancel();
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.#fire();
      },
      Math.max(0, due - now),
    );
  }

  cancel(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
