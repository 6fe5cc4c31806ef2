/**
 * Label conventions shared by the proxy's metrics (POLICY-SEMANTICS §4.11) and the identity-keyed
 * indexes that find a series without building its labels.
 *
 * - TLS: `tls="true",client_id` | `tls="no_identity",no_tls_reason` | `tls="opaque",sni` | `tls="disabled"`.
 * - Target: `target_addr="<ip>:<port>"` (IPv6 in brackets), `target_ip`, `target_port`.
 * - Server: `srv_group`, `srv_kind`, `srv_name`, `srv_port`.
 *
 * The indexes are keyed by object identity — the `Meta` objects of a compiled policy, the
 * `TlsState`'s values — so that after the first event of a kind the hot path does a few map reads
 * and no allocation. Equal label values reached through new objects (a policy update re-creates
 * its `Meta`s) resolve to the same series through the families' own label-keyed maps. An index
 * given the registry's eviction generation starts over whenever a sweep evicted series, so that it
 * neither hands out evicted cells nor keeps the keys (client identities…) of forgotten series.
 */
import type { Meta, TlsState } from '../../core/index.js';
import type { Labels } from './cells.js';

/** The §4.11 TLS labels of a client's TLS state. */
export function tlsLabels(tls: TlsState): Record<string, string> {
  switch (tls.kind) {
    case 'established':
      return { tls: 'true', client_id: tls.clientId ?? '' };
    case 'none':
      return tls.reason === 'disabled' ? { tls: 'disabled' } : { tls: 'no_identity', no_tls_reason: tls.reason };
    case 'passthrough':
      return { tls: 'opaque', sni: tls.sni };
  }
}

/** `ip:port`, with brackets for IPv6. */
function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** `target_addr`, `target_ip`, `target_port` of a pod port. */
export function targetLabels(ip: string, port: number): Record<string, string> {
  return { target_addr: hostPort(ip, port), target_ip: ip, target_port: String(port) };
}

/** `srv_group`, `srv_kind`, `srv_name`, `srv_port`. */
export function serverLabels(server: Meta, port: number): Record<string, string> {
  return { srv_group: server.group, srv_kind: server.kind, srv_name: server.name, srv_port: String(port) };
}

/** `<prefix>_group`, `<prefix>_kind`, `<prefix>_name` (route, authz). */
export function metaLabels(prefix: 'route' | 'authz', m: Meta): Record<string, string> {
  return { [`${prefix}_group`]: m.group, [`${prefix}_kind`]: m.kind, [`${prefix}_name`]: m.name };
}

/** Values by a client's TLS state (by id, reason or SNI), without building a key. */
export class ByTls<T> {
  /** `established` with a client id, by id. */
  readonly #established = new Map<string, T>();
  /** `established` without a client certificate. */
  #establishedNoId: T | undefined;
  readonly #none = new Map<string, T>();
  readonly #passthrough = new Map<string, T>();

  get(tls: TlsState): T | undefined {
    switch (tls.kind) {
      case 'established':
        return tls.clientId === undefined ? this.#establishedNoId : this.#established.get(tls.clientId);
      case 'none':
        return this.#none.get(tls.reason);
      case 'passthrough':
        return this.#passthrough.get(tls.sni);
    }
  }

  set(tls: TlsState, value: T): void {
    switch (tls.kind) {
      case 'established':
        if (tls.clientId === undefined) this.#establishedNoId = value;
        else this.#established.set(tls.clientId, value);
        return;
      case 'none':
        this.#none.set(tls.reason, value);
        return;
      case 'passthrough':
        this.#passthrough.set(tls.sni, value);
        return;
    }
  }
}

/** Stands for "no route" / "no authorization" in a {@link DecisionIndex}. */
export const NO_META: Meta = Object.freeze({ group: '', kind: '', name: '' });

/** Creates the value of a (port, server, route, authz, TLS) key on its first use. */
export type DecisionValueFactory<T> = (port: number, server: Meta, route: Meta, authz: Meta, tls: TlsState) => T;

/** Where an index reads the eviction generation (a `MetricsRegistry`). */
export interface EvictionGeneration {
  readonly generation: number;
}

/**
 * Values keyed by a decision's stable parts — port, then the identities of the server, route and
 * authorization `Meta`s (or {@link NO_META}), then the client's TLS state. A lookup of a known key
 * is four map reads and a TLS switch. With `evictions`, the index is emptied whenever its
 * generation changes (the values are then created anew, finding the series still alive).
 */
export class DecisionIndex<T> {
  readonly #index = new Map<number, WeakMap<Meta, WeakMap<Meta, WeakMap<Meta, ByTls<T>>>>>();
  readonly #create: DecisionValueFactory<T>;
  readonly #evictions: EvictionGeneration | undefined;
  #generation: number;

  constructor(create: DecisionValueFactory<T>, evictions?: EvictionGeneration) {
    this.#create = create;
    this.#evictions = evictions;
    this.#generation = evictions?.generation ?? 0;
  }

  /** The value of this key, created on first use. */
  get(port: number, server: Meta, route: Meta, authz: Meta, tls: TlsState): T {
    if (this.#evictions !== undefined && this.#evictions.generation !== this.#generation) {
      this.#index.clear();
      this.#generation = this.#evictions.generation;
    }
    let byServer = this.#index.get(port);
    if (byServer === undefined) {
      byServer = new WeakMap();
      this.#index.set(port, byServer);
    }
    let byRoute = byServer.get(server);
    if (byRoute === undefined) {
      byRoute = new WeakMap();
      byServer.set(server, byRoute);
    }
    let byAuthz = byRoute.get(route);
    if (byAuthz === undefined) {
      byAuthz = new WeakMap();
      byRoute.set(route, byAuthz);
    }
    let byTls = byAuthz.get(authz);
    if (byTls === undefined) {
      byTls = new ByTls();
      byAuthz.set(authz, byTls);
    }
    let value = byTls.get(tls);
    if (value === undefined) {
      value = this.#create(port, server, route, authz, tls);
      byTls.set(tls, value);
    }
    return value;
  }
}

/** Freezes a label object built in exposition order. */
export function labelsOf(...parts: readonly Readonly<Record<string, string>>[]): Labels {
  return Object.freeze(Object.assign({}, ...parts) as Record<string, string>);
}
