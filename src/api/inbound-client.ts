/**
 * Client of `InboundServerPolicies`: what a proxy uses to watch its ports' policies and what
 * `ward diagnostics policy` uses to ask a controller.
 */

import type { InboundServer } from '../core/index.js';
import type { ClientCallOptions } from './call-options.js';
import { InboundServerPoliciesDefinition, type Server } from './gen/inbound.js';
import type { GrpcConnectOptions } from './grpc-client.js';
import { GrpcError } from './grpc-error.js';
import { H2GrpcClient } from './h2-grpc-client.js';
import { serverFromWire } from './inbound-wire.js';
import type { StreamHandlers } from './stream-handlers.js';
import type { WireResult } from './wire-result.js';

const { getPort, watchPort } = InboundServerPoliciesDefinition.methods;

/** A connection to an inbound policy server. */
export class InboundPolicyClient {
  readonly #client: H2GrpcClient;

  /** Creates the client (it connects lazily, on the first call). */
  constructor(opts: GrpcConnectOptions) {
    this.#client = new H2GrpcClient(opts);
  }

  /** The raw `Server` message of a workload port; rejects with `GrpcError`. */
  getPortWire(workload: string, port: number, opts?: ClientCallOptions): Promise<Server> {
    return this.#client.unary(InboundServerPoliciesDefinition, getPort, { workload, port }, opts);
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
    return this.#client.serverStream(
      InboundServerPoliciesDefinition,
      watchPort,
      { workload, port },
      {
        onMessage: (m) => handlers.onMessage(serverFromWire(m)),
        onEnd: (e) => handlers.onEnd(e),
      },
    );
  }

  /** Closes the connection; open calls fail with CANCELLED (streams: `onEnd`, unless cancelled). */
  close(): void {
    this.#client.close();
  }
}
