/**
 * The `relay` suite's old-generation measurement, run by bench/relay.ts in a child process
 * started with the proxy's own node options (`PROXY_NODE_OPTIONS`: the young generation's size
 * decides what gets promoted) and `--expose-gc`. Prints one JSON line: bytes per request by case.
 *
 * What is measured: the bytes per request, proxied minus direct, that V8's sampling heap profiler
 * still counts once young-generation collections took their share (two minor GCs at either end of
 * a block collect what was still young and dead). That is what got promoted and then died, which
 * only a mark-compact reclaims, plus anything still reachable, i.e. a leak. A mark-compact of a
 * busy proxy pauses every connection on it for 5-30 ms, and these bytes decide how often one
 * comes. Part of it is node's own, whatever the proxy does: node:http2 hands every header value
 * that is not in HPACK's static table to JavaScript as an external string, which V8 allocates in
 * the old generation, and a long-lived Map that becomes empty (a session's streams) gets a new
 * backing table there too.
 */
import { Session } from 'node:inspector/promises';
import { median } from './harness.js';
import type { LoadClient } from './mesh-load.js';
import { startRelayFixture } from './relay-fixture.js';

const WARMUP = 3000;
/** The first block pays for compiling (code and feedback live in the old generation); it is not counted. */
const BLOCKS = 4;
const PER_BLOCK = 4000;
/** One sample per 4 KiB allocated on average: hundreds of samples per block at ~1 KiB per request. */
const SAMPLING_INTERVAL = 4096;

type Gc = (options: { type: 'minor' | 'major' }) => void;

/** The inspector's parameters (node's typings lack the last two). */
interface SamplingParams {
  samplingInterval: number;
  includeObjectsCollectedByMajorGC: boolean;
  includeObjectsCollectedByMinorGC: boolean;
}

interface SamplingNode {
  readonly selfSize: number;
  readonly children: readonly SamplingNode[];
}

function totalSelfSize(node: SamplingNode): number {
  let sum = node.selfSize;
  for (const c of node.children) sum += totalSelfSize(c);
  return sum;
}

function minorGcs(gc: Gc): void {
  gc({ type: 'minor' });
  gc({ type: 'minor' });
}

/** Bytes per request over `n` sequential requests that no young-generation GC collected. */
async function oldGenBytesPerRequest(session: Session, gc: Gc, c: LoadClient, n: number): Promise<number> {
  minorGcs(gc);
  const params: SamplingParams = { samplingInterval: SAMPLING_INTERVAL, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: false };
  await session.post('HeapProfiler.startSampling', params as never);
  for (let i = 0; i < n; i++) await c.request();
  minorGcs(gc);
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: SamplingNode } };
  return totalSelfSize(profile.head) / n;
}

async function main(): Promise<void> {
  const gc = (globalThis as { gc?: Gc }).gc;
  if (gc === undefined) throw new Error('relay-garbage: start node with --expose-gc');
  const fixture = await startRelayFixture();
  const session = new Session();
  session.connect();
  const out: Record<string, number> = {};
  try {
    await session.post('HeapProfiler.enable');
    for (const c of fixture.cases) {
      const { direct, proxied } = await c.open();
      for (let i = 0; i < WARMUP; i++) {
        await direct.request();
        await proxied.request();
      }
      const added: number[] = [];
      for (let b = 0; b < BLOCKS; b++) {
        const d = await oldGenBytesPerRequest(session, gc, direct, PER_BLOCK);
        const p = await oldGenBytesPerRequest(session, gc, proxied, PER_BLOCK);
        if (b > 0) added.push(p - d);
      }
      direct.close();
      proxied.close();
      const bytes = median(added);
      process.stderr.write(`relay: ${c.name} ${bytes.toFixed(0)} B per request left for a full GC (blocks: ${added.map((a) => a.toFixed(0)).join(' ')})\n`);
      out[c.name] = Math.round(bytes);
    }
  } finally {
    session.disconnect();
    await fixture.close();
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

await main();
