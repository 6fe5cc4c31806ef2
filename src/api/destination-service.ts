/**
 * `io.linkerd.proxy.destination.Destination` (POLICY-SEMANTICS §5.5). `Get` over a resolve
 * function: each call resolves the requested path once, then streams one `Update` per event
 * until the client cancels or the server shuts down. `GetProfile` over a profile resolver: the
 * current profile, then each change (UNIMPLEMENTED without one).
 */
import type { ServerWritableStream } from '@grpc/grpc-js';
import { errorMessage } from '../shared/index.js';
import { type DestinationEvent, destinationEventToWire } from './destination-wire.js';
import { DestinationDefinition, type DestinationProfile, type GetDestination, type Update } from './gen/destination.js';
import { statusCode } from './grpc-error.js';
import { type GrpcServiceBinding, grpcJsDefinition } from './grpc-service.js';
import { type DestinationProfileModel, destinationProfileToWire } from './outbound-wire.js';
import { serveValueStream, type ValueRefusal, type ValueSubscription } from './value-stream.js';

/** A destination lookup as received. */
export interface DestinationRequest {
  /** `<svc>.<ns>.svc.<domain>:<port>`. */
  readonly path: string;
  /** Opaque token set at injection time (JSON with the client's namespace, upstream). */
  readonly contextToken: string;
}

/** A resolved destination: events start flowing on subscribe. */
export interface DestinationSubscription {
  readonly ok: true;
  /**
   * Calls `listener` synchronously with the initial event(s), then with every change; returns
   * the unsubscribe function.
   */
  subscribe(listener: (e: DestinationEvent) => void): () => void;
}

/** Resolves a request, or says why not. */
export type DestinationResolver = (
  req: DestinationRequest,
) => DestinationSubscription | { readonly ok: false; readonly code: 'INVALID_ARGUMENT' | 'NOT_FOUND'; readonly message: string };

/** Resolves a GetProfile request to its watched profile, or says why not. */
export type ProfileResolver = (req: DestinationRequest) => ValueSubscription<DestinationProfileModel> | ValueRefusal;

/** The service binding. */
export function destinationService(resolve: DestinationResolver, resolveProfile?: ProfileResolver): GrpcServiceBinding {
  const streams = new Set<() => void>();

  const getProfile = (call: ServerWritableStream<GetDestination, DestinationProfile>): void => {
    if (resolveProfile === undefined) {
      call.emit('error', { code: statusCode('UNIMPLEMENTED'), details: 'profiles are not served' });
      return;
    }
    const req = { path: call.request.path, contextToken: call.request.contextToken };
    serveValueStream(call, () => resolveProfile(req), destinationProfileToWire, streams);
  };

  const get = (call: ServerWritableStream<GetDestination, Update>): void => {
    let sub: ReturnType<DestinationResolver>;
    try {
      sub = resolve({ path: call.request.path, contextToken: call.request.contextToken });
    } catch (e) {
      call.emit('error', { code: statusCode('INTERNAL'), details: errorMessage(e) });
      return;
    }
    if (!sub.ok) {
      call.emit('error', { code: statusCode(sub.code), details: sub.message });
      return;
    }

    // Cancelled before the handler ran: 'cancelled' has already been emitted.
    if (call.cancelled) return;
    let closed = false;
    let unsubscribe: (() => void) | undefined;
    const cleanup = (): boolean => {
      if (closed) return false;
      closed = true;
      unsubscribe?.();
      streams.delete(end);
      return true;
    };
    const end = (): void => {
      if (cleanup()) call.end();
    };
    const fail = (e: unknown): void => {
      if (cleanup()) call.emit('error', { code: statusCode('INTERNAL'), details: errorMessage(e) });
    };
    // Deltas cannot be coalesced, so events are buffered by the stream when the client is slow.
    const send = (e: DestinationEvent): void => {
      if (closed) return;
      try {
        call.write(destinationEventToWire(e));
      } catch (err) {
        fail(err);
      }
    };

    call.on('cancelled', cleanup);
    call.on('close', cleanup);
    call.on('error', cleanup);
    streams.add(end);
    try {
      const u = sub.subscribe(send);
      // The initial events may already have failed the stream.
      if (closed) u();
      else unsubscribe = u;
    } catch (e) {
      fail(e);
    }
  };

  return {
    serviceName: DestinationDefinition.fullName,
    definition: grpcJsDefinition(DestinationDefinition),
    implementation: { get, getProfile } satisfies Record<keyof typeof DestinationDefinition.methods, unknown>,
    closeStreams: () => {
      for (const end of [...streams]) end();
    },
  };
}
