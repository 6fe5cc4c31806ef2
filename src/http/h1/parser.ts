/**
 * node's own HTTP/1 parser (llhttp, native): the upstream client parses responses with it, the
 * proxies' HTTP/1 servers (h1/server) requests.
 *
 * node exposes the parser its `http` module uses as `require('node:_http_common').HTTPParser`: not a
 * documented API, but the one node's HTTP client and server are built on, unchanged in shape
 * from Node 20 to 26; node-internals loads it (and its test checks it on the running Node).
 * It parses strictly unless told otherwise (lenient flags 0): `Content-Length` with
 * `Transfer-Encoding`, two differing `Content-Length`s, bad chunk sizes, bare LF line ends and
 * invalid header characters are errors (`code` `HPE_*`), never a guess at the framing.
 *
 * A parser owns native memory that only {@link ResponseParser.close} frees (the garbage
 * collector does not: 100,000 unclosed parsers held 230 MB), and it must not be closed from one
 * of its own callbacks (node defers that too): the owner closes it once its socket has closed.
 */
import { METHODS } from 'node:http';
import { loadNativeHttpParser, type NativeHttpParser } from '../node-internals.js';

type NativeParser = NativeHttpParser;

const HTTPParser = loadNativeHttpParser();

/**
 * llhttp's method codes to names, read off the parser itself: `_http_common`'s `methods` lists
 * only some of llhttp's methods, not by code (QUERY, code 46, is its 35th), and reading a code
 * there turned a QUERY request into a GET. Each method node knows is parsed once here.
 */
const METHOD_NAMES: readonly string[] = (() => {
  const names: string[] = [];
  for (const name of METHODS) {
    const parser = new HTTPParser();
    parser.initialize(HTTPParser.REQUEST, {}, 1024, 0);
    parser[HTTPParser.kOnHeadersComplete] = (_major: number, _minor: number, _headers: unknown, method: number): number => {
      names[method] = name;
      return 0;
    };
    parser.execute(Buffer.from(`${name} / HTTP/1.1\r\n\r\n`, 'latin1'));
    parser.close();
  }
  return names;
})();

/** What a response parser ({@link createResponseParser}) reports. Callbacks run inside `execute` / `finish`. */
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

/** A strict HTTP/1 parser, of requests or of responses. */
export interface Http1Parser {
  /**
   * Parses `data`: the byte count, or the parse error (an `Error` with an `HPE_*` `code`). A
   * request parser's count short of `data.length` without an error: it stopped after an upgrade
   * request's head (the rest is another protocol, or for an upgrade that is declined, the next
   * request: parse it with another `execute`).
   */
  execute(data: Buffer): number | Error;
  /**
   * The connection ended: completes a response body delimited by the close; the error for a
   * message cut short, else undefined.
   */
  finish(): Error | undefined;
  /** Frees the native parser; never from one of its callbacks. */
  close(): void;
}

const EMPTY: string[] = [];

/** What both kinds of message have at their head's end (the native callback's arguments, header pieces joined). */
interface Head {
  readonly minor: number;
  readonly headers: string[];
  /** The method's index in node's `methods` (requests). */
  readonly method: number;
  /** The request target (requests; '' for responses). */
  readonly url: string;
  readonly status: number;
  readonly reason: string;
  readonly upgrade: boolean;
  readonly keepAlive: boolean;
}

/**
 * A native parser of `type` wired to the callbacks; `head` returns llhttp's instruction (0, or 1:
 * no body follows). node hands over long header blocks, trailers and targets in pieces through
 * kOnHeaders: they are joined here.
 */
function nativeParser(
  type: number,
  maxHeaderBytes: number,
  begin: () => void,
  head: (h: Head) => number,
  body: (chunk: Buffer) => void,
  complete: (trailers: string[]) => void,
): NativeParser {
  const parser = new HTTPParser();
  parser.initialize(type, {}, maxHeaderBytes, 0);
  let pending: string[] = EMPTY;
  let pendingUrl = '';
  parser[HTTPParser.kOnMessageBegin] = () => {
    pending = EMPTY;
    pendingUrl = '';
    begin();
  };
  parser[HTTPParser.kOnHeaders] = (headers: string[], url: string | undefined) => {
    pending = pending === EMPTY ? headers : pending.concat(headers);
    if (url !== undefined) pendingUrl += url;
  };
  parser[HTTPParser.kOnHeadersComplete] = (
    _major: number,
    minor: number,
    headers: string[] | undefined,
    method: number,
    url: string | undefined,
    status: number,
    reason: string,
    upgrade: boolean,
    keepAlive: boolean,
  ): number => {
    const all = headers === undefined ? pending : pending === EMPTY ? headers : pending.concat(headers);
    const target = url === undefined || url === '' ? pendingUrl : pendingUrl + url;
    pending = EMPTY;
    pendingUrl = '';
    return head({ minor, headers: all, method, url: target, status, reason, upgrade, keepAlive });
  };
  parser[HTTPParser.kOnBody] = body;
  parser[HTTPParser.kOnMessageComplete] = () => {
    const trailers = pending;
    pending = EMPTY;
    complete(trailers);
  };
  return parser;
}

/** The surface of a wired native parser. */
function surface(parser: NativeParser): Http1Parser {
  return {
    execute: (data) => parser.execute(data),
    finish: () => parser.finish() ?? undefined,
    close: () => parser.close(),
  };
}

/** A response parser reporting to `events`; header blocks above `maxHeaderBytes` are an error (`HPE_HEADER_OVERFLOW`). */
export function createResponseParser(events: ResponseEvents, maxHeaderBytes: number): Http1Parser {
  return surface(
    nativeParser(
      HTTPParser.RESPONSE,
      maxHeaderBytes,
      () => events.begin(),
      // 1: no body follows (llhttp's "skip body").
      (h) => (events.head(h.status, h.reason, h.headers, h.keepAlive, h.upgrade, h.minor) ? 1 : 0),
      (chunk) => events.body(chunk),
      (trailers) => events.complete(trailers),
    ),
  );
}

/** What a request parser ({@link createRequestParser}) reports. Callbacks run inside `execute` / `finish`. */
export interface RequestEvents {
  /** A request starts (its first byte). */
  begin(): void;
  /**
   * A request head: the method (empty for one llhttp takes that node does not name: refuse it),
   * the target as sent, flat name/value pairs in their order
   * (Latin-1), the minor version (HTTP/1.x), llhttp's keep-alive verdict (version and
   * `Connection`) and whether the request asks for another protocol (CONNECT, or `Upgrade` with
   * `Connection: upgrade` and no body: the parser then stops after the head).
   */
  head(method: string, url: string, headers: string[], minorVersion: number, keepAlive: boolean, upgrade: boolean): void;
  body(chunk: Buffer): void;
  /** The request ended; its trailers as flat pairs (empty without). */
  complete(trailers: string[]): void;
}

/** A request parser reporting to `events`; header blocks above `maxHeaderBytes` are an error (`HPE_HEADER_OVERFLOW`). */
export function createRequestParser(events: RequestEvents, maxHeaderBytes: number): Http1Parser {
  return surface(
    nativeParser(
      HTTPParser.REQUEST,
      maxHeaderBytes,
      () => events.begin(),
      (h) => {
        events.head(METHOD_NAMES[h.method] ?? '', h.url, h.headers, h.minor, h.keepAlive, h.upgrade);
        return 0;
      },
      (chunk) => events.body(chunk),
      (trailers) => events.complete(trailers),
    ),
  );
}
