/**
 * Suite `relay`: what the inbound proxy spends relaying one request, measured with the client,
 * the application and the proxy in one process (bench/relay-fixture.ts), so that other processes'
 * scheduling stays out of it (the mesh suite's per-process CPU at a fixed rate moves by ±15 %
 * between rounds on a shared machine, which hides a 5-10 % change; this suite's runs mostly agree
 * within ~7 %).
 *
 * `addedCpuUs`: the client sends requests one at a time, as at a low fixed rate (no batching),
 * first straight to the application, then through the proxy; the difference in
 * `process.cpuUsage()` per request is what the proxy added: detection is done once per
 * connection, so this is the per-request path (policy, headers, the upstream request and both
 * bodies' relay). Each case alternates direct and proxied blocks and reports the median of the
 * blocks' differences.
 *
 * `oldGenBytes`: the bytes per request the proxy leaves for a full GC, measured the same way in a
 * child process started with the proxy's node options (bench/relay-garbage.ts says how).
 */
import { spawn } from 'node:child_process';
import { PROXY_NODE_OPTIONS } from '../src/proxy/index.js';
import { type BenchResult, median } from './harness.js';
import type { LoadClient } from './mesh-load.js';
import { startRelayFixture } from './relay-fixture.js';

const BLOCKS = 7;
const PER_BLOCK = 2000;
const WARMUP = 2000;
/** The child's own time limit: a few thousand loopback requests take seconds. */
const GARBAGE_TIMEOUT_MS = 180_000;

/** CPU microseconds per request over `n` sequential requests. */
async function cpuPerRequest(c: LoadClient, n: number): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) await c.request();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / n;
}

async function measureCpu(name: string, direct: LoadClient, proxied: LoadClient): Promise<BenchResult> {
  await cpuPerRequest(direct, WARMUP);
  await cpuPerRequest(proxied, WARMUP);
  const added: number[] = [];
  const directUs: number[] = [];
  for (let b = 0; b < BLOCKS; b++) {
    const d = await cpuPerRequest(direct, PER_BLOCK);
    const p = await cpuPerRequest(proxied, PER_BLOCK);
    directUs.push(d);
    added.push(p - d);
  }
  const addedUs = median(added);
  process.stderr.write(`relay: ${name} ${addedUs.toFixed(1)} µs CPU per request added (blocks: ${added.map((a) => a.toFixed(0)).join(' ')})\n`);
  return {
    name,
    nsPerOp: addedUs * 1000,
    opsPerSec: 1e6 / addedUs,
    addedCpuUs: Math.round(addedUs * 10) / 10,
    directCpuUs: Math.round(median(directUs) * 10) / 10,
    requests: BLOCKS * PER_BLOCK,
  };
}

/** Runs bench/relay-garbage.ts in a child process; its JSON line, bytes per request by case. */
async function measureGarbage(): Promise<Record<string, number>> {
  const script = new URL('./relay-garbage.ts', import.meta.url).pathname;
  const child = spawn(process.execPath, [...PROXY_NODE_OPTIONS, '--expose-gc', '--import', import.meta.resolve('tsx'), script], {
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: GARBAGE_TIMEOUT_MS,
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  });
  if (code !== 0) throw new Error(`relay: ${script} exited with ${code ?? 'a signal'}`);
  return JSON.parse(out.trim().split('\n').pop() ?? '') as Record<string, number>;
}

/** Runs the suite. */
export async function runRelaySuite(): Promise<BenchResult[]> {
  const fixture = await startRelayFixture();
  const results: BenchResult[] = [];
  try {
    for (const c of fixture.cases) {
      const { direct, proxied } = await c.open();
      results.push(await measureCpu(c.name, direct, proxied));
      direct.close();
      proxied.close();
    }
  } finally {
    await fixture.close();
  }
  const garbage = await measureGarbage();
  return results.map((r) => ({ ...r, oldGenBytes: garbage[r.name] ?? null }));
}
