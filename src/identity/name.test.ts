import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { decode, ia5String, integer, oid, sequence, set, TAG, tlv, utf8String } from './der.js';
import { formatName } from './name.js';
import { x509 } from './x509.js';

const latin1 = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
const atv = (type: string, value: Uint8Array) => sequence(oid(type), value);
const name = (...rdns: Uint8Array[][]) => sequence(...rdns.map((atvs) => set(...atvs)));
const printable = (s: string) => tlv(TAG.PRINTABLE_STRING, latin1(s));
/** What `@peculiar/x509` printed for this DER Name (the format ward keeps). */
const library = (der: Uint8Array) => new (x509().Name)(der).toString();

const CN = '2.5.4.3';
const O = '2.5.4.10';
const OU = '2.5.4.11';

describe('formatName', () => {
  it('prints names exactly as @peculiar/x509 did', () => {
    const cases: Uint8Array[] = [
      name([atv(CN, printable('identity.linkerd.cluster.local'))]),
      name(),
      // Several RDNs, and a multi-valued one.
      name([atv('2.5.4.6', printable('DE'))], [atv(O, utf8String('Bühler AG')), atv(OU, printable('Ops'))], [atv(CN, printable('root'))]),
      // Every registered short name, an unregistered type, IA5 values (E, DC).
      name(
        ...['2.5.4.3', '2.5.4.7', '2.5.4.8', '2.5.4.10', '2.5.4.11', '2.5.4.6', '2.5.4.42', '2.5.4.43', '2.5.4.4', '2.5.4.12', '2.5.4.5', '2.5.4.97'].map(
          (t) => [atv(t, printable('x'))],
        ),
        [atv('1.2.840.113549.1.9.1', ia5String('a@b.example'))],
        [atv('0.9.2342.19200300.100.1.25', ia5String('example'))],
      ),
      // Escaping: specials, leading space or #, trailing space, only the first CR/LF/TAB.
      name([atv(CN, utf8String('a,b+c"d\\e<f>g;h'))], [atv(O, utf8String(' #lead'))], [atv(OU, utf8String('#x '))], [atv(CN, utf8String('l1\nl2\nl3\tt'))]),
      // TeletexString, BMPString, UniversalString, invalid UTF-8, a leading BOM.
      name(
        [atv(CN, tlv(TAG.TELETEX_STRING, Uint8Array.of(0x63, 0xe9)))],
        [atv(CN, tlv(TAG.BMP_STRING, Uint8Array.of(0x00, 0x61, 0x20, 0xac)))],
        [atv(CN, tlv(TAG.UNIVERSAL_STRING, Uint8Array.of(0, 0, 0, 0x61, 0, 0, 0x20, 0xac)))],
        [atv(CN, tlv(TAG.UTF8_STRING, Uint8Array.of(0xc3, 0x28)))],
        [atv(CN, tlv(TAG.UTF8_STRING, Uint8Array.of(0xef, 0xbb, 0xbf, 0x61)))],
      ),
      // Non-string values: hex of the whole DER; NULL prints empty.
      name([atv(CN, integer(258))], [atv(O, tlv(TAG.OCTET_STRING, Uint8Array.of(1, 2)))], [atv(OU, Uint8Array.of(TAG.NULL, 0))], [atv(CN, sequence())]),
      // Empty values.
      name([atv(CN, printable(''))], [atv(O, utf8String(''))]),
    ];
    for (const der of cases) assert.equal(formatName(decode(der)), library(der), Buffer.from(der).toString('hex'));
    assert.equal(formatName(decode(cases[0] as Uint8Array)), 'CN=identity.linkerd.cluster.local');
    assert.equal(formatName(decode(cases[2] as Uint8Array)), 'C=DE, O=Bühler AG+OU=Ops, CN=root');
  });

  it('agrees with @peculiar/x509 on generated names', () => {
    const type = fc.constantFrom(CN, O, OU, '2.5.4.6', '1.2.840.113549.1.9.1', '2.5.4.5', '1.3.6.1.4.1.99999.1');
    const special = fc.constantFrom(',', '+', '"', '\\', '<', '>', ';', '#', ' ', '\r', '\n', '\t', '=', 'é', '✓');
    const text = fc.array(fc.oneof(special, fc.string({ maxLength: 3 })), { maxLength: 6 }).map((parts) => parts.join(''));
    const value = fc.oneof(
      text.map(utf8String),
      fc.string({ unit: fc.constantFrom(..."Ab9 '()+,-./:=?".split('')), maxLength: 8 }).map(printable),
      fc.string({ unit: 'binary-ascii', maxLength: 8 }).map((s) => tlv(TAG.IA5_STRING, latin1(s))),
      fc.uint8Array({ maxLength: 8 }).map((b) => tlv(TAG.TELETEX_STRING, b)),
      fc.uint8Array({ maxLength: 8 }).map((b) => tlv(TAG.UTF8_STRING, b)),
      fc
        .array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 4 })
        .map((units) => tlv(TAG.BMP_STRING, Uint8Array.from(units.flatMap((u) => [u >> 8, u & 0xff])))),
      fc.uint8Array({ maxLength: 6 }).map((b) => tlv(TAG.OCTET_STRING, b)),
      fc.nat().map((n) => integer(n)),
    );
    const rdn = fc.array(fc.tuple(type, value), { minLength: 1, maxLength: 3 }).map((atvs) => atvs.map(([t, v]) => atv(t, v)));
    fc.assert(
      fc.property(fc.array(rdn, { maxLength: 4 }), (rdns) => {
        const der = name(...rdns);
        assert.equal(formatName(decode(der)), library(der));
      }),
      { numRuns: 500 },
    );
  });

  it('decodes astral UniversalString characters (where the library kept only their low 16 bits)', () => {
    assert.equal(formatName(decode(name([atv(CN, tlv(TAG.UNIVERSAL_STRING, Uint8Array.of(0, 1, 0xf6, 0)))]))), 'CN=😀');
  });

  it('refuses what is not a Name', () => {
    assert.throws(() => formatName(decode(set())), /expected a SEQUENCE/);
    assert.throws(() => formatName(decode(name([sequence(oid(CN))]))), /type and a value/);
    assert.throws(() => formatName(decode(name([atv(CN, tlv(TAG.BMP_STRING, Uint8Array.of(0x61)))]))), /odd-length BMPString/);
  });
});
