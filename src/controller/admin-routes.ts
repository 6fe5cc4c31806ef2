/**
 * The admin API's feature routes, composed in one place: each feature (observability, tap, the
 * dashboard) exports a function from the controller's parts to its routes, and this file lists
 * them. JSON routes go through `handleAdminRequest`; stream routes get the raw request.
 */
import type { AdminRoute } from './admin-api.js';
import type { AdminContext, FeatureRoutes } from './admin-context.js';
import type { AdminStreamRoute } from './admin-server.js';
import { dashboardRoutes } from './dashboard/dashboard-routes.js';
import { observeRoutes } from './observe/observe-routes.js';
import { tapRoutes } from './tap/tap-routes.js';

export type { AdminContext, FeatureRoutes } from './admin-context.js';

/** Every feature's routes, in the order they are tried. */
export function featureRoutes(ctx: AdminContext): FeatureRoutes {
  const routes: AdminRoute[] = [];
  const streams: AdminStreamRoute[] = [];
  for (const f of [dashboardRoutes(ctx), observeRoutes(ctx), tapRoutes(ctx)]) {
    routes.push(...f.routes);
    streams.push(...f.streams);
  }
  return { routes, streams };
}
