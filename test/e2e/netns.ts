/**
 * Network namespaces for transparent-mode tests (root, Linux): a small "node" with pods, each pod
 * a namespace of its own on a bridge in the node's namespace — nothing is added to the host's
 * namespace, so no test address is reachable from (or routed to) anything outside. Namespaces
 * are named `ward-e2e-<pid>-<name>`; {@link sweepStaleNamespaces} removes those of test processes
 * that died without cleaning up.
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { AgentCommand, AgentReply } from './netns-agent.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const PREFIX = 'ward-e2e-';

/** What a transparent-mode test needs and is missing on this machine (undefined: nothing). */
export function netnsPrerequisites(): string | undefined {
  const missing: string[] = [];
  if (process.platform !== 'linux') return `Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) missing.push('root');
  const tools: [string, string[], string][] = [
    ['ip', ['-V'], 'ip (Debian package iproute2)'],
    ['iptables', ['--version'], 'iptables (Debian package iptables)'],
    ['iptables-restore', ['--version'], 'iptables-restore (Debian package iptables)'],
    ['nsenter', ['--version'], 'nsenter (Debian package util-linux)'],
  ];
  for (const [cmd, args, what] of tools) if (spawnSync(cmd, args, { stdio: 'ignore', timeout: 10_000 }).status !== 0) missing.push(what);
  return missing.length === 0 ? undefined : missing.join(', ');
}

/** Runs a command to completion (bounded); throws with its output when it fails. */
export function run(cmd: string, args: readonly string[], input?: string): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 30_000, ...(input !== undefined ? { input } : {}) });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`}): ${r.stderr}`);
  return r.stdout;
}

/** Deletes the namespaces (and kills the processes in them) of earlier test processes that are gone. */
export function sweepStaleNamespaces(): void {
  const list = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8', timeout: 10_000 }).stdout ?? '';
  for (const line of list.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const m = new RegExp(`^${PREFIX}(\\d+)-`).exec(name);
    if (m === null || isAlive(Number(m[1]))) continue;
    deleteNamespace(name);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Kills whatever still runs in namespace `name`, then deletes it. Never throws. */
function deleteNamespace(name: string): void {
  const pids = spawnSync('ip', ['netns', 'pids', name], { encoding: 'utf8', timeout: 10_000 }).stdout ?? '';
  for (const pid of pids.split('\n').filter((p) => /^\d+$/.test(p))) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
  spawnSync('ip', ['netns', 'del', name], { stdio: 'ignore', timeout: 10_000 });
}

/** A pod of a {@link NetnsLab}: its namespace and address. */
export interface LabPod {
  /** The namespace name. */
  readonly ns: string;
  readonly ip: string;
}

/**
 * One test's namespaces: a node namespace holding bridge `br0` with address `<subnet>.1/24`, and
 * pods on it. Every method throws when a command fails; {@link cleanup} never does.
 */
export class NetnsLab {
  readonly #made: string[] = [];
  readonly #subnet: string;
  /** The node's namespace and bridge address. */
  readonly node: LabPod;

  /** `subnet`: the first three octets, e.g. `10.244.77`. Creates the node namespace and its bridge. */
  constructor(subnet: string) {
    this.#subnet = subnet;
    try {
      this.node = { ns: this.#create('node'), ip: `${subnet}.1` };
      run('ip', ['-n', this.node.ns, 'link', 'add', 'br0', 'type', 'bridge']);
      run('ip', ['-n', this.node.ns, 'addr', 'add', `${this.node.ip}/24`, 'dev', 'br0']);
      run('ip', ['-n', this.node.ns, 'link', 'set', 'br0', 'up']);
    } catch (e) {
      // Nobody gets a lab to clean up: do it here.
      this.cleanup();
      throw e;
    }
  }

  /** A pod namespace `name` at `<subnet>.<host>`: `eth0` on the node's bridge, `lo` up. */
  addPod(name: string, host: number): LabPod {
    const ns = this.#create(name);
    const ip = `${this.#subnet}.${host}`;
    const port = `v-${name}`.slice(0, 15);
    // Made in the node's namespace with its peer straight in the pod's: nothing touches the host's.
    run('ip', ['-n', this.node.ns, 'link', 'add', port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
    run('ip', ['-n', this.node.ns, 'link', 'set', port, 'master', 'br0', 'up']);
    run('ip', ['-n', ns, 'addr', 'add', `${ip}/24`, 'dev', 'eth0']);
    run('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
    return { ns, ip };
  }

  /** Runs `cmd ARGS` inside namespace `ns` (bounded), with `input` on stdin. */
  exec(ns: string, cmd: string, args: readonly string[], input?: string): string {
    return run('ip', ['netns', 'exec', ns, cmd, ...args], input);
  }

  /** Kills every process left in the namespaces and deletes them. Idempotent; never throws. */
  cleanup(): void {
    for (const ns of this.#made.splice(0).reverse()) deleteNamespace(ns);
  }

  #create(name: string): string {
    const ns = `${PREFIX}${process.pid}-${name}`;
    run('ip', ['netns', 'add', ns]);
    this.#made.push(ns);
    run('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
    return ns;
  }
}

/** A {@link netns-agent} process in a namespace: applications and clients the test drives. */
export class NetnsAgent {
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #pending = new Map<number, (r: AgentReply) => void>();
  readonly #ready: Promise<void>;
  #stderr = '';
  #next = 1;

  /** Starts the agent in namespace `ns` (as root). */
  constructor(ns: string) {
    this.#child = spawn('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', `${ROOT}test/e2e/netns-agent.ts`], { cwd: ROOT });
    this.#child.stderr.on('data', (c: Buffer) => {
      this.#stderr += c.toString();
    });
    this.#ready = new Promise((resolve, reject) => {
      this.#child.once('exit', (code) => reject(new Error(`netns agent in ${ns} exited with ${code}: ${this.#stderr}`)));
      createInterface({ input: this.#child.stdout }).on('line', (line) => {
        const msg = JSON.parse(line) as AgentReply & { id?: number; ready?: boolean };
        if (msg.ready === true) resolve();
        if (msg.id === undefined) return;
        this.#pending.get(msg.id)?.(msg);
        this.#pending.delete(msg.id);
      });
    });
    // The exit rejection must not go unhandled when nobody waits any more.
    this.#ready.catch(() => {});
  }

  /** Sends a command; resolves with the answer (rejects after `timeoutMs`, or if the agent died). */
  async request(cmd: AgentCommand, timeoutMs = 20_000): Promise<AgentReply> {
    await this.#ready;
    const id = this.#next++;
    let timer: NodeJS.Timeout | undefined;
    try {
      return await new Promise<AgentReply>((resolve, reject) => {
        this.#pending.set(id, resolve);
        timer = setTimeout(() => reject(new Error(`no answer to ${JSON.stringify(cmd)} within ${timeoutMs} ms; agent stderr: ${this.#stderr}`)), timeoutMs);
        this.#child.stdin.write(`${JSON.stringify({ id, ...cmd })}\n`);
      });
    } finally {
      clearTimeout(timer);
      this.#pending.delete(id);
    }
  }

  /** Ends the agent (closing stdin, then SIGKILL after 2 s). */
  async stop(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.#child.once('exit', () => resolve()));
    this.#child.stdin.end();
    const timer = setTimeout(() => this.#child.kill('SIGKILL'), 2000);
    await exited;
    clearTimeout(timer);
  }
}
