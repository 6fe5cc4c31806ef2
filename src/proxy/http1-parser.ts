/**
 * node's own HTTP/1 parser (llhttp, native), as the upstream client parses responses with it.
 *
 * node exposes the parser its `http` module uses as `require('node:_http_common').HTTPParser`: not a
 * documented API, but the one node's HTTP client and server are built on, unchanged in shape
 * through Node 20 (the version ward pins, STACK.md). Everything that touches it is in this file.
 * It parses strictly unless told otherwise (lenient flags 0): `Content-Length` with
 * `Transfer-Encoding`, two differing `Content-Length`s, bad chunk sizes, bare LF line ends and
 * invalid header characters are errors (`code` `HPE_*`), never a guess at the framing.
 *
 * A parser owns native memory that only {@link ResponseParser.close} frees (the garbage
 * collector does not: 100,000 unclosed parsers held 230 MB), and it must not be closed from one
 * of its own callbacks (node defers that too): the owner closes it once its socket has closed.
 */
import { createRequire } from 'node:module';

/** The native parser's surface used here. */
interface NativeParser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenientFlags: number): void;
  execute(data: Buffer): number | Error;
  finish(): undefined | Error;
  close(): void;
  [slot: number]: unknown;
}

interface NativeParserClass {
  new (): NativeParser;
  readonly RESPONSE: number;
  readonly kOnMessageBegin: number;
  readonly kOnHeaders: number;
  readonly kOnHeadersComplete: number;
  readonly kOnBody: number;
  readonly kOnMessageComplete: number;
}

const require = createRequire(import.meta.url);
const { HTTPParser } = require('node:_http_common') as { HTTPParser: NativeParserClass };

/** What a {@link ResponseParser} reports. Callbacks run inside `execute` / `finish`. */
export interface ResponseEvents {
  /** A message starts (a 1xx, the response, or bytes after it). */
  begin(): void;
  /**
   * A response head: flat name/value pairs in their order (Latin-1 strings, as on the wire).
   * Return true when the response has no body whatever its headers say (the answer to HEAD).
   * `keepAlive` is llhttp's verdict, which counts a response without `Content-Length` or
   * chunked framing as delimited by the close even when it then has no body.
   */
  head(status: number, reason: string, headers: string[], keepAlive: boolean, upgrade: boolean, minorVersion: number): boolean;
  body(chunk: Buffer): void;
  /** The message ended; its trailers as flat pairs (empty without). */
  complete(trailers: string[]): void;
}

/** A strict HTTP/1 response parser. */
export interface ResponseParser {
  /** Parses `data`: the byte count, or the parse error (an `Error` with an `HPE_*` `code`). */
  execute(data: Buffer): number | Error;
  /** The connection ended: completes a body delimited by the close, or the error for a truncated message. */
  finish(): Error | undefined;
  /** Frees the native parser; never from one of its callbacks. */
  close(): void;
}

const EMPTY: string[] = [];

/** A response parser reporting to `events`; header blocks above `maxHeaderBytes` are an error (`HPE_HEADER_OVERFLOW`). */
export function createResponseParser(events: ResponseEvents, maxHeaderBytes: number): ResponseParser {
  const parser = new HTTPParser();
  parser.initialize(HTTPParser.RESPONSE, {}, maxHeaderBytes, 0);
  // node hands over long header blocks (and trailers) in pieces through kOnHeaders.
  let pending: string[] = EMPTY;
  parser[HTTPParser.kOnMessageBegin] = () => {
    pending = EMPTY;
    events.begin();
  };
  parser[HTTPParser.kOnHeaders] = (headers: string[]) => {
    pending = pending === EMPTY ? headers : pending.concat(headers);
  };
  parser[HTTPParser.kOnHeadersComplete] = (
    _major: number,
    minor: number,
    headers: string[] | undefined,
    _method: unknown,
    _url: unknown,
    status: number,
    reason: string,
    upgrade: boolean,
    keepAlive: boolean,
  ): number => {
    const all = headers === undefined ? pending : pending === EMPTY ? headers : pending.concat(headers);
    pending = EMPTY;
    // 1: no body follows (llhttp's "skip body").
    return events.head(status, reason, all, keepAlive, upgrade, minor) ? 1 : 0;
  };
  parser[HTTPParser.kOnBody] = (chunk: Buffer) => events.body(chunk);
  parser[HTTPParser.kOnMessageComplete] = () => {
    const trailers = pending;
    pending = EMPTY;
    events.complete(trailers);
  };
  return {
    execute: (data) => parser.execute(data),
    finish: () => parser.finish() ?? undefined,
    close: () => parser.close(),
  };
}
