/**
 * What the admin API's feature routes (observability, tap, the dashboard) read from the running
 * controller, and what each hands back. Apart from admin-routes.ts, which lists the features, so
 * that a feature imports these types without importing the list that imports it.
 */
import type { ClusterConfig } from '../index/index.js';
import type { Logger, Registry } from '../shared/index.js';
import type { AdminRoute } from './admin-api.js';
import type { AdminStreamRoute } from './admin-server.js';
import type { ControllerIdentity } from './controller-identity.js';
import type { ControllerIndexes } from './controller-indexes.js';
import type { MetricsSettings } from './controller-types.js';
import type { ShutdownStack } from './shutdown-stack.js';

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
