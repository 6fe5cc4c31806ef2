/**
 * A reader of PromQL label matchers (`{a="x",b="y"}`) as Prometheus's lexer reads them, for
 * tests: string literals end at the first unescaped quote, a raw newline ends nothing but is an
 * error, and escapes are Go's (`\a \b \f \n \r \t \v \\ \' \"`, `\xHH`, octal `\ooo`, `\uHHHH`,
 * `\UHHHHHHHH`). If an escaped value could end its literal early, this reader would see other
 * matchers than the ones written.
 */

const SIMPLE_ESCAPES: Readonly<Record<string, string>> = { a: '\x07', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v', '\\': '\\', "'": "'", '"': '"' };

/** Reads a double-quoted literal starting at `text[at]`; returns its value and the index after it. */
function readString(text: string, at: number): [string, number] {
  if (text[at] !== '"') throw new Error(`expected a string at ${at} of ${JSON.stringify(text)}`);
  let i = at + 1;
  let out = '';
  const bytes: number[] = [];
  const flush = () => {
    if (bytes.length > 0) out += Buffer.from(bytes.splice(0)).toString('utf8');
  };
  for (;;) {
    const ch = text[i];
    if (ch === undefined || ch === '\n') throw new Error(`unterminated string in ${JSON.stringify(text)}`);
    if (ch === '"') {
      flush();
      return [out, i + 1];
    }
    if (ch !== '\\') {
      flush();
      const cp = text.codePointAt(i) as number;
      out += String.fromCodePoint(cp);
      i += cp > 0xffff ? 2 : 1;
      continue;
    }
    const e = text[i + 1];
    if (e === undefined) throw new Error('escape at the end');
    const simple = SIMPLE_ESCAPES[e];
    if (simple !== undefined) {
      flush();
      out += simple;
      i += 2;
    } else if (e === 'x') {
      bytes.push(Number.parseInt(hex(text, i + 2, 2), 16));
      i += 4;
    } else if (e >= '0' && e <= '7') {
      const oct = text.slice(i + 1, i + 4);
      if (!/^[0-7]{3}$/.test(oct)) throw new Error(`bad octal escape in ${JSON.stringify(text)}`);
      bytes.push(Number.parseInt(oct, 8));
      i += 4;
    } else if (e === 'u' || e === 'U') {
      flush();
      const n = e === 'u' ? 4 : 8;
      const cp = Number.parseInt(hex(text, i + 2, n), 16);
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) throw new Error(`escape of an invalid code point in ${JSON.stringify(text)}`);
      out += String.fromCodePoint(cp);
      i += 2 + n;
    } else throw new Error(`unknown escape \\${e} in ${JSON.stringify(text)}`);
  }
}

function hex(text: string, at: number, n: number): string {
  const h = text.slice(at, at + n);
  if (!new RegExp(`^[0-9a-fA-F]{${n}}$`).test(h)) throw new Error(`bad hex escape in ${JSON.stringify(text)}`);
  return h;
}

/** The `[name, value]` pairs of a `{…}` matcher list of `=` matchers; throws when it is anything else. */
export function parsePromqlMatchers(text: string): [string, string][] {
  if (text[0] !== '{') throw new Error(`expected { in ${JSON.stringify(text)}`);
  const out: [string, string][] = [];
  let i = 1;
  if (text[i] === '}') i++;
  else
    for (;;) {
      const name = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(text.slice(i))?.[0];
      if (name === undefined) throw new Error(`expected a label name at ${i} of ${JSON.stringify(text)}`);
      i += name.length;
      if (text[i] !== '=' || text[i + 1] === '~' || text[i + 1] === '=') throw new Error(`expected = at ${i} of ${JSON.stringify(text)}`);
      const [value, next] = readString(text, i + 1);
      out.push([name, value]);
      i = next;
      if (text[i] === ',') {
        i++;
        continue;
      }
      if (text[i] === '}') {
        i++;
        break;
      }
      throw new Error(`expected , or } at ${i} of ${JSON.stringify(text)}`);
    }
  if (i !== text.length) throw new Error(`text after the matchers in ${JSON.stringify(text)}`);
  return out;
}
