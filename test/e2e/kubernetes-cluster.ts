/**
 * A real single-node Kubernetes cluster for end-to-end tests: the cluster kit in ../shared/cluster
 * (etcd, kube-apiserver, containerd, runc, bridge CNI, kubelet, kube-proxy, controller-manager and
 * scheduler in a network namespace of their own, images imported without a registry). One cluster
 * per test file: start takes 10-15 s, stop 10-20 s. The suite is skipped when the kit's binaries
 * or root are missing, except under CI=true where that is a failure.
 */
import { spawn } from 'node:child_process';
import { accessSync, closeSync, constants, existsSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { alive, type KubectlResult, parseEnvFile, run } from '../../src/sources/kube/testing/kube-kit.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const KUBE_VERSION = process.env.KUBE_VERSION ?? 'v1.36.3';

/** Directory of the cluster kit's scripts. */
export function clusterKitDir(): string {
  return process.env.WARD_CLUSTER_KIT ?? resolve(REPO_ROOT, '..', 'shared', 'cluster');
}

const cacheDir = () => join(homedir(), '.cache', 'ward-kube');

/** undefined when a cluster can be started here, else why not. */
export function clusterKitAvailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'the cluster kit needs root (network namespaces, mounts, cgroups)';
  const kit = clusterKitDir();
  for (const f of ['start.sh', 'stop.sh']) if (!existsSync(join(kit, f))) return `cluster kit not found: no ${join(kit, f)} (set WARD_CLUSTER_KIT)`;
  const bins = ['kube-apiserver', 'kubectl', 'etcd', 'kubelet', 'kube-proxy', 'kube-scheduler', 'kube-controller-manager'].map((b) =>
    join(cacheDir(), KUBE_VERSION, b),
  );
  for (const b of [...bins, join(cacheDir(), 'containerd-deb', 'usr', 'bin', 'containerd')]) {
    try {
      accessSync(b, constants.X_OK);
    } catch {
      return `cluster kit binaries missing: no ${b} (run ${join(kit, '..', 'kube', 'build.sh')} then ${join(kit, 'build.sh')})`;
    }
  }
  return undefined;
}

/** A `describe` that needs the cluster kit: skipped with the reason when unavailable, failing under CI=true. */
export function describeWithCluster(name: string, opts: { readonly timeout?: number }, fn: () => void): void {
  const reason = clusterKitAvailable();
  if (reason === undefined) describe(name, opts, fn);
  else if (process.env.CI === 'true')
    describe(name, () => {
      it('has the cluster kit', () => {
        throw new Error(reason);
      });
    });
  else describe(name, { ...opts, skip: reason }, fn);
}

/** One command's outcome. */
export type RunResult = KubectlResult;

export { run };

