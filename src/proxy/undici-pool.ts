/**
 * undici's `Pool` (STACK.md §2.13: the HTTP/1 upstream client of both proxies), loaded alone. The
 * package's root module loads all of undici (fetch, WebSocket, caches, mocks…): +6 MB of idle RSS
 * in a proxy, over the 60 MB target; the pool and its client alone cost next to nothing
 * (57.3 -> 57.8 MB). Its types are the root module's (a type-only import loads nothing).
 */
import { createRequire } from 'node:module';
import type { Pool as UndiciPool } from 'undici';

const require = createRequire(import.meta.url);

const PoolClass = require('undici/lib/dispatcher/pool.js') as typeof UndiciPool;
export type Pool = UndiciPool;

/** Settings of a {@link relayPool} beyond its size. */
export interface RelayPoolOptions {
  /** Makes each connection (default: plain TCP to the origin). */
  readonly connect?: UndiciPool.Options['connect'];
  /** An idle connection is closed after this (default: undici's, 4 s or the server's `Keep-Alive` hint). */
  readonly idleTimeoutMs?: number;
}

/**
 * A keep-alive pool of up to `connections` HTTP/1 connections to `origin` (`http://host:port`)
 * for relaying: no deadline on the upstream's response head or body (a proxy imposes none; the
 * caller's client does), one request per connection at a time.
 */
export function relayPool(origin: string, connections: number, opts: RelayPoolOptions = {}): Pool {
  return new PoolClass(origin, {
    connections,
    pipelining: 1,
    headersTimeout: 0,
    bodyTimeout: 0,
    ...(opts.connect === undefined ? {} : { connect: opts.connect }),
    ...(opts.idleTimeoutMs === undefined ? {} : { keepAliveTimeout: opts.idleTimeoutMs, keepAliveMaxTimeout: opts.idleTimeoutMs }),
  });
}

/** True when `pool` holds no connection and has no request queued or running: it can be dropped. */
function isIdle(pool: Pool): boolean {
  const st = pool.stats;
  return st.connected === 0 && st.size === 0;
}

/** True for a pool that takes requests: not closed (a pool the relay retired) nor destroyed. */
export function isOpen(pool: Pool | undefined): pool is Pool {
  return pool !== undefined && !pool.closed && !pool.destroyed;
}

/** Destroys and forgets the pools of `pools` that are idle (no connection, no request). */
export function dropIdle(pools: Map<string, Pool>): void {
  for (const [key, pool] of pools) {
    if (!isIdle(pool)) continue;
    void pool.destroy();
    pools.delete(key);
  }
}
