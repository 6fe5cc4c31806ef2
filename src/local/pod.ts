/**
 * One pod of a local mesh: its proxy (meshed pods), its init and application containers as
 * supervised processes, their probes, and its readiness. The proxy starts first and the
 * applications once it is ready (as with linkerd's proxy-await); a pod is ready when its proxy's
 * `/ready` answers 200 (meshed pods), every application container runs, and every readiness
 * probe passes (a container without one is ready while it runs).
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { mintToken, type ProbeSpec } from '../controller/index.js';
import { controllerIdentity } from '../core/index.js';
import { ADMIN_POLICY_PORT, DEFAULT_MESH_PORT, PROXY_NODE_OPTIONS } from '../proxy/index.js';
import { NODE_ADDRESS } from './addresses.js';
import { type DenialLog, parseDenial } from './denials.js';
import { OUTBOUND_PORT, withoutHostProxies } from './env.js';
import type { ContainerPlan, PodPlan } from './plan.js';
import { httpProbe, type ProbeKind, ProbeWorker, probeCheck, probeTiming } from './probes.js';
import { MESH_MARKER_ENV, PGIDS_FILE, podStateDir } from './state.js';
import { type ExitInfo, LogFile, Supervised } from './supervisor.js';

/** Token lifetime; tokens are minted again every `TOKEN_REFRESH_MS`, well before they expire. */
const TOKEN_TTL_MS = 48 * 3_600_000;
const TOKEN_REFRESH_MS = 12 * 3_600_000;
/** How often the proxy's `/ready` is checked. */
const PROXY_READY_PERIOD_MS = 1000;

/** What a pod needs from the mesh around it. */
export interface PodDeps {
  readonly stateDir: string;
  /** The command that runs `ward` (`[node, ...execArgv, bin/ward.js]`). */
  readonly wardArgv: readonly string[];
  /** `host:port` of the controller's APIs. */
  readonly controller: { readonly identity: string; readonly policy: string; readonly destination: string };
  readonly trustAnchorsFile: string;
  readonly tokenKeyPem: string;
  readonly trustDomain: string;
  readonly controlPlaneNamespace: string;
  readonly clusterDomain: string;
  /** The proxies' environment (ward up's own). */
  readonly inheritedEnv: Readonly<Record<string, string | undefined>>;
  readonly probePeriodScale: number;
  readonly restartBackoff: { readonly minMs: number; readonly maxMs: number };
  readonly graceMs: number;
  readonly denials: DenialLog;
  /** Reports an event for people (one line, or several). */
  readonly report: (text: string) => void;
  /** Called when the pod's readiness changes. */
  readonly onReadyChange: (pod: LocalPod, ready: boolean) => void;
  /** Whether log files start empty (the first start of the pod in this run). */
  readonly truncateLogs: boolean;
}

/** A container's state, as `ward status` shows it. */
export interface ContainerStatus {
  readonly name: string;
  readonly state: 'waiting' | 'running' | 'terminated';
  readonly ready: boolean;
  readonly restarts: number;
  readonly pid?: number;
  readonly lastExit?: { readonly code: number | null; readonly signal: string | null; readonly reason: string };
  /** Why it is not ready (the last failing probe), if known. */
  readonly message?: string;
}

/** A pod's state, as `ward status -o json` shows it. */
export interface PodStatus {
  readonly namespace: string;
  readonly name: string;
  /** The workload the pod comes from (`Deployment/web`), or null for a Pod of its own. */
  readonly owner: string | null;
  readonly ip: string;
  readonly ready: boolean;
  readonly restarts: number;
  /** `host:port` of the proxy's admin server; null for unmeshed pods. */
  readonly adminAddress: string | null;
  /** The pod's mesh identity; null for unmeshed pods. */
  readonly identity: string | null;
  readonly meshed: boolean;
  readonly phase: 'Pending' | 'Running' | 'Succeeded' | 'Failed';
  readonly startedAt: string;
  readonly containers: readonly ContainerStatus[];
  readonly proxy: { readonly state: 'waiting' | 'running' | 'terminated'; readonly ready: boolean; readonly restarts: number; readonly pid?: number } | null;
  readonly message?: string;
  /** An old pod of a rollout: its workload's template changed; it runs until the new pods are ready. */
  readonly replaced?: true;
}

