/**
 * The dashboard on the controller's admin port: the who-can-talk graph as JSON, and the built
 * browser app (`dist/dashboard`, from `dashboard/` by `npm run build`) as static files.
 *
 * GET /api/v1/graph?namespace=NS | allNamespaces=true [&since=VERSION]
 *   Destinations in NS (default: all namespaces), sources from every namespace. The answer is
 *   `PolicyGraph` (src/core/policy-graph.ts, computed by src/index/graph.ts) plus:
 *     "version":   number, changes whenever a resource in force changes (a policy file edited, a
 *                  pod added): the dashboard polls with `since=` and gets `{"version","unchanged":true}`
 *                  while nothing changed;
 *     "namespace": the namespace asked for, or null for all;
 *     "computeMs": how long the graph took to compute.
 *   {
 *     "version": 3, "namespace": null, "computeMs": 4.1,
 *     "nodes": [{"id":"emojivoto/Deployment/web","namespace","kind","name","meshed":true,"pods":1,
 *                "readyPods":null,"serviceAccount":"web","identity":"web.emojivoto.serviceaccount…",
 *                "ip":"127.22.3.7","ipAssumed":false,
 *                "defaultPolicy":{"name":"deny","source":"pod-annotation","namespaceValue":"deny","stale":false},
 *                "podsDiffer":false}],
 *     "targets": [{"node":"emojivoto/Deployment/web","port":8080,"server":"server/web-http","protocol":"HTTP/1",
 *                  "proxyAdmin":false,"routes":[{"route":"HTTPRoute/web-app","sample":"GET /","probe":false,"shadowed":false}]}],
 *     "edges": [{"src":"emojivoto/Deployment/vote-bot","dst":"emojivoto/Deployment/web","port":8080,
 *                "target":0,"route":0,"decision":"allow"|"audit","authz":"authorizationpolicy/web-from-emojivoto"}],
 *     "bulk": [{"dst":"team-a/Deployment/api","port":4191,"target":7,"route":0,"decision":"allow",
 *               "authz":"default/all-authenticated","except":["/External/unmeshed"]}],
 *     "stats": {"sources":7,"groups":12,"evaluations":40}
 *   }
 *   Only permits are listed: a (source, target, route) in neither `edges` nor `bulk` is denied.
 *   `bulk` stands for a permit that most sources share (with at least 32 sources): every source
 *   node except those in `except` (which are denied or have an edge of their own).
 *
 * GET /            a page that sends the browser to /dashboard/
 * GET /dashboard/  the app; /dashboard/assets/… its scripts and styles. Every file is served with a
 *                  strict Content-Security-Policy (same-origin scripts, styles and fetches only, no
 *                  inline script, no framing): the app loads nothing from elsewhere and works offline.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join, relative, sep } from 'node:path';
import { policyGraph } from '../../index/index.js';
import type { Resource } from '../../manifest/index.js';
import { packageRootOf } from '../../shared/index.js';
import { type AdminResponse, type AdminRoute, apiError } from '../admin-api.js';
import type { AdminContext, FeatureRoutes } from '../admin-context.js';
import type { AdminStreamRoute } from '../admin-server.js';

/** The dashboard's Content-Security-Policy: nothing but this origin, no inline script, no framing. */
export const DASHBOARD_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};

