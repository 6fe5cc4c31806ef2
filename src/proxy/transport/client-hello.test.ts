import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import fc from 'fast-check';
import {
  alpnData,
  captureClientHello,
  extension,
  fragmentRecords,
  handshakeOf,
  mkClientHelloMessage,
  record,
  serverNameData,
} from '../testing/client-hello-fixtures.js';
import { CLIENT_HELLO_MAX_PREFIX_BYTES, type ClientHelloSniff, MAX_CLIENT_HELLO_BYTES, MAX_CLIENT_HELLO_RECORDS, sniffClientHello } from './client-hello.js';

const MESH_NAME = 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local';

/** Every strict prefix needs more; the whole input (and the input plus trailing bytes) gives `want`. */
function assertIncremental(input: Buffer, want: ClientHelloSniff): void {
  for (let k = 0; k < input.length; k++) assert.deepEqual(sniffClientHello(input.subarray(0, k)), { kind: 'need-more' }, `prefix of ${k} bytes`);
  assert.deepEqual(sniffClientHello(input), want);
  assert.deepEqual(sniffClientHello(Buffer.concat([input, Buffer.from('trailing application data')])), want);
}

/** The handshake stream of a record sequence (fragments concatenated), as far as it is well framed. */
function defragment(input: Uint8Array): Buffer {
  const parts: Uint8Array[] = [];
  for (let at = 0; at + 5 <= input.length && input[at] === 0x16; ) {
    const length = (input[at + 3]! << 8) | input[at + 4]!;
    parts.push(input.subarray(at + 5, Math.min(input.length, at + 5 + length)));
    at += 5 + length;
  }
  return Buffer.concat(parts);
}

/** The fuzz invariants: a hello's SNI and ALPN names are bytes the client actually sent. */
function assertSound(input: Uint8Array, r: ClientHelloSniff): void {
  assert.ok(['need-more', 'not-tls', 'hello', 'malformed'].includes(r.kind), r.kind);
  if (r.kind !== 'hello') return;
  const raw = Buffer.from(input);
  const stream = defragment(input);
  const sent = (s: string) => raw.includes(Buffer.from(s, 'latin1')) || stream.includes(Buffer.from(s, 'latin1'));
  if (r.sni !== undefined) {
    assert.ok(sent(r.sni), `SNI ${JSON.stringify(r.sni)} is not in the input`);
    assert.match(r.sni, /^[A-Za-z0-9_.-]+$/);
  }
  for (const p of r.alpn) assert.ok(p.length > 0 && sent(p), `ALPN ${JSON.stringify(p)} is not in the input`);
}

