/**
 * Reading subjectAltNames from node:tls peer certificates without an X.509 library: Node renders
 * them as one string (`DNS:a, URI:spiffe://b, IP Address:10.0.0.1`), in certificate order, and
 * JSON-quotes any value containing `,` `"` `\` `'` or non-printable characters
 * (`DNS:"a,b"`), so the list splits unambiguously.
 */

/** One subjectAltName entry: `type` as Node prints it (`DNS`, `URI`, `IP Address`, `email`, …). */
export interface SanEntry {
  readonly type: string;
  readonly value: string;
}

/**
 * Parses Node's `subjectaltname` string into entries, in certificate order. Returns `undefined`
 * for text that does not follow Node's format (callers then trust no name in it).
 */
export function parseSubjectAltNames(text: string): SanEntry[] | undefined {
  const out: SanEntry[] = [];
  let i = 0;
  while (i < text.length) {
    const colon = text.indexOf(':', i);
    if (colon === -1) return undefined;
    const type = text.slice(i, colon);
    let value: string;
    let end: number;
    if (text[colon + 1] === '"') {
      // A JSON string: find the closing quote, skipping escaped characters.
      let j = colon + 2;
      while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      if (j >= text.length) return undefined;
      try {
        value = JSON.parse(text.slice(colon + 1, j + 1)) as string;
      } catch {
        return undefined;
      }
      end = j + 1;
    } else {
      // Unquoted values never contain a comma.
      const comma = text.indexOf(',', colon + 1);
      end = comma === -1 ? text.length : comma;
      value = text.slice(colon + 1, end);
    }
    out.push({ type, value });
    if (end === text.length) break;
    if (text.slice(end, end + 2) !== ', ') return undefined;
    i = end + 2;
  }
  return out;
}

/**
 * The mesh identity a certificate names: its first DNS or URI subjectAltName, in certificate
 * order (POLICY-SEMANTICS §4.3, §7; never the subject CN). `undefined` when there is none.
 */
export function firstIdentitySan(subjectAltName: string | undefined): string | undefined {
  if (subjectAltName === undefined || subjectAltName === '') return undefined;
  const first = parseSubjectAltNames(subjectAltName)?.find((e) => e.type === 'DNS' || e.type === 'URI');
  return first === undefined || first.value === '' ? undefined : first.value;
}

/** The DNS subjectAltNames of a certificate, in order (empty when unparseable). */
export function dnsSans(subjectAltName: string | undefined): string[] {
  if (subjectAltName === undefined || subjectAltName === '') return [];
  return (parseSubjectAltNames(subjectAltName) ?? []).filter((e) => e.type === 'DNS').map((e) => e.value);
}
