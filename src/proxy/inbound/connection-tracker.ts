/**
 * Re-checks open TCP connections when their port's policy changes (POLICY-SEMANTICS §4.8):
 * one policy subscription per port that has forwarded connections (not one listener per
 * connection), each update re-authorizes every connection of the port with
 * `reauthorizeConnection` against the client facts fixed at accept time, and the revoked ones
 * are handed to `onRevoked` (which tears them down). A port's subscription is dropped as soon as
 * its last connection leaves, so connection churn leaves no listeners behind.
 */
import { type ClientInfo, type CompiledServer, type Deny, reauthorizeConnection } from '../../core/index.js';
import type { PolicyListener } from './policy-watch.js';

/** What the tracker needs of the policy watcher (structurally, `PolicyWatcher`). */
export interface PolicySubscriptions {
  /** Calls `listener` for each later change of `port`'s policy; returns the unsubscribe function. */
  subscribe(port: number, listener: PolicyListener): () => void;
}

/** Called for a connection that a policy update no longer admits; it has left the tracker already. */
export type RevokedConnectionHandler<C> = (conn: C, port: number, deny: Deny, client: ClientInfo) => void;

interface PortConnections<C> {
  /** Connection → the client facts it was authorized with. */
  readonly conns: Map<C, ClientInfo>;
  readonly unsubscribe: () => void;
}

/** The set of authorized connections per port, re-checked on every policy change of that port. */
export class InboundConnectionTracker<C> {
  readonly #policies: PolicySubscriptions;
  readonly #onRevoked: RevokedConnectionHandler<C>;
  readonly #ports = new Map<number, PortConnections<C>>();
  #size = 0;

  /** `onRevoked` is called synchronously from the policy update, once per revoked connection. */
  constructor(policies: PolicySubscriptions, onRevoked: RevokedConnectionHandler<C>) {
    this.#policies = policies;
    this.#onRevoked = onRevoked;
  }

  /** Connections tracked over all ports. */
  get size(): number {
    return this.#size;
  }

  /** Ports currently subscribed (those with at least one connection). */
  get subscriptions(): number {
    return this.#ports.size;
  }

  /** Tracks `conn`, authorized on `port` for `client`; subscribes to the port on its first connection. */
  add(port: number, conn: C, client: ClientInfo): void {
    let p = this.#ports.get(port);
    if (p === undefined) {
      const conns = new Map<C, ClientInfo>();
      const unsubscribe = this.#policies.subscribe(port, (next) => this.#update(port, next));
      p = { conns, unsubscribe };
      this.#ports.set(port, p);
    }
    if (!p.conns.has(conn)) this.#size++;
    p.conns.set(conn, client);
  }

  /** Stops tracking `conn` (idempotent); unsubscribes from the port when it was its last connection. */
  delete(port: number, conn: C): void {
    const p = this.#ports.get(port);
    if (p === undefined || !p.conns.delete(conn)) return;
    this.#size--;
    if (p.conns.size === 0) this.#drop(port, p);
  }

  /** Forgets every connection and drops every subscription (the connections are not touched). */
  clear(): void {
    for (const [port, p] of [...this.#ports]) this.#drop(port, p);
    this.#size = 0;
  }

  #drop(port: number, p: PortConnections<C>): void {
    if (this.#ports.get(port) !== p) return;
    this.#ports.delete(port);
    p.unsubscribe();
  }

  #update(port: number, next: CompiledServer): void {
    const p = this.#ports.get(port);
    if (p === undefined) return;
    // onRevoked may close other connections of the port synchronously: iterate a snapshot.
    for (const [conn, client] of [...p.conns]) {
      if (!p.conns.has(conn)) continue;
      const d = reauthorizeConnection(next, client);
      if (d.allowed) continue;
      this.delete(port, conn);
      this.#onRevoked(conn, port, d, client);
    }
  }
}
