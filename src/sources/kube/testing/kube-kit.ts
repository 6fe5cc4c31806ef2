/**
 * Tests against a real kube-apiserver + etcd on loopback (the kit in /work/shared/kube): start
 * and stop one per test file, run kubectl against it, apply Linkerd's CRDs, restart the API
 * server alone (etcd keeps the data). Suites skip when the kit's binaries are missing, except
 * under CI=true where that fails.
 */
import { execFile, spawn } from 'node:child_process';
import { accessSync, closeSync, constants, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');

/** Directory holding kube-apiserver, kubectl and etcd. */
export function kubeBinDir(): string {
  return process.env.KUBE_BIN_DIR ?? join(homedir(), '.cache', 'ward-kube', process.env.KUBE_VERSION ?? 'v1.36.3');
}

/** Directory of the kit's scripts (start.sh, stop.sh, crds/). */
export function kubeKitDir(): string {
  return process.env.WARD_KUBE_KIT ?? resolve(REPO_ROOT, '..', 'shared', 'kube');
}

/** Path of the Linkerd policy + Gateway API CRDs the kit ships. */
export function linkerdCrdsPath(): string {
  return join(kubeKitDir(), 'crds', 'linkerd-crds.yaml');
}

/** undefined when the kit can run here, else why not. */
export function kubeKitAvailable(): string | undefined {
  const kit = kubeKitDir();
  for (const f of ['start.sh', 'stop.sh']) if (!existsSync(join(kit, f))) return `kube kit not found: no ${join(kit, f)} (set WARD_KUBE_KIT)`;
  const bin = kubeBinDir();
  for (const f of ['kube-apiserver', 'kubectl', 'etcd']) {
    try {
      accessSync(join(bin, f), constants.X_OK);
    } catch {
      return `kube kit binaries missing: no ${join(bin, f)} (run ${join(kit, 'build.sh')} or set KUBE_BIN_DIR)`;
    }
  }
  return undefined;
}

/**
 * A `describe` that needs the kit: skipped with the reason when the kit is unavailable, or, under
 * CI=true, a suite with one failing test naming the reason.
 */
export function describeWithKubeKit(name: string, fn: () => void): void {
  const reason = kubeKitAvailable();
  if (reason === undefined) {
    describe(name, fn);
  } else if (process.env.CI === 'true') {
    describe(name, () => {
      it('has the kube kit', () => {
        throw new Error(reason);
      });
    });
  } else {
    describe(name, { skip: reason }, fn);
  }
}

/** The result of one kubectl run. */
export interface KubectlResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** A running API server + etcd. */
export interface KubeKit {
  readonly dir: string;
  /** `https://127.0.0.1:PORT`. */
  readonly url: string;
  /** Admin kubeconfig with a bearer token. */
  readonly kubeconfigPath: string;
  /** Admin kubeconfig with a client certificate. */
  readonly kubeconfigCertPath: string;
  /** DIR/env parsed (KUBE_TOKEN, KUBE_CA_FILE, ETCD_URL, …). */
  readonly env: Readonly<Record<string, string>>;
  /** Runs kubectl with the admin kubeconfig; rejects (with stderr) when it exits non-zero. */
  kubectl(args: readonly string[], stdin?: string): Promise<string>;
  /** Runs kubectl and returns the exit code and output whatever they are. */
  kubectlResult(args: readonly string[], stdin?: string): Promise<KubectlResult>;
  /** Stops the API server alone (SIGTERM, then SIGKILL); etcd and its data stay. */
  stopApiserver(): Promise<void>;
  /** Starts the API server again with the same flags and port, and waits until it is ready. */
  startApiserver(): Promise<void>;
  /** Stops both processes (safe to call twice). */
  stop(): Promise<void>;
}

/** Runs a command to completion (bounded); resolves whatever its exit code, rejects when it cannot run. */
export function run(cmd: string, args: readonly string[], opts: { stdin?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<KubectlResult> {
  return new Promise((resolvePromise, reject) => {
    const child = execFile(
      cmd,
      args,
      { env: opts.env ?? process.env, maxBuffer: 64 * 1024 * 1024, timeout: opts.timeoutMs ?? 120_000, encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err !== null && typeof (err as { code?: unknown }).code !== 'number') {
          reject(new Error(`${cmd} ${args.join(' ')} failed: ${err.message}\n${stderr}`));
          return;
        }
        resolvePromise({ code: err === null ? 0 : ((err as { code?: number }).code ?? 1), stdout, stderr });
      },
    );
    // A command that exits without reading its input (kubectl failing fast while the API server
    // restarts) closes the pipe: the write then fails with EPIPE, which is not the command's result.
    child.stdin?.on('error', () => {});
    child.stdin?.end(opts.stdin ?? '');
  });
}

/** A kit's `DIR/env` file as a map (`KEY=value` lines; a value in double quotes, as the cluster kit's CTR, without them). */
export function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) env[line.slice(0, i)] = line.slice(i + 1).replace(/^"(.*)"$/, '$1');
  }
  return env;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** True while process `pid` exists. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts the kit into `dir` (a fresh temporary directory by default, removed by `stop()` unless
 * WARD_KUBE_KEEP=1). Takes about 5 s; call `stop()` in `after`.
 */
