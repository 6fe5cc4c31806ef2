/**
 * The query of a proxy's `GET /tap`: `path=PREFIX&identity=ID&method=M&denied=true&max=N&seconds=S`,
 * every parameter optional and given at most once. The query comes from whoever the admin port's
 * policy admits, so it is parsed strictly: an unknown or repeated parameter, a value out of range
 * or with control characters is refused with a precise message (400), never guessed at.
 */

/** What a subscriber asked for. */
export interface TapFilter {
  /** Events whose path starts with this (connection events have none, so never match). */
  readonly pathPrefix: string | undefined;
  /** Events whose client identity is exactly this. */
  readonly identity: string | undefined;
  /** Events with this method (upper case). */
  readonly method: string | undefined;
  /** Only denials and audited (would-be denied) requests. */
  readonly denied: boolean;
  /** The stream ends after this many events. */
  readonly max: number;
  /** The stream ends after this many seconds. */
  readonly seconds: number;
}

/** A refused query: a stable code, what is wrong, what to do. */
export interface TapQueryError {
  readonly code: 'TAP_BAD_QUERY';
  readonly message: string;
  readonly hint: string;
}

/** Bounds and defaults of `max` and `seconds`. */
export interface TapQueryBounds {
  readonly defaultMax: number;
  readonly maxMax: number;
  readonly defaultSeconds: number;
  readonly maxSeconds: number;
}

/** The proxy's: generous, since the controller's long-lived denial feed taps each pod for an hour at a time. */
export const PROXY_TAP_BOUNDS: TapQueryBounds = { defaultMax: 100, maxMax: 1_000_000, defaultSeconds: 30, maxSeconds: 3600 };

const KNOWN = new Set(['path', 'identity', 'method', 'denied', 'max', 'seconds']);
const HINT = 'GET /tap?path=/PREFIX&identity=ID&method=GET&denied=true&max=N&seconds=S (each optional, at most once)';
/** HTTP method token characters (RFC 9110 §5.6.2). */
const METHOD = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,32}$/;
/** Printable ASCII without space; identities are DNS-like names. */
const IDENTITY = /^[\x21-\x7e]{1,512}$/;
const PATH = /^\/[\x21-\x7e]{0,2047}$/;
const INT = /^[0-9]{1,9}$/;

function fail(message: string, hint = HINT): { ok: false; error: TapQueryError } {
  return { ok: false, error: { code: 'TAP_BAD_QUERY', message, hint } };
}

function show(v: string): string {
  return JSON.stringify(v.length > 64 ? `${v.slice(0, 64)}…` : v);
}

function bounded(name: string, raw: string | undefined, dflt: number, most: number): number | string {
  if (raw === undefined) return dflt;
  if (!INT.test(raw)) return `${name} ${show(raw)} is not a whole number`;
  const n = Number(raw);
  if (n < 1 || n > most) return `${name} ${n} is out of range 1-${most}`;
  return n;
}

/** Parses a `/tap` query. Never throws. */
export function parseTapQuery(
  params: URLSearchParams,
  bounds: TapQueryBounds = PROXY_TAP_BOUNDS,
): { ok: true; value: TapFilter } | { ok: false; error: TapQueryError } {
  const seen = new Map<string, string>();
  for (const [k, v] of params) {
    if (!KNOWN.has(k)) return fail(`unknown tap parameter ${show(k)}`);
    if (seen.has(k)) return fail(`tap parameter ${show(k)} given twice`);
    seen.set(k, v);
  }
  const path = seen.get('path');
  if (path !== undefined && path !== '' && !PATH.test(path)) {
    return fail(`path ${show(path)} must start with / and hold printable characters only`, 'a path prefix such as /api (no query string: taps never show one)');
  }
  if (path?.includes('?') === true) return fail(`path ${show(path)} has a query string`, 'taps show and match paths without their query string');
  const identity = seen.get('identity');
  if (identity !== undefined && identity !== '' && !IDENTITY.test(identity)) return fail(`identity ${show(identity)} is not a mesh identity`);
  const method = seen.get('method');
  if (method !== undefined && method !== '' && !METHOD.test(method)) return fail(`method ${show(method)} is not an HTTP method`);
  const denied = seen.get('denied');
  if (denied !== undefined && denied !== 'true' && denied !== 'false' && denied !== '') return fail(`denied ${show(denied)} must be true or false`);
  const max = bounded('max', seen.get('max'), bounds.defaultMax, bounds.maxMax);
  if (typeof max === 'string') return fail(max);
  const seconds = bounded('seconds', seen.get('seconds'), bounds.defaultSeconds, bounds.maxSeconds);
  if (typeof seconds === 'string') return fail(seconds);
  return {
    ok: true,
    value: {
      pathPrefix: path === '' ? undefined : path,
      identity: identity === '' ? undefined : identity,
      method: method === '' || method === undefined ? undefined : method.toUpperCase(),
      denied: denied === 'true',
      max,
      seconds,
    },
  };
}
