/**
 * The controller of a local mesh, run in this process on the manifests directory with the pod
 * range as the cluster networks. Its log goes to `controller.log`; warnings, errors and (once
 * the mesh is up) applied manifests also reach the console as events.
 */
import { join } from 'node:path';
import { type ClusterConfig, type ControllerListen, DEFAULT_LISTEN, type RunningController, startController } from '../controller/index.js';
import { type Network, parseCidr } from '../core/index.js';
import { createLogger } from '../shared/index.js';
import { type AddressAllocator, POD_RANGE } from './addresses.js';
import type { LocalEvent, LocalMeshOptions } from './mesh-types.js';
import { LogFile } from './supervisor.js';

/** A started local controller. */
export interface LocalController {
  readonly controller: RunningController;
  /** The cluster settings it runs with (the cluster networks are the pod range). */
  readonly cluster: ClusterConfig;
  /** `http://host:port` of its admin server. */
  readonly url: string;
  /** `host:port` of its APIs, as the pods dial them. */
  readonly apis: { readonly identity: string; readonly policy: string; readonly destination: string };
  /** From now on, applied manifests are reported as events (the initial load shows in the summary). */
  reportManifestChanges(): void;
  /** Stops the controller, then flushes and closes its log. */
  close(): Promise<void>;
}

/** Where the controller runs from. */
export interface LocalControllerSetup {
  /** The manifests directory (resolved). */
  readonly dir: string;
  readonly stateDir: string;
  readonly identityDir: string;
  /** Gives every pod its local address. */
  readonly allocator: AddressAllocator;
}

/** A dialable host for a listen host (a wildcard listener is reached on loopback). */
function dialHost(host: string): string {
  return host === '0.0.0.0' || host === '::' || host === '' ? '127.0.0.1' : host;
}

/** Starts the controller (its log is closed again when it cannot start). Throws what `startController` throws. */
export async function startLocalController(opts: LocalMeshOptions, at: LocalControllerSetup): Promise<LocalController> {
  const emit = opts.onEvent;
  const controllerLog = new LogFile(join(at.stateDir, 'controller.log'), true);
  let started = false;
  const logger = createLogger({
    name: 'controller',
    level: 'info',
    destination: {
      write(line: string) {
        controllerLog.write(line.replace(/\n$/, ''));
        consoleFromControllerLog(line, started, emit);
      },
    },
  });
  const podNet = parseCidr(POD_RANGE) as Network['net'];
  const cluster: ClusterConfig = { ...opts.cluster, clusterNetworks: [{ net: podNet, except: [] }], localhostIsPodAddress: true };
  const listen: ControllerListen = { ...DEFAULT_LISTEN, ...opts.listen };
  let controller: RunningController;
  try {
    controller = await startController({
      manifestsDir: at.dir,
      identityDir: at.identityDir,
      cluster,
      ...(opts.clusterDomain !== undefined ? { clusterDomain: opts.clusterDomain } : {}),
      listen,
      logger,
      // Every pod gets a local address, whatever status.podIP its manifest carries (kubectl get -o yaml writes one).
      podAddress: (namespace, name) => at.allocator.addressOf(namespace, name),
      replacePodAddresses: true,
      // A template edit makes new pods, which the runtime rolls to (see MeshPods).
      podNames: 'template-hash',
    });
  } catch (e) {
    logger.flush();
    await controllerLog.close();
    throw e;
  }
  const cp = controller.ports;
  const dial = (a: { host: string }, port: number) => `${dialHost(a.host)}:${port}`;
  const url = `http://${dial(listen.admin, cp.admin)}`;
  emit({ kind: 'controller', adminUrl: url, ports: cp });
  const running = controller;
  return {
    controller,
    cluster,
    url,
    apis: { identity: dial(listen.identity, cp.identity), policy: dial(listen.policy, cp.policy), destination: dial(listen.destination, cp.destination) },
    reportManifestChanges: () => {
      started = true;
    },
    close: async () => {
      await running.close();
      logger.flush();
      await controllerLog.close();
    },
  };
}

/** The console's share of a controller log line: warnings and errors, and applied manifests once `started`. */
function consoleFromControllerLog(line: string, started: boolean, emit: (e: LocalEvent) => void): void {
  let o: { level?: number; msg?: string; applied?: number; deleted?: number; diagnostics?: unknown; file?: string; err?: unknown };
  try {
    o = JSON.parse(line) as typeof o;
  } catch {
    return;
  }
  if (o.msg === 'manifests applied' && started) {
    emit({ kind: 'manifests', applied: o.applied ?? 0, deleted: o.deleted ?? 0 });
    return;
  }
  if ((o.level ?? 0) < 40) return;
  // `ward up` printed the warnings of the manifests it starts with (as `ward check` does).
  if (o.msg === 'policy warnings' && !started) return;
  const details = Array.isArray(o.diagnostics) ? o.diagnostics.filter((d): d is string => typeof d === 'string') : [];
  const err = typeof o.err === 'string' ? `: ${o.err}` : '';
  const file = typeof o.file === 'string' && details.length === 0 ? ` (${o.file})` : '';
  emit({
    kind: 'controller-log',
    level: (o.level ?? 0) >= 50 ? 'error' : 'warn',
    text: [`${o.msg ?? ''}${err}${file}`, ...details.map((d) => `  ${d}`)].join('\n'),
  });
}
