import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect as connectHttp2 } from 'node:http2';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { ByteWriter, type HeaderBlock, HpackDecoder, HpackEncoder, huffmanDecode } from './hpack.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

function decoded(d: HpackDecoder, block: Buffer, max = 1 << 20, maxFields?: number): HeaderBlock {
  const r = d.decode(block, max, maxFields);
  if (typeof r === 'string') assert.fail(`decoding error: ${r}`);
  return r;
}

function encoded(e: HpackEncoder, pairs: string[], sensitive?: string[]): Buffer {
  const w = new ByteWriter(16);
  e.encode(w, pairs, sensitive);
  return w.take();
}

/**
 * The header blocks a real HTTP/2 client (node:http2, i.e. nghttp2) sends for `requests`, in
 * order, captured from the wire by a raw TCP server.
 */
async function capturedBlocks(requests: Record<string, string>[]): Promise<Buffer[]> {
  const chunks: Buffer[] = [];
  const server = createServer((s: Socket) => {
    // An empty SETTINGS frame: the client needs nothing else to send its requests.
    s.write(hex('000000 04 00 00000000'));
    s.on('data', (d: Buffer) => chunks.push(d));
    s.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const session = connectHttp2(`http://127.0.0.1:${port}`);
  session.on('error', () => {});
  for (const h of requests) session.request(h, { endStream: true }).on('error', () => {});
  const blocks: Buffer[] = [];
  const deadline = Date.now() + 5000;
  while (blocks.length < requests.length && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
    blocks.length = 0;
    const wire = Buffer.concat(chunks);
    let pos = 24; // the client connection preface
    let pending: Buffer[] = [];
    while (pos + 9 <= wire.length) {
      const len = wire.readUIntBE(pos, 3);
      const type = wire[pos + 3] as number;
      const flags = wire[pos + 4] as number;
      if (pos + 9 + len > wire.length) break;
      const payload = wire.subarray(pos + 9, pos + 9 + len);
      if (type === 1 || type === 9) {
        assert.equal(flags & 0x28, 0, 'no padding or priority from node');
        pending.push(payload);
        if (flags & 0x4) {
          blocks.push(Buffer.concat(pending));
          pending = [];
        }
      }
      pos += 9 + len;
    }
  }
  session.destroy();
  server.close();
  assert.equal(blocks.length, requests.length, 'every request reached the wire');
  return blocks;
}

describe('hpack', () => {
  it('decodes the RFC 7541 C.4 requests (Huffman, dynamic table across blocks)', () => {
    const d = new HpackDecoder();
    const first = [':method', 'GET', ':scheme', 'http', ':path', '/', ':authority', 'www.example.com'];
    assert.deepEqual(decoded(d, hex('8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff')).pairs, first);
    assert.deepEqual(decoded(d, hex('8286 84be 5886 a8eb 1064 9cbf')).pairs, [...first, 'cache-control', 'no-cache']);
    assert.deepEqual(decoded(d, hex('8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf')).pairs, [
      ':method',
      'GET',
      ':scheme',
      'https',
      ':path',
      '/index.html',
      ':authority',
      'www.example.com',
      'custom-key',
      'custom-value',
    ]);
  });

  it('decodes every header value octet node:http2 (nghttp2) Huffman-codes, and its dynamic table across requests', async () => {
    // A rare octet among common ones: nghttp2 then Huffman-codes the value (it is shorter),
    // which exercises each symbol's code, the long ones too.
    const octets: number[] = [0x09];
    for (let c = 0x20; c <= 0xff; c++) if (c !== 0x7f) octets.push(c);
    const requests: Record<string, string>[] = [];
    for (let i = 0; i < octets.length; i += 16) {
      const h: Record<string, string> = { ':path': `/svc.Echo/Call${i}`, 'content-type': 'application/grpc', te: 'trailers' };
      for (const c of octets.slice(i, i + 16)) h[`x-octet-${c}`] = `${'e'.repeat(40)}${String.fromCharCode(c)}${'t'.repeat(40)}`;
      requests.push(h);
    }
    const blocks = await capturedBlocks(requests);
    const d = new HpackDecoder();
    let huffmanCoded = 0;
    for (const [i, block] of blocks.entries()) {
      const got = decoded(d, block).pairs;
      const map = new Map<string, string>();
      for (let k = 0; k < got.length; k += 2) map.set(got[k] as string, got[k + 1] as string);
      for (const [name, value] of Object.entries(requests[i] as Record<string, string>)) assert.equal(map.get(name), value, name);
      assert.equal(map.get(':method'), 'GET');
      // A 81-octet value sent raw takes 82+ bytes; the block is far smaller only when coded.
      if (block.length < 16 * 82) huffmanCoded++;
    }
    assert.equal(huffmanCoded, blocks.length, 'nghttp2 Huffman-coded the values');
  });

  it('round-trips through its own encoder, with the dynamic table shared across blocks and evictions', () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    let seed = 7;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let round = 0; round < 300; round++) {
      const pairs: string[] = [':status', String(200 + rand(3) * 100), 'content-type', 'application/grpc'];
      for (let k = rand(8); k > 0; k--) pairs.push(`x-h${rand(40)}`, 'v'.repeat(rand(300)) + String(rand(1000)));
      if (rand(10) === 0) pairs.push('x-big', 'b'.repeat(600 + rand(5000)));
      const block = encoded(e, pairs);
      assert.deepEqual(decoded(d, block).pairs, pairs, `round ${round}`);
    }
  });

  it('forgets evicted fields, so its lookups stay as small as the table', () => {
    const e = new HpackEncoder();
    for (let i = 0; i < 2000; i++) encoded(e, ['x-request-id', `id-${i}`]);
    assert.ok(e.indexedFields > 0 && e.indexedFields <= 4096 / (32 + 12 + 4), `${e.indexedFields} fields tracked`);
  });

  it('sends an index for a field seen before, and only the index', () => {
    const e = new HpackEncoder();
    const first = encoded(e, ['grpc-status', '0']);
    const again = encoded(e, ['grpc-status', '0']);
    assert.ok(first.length > 2);
    assert.deepEqual([...again], [0x80 | 62]);
    assert.deepEqual([...encoded(e, [':method', 'POST'])], [0x83], 'static table');
  });

  it('keeps a never-indexed mark, and never indexes credentials', () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    for (let i = 0; i < 2; i++) {
      const block = encoded(e, ['authorization', 'Bearer t', 'x-secret', 's', 'x-plain', 'p'], ['x-secret']);
      const out = decoded(d, block);
      assert.deepEqual(out.pairs, ['authorization', 'Bearer t', 'x-secret', 's', 'x-plain', 'p']);
      assert.deepEqual(out.sensitive, ['authorization', 'x-secret']);
    }
  });

  it('signals a smaller table the peer asked for, in the next block', () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    decoded(d, encoded(e, ['x-a', 'a'.repeat(100)]));
    e.setLimit(0);
    const block = encoded(e, ['x-a', 'a'.repeat(100)]);
    assert.equal(block[0], 0x20, 'size update to 0 first');
    assert.deepEqual(decoded(d, block).pairs, ['x-a', 'a'.repeat(100)]);
    // With no table, the same field is a literal every time and the decoder stays in step.
    assert.deepEqual(decoded(d, encoded(e, ['x-a', 'a'.repeat(100)])).pairs, ['x-a', 'a'.repeat(100)]);
  });

  it('signals the smallest of several table changes before the last, so the peer evicts what we did', () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    decoded(d, encoded(e, ['x-a', 'a'.repeat(100)]));
    e.setLimit(0);
    e.setLimit(4096);
    const block = encoded(e, ['x-a', 'a'.repeat(100)]);
    assert.deepEqual([...block.subarray(0, 4)], [0x20, 0x3f, 0xe1, 0x1f], 'size 0, then 4096');
    // The peer dropped the old entry like we did: the field went as a new literal and now resolves by index.
    assert.deepEqual(decoded(d, block).pairs, ['x-a', 'a'.repeat(100)]);
    assert.deepEqual([...encoded(e, ['x-a', 'a'.repeat(100)])], [0x80 | 62]);
  });

  it('counts every field and stops collecting past the field bound', () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    const fields = Array.from({ length: 5 }, (_, i) => [`x-${i}`, String(i)]).flat();
    const r = decoded(d, encoded(e, fields), 64 * 1024, 3);
    assert.equal(r.count, 5);
    assert.deepEqual(r.pairs, fields.slice(0, 6));
    assert.deepEqual(decoded(d, encoded(e, fields)).pairs, fields, 'the table stayed in step');
  });

  it('stops collecting past the list size bound but keeps the table in step', () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    const big = ['x-1', 'a'.repeat(100), 'x-2', 'b'.repeat(100)];
    const r = decoded(d, encoded(e, big), 150);
    assert.deepEqual(r.pairs, ['x-1', 'a'.repeat(100)]);
    assert.equal(r.listSize, 2 * (3 + 100 + 32));
    // Both entries were added to the table: the next block's indexes resolve.
    assert.deepEqual(decoded(d, encoded(e, big)).pairs, big);
  });

  it('refuses malformed blocks with a reason', () => {
    const cases: [string, string][] = [
      ['80', 'index 0'],
      ['be', 'index 62 out of range'],
      ['ff', 'truncated index'],
      ['ff ff ff ff ff ff 0f', 'truncated index'],
      ['ff 80 80 80 80 80 80 80 80 80 00', 'truncated index'],
      ['7e 01 61', 'name index 62 out of range'],
      ['40 05 61', 'malformed name'],
      ['40 01 61 05 62', 'malformed value'],
      ['3f e9 26', 'table size 5000 above 4096'],
      ['82 20', 'table size update after a field'],
      // Huffman: 'a' (00011) then padding of zeros, not ones.
      ['40 01 61 81 18', 'malformed value'],
      // Huffman: a full byte of padding (8 bits of ones after a symbol boundary).
      ['40 01 61 82 1f ff', 'malformed value'],
      // Huffman: the EOS symbol itself (30 ones) inside a string.
      ['40 01 61 84 ff ff ff ff', 'malformed value'],
    ];
    for (const [bytes, reason] of cases) {
      const r = new HpackDecoder().decode(hex(bytes), 1 << 20);
      assert.equal(r, reason, bytes);
    }
  });

  it('decodes Huffman strings exactly, padding included', () => {
    // "www.example.com" (RFC 7541 C.4.1) and a 7-bit padding boundary.
    assert.equal(huffmanDecode(hex('f1e3 c2e5 f23a 6ba0 ab90 f4ff'), 0, 12), 'www.example.com');
    assert.equal(huffmanDecode(hex('1f'), 0, 1), 'a', '00011 then 111 padding');
    assert.equal(huffmanDecode(hex('ff'), 0, 1), undefined, 'only padding but 8 bits of it');
    assert.equal(huffmanDecode(hex(''), 0, 0), '');
  });
});
