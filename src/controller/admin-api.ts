/**
 * The controller's HTTP API on the admin port (9990 by default): health, metrics and a JSON API
 * for the CLI's `--controller URL` mode and the dashboard. Every answer that the CLI also computes
 * offline (authz, explain, diagnostics policy) comes from the same index queries, so the JSON is
 * byte-for-byte what `ward ... -o json` prints for the same resources.
 *
 * Routes (GET unless noted):
 *   /live, /ready, /metrics
 *   /api/v1/status                         readiness, settings, counts
 *   /api/v1/files                          per-file load status of the directory source
 *   /api/v1/resources[?namespace=&kind=]   resources in force, with their diagnostics
 *   /api/v1/pods[?namespace=]              pods with their ports and effective policy
 *   /api/v1/pods/NS/NAME                   one pod, plus the wire policy of each port
 *   /api/v1/authz?resource=R[&namespace=N | &allNamespaces=true]   = `ward authz -o json`
 *   POST /api/v1/explain  (JSON ExplainRequest)                     = `ward explain -o json`
 *   /api/v1/policy?workload=W&port=P                                = `GetPort`, proto3 JSON
 */
import { peekPort, serverToProtoJson } from '../api/index.js';
import type { Diagnostic } from '../core/index.js';
import { authzView, type ExplainRequest, explainRequest, type PolicyView, podView, QueryError } from '../index/index.js';

/** What the API reads from the running controller. */
export interface AdminState {
  readonly view: PolicyView;
  isReady(): boolean;
  /** Settings shown by /api/v1/status. */
  settings(): Record<string, unknown>;
  files(): unknown;
  resources(): readonly ResourceEntry[];
  metrics(): Promise<{ contentType: string; text: string }>;
  identityOf(namespace: string, serviceAccount: string): string;
  /** More JSON routes (observability, the dashboard's graph…), tried before the 404. */
  readonly routes?: readonly AdminRoute[];
}

/** A JSON route of the API beyond the built-in ones. */
export interface AdminRoute {
  /** The exact path (no trailing slash), or a pattern over it. */
  readonly path: string | RegExp;
  /** GET (also answers HEAD) unless POST. */
  readonly method?: 'GET' | 'POST';
  /** Answers a request; `match` is the pattern's match (or `[path]`). Never throws for bad input. */
  handle(url: URL, body: string, match: RegExpExecArray | readonly [string]): Promise<AdminResponse>;
}

function findRoute(routes: readonly AdminRoute[] | undefined, path: string): { route: AdminRoute; match: RegExpExecArray | readonly [string] } | undefined {
  for (const route of routes ?? []) {
    if (typeof route.path === 'string') {
      if (route.path === path) return { route, match: [path] };
    } else {
      const m = route.path.exec(path);
      if (m !== null) return { route, match: m };
    }
  }
  return undefined;
}

/** A resource in force, as the JSON API lists it. */
export interface ResourceEntry {
  readonly kind: string;
  readonly apiVersion: string;
  readonly namespace: string;
  readonly name: string;
  readonly source?: { readonly file: string; readonly line: number; readonly col: number } | undefined;
  /** The file's latest version failed and this (last good) version stays in force. */
  readonly stale: boolean;
  readonly diagnostics: readonly Diagnostic[];
}

/** An HTTP answer. */
export interface AdminResponse {
  readonly status: number;
  readonly contentType: string;
  readonly body: string;
}

const MAX_BODY_BYTES = 64 * 1024;

/** Largest request body the API reads. */
export const ADMIN_MAX_BODY_BYTES = MAX_BODY_BYTES;

function jsonResponse(status: number, value: unknown): AdminResponse {
  return { status, contentType: 'application/json; charset=utf-8', body: `${JSON.stringify(value, null, 2)}\n` };
}

/** The error shape of every failed API call: a stable code and a message. */
export function apiError(status: number, code: string, message: string): AdminResponse {
  return jsonResponse(status, { error: { code, message } });
}

function text(status: number, body: string): AdminResponse {
  return { status, contentType: 'text/plain; charset=utf-8', body };
}

function queryFailure(e: unknown): AdminResponse {
  if (e instanceof QueryError) return e.code === 'ERR_QUERY_NOT_FOUND' ? apiError(404, 'NOT_FOUND', e.message) : apiError(400, 'INVALID_ARGUMENT', e.message);
  throw e;
}

const EXPLAIN_STRINGS = ['to', 'namespace', 'fromIp', 'fromIdentity', 'fromSa', 'tls', 'sni', 'http', 'host', 'grpc'] as const;