interface AppContainer {
  readonly plan: ContainerPlan;
  proc: Supervised;
  probes: Partial<Record<ProbeKind, ProbeWorker>>;
  started: boolean;
  ready: boolean;
  message: string | undefined;
}

function indent(lines: readonly string[], n: number): string {
  const shown = lines.slice(-n);
  return shown.length === 0 ? '  (no output)' : shown.map((l) => `  | ${l}`).join('\n');
}

/** ` (restarting now)`, ` (restarting in N s)`: when a process that ended starts again. */
function restartText(ms: number, verb = 'restarting'): string {
  return ms < 500 ? ` (${verb} now)` : ` (${verb} in ${Math.round(ms / 1000)} s)`;
}

function exitText(info: ExitInfo): string {
  if (info.error !== undefined) return `could not start: ${info.error}`;
  if (info.signal !== undefined) return `was killed by ${info.signal}`;
  return `exited with code ${info.code ?? '?'}`;
}

function stateOf(p: Supervised): 'waiting' | 'running' | 'terminated' {
  return p.state === 'running' ? 'running' : p.state === 'stopped' && p.lastExit !== undefined ? 'terminated' : 'waiting';
}

/** A running pod. */
export class LocalPod {
  readonly plan: PodPlan;
  readonly identity: string | null;
  readonly #d: PodDeps;
  readonly #dir: string;
  readonly appLog: LogFile;
  readonly proxyLog: LogFile | undefined;
  #proxy: Supervised | undefined;
  #proxyReady = false;
  #proxyTimer: NodeJS.Timeout | undefined;
  #tokenTimer: NodeJS.Timeout | undefined;
  #inits: Supervised[] = [];
  #containersStarted = false;
  #apps: AppContainer[] = [];
  #ready = false;
  #stopped = false;
  #message: string | undefined;
  readonly #startedAt = new Date();

