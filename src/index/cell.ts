/**
 * A latest-value cell: holds the current `InboundServer` of one (pod, port) and notifies
 * subscribers only when a recomputation produced a different value (upstream's
 * `watch::Sender::send_if_modified`).
 */
import { deepEqual, type InboundServer } from '../core/index.js';

/** Called with each new value. */
export type CellListener = (value: InboundServer) => void;

/** The published policy of one (pod, port). */
export class PolicyCell {
  #value: InboundServer;
  #version = 1;
  readonly #listeners = new Set<CellListener>();
  readonly #onClose = new Map<CellListener, () => void>();
  #closed = false;

  constructor(value: InboundServer) {
    this.#value = value;
  }

  /** The current value. */
  get value(): InboundServer {
    return this.#value;
  }

  /** Increments on every published change. */
  get version(): number {
    return this.#version;
  }

  /** Number of subscribers (watch streams). */
  get subscriberCount(): number {
    return this.#listeners.size;
  }

  /**
   * Publishes `next` if it differs from the current value; returns whether it did. Reference
   * equality short-circuits: the index reuses unchanged values, so deep comparison is rare.
   */
  publish(next: InboundServer): boolean {
    if (this.#closed || next === this.#value) return false;
    if (deepEqual(next, this.#value)) {
      this.#value = next;
      return false;
    }
    this.#value = next;
    this.#version++;
    for (const l of this.#listeners) l(next);
    return true;
  }

  /** True once the (pod, port) is gone; a closed cell never publishes again. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Subscribes to changes (not called with the current value); `onClose` runs when the cell is
   * closed (its pod was deleted), so a watch stream can end and its proxy ask again. Returns the
   * unsubscribe function. Subscribing to a closed cell calls `onClose` at once.
   */
  subscribe(listener: CellListener, onClose?: () => void): () => void {
    if (this.#closed) {
      onClose?.();
      return () => {};
    }
    this.#listeners.add(listener);
    if (onClose !== undefined) this.#onClose.set(listener, onClose);
    return () => {
      this.#listeners.delete(listener);
      this.#onClose.delete(listener);
    };
  }

  /** Ends the cell: every subscriber's `onClose` runs once and subscriptions are dropped. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const closers = [...this.#onClose.values()];
    this.#listeners.clear();
    this.#onClose.clear();
    for (const c of closers) c();
  }
}
