/**
 * The client side of the proxy API, derived from the endpoints index: what Linkerd's policy
 * controller answers to `OutboundPolicies` and its destination controller to
 * `Destination.GetProfile` when no route, ServiceProfile or balancer annotation applies
 * (upstream's `policy-controller/runtime` `lookup_ip`, `k8s/index` outbound index, and the
 * destination `server.go` profile lookups).
 *
 * - By address: a Service's cluster IP on a port it declares is that Service port; on another
 *   port, an undefined port (refused by the proxy); an address in the cluster networks that is
 *   no Service's has no policy (NOT_FOUND: the proxy forwards it itself, with the profile's
 *   endpoint); an address outside them gets the egress fallback.
 * - By authority (`<svc>.<ns>.svc.<domain>[:port]`, port 80 by default): that Service port,
 *   whether or not the Service exists yet.
 * - Opaque ports: the Service's `config.linkerd.io/opaque-ports`, else the cluster's defaults;
 *   for a pod, its own annotation, else the defaults.
 *
 * - A Service port's `appProtocol` (`http`, `kubernetes.io/h2c`, anything else opaque) wins over
 *   the opaque-ports annotation.
 *
 * Not modelled: outbound routes (HTTPRoute/GRPCRoute/TCPRoute/TLSRoute with a Service parent),
 * ServiceProfiles, EgressNetworks, failure accrual and retry/timeout annotations.
 */
import { deepEqual, formatIp, type IpNet, netContains, parseCidr, parseIp } from '../core/index.js';
import { ANNOTATIONS, DEFAULT_OPAQUE_PORTS, parsePortSet, type Service } from '../manifest/index.js';
import type { Endpoint, EndpointsIndex } from './endpoints.js';

/** Linkerd's default `clusterNetworks`. */
export const DEFAULT_CLUSTER_NETWORKS: readonly string[] = ['10.0.0.0/8', '100.64.0.0/10', '172.16.0.0/12', '192.168.0.0/16', 'fd00::/8'];

/** Settings of the outbound lookups. */
export interface OutboundConfig {
  /** Default `cluster.local`. */
  readonly clusterDomain?: string | undefined;
  /** CIDRs of the cluster's pods and Services (default `DEFAULT_CLUSTER_NETWORKS`). */
  readonly clusterNetworks?: readonly string[] | undefined;
  /** Ports opaque unless annotated otherwise (default the injector's `DEFAULT_OPAQUE_PORTS`). */
  readonly defaultOpaquePorts?: readonly number[] | undefined;
}

/** The client policy of a target (the api's `OutboundPolicyModel`, structurally). */
export type OutboundPolicyValue =
  | {
      readonly kind: 'service';
      readonly namespace: string;
      readonly name: string;
      readonly port: number;
      readonly authority: string;
      readonly appProtocol?: 'http1' | 'http2' | 'opaque' | undefined;
    }
  | { readonly kind: 'undefinedPort'; readonly namespace: string; readonly name: string; readonly port: number }
  | { readonly kind: 'egressFallback'; readonly ip: string; readonly port: number };

/** The destination profile of a target (the api's `DestinationProfileModel`, with the index's endpoint). */
export type DestinationProfileValue =
  | {
      readonly kind: 'service';
      readonly namespace: string;
      readonly name: string;
      readonly port: number;
      readonly fullyQualifiedName: string;
      readonly opaqueProtocol: boolean;
    }
  | { readonly kind: 'undefinedPort' }
  | { readonly kind: 'endpoint'; readonly endpoint: Endpoint; readonly opaqueProtocol: boolean };

/** A target that cannot be looked up, or has no policy. */
export interface OutboundRefusal {
  readonly ok: false;
  readonly code: 'INVALID_ARGUMENT' | 'NOT_FOUND';
  readonly message: string;
}

/** An outbound target as the proxy names it. */
export type OutboundTarget = { readonly kind: 'addr'; readonly ip: string; readonly port: number } | { readonly kind: 'authority'; readonly authority: string };

/** A watched value: `subscribe` calls the listener with the current value at once, then on each change. */
export interface WatchedValue<T> {
  readonly ok: true;
  subscribe(listener: (value: T) => void): () => void;
}

/** Outbound policies and profiles over an endpoints index. */
export class OutboundLookups {
  readonly #index: EndpointsIndex;
  readonly #clusterDomain: string;
  readonly #networks: readonly IpNet[];
  readonly #defaultOpaque: ReadonlySet<number>;

