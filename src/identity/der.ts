/**
 * A small DER (X.690 distinguished encoding) encoder and strict reader for the CA's hot path:
 * building leaf certificates and reading PKCS#10 requests without an ASN.1 schema library.
 *
 * The reader accepts DER framing only: definite lengths in minimal form, single-byte tags, and
 * every constructed value exactly filled by its children. It never reads past its input and
 * throws {@link DerError} for anything else. Values are subarrays of the input (no copies).
 */

/** Malformed or unsupported DER. */
export class DerError extends Error {
  override readonly name = 'DerError';
}

/** Universal tags used by X.509 and PKCS#10 (constructed bit included for SEQUENCE and SET). */
export const TAG = {
  BOOLEAN: 0x01,
  INTEGER: 0x02,
  BIT_STRING: 0x03,
  OCTET_STRING: 0x04,
  NULL: 0x05,
  OID: 0x06,
  UTF8_STRING: 0x0c,
  PRINTABLE_STRING: 0x13,
  TELETEX_STRING: 0x14,
  IA5_STRING: 0x16,
  UTC_TIME: 0x17,
  GENERALIZED_TIME: 0x18,
  UNIVERSAL_STRING: 0x1c,
  BMP_STRING: 0x1e,
  SEQUENCE: 0x30,
  SET: 0x31,
} as const;

/** Context-specific class bits. */
const CONTEXT = 0x80;
/** Constructed-encoding bit. */
const CONSTRUCTED = 0x20;

// ---------------------------------------------------------------------------------------------
// Encoding

/** The DER length octets of `length`: short form below 128, else minimal long form. */
export function encodeLength(length: number): Uint8Array {
  if (!Number.isSafeInteger(length) || length < 0) throw new RangeError(`bad DER length ${length}`);
  if (length < 0x80) return Uint8Array.of(length);
  const bytes: number[] = [];
  for (let n = length; n > 0; n = Math.floor(n / 256)) bytes.unshift(n % 256);
  if (bytes.length > 4) throw new RangeError(`DER length ${length} is too large`);
  return Uint8Array.from([0x80 | bytes.length, ...bytes]);
}

/** One TLV: `tag` (a single-byte tag) with the concatenation of `contents` as its value. */
export function tlv(tag: number, ...contents: readonly Uint8Array[]): Uint8Array {
  if (!Number.isInteger(tag) || tag < 0 || tag > 0xff || (tag & 0x1f) === 0x1f) throw new RangeError(`unsupported DER tag ${tag}`);
  let length = 0;
  for (const c of contents) length += c.length;
  const len = encodeLength(length);
  const out = new Uint8Array(1 + len.length + length);
  out[0] = tag;
  out.set(len, 1);
  let at = 1 + len.length;
  for (const c of contents) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/** SEQUENCE of already-encoded elements. */
export const sequence = (...elements: readonly Uint8Array[]): Uint8Array => tlv(TAG.SEQUENCE, ...elements);

/** SET of already-encoded elements, in the order given (DER SET OF sorts; callers pass one element or sorted ones). */
export const set = (...elements: readonly Uint8Array[]): Uint8Array => tlv(TAG.SET, ...elements);

/** `[n]` EXPLICIT (constructed context tag) around already-encoded elements. */
export const explicit = (n: number, ...elements: readonly Uint8Array[]): Uint8Array => tlv(CONTEXT | CONSTRUCTED | contextNumber(n), ...elements);

/** `[n]` IMPLICIT over a primitive value's content octets. */
export const implicitPrimitive = (n: number, content: Uint8Array): Uint8Array => tlv(CONTEXT | contextNumber(n), content);

function contextNumber(n: number): number {
  if (!Number.isInteger(n) || n < 0 || n > 30) throw new RangeError(`unsupported context tag [${n}]`);
  return n;
}

/**
 * A non-negative INTEGER: `value` is a number or a big-endian unsigned magnitude (leading zero
 * bytes are dropped and a 0x00 prepended when the top bit is set, as DER requires).
 */
export function integer(value: number | Uint8Array): Uint8Array {
  let bytes: Uint8Array;
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`integer() takes non-negative safe integers, got ${value}`);
    const b: number[] = [];
    for (let n = value; n > 0; n = Math.floor(n / 256)) b.unshift(n % 256);
    bytes = Uint8Array.from(b);
  } else {
    let start = 0;
    while (start < value.length && value[start] === 0) start++;
    bytes = value.subarray(start);
  }
  if (bytes.length === 0) return Uint8Array.of(TAG.INTEGER, 1, 0);
  return ((bytes[0] as number) & 0x80) !== 0 ? tlv(TAG.INTEGER, Uint8Array.of(0), bytes) : tlv(TAG.INTEGER, bytes);
}

