/**
 * Client of `io.linkerd.proxy.destination.Destination/Get`: what a proxy uses to discover the
 * endpoints (and their identities) of a service.
 */

import { type DestinationEvent, destinationEventFromWire } from './destination-wire.js';
import { DestinationClient as GeneratedClient } from './gen/destination.js';
import { channelSettings, type GrpcConnectOptions } from './grpc-client.js';
import { consumeStream, type StreamHandlers } from './stream-handlers.js';
import type { WireResult } from './wire-result.js';

/** A connection to a destination server. */
export class DestinationClient {
  readonly #client: GeneratedClient;

  /** Creates the channel (it connects lazily, on the first call). */
  constructor(opts: GrpcConnectOptions) {
    const { credentials, options } = channelSettings(opts);
    this.#client = new GeneratedClient(opts.address, credentials, options);
  }

  /**
   * Streams the endpoint events of `path` (`<svc>.<ns>.svc.<domain>:<port>`); invalid updates
   * are delivered as `{ ok: false }`. Returns the cancel function.
   */
  get(path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>, contextToken = ''): () => void {
    const call = this.#client.get({ scheme: 'k8s', path, contextToken });
    return consumeStream(
      call,
      (m) => handlers.onMessage(destinationEventFromWire(m)),
      (e) => handlers.onEnd(e),
    );
  }

  /** Closes the channel. */
  close(): void {
    this.#client.close();
  }
}