export async function startKubeKit(dir?: string): Promise<KubeKit> {
  const why = kubeKitAvailable();
  if (why !== undefined) throw new Error(why);
  const kitDir = kubeKitDir();
  const d = dir ?? mkdtempSync(join(tmpdir(), 'ward-kube-'));
  const scriptEnv = { ...process.env, KUBE_BIN_DIR: kubeBinDir() };
  const started = await run('bash', [join(kitDir, 'start.sh'), d], { env: scriptEnv, timeoutMs: 180_000 });
  if (started.code !== 0) throw new Error(`kube kit start.sh ${d} exited ${started.code}:\n${started.stdout}\n${started.stderr}`);
  const env = parseEnvFile(readFileSync(join(d, 'env'), 'utf8'));
  const kubectlBin = env.KUBECTL ?? join(kubeBinDir(), 'kubectl');
  const kubeconfigPath = join(d, 'kubeconfig');
  const url = env.KUBE_APISERVER_URL ?? '';
  const token = env.KUBE_TOKEN ?? '';
  const caFile = env.KUBE_CA_FILE ?? '';
  const pidFile = join(d, 'apiserver.pid');
  let apiserverArgs: string[] | undefined;
  let stopped = false;

  const kubectlResult = (args: readonly string[], stdin?: string) =>
    run(kubectlBin, ['--kubeconfig', kubeconfigPath, ...args], stdin !== undefined ? { stdin } : {});

  const readyz = async (): Promise<boolean> => {
    const r = await run('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_code}', '--cacert', caFile, '-H', `Authorization: Bearer ${token}`, `${url}/readyz`], {
      timeoutMs: 10_000,
    }).catch(() => undefined);
    return r?.stdout === '200';
  };

  const kit: KubeKit = {
    dir: d,
    url,
    kubeconfigPath,
    kubeconfigCertPath: join(d, 'kubeconfig-cert'),
    env,
    kubectlResult,
    async kubectl(args, stdin) {
      const r = await kubectlResult(args, stdin);
      if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${r.code}: ${r.stderr.trim()}`);
      return r.stdout;
    },
    async stopApiserver() {
      const pid = Number(readFileSync(pidFile, 'utf8').trim());
      if (!alive(pid)) return;
      // The exact command line, to start the same server again (same port, same etcd).
      apiserverArgs = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
        .split('\0')
        .filter((a) => a !== '');
      process.kill(pid, 'SIGTERM');
      for (let i = 0; i < 100 && alive(pid); i++) await sleep(100);
      if (alive(pid)) process.kill(pid, 'SIGKILL');
      for (let i = 0; i < 50 && alive(pid); i++) await sleep(100);
    },
    async startApiserver() {
      if (apiserverArgs === undefined) throw new Error('startApiserver: the API server was not stopped by stopApiserver');
      const [bin, ...args] = apiserverArgs;
      const log = openSync(join(d, 'apiserver.log'), 'a');
      // detached = its own session, as start.sh's setsid: nothing lingers in the test's group, and
      // stop.sh signals the pid recorded here.
      const child = spawn(bin as string, args, { detached: true, stdio: ['ignore', log, log] });
      child.unref();
      closeSync(log);
      if (child.pid === undefined) throw new Error('startApiserver: spawn failed');
      writeFileSync(pidFile, `${child.pid}\n`);
      const deadline = Date.now() + 120_000;
      while (!(await readyz())) {
        if (!alive(child.pid)) throw new Error(`startApiserver: kube-apiserver exited; see ${join(d, 'apiserver.log')}`);
        if (Date.now() > deadline) throw new Error('startApiserver: not ready after 120 s');
        await sleep(200);
      }
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await run('bash', [join(kitDir, 'stop.sh'), d], { env: scriptEnv, timeoutMs: 60_000 });
      // A directory made here goes with the kit; WARD_KUBE_KEEP=1 keeps it (logs, pki) to look into.
      if (dir === undefined && process.env.WARD_KUBE_KEEP !== '1') rmSync(d, { recursive: true, force: true });
    },
  };
  return kit;
}

/** The CRD names in the kit's Linkerd CRD file. */
export function linkerdCrdNames(): string[] {
  const text = readFileSync(linkerdCrdsPath(), 'utf8');
  const names: string[] = [];
  // Each CRD document has `metadata:` followed by an indented `name:` of the form plural.group.
  for (const m of text.matchAll(/^kind: CustomResourceDefinition\n(?:.*\n)*?\s+name: ([a-z0-9.-]+\.[a-z0-9.-]+)$/gm)) names.push(m[1] as string);
  return names;
}

/**
 * Applies Linkerd's policy CRDs and the Gateway API route CRDs (server-side: they are too large
 * for the last-applied annotation). With `wait` (default) resolves once all are Established.
 */
export async function applyLinkerdCrds(kit: KubeKit, opts: { readonly wait?: boolean } = {}): Promise<string[]> {
  await kit.kubectl(['apply', '--server-side', '-f', linkerdCrdsPath()]);
  const names = linkerdCrdNames();
  if (opts.wait !== false) await kit.kubectl(['wait', '--for=condition=Established', '--timeout=120s', ...names.map((n) => `crd/${n}`)]);
  return names;
}
