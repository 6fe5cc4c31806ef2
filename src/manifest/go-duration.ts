/**
 * Go `time.ParseDuration` syntax (`1h30m`, `1.5s`, `300ms`, `-2s`, `0`), used by route timeouts.
 */

const UNIT_MS: Readonly<Record<string, number>> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const TERM = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/y;

/** Milliseconds of a Go duration string (negative allowed), or undefined when it is not one. */
export function parseGoDurationMs(text: string): number | undefined {
  let rest = text;
  let sign = 1;
  if (rest.startsWith('-') || rest.startsWith('+')) {
    sign = rest.startsWith('-') ? -1 : 1;
    rest = rest.slice(1);
  }
  if (rest === '0') return 0;
  if (rest === '') return undefined;
  let total = 0;
  TERM.lastIndex = 0;
  while (TERM.lastIndex < rest.length) {
    const m = TERM.exec(rest);
    if (m === null) return undefined;
    total += Number(m[1]) * (UNIT_MS[m[2] as string] as number);
  }
  return sign * total;
}
