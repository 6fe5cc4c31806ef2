import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import protobuf from 'protobufjs';
import {
  decodeTransportHeader,
  encodeTransportHeader,
  TRANSPORT_HEADER_MAX_MESSAGE_BYTES,
  TRANSPORT_HEADER_PREFACE,
  type TransportHeader,
  type TransportHeaderDecode,
} from './transport-header.js';

const PREFACE = Buffer.from(TRANSPORT_HEADER_PREFACE, 'latin1');
const root = protobuf.parse(readFileSync(join(import.meta.dirname, 'transport-header.proto'), 'utf8')).root;
const Header = root.lookupType('transport.l5d.io.Header');

const bytes = (h: string) => Buffer.from(h.replace(/\s+/g, ''), 'hex');
/** Preface + length + `message`. */
const framed = (message: Uint8Array) => {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(message.length);
  return Buffer.concat([PREFACE, len, message]);
};
const decoded = (header: TransportHeader, consumed: number): TransportHeaderDecode => ({ kind: 'header', header, consumed });

/** The protobufjs plain object for a header, with oneof members as plain objects. */
function pbjsObject(h: TransportHeader): Record<string, unknown> {
  const o: Record<string, unknown> = { port: h.port };
  if (h.name !== undefined) o.name = h.name;
  if (h.sessionProtocol !== undefined) o.sessionProtocol = { [h.sessionProtocol]: {} };
  return o;
}

const label = fc.stringMatching(/^[a-z0-9]([a-z0-9_-]{0,20}[a-z0-9])?$/);
const dnsName = fc
  .tuple(fc.array(label, { minLength: 0, maxLength: 4 }), fc.stringMatching(/^[a-z]([a-z0-9-]{0,8}[a-z0-9])?$/))
  .map(([labels, last]) => [...labels, last].join('.'));
const header: fc.Arbitrary<TransportHeader> = fc
  .record({
    port: fc.integer({ min: 1, max: 65_535 }),
    name: fc.option(dnsName, { nil: undefined }),
    sessionProtocol: fc.option(fc.constantFrom('http1' as const, 'http2' as const), { nil: undefined }),
  })
  .map(({ port, name, sessionProtocol }) => ({ port, ...(name === undefined ? {} : { name }), ...(sessionProtocol === undefined ? {} : { sessionProtocol }) }));

describe('transport header: encoding', () => {
  it('writes the preface, a big-endian length and the proto3 message', () => {
    assert.equal(encodeTransportHeader({ port: 8080 }).toString('hex'), `${PREFACE.toString('hex')}00000003 08 903f`.replace(/\s/g, ''));
    assert.deepEqual(
      encodeTransportHeader({ port: 4143, name: 'web.emojivoto.svc.cluster.local', sessionProtocol: 'http2' }).subarray(PREFACE.length),
      Buffer.concat([bytes('00000028 08af20 121f'), Buffer.from('web.emojivoto.svc.cluster.local'), bytes('1a02 1200')]),
    );
    assert.deepEqual(encodeTransportHeader({ port: 1, name: '', sessionProtocol: 'http1' }).subarray(PREFACE.length), bytes('00000006 0801 1a02 0a00'));
  });

  it('refuses headers no proxy may send', () => {
    for (const port of [0, -1, 65_536, 1.5, Number.NaN]) assert.throws(() => encodeTransportHeader({ port }), RangeError);
    for (const name of ['10.0.0.1', 'a..b', 'ünï.code', 'x.']) assert.throws(() => encodeTransportHeader({ port: 80, name }), RangeError);
    assert.throws(() => encodeTransportHeader({ port: 80, sessionProtocol: 'http3' as 'http1' }), RangeError);
  });
});

