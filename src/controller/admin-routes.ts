/**
 * The admin API's feature routes, composed in one place: each feature (observability, tap, the
 * dashboard) exports a function from the controller's parts to its routes, and this file lists
 * them. JSON routes go through `handleAdminRequest`; stream routes get the raw request.
 */
import type { ClusterConfig } from '../index/index.js';
import type { Logger, Registry } from '../shared/index.js';
import type { AdminRoute } from './admin-api.js';
import type { AdminStreamRoute } from './admin-server.js';
import type { ControllerIdentity } from './controller-identity.js';
import type { ControllerIndexes } from './controller-indexes.js';
import type { MetricsSettings } from './controller-types.js';
import { dashboardRoutes } from './dashboard/dashboard-routes.js';
import { observeRoutes } from './observe/observe-routes.js';
import type { ShutdownStack } from './shutdown-stack.js';
import { tapRoutes } from './tap/tap-routes.js';

/** What feature routes may read from the running controller. */
export interface AdminContext {
  readonly cluster: ClusterConfig;
  readonly indexes: ControllerIndexes;
  readonly identity: ControllerIdentity;
  readonly registry: Registry;
  readonly log: Logger;
  /** Stopped last first when the controller closes (a feature's timers, sockets…). */
  readonly cleanups: ShutdownStack;
  /** The traffic views' metrics backend (`ward controller --metrics-backend`). */
  readonly metrics?: MetricsSettings | undefined;
}

/** The routes of every feature. */
export interface FeatureRoutes {
  readonly routes: readonly AdminRoute[];
  readonly streams: readonly AdminStreamRoute[];
}

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
