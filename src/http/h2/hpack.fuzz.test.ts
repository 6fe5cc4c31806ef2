/**
 * HPACK under arbitrary input: our encoder and decoder agree on arbitrary header lists across
 * blocks and table changes; the decoder never throws and decodes deterministically whatever the
 * bytes; and nghttp2 (node:http2) is the reference both ways — we decode exactly what it encodes
 * (Huffman, its dynamic table) and it decodes exactly what we encode.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect as connectHttp2, createServer as createHttp2Server, type OutgoingHttpHeaders, sensitiveHeaders } from 'node:http2';
import { type AddressInfo, createServer, connect as netConnect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { fuzzParams, latin1, mutated } from '../../shared/testing/fuzz.js';
import { ByteWriter, type HeaderBlock, HpackDecoder, HpackEncoder, huffmanDecode } from './hpack.js';

const CREDENTIALS = new Set(['authorization', 'proxy-authorization', 'cookie', 'set-cookie']);

function encode(e: HpackEncoder, pairs: readonly string[], sensitive?: readonly string[]): Buffer {
  const w = new ByteWriter(8);
  e.encode(w, pairs, sensitive);
  return w.take();
}

function listSize(pairs: readonly string[]): number {
  let n = 0;
  for (let i = 0; i + 1 < pairs.length; i += 2) n += (pairs[i] as string).length + (pairs[i + 1] as string).length + 32;
  return n;
}

/** Names from a small pool (so the dynamic table gets hits), static-table names, and arbitrary octets. */
const name = fc.oneof(
  fc.constantFrom('x-a', 'x-b', 'content-type', ':path', 'cookie', 'authorization', 'user-agent', 'grpc-status'),
  fc.stringMatching(/^[a-z0-9-]{1,24}$/),
  latin1({ maxLength: 40 }),
);
const value = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('', 'v', 'application/grpc', '200', 'x'.repeat(100)) },
  { weight: 4, arbitrary: latin1({ maxLength: 300 }) },
  { weight: 1, arbitrary: latin1({ minLength: 500, maxLength: 5000 }) },
);
const pairsArb = fc.array(fc.tuple(name, value), { maxLength: 24 }).map((fields) => fields.flat());
/** A block to send: its fields, the names to mark never-indexed, and a table limit the peer announced before it (if any). */
const blockArb = fc.record({
  pairs: pairsArb,
  sensitive: fc.array(name, { maxLength: 3 }),
  limit: fc.option(fc.constantFrom(0, 1, 31, 32, 100, 256, 1000, 4096, 8192, 65_536), { nil: undefined }),
});

describe('hpack fuzz: our encoder and decoder', () => {
  it('round-trips arbitrary header lists across blocks, table limit changes and evictions', () => {
    fc.assert(
      fc.property(fc.array(blockArb, { minLength: 1, maxLength: 12 }), (blocks) => {
        const e = new HpackEncoder();
        const d = new HpackDecoder();
        for (const b of blocks) {
          if (b.limit !== undefined) e.setLimit(b.limit);
          const r = d.decode(encode(e, b.pairs, b.sensitive), Number.POSITIVE_INFINITY);
          if (typeof r === 'string') assert.fail(`decoding error: ${r}`);
          assert.deepEqual(r.pairs, b.pairs);
          assert.equal(r.count, b.pairs.length / 2);
          assert.equal(r.listSize, listSize(b.pairs));
          // Every marked or credential field went never-indexed, and nothing else did.
          const names = new Set(b.pairs.filter((_, i) => i % 2 === 0));
          const want = [...names].filter((n) => b.sensitive.includes(n) || CREDENTIALS.has(n));
          assert.deepEqual(new Set(r.sensitive ?? []), new Set(want));
        }
      }),
      fuzzParams(300),
    );
  });

  it('collects a prefix within the list and field bounds, counts the rest, and keeps the table in step', () => {
    fc.assert(
      fc.property(fc.array(blockArb, { minLength: 2, maxLength: 6 }), fc.nat(4000), fc.nat(20), (blocks, maxList, maxFields) => {
        const e = new HpackEncoder();
        const bounded = new HpackDecoder();
        const free = new HpackDecoder();
        for (const b of blocks) {
          const wire = encode(e, b.pairs, b.sensitive);
          const r = bounded.decode(wire, maxList, maxFields) as HeaderBlock;
          const all = free.decode(wire, Number.POSITIVE_INFINITY) as HeaderBlock;
          assert.equal(r.count, all.count);
          assert.equal(r.listSize, all.listSize);
          assert.deepEqual(r.pairs, all.pairs.slice(0, r.pairs.length));
          assert.ok(r.pairs.length / 2 <= maxFields && listSize(r.pairs) <= maxList);
          // Collection stops at the first field over a bound: the next one would have fitted neither.
          if (r.pairs.length < all.pairs.length) {
            const next = all.pairs.slice(0, r.pairs.length + 2);
            assert.ok(next.length / 2 > maxFields || listSize(next) > maxList);
          }
        }
      }),
      fuzzParams(200),
    );
  });
});

