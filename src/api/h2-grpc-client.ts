/**
 * A gRPC client for unary and server-streaming calls — all a proxy asks of the controller — over
 * ward's own HTTP/2 (`http`'s {@link H2Connection}, client role), so that the sidecar loads
 * neither grpc-js (its channels, subchannels and channelz cost megabytes of RSS in every pod) nor
 * node:http2 (about 2 MB more for the module and a session).
 *
 * One HTTP/2 connection per client, dialled on the first call and shared by all calls; once it
 * closes, fails or receives GOAWAY, the next call dials a new one. There are no retries, no
 * reconnect backoff and no resubscription: a call while the server is down fails at once
 * (UNAVAILABLE), and the callers' own loops decide when to try again.
 */
import { isIP, connect as netConnect, type Socket } from 'node:net';
import { checkServerIdentity, type TLSSocket, connect as tlsConnect } from 'node:tls';
import {
  H2_CANCEL,
  H2_ENHANCE_YOUR_CALM,
  H2_NO_ERROR,
  H2_REFUSED_STREAM,
  H2Connection,
  type H2Stream,
  type H2StreamEvents,
  type HeaderBlock,
} from '../http/index.js';
import { errorMessage } from '../shared/index.js';
import type { ClientCallOptions } from './call-options.js';
import type { GrpcClientTls, GrpcConnectOptions } from './grpc-client.js';
import { GrpcError, statusName, statusOfHttp } from './grpc-error.js';
import { DEFAULT_MAX_RECEIVE_BYTES, decodeGrpcMessage, frameMessage, grpcTimeout, MessageReader } from './grpc-framing.js';
import type { GrpcMethodDefinition, GrpcServiceDefinition } from './service-definition.js';
import { methodPath } from './service-definition.js';
import type { StreamHandlers } from './stream-handlers.js';

/** RFC 9113 §7 INADEQUATE_SECURITY (http names only the codes its relays use). */
const H2_INADEQUATE_SECURITY = 0xc;

const USER_AGENT = 'ward-grpc/1';

/** Connection tuning; the defaults suit the proxy, tests shorten them. */
export interface H2GrpcClientTuning {
  /** While calls are open, ping the server this often (default 20 s). */
  readonly keepaliveIntervalMs?: number;
  /** A ping not answered within this destroys the connection: its calls fail UNAVAILABLE (default 10 s). */
  readonly keepaliveTimeoutMs?: number;
  /** Give up dialling (TCP + TLS) after this long (default 20 s, grpc-js's minimum connect timeout). */
  readonly connectTimeoutMs?: number;
  /** Close a connection that has had no call for this long (default 5 min). */
  readonly idleTimeoutMs?: number;
  /** Largest response message accepted (default 4 MiB); larger ones fail RESOURCE_EXHAUSTED. */
  readonly maxReceiveBytes?: number;
}

/** One HTTP/2 connection and the calls open on it. */
interface Connection {
  readonly socket: Socket;
  readonly h2: H2Connection;
  readonly calls: Set<ClientCall>;
  /** False once the connection must take no new call (GOAWAY, error, close). */
  usable: boolean;
  /** Why the connection failed, when we know (its calls fail UNAVAILABLE with this message). */
  failure: Error | undefined;
  /** The server ended the byte stream (its calls cannot complete). */
  ended: boolean;
  connectTimer: NodeJS.Timeout | undefined;
  keepaliveTimer: NodeJS.Timeout | undefined;
  pingTimer: NodeJS.Timeout | undefined;
}

/** Where a call delivers what it reads. */
interface CallSink {
  /** One response message; an error ends the call with it (a message that does not decode). */
  onMessage(bytes: Buffer): GrpcError | undefined;
  /** The call ended: `undefined` for status OK. Not called after `cancel`. */
  onEnd(error: GrpcError | undefined): void;
}

/** `host:port` or `[v6]:port` (port 443 when missing, as grpc-js). */
function parseAddress(address: string): { host: string; port: number } | undefined {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(address) ?? /^([^:[\]]+)(?::(\d+))?$/.exec(address);
  const host = m?.[1];
  if (host === undefined) return undefined;
  const port = m?.[2] === undefined ? 443 : Number(m[2]);
  return port >= 1 && port <= 65535 ? { host, port } : undefined;
}

/** The value of the first field `name` in a header block. */
function field(block: HeaderBlock, name: string): string | undefined {
  const pairs = block.pairs;
  for (let i = 0; i + 1 < pairs.length; i += 2) if (pairs[i] === name) return pairs[i + 1];
  return undefined;
}

