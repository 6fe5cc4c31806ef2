/**
 * Public surface of `api`: the Linkerd-compatible wire API (POLICY-SEMANTICS §5) — core <-> wire
 * mapping, gRPC servers and clients, and the generated messages. The only module importing
 * grpc-js; nothing here requires callers to. The servers are grpc-js, loaded on the first
 * `startGrpcServer`; the clients speak gRPC over ward's own HTTP/2 (`http`), so importing this
 * module (as the proxy does) loads neither grpc-js nor node:http2.
 */

export type { ClientCallOptions } from './call-options.js';
export * from './destination-client.js';
export * from './destination-service.js';
export * from './destination-wire.js';
/** Generated messages of `io.linkerd.proxy.destination` (encode/decode/toJSON/fromJSON). */
export * as destinationProto from './gen/destination.js';
/** Generated messages of `io.linkerd.proxy.grpc_route`. */
export * as grpcRouteProto from './gen/grpc_route.js';
/** Generated messages of `io.linkerd.proxy.http_route`. */
export * as httpRouteProto from './gen/http_route.js';
/** Generated messages of `io.linkerd.proxy.http_types`. */
export * as httpTypesProto from './gen/http_types.js';
/** Generated messages of `io.linkerd.proxy.identity`. */
export * as identityProto from './gen/identity.js';
/** Generated messages of `io.linkerd.proxy.inbound`. */
export * as inboundProto from './gen/inbound.js';
/** Generated messages of `io.linkerd.proxy.meta`. */
export * as metaProto from './gen/meta.js';
/** Generated messages of `io.linkerd.proxy.net`. */
export * as netProto from './gen/net.js';
/** Generated messages of `io.linkerd.proxy.outbound`. */
export * as outboundProto from './gen/outbound.js';
export type { GrpcClientTls, GrpcConnectOptions } from './grpc-client.js';
export { GrpcError, type GrpcStatusName } from './grpc-error.js';
export * from './grpc-server.js';
export * from './grpc-service.js';
export * from './identity-client.js';
export * from './identity-service.js';
export * from './inbound-client.js';
export * from './inbound-lookup.js';
export * from './inbound-service.js';
export * from './inbound-wire.js';
export * from './ip-wire.js';
export * from './outbound-client.js';
export * from './outbound-service.js';
export * from './outbound-wire.js';
export * from './proto-json.js';
export type { StreamHandlers } from './stream-handlers.js';
export type { ValueRefusal, ValueSubscription } from './value-stream.js';
export * from './wire-result.js';