/** Validates an explain body field by field; returns the request or a message. */
export function parseExplainBody(raw: unknown): ExplainRequest | string {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return 'the body must be a JSON object';
  const o = raw as Record<string, unknown>;
  const known = new Set<string>([...EXPLAIN_STRINGS, 'header', 'tcp']);
  for (const k of Object.keys(o)) if (!known.has(k)) return `unknown field "${k}" (known: ${[...known].join(', ')})`;
  const out: Record<string, unknown> = {};
  for (const k of EXPLAIN_STRINGS) {
    const v = o[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string') return `"${k}" must be a string`;
    out[k] = v;
  }
  if (typeof out.to !== 'string') return '"to" is required (pod/NS/NAME:PORT or deploy/NAME:PORT)';
  if (o.header !== undefined) {
    if (!Array.isArray(o.header) || !o.header.every((h) => typeof h === 'string')) return '"header" must be an array of "Name: value" strings';
    out.header = o.header;
  }
  if (o.tcp !== undefined) {
    if (typeof o.tcp !== 'boolean') return '"tcp" must be a boolean';
    out.tcp = o.tcp;
  }
  return out as unknown as ExplainRequest;
}

function podsJson(state: AdminState, namespace: string | undefined) {
  const { index } = state.view;
  return index
    .pods()
    .filter((p) => namespace === undefined || p.namespace === namespace)
    .sort((a, b) => (a.namespace === b.namespace ? (a.name < b.name ? -1 : 1) : a.namespace < b.namespace ? -1 : 1))
    .map((p) => ({ ...podView(state.view, p), identity: state.identityOf(p.namespace, p.serviceAccount), podIP: p.pod.status?.podIP ?? null }));
}

/** Answers one API request. `body` is the raw request body (POST only). Never throws for bad input. */
export async function handleAdminRequest(state: AdminState, method: string, rawUrl: string, body: string): Promise<AdminResponse> {
  let url: URL;
  try {
    url = new URL(rawUrl, 'http://controller.invalid');
  } catch {
    return apiError(400, 'INVALID_ARGUMENT', `bad request URL ${JSON.stringify(rawUrl)}`);
  }
  const path = url.pathname.replace(/\/+$/, '') || '/';
  const q = url.searchParams;
  const isGet = method === 'GET' || method === 'HEAD';
  const extra = findRoute(state.routes, path);
  if (extra !== undefined) {
    const want = extra.route.method ?? 'GET';
    if (want === 'POST' ? method !== 'POST' : !isGet) return apiError(405, 'METHOD_NOT_ALLOWED', `use ${want} on ${path}`);
    return extra.route.handle(url, body, extra.match);
  }
  if (path === '/api/v1/explain') {
    if (method !== 'POST') return apiError(405, 'METHOD_NOT_ALLOWED', 'use POST with a JSON body');
  } else if (!isGet) return apiError(405, 'METHOD_NOT_ALLOWED', `${method} is not supported on ${path}`);

  switch (path) {
    case '/live':
      return text(200, 'live\n');
    case '/ready':
      return state.isReady() ? text(200, 'ready\n') : text(503, 'not ready\n');
    case '/metrics': {
      const m = await state.metrics();
      return { status: 200, contentType: m.contentType, body: m.text };
    }
    case '/api/v1/status':
      return jsonResponse(200, {
        ready: state.isReady(),
        settings: state.settings(),
        namespaces: state.view.index.namespaces().length,
        pods: state.view.index.pods().length,
      });
    case '/api/v1/files':
      return jsonResponse(200, { files: state.files() });
    case '/api/v1/resources': {
      const ns = q.get('namespace') ?? undefined;
      const kind = q.get('kind')?.toLowerCase();
      const items = state.resources().filter((r) => (ns === undefined || r.namespace === ns) && (kind === undefined || r.kind.toLowerCase() === kind));
      return jsonResponse(200, { resources: items });
    }
    case '/api/v1/pods':
      return jsonResponse(200, { pods: podsJson(state, q.get('namespace') ?? undefined) });
    case '/api/v1/authz': {
      const resource = q.get('resource');
      if (resource === null || resource === '') return apiError(400, 'INVALID_ARGUMENT', 'query parameter "resource" is required (e.g. deploy/web)');
      const all = q.get('allNamespaces') === 'true';
      try {
        return jsonResponse(200, authzView(state.view, resource, all ? undefined : (q.get('namespace') ?? 'default')));
      } catch (e) {
        return queryFailure(e);
      }
    }
    case '/api/v1/explain': {
      if (Buffer.byteLength(body) > MAX_BODY_BYTES) return apiError(413, 'INVALID_ARGUMENT', `body larger than ${MAX_BODY_BYTES} bytes`);
      let raw: unknown;
      try {
        raw = JSON.parse(body);
      } catch (e) {
        return apiError(400, 'INVALID_ARGUMENT', `the body is not JSON: ${(e as Error).message}`);
      }
      const req = parseExplainBody(raw);
      if (typeof req === 'string') return apiError(400, 'INVALID_ARGUMENT', req);
      try {
        return jsonResponse(200, explainRequest(state.view, req));
      } catch (e) {
        return queryFailure(e);
      }
    }
    case '/api/v1/policy': {
      const workload = q.get('workload') ?? '';
      const portText = q.get('port') ?? '';
      const port = /^\d{1,5}$/.test(portText) ? Number(portText) : Number.NaN;
      const r = peekPort(state.view.index, workload, port);
      if (r.code !== 'OK') {
        if (r.code === 'NOT_FOUND') return apiError(404, r.code, r.message);
        return apiError(400, r.code, Number.isNaN(port) ? `Invalid port: ${JSON.stringify(portText)}` : r.message);
      }
      return jsonResponse(200, serverToProtoJson(r.cell.value));
    }
    default: {
      const m = /^\/api\/v1\/pods\/([^/]+)\/([^/]+)$/.exec(path);
      if (m !== null) {
        let ns: string;
        let name: string;
        try {
          ns = decodeURIComponent(m[1] as string);
          name = decodeURIComponent(m[2] as string);
        } catch {
          return apiError(400, 'INVALID_ARGUMENT', `bad percent-encoding in ${JSON.stringify(path)}`);
        }
        const info = state.view.index.pod(ns, name);
        if (info === undefined) return apiError(404, 'NOT_FOUND', `pod ${ns}/${name} is not known (or not meshed)`);
        const pv = podView(state.view, info);
        const policies: Record<string, unknown> = {};
        for (const p of pv.ports) {
          const cell = state.view.index.peek(ns, name, p.port);
          if (cell !== undefined) policies[String(p.port)] = serverToProtoJson(cell.value);
        }
        return jsonResponse(200, { ...pv, identity: state.identityOf(ns, info.serviceAccount), podIP: info.pod.status?.podIP ?? null, policies });
      }
      return apiError(404, 'NOT_FOUND', `no such endpoint ${path}`);
    }
  }
}