  constructor(plan: PodPlan, identity: string | null, deps: PodDeps) {
    this.plan = plan;
    this.identity = identity;
    this.#d = deps;
    this.#dir = podStateDir(deps.stateDir, plan.namespace, plan.name);
    this.appLog = new LogFile(join(this.#dir, 'app.log'), deps.truncateLogs);
    this.proxyLog = plan.meshed ? new LogFile(join(this.#dir, 'proxy.log'), deps.truncateLogs) : undefined;
  }

  get key(): string {
    return `${this.plan.namespace}/${this.plan.name}`;
  }

  get ready(): boolean {
    return this.#ready;
  }

  /** Starts the proxy (meshed pods) and then the containers. */
  start(): void {
    if (this.plan.meshed) this.#startProxy();
    else this.#startContainers();
  }

  // === proxy ===

  #writeToken(): void {
    const token = mintToken({
      signerKeyPem: this.#d.tokenKeyPem,
      namespace: this.plan.namespace,
      serviceAccount: this.plan.serviceAccount,
      pod: this.plan.name,
      ttlMs: TOKEN_TTL_MS,
    });
    writeFileSync(join(this.#dir, 'token'), `${token}\n`, { mode: 0o600 });
  }

  #startProxy(): void {
    const p = this.plan;
    try {
      this.#writeToken();
    } catch (e) {
      this.#message = `cannot write the ServiceAccount token: ${(e as Error).message}`;
      this.#d.report(`pod ${this.key}: ${this.#message}`);
      return;
    }
    this.#tokenTimer = setInterval(() => {
      try {
        this.#writeToken();
      } catch (e) {
        this.#d.report(`pod ${this.key}: cannot renew the ServiceAccount token: ${(e as Error).message}`);
      }
    }, TOKEN_REFRESH_MS);
    this.#tokenTimer.unref();
    const [node, ...wardRest] = this.#d.wardArgv;
    const argv = [
      node as string,
      ...PROXY_NODE_OPTIONS,
      ...wardRest,
      'proxy',
      '--workload',
      this.key,
      '--service-account',
      p.serviceAccount,
      '--trust-domain',
      this.#d.trustDomain,
      '--control-plane-namespace',
      this.#d.controlPlaneNamespace,
      '--cluster-domain',
      this.#d.clusterDomain,
      '--trust-anchors',
      this.#d.trustAnchorsFile,
      '--token-file',
      join(this.#dir, 'token'),
      '--identity-addr',
      this.#d.controller.identity,
      '--policy-addr',
      this.#d.controller.policy,
      '--destination-addr',
      this.#d.controller.destination,
      '--listen-host',
      p.ip,
      ...p.ports.flatMap((port) => ['--inbound', `${port}=${p.appHost}:${port}`]),
      '--mesh-addr',
      `${p.ip}:${DEFAULT_MESH_PORT}`,
      '--admin-addr',
      `${p.ip}:${ADMIN_POLICY_PORT}`,
      // Tap is the controller's alone (it serves the tap API and the dashboard's Tap view).
      '--tap-identity',
      controllerIdentity({ controlPlaneNamespace: this.#d.controlPlaneNamespace, trustDomain: this.#d.trustDomain }),
      '--outbound-addr',
      `${p.ip}:${OUTBOUND_PORT}`,
      '--localhost-networks',
      `${p.ip}/32`,
      '--log-level',
      'info',
    ];
    // Without the host's proxy settings (see HOST_PROXY_VARIABLES).
    const env = withoutHostProxies(this.#d.inheritedEnv);
    delete env.WARD_LOG;
    env.NO_COLOR = '1';
    env[MESH_MARKER_ENV] = this.#d.stateDir;
    const proxy = new Supervised({
      argv,
      env,
      cwd: this.#dir,
      log: this.proxyLog as LogFile,
      restartPolicy: 'Always',
      backoff: this.#d.restartBackoff,
      onStart: () => this.#recordPgids(),
      onLine: (line) => {
        const d = parseDenial(line, p.namespace, p.name);
        if (d !== undefined) this.#d.denials.add(d);
      },
      onExit: (info) => {
        this.#recordPgids();
        this.#setProxyReady(false);
        if (this.#stopped) return;
        const again = info.restartInMs !== undefined ? restartText(info.restartInMs) : '';
        this.#d.report(`pod ${this.key}: proxy ${exitText(info)}${again}; last lines:\n${indent(info.lastLines, 10)}`);
      },
    });
    this.#proxy = proxy;
    proxy.start();
    this.#pollProxy();
  }

  /**
   * Checks the proxy's `/ready`. Until the containers start this is linkerd's proxy-await, from
   * inside the pod (the pod's own address); then it is the kubelet's readiness probe of the proxy
   * container, from the node address.
   */
  #pollProxy(): void {
    if (this.#stopped) return;
    const awaiting = !this.#containersStarted;
    void httpProbe({
      host: this.plan.ip,
      port: ADMIN_POLICY_PORT,
      localAddress: awaiting ? this.plan.ip : NODE_ADDRESS,
      path: '/ready',
      headers: { 'user-agent': 'kube-probe/1.30' },
      timeoutMs: 1000,
    }).then((r) => {
      if (this.#stopped) return;
      const ok = r.ok && this.#proxy?.running === true;
      if (awaiting && ok) this.#startContainers();
      this.#setProxyReady(ok);
      this.#proxyTimer = setTimeout(() => this.#pollProxy(), ok ? PROXY_READY_PERIOD_MS : 200);
      this.#proxyTimer.unref();
    });
  }

  #setProxyReady(ready: boolean): void {
    if (this.#proxyReady === ready) return;
    this.#proxyReady = ready;
    this.#updateReady();
  }

  // === containers ===

  #startContainers(): void {
    if (this.#stopped || this.#containersStarted) return;
    this.#containersStarted = true;
    const inits = this.plan.initContainers;
    if (inits.length === 0) {
      this.#startApps();
      return;
    }
    this.#runInit(0);
  }

  /** Init containers run one after the other, each to success (retried with back-off unless the policy is Never). */
  #runInit(i: number): void {
    const c = this.plan.initContainers[i];
    if (c === undefined || this.#stopped) {
      this.#startApps();
      return;
    }
    const multi = this.plan.initContainers.length + this.plan.containers.length > 1;
    const proc = new Supervised({
      argv: c.argv,
      env: this.#markedEnv(c.env),
      cwd: c.cwd,
      log: this.appLog,
      ...(multi ? { linePrefix: `[${c.name}] ` } : {}),
      restartPolicy: this.plan.restartPolicy === 'Never' ? 'Never' : 'OnFailure',
      backoff: this.#d.restartBackoff,
      onStart: () => this.#recordPgids(),
      onExit: (info) => {
        this.#recordPgids();
        if (this.#stopped) return;
        if (info.code === 0) {
          this.#runInit(i + 1);
          return;
        }
        const again = info.restartInMs !== undefined ? restartText(info.restartInMs, 'retrying') : '; the pod has failed';
        if (info.restartInMs === undefined) this.#message = `init container ${c.name} failed`;
        this.#d.report(`pod ${this.key}: init container ${c.name} ${exitText(info)}${again}; last lines:\n${indent(info.lastLines, 10)}`);
      },
    });
    this.#inits.push(proc);
    proc.start();
  }

  /** A container's environment, marked as this mesh's (a later `ward up` finds leftovers by it). */
  #markedEnv(env: Readonly<Record<string, string>>): Record<string, string> {
    return { ...env, [MESH_MARKER_ENV]: this.#d.stateDir };
  }

  /**
   * Writes the process groups running now to `pods/NS/POD/pgids`, so that a later `ward up` on
   * this state directory can end what a `ward up` that could not clean up (SIGKILL) left running.
   */
  #recordPgids(): void {
    const procs = [...this.#inits, ...this.#apps.map((a) => a.proc), ...(this.#proxy !== undefined ? [this.#proxy] : [])];
    const pgids = procs.flatMap((p) => (p.pid !== undefined ? [p.pid] : []));
    try {
      writeFileSync(join(this.#dir, PGIDS_FILE), pgids.map((g) => `${g}\n`).join(''), { mode: 0o600 });
    } catch {
      // Best effort: only the clean-up after a crash of ward up needs it.
    }
  }

  #startApps(): void {
    if (this.#stopped) return;
    const multi = this.plan.initContainers.length + this.plan.containers.length > 1;
    for (const c of this.plan.containers) {
      const app: AppContainer = { plan: c, proc: undefined as unknown as Supervised, probes: {}, started: false, ready: false, message: undefined };
      app.proc = new Supervised({
        argv: c.argv,
        env: this.#markedEnv(c.env),
        cwd: c.cwd,
        log: this.appLog,
        ...(multi ? { linePrefix: `[${c.name}] ` } : {}),
        restartPolicy: this.plan.restartPolicy,
        backoff: this.#d.restartBackoff,
        onStart: () => {
          this.#recordPgids();
          this.#onAppStart(app);
        },
        onExit: (info) => {
          this.#recordPgids();
          this.#onAppExit(app, info);
        },
      });
      this.#apps.push(app);
    }
    for (const a of this.#apps) a.proc.start();
    this.#updateReady();
  }

  #onAppStart(app: AppContainer): void {
    this.#stopProbes(app);
    app.started = false;
    app.ready = false;
    app.message = undefined;
    const spec = app.plan.spec;
    const startup = spec.startupProbe;
    if (startup !== undefined) this.#startProbe(app, 'startup', startup);
    else this.#afterStartup(app);
    this.#updateReady();
  }

  /** Startup passed (or there is none): liveness and readiness begin. */
  #afterStartup(app: AppContainer): void {
    app.started = true;
    const spec = app.plan.spec;
    if (spec.livenessProbe !== undefined) this.#startProbe(app, 'liveness', spec.livenessProbe);
    if (spec.readinessProbe !== undefined) this.#startProbe(app, 'readiness', spec.readinessProbe);
    else app.ready = true;
    this.#updateReady();
  }

  #startProbe(app: AppContainer, kind: ProbeKind, spec: ProbeSpec): void {
    const ports = new Map<string, number>();
    for (const p of app.plan.spec.ports ?? []) if (p.name !== undefined) ports.set(p.name.toLowerCase(), p.containerPort);
    const resolvePort = (port: number | string) =>
      typeof port === 'number' ? port : (ports.get(port.toLowerCase()) ?? (/^\d+$/.test(port) ? Number(port) : undefined));
    const check = probeCheck(spec, resolvePort, {
      host: this.plan.ip,
      localAddress: NODE_ADDRESS,
    });
    if (typeof check === 'string') {
      // The kubelet reports such a probe as failing; so does this.
      app.message = `${kind} probe: ${check}`;
      this.#d.report(`pod ${this.key}: container ${app.plan.name}: ${kind} probe cannot run: ${check}`);
      return;
    }
    const worker = new ProbeWorker({
      kind,
      timing: probeTiming(spec, kind, this.#d.probePeriodScale),
      check,
      onResult: (state, result, changed) => {
        if (this.#stopped) return;
        if (!result.ok) app.message = `${kind} probe failed: ${result.detail}`;
        else if (kind === 'readiness') app.message = undefined;
        if (!changed) return;
        if (kind === 'readiness') {
          app.ready = state === 'success';
          this.#updateReady();
        } else if (kind === 'startup' && state === 'success') {
          worker.stop();
          delete app.probes.startup;
          this.#afterStartup(app);
        } else if (state === 'failure') {
          this.#d.report(`pod ${this.key}: container ${app.plan.name} failed its ${kind} probe (${result.detail}); restarting it`);
          this.#stopProbes(app);
          app.ready = false;
          this.#updateReady();
          void app.proc.kill(this.#d.graceMs);
        }
      },
    });
    app.probes[kind] = worker;
    worker.start();
  }

  #stopProbes(app: AppContainer): void {
    for (const w of Object.values(app.probes)) w.stop();
    app.probes = {};
  }

  #onAppExit(app: AppContainer, info: ExitInfo): void {
    this.#stopProbes(app);
    app.ready = false;
    app.started = false;
    this.#updateReady();
    if (this.#stopped) return;
    const again = info.restartInMs !== undefined ? restartText(info.restartInMs) : ` (restartPolicy ${this.plan.restartPolicy}: not restarted)`;
    if (info.killed && info.error === undefined) return; // reported when the probe failed
    this.#d.report(`pod ${this.key}: container ${app.plan.name} ${exitText(info)}${again}; last lines:\n${indent(info.lastLines, 10)}`);
  }

  #updateReady(): void {
    const ready =
      !this.#stopped && (!this.plan.meshed || this.#proxyReady) && this.#apps.length > 0 && this.#apps.every((a) => a.proc.running && a.started && a.ready);
    if (ready === this.#ready) return;
    this.#ready = ready;
    this.#d.onReadyChange(this, ready);
  }

  // === status and stop ===

  /** Restarts of the pod's containers (the proxy's included), as kubectl's RESTARTS column counts them. */
  get restarts(): number {
    return this.#apps.reduce((n, a) => n + a.proc.restarts, 0) + (this.#proxy?.restarts ?? 0);
  }

  status(): PodStatus {
    const p = this.plan;
    const containers: ContainerStatus[] = this.plan.containers.map((c) => {
      const a = this.#apps.find((x) => x.plan.name === c.name);
      if (a === undefined)
        return { name: c.name, state: 'waiting', ready: false, restarts: 0, message: this.plan.meshed ? 'waiting for the proxy' : 'waiting' };
      const last = a.proc.lastExit;
      const pid = a.proc.pid;
      return {
        name: c.name,
        state: stateOf(a.proc),
        ready: a.ready && a.started && a.proc.running,
        restarts: a.proc.restarts,
        ...(pid !== undefined ? { pid } : {}),
        ...(last !== undefined
          ? {
              lastExit: {
                code: last.code ?? null,
                signal: last.signal ?? null,
                reason: last.killed ? 'killed' : last.error !== undefined ? 'start failed' : 'exited',
              },
            }
          : {}),
        ...(a.message !== undefined ? { message: a.message } : {}),
      };
    });
    const failed =
      this.#message !== undefined || this.#apps.some((a) => a.proc.state === 'stopped' && a.proc.lastExit !== undefined && a.proc.lastExit.code !== 0);
    const succeeded = this.#apps.length > 0 && this.#apps.every((a) => a.proc.state === 'stopped' && a.proc.lastExit?.code === 0);
    const running = this.#apps.some((a) => a.proc.running);
    const proxyPid = this.#proxy?.pid;
    return {
      namespace: p.namespace,
      name: p.name,
      owner: p.pod.owner ?? null,
      ip: p.ip,
      ready: this.#ready,
      restarts: this.restarts,
      adminAddress: p.meshed ? `${p.ip}:${ADMIN_POLICY_PORT}` : null,
      identity: this.identity,
      meshed: p.meshed,
      phase: failed ? 'Failed' : succeeded ? 'Succeeded' : running ? 'Running' : 'Pending',
      startedAt: this.#startedAt.toISOString(),
      containers,
      proxy:
        this.#proxy === undefined
          ? null
          : {
              state: stateOf(this.#proxy),
              ready: this.#proxyReady,
              restarts: this.#proxy.restarts,
              ...(proxyPid !== undefined ? { pid: proxyPid } : {}),
            },
      ...(this.#message !== undefined ? { message: this.#message } : {}),
    };
  }

  /** Container names, for `ward logs -c NAME`. */
  containerNames(): string[] {
    return [...this.plan.initContainers, ...this.plan.containers].map((c) => c.name);
  }

  /** Stops every process of the pod: SIGTERM, SIGKILL after the grace period. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#clearTimers();
    for (const a of this.#apps) this.#stopProbes(a);
    const all = [...this.#apps.map((a) => a.proc), ...this.#inits, ...(this.#proxy !== undefined ? [this.#proxy] : [])];
    await Promise.all(all.map((p) => p.stop(this.#d.graceMs)));
    this.#ready = false;
    rmSync(join(this.#dir, PGIDS_FILE), { force: true });
    await Promise.all([this.appLog.close(), this.proxyLog?.close()]);
  }

  /**
   * After {@link stop}: whoever follows this pod's logs (`ward logs -f`) goes on with `next`'s,
   * the pod created in its place; without one, following ends, saying `why`.
   */
  handOverLogs(next: LocalPod | undefined, why: string): void {
    if (next !== undefined) this.appLog.handOver(next.appLog, 'pod recreated');
    else this.appLog.endSubscribers(why);
    if (this.proxyLog === undefined) return;
    if (next?.proxyLog !== undefined) this.proxyLog.handOver(next.proxyLog, 'pod recreated');
    else this.proxyLog.endSubscribers(next !== undefined ? 'pod recreated without a proxy' : why);
  }

  /** Kills every process of the pod at once (SIGKILL, synchronously). */
  killNow(): void {
    this.#stopped = true;
    this.#clearTimers();
    for (const a of this.#apps) {
      this.#stopProbes(a);
      a.proc.killNow();
    }
    for (const p of this.#inits) p.killNow();
    this.#proxy?.killNow();
  }

  #clearTimers(): void {
    if (this.#proxyTimer !== undefined) clearTimeout(this.#proxyTimer);
    if (this.#tokenTimer !== undefined) clearInterval(this.#tokenTimer);
  }
}
