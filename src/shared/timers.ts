/**
 * Timer functions behind an interface, so components with retries and renewals can be tested
 * with controlled time.
 */

/** Timer functions (injectable for tests). */
export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/**
 * Real timers that do not keep the process alive: a process lives for its servers and
 * listeners, and a pending retry or renewal alone must not keep it up.
 */
export const UNREF_TIMERS: Timers = {
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref();
    return t;
  },
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};
