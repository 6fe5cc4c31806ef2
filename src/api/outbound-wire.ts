/**
 * Client policies and destination profiles as Linkerd's control plane synthesizes them when no
 * route, ServiceProfile or circuit-breaking annotation applies (upstream's policy-controller
 * `grpc/src/outbound.rs` and `outbound/http.rs`; the destination controller's profile
 * translators). Every value here is what those produce for the same input, field for field, so
 * a linkerd2-proxy sees the same policy from ward as from Linkerd.
 */

import { type DestinationEndpoint, destinationEndpointToWire } from './destination-wire.js';
import type { DestinationProfile } from './gen/destination.js';
import type { Duration } from './gen/google/protobuf/duration.js';
import type { Metadata } from './gen/meta.js';
import type { Backend, HttpRoute, OpaqueRoute, OutboundPolicy, Queue } from './gen/outbound.js';
import { ipToWire } from './ip-wire.js';

/** A Service port's declared application protocol (`appProtocol` or the opaque-ports annotation). */
export type OutboundAppProtocol = 'http1' | 'http2' | 'opaque';

/**
 * What an outbound policy is derived from:
 * - `service`: a port the Service declares (`authority` = `<svc>.<ns>.svc.<domain>:<port>`);
 *   without `appProtocol` the proxy detects HTTP, else it uses the declared protocol;
 * - `undefinedPort`: a Service address on a port the Service does not declare (refused);
 * - `egressFallback`: an address outside the cluster networks (forwarded as addressed).
 */
export type OutboundPolicyModel =
  | {
      readonly kind: 'service';
      readonly namespace: string;
      readonly name: string;
      readonly port: number;
      readonly authority: string;
      readonly appProtocol?: OutboundAppProtocol | undefined;
    }
  | { readonly kind: 'undefinedPort'; readonly namespace: string; readonly name: string; readonly port: number }
  | { readonly kind: 'egressFallback'; readonly ip: string; readonly port: number };

/**
 * What a destination profile is derived from:
 * - `service`: a Service port without a ServiceProfile;
 * - `undefinedPort`: a port the Service does not declare (an empty profile: the proxy then
 *   relies on the client policy, which refuses it);
 * - `endpoint`: an address that is not a Service's (a pod, or unknown), as one endpoint.
 */
export type DestinationProfileModel =
  | {
      readonly kind: 'service';
      readonly namespace: string;
      readonly name: string;
      readonly port: number;
      readonly fullyQualifiedName: string;
      readonly opaqueProtocol: boolean;
    }
  | { readonly kind: 'undefinedPort' }
  | { readonly kind: 'endpoint'; readonly endpoint: DestinationEndpoint; readonly opaqueProtocol: boolean };

/** Protocol detection timeout of synthesized policies. */
export const OUTBOUND_DETECT_TIMEOUT_MS = 10_000;

function ms(n: number): Duration {
  const seconds = Math.floor(n / 1000);
  return { seconds: BigInt(seconds), nanos: (n - seconds * 1000) * 1_000_000 };
}

function defaultMeta(name: string): Metadata {
  return { kind: { $case: 'default', value: name } };
}

function serviceMeta(namespace: string, name: string, port: number): Metadata {
  return { kind: { $case: 'resource', value: { group: 'core', kind: 'Service', name, namespace, section: '', port } } };
}

function defaultQueue(): Queue {
  return { capacity: 100, failfastTimeout: ms(3000) };
}

function serviceBackend(m: Extract<OutboundPolicyModel, { kind: 'service' }>): Backend {
  return {
    metadata: serviceMeta(m.namespace, m.name, m.port),
    kind: {
      $case: 'balancer',
      value: {
        discovery: { kind: { $case: 'dst', value: { path: m.authority } } },
        load: { $case: 'peakEwma', value: { defaultRtt: ms(30), decay: ms(10_000) } },
      },
    },
    queue: defaultQueue(),
  };
}

function opaqueRoute(meta: Metadata, backend: Backend): OpaqueRoute {
  return {
    metadata: meta,
    rules: [{ backends: { kind: { $case: 'firstAvailable', value: { backends: [{ backend, filters: [] }] } } }, filters: [] }],
  };
}

/** The route of a Service port without HTTPRoutes: every path, no timeouts, no retries. */
function defaultHttpRoute(backend: Backend): HttpRoute {
  return {
    metadata: defaultMeta('http'),
    hosts: [],
    rules: [
      {
        matches: [{ path: { kind: { $case: 'prefix', value: '/' } }, headers: [], queryParams: [], method: undefined }],
        filters: [],
        backends: { kind: { $case: 'firstAvailable', value: { backends: [{ backend, filters: [], requestTimeout: undefined }] } } },
        requestTimeout: undefined,
        // Upstream always sends the (here empty) timeouts of the Service.
        timeouts: { response: undefined, request: undefined, idle: undefined },
        retry: undefined,
        allowL5dRequestHeaders: false,
      },
    ],
  };
}

