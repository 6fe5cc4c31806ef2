/**
 * How a sidecar's node process should be started. These are process options (V8 reads them when
 * the heap is set up), so launchers pass them: `ward up` does, the bench does, and a pod spec
 * should run `node --max-semi-space-size=2 --max-old-space-size=512
 * --no-allocation-site-pretenuring --expose-gc --no-sparkplug --no-maglev …/bin/ward.js proxy …`.
 *
 * The figures below were measured while the inbound proxy still relayed HTTP/2 through node:http2
 * (its streams, its header objects). Both proxies now relay HTTP/2 on h2/connection; node:http2
 * is left only in the admin server and the gRPC clients to the controller, far from the request
 * path. What each flag bounds is not specific to node:http2, so they are kept.
 *
 * `--max-semi-space-size=2`: V8's young generation grows up to 16 MB per semi-space under a
 * proxy's allocation rate, and every scavenge copies what is alive in it — for HTTP/2 relaying,
 * the streams of the last few hundred milliseconds. Measured on the gRPC relay at 1,000
 * requests/s (inbound proxy, `--trace-gc`): with the default, a scavenge every ~330 ms pausing
 * 3.8 ms at the median and 5.6–8.8 ms at p90 (every request arriving meanwhile waits); with 2 MB
 * semi-spaces, one every ~40 ms pausing 0.9 ms (p90 1.3 ms) for about the same total GC time.
 *
 * `--max-old-space-size=512`: a bound on how far V8 lets the old generation grow between
 * mark-compacts, and so on the dead memory RSS carries meanwhile. With node's default limit on a
 * large machine (~4 GB) V8 grows it fourfold between mark-compacts. The case measured was
 * node:http2's: it handed every header value to JavaScript as an external string owning
 * nghttp2's buffer, which V8 keeps in the old generation and whose buffer (outside the heap, not
 * counted by V8) goes back to malloc only when a mark-compact finalizes it. At 1,000 gRPC
 * requests/s the inbound proxy's old generation gained ~0.3 MB/s of such strings; with the
 * default limit the first mark-compact came after 80 s at 32 MB of heap, pausing 133 ms, and RSS
 * had climbed to 134 MB and stayed at ~123 MB. With a 512 MB limit the first came after 19 s at
 * 16.5 MB (49 ms), then one every ~9 s (12–21 ms, as the default settles to as well), and RSS
 * stayed at 86 MB. h2/connection decodes header values into ordinary heap strings, so that
 * particular garbage is gone and the limit now saves far less; it still bounds old-generation
 * garbage of other kinds. The proxy's live heap is ~10 MB, so 512 MB is far from a limit it
 * could reach.
 *
 * `--no-allocation-site-pretenuring`: V8 notes per allocation site whether its objects tend to
 * survive scavenges and, if so, allocates the site's later objects straight in the old
 * generation. A proxy's sites (node's sockets and emitters, the HTTP stacks' own objects) are
 * shared by every connection and protocol, so a verdict formed on one traffic mix sticks to the
 * next: after 18 s of HTTP/1 load (32 client connections), the inbound proxy's gRPC
 * requests at 1,000/s left ~5 KiB each in the old generation, a mark-compact every ~1.7 s (3-5
 * per 7 s round of the mesh bench, each round's p99 4-43 ms over direct); with pretenuring off,
 * one every ~6.5 s, about as often as with no HTTP/1 load before (7-9 s).
 *
 * `--expose-gc`: runtime/heap-settle's collection by V8's own `gc({flavor: 'last-resort'})`
 * rather than through the inspector, whose code (node's and V8's) then stays resident in an idle
 * proxy: 0.6 MB of file pages. The flag only installs that function on the global object.
 *
 * `--no-sparkplug --no-maglev`: only V8's interpreter and TurboFan, not its two middle tiers.
 * Sparkplug's code was mostly the bundle's top-level function (run once, 285 kB kept); Maglev's
 * compiler is 1.5-2.4 MB of the node binary's pages, which any warm function brings in, and an
 * idle proxy kept. In interleaved A/Bs (`npm run bench -- mesh-ab`, 24 round pairs, 1,000
 * requests/s) the proxies' CPU per request did not rise: paired medians -11 and -13 µs of ~490-560
 * for HTTP/1, -4 and -6 of ~440-490 for gRPC in two runs, p99 lower in 14, 12 (HTTP/1) and 11,
 * 14 (gRPC) of 24 rounds; `--no-maglev` alone -19 and 0 µs. Hot code is TurboFan's either way.
 *
 * Tried and not kept (mesh bench proxies, 1,000 requests/s; `--trace-gc-nvp` for the phases):
 * - `--initial-old-space-size=32`, a floor under the old generation's limit, so that the memory
 *   reducer's idle mark-compacts (which set the limit just above the live heap) do not bring one
 *   as soon as load returns. No mark-compact fell in any fixed-rate round of a full bench run,
 *   yet HTTP/1's added p99 per round stayed 1.7-4.4 ms, the gRPC pair held ~190 MB under load
 *   instead of ~160 MB, and the first mark-compact at saturation paused 63 ms.
 * - `--no-compact` and `--gc-experiment-less-compaction`: the inbound's gRPC mark-compacts
 *   paused as long (6-43 ms, against 8-30 ms without). Half of each pause is `evacuate.copy`
 *   (2-20 ms) whether or not old pages are compacted: it is the young generation being
 *   promoted. The rest was mostly finalizing node:http2's external header strings
 *   (`clear.external_string_table`, 2-14 ms), which h2/connection no longer makes.
 * - `--single-threaded-gc` (no GC helper threads competing for 2 cores): the same pauses
 *   (`evacuate.copy` 4-10 ms) and, in interleaved A/Bs of gRPC and of HTTP/1 (`npm run bench
 *   -- mesh-ab`: lower p99 in 7 of 16 rounds), no difference in p99.
 * - `--optimize-for-size`: mark-compacts came at the same heap size.
 */
export const PROXY_NODE_OPTIONS: readonly string[] = Object.freeze([
  '--max-semi-space-size=2',
  '--max-old-space-size=512',
  '--no-allocation-site-pretenuring',
  '--expose-gc',
  '--no-sparkplug',
  '--no-maglev',
]);
