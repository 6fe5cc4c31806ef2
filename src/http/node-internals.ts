/**
 * Every use of a Node internal in ward, in one place. Each is what node's own modules are built
 * on and has kept its shape from Node 20 to 26, but none is a documented API: node-internals.test
 * checks each one's shape and behaviour on the running Node, so a Node whose internals moved
 * fails that test by name instead of failing the proxy in the field.
 *
 * - `HTTPParser` from `node:_http_common`: llhttp, the parser node's HTTP client and server use
 *   (h1/parser wraps it);
 * - a socket handle's `writeQueueSize`: what it has yet to hand the kernel (libuv's or TLS's),
 *   which `writableLength` does not tell while one large write drains;
 * - a socket handle's `fd`: the descriptor SO_ORIGINAL_DST is read from (transport/original-dst).
 */
import { createRequire } from 'node:module';
import type { Duplex } from 'node:stream';

/** The native parser's surface ward uses. */
export interface NativeHttpParser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenientFlags: number): void;
  execute(data: Buffer): number | Error;
  finish(): undefined | Error;
  close(): void;
  [slot: number]: unknown;
}

/** The native parser's class: its constructor, its two kinds and the slots of its callbacks. */
export interface NativeHttpParserClass {
  new (): NativeHttpParser;
  readonly REQUEST: number;
  readonly RESPONSE: number;
  readonly kOnMessageBegin: number;
  readonly kOnHeaders: number;
  readonly kOnHeadersComplete: number;
  readonly kOnBody: number;
  readonly kOnMessageComplete: number;
}

const SLOTS = ['REQUEST', 'RESPONSE', 'kOnMessageBegin', 'kOnHeaders', 'kOnHeadersComplete', 'kOnBody', 'kOnMessageComplete'] as const;

/** node's llhttp parser class; throws, naming what is missing, on a Node whose `_http_common` moved. */
export function loadNativeHttpParser(): NativeHttpParserClass {
  const common = createRequire(import.meta.url)('node:_http_common') as { HTTPParser?: unknown };
  const parser = common.HTTPParser as NativeHttpParserClass | undefined;
  if (typeof parser !== 'function') throw new Error(`node ${process.version}: node:_http_common has no HTTPParser`);
  for (const slot of SLOTS) {
    if (typeof parser[slot] !== 'number') throw new Error(`node ${process.version}: HTTPParser.${slot} is not a number`);
  }
  for (const method of ['initialize', 'execute', 'finish', 'close'] as const) {
    if (typeof (parser.prototype as Record<string, unknown>)[method] !== 'function') {
      throw new Error(`node ${process.version}: HTTPParser has no ${method}()`);
    }
  }
  return parser;
}

interface WithHandle {
  readonly _handle?: { readonly writeQueueSize?: unknown; readonly fd?: unknown } | null;
}

/**
 * Bytes a socket has yet to hand to the kernel, for telling whether a slow reader still takes
 * them: the stream's `writableLength` counts a write request whole until it completes (and node
 * hands everything buffered to the handle as one), so it stands still while a large write
 * drains; the handle's `writeQueueSize` (libuv's, or TLS's) goes down as it does.
 */
export function unsentBytes(socket: Duplex): number {
  if (socket.writableLength === 0) return 0;
  const queued = (socket as WithHandle)._handle?.writeQueueSize;
  return typeof queued === 'number' ? queued : socket.writableLength;
}

/** The file descriptor of a connected TCP socket, or undefined (no handle, or not a descriptor). */
export function socketFd(socket: Duplex): number | undefined {
  const fd = (socket as WithHandle)._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}
