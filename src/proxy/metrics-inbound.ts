/**
 * The inbound proxy's Prometheus metrics (POLICY-SEMANTICS §4.11), fed by the
 * {@link InboundMetricsHooks} of `InboundProxy` (and of the admin server, which applies the
 * port-4191 policy itself):
 *
 * - `inbound_http_authz_allow_total` — target, server, route, authorization and TLS labels;
 * - `inbound_http_authz_deny_total` — target, server, route and TLS labels;
 * - `inbound_http_route_not_found_total` — target, server and TLS labels;
 * - `inbound_tcp_authz_allow_total` — target, server, authorization and TLS labels;
 * - `inbound_tcp_authz_deny_total`, `inbound_tcp_authz_terminate_total` — target, server and TLS labels;
 * - `inbound_tcp_errors_total{error}`, `inbound_http_errors_total{error}` — policy denials excluded.
 *
 * Labels as upstream: `target_addr`, `target_ip`, `target_port`, `srv_group`, `srv_kind`, `srv_name`,
 * `srv_port`, `route_group/kind/name`, `authz_group/kind/name`, and the TLS labels
 * `tls="true",client_id` | `tls="no_identity",no_tls_reason` | `tls="opaque",sni` | `tls="disabled"`.
 *
 * Hot path: a decision finds its counter cell through identity-keyed maps (port → server `Meta` →
 * route `Meta` → authz `Meta` → TLS state); the `Meta` objects are those of the compiled policy, so
 * after the first request of a kind nothing is allocated or hashed — the hook is a few map reads
 * and `count++`. Cells are shared by label values (a policy update that re-creates equal `Meta`
 * objects finds the same cell), and prom-client reads them at scrape time through `collect()`.
 */
import type { ClientInfo, Deny, Meta, Permit, TlsState } from '../core/index.js';
import { Counter, type Registry } from '../shared/index.js';
import type { InboundErrorReason, InboundHttpDecisionEvent, InboundHttpErrorReason, InboundMetricsHooks, InboundTcpDecisionEvent } from './inbound-stats.js';

/** Labels every authorization metric carries (§4.11); the TLS ones vary with the client. */
const COMMON_LABELS = [
  'target_addr',
  'target_ip',
  'target_port',
  'srv_group',
  'srv_kind',
  'srv_name',
  'srv_port',
  'tls',
  'client_id',
  'no_tls_reason',
  'sni',
] as const;
const ROUTE_LABELS = ['route_group', 'route_kind', 'route_name'] as const;
const AUTHZ_LABELS = ['authz_group', 'authz_kind', 'authz_name'] as const;

type Labels = Record<string, string>;

/** One labelled series: its label values (built once) and its count. */
interface Cell {
  readonly labels: Labels;
  count: number;
}

/** Stands for "no route" / "no authorization" in the identity-keyed index. */
const NONE: Meta = Object.freeze({ group: '', kind: '', name: '' });

/** Cells of one (port, server, route, authz) by TLS state. */
class TlsCells {
  /** `established` with a client id, by id. */
  readonly established = new Map<string, Cell>();
  /** `established` without a client certificate. */
  establishedNoId: Cell | undefined;
  readonly none = new Map<string, Cell>();
  readonly passthrough = new Map<string, Cell>();

  get(tls: TlsState): Cell | undefined {
    switch (tls.kind) {
      case 'established':
        return tls.clientId === undefined ? this.establishedNoId : this.established.get(tls.clientId);
      case 'none':
        return this.none.get(tls.reason);
      case 'passthrough':
        return this.passthrough.get(tls.sni);
    }
  }

  set(tls: TlsState, cell: Cell): void {
    switch (tls.kind) {
      case 'established':
        if (tls.clientId === undefined) this.establishedNoId = cell;
        else this.established.set(tls.clientId, cell);
        return;
      case 'none':
        this.none.set(tls.reason, cell);
        return;
      case 'passthrough':
        this.passthrough.set(tls.sni, cell);
        return;
    }
  }
}

