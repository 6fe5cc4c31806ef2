/**
 * HTTP/2 framing of our own (RFC 9113), the proxy's HTTP/2 both as a server (toward clients) and
 * as a client (toward applications), built for relaying: streams are plain objects with event
 * callbacks, not node streams, and a DATA payload goes from one connection's socket to the other's
 * without a copy. node:http2 wraps every stream in a JS `Duplex` and every header block in an
 * object; per relayed gRPC request that cost more CPU than all of ward's own work.
 *
 * What a peer gets:
 * - Settings: ours are sent first (server: `MAX_CONCURRENT_STREAMS`; both: `MAX_HEADER_LIST_SIZE`;
 *   client: `ENABLE_PUSH` 0) with a connection window raised to {@link H2ConnectionOptions.connectionWindow};
 *   the stream window stays at the default 65,535. The peer's first frame must be SETTINGS.
 * - Flow control both ways. A stream's received data is credited back (WINDOW_UPDATE) only once
 *   its consumer says it is {@link H2Stream.consumed} — for a relay, once it was written to the
 *   other side — so a slow reader slows its writer, and what a stream holds is bounded by its
 *   window. The connection's window is credited on receipt, so one slow stream never stalls the
 *   others, as long as the connection holds less than {@link MAX_HELD_BYTES}. Credit goes out in
 *   halves of the window, not per frame. DATA is sent within the peer's windows and frame size,
 *   and not at all while the socket is backed up. A small slice of a large read is copied before
 *   it waits in a queue, so a queued byte cannot hold a whole read.
 * - Every header block is decoded in order (HPACK state stays in step) and checked (h2/message):
 *   a malformed request or response, DATA beyond or short of `content-length`, trailers without
 *   END_STREAM are stream errors (RST_STREAM PROTOCOL_ERROR) and never reach the consumer.
 *   A request over `MAX_CONCURRENT_STREAMS` is refused (REFUSED_STREAM); one over the header list
 *   bounds (size, or {@link MAX_HEADER_FIELDS} fields) is answered 431.
 * - Connection errors (GOAWAY with the code, then the socket is closed): frame sizes and types out
 *   of place, a stream id reused, from the wrong side or below one already opened (PROTOCOL_ERROR),
 *   HPACK errors, window overflows, a header block not continued by CONTINUATION frames or larger
 *   than the header list bound (ENHANCE_YOUR_CALM), or one that would take the connections'
 *   shared budget for unfinished header blocks past its bound (16 MiB by default). DATA or HEADERS on a stream the peer closed (its END_STREAM
 *   or RST_STREAM; the last {@link CLOSED_MEMORY} such streams are remembered) is STREAM_CLOSED
 *   (RFC 9113 §5.1 allows a connection error there); on a stream we reset, what the peer sent
 *   before it learnt of the reset is ignored. A stream that depends on itself (HEADERS or
 *   PRIORITY) is reset with PROTOCOL_ERROR (§5.3.1), or fails the connection when it is idle.
 * - Deadlines, on one timer per connection armed only when a header block spans frames or the
 *   connection falls idle (never per request): a header block sent in several frames must end
 *   within {@link H2ConnectionOptions.headerBlockTimeoutMs} of its first frame (default 10 s,
 *   HTTP/1's header deadline), else ENHANCE_YOUR_CALM — a peer that starts a block and goes
 *   silent would otherwise hold up to twice the header list bound forever. A server closes a
 *   connection that had no open stream for {@link H2ConnectionOptions.idleTimeoutMs} with GOAWAY
 *   NO_ERROR; the default, 60 s, is inbound/http's HTTP/1 keep-alive timeout (one idle rule for
 *   both protocols) and well above the idle timeouts of Linkerd's own client pools (5 s outbound,
 *   20 s inbound), so a meshed client lets go first. A client that keeps its connection (a gRPC
 *   channel) gets a GOAWAY naming the last stream served, which HTTP/2 clients take as "reconnect
 *   for the next request". Envoy keeps idle connections for an hour by default; an edge proxy
 *   saves handshakes with that, but in a pod an hour-long idle connection is mostly one nobody
 *   will use, holding memory. A client's connections have no idle timeout by default (its pool
 *   decides).
 * - PING: the peer's are acknowledged; ours ({@link H2Connection.ping}, a client's keepalive) are
 *   matched to their acknowledgements by the number they carry.
 * - Abuse: resets sent by the peer or caused by its errors draw on a budget of
 *   {@link RESET_BURST}, refilled at {@link RESET_REFILL_PER_S}/s (the "rapid reset" attack, as
 *   nghttp2 bounds it); so do empty DATA frames and SETTINGS frames after the first. A peer
 *   that lets our replies (PING and SETTINGS acknowledgements, headers) pile up past
 *   {@link MAX_BACKLOG_BYTES} because it does not read is cut off. Each of these ends the
 *   connection with ENHANCE_YOUR_CALM.
 *
 * Writes made while handling input (or anywhere in one tick) are gathered and go to the socket in
 * one `write` when the current job ends: over TLS, one record.
 */
import type { Duplex } from 'node:stream';
import { detached, LINGER_STEP_MS, lingerThenDestroy } from '../socket.js';
import { ByteWriter, type HeaderBlock, HpackDecoder, HpackEncoder } from './hpack.js';
import { type MessageFacts, messageProblem } from './message.js';

/** HTTP/2 error codes (RFC 9113 §7). */
export const H2_NO_ERROR = 0x0;
export const H2_PROTOCOL_ERROR = 0x1;
export const H2_INTERNAL_ERROR = 0x2;
export const H2_FLOW_CONTROL_ERROR = 0x3;
export const H2_STREAM_CLOSED = 0x5;
export const H2_FRAME_SIZE_ERROR = 0x6;
export const H2_REFUSED_STREAM = 0x7;
export const H2_CANCEL = 0x8;
export const H2_COMPRESSION_ERROR = 0x9;
export const H2_ENHANCE_YOUR_CALM = 0xb;

const CLIENT_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

const DATA = 0x0;
const HEADERS = 0x1;
const PRIORITY = 0x2;
const RST_STREAM = 0x3;
const SETTINGS = 0x4;
const PUSH_PROMISE = 0x5;
const PING = 0x6;
const GOAWAY = 0x7;
const WINDOW_UPDATE = 0x8;
const CONTINUATION = 0x9;

const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;
/** Not a wire flag: a header block whose HEADERS frame made its stream depend on itself. */
const SELF_DEPENDENT = 0x100;

const SETTINGS_HEADER_TABLE_SIZE = 0x1;
const SETTINGS_ENABLE_PUSH = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const SETTINGS_MAX_FRAME_SIZE = 0x5;
const SETTINGS_MAX_HEADER_LIST_SIZE = 0x6;

const DEFAULT_WINDOW = 65_535;
const MAX_WINDOW = 0x7fff_ffff;
/** The frame size we accept (the default: we never announce more). */
const MAX_FRAME = 16_384;

/** Resets the peer may cause at once before the connection is cut ({@link H2Connection}'s budget). */
export const RESET_BURST = 1000;
/** How fast that budget refills. */
export const RESET_REFILL_PER_S = 33;
/** Bytes of our own frames a peer may leave unread before it is cut off (data excluded: it waits for the socket). */
export const MAX_BACKLOG_BYTES = 4 * 1024 * 1024;
/**
 * Received bytes a connection may hold unconsumed (over all its streams) before its window is no
 * longer credited on receipt but only as they are consumed: memory per connection stays bounded
 * (this plus one window) while up to 64 stalled streams still cannot stall the others.
 */