describe('hpack fuzz: the decoder on arbitrary bytes', () => {
  /** Decodes `blocks` in order on a fresh decoder until the first error; the results. */
  function decodeAll(blocks: readonly Buffer[], maxList: number): (HeaderBlock | string)[] {
    const d = new HpackDecoder();
    const out: (HeaderBlock | string)[] = [];
    for (const b of blocks) {
      const r = d.decode(b, maxList);
      out.push(r);
      if (typeof r === 'string') break;
    }
    return out;
  }

  function assertSound(r: HeaderBlock | string): void {
    if (typeof r === 'string') return;
    assert.equal(r.pairs.length % 2, 0);
    for (const s of r.pairs) assert.equal(typeof s, 'string');
    assert.ok(r.count >= r.pairs.length / 2 && r.listSize >= listSize(r.pairs));
  }

  it('never throws, and decodes the same bytes the same way on a fresh decoder', () => {
    /** Valid blocks (a sequence through one encoder), then mutated one by one. */
    const validSequence = fc.array(blockArb, { minLength: 1, maxLength: 4 }).map((blocks) => {
      const e = new HpackEncoder();
      return blocks.map((b) => {
        if (b.limit !== undefined) e.setLimit(b.limit);
        return encode(e, b.pairs, b.sensitive);
      });
    });
    const input = fc.oneof(
      fc.array(
        fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
        { minLength: 1, maxLength: 3 },
      ),
      validSequence.chain((blocks) => fc.tuple(...blocks.map((b) => fc.oneof(fc.constant(b), mutated(fc.constant(b)))))),
    );
    fc.assert(
      fc.property(input, fc.oneof(fc.constant(Number.POSITIVE_INFINITY), fc.nat(2000)), (blocks, maxList) => {
        const first = decodeAll(blocks, maxList);
        for (const r of first) assertSound(r);
        assert.deepEqual(decodeAll(blocks, maxList), first);
      }),
      fuzzParams(1000),
    );
  });

  it('refuses integers and string lengths past the block without reading beyond it', () => {
    // Regression shapes: a maximal prefix with continuation bytes to the end, and a string
    // length just past what is left.
    const d = new HpackDecoder();
    for (const block of [
      Buffer.of(0xff, 0xff, 0xff, 0xff, 0xff),
      Buffer.of(0x40, 0x7f, 0x80),
      Buffer.of(0x40, 0x03, 0x61, 0x62),
      Buffer.of(0x3f, 0xe1, 0xff),
    ]) {
      assert.equal(typeof d.decode(block, Number.POSITIVE_INFINITY), 'string', block.toString('hex'));
    }
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.nat(), (bytes, at) => {
        // Decoding a slice must never see the bytes after it: equal to decoding a copy.
        const backing = Buffer.concat([Buffer.from(bytes), Buffer.of(0x61, 0x62, 0x63, 0x64)]);
        const end = at % (bytes.length + 1);
        assert.deepEqual(new HpackDecoder().decode(backing.subarray(0, end), 1 << 20), new HpackDecoder().decode(Buffer.from(bytes.subarray(0, end)), 1 << 20));
      }),
      fuzzParams(1000),
    );
  });

  it('decodes Huffman strings without throwing, the same within a larger buffer', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.nat(16), (bytes, pad) => {
        const alone = huffmanDecode(bytes, 0, bytes.length);
        const framed = Buffer.concat([Buffer.alloc(pad, 0xff), bytes, Buffer.alloc(pad, 0x00)]);
        assert.equal(huffmanDecode(framed, pad, bytes.length), alone);
        if (alone !== undefined) assert.ok(alone.length <= Math.ceil((bytes.length * 8) / 5));
      }),
      fuzzParams(2000),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// nghttp2 as the reference

