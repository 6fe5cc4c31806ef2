/**
 * Scripted policy sources for this module's tests (not part of the public surface): index-like
 * cells behind an `InboundDiscovery`, to serve with `inboundPolicyService`, and compiled policies
 * standing in for a `PolicyWatcher`. The cells are the api tests' own (`FakeCell`).
 */
import { FakeCell } from '../../api/test-helpers.js';
import { type CompiledServer, compileServer, type InboundServer } from '../../core/index.js';
import type { PolicyListener } from '../inbound/policy-watch.js';

export { FakeCell };

/**
 * Compiled policies per port with the watcher's interface. `set` replaces a port's policy; with
 * `notify`, it also tells the port's subscribers (as a watcher publishing an update does).
 */
export class FakePolicies {
  readonly #servers = new Map<number, CompiledServer>();
  readonly #listeners = new Map<number, Set<PolicyListener>>();
  readonly #notify: boolean;

  constructor(opts: { readonly notify?: boolean } = {}) {
    this.#notify = opts.notify ?? false;
  }

  set(port: number, server: InboundServer): void {
    const next = compileServer(server);
    const previous = this.#servers.get(port);
    this.#servers.set(port, next);
    if (this.#notify) for (const l of [...(this.#listeners.get(port) ?? [])]) l(next, previous);
  }

  clear(): void {
    this.#servers.clear();
  }

  /** The next {@link current} throws this (a defect in the proxy, as far as its caller can tell). */
  throwOnce: Error | undefined;

  current(port: number): CompiledServer | undefined {
    const err = this.throwOnce;
    if (err !== undefined) {
      this.throwOnce = undefined;
      throw err;
    }
    return this.#servers.get(port);
  }

  subscribe(port: number, listener: PolicyListener): () => void {
    let set = this.#listeners.get(port);
    if (set === undefined) {
      set = new Set();
      this.#listeners.set(port, set);
    }
    set.add(listener);
    return () => set.delete(listener);
  }

  /** Listeners subscribed over all ports. */
  get listenerCount(): number {
    let n = 0;
    for (const s of this.#listeners.values()) n += s.size;
    return n;
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
