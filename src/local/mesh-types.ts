/** What the local mesh is started with, reports and hands back: the types startLocalMesh's builders share. */
import type { ClusterConfig, ControllerListen, RunningController } from '../controller/index.js';
import type { Denial } from './denials.js';
import type { PodStatus } from './pod.js';

/** What `ward status -o json` prints. */
export interface LocalStatus {
  readonly pods: readonly PodStatus[];
  readonly denials: readonly Denial[];
}

/** A row of the summary printed once the mesh is up. */
export interface SummaryRow {
  readonly namespace: string;
  readonly name: string;
  readonly ip: string;
  readonly ready: boolean;
  readonly meshed: boolean;
  /** `http://IP:PORT` of the pod's HTTP ports. */
  readonly urls: readonly string[];
}

/** What happens, for the console of `ward up` (the CLI renders it). */
export type LocalEvent =
  | { readonly kind: 'identity'; readonly dir: string; readonly created: boolean }
  | { readonly kind: 'controller'; readonly adminUrl: string; readonly ports: RunningController['ports'] }
  | { readonly kind: 'pod-started'; readonly pod: string; readonly ip: string; readonly meshed: boolean }
  | { readonly kind: 'pod-ready'; readonly pod: string; readonly ready: boolean }
  | { readonly kind: 'pod-stopped'; readonly pod: string; readonly why: string }
  | { readonly kind: 'pod-invalid'; readonly pod: string; readonly problems: readonly string[] }
  | { readonly kind: 'report'; readonly text: string }
  | { readonly kind: 'manifests'; readonly applied: number; readonly deleted: number }
  | { readonly kind: 'controller-log'; readonly level: 'warn' | 'error'; readonly text: string }
  | { readonly kind: 'summary'; readonly rows: readonly SummaryRow[]; readonly api: string; readonly controller: string }
  | { readonly kind: 'stopping' };

/** Settings of {@link startLocalMesh}. */
export interface LocalMeshOptions {
  /** The manifests directory. */
  readonly dir: string;
  readonly stateDir: string;
  /** Cluster settings; the cluster networks are replaced by the pod range. */
  readonly cluster: ClusterConfig;
  readonly clusterDomain?: string;
  /** The controller's listeners (default: upstream's ports on 127.0.0.1). */
  readonly listen?: Partial<ControllerListen>;
  /** The first pod address (default 127.20.0.1; tests use another to run beside a mesh). */
  readonly firstPodAddress?: string;
  /** Multiplies probes' initial delays and periods (tests; default 1). */
  readonly probePeriodScale?: number;
  /** Restart delay after the first, immediate restart (default 10 s; doubles to 30× that). */
  readonly restartBackoffMs?: number;
  /** Time between SIGTERM and SIGKILL when stopping (default 3 s). */
  readonly graceMs?: number;
  /** The command that runs `ward` (for the proxies). */
  readonly wardArgv: readonly string[];
  /** The environment pods inherit (default this process's). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly onEvent: (e: LocalEvent) => void;
  /** How often the pod set is compared with DIR's (default 1 s). */
  readonly reconcileIntervalMs?: number;
}

/** A running local mesh. */
export interface LocalMesh {
  readonly controllerUrl: string;
  readonly apiUrl: string;
  status(): LocalStatus;
  /** Stops every pod (SIGTERM, SIGKILL after the grace period), the controller and the API; removes mesh.json. */
  stop(): Promise<void>;
  /** SIGKILLs every process at once and removes mesh.json (a second Ctrl-C, or exit). */
  killNow(): void;
}
