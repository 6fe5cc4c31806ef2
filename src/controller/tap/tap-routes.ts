/**
 * The tap feature's admin routes: the `/api/v1/tap` stream (tap-stream) and the
 * `/api/v1/denials` JSON route (denial-feed), both reaching proxies as the controller's client
 * identity (observe/proxy-admin-client).
 */
import { DENIAL_KINDS } from '../../core/index.js';
import type { ClusterConfig, PolicyIndex, PolicyView } from '../../index/index.js';
import type { Logger } from '../../shared/index.js';
import { type AdminResponse, type AdminRoute, apiError } from '../admin-api.js';
import type { AdminStreamRoute } from '../admin-server.js';
import type { ControllerIdentity } from '../controller-identity.js';
import { controllerProxyAdminTls, type ProxyAdminTls } from '../observe/proxy-admin-client.js';
import type { ShutdownStack } from '../shutdown-stack.js';
import { DenialFeed } from './denial-feed.js';
import { TapStreams } from './tap-stream.js';

/**
 * What the routes read from the controller: admin-routes' `AdminContext` fits it (not imported
 * from there: admin-routes imports this file).
 */
export interface TapContext {
  readonly cluster: ClusterConfig;
  readonly indexes: { readonly index: PolicyIndex };
  readonly identity: ControllerIdentity;
  readonly log: Logger;
  readonly cleanups: ShutdownStack;
}

const feeds = new WeakMap<TapContext, DenialFeed>();

function viewOf(ctx: TapContext): () => PolicyView {
  return () => ({ config: ctx.cluster, index: ctx.indexes.index });
}

function tlsOf(ctx: TapContext): () => Promise<ProxyAdminTls> {
  return () => controllerProxyAdminTls(ctx);
}

/** The controller's denial feed (one per controller, stopped with it). */
export function denialFeedOf(ctx: TapContext): DenialFeed {
  let feed = feeds.get(ctx);
  if (feed === undefined) {
    const f = new DenialFeed({ view: viewOf(ctx), tls: tlsOf(ctx), log: ctx.log });
    ctx.cleanups.push(() => f.stop());
    feeds.set(ctx, f);
    feed = f;
  }
  return feed;
}

const NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const KNOWN = new Set(['namespace', 'pod', 'kind']);

function json(status: number, value: unknown): AdminResponse {
  return { status, contentType: 'application/json; charset=utf-8', body: `${JSON.stringify(value, null, 2)}\n` };
}

/** Answers `/api/v1/denials?namespace=&pod=&kind=`; starts the feed on the first call. */
async function answerDenials(feed: DenialFeed, url: URL): Promise<AdminResponse> {
  const seen = new Map<string, string>();
  for (const [k, v] of url.searchParams) {
    if (!KNOWN.has(k)) return apiError(400, 'INVALID_ARGUMENT', `unknown parameter ${JSON.stringify(k.slice(0, 64))} (namespace, pod and kind are known)`);
    if (seen.has(k)) return apiError(400, 'INVALID_ARGUMENT', `parameter ${k} given twice`);
    if (v !== '') seen.set(k, v);
  }
  const namespace = seen.get('namespace');
  const pod = seen.get('pod');
  const kind = seen.get('kind');
  for (const [k, v] of [
    ['namespace', namespace],
    ['pod', pod],
  ] as const) {
    if (v !== undefined && !NAME.test(v)) return apiError(400, 'INVALID_ARGUMENT', `${k} ${JSON.stringify(v.slice(0, 64))} is not a Kubernetes name`);
  }
  if (kind !== undefined && !DENIAL_KINDS.includes(kind)) {
    return apiError(400, 'INVALID_ARGUMENT', `kind ${JSON.stringify(kind.slice(0, 64))} is not one of ${DENIAL_KINDS.join(', ')}`);
  }
  await feed.start();
  return json(200, feed.answer({ namespace, pod, kind }));
}

/** The stream `GET /api/v1/tap` (NDJSON) and the JSON route `GET /api/v1/denials`. */
export function tapRoutes(ctx: TapContext): { readonly routes: AdminRoute[]; readonly streams: AdminStreamRoute[] } {
  const taps = new TapStreams({ view: viewOf(ctx), tls: tlsOf(ctx), log: ctx.log });
  return {
    routes: [{ path: '/api/v1/denials', handle: (url) => answerDenials(denialFeedOf(ctx), url) }],
    streams: [{ prefix: '/api/v1/tap', handle: (req, res, url) => taps.handle(req, res, url) }],
  };
}
