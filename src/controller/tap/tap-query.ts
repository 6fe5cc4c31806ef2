/**
 * The query of `GET /api/v1/tap`: which pods (`resource=KIND[/NAME]`, `ward authz` syntax, in
 * `namespace` or `allNamespaces=true`) and which of their requests (`path`, `identity`, `method`,
 * `denied`, `max`, `seconds`). Parsed strictly (the admin API's callers are people and scripts):
 * an unknown or repeated parameter or an out-of-range value is refused with a code and a hint. The
 * filters are passed on to each pod's proxy, which applies them before anything crosses the wire.
 */

/** A parsed tap query. */
export interface TapQuery {
  readonly resource: string;
  /** Undefined with `allNamespaces`. */
  readonly namespace: string | undefined;
  readonly pathPrefix: string | undefined;
  readonly identity: string | undefined;
  readonly method: string | undefined;
  readonly denied: boolean;
  readonly max: number;
  readonly seconds: number;
}

/** A refused query. */
export interface TapQueryError {
  readonly code: 'INVALID_ARGUMENT';
  readonly message: string;
  readonly hint: string;
}

/** Default and largest `max` (events) of one controller tap. */
export const TAP_DEFAULT_MAX = 100;
export const TAP_MAX_MAX = 10_000;
/** Default and largest `seconds` of one controller tap. */
export const TAP_DEFAULT_SECONDS = 30;
export const TAP_MAX_SECONDS = 600;

const KNOWN = new Set(['resource', 'namespace', 'allNamespaces', 'path', 'identity', 'method', 'denied', 'max', 'seconds']);
const HINT = '/api/v1/tap?resource=deploy/web&namespace=NS&path=/PREFIX&identity=ID&method=GET&denied=true&max=N&seconds=S';
const METHOD = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,32}$/;
const IDENTITY = /^[\x21-\x7e]{1,512}$/;
const PATH = /^\/[\x21-\x3e\x40-\x7e]{0,2047}$/;
/** A namespace name (RFC 1123 label). */
const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const RESOURCE = /^[A-Za-z0-9][-A-Za-z0-9./]{0,300}$/;
const INT = /^[0-9]{1,9}$/;

function show(v: string): string {
  return JSON.stringify(v.length > 64 ? `${v.slice(0, 64)}…` : v);
}

function fail(message: string, hint = HINT): { ok: false; error: TapQueryError } {
  return { ok: false, error: { code: 'INVALID_ARGUMENT', message, hint } };
}

function bounded(name: string, raw: string | undefined, dflt: number, most: number): number | string {
  if (raw === undefined || raw === '') return dflt;
  if (!INT.test(raw)) return `${name} ${show(raw)} is not a whole number`;
  const n = Number(raw);
  if (n < 1 || n > most) return `${name} ${n} is out of range 1-${most}`;
  return n;
}

/** Parses a tap query. Never throws. */
export function parseTapQuery(params: URLSearchParams): { ok: true; value: TapQuery } | { ok: false; error: TapQueryError } {
  const seen = new Map<string, string>();
  for (const [k, v] of params) {
    if (!KNOWN.has(k)) return fail(`unknown tap parameter ${show(k)}`);
    if (seen.has(k)) return fail(`tap parameter ${show(k)} given twice`);
    seen.set(k, v);
  }
  const resource = seen.get('resource') ?? '';
  if (resource === '') return fail('resource is required', 'resource=deploy/web (or pod/NAME, sts/NAME, ns/NAME…), as `ward authz` takes it');
  if (!RESOURCE.test(resource)) return fail(`resource ${show(resource)} is not KIND[/NAME]`);
  const all = seen.get('allNamespaces');
  if (all !== undefined && all !== 'true' && all !== 'false') return fail(`allNamespaces ${show(all)} must be true or false`);
  const ns = seen.get('namespace');
  if (ns !== undefined && ns !== '' && !NAMESPACE.test(ns)) return fail(`namespace ${show(ns)} is not a namespace name`);
  if (all === 'true' && ns !== undefined && ns !== '') return fail('namespace and allNamespaces=true exclude each other');
  const path = seen.get('path');
  if (path !== undefined && path !== '' && !PATH.test(path)) {
    return fail(`path ${show(path)} must start with / and hold printable characters only, no query string`, 'a path prefix such as /api');
  }
  const identity = seen.get('identity');
  if (identity !== undefined && identity !== '' && !IDENTITY.test(identity)) return fail(`identity ${show(identity)} is not a mesh identity`);
  const method = seen.get('method');
  if (method !== undefined && method !== '' && !METHOD.test(method)) return fail(`method ${show(method)} is not an HTTP method`);
  const denied = seen.get('denied');
  if (denied !== undefined && denied !== 'true' && denied !== 'false' && denied !== '') return fail(`denied ${show(denied)} must be true or false`);
  const max = bounded('max', seen.get('max'), TAP_DEFAULT_MAX, TAP_MAX_MAX);
  if (typeof max === 'string') return fail(max);
  const seconds = bounded('seconds', seen.get('seconds'), TAP_DEFAULT_SECONDS, TAP_MAX_SECONDS);
  if (typeof seconds === 'string') return fail(seconds);
  return {
    ok: true,
    value: {
      resource,
      namespace: all === 'true' ? undefined : ns === undefined || ns === '' ? 'default' : ns,
      pathPrefix: path === '' ? undefined : path,
      identity: identity === '' ? undefined : identity,
      method: method === undefined || method === '' ? undefined : method.toUpperCase(),
      denied: denied === 'true',
      max,
      seconds,
    },
  };
}

/** The query each pod's proxy gets: the same filters, and the same bounds (any one pod may supply every event). */
export function proxyTapPath(q: Pick<TapQuery, 'pathPrefix' | 'identity' | 'method' | 'denied' | 'max' | 'seconds'>): string {
  const p = new URLSearchParams();
  if (q.pathPrefix !== undefined) p.set('path', q.pathPrefix);
  if (q.identity !== undefined) p.set('identity', q.identity);
  if (q.method !== undefined) p.set('method', q.method);
  if (q.denied) p.set('denied', 'true');
  p.set('max', String(q.max));
  p.set('seconds', String(q.seconds));
  return `/tap?${p.toString()}`;
}
