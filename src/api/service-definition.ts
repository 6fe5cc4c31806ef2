/**
 * The shape of the service definitions ts-proto generates with `outputServices=generic-definitions`
 * (`IdentityDefinition`, `InboundServerPoliciesDefinition`, `DestinationDefinition`): plain
 * objects naming each method and its message codecs, with no RPC library behind them. The
 * client (`h2-grpc-client.ts`) and the grpc-js server adapter (`grpc-service.ts`) both read them.
 */

/** A generated message's binary codec (ts-proto's `MessageFns<T>` satisfies it). */
export interface MessageCodec<T> {
  encode(message: T): { finish(): Uint8Array };
  decode(input: Uint8Array): T;
}

/** One method of a generated definition. */
export interface GrpcMethodDefinition<Req, Res> {
  /** The method's name in the .proto file, e.g. `WatchPort`. */
  readonly name: string;
  readonly requestType: MessageCodec<Req>;
  readonly requestStream: boolean;
  readonly responseType: MessageCodec<Res>;
  readonly responseStream: boolean;
}

/** A generated service definition; `methods` is keyed by the lowerCamel method name. */
export interface GrpcServiceDefinition {
  readonly name: string;
  /** Fully-qualified service name, e.g. `io.linkerd.proxy.inbound.InboundServerPolicies`. */
  readonly fullName: string;
  // biome-ignore lint/suspicious/noExplicitAny: each method has its own message types.
  readonly methods: Readonly<Record<string, GrpcMethodDefinition<any, any>>>;
}

/** The HTTP/2 `:path` of a method: `/<fullName>/<Method>`. */
export function methodPath(service: Pick<GrpcServiceDefinition, 'fullName'>, method: Pick<GrpcMethodDefinition<unknown, unknown>, 'name'>): string {
  return `/${service.fullName}/${method.name}`;
}