/** The status carried by a header block, or `undefined` when it has no `grpc-status`; `null` is OK. */
function statusOf(block: HeaderBlock): GrpcError | null | undefined {
  const raw = field(block, 'grpc-status');
  if (raw === undefined) return undefined;
  const code = /^\d+$/.test(raw) ? statusName(Number(raw)) : 'UNKNOWN';
  if (code === 'OK') return null;
  const message = field(block, 'grpc-message');
  return new GrpcError(code, message === undefined ? '' : decodeGrpcMessage(message));
}

/** The status of a stream reset by the server before it sent one (as grpc-js maps it). */
function statusOfReset(rstCode: number): GrpcError {
  switch (rstCode) {
    case H2_REFUSED_STREAM:
      return new GrpcError('UNAVAILABLE', 'stream refused by the server');
    case H2_CANCEL:
      return new GrpcError('CANCELLED', 'stream cancelled by the server');
    case H2_ENHANCE_YOUR_CALM:
      return new GrpcError('RESOURCE_EXHAUSTED', 'bandwidth exhausted or memory limit exceeded');
    case H2_INADEQUATE_SECURITY:
      return new GrpcError('PERMISSION_DENIED', 'protocol not secure enough');
    default:
      return new GrpcError('INTERNAL', `stream reset with HTTP/2 code ${rstCode}`);
  }
}

/** One call: a request stream and what comes back on it. */
class ClientCall implements H2StreamEvents {
  readonly #sink: CallSink;
  readonly #reader: MessageReader;
  readonly #release: (call: ClientCall) => void;
  #conn: Connection | undefined;
  #stream: H2Stream | undefined;
  /** The status received (`null`: OK), `undefined` until one arrives. */
  #status: GrpcError | null | undefined;
  #deadlineTimer: NodeJS.Timeout | undefined;
  #hasHeaders = false;
  #done = false;

  constructor(sink: CallSink, maxReceiveBytes: number, release: (call: ClientCall) => void) {
    this.#sink = sink;
    this.#reader = new MessageReader(maxReceiveBytes);
    this.#release = release;
  }

  get connection(): Connection | undefined {
    return this.#conn;
  }

