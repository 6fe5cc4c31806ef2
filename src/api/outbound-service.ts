/**
 * `io.linkerd.proxy.outbound.OutboundPolicies` (upstream's policy-controller
 * `grpc/src/outbound.rs`): Get answers the current client policy of a target, Watch sends it and
 * then every change. Targets are validated here as upstream does (a target is required, the
 * source workload must parse, the port must be 1-65535); resolving them is the resolver's.
 */
import type { ServerUnaryCall, ServerWritableStream, sendUnaryData } from '@grpc/grpc-js';
import { errorMessage } from '../shared/index.js';
import { OutboundPoliciesDefinition, type OutboundPolicy, type TrafficSpec } from './gen/outbound.js';
import { statusCode } from './grpc-error.js';
import { type GrpcServiceBinding, grpcJsDefinition } from './grpc-service.js';
import { parseWorkload } from './inbound-lookup.js';
import { ipFromWire } from './ip-wire.js';
import { type OutboundPolicyModel, outboundPolicyToWire } from './outbound-wire.js';
import { currentValue, serveValueStream, type ValueRefusal, type ValueSubscription } from './value-stream.js';

/** A validated `TrafficSpec`. */
export interface OutboundRequest {
  /** The client's namespace (from `source_workload`). */
  readonly sourceNamespace: string;
  readonly target: { readonly kind: 'addr'; readonly ip: string; readonly port: number } | { readonly kind: 'authority'; readonly authority: string };
}

/** Resolves a target to its watched policy, or says why not (NOT_FOUND: no policy, the proxy decides alone). */
export type OutboundResolver = (req: OutboundRequest) => ValueSubscription<OutboundPolicyModel> | ValueRefusal;

function invalid(message: string): ValueRefusal {
  return { ok: false, code: 'INVALID_ARGUMENT', message };
}

/** Validates a `TrafficSpec` as upstream's `lookup` does. */
export function parseTrafficSpec(spec: TrafficSpec): OutboundRequest | ValueRefusal {
  const target = spec.target;
  if (target === undefined) return invalid('target is required');
  const workload = parseWorkload(spec.sourceWorkload.trim());
  if (typeof workload === 'string') return invalid(workload);
  const sourceNamespace = workload.namespace;
  if (target.$case === 'authority') return { sourceNamespace, target: { kind: 'authority', authority: target.value } };
  const port = target.value.port;
  if (port > 65535) return invalid('port outside valid range');
  if (port === 0) return invalid('port cannot be zero');
  if (target.value.ip === undefined) return invalid('traffic target must have an IP');
  const ip = ipFromWire(target.value.ip);
  if (!ip.ok) return invalid(`failed to parse target addr: ${ip.message}`);
  return { sourceNamespace, target: { kind: 'addr', ip: ip.value, port } };
}

/** The service binding. */
export function outboundPolicyService(resolve: OutboundResolver): GrpcServiceBinding {
  const streams = new Set<() => void>();
  const open = (spec: TrafficSpec): ValueSubscription<OutboundPolicyModel> | ValueRefusal => {
    const req = parseTrafficSpec(spec);
    return 'ok' in req ? req : resolve(req);
  };

  const get = (call: ServerUnaryCall<TrafficSpec, OutboundPolicy>, callback: sendUnaryData<OutboundPolicy>): void => {
    try {
      const sub = open(call.request);
      if (!sub.ok) {
        callback({ code: statusCode(sub.code), details: sub.message });
        return;
      }
      callback(null, outboundPolicyToWire(currentValue(sub)));
    } catch (e) {
      callback({ code: statusCode('INTERNAL'), details: errorMessage(e) });
    }
  };

  const watch = (call: ServerWritableStream<TrafficSpec, OutboundPolicy>): void => {
    serveValueStream(call, () => open(call.request), outboundPolicyToWire, streams);
  };

  return {
    serviceName: OutboundPoliciesDefinition.fullName,
    definition: grpcJsDefinition(OutboundPoliciesDefinition),
    implementation: { get, watch } satisfies Record<keyof typeof OutboundPoliciesDefinition.methods, unknown>,
    closeStreams: () => {
      for (const end of [...streams]) end();
    },
  };
}
