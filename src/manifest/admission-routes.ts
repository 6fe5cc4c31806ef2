/**
 * Webhook rules shared by HTTPRoute (both groups) and GRPCRoute: absolute paths, valid header
 * names/values, compiling regexes, sane timeouts, hostnames, ported Service backends.
 */
import { type DiagnosticCode, GATEWAY_GROUP, POLICY_GROUP } from '../core/index.js';
import { parseGoDurationMs } from './go-duration.js';
import type { BackendRefSpec, GRPCRoute, HTTPRoute, RouteFilterSpec, ValueMatchSpec } from './types.js';

type Path = readonly (string | number)[];

/** Reports one rejection at a field path of the resource under review. */
export type Reject = (code: DiagnosticCode, params: Readonly<Record<string, string | number>>, path: Path) => void;

const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const HEADER_VALUE_FORBIDDEN = /[\r\n\0]/;
const HOSTNAME = /^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const MAX_HOSTNAMES = 16;

/** Applies the route rules of the webhook to an HTTPRoute or GRPCRoute. */
export function admitRoute(route: HTTPRoute | GRPCRoute, reject: Reject): void {
  const { spec } = route;
  if (spec.hostnames.length > MAX_HOSTNAMES) {
    reject('POL010', { field: 'spec.hostnames', detail: `must have at most ${MAX_HOSTNAMES} items` }, ['spec', 'hostnames']);
  }
  spec.hostnames.forEach((h, i) => {
    if (h.length > 253 || !HOSTNAME.test(h)) reject('POL071', { what: 'hostname', value: h }, ['spec', 'hostnames', i]);
  });
  if (spec.group === POLICY_GROUP) {
    spec.parentRefs.forEach((p, i) => {
      if (p.kind === 'EgressNetwork' && p.port === undefined) reject('POL012', { field: `spec.parentRefs[${i}].port` }, ['spec', 'parentRefs', i]);
    });
  }
  spec.rules.forEach((rule, i) => {
    const at: Path = ['spec', 'rules', i];
    if (route.kind === 'HTTPRoute') {
      const httpRule = route.spec.rules[i];
      httpRule?.matches?.forEach((m, j) => {
        const mp = [...at, 'matches', j];
        if (m.path !== undefined) checkPath(m.path.type, m.path.value, [...mp, 'path', 'value'], reject);
        checkValueMatches(m.headers, [...mp, 'headers'], true, reject);
        checkValueMatches(m.queryParams, [...mp, 'queryParams'], false, reject);
      });
      if (httpRule?.timeouts !== undefined) checkTimeouts(httpRule.timeouts, spec.group === GATEWAY_GROUP, [...at, 'timeouts'], reject);
    } else {
      route.spec.rules[i]?.matches?.forEach((m, j) => {
        const mp = [...at, 'matches', j];
        if (m.method?.type === 'RegularExpression') reject('POL074', {}, [...mp, 'method', 'type']);
        checkValueMatches(m.headers, [...mp, 'headers'], true, reject);
      });
    }
    rule.filters?.forEach((f, j) => {
      checkFilter(f, [...at, 'filters', j], reject);
    });
    rule.backendRefs?.forEach((b, j) => {
      checkBackendRef(b, [...at, 'backendRefs', j], reject);
    });
  });
}

function checkPath(type: string, value: string, path: Path, reject: Reject): void {
  if (type === 'RegularExpression') checkRegex(value, path, reject);
  else if (!value.startsWith('/')) reject('POL070', { value }, path);
}

function checkRegex(value: string, path: Path, reject: Reject): void {
  try {
    new RegExp(value);
  } catch (err) {
    reject('POL072', { value, detail: err instanceof Error ? err.message : String(err) }, path);
  }
}

function checkValueMatches(matches: readonly ValueMatchSpec[] | undefined, path: Path, headers: boolean, reject: Reject): void {
  matches?.forEach((m, i) => {
    if (headers && !HEADER_NAME.test(m.name)) reject('POL071', { what: 'header name', value: m.name }, [...path, i, 'name']);
    if (m.type === 'RegularExpression') checkRegex(m.value, [...path, i, 'value'], reject);
    else if (headers) checkHeaderValue(m.value, [...path, i, 'value'], reject);
  });
}

function checkHeaderValue(value: string, path: Path, reject: Reject): void {
  if (HEADER_VALUE_FORBIDDEN.test(value)) reject('POL071', { what: 'header value', value: JSON.stringify(value).slice(1, -1) }, path);
}

function checkFilter(f: RouteFilterSpec, path: Path, reject: Reject): void {
  for (const key of ['requestHeaderModifier', 'responseHeaderModifier'] as const) {
    const mod = f[key] as RouteFilterSpec['requestHeaderModifier'];
    if (mod === undefined) continue;
    for (const op of ['add', 'set'] as const) {
      mod[op]?.forEach((h, i) => {
        if (!HEADER_NAME.test(h.name)) reject('POL071', { what: 'header name', value: h.name }, [...path, key, op, i, 'name']);
        checkHeaderValue(h.value, [...path, key, op, i, 'value'], reject);
      });
    }
    mod.remove?.forEach((name, i) => {
      if (!HEADER_NAME.test(name)) reject('POL071', { what: 'header name', value: name }, [...path, key, 'remove', i]);
    });
  }
  const redirect = f.requestRedirect?.path;
  if (redirect !== undefined) {
    for (const key of ['replaceFullPath', 'replacePrefixMatch'] as const) {
      const value = redirect[key];
      if (value !== undefined && !value.startsWith('/')) reject('POL070', { value }, [...path, 'requestRedirect', 'path', key]);
    }
  }
}

function checkBackendRef(b: BackendRefSpec, path: Path, reject: Reject): void {
  const isService = (b.kind ?? 'Service') === 'Service' && (b.group ?? '') === '';
  if (isService && b.port === undefined) reject('POL075', { value: b.name }, path);
}

function checkTimeouts(
  t: { readonly request?: string | undefined; readonly backendRequest?: string | undefined },
  gateway: boolean,
  path: Path,
  reject: Reject,
): void {
  const parse = (key: 'request' | 'backendRequest'): number | undefined => {
    const text = t[key];
    if (text === undefined) return undefined;
    const ms = parseGoDurationMs(text);
    if (ms === undefined) reject('POL073', { detail: `${key} "${text}" is not a duration` }, [...path, key]);
    else if (ms < 0) reject('POL073', { detail: `${key} ${text} must not be negative` }, [...path, key]);
    return ms;
  };
  const request = parse('request');
  const backend = parse('backendRequest');
  // Gateway API: a zero request timeout means none, so any backendRequest fits under it.
  if (request === undefined || backend === undefined || request < 0 || (gateway && request === 0)) return;
  if (backend > request) {
    reject('POL073', { detail: `backendRequest ${t.backendRequest} must not be greater than request ${t.request}` }, [...path, 'backendRequest']);
  }
}
