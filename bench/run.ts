/**
 * Benchmark runner: `npm run bench -- <attack|decide|detect|index|kube|propagation|certify|mesh|mesh-ab|metrics|outbound-tap|relay|revocation|all> [--json]`
 * (`all`: every suite but `mesh-ab`, which compares node options given in its environment, and
 * `attack`, which takes ~7 minutes, and `kube`, which takes ~5 and needs the apiserver kit).
 *
 * Prints a table per suite, or with `--json` exactly one JSON object per suite and line:
 * `{"suite": "...", "results": [{"name", "nsPerOp", "opsPerSec", ...extra}]}`. Progress and
 * warnings go to stderr so stdout stays machine-readable. Unknown suite: exit 2.
 */
import { runAttackSuite } from './attack.js';
import { runCertifySuite } from './certify.js';
import { runDecideSuite } from './decide.js';
import { runDetectSuite } from './detect.js';
import type { BenchResult, Suite } from './harness.js';
import { runIndexSuite } from './index.js';
import { runKubeSuite } from './kube.js';
import { runMeshSuite } from './mesh.js';
import { runMeshAbSuite } from './mesh-ab.js';
import { runMetricsSuite } from './metrics.js';
import { runOutboundTapSuite } from './outbound-tap.js';
import { runPropagationSuite } from './propagation.js';
import { runRelaySuite } from './relay.js';
import { runRevocationSuite } from './revocation.js';

const SUITES: readonly Suite[] = [
  { name: 'attack', run: runAttackSuite, notInAll: true },
  { name: 'decide', run: runDecideSuite },
  { name: 'detect', run: runDetectSuite },
  { name: 'index', run: runIndexSuite },
  { name: 'kube', run: runKubeSuite, notInAll: true },
  { name: 'propagation', run: runPropagationSuite },
  { name: 'certify', run: runCertifySuite },
  { name: 'mesh', run: runMeshSuite },
  { name: 'mesh-ab', run: runMeshAbSuite, notInAll: true },
  { name: 'metrics', run: runMetricsSuite },
  { name: 'outbound-tap', run: runOutboundTapSuite },
  { name: 'relay', run: runRelaySuite },
  { name: 'revocation', run: runRevocationSuite },
];

const USAGE = `usage: npm run bench -- <${[...SUITES.map((s) => s.name), 'all'].join('|')}> [--json]`;

function formatNumber(n: number | null): string {
  if (n === null) return '-';
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  return n >= 100 ? n.toFixed(0) : n.toFixed(2);
}

function formatTime(ns: number | null): string {
  if (ns === null) return '-';
  if (ns >= 1e6) return `${(ns / 1e6).toFixed(2)} ms`;
  if (ns >= 1e3) return `${(ns / 1e3).toFixed(2)} µs`;
  return `${ns.toFixed(1)} ns`;
}

const CORE_FIELDS = new Set(['name', 'nsPerOp', 'opsPerSec', 'targetNs', 'targetMs', 'targetMb', 'targetPerSec', 'meetsTarget']);

function targetOf(r: BenchResult): string {
  if (typeof r.targetNs === 'number') return `< ${formatTime(r.targetNs)}`;
  if (typeof r.targetMs === 'number') return `< ${r.targetMs} ms`;
  if (typeof r.targetMb === 'number') return `< ${r.targetMb} MB`;
  if (typeof r.targetPerSec === 'number') return `> ${r.targetPerSec}/s`;
  return '';
}

/** Renders a borderless table (kubectl style). */
function table(suite: string, results: readonly BenchResult[]): string {
  const head = ['NAME', 'TIME/OP', 'OPS/S', 'TARGET', 'OK', 'DETAILS'];
  const rows = results.map((r) => [
    r.name,
    formatTime(r.nsPerOp),
    formatNumber(r.opsPerSec),
    targetOf(r),
    r.meetsTarget === undefined ? '' : r.meetsTarget ? 'yes' : 'NO',
    Object.entries(r)
      .filter(([k]) => !CORE_FIELDS.has(k))
      .map(([k, v]) => `${k}=${String(v)}`)
      .join(' '),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] as string).length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] as number)))
      .join('  ')
      .trimEnd();
  return [`suite ${suite}`, line(head), ...rows.map(line), ''].join('\n');
}

async function main(argv: readonly string[]): Promise<number> {
  const json = argv.includes('--json');
  const names = argv.filter((a) => a !== '--json');
  const unknownFlag = names.find((a) => a.startsWith('-'));
  if (unknownFlag !== undefined || names.length !== 1) {
    process.stderr.write(`${unknownFlag !== undefined ? `unknown option ${unknownFlag}\n` : ''}${USAGE}\n`);
    return 2;
  }
  const wanted = names[0] as string;
  const suites = wanted === 'all' ? SUITES.filter((s) => s.notInAll !== true) : SUITES.filter((s) => s.name === wanted);
  if (suites.length === 0) {
    process.stderr.write(`unknown suite "${wanted}"\n${USAGE}\n`);
    return 2;
  }
  for (const suite of suites) {
    process.stderr.write(`running suite ${suite.name}...\n`);
    const results = await suite.run();
    process.stdout.write(json ? `${JSON.stringify({ suite: suite.name, results })}\n` : `${table(suite.name, results)}\n`);
  }
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
