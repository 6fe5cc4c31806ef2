/**
 * Suite `index`: building the policy index for a large cluster, republishing after a single
 * change, and the index's memory. One-shot measurements (median of several repetitions, bounded
 * by a time budget), for the 50-namespace layout and the one-namespace worst case.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { PolicyIndex } from '../src/index/index.js';
import type { Resource } from '../src/manifest/index.js';
import { type BenchResult, oneShotResult, timeMs } from './harness.js';
import { buildIndex, buildScenario, type Scenario, type ScenarioName } from './index-scenario.js';

const BUILD_TARGET_MS = 2000;
const REPUBLISH_TARGET_MS = 10;
const MEMORY_TARGET_MB = 300;

/** Repetitions: at most `max`, stopping early once `budgetMs` is spent (at least one). */
function repeat(max: number, budgetMs: number, fn: () => number): number[] {
  const out: number[] = [];
  let spent = 0;
  while (out.length < max && (out.length === 0 || spent < budgetMs)) {
    const ms = fn();
    out.push(ms);
    spent += ms;
  }
  return out;
}

/** Subscribes to every materialised cell; returns a counter of publications. */
function watchAll(index: PolicyIndex, s: Scenario): { count: () => number; reset: () => void } {
  let n = 0;
  for (const p of s.pods) {
    for (const port of index.ports(p.namespace, p.name)) {
      index.lookup(p.namespace, p.name, port)?.subscribe(() => {
        n++;
      });
    }
  }
  return {
    count: () => n,
    reset: () => {
      n = 0;
    },
  };
}

/** Times `index.apply` of alternating variants of one resource; each call is a real change. */
function republish(
  label: string,
  index: PolicyIndex,
  watch: { count: () => number; reset: () => void },
  variants: readonly [Resource, Resource],
  expected: number,
): { samples: number[]; republished: number } {
  let flip = 1;
  let republished = -1;
  const samples = repeat(21, 5000, () => {
    watch.reset();
    const ms = timeMs(() => index.apply(variants[flip] as Resource));
    flip ^= 1;
    const n = watch.count();
    if (n !== expected) throw new Error(`index: ${label} republished ${n} cells, expected ${expected}`);
    republished = n;
    return ms;
  });
  return { samples, republished };
}

function memoryOf(scenario: ScenarioName): { heapMb: number; inputsMb: number; indexOnlyMb: number; rssMb: number } {
  const child = fileURLToPath(new URL('./index-memory.ts', import.meta.url));
  const res = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', child, scenario], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    encoding: 'utf8',
    maxBuffer: 1 << 20,
  });
  if (res.status !== 0) throw new Error(`index: memory child failed (${res.status ?? res.signal}): ${res.stderr}`);
  return JSON.parse(res.stdout) as { heapMb: number; inputsMb: number; indexOnlyMb: number; rssMb: number };
}

function runScenario(name: ScenarioName, prefix: string): BenchResult[] {
  process.stderr.write(`  scenario ${name}: generating...\n`);
  const s = buildScenario(name);
  const facts = { scenario: name, ...s.counts };
  process.stderr.write(`  scenario ${name}: build...\n`);
  let built: ReturnType<typeof buildIndex> | undefined;
  const buildSamples = repeat(5, 20_000, () =>
    timeMs(() => {
      built = buildIndex(s);
    }),
  );
  if (built === undefined) throw new Error('index: no build ran');
  const { index, cells } = built;
  const results: BenchResult[] = [oneShotResult(`${prefix}build`, buildSamples, BUILD_TARGET_MS, { ...facts, cells })];

  const watch = watchAll(index, s);
  // One AP on `app0-http` (10 pods, port 8080); the Server's http port on `app1`'s 10 pods; one
  // pod leaving its Servers (its 2 ports fall back to the default policy).
  const cases: [string, readonly [Resource, Resource], number][] = [
    ['republish-one-ap', s.apVariants, 10],
    ['republish-one-server', s.serverVariants, 10],
    ['republish-one-pod', s.podVariants, 2],
  ];
  for (const [label, variants, expected] of cases) {
    process.stderr.write(`  scenario ${name}: ${label}...\n`);
    const { samples, republished } = republish(label, index, watch, variants, expected);
    results.push(oneShotResult(`${prefix}${label}`, samples, REPUBLISH_TARGET_MS, { scenario: name, republished }));
  }

  process.stderr.write(`  scenario ${name}: memory (child process)...\n`);
  const mem = memoryOf(name);
  results.push({
    name: `${prefix}memory`,
    nsPerOp: null,
    opsPerSec: null,
    scenario: name,
    ...mem,
    targetMb: MEMORY_TARGET_MB,
    meetsTarget: mem.heapMb < MEMORY_TARGET_MB,
  });
  return results;
}

/** Runs the suite: the 50-namespace layout (`index/...`), then one namespace (`index/one-namespace/...`). */
export function runIndexSuite(): Promise<BenchResult[]> {
  return Promise.resolve([...runScenario('namespaces-50', 'index/'), ...runScenario('one-namespace', 'index/one-namespace/')]);
}
