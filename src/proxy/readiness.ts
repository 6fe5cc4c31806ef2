/**
 * The readiness of a started proxy (`/ready`, `RunningProxy.ready()`): checked again on every
 * certificate and policy change, logged once when first reached, and ended by closing the proxy.
 */
import { MeshError } from '../shared/index.js';

/** Readiness of one proxy: the waiters of `wait()` and whether the proxy is closed. */
export class ProxyReadiness {
  readonly #isReady: () => boolean;
  readonly #onFirstReady: () => void;
  readonly #waiters = new Set<{ resolve: () => void; reject: (e: unknown) => void }>();
  #closed = false;
  #wasReady = false;

  /** `isReady` says whether the proxy can serve now; `onFirstReady` runs the first time it can. */
  constructor(isReady: () => boolean, onFirstReady: () => void) {
    this.#isReady = isReady;
    this.#onFirstReady = onFirstReady;
  }

  /** True when the proxy can serve now (`/ready`). */
  isReady(): boolean {
    return this.#isReady();
  }

  /** Resolves the waiters once the proxy is ready (nothing after close). */
  check(): void {
    if (this.#closed || !this.#isReady()) return;
    if (!this.#wasReady) {
      this.#wasReady = true;
      this.#onFirstReady();
    }
    for (const w of this.#waiters) w.resolve();
    this.#waiters.clear();
  }

  /** Resolves once ready; rejects with `ERR_PROXY_CLOSED` if closed first. */
  wait(): Promise<void> {
    if (this.#closed) return Promise.reject(new MeshError('ERR_PROXY_CLOSED', 'the proxy was closed'));
    if (this.#isReady()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#waiters.add({ resolve, reject });
    });
  }

  /** Rejects the waiters with `ERR_PROXY_CLOSED`. False when closed already (the caller has nothing left to stop). */
  close(): boolean {
    if (this.#closed) return false;
    this.#closed = true;
    const err = new MeshError('ERR_PROXY_CLOSED', 'the proxy was closed');
    for (const w of this.#waiters) w.reject(err);
    this.#waiters.clear();
    return true;
  }
}