export const MAX_HELD_BYTES = 4 * 1024 * 1024;
/** Payloads smaller than this are copied into the outgoing batch rather than written on their own. */
const COPY_BELOW = 1024;
/** Fields a received header list may have (node:http2's bound was 128 too); more is answered 431. */
export const MAX_HEADER_FIELDS = 128;
/** Client: the peer's SETTINGS must arrive within this (an application that accepts but never speaks HTTP/2). */
export const SETTINGS_TIMEOUT_MS = 10_000;
/** PINGs of ours that may wait for their acknowledgement; beyond them {@link H2Connection.ping} refuses. */
export const MAX_PENDING_PINGS = 16;
/** Client streams that may wait for a concurrency slot; beyond them {@link H2Connection.request} refuses. */
export const MAX_WAITING_STREAMS = 4096;
const MAX_STREAM_ID = 0x7fff_ffff;
/** Default of {@link H2ConnectionOptions.headerBlockTimeoutMs}: HTTP/1's header deadline (inbound/http's `headersTimeoutMs`). */
export const HEADER_BLOCK_TIMEOUT_MS = 10_000;
/** Default of {@link H2ConnectionOptions.idleTimeoutMs} for a server (see the module comment for why). */
export const SERVER_IDLE_TIMEOUT_MS = 60_000;
/**
 * Streams remembered after they closed with the peer's end or reset (frames on them are then a
 * connection error); one closed longer ago is taken for one we reset, whose frames are ignored.
 */
const CLOSED_MEMORY = 128;
/** Ranges of stream ids the peer skipped that are remembered (HEADERS on one is a connection error). */
const SKIPPED_MEMORY = 16;

/**
 * Bytes that header blocks still waiting for their CONTINUATION frames may hold, shared by the
 * connections given the same object: each such block is bounded by the header list size and a
 * deadline, but thousands of connections each holding one would still hold hundreds of megabytes.
 * Past `max`, the connection whose frame would go over fails (ENHANCE_YOUR_CALM). A block sent in
 * one HEADERS frame (every common client's, whatever its size) is never held, so never counted.
 */
export interface HeaderBlockBudget {
  /** Bytes held now (the connections keep it). */
  used: number;
  readonly max: number;
}

/** Default of {@link H2ConnectionOptions.headerBlockBudget}: {@link MAX_UNFINISHED_HEADER_BYTES} over the process. */
export const MAX_UNFINISHED_HEADER_BYTES = 16 * 1024 * 1024;
const PROCESS_HEADER_BLOCK_BUDGET: HeaderBlockBudget = { used: 0, max: MAX_UNFINISHED_HEADER_BYTES };

/** Settings of an {@link H2Connection}. */
export interface H2ConnectionOptions {
  readonly role: 'server' | 'client';
  /** Streams the peer may have open at once (server; default 256). */
  readonly maxConcurrentStreams?: number;
  /** Bound on a received header list (RFC 7541 size; default 64 KiB). */
  readonly maxHeaderListSize?: number;
  /** Bound on the fields of a received header list (default {@link MAX_HEADER_FIELDS}). */
  readonly maxHeaderFields?: number;
  /** Client: how long the peer has to send its SETTINGS before the connection fails (default {@link SETTINGS_TIMEOUT_MS}). */
  readonly settingsTimeoutMs?: number;
  /** The connection-level receive window (default 1 MiB). */
  readonly connectionWindow?: number;
  /**
   * A header block sent in several frames (HEADERS without END_HEADERS, then CONTINUATION) must
   * end within this of its first frame, else the connection fails (default {@link HEADER_BLOCK_TIMEOUT_MS}).
   */
  readonly headerBlockTimeoutMs?: number;
  /**
   * A connection without an open stream for this long is closed gracefully (GOAWAY); 0: never.
   * Default: server {@link SERVER_IDLE_TIMEOUT_MS}, client 0 (its pool decides).
   */
  readonly idleTimeoutMs?: number;
  /** Where unfinished header blocks are accounted (see {@link HeaderBlockBudget}); default: one budget for the process. */
  readonly headerBlockBudget?: HeaderBlockBudget;
  /** Server: a new request stream; the callee sets `stream.events` before returning. */
  onStream?(stream: H2Stream, block: HeaderBlock): void;
  /** The connection is gone (after its streams got `closed`); `code` is what ended it, `reason` ours when we did. */
  onClose?(code: number, reason: string | undefined): void;
  /**
   * Client: the peer will take no new streams (GOAWAY received, or the connection closing).
   * `code` is the error code of the peer's GOAWAY; undefined when the end is ours.
   */
  onGoaway?(code: number | undefined): void;
  /** The peer's first SETTINGS frame arrived (the preface is complete). */
  onReady?(): void;
}

/** What a stream reports to its consumer. Callbacks must not throw. */
export interface H2StreamEvents {
  /** Client: the final response head (`endStream`: no body follows). Both: trailers (`endStream` always true). */
  headers(stream: H2Stream, block: HeaderBlock, endStream: boolean): void;
  /** Body bytes (perhaps empty when `endStream`); hand {@link H2Stream.consumed} their length once they are used. */
  data(stream: H2Stream, chunk: Buffer, endStream: boolean): void;
  /** `n` bytes of this stream's own DATA went to the socket. */
  sent?(stream: H2Stream, n: number): void;
  /** The stream is over: `code` undefined when both sides ended it, else the reset's code (`byPeer`: theirs). */
  closed(stream: H2Stream, code: number | undefined, byPeer: boolean): void;
}

/** One HTTP/2 stream. Its methods do nothing once it is closed. */
export class H2Stream {
  /** 0 until a client stream's HEADERS are sent (it may wait for a concurrency slot). */
  id = 0;
  events: H2StreamEvents | undefined;
  readonly conn: H2Connection;
  /** The request's `:method` (client streams: what we sent; server streams: what the peer sent). */
  method = '';
  /** Response headers were sent (server) / received (client). */
  headersDone = false;
  localEnded = false;
  remoteEnded = false;
  closed = false;
  /** Request headers not yet sent (a client stream waiting for a slot). */
  pendingHead: { pairs: readonly string[]; sensitive: readonly string[] | undefined; endStream: boolean } | undefined;
  sendWindow = DEFAULT_WINDOW;
  recvWindow = DEFAULT_WINDOW;
  /** Bytes consumed but not yet credited back to the stream's window. */
  recvCredit = 0;
  /** Bytes received and handed over but not yet consumed. */
  held = 0;
  /** `content-length` of what the peer sends, or -1; and what arrived so far. */
  expectLength = -1;
  receivedLength = 0;
  /** Data waiting for window or socket. */
  queue: Buffer[] = [];
  queued = 0;
  /** End the stream once the queue is out: with these trailers, or (empty pairs) with END_STREAM on DATA. */
  endPending: { pairs: readonly string[]; sensitive: readonly string[] | undefined } | undefined;

  constructor(conn: H2Connection) {
    this.conn = conn;
  }

  /** Server: sends the response head; `endStream` ends the response with it. */
  respond(pairs: readonly string[], endStream: boolean, sensitive?: readonly string[]): void {
    this.conn.respond(this, pairs, endStream, sensitive);
  }

  /** Queues body bytes (sent as the windows allow). */
  write(chunk: Buffer): void {
    this.conn.write(this, chunk);
  }

  /** Ends our side once queued data is out: with trailers when `trailers` has fields. */
  end(trailers?: readonly string[], sensitive?: readonly string[]): void {
    this.conn.end(this, trailers, sensitive);
  }

  /** Resets the stream (RST_STREAM `code`); `closed` follows. */
  reset(code: number): void {
    this.conn.resetStream(this, code, false);
  }

  /** `n` received bytes were used: their window is credited back. */
  consumed(n: number): void {
    this.conn.consumed(this, n);
  }
}

/** One HTTP/2 connection over a socket that is already open (plain or TLS). */
export class H2Connection {
  readonly #socket: Duplex;
  readonly #server: boolean;
  readonly #opts: H2ConnectionOptions;
  readonly #maxStreams: number;
  readonly #maxList: number;
  readonly #maxFields: number;
  readonly #decoder = new HpackDecoder();
  readonly #encoder = new HpackEncoder();
  readonly #streams = new Map<number, H2Stream>();
  readonly #facts: MessageFacts = { contentLength: -1, method: '', status: 0 };