/** Header names node:http2 sends as given (lower-case tokens, not connection-specific, not pseudo). */
const h2Name = fc.oneof(
  fc.constantFrom('x-a', 'x-b', 'content-type', 'user-agent', 'cookie', 'authorization', 'accept'),
  fc.stringMatching(/^x-[a-z0-9-]{1,20}$/),
);
/** Values nghttp2 takes: visible Latin-1 and inner spaces/tabs, no leading or trailing white space. */
const h2Value = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('', 'v', 'application/grpc', 'x'.repeat(100), 'caf\u00e9') },
  {
    weight: 4,
    arbitrary: fc
      .array(fc.oneof(fc.integer({ min: 0x21, max: 0x7e }), fc.integer({ min: 0xa0, max: 0xff }), fc.constant(0x20), fc.constant(0x09)), { maxLength: 200 })
      .map((codes) => String.fromCharCode(...codes).trim()),
  },
  { weight: 1, arbitrary: fc.string({ minLength: 1000, maxLength: 5000 }).map((s) => `big${s.replace(/[^\x21-\x7e]/g, 'z')}`) },
);
/** One request's non-pseudo fields, names unique (node:http2 takes an object), and which are sensitive. */
const h2Request = fc
  .uniqueArray(fc.tuple(h2Name, h2Value), { maxLength: 12, selector: ([n]) => n })
  .chain((fields) => fc.tuple(fc.constant(fields), fc.subarray(fields.map(([n]) => n))));

/** The header blocks node:http2 (nghttp2) sends as a client for `requests`, captured by a raw TCP server. */
async function nghttp2Blocks(requests: readonly OutgoingHttpHeaders[]): Promise<Buffer[]> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const blocks: Buffer[] = [];
  const done = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${blocks.length} of ${requests.length} header blocks after 5 s`)), 5000);
    server.on('connection', (s: Socket) => {
      s.on('error', () => {});
      // An empty SETTINGS frame: the client needs nothing else to send its requests.
      s.write(Buffer.from('000000040000000000', 'hex'));
      let wire = Buffer.alloc(0);
      let pos = 24; // the client connection preface
      let pending: Buffer[] = [];
      s.on('data', (d: Buffer) => {
        wire = Buffer.concat([wire, d]);
        while (pos + 9 <= wire.length) {
          const len = wire.readUIntBE(pos, 3);
          if (pos + 9 + len > wire.length) break;
          const type = wire[pos + 3] as number;
          const flags = wire[pos + 4] as number;
          if (type === 1 || type === 9) {
            assert.equal(flags & 0x28, 0, 'no padding or priority from node');
            pending.push(wire.subarray(pos + 9, pos + 9 + len));
            if (flags & 0x4) {
              blocks.push(Buffer.concat(pending));
              pending = [];
            }
          }
          pos += 9 + len;
        }
        if (blocks.length >= requests.length) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  });
  const session = connectHttp2(`http://127.0.0.1:${port}`);
  session.on('error', () => {});
  try {
    for (const h of requests) session.request(h, { endStream: true }).on('error', () => {});
    await done;
  } finally {
    session.destroy();
    server.close();
  }
  return blocks;
}

/**
 * Sends `blocks` (request header blocks from our encoder, each announced limit applied before it)
 * to a node:http2 server whose decoder table is `tableSize`; the raw headers it decoded, in order.
 */
