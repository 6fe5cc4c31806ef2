/**
 * HPACK (RFC 7541), the header compression of HTTP/2, for the proxy's own HTTP/2 framing
 * (h2/connection). One {@link HpackDecoder} per connection reads the peer's header blocks; one
 * {@link HpackEncoder} writes ours. Names and values are Latin-1 strings, so every octet survives
 * a round trip unchanged (what a header may hold is checked by the caller, not here).
 *
 * The decoder refuses what RFC 7541 calls a decoding error — an index out of range, an integer
 * or string running past the block, a table size update above the limit we announced or after a
 * field, a Huffman string with an EOS symbol or bad padding — and reports it as a string: the
 * connection fails with COMPRESSION_ERROR. The list size bound is checked as fields are decoded;
 * past it, fields are no longer collected but the block is still decoded to the end, so the
 * dynamic table stays in step with the peer's.
 *
 * The encoder indexes (literal with incremental indexing) every field short enough to be worth a
 * table slot and sends it as an index from then on; fields the peer marked never-indexed (an
 * intermediary must keep that mark, RFC 7541 §6.2.3) and `authorization` / `cookie` values go as
 * never-indexed literals. Strings are sent raw, never Huffman-coded: fewer CPU cycles for a few
 * more bytes on loopback and local links.
 */

/** RFC 7541 Appendix A: the static table, index 1 first. */
const STATIC: readonly (readonly [string, string])[] = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];
const STATIC_COUNT = STATIC.length;

/** The table size both sides start with (RFC 7541 §4.2, SETTINGS_HEADER_TABLE_SIZE's default). */
export const HPACK_DEFAULT_TABLE_SIZE = 4096;
/** What an entry costs in a table besides its octets (RFC 7541 §4.1). */
const ENTRY_OVERHEAD = 32;

/**
 * RFC 7541 Appendix B, the Huffman code's length in bits for each symbol 0-256 (256 is EOS), in
 * base 36. The code is canonical — codes of one length are consecutive, ordered by symbol, and
 * follow the last code of the next shorter length shifted left — so the lengths define it.
 */
const HUFFMAN_LENGTHS =
  'dnsssssssoussussssssssusssssssss6aacd68baa8b8666555666666678f6ca' +
  'd67777777777777777777777878djde6f56565666577666567655677777fbeds' +
  'kmkkmmmnmnnnnnonoomnonnnnlmnmnnomlkmmnnlnmmolmnnllmlnmnnkmmmnmmn' +
  'qqkjmnmpqqqrrqopjlqrrqrollqqsrrrkoklmllnmmppooqnqrqqrrrrrsrrrrrq' +
  'u';
const EOS = 256;
const MAX_CODE_BITS = 30;

/** Canonical decoding tables: per code length, its first code, how many codes, where its symbols start. */
const HUFF_FIRST = new Int32Array(MAX_CODE_BITS + 1);
const HUFF_COUNT = new Int32Array(MAX_CODE_BITS + 1);
const HUFF_OFFSET = new Int32Array(MAX_CODE_BITS + 1);
const HUFF_SYMBOLS = new Uint16Array(EOS + 1);
{
  const lengths: number[] = [];
  for (let s = 0; s <= EOS; s++) lengths.push(Number.parseInt(HUFFMAN_LENGTHS.charAt(s), 36));
  let k = 0;
  for (let len = 1; len <= MAX_CODE_BITS; len++) {
    HUFF_OFFSET[len] = k;
    for (let s = 0; s <= EOS; s++) if (lengths[s] === len) HUFF_SYMBOLS[k++] = s;
    HUFF_COUNT[len] = k - (HUFF_OFFSET[len] as number);
  }
  let code = 0;
  for (let len = 1; len <= MAX_CODE_BITS; len++) {
    HUFF_FIRST[len] = code;
    code = (code + (HUFF_COUNT[len] as number)) * 2;
  }
}

/** Decoded octets are assembled here before becoming a string (grown on demand). */
let scratch = Buffer.allocUnsafe(4096);

/** Decodes `length` Huffman-coded octets of `src` from `start`: the Latin-1 string, or undefined when malformed. */
export function huffmanDecode(src: Uint8Array, start: number, length: number): string | undefined {
  // Each symbol takes at least 5 bits, so the output is at most 8/5 of the input.
  const need = Math.ceil((length * 8) / 5);
  if (scratch.length < need) scratch = Buffer.allocUnsafe(Math.max(need, scratch.length * 2));
  const out = scratch;
  let n = 0;
  let code = 0;
  let len = 0;
  const end = start + length;
  for (let i = start; i < end; i++) {
    const byte = src[i] as number;
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      len++;
      const idx = code - (HUFF_FIRST[len] as number);
      if (idx < (HUFF_COUNT[len] as number)) {
        const sym = HUFF_SYMBOLS[(HUFF_OFFSET[len] as number) + idx] as number;
        if (sym === EOS) return undefined;
        out[n++] = sym;
        code = 0;
        len = 0;
      } else if (len === MAX_CODE_BITS) {
        return undefined;
      }
    }
  }
  // Padding: fewer than 8 bits, all ones (the EOS code's prefix).
  if (len > 7 || code !== 2 ** len - 1) return undefined;
  return out.toString('latin1', 0, n);
}

