/**
 * Errors of queries over the index (`explain`, `authz`, targets): a pod that does not exist, a
 * malformed probe. The CLI shows them as usage errors (exit 2); the controller's JSON API as 400/404.
 */
import type { ClusterConfig, PolicyIndex } from './policy-index.js';

/** A query that cannot be answered because of its input. `notFound` marks an unknown pod or workload. */
export class QueryError extends Error {
  readonly code: 'ERR_QUERY' | 'ERR_QUERY_NOT_FOUND';

  constructor(message: string, opts: { readonly notFound?: boolean } = {}) {
    super(message);
    this.name = 'QueryError';
    this.code = opts.notFound === true ? 'ERR_QUERY_NOT_FOUND' : 'ERR_QUERY';
  }
}

/** What a query needs: the index and the cluster settings it was built with. */
export interface PolicyView {
  readonly config: ClusterConfig;
  readonly index: PolicyIndex;
}