async function nghttp2Decoded(tableSize: number, requests: readonly (readonly string[])[]): Promise<string[][]> {
  const server = createHttp2Server({ settings: { headerTableSize: tableSize } });
  const seen: string[][] = [];
  let failure: string | undefined;
  server.on('stream', (stream, _headers, _flags, raw: string[]) => {
    seen.push(raw);
    stream.on('error', () => {});
    stream.respond({ ':status': 204 }, { endStream: true });
  });
  server.on('session', (session) => {
    session.on('error', (err: Error) => {
      failure = `session error: ${err.message}`;
    });
    session.on('goaway', (code: number) => {
      if (code !== 0) failure = `GOAWAY ${code}`;
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const s = netConnect({ port, host: '127.0.0.1' });
  s.on('error', () => {});
  try {
    s.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'), Buffer.from('000000040000000000', 'hex')]));
    // The server's SETTINGS: its table size applies once we acknowledge them.
    let wire = Buffer.alloc(0);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no SETTINGS from node:http2')), 5000);
      s.on('data', function onData(d: Buffer) {
        wire = Buffer.concat([wire, d]);
        if (wire.length >= 9 && wire.length >= 9 + wire.readUIntBE(0, 3)) {
          clearTimeout(timer);
          s.off('data', onData);
          resolve();
        }
      });
    });
    s.resume();
    const e = new HpackEncoder();
    e.setLimit(tableSize);
    const frames: Buffer[] = [Buffer.from('000000040100000000', 'hex')];
    for (const [i, pairs] of requests.entries()) {
      const block = encode(e, pairs);
      const head = Buffer.alloc(9);
      head.writeUIntBE(block.length, 0, 3);
      head[3] = 0x1; // HEADERS
      head[4] = 0x5; // END_STREAM | END_HEADERS
      head.writeUInt32BE(1 + 2 * i, 5);
      frames.push(head, block);
    }
    s.write(Buffer.concat(frames));
    const deadline = Date.now() + 5000;
    while (seen.length < requests.length && failure === undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  } finally {
    s.destroy();
    server.close();
  }
  if (failure !== undefined) assert.fail(failure);
  return seen;
}

describe('hpack fuzz: nghttp2 (node:http2) as the reference', () => {
  it('decodes exactly what nghttp2 encodes: Huffman strings, its dynamic table, never-indexed fields', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(h2Request, { minLength: 1, maxLength: 4 }), async (requests) => {
        const sent = requests.map(([fields, sensitive], i) => {
          const h: OutgoingHttpHeaders = { ':path': `/r${i}` };
          for (const [n, v] of fields) h[n] = v;
          if (sensitive.length > 0) (h as Record<symbol, unknown>)[sensitiveHeaders] = sensitive;
          return h;
        });
        const blocks = await nghttp2Blocks(sent);
        const d = new HpackDecoder();
        for (const [i, block] of blocks.entries()) {
          const r = d.decode(block, Number.POSITIVE_INFINITY);
          if (typeof r === 'string') assert.fail(`decoding error: ${r}`);
          const [fields, sensitive] = requests[i] as (typeof requests)[number];
          const regular = r.pairs.filter((_, k) => !(r.pairs[k - (k % 2)] as string).startsWith(':'));
          assert.deepEqual(regular, fields.flat());
          const pseudo = new Map<string, string>();
          for (let k = 0; k < r.pairs.length; k += 2) if ((r.pairs[k] as string).startsWith(':')) pseudo.set(r.pairs[k] as string, r.pairs[k + 1] as string);
          assert.equal(pseudo.get(':path'), `/r${i}`);
          assert.equal(pseudo.get(':method'), 'GET');
          for (const n of sensitive) assert.ok(r.sensitive?.includes(n), `${n} kept its never-indexed mark`);
        }
      }),
      fuzzParams(50),
    );
  });

  it('encodes what nghttp2 decodes exactly, across blocks and the table size it announces', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(0, 64, 256, 4096), fc.array(h2Request, { minLength: 1, maxLength: 4 }), async (tableSize, requests) => {
        const lists = requests.map(([fields], i) => [':method', 'GET', ':scheme', 'http', ':path', `/r${i}`, ':authority', 'a.test', ...fields.flat()]);
        const seen = await nghttp2Decoded(tableSize, lists);
        assert.deepEqual(seen, lists);
      }),
      fuzzParams(50),
    );
  });
});
