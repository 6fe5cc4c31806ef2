import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  bitString,
  boolean,
  children,
  type DerElement,
  DerError,
  decode,
  encodeLength,
  explicit,
  integer,
  oid,
  readBitString,
  readBoolean,
  readElement,
  readIntegerBytes,
  readOid,
  readSmallInteger,
  readString,
  readTime,
  sequence,
  TAG,
  time,
  tlv,
  utf8String,
} from './der.js';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const bytes = (h: string) => new Uint8Array(Buffer.from(h.replace(/\s+/g, ''), 'hex'));

describe('der: lengths', () => {
  it('encodes short and minimal long forms', () => {
    const cases: [number, string][] = [
      [0, '00'],
      [1, '01'],
      [127, '7f'],
      [128, '8180'],
      [255, '81ff'],
      [256, '820100'],
      [65_535, '82ffff'],
      [65_536, '83010000'],
      [16_777_216, '8401000000'],
    ];
    for (const [n, want] of cases) assert.equal(hex(encodeLength(n)), want, String(n));
    assert.throws(() => encodeLength(-1), RangeError);
    assert.throws(() => encodeLength(2 ** 32), RangeError);
  });

  it('round-trips every length form through the reader', () => {
    fc.assert(
      fc.property(fc.oneof(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 70_000 })), (n) => {
        const content = new Uint8Array(n).fill(0xab);
        const der = tlv(TAG.OCTET_STRING, content);
        assert.equal(der.length, 1 + encodeLength(n).length + n);
        const el = decode(der);
        assert.equal(el.tag, TAG.OCTET_STRING);
        assert.equal(el.content.length, n);
        assert.equal(el.bytes.length, der.length);
      }),
    );
  });

  it('refuses indefinite, non-minimal, oversized and truncated lengths', () => {
    const bad: [string, RegExp][] = [
      ['3080 0000', /indefinite/],
      ['0481 05 0102030405', /non-minimal/],
      ['0482 0005 0102030405', /non-minimal/],
      [`0482 0080${'00'.repeat(0x80)}`, /non-minimal/],
      ['0485 0000000001 00', /too large/],
      ['04', /truncated/],
      ['0482 01', /truncated/],
      ['0403 0102', /truncated/],
      ['1f01 00', /high tag/],
      ['', /truncated/],
    ];
    for (const [h, want] of bad)
      assert.throws(
        () => decode(bytes(h)),
        (e: unknown) => e instanceof DerError && want.test(e.message),
        h,
      );
    // 128 octets in the long form is the minimal encoding.
    assert.equal(decode(bytes(`0481 80${'00'.repeat(0x80)}`)).content.length, 0x80);
  });

  it('refuses trailing bytes and constructed values not filled exactly by their children', () => {
    assert.throws(() => decode(bytes('0500 00')), /trailing/);
    assert.throws(() => children(decode(bytes('3003 0500 05'))), /truncated/);
    assert.throws(() => children(decode(bytes('0400'))), /not constructed/);
    assert.deepEqual(
      children(decode(bytes('3005 0500 0101ff'))).map((c) => c.tag),
      [TAG.NULL, TAG.BOOLEAN],
    );
  });

  it('never reads past its input or throws anything but DerError on random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (buf) => {
        try {
          const walk = (el: DerElement): void => {
            assert.ok(el.bytes.length <= buf.length);
            if (el.tag & 0x20) for (const c of children(el)) walk(c);
          };
          walk(decode(buf));
        } catch (e) {
          assert.ok(e instanceof DerError, String(e));
        }
      }),
    );
  });
});

