/**
 * SMI regexes are Go RE2 (OSM hands them to Envoy's RE2 engine), while ward's proxy and CLI run
 * them as JavaScript regexes. `checkRe2Regex` accepts only the common ground: patterns RE2 takes
 * and JavaScript reads the same way. It refuses what RE2 refuses (lookarounds, backreferences,
 * repeat counts over 1000) and RE2 syntax JavaScript reads differently or not at all (`\pL`,
 * `\Q…\E`, `\A`, `\z`, `(?i)`, `(?P<name>…)`, `[[:alpha:]]`, `[]a]`, `\x{41}`), and escapes
 * only JavaScript knows (`\cX`, `\u0041`). Whatever passes must also compile as a JavaScript
 * regex.
 */

/** Why a pattern is refused, with what to write instead. */
export interface Re2Problem {
  readonly detail: string;
  readonly fix: string;
}

// Escapes both engines read alike: classes, control characters, word boundaries.
const SHARED_LETTER_ESCAPES = new Set(['d', 'D', 'w', 'W', 's', 'S', 'b', 'B', 'f', 'n', 'r', 't', 'v']);
const CLASS_LETTER_ESCAPES = new Set(['d', 'D', 'w', 'W', 's', 'S', 'f', 'n', 'r', 't', 'v']);

const problem = (detail: string, fix: string): Re2Problem => ({ detail, fix });

/** Checks an escape at `i` (the backslash); returns the index after it, or a problem. */
function escapeAt(p: string, i: number, inClass: boolean): number | Re2Problem {
  const c = p[i + 1];
  if (c === undefined) return problem('it ends with a lone backslash', 'escape the backslash as \\\\');
  if (c >= '1' && c <= '9') return problem(`\\${c} is a backreference (RE2 has none)`, 'match the text itself, or use \\x escapes for a character code');
  if (c === '0') return problem('\\0 is an octal escape that the two engines read differently', 'write the character as \\x00');
  if (c === 'k') return problem('\\k is a named backreference (RE2 has none)', 'match the text itself');
  if (c === 'p' || c === 'P')
    return problem(`\\${c} is a Unicode class JavaScript does not read without the u flag`, 'spell the characters out in a [...] class');
  if ('QEAzCa'.includes(c))
    return problem(`\\${c} is RE2-only syntax that JavaScript reads as the letter ${c}`, 'use ^ and $ for the ends, and escape characters one by one');
  if (c === 'c' || c === 'u') return problem(`\\${c} is JavaScript-only syntax that RE2 refuses`, 'write the character as \\xHH');
  if (c === 'x') {
    if (/^[0-9A-Fa-f]{2}$/.test(p.slice(i + 2, i + 4))) return i + 4;
    return problem('\\x must be followed by two hex digits (RE2 \\x{...} reads differently in JavaScript)', 'write \\xHH');
  }
  if (/[A-Za-z]/.test(c)) {
    const known = inClass ? CLASS_LETTER_ESCAPES : SHARED_LETTER_ESCAPES;
    if (!known.has(c)) return problem(`\\${c} is not an escape RE2 knows`, `write ${c} without the backslash`);
  }
  // Any other escaped punctuation stands for itself in both engines.
  return i + 2;
}

/** Checks a bracket class starting at `i` (the `[`); returns the index after its `]`, or a problem. */
function classAt(p: string, i: number): number | Re2Problem {
  let j = i + 1;
  if (p[j] === '^') j++;
  if (p[j] === ']') return problem('a class starting with ] is read as a literal ] by RE2 but as an empty class by JavaScript', 'escape it: [\\]...]');
  for (; j < p.length; j++) {
    const c = p[j];
    if (c === ']') return j + 1;
    if (c === '\\') {
      const next = escapeAt(p, j, true);
      if (typeof next !== 'number') return next;
      j = next - 1;
      continue;
    }
    if (c === '[' && p[j + 1] === ':') return problem('[:name:] POSIX classes are RE2-only', 'spell the class out, e.g. [A-Za-z] for [:alpha:]');
  }
  return problem('a [ class is never closed', 'close it with ]');
}

/** Why `pattern` cannot be used as an SMI regex in ward, or undefined when it can. */
export function checkRe2Regex(pattern: string): Re2Problem | undefined {
  const p = pattern;
  for (let i = 0; i < p.length; ) {
    const c = p[i];
    if (c === '\\') {
      const next = escapeAt(p, i, false);
      if (typeof next !== 'number') return next;
      i = next;
    } else if (c === '[') {
      const next = classAt(p, i);
      if (typeof next !== 'number') return next;
      i = next;
    } else if (c === '(' && p[i + 1] === '?') {
      const rest = p.slice(i + 2);
      if (/^<?[=!]/.test(rest)) return problem('lookarounds ((?=, (?!, (?<=, (?<!) do not exist in RE2', 'express the condition without looking around');
      if (rest.startsWith('P<') || rest.startsWith('P=') || rest.startsWith('P>'))
        return problem('(?P<name>...) is RE2-only group syntax', 'write (?<name>...) or (?:...)');
      if (rest.startsWith(':') || rest.startsWith('<')) {
        i += 3;
      } else {
        return problem('inline flags such as (?i) or (?s:...) are read differently by the two engines', 'write the cases out, e.g. [Gg][Ee][Tt]');
      }
    } else if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(p.slice(i));
      if (m !== null) {
        if (Number(m[1]) > 1000 || (m[3] !== undefined && m[3] !== '' && Number(m[3]) > 1000)) {
          return problem('RE2 refuses repeat counts above 1000', 'use a smaller count or *');
        }
        i += m[0].length;
      } else {
        i++;
      }
    } else {
      i++;
    }
  }
  try {
    new RegExp(`^(?:${p})$`);
  } catch (e) {
    return problem(`it does not compile: ${(e as Error).message.replace(/^Invalid regular expression: /, '')}`, 'fix the syntax');
  }
  return undefined;
}

/**
 * True when a repeated group itself repeats (`(a+)+`, `(x*y?)*`, `(?:a|b+){2,}`): harmless in
 * RE2, which runs in linear time, but JavaScript backtracks and such a pattern can take
 * exponential time on a hostile path or header value. A heuristic: it may flag a safe pattern.
 */
export function hasNestedQuantifier(pattern: string): boolean {
  // Per open group: whether a quantifier occurred inside it.
  const stack: boolean[] = [];
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') {
      i++;
      continue;
    }
    if (inClass) {
      if (c === ']') inClass = false;
      continue;
    }
    if (c === '[') inClass = true;
    else if (c === '(') stack.push(false);
    else if (c === '*' || c === '+' || c === '{') {
      if (stack.length > 0) stack[stack.length - 1] = true;
    } else if (c === '?' && pattern[i - 1] !== '(') {
      if (stack.length > 0) stack[stack.length - 1] = true;
    } else if (c === ')') {
      const inner = stack.pop() ?? false;
      const next = pattern[i + 1];
      const repeated =
        next === '*' || next === '+' || (next === '{' && /^\{\d+,\d*\}/.test(pattern.slice(i + 1)) && !/^\{(\d+),\1\}/.test(pattern.slice(i + 1)));
      if (inner && repeated) return true;
      if (inner && stack.length > 0) stack[stack.length - 1] = true;
    }
  }
  return false;
}
