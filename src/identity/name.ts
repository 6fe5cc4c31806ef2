/**
 * X.501 Names as text, in the format `@peculiar/x509`'s `Name.toString()` used before ward read
 * certificates itself (`CN=a, O=b+OU=c`), so subjects and issuers in messages, `ward identity
 * inspect` and logs stay the same: RDNs in encoded order joined by `, `, multi-valued RDNs by
 * `+`, short names for the usual attribute types and dotted OIDs for the rest, string values
 * with the library's escaping, other values as `#` and the lower-case hex of their DER.
 */
import { children, type DerElement, DerError, readOid, TAG } from './der.js';

/** Short names of attribute types, as the library registered them. */
const ATTRIBUTE_NAMES: Readonly<Record<string, string>> = {
  '2.5.4.3': 'CN',
  '2.5.4.7': 'L',
  '2.5.4.8': 'ST',
  '2.5.4.10': 'O',
  '2.5.4.11': 'OU',
  '2.5.4.6': 'C',
  '0.9.2342.19200300.100.1.25': 'DC',
  '1.2.840.113549.1.9.1': 'E',
  '2.5.4.42': 'G',
  '2.5.4.43': 'I',
  '2.5.4.4': 'SN',
  '2.5.4.12': 'T',
};

/** The text of a Name (a DER RDNSequence); throws {@link DerError} on bad framing. */
export function formatName(name: DerElement): string {
  if (name.tag !== TAG.SEQUENCE) throw new DerError(`Name: expected a SEQUENCE, got tag 0x${name.tag.toString(16)}`);
  return children(name)
    .map((rdn) =>
      children(rdn)
        .map((atv) => {
          const [type, value, extra] = children(atv);
          if (value === undefined || extra !== undefined) throw new DerError('Name: an attribute must have a type and a value');
          const oid = readOid(type, 'Name attribute type');
          const text = attributeValueText(value);
          return `${ATTRIBUTE_NAMES[oid] ?? oid}=${text === undefined ? `#${Buffer.from(value.bytes).toString('hex')}` : escapeValue(text)}`;
        })
        .join('+'),
    )
    .join(', ');
}

/**
 * The text of a string-typed attribute value as the library decoded it (leniently, unlike
 * `readString`: PrintableString, IA5String and TeletexString byte per character, UTF8String
 * falling back to that when it is not valid UTF-8, BMPString as UTF-16 code units), `''` for
 * NULL, undefined for any other type.
 */
export function attributeValueText(value: DerElement): string | undefined {
  const c = value.content;
  switch (value.tag) {
    case TAG.PRINTABLE_STRING:
    case TAG.IA5_STRING:
    case TAG.TELETEX_STRING:
      return latin1(c);
    case TAG.UTF8_STRING:
      try {
        return utf8.decode(c);
      } catch {
        return latin1(c);
      }
    case TAG.BMP_STRING: {
      if (c.length % 2 !== 0) throw new DerError('Name: odd-length BMPString');
      let s = '';
      for (let i = 0; i < c.length; i += 2) s += String.fromCharCode(((c[i] as number) << 8) | (c[i + 1] as number));
      return s;
    }
    case TAG.UNIVERSAL_STRING: {
      if (c.length % 4 !== 0) throw new DerError('Name: bad UniversalString length');
      let s = '';
      for (let i = 0; i < c.length; i += 4) {
        const cp = (((c[i] as number) << 24) | ((c[i + 1] as number) << 16) | ((c[i + 2] as number) << 8) | (c[i + 3] as number)) >>> 0;
        s += cp <= 0x10ffff ? String.fromCodePoint(cp) : '\ufffd';
      }
      return s;
    }
    case TAG.NULL:
      return '';
    default:
      return undefined;
  }
}

// ignoreBOM keeps a leading U+FEFF, as the library's decodeURIComponent-based decoder did.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function latin1(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return s;
}

/**
 * The library's escaping, quirks included: RFC 4514 specials get a backslash, a leading space or
 * `#` and a trailing space too, and only the first CR, LF or TAB becomes `\0D`, `\0A`, `\09`.
 */
function escapeValue(text: string): string {
  return text
    .replace(/([,+"\\<>;])/g, '\\$1')
    .replace(/^([ #])/, '\\$1')
    .replace(/([ ]$)/, '\\$1')
    .replace(/([\r\n\t])/, (ch) => `\\${ch.charCodeAt(0).toString(16).padStart(2, '0').toUpperCase()}`);
}
