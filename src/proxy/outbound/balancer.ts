/**
 * Endpoint choice of the outbound proxy: power of two choices (P2C), as linkerd2-proxy balances.
 * Two distinct endpoints are drawn uniformly at random and the less loaded one wins: for HTTP the
 * load is the number of requests in flight to the endpoint, for TCP the number of open
 * connections. Equal loads go to the endpoint with the higher weight (the Destination API's
 * `WeightedAddr.weight`), then to the first drawn. Pure: the load and the randomness are passed in,
 * so a fixed `random` makes every choice deterministic.
 */

/** What the balancer reads of a candidate. */
export interface BalancerCandidate {
  /** Relative weight (Destination sends 10000 per endpoint); only breaks ties between equal loads. */
  readonly weight: number;
}

/**
 * Picks an endpoint among `candidates` by P2C over `loadOf`, skipping those in `exclude` (e.g. an
 * endpoint that just failed to connect). `random` returns numbers in [0, 1). Returns undefined
 * when no candidate is left; with one left it is returned without drawing.
 */
export function pickP2C<T extends BalancerCandidate>(
  candidates: readonly T[],
  loadOf: (candidate: T) => number,
  random: () => number,
  exclude?: ReadonlySet<T>,
): T | undefined {
  const pool = exclude === undefined || exclude.size === 0 ? candidates : candidates.filter((c) => !exclude.has(c));
  const n = pool.length;
  if (n === 0) return undefined;
  if (n === 1) return pool[0];
  const i = Math.min(n - 1, Math.floor(random() * n));
  // The second draw is over the n-1 others, so the two are always distinct.
  let j = Math.min(n - 2, Math.floor(random() * (n - 1)));
  if (j >= i) j++;
  const a = pool[i] as T;
  const b = pool[j] as T;
  const la = loadOf(a);
  const lb = loadOf(b);
  if (la !== lb) return la < lb ? a : b;
  return b.weight > a.weight ? b : a;
}

/**
 * Per-endpoint load counters, keyed by any stable endpoint key: requests in flight (HTTP) and open
 * connections (TCP). A key whose count falls to zero keeps its entry: deleting a Map's last entry
 * makes V8 shrink its table, and the new table of a long-lived Map is allocated in the old
 * generation, once per request at low concurrency (~120 B of garbage per request for the next
 * mark-compact, in the outbound proxy's sampling heap profile). Idle keys are dropped in a sweep
 * when the map has grown to twice its size after the last one (and at least {@link SWEEP_MIN}),
 * so endpoints that went away do not accumulate.
 */
export class EndpointLoad {
  readonly #inFlight = new Map<string, number>();
  readonly #open = new Map<string, number>();

  /** HTTP requests in flight to `key`. */
  inFlight(key: string): number {
    return this.#inFlight.get(key) ?? 0;
  }

  /** Open TCP connections to `key`. */
  open(key: string): number {
    return this.#open.get(key) ?? 0;
  }

  /** Counts a request to `key`; call the returned function (idempotent) when it is over. */
  startRequest(key: string): () => void {
    return track(this.#inFlight, key);
  }

  /** Counts a connection to `key`; call the returned function (idempotent) when it closes. */
  openConnection(key: string): () => void {
    return track(this.#open, key);
  }

  /** Keys held (busy or not yet swept), requests and connections together: for tests. */
  get keys(): number {
    return this.#inFlight.size + this.#open.size;
  }
}

/** Below this many keys a counter map is never swept. */
export const SWEEP_MIN = 64;

/** The size at which each counter map is swept next. */
const sweepAt = new WeakMap<Map<string, number>, number>();

function track(map: Map<string, number>, key: string): () => void {
  const before = map.get(key);
  map.set(key, (before ?? 0) + 1);
  if (before === undefined && map.size >= (sweepAt.get(map) ?? SWEEP_MIN)) sweep(map);
  let done = false;
  return () => {
    if (done) return;
    done = true;
    map.set(key, Math.max(0, (map.get(key) ?? 1) - 1));
  };
}

/** Drops the keys at zero; the next sweep comes when the map has doubled. */
function sweep(map: Map<string, number>): void {
  for (const [k, n] of map) if (n === 0) map.delete(k);
  sweepAt.set(map, Math.max(SWEEP_MIN, 2 * map.size));
}