describe('sniffClientHello: real ClientHellos from node:tls', () => {
  let meshHello: Buffer;
  let bareHello: Buffer;
  let tls12Hello: Buffer;
  before(async () => {
    meshHello = await captureClientHello({ servername: MESH_NAME, ALPNProtocols: ['h2', 'http/1.1'] });
    bareHello = await captureClientHello({});
    tls12Hello = await captureClientHello({ servername: 'API.Example.com', ALPNProtocols: ['transport.l5d.io/v1'], maxVersion: 'TLSv1.2' });
  });

  it('reads SNI and ALPN, needing more at every byte boundary until the hello is complete', () => {
    assertIncremental(meshHello, { kind: 'hello', sni: MESH_NAME, alpn: ['h2', 'http/1.1'] });
  });

  it('reads a hello without SNI or ALPN (client dialled an IP address)', () => {
    assertIncremental(bareHello, { kind: 'hello', alpn: [] });
  });

  it('reads a TLS 1.2 hello and keeps the SNI as sent', () => {
    assertIncremental(tls12Hello, { kind: 'hello', sni: 'API.Example.com', alpn: ['transport.l5d.io/v1'] });
  });

  it('reassembles a hello fragmented over records, the handshake header split too', () => {
    const message = handshakeOf(meshHello);
    const want: ClientHelloSniff = { kind: 'hello', sni: MESH_NAME, alpn: ['h2', 'http/1.1'] };
    for (const sizes of [[1, 1, 1, 1], [2, 60], [3], [message.length >> 1], [message.length - 1], [100, 100, 100, 100, 100]]) {
      assertIncremental(fragmentRecords(message, sizes, 0x0303), want);
    }
    // Records after the one completing the hello are not examined, whatever they hold.
    assert.deepEqual(sniffClientHello(Buffer.concat([fragmentRecords(message, [50]), record(Buffer.from('x'), 0x17)])), want);
  });

  it('is prefix-stable and never throws on mutated real hellos', () => {
    const hellos = [meshHello, bareHello, tls12Hello, fragmentRecords(handshakeOf(meshHello), [7, 30, 200])];
    const mutation = fc.oneof(
      fc.record({ op: fc.constant('set' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
      fc.record({ op: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
      fc.record({ op: fc.constant('insert' as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 8 }) }),
      fc.record({ op: fc.constant('delete' as const), at: fc.nat(), count: fc.integer({ min: 1, max: 8 }) }),
      fc.record({ op: fc.constant('truncate' as const), at: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.nat(hellos.length - 1), fc.array(mutation, { minLength: 1, maxLength: 4 }), fc.nat(), (which, mutations, split) => {
        let b = Buffer.from(hellos[which]!);
        for (const m of mutations) {
          const at = m.at % (b.length + 1);
          if (m.op === 'set' && at < b.length) b[at] = m.value;
          else if (m.op === 'flip' && at < b.length) b[at]! ^= 1 << m.bit;
          else if (m.op === 'insert') b = Buffer.concat([b.subarray(0, at), m.bytes, b.subarray(at)]);
          else if (m.op === 'delete') b = Buffer.concat([b.subarray(0, at), b.subarray(at + m.count)]);
          else if (m.op === 'truncate') b = b.subarray(0, at);
        }
        const whole = sniffClientHello(b);
        assertSound(b, whole);
        const prefix = sniffClientHello(b.subarray(0, split % (b.length + 1)));
        if (prefix.kind !== 'need-more') assert.deepEqual(prefix, whole);
      }),
      { numRuns: 3000 },
    );
  });
});

describe('sniffClientHello: not TLS', () => {
  const cases: [string, Buffer][] = [
    ['an HTTP/1 request', Buffer.from('GET / HTTP/1.1\r\n')],
    ['the HTTP/2 preface', Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')],
    ['an SSLv2-style hello', Buffer.from('802e0103010015000000100700c0030080010080060040', 'hex')],
    ['an application data record', record(Buffer.from('xx'), 0x17, 0x0303)],
    ['a handshake byte then a non-3 major version', Buffer.of(0x16, 0x02)],
    ['a single zero byte', Buffer.of(0)],
  ];
  for (const [name, input] of cases) it(name, () => assert.deepEqual(sniffClientHello(input), { kind: 'not-tls' }));

  it('needs more while the first bytes could still be a handshake record', () => {
    for (const input of [Buffer.alloc(0), Buffer.of(0x16), Buffer.of(0x16, 0x03), Buffer.of(0x16, 0x03, 0x01, 0x00)]) {
      assert.deepEqual(sniffClientHello(input), { kind: 'need-more' });
    }
  });
});

describe('sniffClientHello: hand-made hellos', () => {
  const sni = (name: string | Uint8Array) => extension(0, serverNameData([0, name]));
  const alpn = (...names: (string | Uint8Array)[]) => extension(16, alpnData(...names));
  const hello = (exts?: Uint8Array[], parts: Parameters<typeof mkClientHelloMessage>[0] = {}) =>
    fragmentRecords(mkClientHelloMessage(exts === undefined ? parts : { ...parts, extensions: exts }), [16_384]);

  it('accepts the shapes real clients send', () => {
    assert.deepEqual(sniffClientHello(hello()), { kind: 'hello', alpn: [] }, 'no extensions block (TLS 1.2 and older)');
    assert.deepEqual(sniffClientHello(hello([])), { kind: 'hello', alpn: [] }, 'empty extensions block');
    assert.deepEqual(
      sniffClientHello(hello([extension(0xfafa, Buffer.alloc(0)), sni('a.b'), extension(21, Buffer.alloc(40)), alpn(Buffer.of(0x0a, 0x0a), 'h2')])),
      {
        kind: 'hello',
        sni: 'a.b',
        alpn: ['\n\n', 'h2'],
      },
    );
    assert.deepEqual(sniffClientHello(hello([extension(0, serverNameData([7, 'ignored-type'], [0, 'svc.ns']))])), { kind: 'hello', sni: 'svc.ns', alpn: [] });
    assert.deepEqual(sniffClientHello(hello([sni('x'.repeat(63))])), { kind: 'hello', sni: 'x'.repeat(63), alpn: [] });
    assert.deepEqual(sniffClientHello(hello([], { sessionId: Buffer.alloc(0) })), { kind: 'hello', alpn: [] });
  });

  const malformed: [string, Buffer, string][] = [
    ['an empty record', record(Buffer.alloc(0)), 'empty handshake record'],
    ['a record over 2^14 bytes', Buffer.of(0x16, 0x03, 0x01, 0x40, 0x01), 'record longer than 2^14 bytes'],
    ['a ServerHello', record(Buffer.of(0x02, 0, 0, 0)), 'first handshake message is not a ClientHello'],
    [
      'an application data record before the hello completes',
      Buffer.concat([record(mkClientHelloMessage().subarray(0, 10)), record(Buffer.of(1), 0x17)]),
      'ClientHello interleaved with a non-handshake record',
    ],
    [
      'a bad version in a later record',
      Buffer.concat([record(mkClientHelloMessage().subarray(0, 10)), record(Buffer.of(1), 0x16, 0x0403)]),
      'ClientHello interleaved with a non-handshake record',
    ],
    ['legacy_version 2.3', hello([], { legacyVersion: 0x0203 }), 'ClientHello legacy_version is below 3.0'],
    ['a 33-byte session id', hello([], { sessionId: Buffer.alloc(33) }), 'session id longer than 32 bytes'],
    ['no cipher suites', hello([], { cipherSuites: Buffer.alloc(0) }), 'bad cipher_suites length'],
    ['an odd cipher suites length', hello([], { cipherSuites: Buffer.of(0x13, 0x01, 0x13) }), 'bad cipher_suites length'],
    ['no compression methods', hello([], { compression: Buffer.alloc(0) }), 'no compression methods'],
    ['a body too short for the random', record(Buffer.of(1, 0, 0, 3, 3, 3, 0)), 'ClientHello truncated before the session id'],
    [
      'a body truncated in the cipher suites length',
      record(Buffer.concat([Buffer.of(1, 0, 0, 36, 3, 3), Buffer.alloc(32), Buffer.of(0, 0)])),
      'ClientHello truncated before the cipher suites',
    ],
    ['a duplicate server_name extension', hello([sni('a.b'), sni('a.b')]), 'duplicate server_name extension'],
    ['a duplicate ALPN extension', hello([alpn('h2'), alpn('h2')]), 'duplicate ALPN extension'],
    ['an empty server_name extension', hello([extension(0, Buffer.alloc(0))]), 'server_name extension truncated'],
    ['a server_name list length mismatch', hello([extension(0, Buffer.of(0, 9, 0, 0, 1, 0x61))]), 'bad server_name list length'],
    ['an empty server_name list', hello([extension(0, Buffer.of(0, 0))]), 'bad server_name list length'],
    ['two host names', hello([extension(0, serverNameData([0, 'a.b'], [0, 'c.d']))]), 'more than one host_name in server_name'],
    ['a server_name without a host name', hello([extension(0, serverNameData([1, 'x']))]), 'server_name extension without a host_name'],
    ['a truncated server_name entry', hello([extension(0, Buffer.of(0, 2, 0, 0))]), 'truncated server_name entry'],
    ['an empty host name', hello([sni('')]), 'SNI host_name is not a DNS host name'],
    ['an IPv4 literal as SNI', hello([sni('10.1.2.3')]), 'SNI host_name is not a DNS host name'],
    ['a trailing dot in SNI', hello([sni('a.b.')]), 'SNI host_name is not a DNS host name'],
    ['an empty label in SNI', hello([sni('a..b')]), 'SNI host_name is not a DNS host name'],
    ['a leading hyphen in SNI', hello([sni('-a.b')]), 'SNI host_name is not a DNS host name'],
    ['a label of 64 bytes in SNI', hello([sni('x'.repeat(64))]), 'SNI host_name is not a DNS host name'],
    ['an SNI of 254 bytes', hello([sni(`${'x'.repeat(60)}.`.repeat(4) + 'x'.repeat(10))]), 'SNI host_name is not a DNS host name'],
    ['a NUL in SNI', hello([sni(Buffer.from('a\0.b', 'latin1'))]), 'SNI host_name is not a DNS host name'],
    ['raw UTF-8 in SNI', hello([sni(Buffer.from('bücher.de', 'utf8'))]), 'SNI host_name is not a DNS host name'],
    ['a space in SNI', hello([sni('a b.c')]), 'SNI host_name is not a DNS host name'],
    ['an empty ALPN list', hello([extension(16, Buffer.of(0, 0))]), 'bad ALPN list length'],
    ['an ALPN extension without a list length', hello([extension(16, Buffer.of(0))]), 'ALPN extension truncated'],
    ['an empty ALPN name', hello([extension(16, Buffer.of(0, 3, 0, 1, 0x68))]), 'empty ALPN protocol name'],
    ['an ALPN name overrunning the list', hello([extension(16, Buffer.of(0, 3, 5, 0x68, 0x32))]), 'ALPN protocol name longer than its list'],
    ['an ALPN list length mismatch', hello([extension(16, Buffer.of(0, 9, 2, 0x68, 0x32))]), 'bad ALPN list length'],
  ];
  // Rewrites of a valid hello's trailing extension block.
  const withExtensionsBlock = (block: Buffer) => {
    const base = mkClientHelloMessage();
    const body = Buffer.concat([base.subarray(4), block]);
    return record(Buffer.concat([Buffer.of(1, 0, (body.length >> 8) & 0xff, body.length & 0xff), body]));
  };
  malformed.push(
    [
      'extensions length shorter than the block',
      withExtensionsBlock(Buffer.of(0, 0, 0xff, 0x01, 0, 0)),
      'extensions length does not match the ClientHello length',
    ],
    [
      'extensions length longer than the block',
      withExtensionsBlock(Buffer.of(0, 9, 0xff, 0x01, 0, 0)),
      'extensions length does not match the ClientHello length',
    ],
    ['a one-byte extensions length', withExtensionsBlock(Buffer.of(0)), 'ClientHello truncated in the extensions length'],
    ['a truncated extension header', withExtensionsBlock(Buffer.of(0, 2, 0xff, 0x01)), 'truncated extension header'],
    ['an extension overrunning the block', withExtensionsBlock(Buffer.of(0, 4, 0xff, 0x01, 0, 9)), 'extension longer than the ClientHello'],
  );
  for (const [name, input, reason] of malformed) {
    it(`is malformed: ${name}`, () => {
      const r = sniffClientHello(input);
      assert.deepEqual(r, { kind: 'malformed', reason });
      // Decided no later than the full input, and the same with more bytes after it.
      assert.deepEqual(sniffClientHello(Buffer.concat([input, Buffer.alloc(64, 0x16)])), r);
    });
  }

  it('accepts a hello of exactly the size bound spread over two records, rejects one byte more early', () => {
    const padTo = (messageBytes: number) => {
      const base = mkClientHelloMessage({ extensions: [sni('big.example'), extension(21, Buffer.alloc(0))] });
      return mkClientHelloMessage({ extensions: [sni('big.example'), extension(21, Buffer.alloc(messageBytes - base.length))] });
    };
    const max = padTo(MAX_CLIENT_HELLO_BYTES);
    assert.equal(max.length, MAX_CLIENT_HELLO_BYTES);
    assert.deepEqual(sniffClientHello(fragmentRecords(max, [16_384])), { kind: 'hello', sni: 'big.example', alpn: [] });
    assert.deepEqual(sniffClientHello(fragmentRecords(max, [10_000])), { kind: 'hello', sni: 'big.example', alpn: [] });
    const over = fragmentRecords(padTo(MAX_CLIENT_HELLO_BYTES + 1), [10_000]);
    // The handshake header alone is enough to refuse it.
    assert.deepEqual(sniffClientHello(over.subarray(0, 9)), { kind: 'malformed', reason: `ClientHello longer than ${MAX_CLIENT_HELLO_BYTES} bytes` });
  });

  it(`accepts ${MAX_CLIENT_HELLO_RECORDS} records and refuses one more`, () => {
    const message = mkClientHelloMessage({ extensions: [sni('frag.example')] });
    const sizes = (records: number) => Array.from({ length: records - 1 }, () => 1);
    assert.equal(sniffClientHello(fragmentRecords(message, sizes(MAX_CLIENT_HELLO_RECORDS))).kind, 'hello');
    assert.deepEqual(sniffClientHello(fragmentRecords(message, sizes(MAX_CLIENT_HELLO_RECORDS + 1))), {
      kind: 'malformed',
      reason: `ClientHello spans more than ${MAX_CLIENT_HELLO_RECORDS} records`,
    });
  });

  it(`decides once ${CLIENT_HELLO_MAX_PREFIX_BYTES} bytes of handshake records are present`, () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 16_384 }), { minLength: 1, maxLength: 40 }),
        fc.integer({ min: 0, max: 0xff_ffff }),
        (sizes, bodyLength) => {
          const message = Buffer.alloc(20_000, 0x41);
          message.set([1, bodyLength >> 16, (bodyLength >> 8) & 0xff, bodyLength & 0xff]);
          const input = fragmentRecords(message, sizes).subarray(0, CLIENT_HELLO_MAX_PREFIX_BYTES);
          assert.notEqual(sniffClientHello(input).kind, 'need-more');
        },
      ),
    );
  });
});

describe('sniffClientHello: arbitrary input', () => {
  it('never throws, and any hello it reports is sound and prefix-stable', () => {
    const tlsish = fc
      .tuple(fc.constantFrom(0x00, 0x01, 0x02, 0x03, 0x04), fc.uint8Array({ maxLength: 400 }))
      .map(([minor, rest]) => Uint8Array.from([0x16, 0x03, minor, ...rest]));
    fc.assert(
      fc.property(fc.oneof(fc.uint8Array({ maxLength: 400 }), tlsish), fc.nat(), (input, split) => {
        const whole = sniffClientHello(input);
        assertSound(input, whole);
        const prefix = sniffClientHello(input.subarray(0, split % (input.length + 1)));
        if (prefix.kind !== 'need-more') assert.deepEqual(prefix, whole);
      }),
      { numRuns: 5000 },
    );
  });
});