function serviceToWire(m: Extract<OutboundPolicyModel, { kind: 'service' }>): OutboundPolicy {
  const backend = serviceBackend(m);
  const http = () => ({ routes: [defaultHttpRoute(backend)], failureAccrual: undefined });
  const opaque = () => ({ routes: [opaqueRoute(defaultMeta('opaq'), backend)] });
  let protocol: OutboundPolicy['protocol'];
  switch (m.appProtocol) {
    case undefined:
      protocol = { kind: { $case: 'detect', value: { timeout: ms(OUTBOUND_DETECT_TIMEOUT_MS), opaque: opaque(), http1: http(), http2: http() } } };
      break;
    case 'http1':
      protocol = { kind: { $case: 'http1', value: http() } };
      break;
    case 'http2':
      protocol = { kind: { $case: 'http2', value: http() } };
      break;
    case 'opaque':
      protocol = { kind: { $case: 'opaque', value: opaque() } };
      break;
  }
  return { protocol, metadata: serviceMeta(m.namespace, m.name, m.port) };
}

function undefinedPortToWire(m: Extract<OutboundPolicyModel, { kind: 'undefinedPort' }>): OutboundPolicy {
  const route: OpaqueRoute = {
    metadata: defaultMeta('undefined-port'),
    rules: [{ backends: { kind: { $case: 'empty', value: {} } }, filters: [{ kind: { $case: 'forbidden', value: {} } }] }],
  };
  return { protocol: { kind: { $case: 'opaque', value: { routes: [route] } } }, metadata: serviceMeta(m.namespace, m.name, m.port) };
}

function egressFallbackToWire(m: Extract<OutboundPolicyModel, { kind: 'egressFallback' }>): OutboundPolicy {
  const meta = defaultMeta('egress-fallback');
  const backend: Backend = {
    metadata: meta,
    kind: {
      $case: 'forward',
      value: {
        addr: { ip: ipToWire(m.ip), port: m.port },
        weight: 1,
        metricLabels: {},
        tlsIdentity: undefined,
        protocolHint: undefined,
        authorityOverride: undefined,
        http2: undefined,
        resourceRef: undefined,
      },
    },
    queue: defaultQueue(),
  };
  const route: HttpRoute = {
    metadata: meta,
    hosts: [],
    rules: [
      {
        matches: [{ path: undefined, headers: [], queryParams: [], method: undefined }],
        filters: [],
        backends: { kind: { $case: 'firstAvailable', value: { backends: [{ backend, filters: [], requestTimeout: undefined }] } } },
        requestTimeout: undefined,
        timeouts: undefined,
        retry: undefined,
        allowL5dRequestHeaders: false,
      },
    ],
  };
  const http = () => ({ routes: [route], failureAccrual: undefined });
  return {
    protocol: {
      kind: {
        $case: 'detect',
        value: { timeout: ms(OUTBOUND_DETECT_TIMEOUT_MS), opaque: { routes: [opaqueRoute(meta, backend)] }, http1: http(), http2: http() },
      },
    },
    metadata: meta,
  };
}

/** The `OutboundPolicy` message of a model. Throws `MeshError` `ERR_WIRE_INVALID_IP` for an egress address that is not an IP. */
export function outboundPolicyToWire(m: OutboundPolicyModel): OutboundPolicy {
  switch (m.kind) {
    case 'service':
      return serviceToWire(m);
    case 'undefinedPort':
      return undefinedPortToWire(m);
    case 'egressFallback':
      return egressFallbackToWire(m);
  }
}

function emptyProfile(): DestinationProfile {
  return {
    fullyQualifiedName: '',
    opaqueProtocol: false,
    routes: [],
    retryBudget: undefined,
    dstOverrides: [],
    endpoint: undefined,
    parentRef: undefined,
    profileRef: undefined,
  };
}

/** The retry budget of a profile without a ServiceProfile: 20 % of requests, at least 10/s, over 10 s. */
function defaultRetryBudget(): DestinationProfile['retryBudget'] {
  return { retryRatio: 0.2, minRetriesPerSecond: 10, ttl: ms(10_000) };
}

/** The `DestinationProfile` message of a model. Throws `MeshError` `ERR_WIRE_INVALID_IP` for an endpoint address that is not an IP. */
export function destinationProfileToWire(m: DestinationProfileModel): DestinationProfile {
  switch (m.kind) {
    case 'undefinedPort':
      return emptyProfile();
    case 'endpoint':
      return { ...emptyProfile(), opaqueProtocol: m.opaqueProtocol, retryBudget: defaultRetryBudget(), endpoint: destinationEndpointToWire(m.endpoint) };
    case 'service':
      return {
        ...emptyProfile(),
        fullyQualifiedName: m.fullyQualifiedName,
        opaqueProtocol: m.opaqueProtocol,
        retryBudget: defaultRetryBudget(),
        parentRef: serviceMeta(m.namespace, m.name, m.port),
        // Upstream stands an empty ServiceProfile in for a missing one and still names it: only
        // its API group is set.
        profileRef: { kind: { $case: 'resource', value: { group: 'linkerd.io', kind: '', name: '', namespace: '', section: '', port: 0 } } },
      };
  }
}