/** An OBJECT IDENTIFIER from its dotted form (`2.5.29.17`). */
export function oid(dotted: string): Uint8Array {
  if (!/^[0-2](\.(0|[1-9][0-9]*))+$/.test(dotted)) throw new RangeError(`bad OID "${dotted}"`);
  const arcs = dotted.split('.').map(Number);
  const [first, second] = arcs as [number, number];
  if (first < 2 && second > 39) throw new RangeError(`bad OID "${dotted}"`);
  const out: number[] = [];
  for (const arc of [first * 40 + second, ...arcs.slice(2)]) {
    if (!Number.isSafeInteger(arc)) throw new RangeError(`OID arc too large in "${dotted}"`);
    const group: number[] = [arc % 128];
    for (let n = Math.floor(arc / 128); n > 0; n = Math.floor(n / 128)) group.unshift(0x80 | (n % 128));
    out.push(...group);
  }
  return tlv(TAG.OID, Uint8Array.from(out));
}

/** BOOLEAN (DER: 0xff for TRUE). */
export const boolean = (value: boolean): Uint8Array => Uint8Array.of(TAG.BOOLEAN, 1, value ? 0xff : 0);

/** OCTET STRING. */
export const octetString = (bytes: Uint8Array): Uint8Array => tlv(TAG.OCTET_STRING, bytes);

/** BIT STRING of whole bytes, or with `unusedBits` (0–7) trailing bits of the last byte unused. */
export function bitString(bytes: Uint8Array, unusedBits = 0): Uint8Array {
  if (!Number.isInteger(unusedBits) || unusedBits < 0 || unusedBits > 7 || (bytes.length === 0 && unusedBits !== 0)) {
    throw new RangeError(`bad BIT STRING unused-bit count ${unusedBits}`);
  }
  return tlv(TAG.BIT_STRING, Uint8Array.of(unusedBits), bytes);
}

