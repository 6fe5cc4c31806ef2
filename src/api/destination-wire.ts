/**
 * Endpoint discovery events <-> `io.linkerd.proxy.destination.Update` (POLICY-SEMANTICS §5.5).
 * The plain model is what the controller publishes and what a proxy's balancer consumes; only
 * the identity-relevant parts of `WeightedAddr` are modelled (HTTP/2 parameters and resource
 * references are neither sent nor read).
 */

import type { Update, WeightedAddr } from './gen/destination.js';
import type { TcpAddress } from './gen/net.js';
import { ipFromWire, ipToWire } from './ip-wire.js';
import { type WireResult, wireError } from './wire-result.js';

/** One endpoint of a destination. */
export interface DestinationEndpoint {
  /** Canonical text address. */
  readonly ip: string;
  readonly port: number;
  /** Relative load-balancing weight (upstream sends 10000 per endpoint). */
  readonly weight: number;
  /** Metric labels of this endpoint (pod, pod_template_hash, ...). */
  readonly labels: Readonly<Record<string, string>>;
  /** The endpoint's mesh identity: set only when the client must use mesh TLS to it. */
  readonly identity?: string;
  /** The TLS server name (SNI) to send; upstream sets it equal to `identity`. */
  readonly serverName?: string;
  /** The target proxy's inbound port for transport-header (opaque) connections. */
  readonly opaqueTransportPort?: number;
  readonly protocolHint?: 'h2' | 'opaque';
  /** `:authority` to use instead of the destination's (multicluster gateways). */
  readonly authorityOverride?: string;
}

/** A TCP address. */
export interface DestinationAddr {
  readonly ip: string;
  readonly port: number;
}

/**
 * One change of a destination's endpoint set: endpoints added (or updated, keyed by address)
 * with the set-wide metric labels, addresses removed, or no endpoints (`exists` = the service
 * exists but has none; `false` = unknown service, the client may fall back to DNS).
 */
export type DestinationEvent =
  | { readonly kind: 'add'; readonly endpoints: readonly DestinationEndpoint[]; readonly setLabels: Readonly<Record<string, string>> }
  | { readonly kind: 'remove'; readonly addrs: readonly DestinationAddr[] }
  | { readonly kind: 'noEndpoints'; readonly exists: boolean };

function tcpToWire(a: DestinationAddr): TcpAddress {
  return { ip: ipToWire(a.ip), port: a.port };
}

/** The `WeightedAddr` of an endpoint. Throws `MeshError` `ERR_WIRE_INVALID_IP` for an address that is not an IP. */
export function destinationEndpointToWire(e: DestinationEndpoint): WeightedAddr {
  const hasHint = e.protocolHint !== undefined || e.opaqueTransportPort !== undefined;
  return {
    addr: tcpToWire(e),
    weight: e.weight,
    metricLabels: { ...e.labels },
    tlsIdentity:
      e.identity === undefined && e.serverName === undefined
        ? undefined
        : {
            strategy: e.identity === undefined ? undefined : { $case: 'dnsLikeIdentity', value: { name: e.identity } },
            serverName: e.serverName === undefined ? undefined : { name: e.serverName },
          },
    protocolHint: hasHint
      ? {
          protocol: e.protocolHint === undefined ? undefined : e.protocolHint === 'h2' ? { $case: 'h2', value: {} } : { $case: 'opaque', value: {} },
          opaqueTransport: e.opaqueTransportPort === undefined ? undefined : { inboundPort: e.opaqueTransportPort },
        }
      : undefined,
    authorityOverride: e.authorityOverride === undefined ? undefined : { authorityOverride: e.authorityOverride },
    http2: undefined,
    resourceRef: undefined,
  };
}