  // Input.
  #prefaceLeft: number;
  /** The start of a frame that did not arrive whole: its header only, or (`#restNeed` > 0) the whole frame's room. */
  #rest: Buffer | undefined;
  /** Bytes still missing from `#rest` when it is a whole frame's room. */
  #restNeed = 0;
  #settingsTimer: NodeJS.Timeout | undefined;
  #settingsSeen = false;
  #continuing: { id: number; flags: number; parts: Buffer[]; size: number; since: number } | undefined;
  readonly #budget: HeaderBlockBudget;
  /** Highest stream id the peer opened (server) / we opened (client). */
  #lastPeerId = 0;
  /** The last {@link CLOSED_MEMORY} streams closed by the peer's END_STREAM or RST_STREAM (a ring; 0: empty). */
  readonly #closedByPeerIds = new Int32Array(CLOSED_MEMORY);
  #closedAt = 0;
  /** Server: ranges [first, last] of stream ids the peer skipped (implicitly closed), the latest {@link SKIPPED_MEMORY}. */
  #skipped: number[] = [];
  #nextId = 1;
  #active = 0;
  /** Client streams waiting for a concurrency slot. */
  #waiting: H2Stream[] = [];

  // Flow control.
  #connRecvWindow: number;
  readonly #connWindowSize: number;
  #connRecvCredit = 0;
  /** Received bytes handed over and not yet consumed, over all streams (see {@link MAX_HELD_BYTES}). */
  #held = 0;
  /** Connection credit held back while {@link #held} is over the bound. */
  #deferredCredit = 0;
  #connSendWindow = DEFAULT_WINDOW;
  #peerInitialWindow = DEFAULT_WINDOW;
  #peerMaxFrame = MAX_FRAME;
  #peerMaxStreams = Number.POSITIVE_INFINITY;
  /** Streams with data queued, blocked on the connection window or the socket. */
  readonly #blocked = new Set<H2Stream>();

  // Output.
  readonly #w = new ByteWriter(4096);
  #chunks: Buffer[] = [];
  #flushScheduled = false;
  #socketFull = false;

  // Budgets and state.
  #resetBudget = RESET_BURST;
  #budgetAt = Date.now();
  #goawaySent = false;
  #goawayReceived = false;
  /** Client: stream ids are spent; the connection ends once its streams are done. */
  #idsSpent = false;
  #dead = false;
  /** Our PINGs waiting for their acknowledgement, by the number in their payload. */
  readonly #pings = new Map<number, () => void>();
  #pingSeq = 0;

  // Deadlines: one timer, for the nearest of the header block's and the idle connection's.
  readonly #headerBlockMs: number;
  readonly #idleMs: number;
  /** When the connection last had no stream open. */
  #idleSince: number;
  #deadlineTimer: NodeJS.Timeout | undefined;
  #deadlineAt = 0;

