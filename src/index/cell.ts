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
    if (next === this.#value) return false;
    if (deepEqual(next, this.#value)) {
      this.#value = next;
      return false;
    }
    this.#value = next;
    this.#version++;
    for (const l of this.#listeners) l(next);
    return true;
  }

  /** Subscribes to changes (not called with the current value). Returns the unsubscribe function. */
  subscribe(listener: CellListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