describe('der: values', () => {
  it('encodes INTEGERs minimally as non-negative', () => {
    assert.equal(hex(integer(0)), '020100');
    assert.equal(hex(integer(2)), '020102');
    assert.equal(hex(integer(127)), '02017f');
    assert.equal(hex(integer(128)), '02020080');
    assert.equal(hex(integer(256)), '02020100');
    assert.equal(hex(integer(bytes('00 00 01'))), '020101');
    assert.equal(hex(integer(bytes('ff'))), '020200ff');
    assert.equal(hex(integer(new Uint8Array())), '020100');
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 40 }), (mag) => {
        const el = decode(integer(mag));
        const content = readIntegerBytes(el);
        assert.equal(BigInt(`0x${hex(content) || '0'}`), BigInt(`0x${hex(mag)}`));
        assert.ok(((content[0] as number) & 0x80) === 0);
      }),
    );
    assert.throws(() => readIntegerBytes(decode(bytes('0202 0001'))), /non-minimal/);
    assert.throws(() => readIntegerBytes(decode(bytes('0202 ff80'))), /non-minimal/);
    assert.equal(readSmallInteger(decode(bytes('0201 ff'))), -1);
    assert.equal(readSmallInteger(decode(bytes('0202 ff7f'))), -129);
    assert.equal(readSmallInteger(decode(integer(70_000))), 70_000);
  });

  it('round-trips OIDs', () => {
    for (const o of ['2.5.29.17', '1.2.840.10045.4.3.2', '1.2.840.113549.1.9.14', '0.0', '2.999.1', '1.3.6.1.4.1.311.21.20']) {
      assert.equal(readOid(decode(oid(o))), o);
    }
    assert.equal(hex(oid('1.2.840.10045.4.3.2')), '06082a8648ce3d040302');
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 }),
        fc.integer({ min: 0, max: 39 }),
        fc.array(fc.integer({ min: 0, max: 2 ** 40 }), { maxLength: 8 }),
        (a, b, rest) => {
          const dotted = [a, b, ...rest].join('.');
          assert.equal(readOid(decode(oid(dotted))), dotted);
        },
      ),
    );
    assert.throws(() => readOid(decode(bytes('0600'))), /empty/);
    assert.throws(() => readOid(decode(bytes('0602 2a86'))), /truncated/);
    assert.throws(() => readOid(decode(bytes('0603 2a8001'))), /non-minimal/);
    assert.throws(() => oid('1.40'), RangeError);
  });

  it('reads BOOLEANs and BIT STRINGs strictly', () => {
    assert.equal(readBoolean(decode(boolean(true))), true);
    assert.equal(readBoolean(decode(boolean(false))), false);
    assert.throws(() => readBoolean(decode(bytes('0101 01'))), /not a DER BOOLEAN/);
    assert.equal(hex(bitString(bytes('a0'), 5)), '030205a0');
    assert.deepEqual(readBitString(decode(bytes('030205a0'))), { bytes: bytes('a0'), unusedBits: 5 });
    assert.throws(() => readBitString(decode(bytes('030205a1'))), /unused bits/);
    assert.throws(() => readBitString(decode(bytes('030108'))), /unused-bit count/);
    assert.throws(() => readBitString(decode(bytes('0300'))), /empty/);
  });

  it('writes UTCTime through 2049 and GeneralizedTime from 2050, in whole seconds', () => {
    const t = (iso: string) => Buffer.from(decode(time(Date.parse(iso))).content).toString('latin1');
    assert.equal(decode(time(Date.parse('2049-12-31T23:59:59Z'))).tag, TAG.UTC_TIME);
    assert.equal(t('2049-12-31T23:59:59.999Z'), '491231235959Z');
    assert.equal(t('2026-01-02T03:04:05Z'), '260102030405Z');
    assert.equal(t('1950-01-01T00:00:00Z'), '500101000000Z');
    assert.equal(decode(time(Date.parse('2050-01-01T00:00:00Z'))).tag, TAG.GENERALIZED_TIME);
    assert.equal(t('2050-01-01T00:00:00Z'), '20500101000000Z');
    assert.equal(t('1949-12-31T23:59:59Z'), '19491231235959Z');
  });

  it('decodes string types', () => {
    assert.equal(readString(decode(utf8String('héllo ✓'))), 'héllo ✓');
    assert.equal(readString(decode(bytes('1303 616263'))), 'abc');
    assert.throws(() => readString(decode(bytes('1301 40'))), /PrintableString/);
    assert.equal(readString(decode(bytes('1e04 00610062'))), 'ab');
    assert.equal(readString(decode(bytes('1c08 0000006100000062'))), 'ab');
    assert.throws(() => readString(decode(bytes('0c02 c328'))), /UTF-8/);
    assert.equal(readString(decode(bytes('0500'))), undefined);
  });

  it('round-trips nested structures', () => {
    const leaf = fc.oneof(
      fc.uint8Array({ maxLength: 300 }).map((b) => tlv(TAG.OCTET_STRING, b)),
      fc.integer({ min: 0, max: 2 ** 48 }).map((n) => integer(n)),
      fc.boolean().map(boolean),
    );
    const tree = fc.letrec<{ node: Uint8Array }>((tie) => ({
      node: fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        leaf,
        fc.array(tie('node'), { maxLength: 5 }).map((kids) => sequence(...kids)),
        fc.array(tie('node'), { maxLength: 3 }).map((kids) => explicit(3, ...kids)),
      ),
    })).node;
    fc.assert(
      fc.property(tree, (der) => {
        const rebuild = (el: DerElement): Uint8Array => (el.tag & 0x20 ? tlv(el.tag, ...children(el).map(rebuild)) : el.bytes);
        assert.equal(hex(rebuild(decode(der))), hex(der));
        assert.equal(readElement(der, 0).next, der.length);
      }),
    );
  });
});

