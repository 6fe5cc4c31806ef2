import assert from 'node:assert/strict';
import { before, describe, it, type TestContext } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { buildAddonIfMissing } from '../testing/native.js';
import { MetricsRegistry } from './cells.js';
import {
  GC_PAUSE_BUCKETS_S,
  GC_PAUSES_ADDON_PATH,
  type GcCounter,
  type GcPausesAddon,
  gcCounting,
  type KindCounts,
  loadGcPausesAddon,
  startGcCounter,
} from './gc.js';
import { processMetricsRegistry } from './process.js';

/** Why the addon could not be built, if it could not. Built first: the process's counter starts with the first registry. */
let buildFailure: string | undefined;
before(() => {
  buildFailure = buildAddonIfMissing(GC_PAUSES_ADDON_PATH);
});

/** V8's `gc()`: a full GC without arguments, a scavenge with `{ type: 'minor' }`. */
type Gc = (options?: { type: 'minor' }) => void;

/** V8's `gc()` without starting node with `--expose-gc`. */
function exposeGc(): Gc {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as Gc;
}

/** `{ count, sum, buckets }` of one kind in an exposition. */
function kindOf(text: string, kind: string): { count: number; sum: number; buckets: number[] } {
  const count = Number(new RegExp(`^nodejs_gc_duration_seconds_count\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(text)?.[1]);
  const sum = Number(new RegExp(`^nodejs_gc_duration_seconds_sum\\{kind="${kind}"\\} (\\S+)$`, 'm').exec(text)?.[1]);
  const buckets = [...text.matchAll(new RegExp(`^nodejs_gc_duration_seconds_bucket\\{kind="${kind}",le="[^"]+"\\} (\\d+)$`, 'gm'))].map((m) => Number(m[1]));
  return { count, sum, buckets };
}

/** Waits for the observer's entries (node delivers them after the GC, not during it). */
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 50));