/** A running cluster. */
export interface Cluster {
  readonly dir: string;
  /** DIR/env parsed: KUBECONFIG, NETNS, NODE_IP, HOST_IP, POD_CIDR, SERVICE_CIDR, CTR, ... */
  readonly env: Readonly<Record<string, string>>;
  /** kubectl with the admin kubeconfig; rejects with stderr on a non-zero exit. */
  kubectl(args: readonly string[], stdin?: string): Promise<string>;
  /** kubectl whatever its exit code. */
  kubectlResult(args: readonly string[], stdin?: string): Promise<RunResult>;
  /** Imports a docker-archive tar into the node's containerd (namespace k8s.io). */
  importImage(tar: string): Promise<void>;
  /** Runs a command in the node's network namespace. */
  inNode(args: readonly string[], opts?: { timeoutMs?: number }): Promise<RunResult>;
  /** Stops the API server alone (etcd and everything else stay up). */
  stopApiserver(): Promise<void>;
  /** Starts it again with the same command line, in the node's namespace, and waits until it is ready. */
  startApiserver(): Promise<void>;
  /** Stops everything (safe to call twice). */
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts a cluster in `dir` (a fresh temporary directory by default). `log` hears the kit's
 * progress lines. Rejects with the kit's output when it cannot start (the kit cleans up itself).
 */
export async function startCluster(dir?: string, log: (line: string) => void = () => {}): Promise<Cluster> {
  const why = clusterKitAvailable();
  if (why !== undefined) throw new Error(why);
  const kit = clusterKitDir();
  const d = dir ?? mkdtempSync(join(tmpdir(), 'ward-cluster-'));
  const started = await run('bash', [join(kit, 'start.sh'), d], { timeoutMs: 300_000 });
  for (const line of started.stderr.split('\n').concat(started.stdout.split('\n'))) if (line.trim() !== '') log(line);
  if (started.code !== 0) throw new Error(`cluster kit start.sh ${d} exited ${started.code}:\n${started.stdout}\n${started.stderr}`);
  const env = parseEnvFile(readFileSync(join(d, 'env'), 'utf8'));
  const kubectlBin = env.KUBECTL ?? join(cacheDir(), KUBE_VERSION, 'kubectl');
  const kubeconfig = env.KUBECONFIG ?? join(d, 'kubeconfig');
  const ctr = (env.CTR ?? '').split(' ').filter((s) => s !== '');
  const nsenter = ['nsenter', `--net=/run/netns/${env.NETNS}`];
  const pidFile = join(d, 'api', 'apiserver.pid');
  let apiserverArgs: string[] | undefined;
  let stopped = false;

  const kubectlResult = (args: readonly string[], stdin?: string) =>
    run(kubectlBin, ['--kubeconfig', kubeconfig, ...args], stdin !== undefined ? { stdin } : {});
  const inNode = (args: readonly string[], opts: { timeoutMs?: number } = {}) => run(nsenter[0] as string, [...nsenter.slice(1), ...args], opts);
  const readyz = async () => (await kubectlResult(['get', '--raw', '/readyz']).catch(() => undefined))?.stdout.trim() === 'ok';

  return {
    dir: d,
    env,
    kubectlResult,
    async kubectl(args, stdin) {
      const r = await kubectlResult(args, stdin);
      if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${r.code}: ${r.stderr.trim()}`);
      return r.stdout;
    },
    async importImage(tar) {
      if (ctr.length === 0) throw new Error('the cluster env has no CTR command');
      const r = await run(ctr[0] as string, [...ctr.slice(1), 'images', 'import', tar], { timeoutMs: 300_000 });
      if (r.code !== 0) throw new Error(`ctr images import ${tar} exited ${r.code}: ${r.stderr}`);
    },
    inNode,
    async stopApiserver() {
      const pid = Number(readFileSync(pidFile, 'utf8').trim());
      if (!alive(pid)) return;
      apiserverArgs = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
        .split('\0')
        .filter((a) => a !== '');
      process.kill(pid, 'SIGTERM');
      for (let i = 0; i < 150 && alive(pid); i++) await sleep(100);
      if (alive(pid)) process.kill(pid, 'SIGKILL');
      for (let i = 0; i < 50 && alive(pid); i++) await sleep(100);
    },
    async startApiserver() {
      if (apiserverArgs === undefined) throw new Error('startApiserver: the API server was not stopped by stopApiserver');
      const out = openSync(join(d, 'api', 'apiserver.log'), 'a');
      // Its own session in the node's namespace, as the kit starts it: stop.sh signals the pid recorded here.
      const child = spawn(nsenter[0] as string, [...nsenter.slice(1), ...apiserverArgs], { detached: true, stdio: ['ignore', out, out] });
      child.unref();
      closeSync(out);
      if (child.pid === undefined) throw new Error('startApiserver: spawn failed');
      writeFileSync(pidFile, `${child.pid}\n`);
      const deadline = Date.now() + 180_000;
      while (!(await readyz())) {
        if (!alive(child.pid)) throw new Error(`startApiserver: kube-apiserver exited; see ${join(d, 'api', 'apiserver.log')}`);
        if (Date.now() > deadline) throw new Error('startApiserver: not ready after 180 s');
        await sleep(250);
      }
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await run('bash', [join(kit, 'stop.sh'), d], { timeoutMs: 180_000 });
    },
  };
}
