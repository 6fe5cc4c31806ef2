/**
 * Client of `InboundServerPolicies`: what a proxy uses to watch its ports' policies and what
 * `ward diagnostics policy` uses to ask a controller.
 */

import { Metadata } from '@grpc/grpc-js';
import type { InboundServer } from '../core/index.js';
import { type ClientCallOptions, grpcCallOptions } from './call-options.js';
import { InboundServerPoliciesClient as GeneratedClient, type Server } from './gen/inbound.js';
import { channelSettings, type GrpcConnectOptions } from './grpc-client.js';
import { GrpcError, grpcErrorFrom } from './grpc-error.js';
import { serverFromWire } from './inbound-wire.js';
import { consumeStream, type StreamHandlers } from './stream-handlers.js';
import type { WireResult } from './wire-result.js';

/** A connection to an inbound policy server. */
export class InboundPolicyClient {
  readonly #client: GeneratedClient;

  /** Creates the channel (it connects lazily, on the first call). */
  constructor(opts: GrpcConnectOptions) {
    const { credentials, options } = channelSettings(opts);
    this.#client = new GeneratedClient(opts.address, credentials, options);
  }

  /** The raw `Server` message of a workload port; rejects with `GrpcError`. */
  getPortWire(workload: string, port: number, opts?: ClientCallOptions): Promise<Server> {
    return new Promise((resolve, reject) => {
      this.#client.getPort({ workload, port }, new Metadata(), grpcCallOptions(opts), (err, res) => (err === null ? resolve(res) : reject(grpcErrorFrom(err))));
    });
  }

  /** The policy of a workload port; rejects with `GrpcError` (an invalid message is `INTERNAL`). */
  async getPort(workload: string, port: number, opts?: ClientCallOptions): Promise<InboundServer> {
    const r = serverFromWire(await this.getPortWire(workload, port, opts));
    if (!r.ok) throw new GrpcError('INTERNAL', `invalid Server message: ${r.message}`);
    return r.value;
  }

  /**
   * Watches a workload port: the first message is the current policy, then one per change.
   * Invalid messages are delivered as `{ ok: false }` so the caller can keep its last good
   * policy. Returns the cancel function.
   */
  watchPort(workload: string, port: number, handlers: StreamHandlers<WireResult<InboundServer>>): () => void {
    const call = this.#client.watchPort({ workload, port });
    return consumeStream(
      call,
      (m) => handlers.onMessage(serverFromWire(m)),
      (e) => handlers.onEnd(e),
    );
  }

  /** Closes the channel; open calls fail with CANCELLED/UNAVAILABLE. */
  close(): void {
    this.#client.close();
  }
}