describe('transport header: interop with protobufjs over transport-header.proto', () => {
  it('our bytes are what protobufjs encodes, and each side decodes the other', () => {
    fc.assert(
      fc.property(header, (h) => {
        const ours = encodeTransportHeader(h);
        const theirs = Header.encode(Header.fromObject(pbjsObject(h))).finish();
        assert.deepEqual(ours.subarray(PREFACE.length + 4), Buffer.from(theirs));
        assert.deepEqual(Header.toObject(Header.decode(ours.subarray(PREFACE.length + 4))), pbjsObject(h));
        assert.deepEqual(decodeTransportHeader(framed(theirs)), decoded(h, ours.length));
      }),
      { numRuns: 500 },
    );
  });

  it('decodes protobufjs messages with fields out of order, repeated and unknown', () => {
    const w = protobuf.Writer.create();
    w.uint32((9 << 3) | 0).uint64(12345678901234); // unknown varint
    w.uint32((3 << 3) | 2)
      .fork()
      .uint32((1 << 3) | 2)
      .fork()
      .ldelim()
      .ldelim(); // session_protocol http1
    w.uint32((2 << 3) | 2).string('first.example');
    w.uint32((1 << 3) | 0).int32(70); // overridden below: the last value wins
    w.uint32((10 << 3) | 1).fixed64(1); // unknown fixed64
    w.uint32((11 << 3) | 5).fixed32(2); // unknown fixed32
    w.uint32((12 << 3) | 2).bytes(Buffer.from('opaque')); // unknown bytes
    w.uint32((13 << 3) | 3)
      .uint32((1 << 3) | 0)
      .uint32(5)
      .uint32((13 << 3) | 4); // unknown group
    w.uint32((1 << 3) | 0).int32(8080);
    w.uint32((2 << 3) | 2).string('svc.ns');
    // A second session_protocol merges into the first: the oneof's last member wins.
    w.uint32((3 << 3) | 2)
      .fork()
      .uint32((2 << 3) | 2)
      .fork()
      .uint32((7 << 3) | 0)
      .uint32(1)
      .ldelim()
      .ldelim();
    const message = w.finish();
    assert.deepEqual(Header.toObject(Header.decode(message)), { port: 8080, name: 'svc.ns', sessionProtocol: { http2: {} } });
    assert.deepEqual(
      decodeTransportHeader(framed(message)),
      decoded({ port: 8080, name: 'svc.ns', sessionProtocol: 'http2' }, PREFACE.length + 4 + message.length),
    );
    // An empty SessionProtocol (or one whose member is unknown to us) means no session protocol.
    const empty = Header.encode(Header.fromObject({ port: 80, sessionProtocol: {} })).finish();
    assert.deepEqual(decodeTransportHeader(framed(empty)), decoded({ port: 80 }, PREFACE.length + 4 + empty.length));
  });
});

describe('transport header: incremental decoding', () => {
  it('needs more at every byte boundary, then decodes; the rest of the stream is not consumed', () => {
    const wire = encodeTransportHeader({ port: 443, name: 'gateway.example', sessionProtocol: 'http1' });
    for (let k = 0; k < wire.length; k++) assert.deepEqual(decodeTransportHeader(wire.subarray(0, k)), { kind: 'need-more' }, `prefix of ${k}`);
    const stream = Buffer.concat([wire, Buffer.from('GET / HTTP/1.1\r\n')]);
    assert.deepEqual(decodeTransportHeader(stream), decoded({ port: 443, name: 'gateway.example', sessionProtocol: 'http1' }, wire.length));
  });

  it('round-trips every header and is prefix-stable on arbitrary input', () => {
    fc.assert(
      fc.property(header, (h) => {
        const wire = encodeTransportHeader(h);
        assert.deepEqual(decodeTransportHeader(wire), decoded(h, wire.length));
      }),
    );
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 64 }),
          fc.uint8Array({ maxLength: 64 }).map((m) => framed(m)),
        ),
        fc.nat(),
        (input, split) => {
          const whole = decodeTransportHeader(input);
          const prefix = decodeTransportHeader(input.subarray(0, split % (input.length + 1)));
          if (prefix.kind !== 'need-more') assert.deepEqual(prefix, whole);
          if (whole.kind === 'header') {
            assert.ok(whole.header.port >= 1 && whole.header.port <= 65_535);
            if (whole.header.name !== undefined) assert.ok(Buffer.from(input).includes(Buffer.from(whole.header.name)));
          }
        },
      ),
      { numRuns: 5000 },
    );
  });

  it('never throws on mutated headers', () => {
    fc.assert(
      fc.property(header, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }), (h, edits) => {
        const wire = Buffer.from(encodeTransportHeader(h));
        for (const [at, value] of edits) wire[PREFACE.length + (at % (wire.length - PREFACE.length))] = value;
        const r = decodeTransportHeader(wire);
        assert.ok(['need-more', 'header', 'invalid'].includes(r.kind));
      }),
      { numRuns: 3000 },
    );
  });
});

