/**
 * How a sidecar's node process should be started. V8's young generation grows up to 16 MB per
 * semi-space under a proxy's allocation rate, and every scavenge copies what is alive in it —
 * for HTTP/2 relaying, the streams of the last few hundred milliseconds, which node's native
 * handles keep reachable until a scavenge after they closed. Measured on the gRPC relay at
 * 1,000 requests/s (inbound proxy, `--trace-gc`): with the default, a scavenge every ~330 ms
 * pausing 3.8 ms at the median and 5.6–8.8 ms at p90 (every request arriving meanwhile waits);
 * with 2 MB semi-spaces, one every ~40 ms pausing 0.9 ms (p90 1.3 ms) for about the same total
 * GC time, and some 30 MB less resident memory under load. These are process options (V8 reads
 * them when the heap is set up), so launchers pass them: `ward up` does, and a pod spec should
 * run `node --max-semi-space-size=2 …/bin/ward.js proxy …`.
 */
export const PROXY_NODE_OPTIONS: readonly string[] = Object.freeze(['--max-semi-space-size=2']);
