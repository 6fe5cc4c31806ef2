/**
 * Helpers for multi-process tests: run the real `ward` executable, wait for conditions with
 * explicit bounds, and clean up processes even when a test fails.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = new URL('../../', import.meta.url).pathname;
/** The `ward` executable of this checkout. */
export const WARD_BIN = `${ROOT}bin/ward.js`;

/** Runs `ward ARGS` to completion (bounded), returning its status and output. */
export function wardSync(args: readonly string[], timeoutMs = 30_000): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [WARD_BIN, ...args], {
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A running `ward` process with its output collected. */
export interface WardProcess {
  readonly child: ChildProcessWithoutNullStreams;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code once the process ended. */
  readonly exited: Promise<number | null>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves with the exit code. */
  stop(graceMs?: number): Promise<number | null>;
}

/**
 * Starts `ward ARGS` in the background, through `prefix` when given (a command that execs the
 * rest in place, e.g. `ip netns exec NS` or `nsenter --net=… --setuid=…`, so signals reach ward).
 */
export function wardSpawn(args: readonly string[], env: NodeJS.ProcessEnv = {}, prefix: readonly string[] = []): WardProcess {
  const argv = [...prefix, process.execPath, WARD_BIN, ...args];
  const child = spawn(argv[0] as string, argv.slice(1), { env: { ...process.env, ...env, NO_COLOR: '1', FORCE_COLOR: '0' } });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr.on('data', (c: Buffer) => {
    err += c.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    async stop(graceMs = 5000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** Polls `check` every `intervalMs` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function waitFor<T>(what: string, check: () => T | undefined | Promise<T | undefined>, timeoutMs = 10_000, intervalMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * Prepares a test's directory `dir` for a controller: `identity/` written by `ward identity init`
 * (asserted to succeed) and an empty `manifests/`.
 */
export function initWorkdir(dir: string): { readonly idDir: string; readonly manifests: string } {
  const idDir = join(dir, 'identity');
  const manifests = join(dir, 'manifests');
  mkdirSync(manifests);
  const init = wardSync(['identity', 'init', '--out', idDir]);
  assert.equal(init.status, 0, init.stderr);
  return { idDir, manifests };
}

/**
 * Starts `ward controller` on `manifests` with the identity in `idDir`, every API on `host`: at
 * `ports` (a restart on the same ports), by default on any free port (see {@link controllerPorts}).
 * `prefix` as for {@link wardSpawn}.
 */
export function spawnController(manifests: string, idDir: string, host: string, ports?: ControllerPorts, prefix: readonly string[] = []): WardProcess {
  const addr = (p: number | undefined) => `${host}:${p ?? 0}`;
  return wardSpawn(
    [
      'controller',
      '--manifests',
      manifests,
      '--identity-dir',
      idDir,
      '--policy-addr',
      addr(ports?.policy),
      '--identity-addr',
      addr(ports?.identity),
      '--destination-addr',
      addr(ports?.destination),
      '--admin-addr',
      addr(ports?.admin),
    ],
    {},
    prefix,
  );
}

/** Ports a started controller reported on stderr. */
export interface ControllerPorts {
  readonly policy: number;
  readonly identity: number;
  readonly destination: number;
  readonly admin: number;
}

/** Waits for the controller's ready line and parses its ports. */
export async function controllerPorts(p: WardProcess, timeoutMs = 20_000): Promise<ControllerPorts> {
  return waitFor(
    `the controller's ready line (stderr so far: ${p.stderr().slice(-500)})`,
    () => {
      if (p.child.exitCode !== null) throw new Error(`controller exited with ${p.child.exitCode}: ${p.stderr()}`);
      const m = /ward controller ready: policy :(\d+), identity :(\d+), destination :(\d+), admin http:\/\/[^:]+:(\d+)/.exec(p.stderr());
      return m === null ? undefined : { policy: Number(m[1]), identity: Number(m[2]), destination: Number(m[3]), admin: Number(m[4]) };
    },
    timeoutMs,
  );
}

/**
 * Writes a ServiceAccount token for `namespace/sa` bound to pod `namespace/pod` (minted by
 * `ward identity token`, asserted to succeed) to `file`, for `ward proxy --token-file`.
 */
export function writeTokenFile(idDir: string, file: string, namespace: string, sa: string, pod: string): string {
  const t = wardSync(['identity', 'token', '--identity-dir', idDir, '--sa', `${namespace}/${sa}`, '--pod', `${namespace}/${pod}`]);
  assert.equal(t.status, 0, t.stderr);
  writeFileSync(file, `${t.stdout.trim()}\n`);
  return file;
}

/** What a started `ward proxy` reported on stderr. */
export interface ProxyPorts {
  readonly identity: string;
  readonly mesh: number;
  readonly admin: number;
  /** Listen port by pod port. */
  readonly inbound: ReadonlyMap<number, number>;
  readonly outbound: number | undefined;
}

/**
 * Waits for a proxy's ready line and parses it, then for its admin `/ready` (on `adminHost`) to
 * answer 200.
 */
export async function proxyPorts(p: WardProcess, adminHost: string, timeoutMs = 20_000): Promise<ProxyPorts> {
  const ports = await waitFor(
    `the proxy's ready line (stderr so far: ${p.stderr().slice(-500)})`,
    () => {
      if (p.child.exitCode !== null) throw new Error(`proxy exited with ${p.child.exitCode}: ${p.stderr()}`);
      const m = /^ward proxy ready: identity (\S+), mesh :(\d+), admin :(\d+), inbound (.*?)(?:, outbound :(\d+))?(?:, transparent)?$/m.exec(p.stderr());
      if (m === null) return undefined;
      const inbound = new Map<number, number>();
      for (const i of (m[4] as string).matchAll(/(\d+)@(\d+)->/g)) inbound.set(Number(i[1]), Number(i[2]));
      return { identity: m[1] as string, mesh: Number(m[2]), admin: Number(m[3]), inbound, outbound: m[5] === undefined ? undefined : Number(m[5]) };
    },
    timeoutMs,
  );
  await waitFor(
    `the proxy to be ready (stderr so far: ${p.stderr().slice(-1000)})`,
    async () => ((await fetch(`http://${adminHost}:${ports.admin}/ready`, { signal: AbortSignal.timeout(timeoutMs) })).status === 200 ? true : undefined),
    timeoutMs,
    50,
  );
  return ports;
}

/** The controller flags of `ward up` with every API on `host`, each on any free port. */
export function upControllerFlags(host = '127.0.0.1'): string[] {
  return ['--policy-addr', `${host}:0`, '--identity-addr', `${host}:0`, '--destination-addr', `${host}:0`, '--admin-addr', `${host}:0`];
}

/**
 * Waits for the `mesh.json` a `ward up` writes into `stateDir` (failing early if `up` exits) and
 * returns its local API URL and bearer token.
 */
export async function localMeshApi(up: WardProcess, stateDir: string, timeoutMs = 30_000): Promise<{ readonly api: string; readonly token: string }> {
  const file = join(stateDir, 'mesh.json');
  const mesh = await waitFor(
    `mesh.json (ward up output so far: ${up.stdout()}${up.stderr()})`,
    () => {
      if (up.child.exitCode !== null) throw new Error(`ward up exited with ${up.child.exitCode}: ${up.stdout()}${up.stderr()}`);
      return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as { api: string; token: string }) : undefined;
    },
    timeoutMs,
  );
  return { api: mesh.api, token: mesh.token };
}

/**
 * The processes (other than this one) whose command line or environment contains any of
 * `needles`, as `pid: cmdline` lines: what a stopped `ward up` must not leave behind.
 */
export function processesMentioning(needles: readonly string[]): { readonly pid: number; readonly line: string }[] {
  const out: { pid: number; line: string }[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    if (Number(pid) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      const environ = readFileSync(`/proc/${pid}/environ`, 'utf8');
      const hits = needles.filter((n) => cmdline.includes(n) || environ.includes(n));
      if (hits.length > 0) out.push({ pid: Number(pid), line: `${pid}: ${cmdline.trim()} [mentions ${hits.join(', ')}]` });
    } catch {
      // gone, or not ours
    }
  }
  return out;
}

/** The sum of the samples of Prometheus metric `name` whose labels include every `key="value"` of `labels`. */
export function metricSum(text: string, name: string, labels: Readonly<Record<string, string>>): number {
  let sum = 0;
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    const m = /^(\w+)\{(.*)\} (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const got = (m[2] as string).split(/,(?=\w+=")/);
    if (wanted.every((w) => got.includes(w))) sum += Number(m[3]);
  }
  return sum;
}
