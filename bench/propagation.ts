/**
 * `npm run bench -- propagation`: a real `ward controller` process on loopback serving 2,000 pods,
 * each with one WatchPort stream from this process (over TLS, like proxies). One
 * AuthorizationPolicy that affects 500 of them is edited; for each affected stream we measure
 * the time from the file write to the new policy arriving, over several edits, and report
 * p50/p99 and the controller's RSS. Targets: p99 < 100 ms, RSS < 400 MB.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { InboundPolicyClient } from '../src/api/index.js';
import { initIdentity } from '../src/identity/index.js';
import type { BenchResult } from './harness.js';

const APPS = 4;
const REPLICAS = 500;
const PORT = 8080;
const EDITS = 5;
const TARGET_P99_MS = 100;
const TARGET_RSS_MB = 400;
const CHANNELS = 50;
const ROOT = new URL('../', import.meta.url).pathname;
const SERVER_NAME = 'linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local';

function manifests(): string {
  const docs: string[] = [
    'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: bench\n  annotations: {linkerd.io/inject: enabled}',
    'apiVersion: policy.linkerd.io/v1alpha1\nkind: MeshTLSAuthentication\nmetadata: {name: clients-a, namespace: bench}\nspec:\n  identities: ["client-a.bench.serviceaccount.identity.linkerd.cluster.local"]',
    'apiVersion: policy.linkerd.io/v1alpha1\nkind: MeshTLSAuthentication\nmetadata: {name: clients-b, namespace: bench}\nspec:\n  identities: ["client-b.bench.serviceaccount.identity.linkerd.cluster.local"]',
  ];
  for (let a = 0; a < APPS; a++) {
    docs.push(
      `apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app${a}, namespace: bench}\nspec:\n  replicas: ${REPLICAS}\n  selector: {matchLabels: {app: app${a}}}\n  template:\n    metadata: {labels: {app: app${a}}}\n    spec:\n      serviceAccountName: app${a}\n      containers:\n      - name: app\n        image: x\n        ports: [{name: http, containerPort: ${PORT}}]`,
      `apiVersion: policy.linkerd.io/v1beta3\nkind: Server\nmetadata: {name: app${a}-http, namespace: bench}\nspec:\n  podSelector: {matchLabels: {app: app${a}}}\n  port: http\n  proxyProtocol: HTTP/1`,
    );
  }
  return `${docs.join('\n---\n')}\n`;
}

function authorization(authn: string): string {
  return `apiVersion: policy.linkerd.io/v1alpha1\nkind: AuthorizationPolicy\nmetadata: {name: app0-clients, namespace: bench}\nspec:\n  targetRef: {group: policy.linkerd.io, kind: Server, name: app0-http}\n  requiredAuthenticationRefs:\n  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: ${authn}}\n`;
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number;
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? Number.NaN : Number(m[1]) / 1024;
}

async function waitFor<T>(what: string, check: () => T | undefined, timeoutMs: number): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Runs the propagation suite. */
export async function runPropagationSuite(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'ward-bench-prop-'));
  const idDir = join(dir, 'identity');
  const mDir = join(dir, 'manifests');
  mkdirSync(mDir, { recursive: true });
  const init = await initIdentity({ outDir: idDir });
  if (!init.ok) throw new Error('identity init failed');
  writeFileSync(join(mDir, 'apps.yaml'), manifests());
  const apFile = join(mDir, 'app0-authz.yaml');
  writeFileSync(apFile, authorization('clients-a'));
  const anchor = readFileSync(join(idDir, 'ca.crt'), 'utf8');

  const ctl = spawn(
    process.execPath,
    [
      join(ROOT, 'bin/ward.js'),
      'controller',
      '--manifests',
      mDir,
      '--identity-dir',
      idDir,
      '--log-level',
      process.env.WARD_BENCH_LOG ?? 'warn',
      '--policy-addr',
      '127.0.0.1:0',
      '--identity-addr',
      '127.0.0.1:0',
      '--destination-addr',
      '127.0.0.1:0',
      '--admin-addr',
      '127.0.0.1:0',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  ctl.stderr.on('data', (c: Buffer) => {
    stderr += c.toString();
    if (process.env.WARD_BENCH_LOG !== undefined) process.stderr.write(c);
  });
  const clients: InboundPolicyClient[] = [];
  const cancels: (() => void)[] = [];
  try {
    const ports = await waitFor(
      'the controller',
      () => {
        if (ctl.exitCode !== null) throw new Error(`controller exited: ${stderr}`);
        const m = /policy :(\d+), identity :\d+, destination :\d+, admin http:\/\/[^:]+:(\d+)/.exec(stderr);
        return m === null ? undefined : { policy: Number(m[1]), admin: Number(m[2]) };
      },
      60_000,
    );
    for (let c = 0; c < CHANNELS; c++) {
      // Like proxies: each client its own connection.
      clients.push(
        new InboundPolicyClient({ address: `127.0.0.1:${ports.policy}`, tls: { caPem: anchor, serverName: SERVER_NAME }, dedicatedConnection: true }),
      );
    }
    /** Per stream: number of messages and arrival time of the latest. */
    const counts = new Int32Array(APPS * REPLICAS);
    const arrivals = new Float64Array(APPS * REPLICAS);
    let errors = 0;
    process.stderr.write(`propagation: opening ${APPS * REPLICAS} WatchPort streams over ${CHANNELS} connections...\n`);
    for (let a = 0; a < APPS; a++) {
      for (let r = 0; r < REPLICAS; r++) {
        const i = a * REPLICAS + r;
        const client = clients[i % CHANNELS] as InboundPolicyClient;
        cancels.push(
          client.watchPort(`bench:app${a}-${r}`, PORT, {
            onMessage: (m) => {
              if (!m.ok) errors++;
              counts[i] = (counts[i] as number) + 1;
              arrivals[i] = performance.now();
            },
            onEnd: (e) => {
              if (e !== undefined) errors++;
            },
          }),
        );
      }
    }
    await waitFor('every stream to get its first policy', () => (counts.every((c) => c >= 1) ? true : undefined), 120_000);
    const rssOpen = rssMb(ctl.pid as number);
    const latencies: number[] = [];
    let unaffectedUpdates = 0;
    for (let e = 0; e < EDITS; e++) {
      const before = Int32Array.from(counts);
      await new Promise((r) => setTimeout(r, 300));
      const t0 = performance.now();
      writeFileSync(apFile, authorization(e % 2 === 0 ? 'clients-b' : 'clients-a'));
      await waitFor(
        `edit ${e + 1}: the 500 affected streams`,
        () => {
          for (let i = 0; i < REPLICAS; i++) if ((counts[i] as number) <= (before[i] as number)) return undefined;
          return true;
        },
        30_000,
      );
      for (let i = 0; i < REPLICAS; i++) latencies.push((arrivals[i] as number) - t0);
      // Settle, then make sure no unaffected stream got a message.
      await new Promise((r) => setTimeout(r, 200));
      for (let i = REPLICAS; i < APPS * REPLICAS; i++) if (counts[i] !== before[i]) unaffectedUpdates++;
      process.stderr.write(`propagation: edit ${e + 1}/${EDITS} done\n`);
    }
    const rssAfter = rssMb(ctl.pid as number);
    latencies.sort((x, y) => x - y);
    const p50 = percentile(latencies, 50);
    const p99 = percentile(latencies, 99);
    const rss = Math.max(rssOpen, rssAfter);
    return [
      {
        name: 'file change -> WatchPort update, 500 of 2000 streams',
        nsPerOp: null,
        opsPerSec: null,
        p50Ms: Number(p50.toFixed(2)),
        p99Ms: Number(p99.toFixed(2)),
        maxMs: Number((latencies[latencies.length - 1] as number).toFixed(2)),
        samples: latencies.length,
        targetMs: TARGET_P99_MS,
        meetsTarget: p99 < TARGET_P99_MS,
        unaffectedUpdates,
        streamErrors: errors,
      },
      {
        name: 'controller RSS with 2000 streams',
        nsPerOp: null,
        opsPerSec: null,
        rssMb: Number(rss.toFixed(1)),
        targetMb: TARGET_RSS_MB,
        meetsTarget: rss < TARGET_RSS_MB,
      },
    ];
  } finally {
    for (const c of cancels) c();
    for (const c of clients) c.close();
    ctl.kill('SIGTERM');
    await new Promise((r) => {
      const t = setTimeout(() => {
        ctl.kill('SIGKILL');
        r(undefined);
      }, 10_000);
      ctl.once('exit', () => {
        clearTimeout(t);
        r(undefined);
      });
    });
    rmSync(dir, { recursive: true, force: true });
  }
}