/** A decoded header block. */
export interface HeaderBlock {
  /** Flat name/value pairs in their order (collected up to the list size bound). */
  readonly pairs: string[];
  /** RFC 7541 §4.1 size of the whole list (name + value + 32 per field), including what was not collected. */
  readonly listSize: number;
  /** Names the peer sent as never-indexed literals (undefined: none); re-encoding must keep the mark. */
  readonly sensitive: string[] | undefined;
  /** Fields in the whole list, including what was not collected. */
  readonly count: number;
}

/**
 * A dynamic table as a FIFO of entries: `names`/`values` hold them oldest first from `head`.
 * Index 0 is the newest entry.
 */
class DynamicTable {
  names: string[] = [];
  values: string[] = [];
  head = 0;
  size = 0;
  maxSize: number;

  constructor(maxSize: number) {
    this.maxSize = maxSize;
  }

  get length(): number {
    return this.names.length - this.head;
  }

  /** The entry at `index` (0: newest), or undefined. */
  at(index: number): number | undefined {
    const pos = this.names.length - 1 - index;
    return pos >= this.head ? pos : undefined;
  }

  add(name: string, value: string): void {
    const cost = name.length + value.length + ENTRY_OVERHEAD;
    if (cost > this.maxSize) {
      // An entry larger than the table empties it and is not added (RFC 7541 §4.4).
      this.evictTo(0);
      return;
    }
    this.evictTo(this.maxSize - cost);
    this.names.push(name);
    this.values.push(value);
    this.size += cost;
  }

  resize(maxSize: number): void {
    this.maxSize = maxSize;
    this.evictTo(maxSize);
  }

  evictTo(size: number): void {
    while (this.size > size && this.head < this.names.length) {
      this.size -= (this.names[this.head] as string).length + (this.values[this.head] as string).length + ENTRY_OVERHEAD;
      this.evicted(this.head);
      this.head++;
    }
    // Compact now and then so the arrays do not grow without bound.
    if (this.head > 64 && this.head * 2 > this.names.length) {
      this.names = this.names.slice(this.head);
      this.values = this.values.slice(this.head);
      this.rebased(this.head);
      this.head = 0;
    }
  }

  /** Hook: the entry at array position `pos` is leaving. */
  evicted(_pos: number): void {}
  /** Hook: array positions moved down by `by`. */
  rebased(_by: number): void {}
}

/** Reads one connection's header blocks (RFC 7541 §3). */
export class HpackDecoder {
  readonly #table: DynamicTable;
  /** The largest table the peer may ask for: what we announced in SETTINGS_HEADER_TABLE_SIZE. */
  readonly #limit: number;

  constructor(limit: number = HPACK_DEFAULT_TABLE_SIZE) {
    this.#limit = limit;
    this.#table = new DynamicTable(limit);
  }

