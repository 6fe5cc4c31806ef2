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
 * connections (TCP). Entries disappear when both counts reach zero, so the map only holds busy
 * endpoints.
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
}

function track(map: Map<string, number>, key: string): () => void {
  map.set(key, (map.get(key) ?? 0) + 1);
  let done = false;
  return () => {
    if (done) return;
    done = true;
    const n = (map.get(key) ?? 1) - 1;
    if (n <= 0) map.delete(key);
    else map.set(key, n);
  };
}