describe('transport header: invalid input', () => {
  const cases: [string, Buffer, string][] = [
    ['a wrong preface', Buffer.from('transport.l5d.io/v2\r\n\r\n'), 'missing transport header preface'],
    ['plain HTTP', Buffer.from('GET / HTTP/1.1\r\n'), 'missing transport header preface'],
    ['a wrong first byte', Buffer.from('x'), 'missing transport header preface'],
    ['a length over the cap', Buffer.concat([PREFACE, bytes('00010001')]), `header length 65537 exceeds ${TRANSPORT_HEADER_MAX_MESSAGE_BYTES} bytes`],
    ['a length of 4 GiB - 1', Buffer.concat([PREFACE, bytes('ffffffff')]), `header length 4294967295 exceeds ${TRANSPORT_HEADER_MAX_MESSAGE_BYTES} bytes`],
    ['an empty message (port 0)', framed(Buffer.alloc(0)), 'port 0 is not in 1-65535'],
    ['no port', framed(bytes('1203 612e62')), 'port 0 is not in 1-65535'],
    ['port 0 explicitly', framed(bytes('0800')), 'port 0 is not in 1-65535'],
    ['port 65536', framed(bytes('08808004')), 'port 65536 is not in 1-65535'],
    ['a negative port', framed(bytes('08ffffffffffffffffff01')), 'port -1 is not in 1-65535'],
    ['a port beyond int32', framed(bytes('0880808080800100')), 'port is not an int32'],
    ['a port of 2^31', framed(bytes('088080808008')), 'port is not an int32'],
    ['an 11-byte varint', framed(bytes('08ffffffffffffffffff8101')), 'overlong port'],
    ['a 10-byte varint over 64 bits', framed(bytes('08ffffffffffffffffff02')), 'overlong port'],
    ['a truncated port', framed(bytes('0850 0880')), 'truncated port'],
    ['a port with the wrong wire type', framed(bytes('0d50000000')), 'wrong wire type for port'],
    ['field number 0', framed(bytes('0850 0001')), 'field number 0'],
    ['a field number over 32 bits', framed(bytes('0850 f8ffffff7f00')), 'field number out of range'],
    ['an overlong tag', framed(bytes('0850 ffffffffffffffffffff01')), 'overlong field tag'],
    ['a name overrunning the message', framed(bytes('0850 1205 6162')), 'truncated name'],
    ['a name length over 32 bits', framed(bytes('0850 12ffffffff7f')), 'truncated name'],
    ['a truncated name length', framed(bytes('0850 1280')), 'truncated name length'],
    ['a name with the wrong wire type', framed(bytes('0850 1001')), 'wrong wire type for name'],
    ['a name that is an IP address', framed(Buffer.concat([bytes('0850 1208'), Buffer.from('10.0.0.1')])), 'name is not a DNS host name'],
    ['a name with a NUL', framed(Buffer.concat([bytes('0850 1203'), Buffer.from('a\0b')])), 'name is not a DNS host name'],
    ['a name in UTF-8', framed(Buffer.concat([bytes('0850 1206'), Buffer.from('bü.de')])), 'name is not a DNS host name'],
    ['a name that is not UTF-8', framed(bytes('0850 1202 c328')), 'name is not a DNS host name'],
    ['session_protocol with the wrong wire type', framed(bytes('0850 1801')), 'wrong wire type for session_protocol'],
    ['a truncated session_protocol', framed(bytes('0850 1a04 0a00')), 'truncated session_protocol'],
    ['http1 with the wrong wire type', framed(bytes('0850 1a02 0800')), 'session_protocol: wrong wire type for http1'],
    ['http2 overrunning session_protocol', framed(bytes('0850 1a02 1201')), 'session_protocol: truncated http2'],
    ['garbage inside Http1', framed(bytes('0850 1a03 0a01 ff')), 'session_protocol: truncated field tag'],
    ['field 0 inside SessionProtocol', framed(bytes('0850 1a02 0000')), 'session_protocol: field number 0'],
    ['a truncated unknown fixed64', framed(bytes('0850 4901020304')), 'truncated fixed64 field'],
    ['a truncated unknown fixed32', framed(bytes('0850 4d0102')), 'truncated fixed32 field'],
    ['a truncated unknown bytes field', framed(bytes('0850 4a05 0102')), 'truncated length-delimited field'],
    ['an unterminated group', framed(bytes('0850 4b 0801')), 'unterminated group'],
    ['a mismatched end group', framed(bytes('0850 4b 0801 54')), 'mismatched end group'],
    ['a stray end group', framed(bytes('0850 4c')), 'unexpected end group'],
    ['wire type 6', framed(bytes('0850 4e')), 'invalid wire type 6'],
    ['wire type 7', framed(bytes('0850 4f')), 'invalid wire type 7'],
    ['groups nested too deeply', framed(Buffer.concat([bytes('0850'), Buffer.alloc(40, 0x4b), Buffer.alloc(40, 0x4c)])), 'groups nested too deeply'],
  ];
  for (const [name, input, reason] of cases) {
    it(name, () => {
      assert.deepEqual(decodeTransportHeader(input), { kind: 'invalid', reason });
      assert.deepEqual(decodeTransportHeader(Buffer.concat([input, Buffer.alloc(16, 0xff)])), { kind: 'invalid', reason });
    });
  }

  it('accepts padded (non-minimal) varints as protobuf does, and nested groups within the bound', () => {
    assert.deepEqual(decodeTransportHeader(framed(bytes('08d08080808000'))), decoded({ port: 80 }, PREFACE.length + 4 + 7));
    const nested = Buffer.concat([bytes('0850'), Buffer.alloc(20, 0x4b), Buffer.alloc(20, 0x4c)]);
    assert.deepEqual(decodeTransportHeader(framed(nested)), decoded({ port: 80 }, PREFACE.length + 4 + nested.length));
    assert.deepEqual(Header.toObject(Header.decode(nested)), { port: 80 });
  });

  it('honours a smaller cap', () => {
    const wire = encodeTransportHeader({ port: 80, name: 'a-rather-long-name.example' });
    assert.deepEqual(decodeTransportHeader(wire, 8), { kind: 'invalid', reason: `header length ${wire.length - PREFACE.length - 4} exceeds 8 bytes` });
  });
});
