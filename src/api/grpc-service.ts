/**
 * A gRPC service ready to be served by `startGrpcServer`: the grpc-js definition, its handlers,
 * and a way to end its long-lived streams when the server shuts down. Built by
 * `inboundPolicyService`, `identityService` and `destinationService`; other modules pass it
 * along without looking inside (no grpc-js types needed). Building one does not load grpc-js.
 */
import type { MethodDefinition, ServiceDefinition, UntypedServiceImplementation } from '@grpc/grpc-js';
import type { GrpcMethodDefinition, GrpcServiceDefinition } from './service-definition.js';
import { methodPath } from './service-definition.js';

/** A service definition plus handlers, as `startGrpcServer` registers them. */
export interface GrpcServiceBinding {
  /** Fully-qualified service name, e.g. `io.linkerd.proxy.inbound.InboundServerPolicies`. */
  readonly serviceName: string;
  /** The grpc-js definition (see `grpcJsDefinition`). */
  readonly definition: ServiceDefinition;
  /** Handlers keyed by method name. */
  readonly implementation: UntypedServiceImplementation;
  /** Ends every open server stream with status OK (shutdown); unary calls are unaffected. */
  closeStreams(): void;
}

/** A grpc-js method definition from a generated one (what ts-proto's `outputServices=grpc-js` emitted). */
export function grpcJsMethod<Req, Res>(service: GrpcServiceDefinition, method: GrpcMethodDefinition<Req, Res>): MethodDefinition<Req, Res> {
  const { requestType, responseType } = method;
  return {
    path: methodPath(service, method),
    requestStream: method.requestStream,
    responseStream: method.responseStream,
    requestSerialize: (value: Req): Buffer => Buffer.from(requestType.encode(value).finish()),
    requestDeserialize: (bytes: Buffer): Req => requestType.decode(bytes),
    responseSerialize: (value: Res): Buffer => Buffer.from(responseType.encode(value).finish()),
    responseDeserialize: (bytes: Buffer): Res => responseType.decode(bytes),
    originalName: method.name,
  };
}

/**
 * The grpc-js `ServiceDefinition` of a generated definition, keyed like the generated
 * `methods` (lowerCamel, as the handlers are). Plain data: grpc-js is not loaded.
 */
export function grpcJsDefinition(service: GrpcServiceDefinition): ServiceDefinition {
  const out: Record<string, MethodDefinition<unknown, unknown>> = {};
  for (const [key, method] of Object.entries(service.methods)) out[key] = grpcJsMethod(service, method);
  return out;
}
