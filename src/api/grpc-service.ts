/**
 * A gRPC service ready to be served by `startGrpcServer`: the generated definition, its
 * handlers, and a way to end its long-lived streams when the server shuts down. Built by
 * `inboundPolicyService`, `identityService` and `destinationService`; other modules pass it
 * along without looking inside (no grpc-js types needed).
 */
import type { ServiceDefinition, UntypedServiceImplementation } from '@grpc/grpc-js';

/** A service definition plus handlers, as `startGrpcServer` registers them. */
export interface GrpcServiceBinding {
  /** Fully-qualified service name, e.g. `io.linkerd.proxy.inbound.InboundServerPolicies`. */
  readonly serviceName: string;
  /** The generated grpc-js definition. */
  readonly definition: ServiceDefinition;
  /** Handlers keyed by method name. */
  readonly implementation: UntypedServiceImplementation;
  /** Ends every open server stream with status OK (shutdown); unary calls are unaffected. */
  closeStreams(): void;
}
