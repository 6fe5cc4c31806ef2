/**
 * The admin API's traffic views and the metrics backend behind them:
 *
 *   GET /api/v1/edges?[namespace=NS | allNamespaces=true][&resource=KIND][&window=W]
 *   GET /api/v1/stat?resource=KIND[/NAME][&namespace=NS | &allNamespaces=true][&window=W]
 *   GET /api/v1/stat/authz?resource=KIND[/NAME][&namespace=…][&window=W]
 *   GET /api/v1/observe/targets       the scrape targets and their health (embedded collector)
 *
 * `window` is seconds (`60`) or a duration (`30s`, `5m`), default 60; the namespace defaults to
 * `default`, as kubectl's. Bad parameters answer 400 with a message.
 *
 * The backend: the embedded collector by default, started with the controller and stopped when it
 * closes, scraping every `scrapeIntervalMs` (default 10 s; `WARD_SCRAPE_INTERVAL` sets the default
 * of every controller of the process, `ward up`'s included: `500ms`, `2s`…); or a Prometheus server
 * (`--metrics-backend prometheus --prometheus-url URL`).
 */
import { serviceAccountIdentity } from '../../core/index.js';
import { type ClusterConfig, parseResourceArg, QueryError } from '../../index/index.js';
import { errorMessage, type Logger, MeshError, type Registry } from '../../shared/index.js';
import { type AdminResponse, type AdminRoute, apiError } from '../admin-api.js';
import type { AdminStreamRoute } from '../admin-server.js';
import type { ControllerIdentity } from '../controller-identity.js';
import type { ControllerIndexes } from '../controller-indexes.js';
import type { MetricsSettings } from '../controller-types.js';
import type { ShutdownStack } from '../shutdown-stack.js';
import { EmbeddedCollector, targetsFromIndex, workloadOfPod } from './embedded-collector.js';
import type { MetricsBackend } from './metrics-backend.js';
import { computeAuthzStat, computeEdges, computeStat, Inventory, type InventoryPod, type ViewSelector } from './observe-views.js';
import { PrometheusBackend } from './prometheus-backend.js';
import { controllerProxyAdminTls } from './proxy-admin-client.js';

/** What the traffic views read from the running controller (the admin routes' context). */
export interface ObserveContext {
  readonly cluster: ClusterConfig;
  readonly indexes: ControllerIndexes;
  readonly identity: ControllerIdentity;
  readonly registry: Registry;
  readonly log: Logger;
  readonly cleanups: ShutdownStack;
  readonly metrics?: MetricsSettings | undefined;
}

/** Default view window, seconds. */
export const DEFAULT_WINDOW_SECONDS = 60;
/** Largest window a view may ask for (Prometheus keeps more; a day is plenty for a rate). */
const MAX_WINDOW_SECONDS = 86_400;

/** Parses a duration: `1500ms`, `10s`, `5m`, `1h`, or bare seconds. Undefined when malformed. */
export function parseDurationMs(text: string): number | undefined {
  const m = /^(\d{1,9}(?:\.\d{1,3})?)(ms|s|m|h)?$/.exec(text.trim());
  if (m === null) return undefined;
  const n = Number(m[1]);
  const unit = m[2] ?? 's';
  const ms = unit === 'ms' ? n : unit === 's' ? n * 1000 : unit === 'm' ? n * 60_000 : n * 3_600_000;
  return Number.isFinite(ms) && ms > 0 ? Math.round(ms) : undefined;
}

/** The scrape interval `WARD_SCRAPE_INTERVAL` asks for, if it is a valid duration. */
function envScrapeIntervalMs(): number | undefined {
  const raw = process.env.WARD_SCRAPE_INTERVAL;
  return raw === undefined || raw === '' ? undefined : parseDurationMs(raw);
}

/** The pods the views know, meshed and not, with their workloads and identities. */
export function inventoryOf(ctx: Pick<ObserveContext, 'indexes' | 'cluster'>): Inventory {
  const index = ctx.indexes.index;
  const pods: InventoryPod[] = [];
  for (const p of index.pods()) {
    pods.push({
      namespace: p.namespace,
      name: p.name,
      serviceAccount: p.serviceAccount,
      workload: workloadOfPod({ name: p.name, owner: p.pod.owner }),
      meshed: true,
      identity: serviceAccountIdentity(ctx.cluster, p.namespace, p.serviceAccount),
    });
  }
  for (const p of index.unmeshedPods()) {
    pods.push({
      namespace: p.metadata.namespace ?? 'default',
      name: p.metadata.name,
      serviceAccount: p.spec.serviceAccountName ?? 'default',
      workload: workloadOfPod({ name: p.metadata.name, owner: p.owner }),
      meshed: false,
      identity: null,
    });
  }
  return new Inventory(pods);
}

class BadRequest extends Error {}

function json(status: number, value: unknown): AdminResponse {
  return { status, contentType: 'application/json; charset=utf-8', body: `${JSON.stringify(value, null, 2)}\n` };
}