const SECURITY_HEADERS = {
  'content-security-policy': DASHBOARD_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

/** Where the built app is: `dist/dashboard` of the package. */
export function dashboardDir(): string {
  return join(packageRootOf(import.meta.url), 'dist', 'dashboard');
}

/** The files of the built app by URL path below `/dashboard/`; read once per directory mtime. */
export class StaticFiles {
  #mtimeMs = -1;
  #files = new Map<string, string>();

  constructor(readonly dir: string) {}

  /** The file for a URL path below /dashboard/, or undefined. Only files that exist in the build are ever named. */
  find(rel: string): string | undefined {
    const st = statSync(this.dir, { throwIfNoEntry: false });
    if (st === undefined) return undefined;
    if (st.mtimeMs !== this.#mtimeMs) {
      this.#mtimeMs = st.mtimeMs;
      this.#files = new Map();
      for (const e of readdirSync(this.dir, { recursive: true, withFileTypes: true })) {
        if (!e.isFile()) continue;
        const full = join(e.parentPath, e.name);
        this.#files.set(relative(this.dir, full).split(sep).join('/'), full);
      }
    }
    return this.#files.get(rel === '' ? 'index.html' : rel);
  }

  get isBuilt(): boolean {
    return this.find('') !== undefined;
  }
}

/** The build-relative name a URL path below /dashboard/ asks for (percent-decoded), or undefined. */
export function staticPathOf(pathname: string): string | undefined {
  if (!pathname.startsWith('/dashboard/')) return undefined;
  try {
    return decodeURIComponent(pathname.slice('/dashboard/'.length));
  } catch {
    return undefined;
  }
}

function extensionOf(name: string): string {
  const dot = name.lastIndexOf('.');
  return dot === -1 ? '' : name.slice(dot);
}

function serveStatic(files: StaticFiles, req: IncomingMessage, res: ServerResponse, url: URL): void {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8', ...SECURITY_HEADERS });
    res.end('use GET\n');
    return;
  }
  if (url.pathname === '/dashboard') {
    res.writeHead(308, { location: '/dashboard/', ...SECURITY_HEADERS });
    res.end();
    return;
  }
  const rel = staticPathOf(url.pathname);
  const file = rel === undefined ? undefined : files.find(rel);
  if (file === undefined) {
    const built = files.isBuilt;
    res.writeHead(built ? 404 : 503, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', ...SECURITY_HEADERS });
    res.end(built ? `no such file ${url.pathname}\n` : `the dashboard is not built (no ${files.dir}): run \`npm run build\` in ward's checkout\n`);
    return;
  }
  const body = readFileSync(file);
  const ext = extensionOf(file);
  // Vite names assets by content hash: they never change under one name.
  const cache = rel?.startsWith('assets/') === true ? 'public, max-age=31536000, immutable' : 'no-cache';
  res.writeHead(200, {
    'content-type': CONTENT_TYPES[ext] ?? 'application/octet-stream',
    'content-length': body.length,
    'cache-control': cache,
    ...SECURITY_HEADERS,
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}

const REDIRECT_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0; url=/dashboard/"><title>ward</title></head>
<body><p><a href="/dashboard/">ward dashboard</a> · <a href="/api/v1/status">/api/v1/status</a></p></body></html>
`;

/**
 * A version number of the resources in force: the same while nothing was applied or deleted.
 * Compares the map's entries with the previous reading by identity (resources are replaced, never
 * mutated, on change), so a reading costs one pass over the map and no hashing.
 */
export class InForceVersion {
  #version = 0;
  #seen: Resource[] = [];
  readonly #inForce: ReadonlyMap<string, Resource>;

  constructor(inForce: ReadonlyMap<string, Resource>) {
    this.#inForce = inForce;
  }

  current(): number {
    const seen = this.#seen;
    let i = 0;
    let changed = this.#inForce.size !== seen.length;
    if (!changed) {
      for (const r of this.#inForce.values()) {
        if (seen[i++] !== r) {
          changed = true;
          break;
        }
      }
    }
    if (changed) {
      this.#version++;
      this.#seen = [...this.#inForce.values()];
    }
    return this.#version;
  }
}

function json(status: number, value: unknown): AdminResponse {
  return { status, contentType: 'application/json; charset=utf-8', body: `${JSON.stringify(value)}\n` };
}

const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** The graph route's query: a namespace (none = all) and the version the caller has; or why it is refused. */
export function parseGraphQuery(q: URLSearchParams): { readonly namespace: string | undefined; readonly since: number | undefined } | string {
  const all = q.get('allNamespaces') === 'true';
  const nsParam = q.get('namespace');
  if (nsParam !== null && nsParam !== '' && !NAMESPACE.test(nsParam)) {
    return `namespace ${JSON.stringify(nsParam.slice(0, 80))} is not a Kubernetes namespace name`;
  }
  const sinceText = q.get('since');
  const since = sinceText !== null && /^\d{1,15}$/.test(sinceText) ? Number(sinceText) : undefined;
  if (sinceText !== null && since === undefined) return '"since" must be a version number from an earlier answer';
  return { namespace: all || nsParam === null || nsParam === '' ? undefined : nsParam, since };
}

/** The dashboard's routes: `/api/v1/graph`, `/` and the static app. */
export function dashboardRoutes(ctx: AdminContext, opts: { readonly dir?: string } = {}): FeatureRoutes {
  const view = { config: ctx.cluster, index: ctx.indexes.index };
  const version = new InForceVersion(ctx.indexes.inForce);
  const namespaceAnnotations = () => {
    const byName = new Map<string, Readonly<Record<string, string>>>();
    for (const r of ctx.indexes.inForce.values()) if (r.kind === 'Namespace') byName.set(r.metadata.name, r.metadata.annotations);
    return (ns: string) => byName.get(ns);
  };
  // One graph per (version, namespace) at a time: polling dashboards share it.
  let cached: { key: string; body: AdminResponse } | undefined;

  const graph: AdminRoute = {
    path: '/api/v1/graph',
    handle(url) {
      return Promise.resolve(answerGraph(url));
    },
  };
  const answerGraph = (url: URL): AdminResponse => {
    const query = parseGraphQuery(url.searchParams);
    if (typeof query === 'string') return apiError(400, 'INVALID_ARGUMENT', query);
    const { namespace, since } = query;
    const v = version.current();
    if (since === v) return json(200, { version: v, unchanged: true });
    const key = `${v}\0${namespace ?? ''}`;
    if (cached?.key === key) return cached.body;
    const started = performance.now();
    const g = policyGraph(view, { namespace, namespaceAnnotations: namespaceAnnotations() });
    const computeMs = +(performance.now() - started).toFixed(1);
    const body = json(200, { version: v, namespace: namespace ?? null, computeMs, ...g });
    cached = { key, body };
    return body;
  };

  const home: AdminRoute = {
    path: '/',
    handle: () => Promise.resolve({ status: 200, contentType: 'text/html; charset=utf-8', body: REDIRECT_PAGE }),
  };

  const files = new StaticFiles(opts.dir ?? dashboardDir());
  const app: AdminStreamRoute = { prefix: '/dashboard/', handle: (req, res, url) => serveStatic(files, req, res, url) };
  const bare: AdminStreamRoute = { prefix: '/dashboard', handle: (req, res, url) => serveStatic(files, req, res, url) };
  return { routes: [graph, home], streams: [app, bare] };
}
