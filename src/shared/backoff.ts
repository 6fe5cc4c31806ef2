/**
 * Exponential backoff with full jitter, for reconnects and renewals.
 */

/** Backoff settings. */
export interface BackoffOptions {
  readonly minMs: number;
  readonly maxMs: number;
  /** 0 = no jitter, 1 = delay uniformly in [0, base]. Default 0.5. */
  readonly jitter?: number;
  /** Source of randomness in [0, 1) (tests pass a fixed one). */
  readonly random?: () => number;
}

/** Successive delays min, 2·min, 4·min … capped at max, each reduced by up to `jitter`. */
export class Backoff {
  readonly #opts: Required<BackoffOptions>;
  #attempt = 0;

  constructor(opts: BackoffOptions) {
    if (!(opts.minMs > 0) || !(opts.maxMs >= opts.minMs)) throw new RangeError(`invalid backoff ${opts.minMs}..${opts.maxMs} ms`);
    this.#opts = { jitter: 0.5, random: Math.random, ...opts };
  }

  /** Number of delays handed out since the last reset. */
  get attempt(): number {
    return this.#attempt;
  }

  /** The next delay in ms. */
  next(): number {
    const base = Math.min(this.#opts.maxMs, this.#opts.minMs * 2 ** Math.min(this.#attempt, 30));
    this.#attempt++;
    return Math.max(1, Math.round(base * (1 - this.#opts.jitter * this.#opts.random())));
  }

  /** Starts over after a success. */
  reset(): void {
    this.#attempt = 0;
  }
}