function windowOf(q: URLSearchParams, maxSeconds: number): number {
  const raw = q.get('window');
  if (raw === null || raw === '') return DEFAULT_WINDOW_SECONDS;
  const ms = parseDurationMs(raw);
  if (ms === undefined) throw new BadRequest(`window ${JSON.stringify(raw)} is not a duration (seconds, or 30s, 5m, 1h)`);
  const seconds = ms / 1000;
  if (seconds < 1) throw new BadRequest(`window ${raw} is shorter than a second`);
  if (seconds > maxSeconds) throw new BadRequest(`window ${raw} is longer than the ${maxSeconds} s the metrics backend keeps`);
  return seconds;
}

function namespaceOf(q: URLSearchParams): string | undefined {
  if (q.get('allNamespaces') === 'true') return undefined;
  const ns = q.get('namespace');
  if (ns === null || ns === '') return 'default';
  if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(ns)) throw new BadRequest(`namespace ${JSON.stringify(ns)} is not a namespace name`);
  return ns;
}

function selectorOf(q: URLSearchParams, required: boolean): ViewSelector {
  const namespace = namespaceOf(q);
  const resource = q.get('resource');
  if (resource === null || resource === '') {
    if (required) throw new BadRequest('query parameter "resource" is required (KIND[/NAME], e.g. deploy or deploy/web)');
    return { namespace };
  }
  let arg: ReturnType<typeof parseResourceArg>;
  try {
    arg = parseResourceArg(resource);
  } catch (e) {
    throw new BadRequest(e instanceof QueryError ? e.message : errorMessage(e));
  }
  // Namespaces are cluster-scoped: `ns/demo` is that namespace whatever `-n` says.
  if (arg.kind === 'Namespace') return { namespace: undefined, kind: arg.kind, name: arg.name };
  return { namespace: arg.namespace ?? namespace, kind: arg.kind, name: arg.name };
}

/** The collector or Prometheus, per the settings. */
function createBackend(ctx: ObserveContext, settings: MetricsSettings | undefined): MetricsBackend {
  if (settings?.backend === 'prometheus') {
    if (settings.prometheusUrl === undefined) throw new MeshError('ERR_METRICS_BACKEND', '--metrics-backend prometheus needs --prometheus-url');
    return new PrometheusBackend({ url: settings.prometheusUrl });
  }
  const collector = new EmbeddedCollector({
    targets: () => targetsFromIndex(ctx.indexes.index, ctx.cluster),
    tls: controllerProxyAdminTls(ctx),
    intervalMs: settings?.scrapeIntervalMs ?? envScrapeIntervalMs() ?? 10_000,
    registry: ctx.registry,
    log: ctx.log,
  });
  collector.start();
  ctx.cleanups.push(() => collector.stop());
  return collector;
}

/** The traffic views' routes; the embedded collector starts now (stopped by `ctx.cleanups`). */
export function observeRoutes(ctx: ObserveContext): { readonly routes: readonly AdminRoute[]; readonly streams: readonly AdminStreamRoute[] } {
  let backend: MetricsBackend | undefined;
  let failure = '';
  try {
    backend = createBackend(ctx, ctx.metrics);
  } catch (e) {
    // Reported once, at start; every request then answers 503 with the reason.
    failure = errorMessage(e);
    ctx.log.error({ err: failure }, 'the metrics backend cannot start; edges and stat are unavailable');
  }
  const maxWindow = (b: MetricsBackend) => (b instanceof EmbeddedCollector ? b.retentionMs / 1000 : MAX_WINDOW_SECONDS);
  const route = (path: string, answer: (b: MetricsBackend, q: URLSearchParams) => Promise<unknown>): AdminRoute => ({
    path,
    async handle(url) {
      if (backend === undefined) return apiError(503, 'UNAVAILABLE', `the metrics backend is not running: ${failure}`);
      try {
        return json(200, await answer(backend, url.searchParams));
      } catch (e) {
        if (e instanceof BadRequest) return apiError(400, 'INVALID_ARGUMENT', e.message);
        // The Prometheus backend's errors say which status and code they are (502/503).
        const { httpStatus, apiCode } = e as { httpStatus?: unknown; apiCode?: unknown };
        if (typeof httpStatus === 'number' && typeof apiCode === 'string') return apiError(httpStatus, apiCode, errorMessage(e));
        return apiError(503, 'UNAVAILABLE', `the metrics backend failed: ${errorMessage(e)}`);
      }
    },
  });
  const routes: AdminRoute[] = [
    route('/api/v1/edges', (b, q) => computeEdges(b, inventoryOf(ctx), selectorOf(q, false), windowOf(q, maxWindow(b)))),
    route('/api/v1/stat', (b, q) => computeStat(b, inventoryOf(ctx), selectorOf(q, true), windowOf(q, maxWindow(b)))),
    route('/api/v1/stat/authz', (b, q) => computeAuthzStat(b, selectorOf(q, true), windowOf(q, maxWindow(b)))),
    route('/api/v1/observe/targets', async (b) => ({
      backend: b.kind,
      ...(b instanceof EmbeddedCollector ? { scrapeIntervalSeconds: b.intervalMs / 1000, retentionSeconds: b.retentionMs / 1000 } : {}),
      targets: await b.targets(),
    })),
  ];
  return { routes, streams: [] };
}