/** The §4.11 TLS labels of a client's TLS state. */
export function tlsLabels(tls: TlsState): Labels {
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

/**
 * One counter whose series are keyed by a decision: (port, server, route?, authz?, client TLS).
 * `cell()` is the hot path; the counter's `collect()` copies the cells at scrape time.
 */
class DecisionCounter {
  readonly #targetIp: string;
  readonly #withRoute: boolean;
  readonly #withAuthz: boolean;
  /** port → server → route → authz → TLS cells; keyed by object identity. */
  readonly #index = new Map<number, WeakMap<Meta, WeakMap<Meta, WeakMap<Meta, TlsCells>>>>();
  /** Every cell by its label values (stable across policy updates). */
  readonly #cells = new Map<string, Cell>();

  constructor(registry: Registry, name: string, help: string, targetIp: string, withRoute: boolean, withAuthz: boolean) {
    this.#targetIp = targetIp;
    this.#withRoute = withRoute;
    this.#withAuthz = withAuthz;
    const cells = this.#cells;
    const labelNames = [...COMMON_LABELS, ...(withRoute ? ROUTE_LABELS : []), ...(withAuthz ? AUTHZ_LABELS : [])];
    new Counter({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        this.reset();
        for (const c of cells.values()) this.inc(c.labels, c.count);
      },
    });
  }

  /** Counts one decision. */
  inc(port: number, server: Meta, route: Meta | undefined, authz: Meta | undefined, client: ClientInfo): void {
    this.#cell(port, server, this.#withRoute ? (route ?? NONE) : NONE, this.#withAuthz ? (authz ?? NONE) : NONE, client.tls).count++;
  }

  #cell(port: number, server: Meta, route: Meta, authz: Meta, tls: TlsState): Cell {
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
      byTls = new TlsCells();
      byAuthz.set(authz, byTls);
    }
    let cell = byTls.get(tls);
    if (cell === undefined) {
      cell = this.#shared(this.#labels(port, server, route, authz, tls));
      byTls.set(tls, cell);
    }
    return cell;
  }

  /** The cell of these label values, created on first use. */
  #shared(labels: Labels): Cell {
    const key = JSON.stringify(labels);
    let cell = this.#cells.get(key);
    if (cell === undefined) {
      cell = { labels, count: 0 };
      this.#cells.set(key, cell);
    }
    return cell;
  }

  #labels(port: number, server: Meta, route: Meta, authz: Meta, tls: TlsState): Labels {
    const p = String(port);
    const labels: Labels = {
      target_addr: hostPort(this.#targetIp, port),
      target_ip: this.#targetIp,
      target_port: p,
      srv_group: server.group,
      srv_kind: server.kind,
      srv_name: server.name,
      srv_port: p,
      ...tlsLabels(tls),
    };
    if (this.#withRoute && route !== NONE) {
      labels.route_group = route.group;
      labels.route_kind = route.kind;
      labels.route_name = route.name;
    }
    if (this.#withAuthz && authz !== NONE) {
      labels.authz_group = authz.group;
      labels.authz_kind = authz.kind;
      labels.authz_name = authz.name;
    }
    return labels;
  }
}

/** A counter labelled only by `error`. */
class ErrorCounter {
  readonly #counts = new Map<string, number>();

  constructor(registry: Registry, name: string, help: string) {
    const counts = this.#counts;
    new Counter({
      name,
      help,
      labelNames: ['error'],
      registers: [registry],
      collect() {
        this.reset();
        for (const [error, n] of counts) this.inc({ error }, n);
      },
    });
  }

  inc(error: string): void {
    this.#counts.set(error, (this.#counts.get(error) ?? 0) + 1);
  }
}

/** Options of {@link InboundMetrics}. */
export interface InboundMetricsOptions {
  /** Where the counters are registered (one registry per proxy process). */
  readonly registry: Registry;
  /** The pod's address: `target_ip`, and the host of `target_addr` (`<ip>:<port>`). */
  readonly targetIp: string;
}

/**
 * The labelled inbound counters of one proxy, registered in `registry`. Pass {@link hooks} to
 * `InboundProxy` (and to the admin server) as `metrics`.
 */
export class InboundMetrics {
  /** The hooks that feed the counters; cheap, never throw. */
  readonly hooks: InboundMetricsHooks;

  /** Registers the counters; throws if `registry` already has metrics of these names. */
  constructor(opts: InboundMetricsOptions) {
    const { registry, targetIp } = opts;
    const httpAllow = new DecisionCounter(registry, 'inbound_http_authz_allow_total', 'HTTP requests authorized by policy', targetIp, true, true);
    const httpDeny = new DecisionCounter(registry, 'inbound_http_authz_deny_total', 'HTTP requests denied by policy', targetIp, true, false);
    const httpNotFound = new DecisionCounter(registry, 'inbound_http_route_not_found_total', 'HTTP requests that matched no route', targetIp, false, false);
    const tcpAllow = new DecisionCounter(registry, 'inbound_tcp_authz_allow_total', 'TCP connections authorized by policy', targetIp, false, true);
    const tcpDeny = new DecisionCounter(registry, 'inbound_tcp_authz_deny_total', 'TCP connections denied by policy', targetIp, false, false);
    const tcpTerminate = new DecisionCounter(
      registry,
      'inbound_tcp_authz_terminate_total',
      'TCP connections terminated because a policy change revoked them',
      targetIp,
      false,
      false,
    );
    const tcpErrors = new ErrorCounter(registry, 'inbound_tcp_errors_total', 'inbound TCP connections that failed without a policy decision');
    const httpErrors = new ErrorCounter(registry, 'inbound_http_errors_total', 'inbound HTTP requests answered or dropped without a policy decision');
    this.hooks = {
      onTcpAllow: (e: InboundTcpDecisionEvent<Permit>) => tcpAllow.inc(e.port, e.decision.server, undefined, e.decision.authz, e.client),
      onTcpDeny: (e: InboundTcpDecisionEvent<Deny>) => tcpDeny.inc(e.port, e.decision.server, undefined, undefined, e.client),
      onTcpTerminate: (e: InboundTcpDecisionEvent<Deny>) => tcpTerminate.inc(e.port, e.decision.server, undefined, undefined, e.client),
      onTcpError: (reason: InboundErrorReason) => tcpErrors.inc(reason),
      onHttpAllow: (e: InboundHttpDecisionEvent<Permit>) => httpAllow.inc(e.port, e.decision.server, e.decision.route, e.decision.authz, e.client),
      onHttpDeny: (e: InboundHttpDecisionEvent<Deny>) => httpDeny.inc(e.port, e.decision.server, e.decision.route, undefined, e.client),
      onHttpRouteNotFound: (e: InboundHttpDecisionEvent<Deny>) => httpNotFound.inc(e.port, e.decision.server, undefined, undefined, e.client),
      onHttpError: (reason: InboundHttpErrorReason) => httpErrors.inc(reason),
    };
  }
}
