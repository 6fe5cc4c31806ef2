/**
 * `io.linkerd.proxy.inbound.InboundServerPolicies` on top of an `InboundDiscovery` (upstream's
 * `grpc/src/inbound.rs`): GetPort answers the current value; WatchPort sends the current value,
 * then one message per published change, until the client cancels or the server shuts down.
 * Requests are validated by `lookupPort` (INVALID_ARGUMENT / NOT_FOUND); anything unexpected is
 * INTERNAL and never takes the server down.
 */
import type { ServerUnaryCall, ServerWritableStream, sendUnaryData } from '@grpc/grpc-js';
import type { InboundServer } from '../core/index.js';
import { errorMessage } from '../shared/index.js';
import { InboundServerPoliciesDefinition, type PortSpec, Server } from './gen/inbound.js';
import { statusCode } from './grpc-error.js';
import { type GrpcServiceBinding, grpcJsDefinition, grpcJsMethod } from './grpc-service.js';
import { type InboundDiscovery, lookupPort, peekPort } from './inbound-lookup.js';
import { serverToWire } from './inbound-wire.js';

/** A published policy value that can be watched (structurally, the index's `PolicyCell`). */
export interface WatchableCell {
  readonly value: InboundServer;
  /**
   * Calls `listener` with each later value (not the current one) and `onClose` when the cell
   * ends (its pod was deleted); returns the unsubscribe function.
   */
  subscribe(listener: (value: InboundServer) => void, onClose?: () => void): () => void;
}

/** Metric hooks of the inbound service. */
export interface InboundServiceHooks {
  /** A WatchPort stream started (after its lookup succeeded). */
  onStreamOpen?(): void;
  /** A WatchPort stream ended (cancelled, failed, or closed by shutdown). Called once per open. */
  onStreamClose?(): void;
  /** A message was handed to a WatchPort stream; `initial` for the first message of a stream. */
  onUpdateSent?(value: InboundServer, initial: boolean): void;
}

/** One open WatchPort stream. */
interface Watch {
  /** Unsubscribes and ends the stream with OK. */
  end(): void;
}

/**
 * The service binding. Backpressure: when a stream's buffer is full, later values are coalesced
 * and only the newest is written once it drains (a proxy only needs the latest policy).
 */
export function inboundPolicyService(discovery: InboundDiscovery<WatchableCell>, hooks: InboundServiceHooks = {}): GrpcServiceBinding {
  const watches = new Set<Watch>();
  // The index shares one InboundServer value between all pods a Server selects, so one change
  // is encoded once for all the streams it affects, not once per stream.
  const encoded = new WeakMap<InboundServer, Buffer>();
  const encode = (value: InboundServer): Buffer => {
    let bytes = encoded.get(value);
    if (bytes === undefined) {
      bytes = Buffer.from(Server.encode(serverToWire(value)).finish());
      encoded.set(value, bytes);
    }
    return bytes;
  };

  const getPort = (call: ServerUnaryCall<PortSpec, Server>, callback: sendUnaryData<Server>): void => {
    try {
      const r = peekPort(discovery, call.request.workload, call.request.port);
      if (r.code !== 'OK') {
        callback({ code: statusCode(r.code), details: r.message });
        return;
      }
      callback(null, serverToWire(r.cell.value));
    } catch (e) {
      callback({ code: statusCode('INTERNAL'), details: errorMessage(e) });
    }
  };

  const watchPort = (call: ServerWritableStream<PortSpec, Server>): void => {
    let cell: WatchableCell;
    try {
      const r = lookupPort(discovery, call.request.workload, call.request.port);
      if (r.code !== 'OK') {
        call.emit('error', { code: statusCode(r.code), details: r.message });
        return;
      }
      cell = r.cell;
    } catch (e) {
      call.emit('error', { code: statusCode('INTERNAL'), details: errorMessage(e) });
      return;
    }

    // Cancelled before the handler ran: 'cancelled' has already been emitted.
    if (call.cancelled) return;
    let closed = false;
    let blocked = false;
    let pending: InboundServer | undefined;
    let lastWritten: InboundServer | undefined;
    let unsubscribe: (() => void) | undefined;

    const cleanup = (): boolean => {
      if (closed) return false;
      closed = true;
      unsubscribe?.();
      watches.delete(watch);
      hooks.onStreamClose?.();
      return true;
    };
    const fail = (e: unknown): void => {
      if (cleanup()) call.emit('error', { code: statusCode('INTERNAL'), details: errorMessage(e) });
    };
    const send = (value: InboundServer, initial = false): void => {
      if (closed) return;
      if (blocked) {
        pending = value;
        return;
      }
      let ok: boolean;
      try {
        // Pre-encoded: the definition below passes Buffers through unchanged.
        ok = call.write(encode(value) as unknown as Server);
      } catch (e) {
        fail(e);
        return;
      }
      lastWritten = value;
      hooks.onUpdateSent?.(value, initial);
      if (!ok) {
        blocked = true;
        call.once('drain', onDrain);
      }
    };
    const onDrain = (): void => {
      blocked = false;
      const next = pending;
      pending = undefined;
      // A -> B -> A while blocked: the client already has A.
      if (next !== undefined && next !== lastWritten) send(next);
    };
    const watch: Watch = {
      end: () => {
        if (cleanup()) call.end();
      },
    };

    call.on('cancelled', cleanup);
    call.on('close', cleanup);
    call.on('error', cleanup);
    watches.add(watch);
    hooks.onStreamOpen?.();
    send(cell.value, true);
    if (closed) return;
    try {
      // A deleted pod ends the stream with OK, so its proxy asks again (upstream drops the sender).
      const u = cell.subscribe(
        (v) => send(v),
        () => watch.end(),
      );
      if (closed) u();
      else unsubscribe = u;
    } catch (e) {
      fail(e);
    }
  };

  return {
    serviceName: InboundServerPoliciesDefinition.fullName,
    definition: {
      ...grpcJsDefinition(InboundServerPoliciesDefinition),
      watchPort: {
        ...grpcJsMethod(InboundServerPoliciesDefinition, InboundServerPoliciesDefinition.methods.watchPort),
        responseSerialize: (value: Server | Buffer): Buffer => (Buffer.isBuffer(value) ? value : Buffer.from(Server.encode(value).finish())),
      },
    },
    implementation: { getPort, watchPort } satisfies Record<keyof typeof InboundServerPoliciesDefinition.methods, unknown>,
    closeStreams: () => {
      for (const w of [...watches]) w.end();
    },
  };
}