  /** Sends the request on `conn`; the outcome arrives through the sink. */
  start(conn: Connection, head: readonly string[], body: Buffer, deadlineMs: number | undefined): void {
    this.#conn = conn;
    if (deadlineMs !== undefined) {
      this.#deadlineTimer = setTimeout(() => this.end(new GrpcError('DEADLINE_EXCEEDED', `deadline of ${deadlineMs} ms exceeded`), true), deadlineMs);
      this.#deadlineTimer.unref();
    }
    const stream = conn.h2.request(head, false);
    if (stream === undefined || stream.closed) {
      // The connection went away between the check and the request (never retried here).
      process.nextTick(() => this.#endUnavailable());
      return;
    }
    this.#stream = stream;
    stream.events = this;
    stream.write(body);
    stream.end();
  }

  /**
   * Ends the call once: stops its timer, resets the stream when `reset` (the server has not
   * finished it), and tells the sink unless `error` is `null` (cancelled by the caller).
   */
  end(error: GrpcError | null | undefined, reset: boolean): void {
    if (this.#done) return;
    this.#done = true;
    clearTimeout(this.#deadlineTimer);
    const s = this.#stream;
    if (reset && s !== undefined) s.reset(H2_CANCEL);
    this.#release(this);
    if (error !== null) this.#sink.onEnd(error);
  }

  headers(_s: H2Stream, block: HeaderBlock, endStream: boolean): void {
    if (this.#done) return;
    if (this.#hasHeaders) {
      const status = statusOf(block);
      this.#status = status === undefined ? new GrpcError('UNKNOWN', 'the server sent trailers without grpc-status') : status;
    } else {
      this.#hasHeaders = true;
      const status = statusOf(block);
      const http = field(block, ':status');
      if (http !== '200') {
        const code = Number(http);
        this.end(status instanceof GrpcError ? status : new GrpcError(statusOfHttp(code), `HTTP status ${http ?? 'missing'}`), true);
        return;
      }
      const type = field(block, 'content-type');
      if (type === undefined || !type.startsWith('application/grpc')) {
        this.end(status instanceof GrpcError ? status : new GrpcError('UNKNOWN', `unexpected content-type ${JSON.stringify(type ?? '')}`), true);
        return;
      }
      // Trailers-only: the status came with the headers (and END_STREAM).
      if (status !== undefined) this.#status = status;
    }
    if (endStream) this.#onEnd();
  }

  data(s: H2Stream, chunk: Buffer, endStream: boolean): void {
    if (this.#done) return;
    let failed: GrpcError | undefined;
    const error = this.#reader.push(chunk, (bytes) => {
      failed = this.#sink.onMessage(bytes);
      // The caller may have cancelled in its handler: nothing more is delivered.
      return failed === undefined && !this.#done;
    });
    const e = error ?? failed;
    if (e !== undefined) {
      this.end(e, true);
      return;
    }
    if (this.#done) return;
    // Messages go to the handlers as they complete, so what was read is used: credit it back.
    // A partial message is held by the reader, bounded by the receive limit.
    s.consumed(chunk.length);
    if (endStream) this.#onEnd();
  }

  /** The server ended its side. */
  #onEnd(): void {
    if (this.#reader.isPartial) this.end(new GrpcError('INTERNAL', 'the stream ended inside a message'), false);
    else if (this.#status !== undefined) this.end(this.#status ?? undefined, false);
    else this.end(new GrpcError('UNKNOWN', 'the server ended the stream without a status'), false);
  }

  closed(_s: H2Stream, code: number | undefined, _byPeer: boolean): void {
    if (this.#done) return;
    if (this.#status !== undefined && !this.#reader.isPartial) this.end(this.#status ?? undefined, false);
    else if (this.#connectionLost()) this.#endUnavailable();
    else if (code !== undefined && code !== H2_NO_ERROR) this.end(statusOfReset(code), false);
    // Closed before any response without a reset code: the request never reached a server.
    else if (!this.#hasHeaders) this.#endUnavailable();
    else if (this.#reader.isPartial) this.end(new GrpcError('INTERNAL', 'the stream ended inside a message'), false);
    else this.end(new GrpcError('UNKNOWN', 'the server ended the stream without a status'), false);
  }

  /** True when the stream ends because its connection did (closed, failed, never established). */
  #connectionLost(): boolean {
    const conn = this.#conn;
    return conn !== undefined && (conn.failure !== undefined || conn.ended || conn.h2.destroyed);
  }

  #endUnavailable(): void {
    const why = this.#conn?.failure;
    this.end(new GrpcError('UNAVAILABLE', why === undefined ? 'the connection closed' : errorMessage(why), { cause: why }), false);
  }
}

/**
 * A gRPC client of one server (`GrpcConnectOptions`): unary and server-streaming calls of
 * generated service definitions over one lazily dialled HTTP/2 connection.
 */
export class H2GrpcClient {
  readonly #address: string;
  readonly #target: { host: string; port: number } | undefined;
  readonly #tls: GrpcClientTls | undefined;
  readonly #authority: string;
  readonly #keepaliveIntervalMs: number;
  readonly #keepaliveTimeoutMs: number;
  readonly #connectTimeoutMs: number;
  readonly #idleTimeoutMs: number;
  readonly #maxReceiveBytes: number;
  readonly #calls = new Set<ClientCall>();
  #conn: Connection | undefined;
  #closed = false;

  /** Nothing is dialled until the first call. */
  constructor(opts: GrpcConnectOptions, tuning: H2GrpcClientTuning = {}) {
    this.#address = opts.address;
    this.#target = parseAddress(opts.address);
    this.#tls = opts.tls;
    // As grpc-js with `grpc.default_authority`: the mesh identity on TLS, the address otherwise.
    this.#authority = opts.tls?.serverName ?? opts.address;
    this.#keepaliveIntervalMs = tuning.keepaliveIntervalMs ?? 20_000;
    this.#keepaliveTimeoutMs = tuning.keepaliveTimeoutMs ?? 10_000;
    this.#connectTimeoutMs = tuning.connectTimeoutMs ?? 20_000;
    // H2Connection takes a whole number of milliseconds a timer can wait, 0 meaning never.
    this.#idleTimeoutMs = Math.min(Math.max(1, Math.round(tuning.idleTimeoutMs ?? 300_000)), 0x7fff_ffff);
    this.#maxReceiveBytes = tuning.maxReceiveBytes ?? DEFAULT_MAX_RECEIVE_BYTES;
  }

  /** A unary call; rejects with `GrpcError`. */
  unary<Req, Res>(service: GrpcServiceDefinition, method: GrpcMethodDefinition<Req, Res>, request: Req, opts?: ClientCallOptions): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      let response: { value: Res } | undefined;
      this.#call(service, method, request, opts?.deadlineMs, {
        onMessage: (bytes) => {
          if (response !== undefined) return new GrpcError('UNIMPLEMENTED', 'more than one response message for a unary call');
          try {
            response = { value: method.responseType.decode(bytes) };
          } catch (e) {
            return new GrpcError('INTERNAL', `invalid response message: ${errorMessage(e)}`, { cause: e });
          }
          return undefined;
        },
        onEnd: (error) => {
          if (error !== undefined) reject(error);
          else if (response === undefined) reject(new GrpcError('UNIMPLEMENTED', 'no response message for a unary call'));
          else resolve(response.value);
        },
      });
    });
  }

  /**
   * A server-streaming call: each message to `handlers.onMessage` in order, then one
   * `handlers.onEnd` — never after the returned cancel function was called (it resets the
   * stream with CANCEL; idempotent).
   */
  serverStream<Req, Res>(
    service: GrpcServiceDefinition,
    method: GrpcMethodDefinition<Req, Res>,
    request: Req,
    handlers: StreamHandlers<Res>,
    opts?: ClientCallOptions,
  ): () => void {
    const call = this.#call(service, method, request, opts?.deadlineMs, {
      onMessage: (bytes) => {
        let message: Res;
        try {
          message = method.responseType.decode(bytes);
        } catch (e) {
          return new GrpcError('INTERNAL', `invalid response message: ${errorMessage(e)}`, { cause: e });
        }
        handlers.onMessage(message);
        return undefined;
      },
      onEnd: (error) => handlers.onEnd(error),
    });
    return () => call.end(null, true);
  }

  /** Closes the connection; open calls fail with CANCELLED, later ones too. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const call of [...this.#calls]) call.end(new GrpcError('CANCELLED', 'the client was closed'), true);
    const conn = this.#conn;
    this.#conn = undefined;
    if (conn !== undefined) {
      conn.usable = false;
      this.#stopTimers(conn);
      conn.h2.destroy();
    }
  }

  #call<Req, Res>(
    service: GrpcServiceDefinition,
    method: GrpcMethodDefinition<Req, Res>,
    request: Req,
    deadlineMs: number | undefined,
    sink: CallSink,
  ): ClientCall {
    const call = new ClientCall(sink, this.#maxReceiveBytes, (c) => this.#release(c));
    this.#calls.add(call);
    const failSoon = (e: GrpcError) => process.nextTick(() => call.end(e, false));
    if (this.#closed) {
      failSoon(new GrpcError('CANCELLED', 'the client was closed'));
      return call;
    }
    if (this.#target === undefined) {
      failSoon(new GrpcError('UNAVAILABLE', `invalid address ${JSON.stringify(this.#address)}: expected host:port or [ipv6]:port`));
      return call;
    }
    let body: Buffer;
    try {
      body = frameMessage(method.requestType.encode(request).finish());
    } catch (e) {
      failSoon(new GrpcError('INTERNAL', `request message serialization failed: ${errorMessage(e)}`, { cause: e }));
      return call;
    }
    if (deadlineMs !== undefined && deadlineMs <= 0) {
      failSoon(new GrpcError('DEADLINE_EXCEEDED', 'the deadline had passed before the call started'));
      return call;
    }
    const head = [
      ':method',
      'POST',
      ':scheme',
      this.#tls === undefined ? 'http' : 'https',
      ':path',
      methodPath(service, method),
      ':authority',
      this.#authority,
      'content-type',
      'application/grpc',
      'te',
      'trailers',
      'user-agent',
      USER_AGENT,
    ];
    if (deadlineMs !== undefined) head.push('grpc-timeout', grpcTimeout(deadlineMs));
    let conn: Connection;
    try {
      conn = this.#connection();
    } catch (e) {
      failSoon(new GrpcError('UNAVAILABLE', errorMessage(e), { cause: e }));
      return call;
    }
    conn.calls.add(call);
    if (conn.calls.size === 1) this.#busy(conn);
    call.start(conn, head, body, deadlineMs);
    return call;
  }

  #release(call: ClientCall): void {
    this.#calls.delete(call);
    const conn = call.connection;
    if (conn?.calls.delete(call) && conn.calls.size === 0) this.#idle(conn);
  }

  /** The current connection, or a new one when there is none or it takes no new calls. */
  #connection(): Connection {
    const c = this.#conn;
    if (c?.usable && c.h2.usable) return c;
    const next = this.#connect();
    this.#conn = next;
    return next;
  }