  constructor(index: EndpointsIndex, config: OutboundConfig = {}) {
    this.#index = index;
    this.#clusterDomain = (config.clusterDomain ?? 'cluster.local').toLowerCase();
    this.#networks = (config.clusterNetworks ?? DEFAULT_CLUSTER_NETWORKS).map((c) => parseCidr(c)).filter((n) => n !== undefined);
    this.#defaultOpaque = new Set(config.defaultOpaquePorts ?? DEFAULT_OPAQUE_PORTS);
  }

  /** The current client policy of `target`, or why there is none. */
  policy(target: OutboundTarget): OutboundPolicyValue | OutboundRefusal {
    if (target.kind === 'authority') {
      const named = this.#parseAuthority(target.authority);
      return 'ok' in named ? named : this.#servicePolicy(named.namespace, named.name, named.port);
    }
    const svc = this.#index.serviceAt(target.ip);
    if (svc !== undefined) {
      const { namespace, name } = svc.metadata;
      if (!svc.spec.ports.some((p) => p.port === target.port)) return { kind: 'undefinedPort', namespace, name, port: target.port };
      return this.#servicePolicy(namespace, name, target.port);
    }
    const ip = parseIp(target.ip);
    if (ip === undefined) return { ok: false, code: 'INVALID_ARGUMENT', message: `failed to parse target addr: ${target.ip}` };
    if (this.#networks.some((n) => netContains(n, ip))) return { ok: false, code: 'NOT_FOUND', message: 'No such service' };
    return { kind: 'egressFallback', ip: formatIp(ip), port: target.port };
  }

  /** The current profile of a Destination path (`<ip>:<port>` or `<svc>.<ns>.svc.<domain>:<port>`), or why not. */
  profile(path: string): DestinationProfileValue | OutboundRefusal {
    const target = this.#parsePath(path);
    if ('ok' in target) return target;
    if (target.kind === 'name') {
      const svc = this.#index.service(target.namespace, target.name);
      if (svc === undefined) return { ok: false, code: 'NOT_FOUND', message: `service ${target.namespace}/${target.name} not found` };
      return this.#serviceProfile(svc, target.port);
    }
    const svc = this.#index.serviceAt(target.ip);
    if (svc !== undefined) return this.#serviceProfile(svc, target.port);
    const endpoint = this.#index.podEndpoint(target.ip, target.port) ?? { ip: target.ip, port: target.port, weight: 10_000, labels: {} };
    const pod = this.#index.podAt(target.ip);
    const annotated = pod?.metadata.annotations[ANNOTATIONS.opaquePorts];
    const opaque = annotated === undefined ? this.#defaultOpaque : (parsePortSet(annotated) ?? new Set<number>());
    return { kind: 'endpoint', endpoint, opaqueProtocol: opaque.has(target.port) };
  }

  /** `policy(target)` watched: the listener hears each value that differs from the last. */
  watchPolicy(target: OutboundTarget): WatchedValue<OutboundPolicyValue> | OutboundRefusal {
    return this.#watch(() => this.policy(target));
  }

  /** `profile(path)` watched: the listener hears each value that differs from the last. */
  watchProfile(path: string): WatchedValue<DestinationProfileValue> | OutboundRefusal {
    return this.#watch(() => this.profile(path));
  }

  #watch<T>(compute: () => T | OutboundRefusal): WatchedValue<T> | OutboundRefusal {
    const initial = compute();
    if (isRefusal(initial)) return initial;
    return {
      ok: true,
      subscribe: (listener) => {
        let last = compute();
        // The target may have lost its policy since: keep the last value (upstream's watch does too).
        if (isRefusal(last)) last = initial;
        const current = last;
        listener(current);
        let latest: T = current;
        return this.#index.onChange(() => {
          const next = compute();
          if (isRefusal(next) || deepEqual(next, latest)) return;
          latest = next;
          listener(next);
        });
      },
    };
  }

  #servicePolicy(namespace: string, name: string, port: number): OutboundPolicyValue {
    const svc = this.#index.service(namespace, name);
    const authority = `${name}.${namespace}.svc.${this.#clusterDomain}:${port}`;
    const appProtocol = svc === undefined ? undefined : this.#appProtocol(svc, port);
    return { kind: 'service', namespace, name, port, authority, ...(appProtocol !== undefined ? { appProtocol } : {}) };
  }

  /** A port's `appProtocol` as upstream reads it (an unknown one is opaque), else opaque when the port is. */
  #appProtocol(svc: Service, port: number): 'http1' | 'http2' | 'opaque' | undefined {
    const declared = svc.spec.ports.find((p) => p.port === port && p.appProtocol !== undefined)?.appProtocol;
    if (declared !== undefined) {
      const p = declared.toLowerCase();
      return p === 'http' ? 'http1' : p === 'kubernetes.io/h2c' ? 'http2' : 'opaque';
    }
    return this.#serviceOpaquePorts(svc).has(port) ? 'opaque' : undefined;
  }

  #serviceProfile(svc: Service, port: number): DestinationProfileValue {
    if (!svc.spec.ports.some((p) => p.port === port)) return { kind: 'undefinedPort' };
    const { namespace, name } = svc.metadata;
    return {
      kind: 'service',
      namespace,
      name,
      port,
      fullyQualifiedName: `${name}.${namespace}.svc.${this.#clusterDomain}`,
      opaqueProtocol: this.#serviceOpaquePorts(svc).has(port),
    };
  }

  #serviceOpaquePorts(svc: Service): ReadonlySet<number> {
    const annotated = svc.metadata.annotations[ANNOTATIONS.opaquePorts];
    if (annotated === undefined) return this.#defaultOpaque;
    // Named Service ports in the annotation stand for their port numbers.
    const names = new Map(svc.spec.ports.filter((p) => p.name !== undefined).map((p) => [p.name as string, p.port]));
    const numeric = annotated
      .split(',')
      .map((item) => item.trim())
      .map((item) => (names.has(item) ? String(names.get(item)) : item))
      .join(',');
    return parsePortSet(numeric) ?? new Set();
  }

  /** Upstream's `lookup_authority`: `<name>.<namespace>.svc[.<domain>][:port]`, port 80 by default. */
  #parseAuthority(authority: string): { namespace: string; name: string; port: number } | OutboundRefusal {
    const m = /^([^:[\]]*)(?::(\d{1,5}))?$/.exec(authority);
    if (m === null) return { ok: false, code: 'INVALID_ARGUMENT', message: 'invalid authority' };
    let host = (m[1] as string).toLowerCase();
    if (host === '') return { ok: false, code: 'INVALID_ARGUMENT', message: 'authority must have a host' };
    const port = m[2] === undefined ? 80 : Number(m[2]);
    if (port > 65535) return { ok: false, code: 'INVALID_ARGUMENT', message: 'invalid authority' };
    host = host.replace(/\.+$/, '');
    if (host.endsWith(this.#clusterDomain)) host = host.slice(0, -this.#clusterDomain.length);
    const [name, namespace, svc] = host.split('.');
    if (name === undefined || namespace === undefined || svc !== 'svc') {
      return { ok: false, code: 'NOT_FOUND', message: `authority must be of the form <name>.<namespace>.svc.${this.#clusterDomain}` };
    }
    return { namespace, name, port: port === 0 ? 80 : port };
  }

  #parsePath(path: string): { kind: 'ip'; ip: string; port: number } | { kind: 'name'; namespace: string; name: string; port: number } | OutboundRefusal {
    const bad = (why: string): OutboundRefusal => ({ ok: false, code: 'INVALID_ARGUMENT', message: `invalid authority: ${JSON.stringify(path)}: ${why}` });
    let host = path;
    let port = 80;
    const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(path);
    if (m !== null) {
      host = (m[1] ?? m[2]) as string;
      port = Number(m[3]);
      if (!(port >= 1 && port <= 65535)) return bad(`invalid port ${m[3]}`);
    } else if (path.includes(':') && parseIp(path) === undefined) {
      return bad('not host:port');
    }
    const ip = parseIp(host);
    if (ip !== undefined) return { kind: 'ip', ip: formatIp(ip), port };
    const labels = host.toLowerCase().replace(/\.$/, '').split('.');
    const suffix = ['svc', ...this.#clusterDomain.split('.')];
    const tail = labels.slice(-suffix.length);
    if (labels.length !== suffix.length + 2 || tail.join('.') !== suffix.join('.')) {
      return bad(`not <svc>.<ns>.svc.${this.#clusterDomain} or an IP address`);
    }
    return { kind: 'name', name: labels[0] as string, namespace: labels[1] as string, port };
  }
}

function isRefusal(v: unknown): v is OutboundRefusal {
  return typeof v === 'object' && v !== null && 'ok' in v && (v as { ok: unknown }).ok === false;
}