describe('der: readTime', () => {
  const utc = (text: string) => tlv(TAG.UTC_TIME, new TextEncoder().encode(text));
  const gen = (text: string) => tlv(TAG.GENERALIZED_TIME, new TextEncoder().encode(text));

  it('reads UTCTime (YY below 50 is 20YY) and GeneralizedTime', () => {
    assert.equal(readTime(decode(utc('260102030405Z'))), Date.parse('2026-01-02T03:04:05Z'));
    assert.equal(readTime(decode(utc('491231235959Z'))), Date.parse('2049-12-31T23:59:59Z'));
    assert.equal(readTime(decode(utc('500101000000Z'))), Date.parse('1950-01-01T00:00:00Z'));
    assert.equal(readTime(decode(utc('000229000000Z'))), Date.parse('2000-02-29T00:00:00Z'));
    assert.equal(readTime(decode(gen('20500101000000Z'))), Date.parse('2050-01-01T00:00:00Z'));
    assert.equal(readTime(decode(gen('99991231235959Z'))), Date.parse('9999-12-31T23:59:59Z'));
    assert.equal(readTime(decode(gen('00010101000000Z'))), Date.parse('0001-01-01T00:00:00Z'));
  });

  it('round-trips what time() writes', () => {
    fc.assert(
      fc.property(fc.integer({ min: Date.parse('0000-01-01T00:00:00Z'), max: Date.parse('9999-12-31T23:59:59Z') }), (ms) => {
        assert.equal(readTime(decode(time(ms))), Math.floor(ms / 1000) * 1000);
      }),
    );
  });

  it('refuses anything but the strict forms', () => {
    for (const bad of [
      utc('2601020304Z'), // no seconds
      utc('260102030405'), // no Z
      utc('260102030405+0100'),
      utc('260102030405.5Z'),
      utc('261302030405Z'), // month 13
      utc('260230030405Z'), // Feb 30
      utc('250229000000Z'), // not a leap year
      utc('260100030405Z'), // day 0
      utc('260102240000Z'),
      utc('260102036000Z'),
      utc('260102030460Z'),
      utc('2601020304 5Z'),
      utc('２60102030405Z'),
      gen('260102030405Z'),
      gen('20260102030405.123Z'),
      gen('2026010203040Z'),
    ]) {
      assert.throws(() => readTime(decode(bad)), DerError, Buffer.from(bad).toString('latin1'));
    }
    assert.throws(() => readTime(decode(bytes('0500'))), /expected UTCTime or GeneralizedTime/);
    assert.throws(() => readTime(undefined, 'notAfter'), /notAfter is missing/);
  });
});