/** The `Update` message of an event. Throws `MeshError` `ERR_WIRE_INVALID_IP` for an address that is not an IP. */
export function destinationEventToWire(e: DestinationEvent): Update {
  switch (e.kind) {
    case 'add':
      return { update: { $case: 'add', value: { addrs: e.endpoints.map(destinationEndpointToWire), metricLabels: { ...e.setLabels } } } };
    case 'remove':
      return { update: { $case: 'remove', value: { addrs: e.addrs.map(tcpToWire) } } };
    case 'noEndpoints':
      return { update: { $case: 'noEndpoints', value: { exists: e.exists } } };
  }
}

function tcpFromWire(a: TcpAddress | undefined, path: string): WireResult<DestinationAddr> {
  if (a === undefined) return wireError(`${path}: not set`);
  const ip = ipFromWire(a.ip);
  if (!ip.ok) return wireError(`${path}.ip: ${ip.message}`);
  if (a.port < 1 || a.port > 65535) return wireError(`${path}.port: ${a.port} is not a port`);
  return { ok: true, value: { ip: ip.value, port: a.port } };
}

function endpointFromWire(w: WeightedAddr, path: string): WireResult<DestinationEndpoint> {
  const addr = tcpFromWire(w.addr, `${path}.addr`);
  if (!addr.ok) return addr;
  let identity: string | undefined;
  let serverName: string | undefined;
  if (w.tlsIdentity !== undefined) {
    const strategy = w.tlsIdentity.strategy;
    switch (strategy?.$case) {
      case 'dnsLikeIdentity':
        if (strategy.value.name === '') return wireError(`${path}.tlsIdentity.dnsLikeIdentity: empty name`);
        identity = strategy.value.name;
        break;
      case 'uriLikeIdentity':
        return wireError(`${path}.tlsIdentity.uriLikeIdentity: URI identities are not supported`);
      case undefined:
        return wireError(`${path}.tlsIdentity: strategy not set`);
    }
    const sni = w.tlsIdentity.serverName?.name;
    if (sni !== undefined && sni !== '') serverName = sni;
  }
  const protocol = w.protocolHint?.protocol?.$case;
  const opaquePort = w.protocolHint?.opaqueTransport?.inboundPort;
  if (opaquePort !== undefined && (opaquePort < 1 || opaquePort > 65535)) return wireError(`${path}.protocolHint.opaqueTransport: ${opaquePort} is not a port`);
  const authority = w.authorityOverride?.authorityOverride;
  return {
    ok: true,
    value: {
      ...addr.value,
      weight: w.weight,
      labels: w.metricLabels,
      ...(identity === undefined ? {} : { identity }),
      ...(serverName === undefined ? {} : { serverName }),
      ...(opaquePort === undefined ? {} : { opaqueTransportPort: opaquePort }),
      ...(protocol === undefined ? {} : { protocolHint: protocol }),
      ...(authority === undefined || authority === '' ? {} : { authorityOverride: authority }),
    },
  };
}

/** Decodes and validates an `Update` for the proxy; an unset oneof or a bad address is an error. */
export function destinationEventFromWire(m: Update): WireResult<DestinationEvent> {
  const u = m.update;
  switch (u?.$case) {
    case 'add': {
      const endpoints: DestinationEndpoint[] = [];
      for (let i = 0; i < u.value.addrs.length; i++) {
        const r = endpointFromWire(u.value.addrs[i] as WeightedAddr, `add.addrs[${i}]`);
        if (!r.ok) return r;
        endpoints.push(r.value);
      }
      return { ok: true, value: { kind: 'add', endpoints, setLabels: u.value.metricLabels } };
    }
    case 'remove': {
      const addrs: DestinationAddr[] = [];
      for (let i = 0; i < u.value.addrs.length; i++) {
        const r = tcpFromWire(u.value.addrs[i], `remove.addrs[${i}]`);
        if (!r.ok) return r;
        addrs.push(r.value);
      }
      return { ok: true, value: { kind: 'remove', addrs } };
    }
    case 'noEndpoints':
      return { ok: true, value: { kind: 'noEndpoints', exists: u.value.exists } };
    case undefined:
      return wireError('update: not set');
  }
}