  /**
   * Decodes one complete header block: the fields, or the reason it is malformed (a
   * COMPRESSION_ERROR for the connection: the table can no longer be trusted). Fields beyond
   * `maxListSize` or past the first `maxFields` are not collected (see {@link HeaderBlock.listSize}
   * and {@link HeaderBlock.count}); the rest of the block is still decoded, so the table stays in step.
   */
  decode(block: Buffer, maxListSize: number, maxFields = Number.POSITIVE_INFINITY): HeaderBlock | string {
    const pairs: string[] = [];
    let sensitive: string[] | undefined;
    let listSize = 0;
    let count = 0;
    let pos = 0;
    let fieldSeen = false;
    const end = block.length;
    const table = this.#table;
    while (pos < end) {
      const b = block[pos] as number;
      let name: string;
      let value: string;
      if (b & 0x80) {
        // Indexed field (§6.1).
        const r = readInt(block, pos, 7);
        if (r < 0) return 'truncated index';
        pos = intEnd;
        if (r === 0) return 'index 0';
        if (r <= STATIC_COUNT) {
          const e = STATIC[r - 1] as readonly [string, string];
          name = e[0];
          value = e[1];
        } else {
          const at = table.at(r - STATIC_COUNT - 1);
          if (at === undefined) return `index ${r} out of range`;
          name = table.names[at] as string;
          value = table.values[at] as string;
        }
      } else if ((b & 0xe0) === 0x20) {
        // Dynamic table size update (§6.3): only before the first field.
        if (fieldSeen) return 'table size update after a field';
        const r = readInt(block, pos, 5);
        if (r < 0) return 'truncated table size update';
        pos = intEnd;
        if (r > this.#limit) return `table size ${r} above ${this.#limit}`;
        table.resize(r);
        continue;
      } else {
        // Literal (§6.2): with incremental indexing (01), without (0000) or never indexed (0001).
        const indexing = (b & 0xc0) === 0x40;
        const never = !indexing && (b & 0xf0) === 0x10;
        const r = readInt(block, pos, indexing ? 6 : 4);
        if (r < 0) return 'truncated name index';
        pos = intEnd;
        if (r === 0) {
          const s = readString(block, pos);
          if (s === undefined) return 'malformed name';
          name = s;
          pos = intEnd;
        } else if (r <= STATIC_COUNT) {
          name = (STATIC[r - 1] as readonly [string, string])[0];
        } else {
          const at = table.at(r - STATIC_COUNT - 1);
          if (at === undefined) return `name index ${r} out of range`;
          name = table.names[at] as string;
        }
        const s = readString(block, pos);
        if (s === undefined) return 'malformed value';
        value = s;
        pos = intEnd;
        if (indexing) table.add(name, value);
        if (never) {
          sensitive ??= [];
          sensitive.push(name);
        }
      }
      fieldSeen = true;
      listSize += name.length + value.length + ENTRY_OVERHEAD;
      count++;
      if (listSize <= maxListSize && count <= maxFields) pairs.push(name, value);
    }
    return { pairs, listSize, sensitive, count };
  }
}

/** Where the last {@link readInt} / {@link readString} stopped (module state: one reader at a time, never re-entered). */
let intEnd = 0;

/** An integer with an N-bit prefix at `pos` (§5.1), or -1 when truncated or too large; sets {@link intEnd}. */
function readInt(src: Uint8Array, pos: number, prefixBits: number): number {
  const max = (1 << prefixBits) - 1;
  let v = (src[pos] as number) & max;
  pos++;
  if (v < max) {
    intEnd = pos;
    return v;
  }
  let shift = 0;
  for (;;) {
    if (pos >= src.length) return -1;
    const b = src[pos++] as number;
    v += (b & 0x7f) * 2 ** shift;
    // Nothing legitimate comes near 2^31: table indexes, sizes and string lengths are small.
    if (v > 0x7fff_ffff) return -1;
    if ((b & 0x80) === 0) break;
    shift += 7;
    // Continuation bytes carrying only zeros must not run on: 2^31 needs at most 5 of them.
    if (shift > 28) return -1;
  }
  intEnd = pos;
  return v;
}

/** A string literal at `pos` (§5.2), or undefined when truncated or badly Huffman-coded; sets {@link intEnd}. */
function readString(src: Buffer, pos: number): string | undefined {
  if (pos >= src.length) return undefined;
  const huffman = ((src[pos] as number) & 0x80) !== 0;
  const len = readInt(src, pos, 7);
  if (len < 0) return undefined;
  const start = intEnd;
  if (start + len > src.length) return undefined;
  intEnd = start + len;
  if (huffman) {
    const s = huffmanDecode(src, start, len);
    intEnd = start + len;
    return s;
  }
  return src.toString('latin1', start, start + len);
}

/** Static table lookups of the encoder: `name\0value` → index, and name → first index. */
const STATIC_FIELD = new Map<string, number>();
const STATIC_NAME = new Map<string, number>();
for (let i = 0; i < STATIC_COUNT; i++) {
  const [n, v] = STATIC[i] as readonly [string, string];
  if (v !== '') STATIC_FIELD.set(`${n}\0${v}`, i + 1);
  if (!STATIC_NAME.has(n)) STATIC_NAME.set(n, i + 1);
}

/** Fields larger than this are sent as literals without indexing: a table slot would not pay. */
const MAX_INDEXED_FIELD = 512;
/** Names whose values never enter the table (RFC 7541 §7.1.3: secrets worth guessing at). */
const NEVER_INDEXED_NAMES: ReadonlySet<string> = new Set(['authorization', 'proxy-authorization', 'cookie', 'set-cookie']);

/** An output buffer that grows; {@link HpackEncoder.encode} appends to it. */
export class ByteWriter {
  buf: Buffer;
  pos = 0;

  constructor(size = 1024) {
    this.buf = Buffer.allocUnsafe(size);
  }

  ensure(extra: number): void {
    if (this.pos + extra <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + extra));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  byte(b: number): void {
    this.ensure(1);
    this.buf[this.pos++] = b;
  }