describe('nodejs_gc_duration_seconds', () => {
  it('counts the major and minor GCs of the process with their pauses', async () => {
    const registry = processMetricsRegistry();
    const text0 = registry.render();
    assert.match(text0, /^# TYPE nodejs_gc_duration_seconds histogram$/m);
    const major0 = kindOf(text0, 'major');
    const minor0 = kindOf(text0, 'minor');
    assert.equal(major0.buckets.length, GC_PAUSE_BUCKETS_S.length + 1);

    const gc = exposeGc();
    gc();
    gc();
    gc({ type: 'minor' });
    await settle();
    const text1 = registry.render();
    const major1 = kindOf(text1, 'major');
    const minor1 = kindOf(text1, 'minor');
    assert.ok(major1.count >= major0.count + 2, `major ${major0.count} -> ${major1.count}`);
    assert.ok(minor1.count >= minor0.count + 1, `minor ${minor0.count} -> ${minor1.count}`);
    // A pause takes some time, and a full GC of a test process well under a second.
    assert.ok(major1.sum > major0.sum && major1.sum - major0.sum < 1, `major sum ${major0.sum} -> ${major1.sum}`);
    // Cumulative buckets, the last (+Inf) equal to the count.
    for (let i = 1; i < major1.buckets.length; i++) assert.ok((major1.buckets[i] as number) >= (major1.buckets[i - 1] as number));
    assert.equal(major1.buckets.at(-1), major1.count);
  });

  it('is one count per process, whichever registry renders it', async () => {
    const a = processMetricsRegistry();
    const b = processMetricsRegistry();
    exposeGc()();
    await settle();
    assert.equal(kindOf(a.render(), 'major').count, kindOf(b.render(), 'major').count);
    assert.doesNotMatch(new MetricsRegistry().render(), /nodejs_gc_duration_seconds/);
  });
});

/** [minor, major] counts and the major pauses' sum of `counter`, brought up to date. */
function read(counter: GcCounter): { minor: number; major: number; majorSum: number } {
  counter.refresh();
  const [minor, major] = counter.kinds;
  return { minor: minor?.count ?? Number.NaN, major: major?.count ?? Number.NaN, majorSum: major?.sum ?? Number.NaN };
}

/** The real addon, built on demand as `npm test` users on a fresh clone would (the test is skipped outside CI when that fails). */
function realAddon(t: TestContext): GcPausesAddon | undefined {
  const failed = buildFailure;
  if (failed !== undefined && process.env.CI !== 'true') {
    t.skip(failed);
    return undefined;
  }
  assert.equal(failed, undefined, failed);
  const addon = loadGcPausesAddon();
  assert.ok(typeof addon !== 'string', addon as string);
  return addon;
}

/** Every pause in a bucket lies between the bucket's bounds, so the sum does too. */
function assertSumWithinBuckets(k: KindCounts): void {
  let low = 0;
  let high = 0;
  k.counts.forEach((n, b) => {
    if (n === 0) return;
    low += n * (b === 0 ? 0 : (GC_PAUSE_BUCKETS_S[b - 1] as number));
    high += n * (b < GC_PAUSE_BUCKETS_S.length ? (GC_PAUSE_BUCKETS_S[b] as number) : Number.POSITIVE_INFINITY);
  });
  assert.ok(low <= k.sum && k.sum <= high, `${k.kind}: sum ${k.sum} outside [${low}, ${high}] of its buckets ${k.counts.join(' ')}`);
}

describe('GC counters', () => {
  it('the native addon is built and counts each pause by its kind as it happens (no entries to wait for)', (t) => {
    const addon = realAddon(t);
    if (addon === undefined) return;
    const counter = startGcCounter(addon);
    assert.equal(counter.counting, 'native');
    const gc = exposeGc();
    const before = read(counter);
    gc();
    const afterMajor = read(counter);
    assert.equal(afterMajor.major, before.major + 1);
    assert.ok(afterMajor.minor >= before.minor);
    assert.ok(afterMajor.majorSum > before.majorSum && afterMajor.majorSum - before.majorSum < 1, `major sum ${before.majorSum} -> ${afterMajor.majorSum}`);
    gc({ type: 'minor' });
    const afterMinor = read(counter);
    assert.equal(afterMinor.major, afterMajor.major);
    assert.ok(afterMinor.minor >= afterMajor.minor + 1);
    // Every pause is in exactly one bucket, the one its duration falls in.
    for (const k of counter.kinds) {
      assert.equal(
        k.counts.reduce((x, y) => x + y, 0),
        k.count,
        k.kind,
      );
      assertSumWithinBuckets(k);
    }
  });

  it('a metrics registry of a process with the addon counts natively', (t) => {
    if (realAddon(t) === undefined) return;
    processMetricsRegistry();
    assert.deepEqual(gcCounting(), { counting: 'native' });
  });

  it("without the addon, node's gc performance entries are counted", async () => {
    const counter = startGcCounter(undefined);
    assert.equal(counter.counting, 'observer');
    const before = read(counter);
    exposeGc()();
    await settle();
    assert.ok(read(counter).major >= before.major + 1);
  });

  it('the addon refuses bounds other than those it started with, and a short output array', (t) => {
    const addon = realAddon(t);
    if (addon === undefined) return;
    addon.start(Float64Array.from(GC_PAUSE_BUCKETS_S));
    assert.throws(() => addon.start(new Float64Array(2)), { name: 'TypeError', message: /already started with other bounds/ });
    const shifted = Float64Array.from(GC_PAUSE_BUCKETS_S, (b) => b * 2);
    assert.throws(() => addon.start(shifted), { name: 'TypeError', message: /already started with other bounds/ });
    assert.throws(() => addon.read(new Float64Array(3)), { name: 'TypeError', message: /too short/ });
    assert.throws(() => addon.read([] as unknown as Float64Array), { name: 'TypeError', message: /must be a Float64Array/ });
  });
});