const encoder = new TextEncoder();
const PRINTABLE = /^[A-Za-z0-9 '()+,\-./:=?]*$/;
/** What is read as PrintableString: also `*` and `&`, which some CAs and tools write there (Go's x509 accepts them too). */
const PRINTABLE_READ = /^[A-Za-z0-9 '()+,\-./:=?*&]*$/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: IA5 is 7-bit ASCII, control characters included
const IA5 = /^[\x00-\x7f]*$/;

/** The content octets of an IA5String (7-bit ASCII; throws otherwise), e.g. for `[2] IMPLICIT IA5String`. */
export function ia5Content(s: string): Uint8Array {
  if (!IA5.test(s)) throw new RangeError(`"${s}" is not an IA5String (7-bit ASCII)`);
  return encoder.encode(s);
}

/** IA5String (7-bit ASCII; throws otherwise). */
export const ia5String = (s: string): Uint8Array => tlv(TAG.IA5_STRING, ia5Content(s));

/** UTF8String. */
export const utf8String = (s: string): Uint8Array => tlv(TAG.UTF8_STRING, encoder.encode(s));

/** True when `s` fits a PrintableString. */
const isPrintable = (s: string): boolean => PRINTABLE.test(s);

/** A DirectoryString as X.509 builders write it: PrintableString when the text fits, else UTF8String. */
export function directoryString(s: string): Uint8Array {
  return isPrintable(s) ? tlv(TAG.PRINTABLE_STRING, encoder.encode(s)) : utf8String(s);
}

const pad2 = (n: number) => (n < 10 ? `0${n}` : String(n));

/**
 * A certificate validity time (RFC 5280 4.1.2.5): UTCTime `YYMMDDHHMMSSZ` for years 1950–2049,
 * GeneralizedTime `YYYYMMDDHHMMSSZ` otherwise; fractions of a second are dropped.
 */
export function time(ms: number): Uint8Array {
  const d = new Date(Math.floor(ms / 1000) * 1000);
  const year = d.getUTCFullYear();
  if (!Number.isFinite(year) || year < 0 || year > 9999) throw new RangeError(`time ${ms} is out of range`);
  const rest = `${pad2(d.getUTCMonth() + 1)}${pad2(d.getUTCDate())}${pad2(d.getUTCHours())}${pad2(d.getUTCMinutes())}${pad2(d.getUTCSeconds())}Z`;
  if (year >= 1950 && year <= 2049) return tlv(TAG.UTC_TIME, encoder.encode(`${pad2(year % 100)}${rest}`));
  return tlv(TAG.GENERALIZED_TIME, encoder.encode(`${String(year).padStart(4, '0')}${rest}`));
}

// ---------------------------------------------------------------------------------------------
// Reading

/** One decoded TLV: its tag, the whole encoding and the value octets (both views of the input). */
export interface DerElement {
  readonly tag: number;
  /** Tag, length and value. */
  readonly bytes: Uint8Array;
  /** Value only. */
  readonly content: Uint8Array;
}

/** The element at `offset` of `buf` and the offset after it; throws {@link DerError} on bad framing. */
export function readElement(buf: Uint8Array, offset: number): { element: DerElement; next: number } {
  const end = buf.length;
  if (offset >= end) throw new DerError('truncated: expected a tag');
  const tag = buf[offset] as number;
  if ((tag & 0x1f) === 0x1f) throw new DerError(`unsupported high tag number form at offset ${offset}`);
  if (offset + 1 >= end) throw new DerError('truncated: expected a length');
  const first = buf[offset + 1] as number;
  let length: number;
  let header: number;
  if (first < 0x80) {
    length = first;
    header = 2;
  } else {
    const n = first & 0x7f;
    if (n === 0) throw new DerError(`indefinite length at offset ${offset}`);
    if (n > 4) throw new DerError(`length of ${n} octets at offset ${offset} is too large`);
    if (offset + 2 + n > end) throw new DerError('truncated: length octets');
    if (buf[offset + 2] === 0) throw new DerError(`non-minimal length at offset ${offset}`);
    length = 0;
    for (let i = 0; i < n; i++) length = length * 256 + (buf[offset + 2 + i] as number);
    if (length < 0x80) throw new DerError(`non-minimal length at offset ${offset}`);
    header = 2 + n;
  }
  const next = offset + header + length;
  if (next > end) throw new DerError(`truncated: element at offset ${offset} needs ${length} octets, ${end - offset - header} left`);
  return { element: { tag, bytes: buf.subarray(offset, next), content: buf.subarray(offset + header, next) }, next };
}

/** Decodes exactly one element spanning all of `buf` (no trailing bytes). */
export function decode(buf: Uint8Array): DerElement {
  const { element, next } = readElement(buf, 0);
  if (next !== buf.length) throw new DerError(`${buf.length - next} trailing octets after the DER value`);
  return element;
}

/** The children of a constructed element, which must fill its value exactly. */
export function children(el: DerElement): DerElement[] {
  if ((el.tag & CONSTRUCTED) === 0) throw new DerError(`tag 0x${hex2(el.tag)} is not constructed`);
  const out: DerElement[] = [];
  for (let at = 0; at < el.content.length; ) {
    const { element, next } = readElement(el.content, at);
    out.push(element);
    at = next;
  }
  return out;
}

const hex2 = (n: number) => n.toString(16).padStart(2, '0');

/** `el`, after checking its tag; `what` names it in the error. */
export function expectTag(el: DerElement | undefined, tag: number, what: string): DerElement {
  if (el === undefined) throw new DerError(`${what} is missing`);
  if (el.tag !== tag) throw new DerError(`${what}: expected tag 0x${hex2(tag)}, got 0x${hex2(el.tag)}`);
  return el;
}

/** The children of `el` (a SEQUENCE unless `tag` says otherwise), checking the tag and the count. */
export function expectChildren(el: DerElement | undefined, what: string, min: number, max = min, tag: number = TAG.SEQUENCE): DerElement[] {
  const kids = children(expectTag(el, tag, what));
  if (kids.length < min || kids.length > max) {
    throw new DerError(`${what}: expected ${min === max ? min : `${min}–${max}`} elements, got ${kids.length}`);
  }
  return kids;
}

/** An OBJECT IDENTIFIER in dotted form. */
export function readOid(el: DerElement | undefined, what = 'OBJECT IDENTIFIER'): string {
  const c = expectTag(el, TAG.OID, what).content;
  if (c.length === 0) throw new DerError(`${what}: empty`);
  if ((c[c.length - 1] as number) & 0x80) throw new DerError(`${what}: truncated`);
  const arcs: number[] = [];
  let value = 0;
  let started = false;
  for (const b of c) {
    if (!started && b === 0x80) throw new DerError(`${what}: non-minimal arc`);
    started = true;
    value = value * 128 + (b & 0x7f);
    if (!Number.isSafeInteger(value)) throw new DerError(`${what}: arc too large`);
    if ((b & 0x80) === 0) {
      if (arcs.length === 0) arcs.push(value < 80 ? Math.floor(value / 40) : 2, value < 80 ? value % 40 : value - 80);
      else arcs.push(value);
      value = 0;
      started = false;
    }
  }
  return arcs.join('.');
}

/** The value octets of a DER INTEGER (two's complement, minimal). */
export function readIntegerBytes(el: DerElement | undefined, what = 'INTEGER'): Uint8Array {
  const c = expectTag(el, TAG.INTEGER, what).content;
  if (c.length === 0) throw new DerError(`${what}: empty`);
  if (c.length > 1 && ((c[0] === 0 && ((c[1] as number) & 0x80) === 0) || (c[0] === 0xff && ((c[1] as number) & 0x80) !== 0))) {
    throw new DerError(`${what}: non-minimal encoding`);
  }
  return c;
}

/** A small INTEGER as a number (at most 6 octets). */
export function readSmallInteger(el: DerElement | undefined, what = 'INTEGER'): number {
  const c = readIntegerBytes(el, what);
  if (c.length > 6) throw new DerError(`${what}: too large`);
  let n = 0;
  for (const b of c) n = n * 256 + b;
  return (c[0] as number) & 0x80 ? n - 256 ** c.length : n;
}

/** A BOOLEAN (DER: exactly 0x00 or 0xff). */
export function readBoolean(el: DerElement | undefined, what = 'BOOLEAN'): boolean {
  const c = expectTag(el, TAG.BOOLEAN, what).content;
  if (c.length !== 1 || (c[0] !== 0 && c[0] !== 0xff)) throw new DerError(`${what}: not a DER BOOLEAN`);
  return c[0] === 0xff;
}

/** A BIT STRING's bits (whole bytes) and unused-bit count; the unused bits must be zero. */
export function readBitString(el: DerElement | undefined, what = 'BIT STRING'): { bytes: Uint8Array; unusedBits: number } {
  const c = expectTag(el, TAG.BIT_STRING, what).content;
  if (c.length === 0) throw new DerError(`${what}: empty`);
  const unusedBits = c[0] as number;
  if (unusedBits > 7 || (c.length === 1 && unusedBits !== 0)) throw new DerError(`${what}: bad unused-bit count ${unusedBits}`);
  if (unusedBits > 0 && ((c[c.length - 1] as number) & ((1 << unusedBits) - 1)) !== 0) throw new DerError(`${what}: unused bits are not zero`);
  return { bytes: c.subarray(1), unusedBits };
}

/** A BIT STRING that must hold whole bytes (keys, signatures). */
export function readOctetAlignedBitString(el: DerElement | undefined, what = 'BIT STRING'): Uint8Array {
  const { bytes, unusedBits } = readBitString(el, what);
  if (unusedBits !== 0) throw new DerError(`${what}: not octet-aligned`);
  return bytes;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
const utf16be = new TextDecoder('utf-16be', { fatal: true });

/**
 * The text of a string-typed element (UTF8String, PrintableString, IA5String, TeletexString as
 * Latin-1, BMPString, UniversalString), or undefined for other tags. Throws on invalid content.
 */
export function readString(el: DerElement, what = 'string'): string | undefined {
  const c = el.content;
  switch (el.tag) {
    case TAG.UTF8_STRING:
      try {
        return utf8.decode(c);
      } catch {
        throw new DerError(`${what}: invalid UTF-8`);
      }
    case TAG.PRINTABLE_STRING:
    case TAG.IA5_STRING: {
      const s = latin1(c);
      if (!(el.tag === TAG.IA5_STRING ? IA5 : PRINTABLE_READ).test(s))
        throw new DerError(`${what}: invalid ${el.tag === TAG.IA5_STRING ? 'IA5String' : 'PrintableString'}`);
      return s;
    }
    case TAG.TELETEX_STRING:
      return latin1(c);
    case TAG.BMP_STRING:
      if (c.length % 2 !== 0) throw new DerError(`${what}: odd-length BMPString`);
      try {
        return utf16be.decode(c);
      } catch {
        throw new DerError(`${what}: invalid BMPString`);
      }
    case TAG.UNIVERSAL_STRING: {
      if (c.length % 4 !== 0) throw new DerError(`${what}: bad UniversalString length`);
      let s = '';
      for (let i = 0; i < c.length; i += 4) {
        const cp = (((c[i] as number) << 24) | ((c[i + 1] as number) << 16) | ((c[i + 2] as number) << 8) | (c[i + 3] as number)) >>> 0;
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) throw new DerError(`${what}: invalid UniversalString`);
        s += String.fromCodePoint(cp);
      }
      return s;
    }
    default:
      return undefined;
  }
}

function latin1(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return s;
}

const UTC_TIME = /^(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/;
const GENERALIZED_TIME = /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/;

/**
 * A certificate validity time (RFC 5280 4.1.2.5) in ms since the epoch, strictly: UTCTime
 * `YYMMDDHHMMSSZ` (YY below 50 is 20YY, else 19YY) or GeneralizedTime `YYYYMMDDHHMMSSZ`; no
 * fractions, no offsets, every field in range.
 */
export function readTime(el: DerElement | undefined, what = 'time'): number {
  if (el === undefined) throw new DerError(`${what} is missing`);
  if (el.tag !== TAG.UTC_TIME && el.tag !== TAG.GENERALIZED_TIME) {
    throw new DerError(`${what}: expected UTCTime or GeneralizedTime, got tag 0x${hex2(el.tag)}`);
  }
  const text = latin1(el.content);
  const m = (el.tag === TAG.UTC_TIME ? UTC_TIME : GENERALIZED_TIME).exec(text);
  if (m === null) throw new DerError(`${what}: "${text}" is not ${el.tag === TAG.UTC_TIME ? 'YYMMDDHHMMSSZ' : 'YYYYMMDDHHMMSSZ'}`);
  const [yearText, month, day, hour, minute, second] = m.slice(1).map(Number) as [number, number, number, number, number, number];
  const year = el.tag === TAG.UTC_TIME ? (yearText < 50 ? 2000 : 1900) + yearText : yearText;
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day);
  d.setUTCHours(hour, minute, second, 0);
  // Date rolls fields over (Feb 30 -> Mar 2); a value that does not round-trip is out of range.
  if (d.getUTCFullYear() !== year || d.getUTCMonth() !== month - 1 || d.getUTCDate() !== day || hour > 23 || minute > 59 || second > 59) {
    throw new DerError(`${what}: "${text}" is not a valid time`);
  }
  return d.getTime();
}
