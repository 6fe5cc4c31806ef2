/**
 * Client of `OutboundPolicies` and `Destination/GetProfile`: what a proxy asks about the client
 * side of a destination, as raw messages (ward's own proxy does not route by them; diagnostics
 * and tests read them).
 */

import type { ClientCallOptions } from './call-options.js';
import { DestinationDefinition, type DestinationProfile } from './gen/destination.js';
import { OutboundPoliciesDefinition, type OutboundPolicy, type TrafficSpec } from './gen/outbound.js';
import type { GrpcConnectOptions } from './grpc-client.js';
import { H2GrpcClient } from './h2-grpc-client.js';
import { ipToWire } from './ip-wire.js';
import type { StreamHandlers } from './stream-handlers.js';

/** A target of `OutboundPolicies`: an address, or an authority (`web.demo.svc.cluster.local:80`). */
export type OutboundTargetSpec = { readonly ip: string; readonly port: number } | { readonly authority: string };

/** The `TrafficSpec` of `sourceWorkload` (`{"ns":"…","pod":"…"}`) and a target. Throws `MeshError` `ERR_WIRE_INVALID_IP` for a bad address. */
export function trafficSpec(sourceWorkload: string, target: OutboundTargetSpec): TrafficSpec {
  return {
    sourceWorkload,
    target: 'authority' in target ? { $case: 'authority', value: target.authority } : { $case: 'addr', value: { ip: ipToWire(target.ip), port: target.port } },
  };
}

/** A connection to a controller's outbound policy server (the policy port) or destination server (GetProfile). */
export class OutboundPolicyClient {
  readonly #client: H2GrpcClient;

  /** Creates the client (it connects lazily, on the first call). */
  constructor(opts: GrpcConnectOptions) {
    this.#client = new H2GrpcClient(opts);
  }

  /** The current client policy of a target; rejects with `GrpcError`. */
  get(sourceWorkload: string, target: OutboundTargetSpec, opts?: ClientCallOptions): Promise<OutboundPolicy> {
    return this.#client.unary(OutboundPoliciesDefinition, OutboundPoliciesDefinition.methods.get, trafficSpec(sourceWorkload, target), opts);
  }

  /** Watches the client policy of a target: the current one, then each change. Returns the cancel function. */
  watch(sourceWorkload: string, target: OutboundTargetSpec, handlers: StreamHandlers<OutboundPolicy>): () => void {
    return this.#client.serverStream(OutboundPoliciesDefinition, OutboundPoliciesDefinition.methods.watch, trafficSpec(sourceWorkload, target), handlers);
  }

  /** Watches the profile of a Destination path (`<ip>:<port>` or `<svc>.<ns>.svc.<domain>:<port>`). Returns the cancel function. */
  getProfile(path: string, handlers: StreamHandlers<DestinationProfile>, contextToken = ''): () => void {
    return this.#client.serverStream(DestinationDefinition, DestinationDefinition.methods.getProfile, { scheme: 'k8s', path, contextToken }, handlers);
  }

  /** Closes the connection; open calls fail with CANCELLED (streams: `onEnd`, unless cancelled). */
  close(): void {
    this.#client.close();
  }
}