  #connect(): Connection {
    const socket = this.#dial();
    // Registered before H2Connection's own listeners, so that the streams it closes on these
    // events find out why.
    socket.on('error', (e: Error) => {
      conn.usable = false;
      conn.failure ??= e;
    });
    socket.on('end', () => {
      conn.usable = false;
      conn.ended = true;
    });
    if (this.#tls === undefined) socket.once('connect', () => clearTimeout(conn.connectTimer));
    else
      socket.once('secureConnect', () => {
        clearTimeout(conn.connectTimer);
        const alpn = (socket as TLSSocket).alpnProtocol;
        if (alpn !== 'h2') socket.destroy(new Error(`the server did not negotiate HTTP/2 (ALPN ${JSON.stringify(alpn === false ? '' : alpn)})`));
      });
    const conn: Connection = {
      socket,
      h2: new H2Connection(socket, {
        role: 'client',
        idleTimeoutMs: this.#idleTimeoutMs,
        onGoaway: (code) => {
          conn.usable = false;
          // A GOAWAY with an error code ends its calls now (as node:http2 and grpc-js do); a
          // graceful one lets them finish.
          if (code !== undefined && code !== H2_NO_ERROR) this.#kill(conn, new Error(`the server sent GOAWAY with HTTP/2 code ${code}`));
        },
        onClose: () => {
          conn.usable = false;
          this.#stopTimers(conn);
          if (this.#conn === conn) this.#conn = undefined;
        },
      }),
      calls: new Set(),
      usable: true,
      failure: undefined,
      ended: false,
      connectTimer: undefined,
      keepaliveTimer: undefined,
      pingTimer: undefined,
    };
    conn.connectTimer = setTimeout(
      () => this.#kill(conn, new Error(`no connection to ${this.#address} within ${this.#connectTimeoutMs} ms`)),
      this.#connectTimeoutMs,
    );
    conn.connectTimer.unref();
    // Only open calls keep the process alive (see #busy).
    socket.unref();
    return conn;
  }

  #dial(): Socket {
    const target = this.#target as { host: string; port: number };
    const tls = this.#tls;
    // Never through http_proxy/grpc_proxy: the controller is dialled directly.
    const socket: Socket =
      tls === undefined
        ? netConnect({ host: target.host, port: target.port, noDelay: true })
        : tlsConnect({
            host: target.host,
            port: target.port,
            ca: tls.caPem,
            ...(tls.certPem !== undefined ? { cert: tls.certPem } : {}),
            ...(tls.keyPem !== undefined ? { key: tls.keyPem } : {}),
            // SNI cannot carry an IP address (RFC 6066).
            ...(isIP(tls.serverName) === 0 ? { servername: tls.serverName } : {}),
            // The certificate must name the mesh identity, not the host dialled.
            checkServerIdentity: (_host, cert) => checkServerIdentity(tls.serverName, cert),
            ALPNProtocols: ['h2'],
            minVersion: 'TLSv1.2',
          });
    socket.setNoDelay(true);
    return socket;
  }