  /** An integer with an N-bit prefix; `flags` fills the bits above it (§5.1). */
  int(flags: number, prefixBits: number, v: number): void {
    const max = (1 << prefixBits) - 1;
    this.ensure(6);
    if (v < max) {
      this.buf[this.pos++] = flags | v;
      return;
    }
    this.buf[this.pos++] = flags | max;
    v -= max;
    while (v >= 128) {
      this.buf[this.pos++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
  }

  /** A raw (not Huffman-coded) string literal (§5.2). */
  string(s: string): void {
    this.int(0, 7, s.length);
    this.ensure(s.length);
    this.pos += this.buf.write(s, this.pos, s.length, 'latin1');
  }

  /** Copies out what was written and starts over. */
  take(): Buffer {
    const out = Buffer.from(this.buf.subarray(0, this.pos));
    this.pos = 0;
    return out;
  }
}

/** The encoder's dynamic table, with lookups by field and by name. */
class EncoderTable extends DynamicTable {
  /** Insertions so far: entry at array position p was insertion number `base + p`. */
  base = 0;
  /** `name\0value` → insertion number of its newest entry. */
  readonly fields = new Map<string, number>();
  /** name → insertion number of its newest entry. */
  readonly byName = new Map<string, number>();

  override evicted(pos: number): void {
    const seq = this.base + pos;
    const name = this.names[pos] as string;
    const key = `${name}\0${this.values[pos] as string}`;
    if (this.fields.get(key) === seq) this.fields.delete(key);
    if (this.byName.get(name) === seq) this.byName.delete(name);
  }

  override rebased(by: number): void {
    this.base += by;
  }

  insert(name: string, value: string): void {
    this.add(name, value);
    const pos = this.names.length - 1;
    if (pos < this.head) return;
    const seq = this.base + pos;
    this.fields.set(`${name}\0${value}`, seq);
    this.byName.set(name, seq);
  }

  /** The HPACK index (static count + 1 for the newest) of insertion `seq`, or 0 when evicted. */
  indexOf(seq: number | undefined): number {
    if (seq === undefined) return 0;
    const pos = seq - this.base;
    if (pos < this.head) return 0;
    return STATIC_COUNT + (this.names.length - pos);
  }
}

/** Writes one connection's header blocks. */
export class HpackEncoder {
  readonly #table: EncoderTable;
  /**
   * Table size changes not yet signalled to the peer (sent at the start of the next block): the
   * smallest since the last block, then the final one (RFC 7541 §4.2), so the peer evicts what we did.
   */
  #pendingMin: number | undefined;
  #pendingResize: number | undefined;

  constructor(tableSize: number = HPACK_DEFAULT_TABLE_SIZE) {
    this.#table = new EncoderTable(tableSize);
  }

  /**
   * The peer announced the largest table it keeps (SETTINGS_HEADER_TABLE_SIZE). The encoder uses
   * at most {@link HPACK_DEFAULT_TABLE_SIZE}; a smaller limit shrinks the table now and is
   * signalled in the next block.
   */
  setLimit(limit: number): void {
    const size = Math.min(limit, HPACK_DEFAULT_TABLE_SIZE);
    if (size === this.#table.maxSize) return;
    this.#table.resize(size);
    this.#pendingMin = Math.min(this.#pendingMin ?? size, size);
    this.#pendingResize = size;
  }

  /** Fields the encoder can send as an index now (bounded by the table: its lookups forget evicted entries). */
  get indexedFields(): number {
    return this.#table.fields.size;
  }

  /** Appends the header block of `pairs` to `out`; names in `sensitive` go as never-indexed literals. */
  encode(out: ByteWriter, pairs: readonly string[], sensitive?: readonly string[]): void {
    const table = this.#table;
    if (this.#pendingResize !== undefined) {
      const min = this.#pendingMin as number;
      if (min < this.#pendingResize) out.int(0x20, 5, min);
      out.int(0x20, 5, this.#pendingResize);
      this.#pendingMin = undefined;
      this.#pendingResize = undefined;
    }
    const marked = sensitive === undefined || sensitive.length === 0 ? undefined : new Set(sensitive);
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const name = pairs[i] as string;
      const value = pairs[i + 1] as string;
      const never = NEVER_INDEXED_NAMES.has(name) || marked?.has(name) === true;
      if (!never) {
        const key = `${name}\0${value}`;
        const s = STATIC_FIELD.get(key);
        if (s !== undefined) {
          out.int(0x80, 7, s);
          continue;
        }
        const d = table.indexOf(table.fields.get(key));
        if (d !== 0) {
          out.int(0x80, 7, d);
          continue;
        }
      }
      const nameIndex = STATIC_NAME.get(name) ?? table.indexOf(table.byName.get(name));
      if (never) out.int(0x10, 4, nameIndex);
      else if (name.length + value.length + ENTRY_OVERHEAD <= Math.min(MAX_INDEXED_FIELD, table.maxSize)) {
        out.int(0x40, 6, nameIndex);
        table.insert(name, value);
      } else out.int(0x00, 4, nameIndex);
      if (nameIndex === 0) out.string(name);
      out.string(value);
    }
  }
}
