/**
 * Client of `io.linkerd.proxy.destination.Destination/Get`: what a proxy uses to discover the
 * endpoints (and their identities) of a service.
 */

import { type DestinationEvent, destinationEventFromWire } from './destination-wire.js';
import { DestinationDefinition } from './gen/destination.js';
import type { GrpcConnectOptions } from './grpc-client.js';
import { H2GrpcClient } from './h2-grpc-client.js';
import type { StreamHandlers } from './stream-handlers.js';
import type { WireResult } from './wire-result.js';

/** A connection to a destination server. */
export class DestinationClient {
  readonly #client: H2GrpcClient;

  /** Creates the client (it connects lazily, on the first call). */
  constructor(opts: GrpcConnectOptions) {
    this.#client = new H2GrpcClient(opts);
  }

  /**
   * Streams the endpoint events of `path` (`<svc>.<ns>.svc.<domain>:<port>`); invalid updates
   * are delivered as `{ ok: false }`. Returns the cancel function.
   */
  get(path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>, contextToken = ''): () => void {
    return this.#client.serverStream(
      DestinationDefinition,
      DestinationDefinition.methods.get,
      { scheme: 'k8s', path, contextToken },
      {
        onMessage: (m) => handlers.onMessage(destinationEventFromWire(m)),
        onEnd: (e) => handlers.onEnd(e),
      },
    );
  }

  /** Closes the connection; open streams end with CANCELLED (unless cancelled). */
  close(): void {
    this.#client.close();
  }
}
