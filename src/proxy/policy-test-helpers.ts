/**
 * Scripted policy sources for this module's tests (not part of the public surface): index-like
 * cells behind an `InboundDiscovery`, to serve with `inboundPolicyService`.
 */
import type { WatchableCell } from '../api/index.js';
import { deepEqual, type InboundServer } from '../core/index.js';

/** A latest-value cell like the index's PolicyCell: publishes only real changes. */
export class FakeCell implements WatchableCell {
  value: InboundServer;
  readonly listeners = new Set<(v: InboundServer) => void>();
  constructor(value: InboundServer) {
    this.value = value;
  }
  subscribe(listener: (v: InboundServer) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  publish(next: InboundServer): void {
    if (deepEqual(next, this.value)) return;
    this.value = next;
    for (const l of this.listeners) l(next);
  }
}

/** An `InboundDiscovery` over {@link FakeCell}s keyed by pod port. */
export class FakeDiscovery {
  readonly cells = new Map<string, FakeCell>();
  /** A new cell for `ns/pod:port` holding `value`. */
  add(ns: string, pod: string, port: number, value: InboundServer): FakeCell {
    const cell = new FakeCell(value);
    this.cells.set(`${ns}/${pod}:${port}`, cell);
    return cell;
  }
  lookup(ns: string, pod: string, port: number): FakeCell | undefined {
    return this.cells.get(`${ns}/${pod}:${port}`);
  }
  /** Listeners over every cell (open watches). */
  get subscribers(): number {
    let n = 0;
    for (const c of this.cells.values()) n += c.listeners.size;
    return n;
  }
}