  /** The connection has calls: it keeps the process alive and is pinged. */
  #busy(conn: Connection): void {
    conn.socket.ref();
    conn.keepaliveTimer = setInterval(() => this.#ping(conn), this.#keepaliveIntervalMs);
    conn.keepaliveTimer.unref();
  }

  /** The connection's last call ended: no pings, and H2Connection closes it if no call comes for a while. */
  #idle(conn: Connection): void {
    clearInterval(conn.keepaliveTimer);
    clearTimeout(conn.pingTimer);
    conn.keepaliveTimer = undefined;
    conn.pingTimer = undefined;
    if (!conn.h2.destroyed) conn.socket.unref();
  }

  #ping(conn: Connection): void {
    if (conn.pingTimer !== undefined || conn.h2.destroyed) return;
    const timer = setTimeout(() => this.#kill(conn, new Error(`keepalive ping not answered within ${this.#keepaliveTimeoutMs} ms`)), this.#keepaliveTimeoutMs);
    timer.unref();
    conn.pingTimer = timer;
    const sent = conn.h2.ping(() => {
      if (conn.pingTimer !== timer) return;
      clearTimeout(timer);
      conn.pingTimer = undefined;
    });
    if (!sent) this.#kill(conn, new Error('keepalive ping could not be sent'));
  }

  /** Destroys a connection: its calls fail UNAVAILABLE with `why`. */
  #kill(conn: Connection, why: Error): void {
    conn.usable = false;
    conn.failure ??= why;
    this.#stopTimers(conn);
    conn.h2.destroy();
  }

  #stopTimers(conn: Connection): void {
    clearTimeout(conn.connectTimer);
    clearInterval(conn.keepaliveTimer);
    clearTimeout(conn.pingTimer);
    conn.connectTimer = conn.keepaliveTimer = conn.pingTimer = undefined;
  }
}
