/**
 * What the inbound proxy hands its HTTP stack, shared by the proxy that classifies connections,
 * the HTTP stack that serves them and the admin server.
 */
import type { Socket } from 'node:net';
import type { ClientInfo, CompiledServer } from '../../core/index.js';

/** The HTTP version of a stream handed to the HTTP stack. */
export type InboundHttpVersion = 'http1' | 'http2';

/**
 * A connection handed to the HTTP stack. The proxy keeps tracking it only to destroy it on
 * `close()`; everything else (per-request authorization against the port's current policy,
 * forwarding, metrics) is the handler's.
 */
export interface InboundHttpConnection {
  /**
   * The stream to serve: the accepted socket, or the TLS socket when mesh TLS was terminated.
   * Paused, with the bytes read for detection put back (hand it to an HTTP server with
   * `emit('connection', socket)`; see transport/prefix-reader for when to `resume()`).
   */
  readonly socket: Socket;
  /** The accepted TCP socket (equal to `socket` without mesh TLS). */
  readonly raw: Socket;
  /** The port whose policy applies. */
  readonly port: number;
  /** The port's policy when the stream was classified; requests must read the current one. */
  readonly policy: CompiledServer;
  /** Client address and TLS state, fixed for the connection. */
  readonly client: ClientInfo;
  readonly version: InboundHttpVersion;
  /** How the version was learned: detected, implied by the port's protocol, or a transport header's session protocol. */
  readonly source: 'detect' | 'protocol' | 'transport-header';
  /** Where the application behind `port` is for this connection (`appHostOf`); default: the stack's `appHost`. */
  readonly appHost?: string;
}

/** Takes over an HTTP connection (see {@link InboundHttpConnection}). Must not throw. */
export type InboundHttpHandler = (conn: InboundHttpConnection) => void;
