/**
 * Child process of the `index` suite: measures the heap the policy index retains after a build.
 * Run with `--expose-gc`; prints one JSON object. Separate from the parent so earlier builds and
 * tinybench state do not pollute heap or RSS.
 *
 *   heapMb      heap retained once the bench drops its own references (index + the resources it keeps)
 *   inputsMb    heap of the generated resources alone
 *   indexOnlyMb heapMb minus inputsMb: what indexing adds on top of the resources
 *   rssMb       process RSS after the build
 */
import { buildIndex, buildScenario, type Scenario, type ScenarioName } from './index-scenario.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  process.stderr.write('index-memory: run node with --expose-gc\n');
  process.exit(2);
}
const collect = (): number => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

const name = process.argv[2];
if (name !== 'namespaces-50' && name !== 'one-namespace') {
  process.stderr.write(`index-memory: unknown scenario ${String(name)}\n`);
  process.exit(2);
}
const MB = 1024 * 1024;
const base = collect();
let scenario: Scenario | undefined = buildScenario(name as ScenarioName);
const withInputs = collect();
const built = buildIndex(scenario);
scenario = undefined;
const retained = collect();
const round = (n: number) => Math.round(n * 10) / 10;
process.stdout.write(
  `${JSON.stringify({
    heapMb: round((retained - base) / MB),
    inputsMb: round((withInputs - base) / MB),
    indexOnlyMb: round((retained - withInputs) / MB),
    rssMb: round(process.memoryUsage().rss / MB),
    cells: built.cells,
  })}\n`,
);
// Keep the index reachable until after the measurement.
if (built.index.namespaces().length === 0) process.exitCode = 1;