  constructor(socket: Duplex, opts: H2ConnectionOptions) {
    this.#socket = socket;
    this.#opts = opts;
    this.#server = opts.role === 'server';
    this.#maxStreams = opts.maxConcurrentStreams ?? 256;
    this.#maxList = opts.maxHeaderListSize ?? 64 * 1024;
    this.#budget = opts.headerBlockBudget ?? PROCESS_HEADER_BLOCK_BUDGET;
    this.#maxFields = opts.maxHeaderFields ?? MAX_HEADER_FIELDS;
    this.#connWindowSize = Math.max(DEFAULT_WINDOW, Math.min(opts.connectionWindow ?? 1024 * 1024, MAX_WINDOW));
    this.#connRecvWindow = this.#connWindowSize;
    this.#headerBlockMs = timeoutOption('headerBlockTimeoutMs', opts.headerBlockTimeoutMs ?? HEADER_BLOCK_TIMEOUT_MS, false);
    this.#idleMs = timeoutOption('idleTimeoutMs', opts.idleTimeoutMs ?? (this.#server ? SERVER_IDLE_TIMEOUT_MS : 0), true);
    this.#idleSince = Date.now();
    if (this.#idleMs > 0) this.#armDeadline(this.#idleSince + this.#idleMs);
    this.#prefaceLeft = this.#server ? CLIENT_PREFACE.length : 0;
    if (!this.#server) this.#chunks.push(CLIENT_PREFACE);
    const w = this.#w;
    const settings: number[] = [];
    if (this.#server) settings.push(SETTINGS_MAX_CONCURRENT_STREAMS, this.#maxStreams);
    else settings.push(SETTINGS_ENABLE_PUSH, 0);
    settings.push(SETTINGS_MAX_HEADER_LIST_SIZE, this.#maxList);
    this.#head(settings.length * 3, SETTINGS, 0, 0);
    for (let i = 0; i < settings.length; i += 2) {
      w.ensure(6);
      w.buf.writeUInt16BE(settings[i] as number, w.pos);
      w.buf.writeUInt32BE(settings[i + 1] as number, w.pos + 2);
      w.pos += 6;
    }
    if (this.#connWindowSize > DEFAULT_WINDOW) this.#windowUpdate(0, this.#connWindowSize - DEFAULT_WINDOW);
    this.#schedule();
    if (!this.#server) {
      this.#settingsTimer = setTimeout(() => {
        if (!this.#settingsSeen) this.#fail(H2_PROTOCOL_ERROR, 'no SETTINGS from the peer');
      }, opts.settingsTimeoutMs ?? SETTINGS_TIMEOUT_MS);
      this.#settingsTimer.unref();
    }
    socket.on('data', (d: Buffer) => {
      try {
        this.#onData(d);
      } catch (err) {
        // A defect (ours, or a consumer's callback): this connection fails, not the process. The
        // peer learns only that; the consumer gets the error.
        if (this.#dead) return;
        this.#goaway(H2_INTERNAL_ERROR, 'internal error');
        this.#teardown(H2_INTERNAL_ERROR, `internal error: ${(err as Error).stack ?? String(err)}`);
      }
    });
    socket.on('drain', () => this.#onDrain());
    socket.on('end', () => this.#onEnd());
    socket.on('error', () => this.#lost());
    socket.on('close', () => this.#lost());
    // A socket handed over after protocol detection may have been paused.
    socket.resume();
  }

  /** Streams open now. */
  get streamCount(): number {
    return this.#streams.size + this.#waiting.length;
  }

  /** False once the connection takes no new streams (closing, GOAWAY either way, gone). */
  get usable(): boolean {
    return !this.#dead && !this.#goawaySent && !this.#goawayReceived && !this.#idsSpent;
  }

  get destroyed(): boolean {
    return this.#dead;
  }

  // -------------------------------------------------------------------------------------------
  // Client side

  /**
   * Client: opens a request stream (HEADERS now, or once the peer's concurrency limit allows).
   * `events` must be set on the result right away; it may be closed already (check `closed`).
   * Undefined when the connection is not usable, or {@link MAX_WAITING_STREAMS} already wait.
   */
  request(pairs: readonly string[], endStream: boolean, sensitive?: readonly string[]): H2Stream | undefined {
    if (this.#server || !this.usable || this.#waiting.length >= MAX_WAITING_STREAMS) return undefined;
    if (this.#nextId + 2 * this.#waiting.length > MAX_STREAM_ID) {
      // Stream ids are spent: the streams that have one finish, then the connection ends.
      this.#idsSpent = true;
      this.#opts.onGoaway?.(undefined);
      this.#maybeEnd();
      return undefined;
    }
    const s = new H2Stream(this);
    s.pendingHead = { pairs, sensitive, endStream };
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      if (pairs[i] === ':method') {
        s.method = pairs[i + 1] as string;
        break;
      }
    }
    // Before the peer's SETTINGS its stream limit is unknown: wait for them.
    if (this.#settingsSeen && this.#active < this.#peerMaxStreams) this.#open(s);
    else this.#waiting.push(s);
    return s;
  }

  #open(s: H2Stream): void {
    const head = s.pendingHead;
    if (head === undefined) return;
    s.pendingHead = undefined;
    s.id = this.#nextId;
    this.#nextId += 2;
    s.sendWindow = this.#peerInitialWindow;
    this.#streams.set(s.id, s);
    this.#active++;
    this.#headerBlock(s.id, head.pairs, head.sensitive, head.endStream);
    if (head.endStream) s.localEnded = true;
    else this.#flushStream(s);
  }

  // -------------------------------------------------------------------------------------------
  // Stream operations (called through H2Stream)

  respond(s: H2Stream, pairs: readonly string[], endStream: boolean, sensitive?: readonly string[]): void {
    if (s.closed || s.headersDone || !this.#server) return;
    s.headersDone = true;
    this.#headerBlock(s.id, pairs, sensitive, endStream);
    if (endStream) this.#localEnd(s);
    else if (s.queued > 0 || s.endPending !== undefined) this.#flushStream(s);
  }

  write(s: H2Stream, chunk: Buffer): void {
    if (s.closed || s.localEnded || s.endPending !== undefined || chunk.length === 0) return;
    // A small slice of a large read must not keep the whole read alive while it waits.
    chunk = detached(chunk);
    s.queue.push(chunk);
    s.queued += chunk.length;
    // (A server stream's data waits for its response head: #flushStream checks.)
    if (s.id !== 0) this.#flushStream(s);
  }

  end(s: H2Stream, trailers: readonly string[] | undefined, sensitive: readonly string[] | undefined): void {
    if (s.closed || s.localEnded || s.endPending !== undefined) return;
    s.endPending = { pairs: trailers ?? EMPTY_PAIRS, sensitive };
    if (s.id !== 0) this.#flushStream(s);
  }

  consumed(s: H2Stream, n: number): void {
    if (n <= 0) return;
    n = Math.min(n, s.held);
    s.held -= n;
    this.#release(n);
    if (s.closed || s.remoteEnded) return;
    s.recvCredit += n;
    if (s.recvCredit >= DEFAULT_WINDOW / 2) {
      s.recvWindow += s.recvCredit;
      this.#windowUpdate(s.id, s.recvCredit);
      s.recvCredit = 0;
      this.#schedule();
    }
  }

  resetStream(s: H2Stream, code: number, byPeer: boolean): void {
    if (s.closed) return;
    if (s.localEnded && s.remoteEnded) {
      // Complete both ways (its close is being reported): closed already as far as the peer knows,
      // and a reset of a closed stream is a frame it may count against us (nghttp2 does: its
      // rapid-reset bound ends the connection after about a thousand).
      this.#finish(s, undefined, false);
      return;
    }
    if (s.id === 0) {
      // Never sent: just drop it from the queue.
      const i = this.#waiting.indexOf(s);
      if (i >= 0) this.#waiting.splice(i, 1);
    } else if (!byPeer && !this.#dead) {
      this.#rst(s.id, code);
    }
    this.#finish(s, code, byPeer);
  }

  // -------------------------------------------------------------------------------------------
  // Connection operations

  /** Graceful close: GOAWAY, no new streams, the socket ends once the open ones are over. */
  close(): void {
    if (this.#dead) return;
    if (!this.#goawaySent) {
      this.#goawaySent = true;
      this.#goaway(H2_NO_ERROR, '');
      for (const s of this.#waiting.splice(0)) this.#finish(s, H2_REFUSED_STREAM, false);
      this.#opts.onGoaway?.(undefined);
    }
    this.#maybeEnd();
  }

  /**
   * Sends a PING (a keepalive: the peer must answer it); `onAck` runs when the acknowledgement
   * arrives, never once the connection is gone. False, and nothing sent, when the connection is
   * gone or {@link MAX_PENDING_PINGS} wait already.
   */
  ping(onAck: () => void): boolean {
    if (this.#dead || this.#pings.size >= MAX_PENDING_PINGS) return false;
    this.#pingSeq = (this.#pingSeq + 1) >>> 0;
    const seq = this.#pingSeq;
    this.#pings.set(seq, onAck);
    this.#head(8, PING, 0, 0);
    const w = this.#w;
    w.ensure(8);
    w.buf.writeUInt32BE(0, w.pos);
    w.buf.writeUInt32BE(seq, w.pos + 4);
    w.pos += 8;
    this.#control();
    return true;
  }

  /** Closes at once: open streams are reset (CANCEL) and the socket destroyed. */
  destroy(): void {
    if (this.#dead) return;
    this.#teardown(H2_CANCEL, 'destroyed');
    this.#socket.destroy();
  }

  // -------------------------------------------------------------------------------------------
  // Input

  #onData(chunk: Buffer): void {
    if (this.#dead) return;
    let buf = chunk;
    const rest = this.#rest;
    if (rest !== undefined) {
      this.#rest = undefined;
      const need = this.#restNeed;
      if (need === 0) buf = Buffer.concat([rest, chunk]);
      else {
        // A frame of known size: fill its room, handle it alone, then go on with the rest of the chunk.
        const n = Math.min(need, chunk.length);
        chunk.copy(rest, rest.length - need, 0, n);
        if (n < need) {
          this.#rest = rest;
          this.#restNeed = need - n;
          return;
        }
        this.#restNeed = 0;
        this.#frames(rest, 0);
        if (this.#dead || n === chunk.length) return;
        buf = chunk.subarray(n);
      }
    }
    let pos = 0;
    if (this.#prefaceLeft > 0) {
      const start = CLIENT_PREFACE.length - this.#prefaceLeft;
      const n = Math.min(this.#prefaceLeft, buf.length);
      if (buf.compare(CLIENT_PREFACE, start, start + n, 0, n) !== 0) {
        this.#fail(H2_PROTOCOL_ERROR, 'not an HTTP/2 connection preface');
        return;
      }
      this.#prefaceLeft -= n;
      pos = n;
    }
    this.#frames(buf, pos);
  }

  /** Handles the frames in `buf` from `pos`; keeps an incomplete last one for the next read. */
  #frames(buf: Buffer, pos: number): void {
    const end = buf.length;
    while (end - pos >= 9) {
      const len = ((buf[pos] as number) << 16) | ((buf[pos + 1] as number) << 8) | (buf[pos + 2] as number);
      if (len > MAX_FRAME) {
        this.#fail(H2_FRAME_SIZE_ERROR, `frame of ${len} bytes`);
        return;
      }
      if (end - pos - 9 < len) {
        // Room for the whole frame, so the rest of it is copied once, not again with every read.
        const room = Buffer.allocUnsafe(9 + len);
        buf.copy(room, 0, pos, end);
        this.#rest = room;
        this.#restNeed = 9 + len - (end - pos);
        return;
      }
      const type = buf[pos + 3] as number;
      const flags = buf[pos + 4] as number;
      const id = buf.readUInt32BE(pos + 5) & 0x7fff_ffff;
      const payload = buf.subarray(pos + 9, pos + 9 + len);
      pos += 9 + len;
      this.#frame(type, flags, id, payload);
      if (this.#dead) return;
    }
    // Keep a copy of the partial frame header only, not the chunk it came in.
    if (pos < end) this.#rest = Buffer.from(buf.subarray(pos));
  }

  #frame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.#continuing !== undefined && (type !== CONTINUATION || id !== this.#continuing.id)) {
      this.#fail(H2_PROTOCOL_ERROR, 'header block not continued');
      return;
    }
    if (!this.#settingsSeen && type !== SETTINGS) {
      this.#fail(H2_PROTOCOL_ERROR, 'first frame is not SETTINGS');
      return;
    }
    switch (type) {
      case DATA:
        this.#onDataFrame(flags, id, payload);
        return;
      case HEADERS:
        this.#onHeadersFrame(flags, id, payload);
        return;
      case CONTINUATION:
        this.#onContinuation(flags, id, payload);
        return;
      case PRIORITY:
        if (id === 0) this.#fail(H2_PROTOCOL_ERROR, 'PRIORITY on stream 0');
        else if (payload.length !== 5) this.#streamError(id, H2_FRAME_SIZE_ERROR);
        else if ((payload.readUInt32BE(0) & 0x7fff_ffff) === id) {
          // A stream error (RFC 9113 §5.3.1), but an idle stream must not be named by RST_STREAM.
          if (this.#idle(id)) this.#fail(H2_PROTOCOL_ERROR, `stream ${id} depends on itself`);
          else this.#streamError(id, H2_PROTOCOL_ERROR);
        }
        return;
      case RST_STREAM:
        this.#onRst(id, payload);
        return;
      case SETTINGS:
        this.#onSettings(flags, id, payload);
        return;
      case PUSH_PROMISE:
        this.#fail(H2_PROTOCOL_ERROR, 'PUSH_PROMISE');
        return;
      case PING:
        if (id !== 0) this.#fail(H2_PROTOCOL_ERROR, 'PING on a stream');
        else if (payload.length !== 8) this.#fail(H2_FRAME_SIZE_ERROR, 'PING size');
        else if ((flags & FLAG_ACK) === 0) {
          this.#head(8, PING, FLAG_ACK, 0);
          this.#bytes(payload);
          this.#control();
        } else if (payload.readUInt32BE(0) === 0) {
          // An acknowledgement of ours (one we did not send is ignored).
          const seq = payload.readUInt32BE(4);
          const onAck = this.#pings.get(seq);
          this.#pings.delete(seq);
          onAck?.();
        }
        return;
      case GOAWAY:
        this.#onGoaway(id, payload);
        return;
      case WINDOW_UPDATE:
        this.#onWindowUpdate(id, payload);
        return;
      default:
      // Unknown frame types are ignored (RFC 9113 §5.5).
    }
  }

  /** True when `id` names a stream that was never opened (by the side that would open it). */
  #idle(id: number): boolean {
    const peerOpened = (id & 1) === (this.#server ? 1 : 0);
    return peerOpened ? id > this.#lastPeerId : id >= this.#nextId;
  }

  /**
   * True when `id` is a stream the peer closed lately (its END_STREAM or RST_STREAM) or, as a
   * server, one it skipped: it may send nothing more there, DATA and HEADERS are a connection
   * error STREAM_CLOSED (RFC 9113 §5.1). Other closed streams are ones we reset, where frames
   * the peer sent before it learnt of that are to be expected and ignored.
   */
  #closedByPeer(id: number): boolean {
    return this.#closedByPeerIds.includes(id) || this.#wasSkipped(id);
  }

  #wasSkipped(id: number): boolean {
    const r = this.#skipped;
    for (let i = 0; i + 1 < r.length; i += 2) if (id >= (r[i] as number) && id <= (r[i + 1] as number)) return true;
    return false;
  }

  /** Server: the peer opened stream `id` (above every earlier one); the ids it skipped are closed. */
  #openPeerId(id: number): void {
    const next = this.#lastPeerId === 0 ? 1 : this.#lastPeerId + 2;
    if (id > next) {
      this.#skipped.push(next, id - 2);
      if (this.#skipped.length > 2 * SKIPPED_MEMORY) this.#skipped.splice(0, 2);
    }
    this.#lastPeerId = id;
  }

  #onDataFrame(flags: number, id: number, payload: Buffer): void {
    if (id === 0) {
      this.#fail(H2_PROTOCOL_ERROR, 'DATA on stream 0');
      return;
    }
    const total = payload.length;
    if (total > this.#connRecvWindow) {
      this.#fail(H2_FLOW_CONTROL_ERROR, 'connection window exceeded');
      return;
    }
    this.#connRecvWindow -= total;
    // The connection's window is credited on receipt: stream windows do the backpressure, so one
    // stream whose reader is slow cannot stall the others. Unless the connection holds too much.
    if (this.#held < MAX_HELD_BYTES) this.#creditConnection(total);
    else this.#deferredCredit += total;
    let data = payload;
    if (flags & FLAG_PADDED) {
      const pad = total > 0 ? (payload[0] as number) : 0;
      if (total === 0 || pad >= total) {
        this.#fail(H2_PROTOCOL_ERROR, 'padding exceeds the frame');
        return;
      }
      data = payload.subarray(1, total - pad);
    }
    const s = this.#streams.get(id);
    if (s === undefined || s.remoteEnded || (!this.#server && !s.headersDone)) {
      if (s === undefined && this.#idle(id)) this.#fail(H2_PROTOCOL_ERROR, 'DATA on an idle stream');
      else if (s !== undefined) this.#streamError(id, s.remoteEnded ? H2_STREAM_CLOSED : H2_PROTOCOL_ERROR);
      else if (this.#closedByPeer(id)) this.#fail(H2_STREAM_CLOSED, `DATA on closed stream ${id}`);
      // else: a stream we reset, with data in flight: ignored.
      return;
    }
    if (total > s.recvWindow) {
      this.#streamError(id, H2_FLOW_CONTROL_ERROR);
      return;
    }
    s.recvWindow -= total;
    // Padding counts against the stream's window but is never consumed by anyone: credit it now.
    if (data.length < total) {
      s.held += total - data.length;
      this.#held += total - data.length;
      this.consumed(s, total - data.length);
    }
    const endStream = (flags & FLAG_END_STREAM) !== 0;
    if (data.length === 0 && !endStream && total === 0) this.#spend(1);
    if (this.#dead) return;
    s.receivedLength += data.length;
    if (s.expectLength >= 0 && (s.receivedLength > s.expectLength || (endStream && s.receivedLength !== s.expectLength))) {
      this.#streamError(id, H2_PROTOCOL_ERROR);
      return;
    }
    s.held += data.length;
    this.#held += data.length;
    if (endStream) s.remoteEnded = true;
    s.events?.data(s, data, endStream);
    if (endStream) this.#maybeClosed(s);
  }

  #onHeadersFrame(flags: number, id: number, payload: Buffer): void {
    if (id === 0) {
      this.#fail(H2_PROTOCOL_ERROR, 'HEADERS on stream 0');
      return;
    }
    let start = 0;
    let end = payload.length;
    if (flags & FLAG_PADDED) {
      const pad = end > 0 ? (payload[0] as number) : 0;
      start = 1;
      end -= pad;
    }
    if (flags & FLAG_PRIORITY) start += 5;
    if (end < start) {
      this.#fail(H2_PROTOCOL_ERROR, 'padding exceeds the frame');
      return;
    }
    if (flags & FLAG_PRIORITY && (payload.readUInt32BE(start - 5) & 0x7fff_ffff) === id) flags |= SELF_DEPENDENT;
    const fragment = payload.subarray(start, end);
    if (flags & FLAG_END_HEADERS) this.#onHeaderBlock(id, flags, fragment);
    else {
      if (!this.#hold(fragment.length)) return;
      const since = Date.now();
      this.#continuing = { id, flags, parts: [Buffer.from(fragment)], size: fragment.length, since };
      this.#armDeadline(since + this.#headerBlockMs);
    }
  }

  /** Accounts `n` more bytes of an unfinished header block; false (the connection failed) past a bound. */
  #hold(n: number): boolean {
    const budget = this.#budget;
    if ((this.#continuing?.size ?? 0) + n > this.#maxList) {
      this.#fail(H2_ENHANCE_YOUR_CALM, 'header block too large');
      return false;
    }
    if (budget.used + n > budget.max) {
      this.#fail(H2_ENHANCE_YOUR_CALM, 'too many unfinished header blocks');
      return false;
    }
    budget.used += n;
    return true;
  }

  /** The unfinished header block is over (complete or dropped): its bytes go back to the budget. */
  #releaseBlock(): void {
    const c = this.#continuing;
    if (c === undefined) return;
    this.#continuing = undefined;
    this.#budget.used -= c.size;
  }

  #onContinuation(flags: number, id: number, payload: Buffer): void {
    const c = this.#continuing;
    if (c === undefined || c.id !== id) {
      this.#fail(H2_PROTOCOL_ERROR, 'CONTINUATION out of place');
      return;
    }
    if (!this.#hold(payload.length)) return;
    c.size += payload.length;
    if (payload.length === 0 && (flags & FLAG_END_HEADERS) === 0) this.#spend(1);
    if (this.#dead) return;
    c.parts.push(Buffer.from(payload));
    if (flags & FLAG_END_HEADERS) {
      this.#releaseBlock();
      this.#onHeaderBlock(id, c.flags, Buffer.concat(c.parts, c.size));
    }
  }

  #onHeaderBlock(id: number, flags: number, block: Buffer): void {
    const decoded = this.#decoder.decode(block, this.#maxList, this.#maxFields);
    if (typeof decoded === 'string') {
      this.#fail(H2_COMPRESSION_ERROR, `header block: ${decoded}`);
      return;
    }
    const endStream = (flags & FLAG_END_STREAM) !== 0;
    const s = this.#streams.get(id);
    if (s === undefined) {
      const peerOpened = (id & 1) === (this.#server ? 1 : 0);
      if (!this.#server || !peerOpened || id <= this.#lastPeerId) {
        // The block was decoded all the same: the table stays in step.
        if (this.#idle(id)) this.#fail(H2_PROTOCOL_ERROR, `HEADERS on idle stream ${id}`);
        else if (this.#wasSkipped(id)) this.#fail(H2_PROTOCOL_ERROR, `stream ${id} opened after a higher one`);
        else if (this.#closedByPeer(id)) this.#fail(H2_STREAM_CLOSED, `HEADERS on closed stream ${id}`);
        // Else a stream we reset: its trailers are ignored, and not charged (RFC 9113 §5.1:
        // frames in flight when we reset are to be expected).
        return;
      }
      this.#openPeerId(id);
      if (flags & SELF_DEPENDENT) this.#streamError(id, H2_PROTOCOL_ERROR);
      else this.#onRequest(id, decoded, endStream);
      return;
    }
    if (flags & SELF_DEPENDENT) {
      this.#streamError(id, H2_PROTOCOL_ERROR);
      return;
    }
    if (!this.#server && !s.headersDone) {
      this.#onResponse(s, decoded, endStream);
      return;
    }
    // Trailers.
    if (s.remoteEnded) {
      this.#streamError(id, H2_STREAM_CLOSED);
      return;
    }
    if (!endStream || this.#tooLarge(decoded) || messageProblem('trailers', decoded.pairs, this.#facts) !== undefined) {
      this.#streamError(id, H2_PROTOCOL_ERROR);
      return;
    }
    if (s.expectLength >= 0 && s.receivedLength !== s.expectLength) {
      this.#streamError(id, H2_PROTOCOL_ERROR);
      return;
    }
    s.remoteEnded = true;
    s.events?.headers(s, decoded, true);
    this.#maybeClosed(s);
  }

  /** Over the header list bounds (size or fields): not collected whole, so never handed on. */
  #tooLarge(decoded: HeaderBlock): boolean {
    return decoded.listSize > this.#maxList || decoded.count > this.#maxFields;
  }

  #onRequest(id: number, decoded: HeaderBlock, endStream: boolean): void {
    if (this.#goawaySent || this.#active >= this.#maxStreams) {
      this.#streamError(id, H2_REFUSED_STREAM);
      return;
    }
    const s = new H2Stream(this);
    s.id = id;
    s.sendWindow = this.#peerInitialWindow;
    s.remoteEnded = endStream;
    this.#streams.set(id, s);
    this.#active++;
    if (this.#tooLarge(decoded)) {
      s.headersDone = true;
      this.#headerBlock(id, [':status', '431', 'content-length', '0'], undefined, true);
      this.#localEnd(s);
      if (!s.closed) this.resetStream(s, H2_NO_ERROR, false);
      return;
    }
    const problem = messageProblem('request', decoded.pairs, this.#facts);
    if (problem !== undefined) {
      this.resetStream(s, H2_PROTOCOL_ERROR, false);
      this.#spend(1);
      return;
    }
    s.method = this.#facts.method;
    s.expectLength = this.#facts.contentLength;
    if (endStream && s.expectLength > 0) {
      this.resetStream(s, H2_PROTOCOL_ERROR, false);
      return;
    }
    this.#opts.onStream?.(s, decoded);
    if (s.events === undefined && !s.closed) this.resetStream(s, H2_REFUSED_STREAM, false);
  }

  #onResponse(s: H2Stream, decoded: HeaderBlock, endStream: boolean): void {
    const facts = this.#facts;
    if (this.#tooLarge(decoded) || messageProblem('response', decoded.pairs, facts) !== undefined) {
      this.resetStream(s, H2_PROTOCOL_ERROR, false);
      return;
    }
    if (facts.status < 200) {
      // Informational responses are not relayed; one with END_STREAM is malformed.
      if (endStream || facts.status === 101) this.resetStream(s, H2_PROTOCOL_ERROR, false);
      return;
    }
    s.headersDone = true;
    const bodiless = s.method === 'HEAD' || facts.status === 204 || facts.status === 304;
    s.expectLength = bodiless ? 0 : facts.contentLength;
    if (endStream) {
      if (!bodiless && s.expectLength > 0) {
        this.resetStream(s, H2_PROTOCOL_ERROR, false);
        return;
      }
      s.remoteEnded = true;
    }
    s.events?.headers(s, decoded, endStream);
    if (endStream) this.#maybeClosed(s);
  }

  #onRst(id: number, payload: Buffer): void {
    if (payload.length !== 4) {
      this.#fail(H2_FRAME_SIZE_ERROR, 'RST_STREAM size');
      return;
    }
    if (id === 0 || this.#idle(id)) {
      this.#fail(H2_PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
      return;
    }
    this.#spend(1);
    if (this.#dead) return;
    const s = this.#streams.get(id);
    if (s === undefined) return;
    this.#noteClosedByPeer(id);
    this.resetStream(s, payload.readUInt32BE(0), true);
  }

  #noteClosedByPeer(id: number): void {
    this.#closedByPeerIds[this.#closedAt] = id;
    this.#closedAt = (this.#closedAt + 1) % CLOSED_MEMORY;
  }

  #onSettings(flags: number, id: number, payload: Buffer): void {
    if (id !== 0) {
      this.#fail(H2_PROTOCOL_ERROR, 'SETTINGS on a stream');
      return;
    }
    if (flags & FLAG_ACK) {
      if (payload.length !== 0) this.#fail(H2_FRAME_SIZE_ERROR, 'SETTINGS ack with a payload');
      return;
    }
    if (payload.length % 6 !== 0) {
      this.#fail(H2_FRAME_SIZE_ERROR, 'SETTINGS size');
      return;
    }
    // Each one costs an acknowledgement (and may walk every stream): a flood of them draws on the budget.
    if (this.#settingsSeen) this.#spend(1);
    if (this.#dead) return;
    const window = this.#peerInitialWindow;
    const frame = this.#peerMaxFrame;
    const streams = this.#peerMaxStreams;
    let initialWindow = window;
    for (let i = 0; i < payload.length; i += 6) {
      const key = payload.readUInt16BE(i);
      const value = payload.readUInt32BE(i + 2);
      switch (key) {
        case SETTINGS_HEADER_TABLE_SIZE:
          this.#encoder.setLimit(value);
          break;
        case SETTINGS_ENABLE_PUSH:
          if (value > 1 || (!this.#server && value !== 0)) {
            this.#fail(H2_PROTOCOL_ERROR, 'bad ENABLE_PUSH');
            return;
          }
          break;
        case SETTINGS_MAX_CONCURRENT_STREAMS:
          this.#peerMaxStreams = value;
          break;
        case SETTINGS_INITIAL_WINDOW_SIZE:
          if (value > MAX_WINDOW) {
            this.#fail(H2_FLOW_CONTROL_ERROR, 'INITIAL_WINDOW_SIZE too large');
            return;
          }
          initialWindow = value;
          break;
        case SETTINGS_MAX_FRAME_SIZE:
          if (value < MAX_FRAME || value > 0xff_ffff) {
            this.#fail(H2_PROTOCOL_ERROR, 'bad MAX_FRAME_SIZE');
            return;
          }
          this.#peerMaxFrame = value;
          break;
        default:
        // SETTINGS_MAX_HEADER_LIST_SIZE is advisory; unknown settings are ignored.
      }
    }
    // The windows move once, by the frame's net change (the streams are walked once per frame).
    const delta = initialWindow - window;
    if (delta !== 0) {
      this.#peerInitialWindow = initialWindow;
      for (const s of this.#streams.values()) {
        s.sendWindow += delta;
        if (s.sendWindow > MAX_WINDOW) {
          this.#fail(H2_FLOW_CONTROL_ERROR, 'stream window overflow');
          return;
        }
      }
    }
    this.#head(0, SETTINGS, FLAG_ACK, 0);
    this.#control();
    if (this.#dead) return;
    const first = !this.#settingsSeen;
    this.#settingsSeen = true;
    if (first) {
      clearTimeout(this.#settingsTimer);
      this.#opts.onReady?.();
    }
    if (first || this.#peerMaxStreams > streams) this.#openWaiting();
    // Queued data may go now only if a window or the frame size grew.
    if (delta > 0 || this.#peerMaxFrame > frame) {
      for (const s of this.#streams.values()) if (s.queued > 0 || s.endPending !== undefined) this.#flushStream(s);
    }
  }

  /** Opens waiting client streams while the peer's concurrency limit allows. */
  #openWaiting(): void {
    while (this.#waiting.length > 0 && this.#active < this.#peerMaxStreams && !this.#dead) this.#open(this.#waiting.shift() as H2Stream);
  }

  #onGoaway(id: number, payload: Buffer): void {
    if (id !== 0) {
      this.#fail(H2_PROTOCOL_ERROR, 'GOAWAY on a stream');
      return;
    }
    if (payload.length < 8) {
      this.#fail(H2_FRAME_SIZE_ERROR, 'GOAWAY size');
      return;
    }
    const lastId = payload.readUInt32BE(0) & 0x7fff_ffff;
    const first = !this.#goawayReceived;
    this.#goawayReceived = true;
    // Our streams the peer never saw may be retried elsewhere: refused.
    for (const s of this.#waiting.splice(0)) this.#finish(s, H2_REFUSED_STREAM, true);
    for (const s of [...this.#streams.values()]) {
      if ((s.id & 1) === (this.#server ? 0 : 1) && s.id > lastId) this.#finish(s, H2_REFUSED_STREAM, true);
    }
    if (first) this.#opts.onGoaway?.(payload.readUInt32BE(4));
    this.#maybeEnd();
  }

  #onWindowUpdate(id: number, payload: Buffer): void {
    if (payload.length !== 4) {
      this.#fail(H2_FRAME_SIZE_ERROR, 'WINDOW_UPDATE size');
      return;
    }
    const inc = payload.readUInt32BE(0) & 0x7fff_ffff;
    if (id === 0) {
      if (inc === 0) {
        this.#fail(H2_PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
        return;
      }
      this.#connSendWindow += inc;
      if (this.#connSendWindow > MAX_WINDOW) {
        this.#fail(H2_FLOW_CONTROL_ERROR, 'connection window overflow');
        return;
      }
      this.#resumeBlocked();
      return;
    }
    const s = this.#streams.get(id);
    if (s === undefined) {
      if (this.#idle(id)) this.#fail(H2_PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return;
    }
    if (inc === 0) {
      this.#streamError(id, H2_PROTOCOL_ERROR);
      return;
    }
    s.sendWindow += inc;
    if (s.sendWindow > MAX_WINDOW) {
      this.#streamError(id, H2_FLOW_CONTROL_ERROR);
      return;
    }
    this.#flushStream(s);
  }

  #onDrain(): void {
    this.#socketFull = false;
    this.#resumeBlocked();
  }

  #onEnd(): void {
    // The peer sends nothing more: streams still waiting for its data cannot complete.
    for (const s of [...this.#streams.values()]) if (!s.remoteEnded) this.resetStream(s, H2_CANCEL, false);
    this.close();
  }

  #lost(): void {
    if (this.#dead) return;
    this.#teardown(H2_CANCEL, 'connection lost');
  }

  // -------------------------------------------------------------------------------------------
  // Output

  /** A frame header into the batch. */
  #head(len: number, type: number, flags: number, id: number): void {
    const w = this.#w;
    w.ensure(9);
    const b = w.buf;
    const p = w.pos;
    b[p] = len >>> 16;
    b[p + 1] = (len >>> 8) & 0xff;
    b[p + 2] = len & 0xff;
    b[p + 3] = type;
    b[p + 4] = flags;
    b.writeUInt32BE(id, p + 5);
    w.pos = p + 9;
  }

  #bytes(data: Buffer): void {
    if (data.length < COPY_BELOW) {
      const w = this.#w;
      w.ensure(data.length);
      data.copy(w.buf, w.pos);
      w.pos += data.length;
      return;
    }
    const w = this.#w;
    if (w.pos > 0) this.#chunks.push(w.take());
    this.#chunks.push(data);
  }

  /** A control frame was queued: written soon, unless the peer lets too much pile up. */
  #control(): void {
    if (this.#socket.writableLength > MAX_BACKLOG_BYTES) {
      this.#fail(H2_ENHANCE_YOUR_CALM, 'peer does not read');
      return;
    }
    this.#schedule();
  }

  /** A frame whose payload is one 32-bit value (WINDOW_UPDATE, RST_STREAM). */
  #u32Frame(type: number, id: number, value: number): void {
    this.#head(4, type, 0, id);
    const w = this.#w;
    w.ensure(4);
    w.buf.writeUInt32BE(value, w.pos);
    w.pos += 4;
  }

  #windowUpdate(id: number, inc: number): void {
    this.#u32Frame(WINDOW_UPDATE, id, inc);
  }

  #rst(id: number, code: number): void {
    this.#u32Frame(RST_STREAM, id, code);
    this.#control();
  }

  #goaway(code: number, reason: string): void {
    const debug = Buffer.from(reason.slice(0, 200), 'latin1');
    this.#head(8 + debug.length, GOAWAY, 0, 0);
    const w = this.#w;
    w.ensure(8);
    w.buf.writeUInt32BE(this.#server ? this.#lastPeerId : 0, w.pos);
    w.buf.writeUInt32BE(code, w.pos + 4);
    w.pos += 8;
    this.#bytes(debug);
    this.#schedule();
  }

  /** A header block as HEADERS (+ CONTINUATION) frames within the peer's frame size. */
  #headerBlock(id: number, pairs: readonly string[], sensitive: readonly string[] | undefined, endStream: boolean): void {
    const w = this.#w;
    // Encode in place after room for the first frame header; split afterwards if too large.
    w.ensure(9);
    const headAt = w.pos;
    w.pos += 9;
    try {
      this.#encoder.encode(w, pairs, sensitive);
    } catch (err) {
      // Nothing of the block goes out, and the table may have changed: the connection cannot go on.
      w.pos = headAt;
      this.#fail(H2_INTERNAL_ERROR, `header block not encoded: ${(err as Error).message}`);
      return;
    }
    const len = w.pos - headAt - 9;
    const flags = endStream ? FLAG_END_STREAM : 0;
    if (len <= this.#peerMaxFrame) {
      const end = w.pos;
      w.pos = headAt;
      this.#head(len, HEADERS, flags | FLAG_END_HEADERS, id);
      w.pos = end;
    } else {
      const block = Buffer.from(w.buf.subarray(headAt + 9, w.pos));
      w.pos = headAt;
      for (let off = 0; off < block.length; off += this.#peerMaxFrame) {
        const part = block.subarray(off, off + this.#peerMaxFrame);
        const last = off + this.#peerMaxFrame >= block.length;
        this.#head(part.length, off === 0 ? HEADERS : CONTINUATION, (off === 0 ? flags : 0) | (last ? FLAG_END_HEADERS : 0), id);
        this.#bytes(part);
      }
    }
    this.#control();
  }

  /** Sends what the windows and the socket allow of `s`'s queue, then its end if due. */
  #flushStream(s: H2Stream): void {
    // A server stream's data waits for its response head.
    if (s.closed || this.#dead || (this.#server && !s.headersDone)) return;
    while (s.queued > 0) {
      if (this.#socketFull || this.#connSendWindow <= 0) {
        this.#blocked.add(s);
        return;
      }
      if (s.sendWindow <= 0) return;
      const chunk = s.queue[0] as Buffer;
      const n = Math.min(chunk.length, s.sendWindow, this.#connSendWindow, this.#peerMaxFrame);
      const part = n === chunk.length ? chunk : chunk.subarray(0, n);
      if (n === chunk.length) s.queue.shift();
      else s.queue[0] = chunk.subarray(n);
      s.queued -= n;
      s.sendWindow -= n;
      this.#connSendWindow -= n;
      const last = s.queued === 0 && s.endPending !== undefined && s.endPending.pairs.length === 0;
      this.#head(n, DATA, last ? FLAG_END_STREAM : 0, s.id);
      this.#bytes(part);
      this.#schedule();
      s.events?.sent?.(s, n);
      if (s.closed) return;
      if (last) {
        s.endPending = undefined;
        this.#localEnd(s);
        return;
      }
    }
    this.#blocked.delete(s);
    const endPending = s.endPending;
    if (endPending !== undefined) {
      s.endPending = undefined;
      if (endPending.pairs.length > 0) this.#headerBlock(s.id, endPending.pairs, endPending.sensitive, true);
      else {
        this.#head(0, DATA, FLAG_END_STREAM, s.id);
        this.#schedule();
      }
      this.#localEnd(s);
    }
  }

  #resumeBlocked(): void {
    for (const s of this.#blocked) {
      if (this.#socketFull || this.#connSendWindow <= 0) return;
      this.#blocked.delete(s);
      this.#flushStream(s);
    }
  }

  #schedule(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    queueMicrotask(() => this.#flush());
  }

  #flush(): void {
    this.#flushScheduled = false;
    const socket = this.#socket;
    const w = this.#w;
    if (socket.destroyed || !socket.writable) {
      w.pos = 0;
      this.#chunks = [];
      return;
    }
    let ok: boolean;
    if (this.#chunks.length === 0) {
      if (w.pos === 0) return;
      ok = socket.write(w.take());
    } else {
      if (w.pos > 0) this.#chunks.push(w.take());
      const chunks = this.#chunks;
      this.#chunks = [];
      socket.cork();
      ok = true;
      for (const c of chunks) ok = socket.write(c);
      socket.uncork();
    }
    if (!ok) this.#socketFull = true;
    if (this.#dead) socket.end();
  }

  // -------------------------------------------------------------------------------------------
  // Stream and connection ends

  /** `n` held bytes were consumed or dropped: credit held back goes out once under the bound. */
  #release(n: number): void {
    this.#held -= n;
    if (this.#deferredCredit > 0 && this.#held < MAX_HELD_BYTES) {
      const credit = this.#deferredCredit;
      this.#deferredCredit = 0;
      this.#creditConnection(credit);
    }
  }

  /** Credits `n` connection-level bytes back to the peer (in halves of the window). */
  #creditConnection(n: number): void {
    this.#connRecvCredit += n;
    if (this.#connRecvCredit >= this.#connWindowSize / 2 && !this.#dead) {
      this.#connRecvWindow += this.#connRecvCredit;
      this.#windowUpdate(0, this.#connRecvCredit);
      this.#connRecvCredit = 0;
      this.#schedule();
    }
  }

  #localEnd(s: H2Stream): void {
    s.localEnded = true;
    // A complete response before the whole request: the client may stop sending (RFC 9113 §8.1).
    if (this.#server && !s.remoteEnded) this.resetStream(s, H2_NO_ERROR, false);
    else this.#maybeClosed(s);
  }

  #maybeClosed(s: H2Stream): void {
    if (s.localEnded && s.remoteEnded && !s.closed) this.#finish(s, undefined, false);
  }

  /** A stream error: RST_STREAM `code` (and `closed` for a stream we hold), charged to the peer's budget. */
  #streamError(id: number, code: number): void {
    const s = this.#streams.get(id);
    if (s !== undefined) this.resetStream(s, code, false);
    else this.#rst(id, code);
    this.#spend(1);
  }

  #finish(s: H2Stream, code: number | undefined, byPeer: boolean): void {
    if (s.closed) return;
    s.closed = true;
    if (s.id !== 0 && this.#streams.delete(s.id)) {
      this.#active--;
      if (s.remoteEnded) this.#noteClosedByPeer(s.id);
      if (this.#streams.size === 0 && this.#idleMs > 0) {
        this.#idleSince = Date.now();
        this.#armDeadline(this.#idleSince + this.#idleMs);
      }
    }
    this.#blocked.delete(s);
    s.queue = [];
    s.queued = 0;
    s.endPending = undefined;
    // What its consumer will never consume is no longer held.
    this.#release(s.held);
    s.held = 0;
    s.events?.closed(s, code, byPeer);
    if (this.#dead) return;
    this.#openWaiting();
    this.#maybeEnd();
  }

  /** After GOAWAY either way: the socket ends once no stream is left. */
  #maybeEnd(): void {
    if (this.#dead || (!this.#goawaySent && !this.#goawayReceived && !this.#idsSpent) || this.#streams.size > 0 || this.#waiting.length > 0) return;
    this.#teardown(H2_NO_ERROR, undefined);
  }

  /** Makes the deadline timer fire by `at` (it may fire earlier: {@link #onDeadline} checks what is due). */
  #armDeadline(at: number): void {
    if (this.#dead || (this.#deadlineTimer !== undefined && this.#deadlineAt <= at)) return;
    clearTimeout(this.#deadlineTimer);
    this.#deadlineAt = at;
    this.#deadlineTimer = setTimeout(() => this.#onDeadline(), Math.max(0, at - Date.now()));
    this.#deadlineTimer.unref();
  }

  /** An unfinished header block past its deadline fails the connection; an idle one is closed. */
  #onDeadline(): void {
    this.#deadlineTimer = undefined;
    if (this.#dead) return;
    const now = Date.now();
    const block = this.#continuing;
    if (block !== undefined) {
      if (now - block.since >= this.#headerBlockMs) {
        this.#fail(H2_ENHANCE_YOUR_CALM, 'header block timeout');
        return;
      }
      this.#armDeadline(block.since + this.#headerBlockMs);
    }
    if (this.#idleMs > 0 && this.#streams.size === 0 && this.#waiting.length === 0) {
      if (now - this.#idleSince >= this.#idleMs) this.close();
      else this.#armDeadline(this.#idleSince + this.#idleMs);
    }
  }

  /** Spends `n` of the peer's reset budget; an empty budget ends the connection. */
  #spend(n: number): void {
    const now = Date.now();
    const refill = ((now - this.#budgetAt) * RESET_REFILL_PER_S) / 1000;
    if (refill >= 1) {
      this.#resetBudget = Math.min(RESET_BURST, this.#resetBudget + Math.floor(refill));
      this.#budgetAt = now;
    }
    this.#resetBudget -= n;
    if (this.#resetBudget < 0) this.#fail(H2_ENHANCE_YOUR_CALM, 'too many resets or empty frames');
  }

  /** A connection error: GOAWAY `code`, every stream closed, the socket ended. */
  #fail(code: number, reason: string): void {
    if (this.#dead) return;
    this.#goaway(code, reason);
    this.#teardown(code, reason);
  }

  #teardown(code: number, reason: string | undefined): void {
    this.#dead = true;
    clearTimeout(this.#deadlineTimer);
    this.#releaseBlock();
    this.#rest = undefined;
    this.#restNeed = 0;
    clearTimeout(this.#settingsTimer);
    this.#pings.clear();
    const streamCode = code === H2_NO_ERROR ? H2_CANCEL : code;
    for (const s of this.#waiting.splice(0)) this.#finish(s, H2_REFUSED_STREAM, true);
    for (const s of [...this.#streams.values()]) this.#finish(s, streamCode, true);
    this.#blocked.clear();
    if (!this.#goawaySent && !this.#goawayReceived && !this.#idsSpent) this.#opts.onGoaway?.(undefined);
    this.#goawaySent = true;
    this.#flush();
    const socket = this.#socket;
    if (!socket.destroyed) {
      socket.end();
      // A graceful end lets a slow reader have what was buffered for it; an error does not wait.
      if (code === H2_NO_ERROR) lingerThenDestroy(socket);
      else setTimeout(() => socket.destroy(), LINGER_STEP_MS).unref();
    }
    this.#opts.onClose?.(code, reason);
  }
}

const EMPTY_PAIRS: readonly string[] = [];

/** `value` when it is a whole number of milliseconds a timer can wait (0 too when `zeroOk`); else a RangeError. */
function timeoutOption(name: string, value: number, zeroOk: boolean): number {
  if (Number.isInteger(value) && value <= 0x7fff_ffff && (value > 0 || (zeroOk && value === 0))) return value;
  throw new RangeError(`bad ${name} ${value}`);
}
