/**
 * The state directory of local meshes (`--state-dir`, `WARD_STATE_DIR`, default
 * `${XDG_STATE_HOME:-~/.local/state}/ward`):
 *
 *   identity/                 trust anchor, issuer and token key (created on first use, reused)
 *   pods/NS/POD/token         the pod's ServiceAccount token
 *   pods/NS/POD/app.log       its containers' output
 *   pods/NS/POD/proxy.log     its proxy's output (pino JSON lines)
 *   pods/NS/POD/pgids         the process groups of its running processes (what a later `ward up` ends
 *                             if this one could not: SIGKILL)
 *   controller.log            the embedded controller's log
 *   mesh.json                 the running mesh: pid, DIR, controller and local API URLs, the local API's
 *                             bearer token (mode 0600; removed on exit)
 *
 * The directory is mode 0700: it holds the identity keys and the API token.
 */
import { readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** Set in the environment of every process of a mesh to its state directory (how leftovers are recognized). */
export const MESH_MARKER_ENV = 'WARD_MESH_STATE_DIR';
/** Name of the file of a pod's process groups, in its state directory. */
export const PGIDS_FILE = 'pgids';
/** How long a liveness check of a mesh waits for its local API. */
const ALIVE_TIMEOUT_MS = 1000;

/** What `mesh.json` records about a running `ward up`. */
export interface MeshState {
  readonly pid: number;
  /** The manifests directory (absolute). */
  readonly dir: string;
  readonly stateDir: string;
  /** The controller's admin URL (its JSON API), e.g. `http://127.0.0.1:9990`. */
  readonly controller: string;
  /** The local API of `ward up` (status, logs, restart). */
  readonly api: string;
  /** The local API's bearer token (`Authorization: Bearer TOKEN`). */
  readonly token: string;
  /** ISO start time. */
  readonly started: string;
}

/** The state directory: the flag, else `WARD_STATE_DIR`, else `${XDG_STATE_HOME:-~/.local/state}/ward`. */
export function stateDirOf(flag: string | undefined, env: Readonly<Record<string, string | undefined>> = process.env): string {
  if (flag !== undefined && flag !== '') return flag;
  const fromEnv = env.WARD_STATE_DIR;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  const xdg = env.XDG_STATE_HOME;
  return join(xdg !== undefined && xdg !== '' ? xdg : join(homedir(), '.local', 'state'), 'ward');
}

/** Path of `mesh.json` in a state directory. */
export function meshStatePath(stateDir: string): string {
  return join(stateDir, 'mesh.json');
}

/** Directory of a pod's files. */
export function podStateDir(stateDir: string, namespace: string, name: string): string {
  return join(stateDir, 'pods', namespace, name);
}

/** True when a process with this pid exists. */
export function isProcessAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists, it is just not ours.
    return (e as { code?: unknown }).code === 'EPERM';
  }
}

/** `mesh.json` as written, or undefined when absent or unreadable. */
export function readMeshState(stateDir: string): MeshState | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(meshStatePath(stateDir), 'utf8'));
  } catch {
    return undefined;
  }
  if (typeof raw !== 'object' || raw === null) return undefined;
  const o = raw as Record<string, unknown>;
  if (typeof o.pid !== 'number' || typeof o.api !== 'string' || typeof o.controller !== 'string') return undefined;
  return {
    pid: o.pid,
    dir: typeof o.dir === 'string' ? o.dir : '',
    stateDir: typeof o.stateDir === 'string' ? o.stateDir : stateDir,
    controller: o.controller,
    api: o.api,
    token: typeof o.token === 'string' ? o.token : '',
    started: typeof o.started === 'string' ? o.started : '',
  };
}

/**
 * True when the mesh of `state` runs: its process exists and its local API answers an
 * authenticated status request within a second (a pid alone may have been reused by another
 * process, or belong to a `ward up` of another user).
 */
export async function meshAnswers(state: MeshState): Promise<boolean> {
  if (!isProcessAlive(state.pid) || state.token === '') return false;
  try {
    const res = await fetch(new URL('/api/v1/local/status', state.api), {
      headers: { authorization: `Bearer ${state.token}` },
      signal: AbortSignal.timeout(ALIVE_TIMEOUT_MS),
    });
    await res.body?.cancel();
    return res.ok;
  } catch {
    return false;
  }
}

/** The mesh running from this state directory, or undefined when none is (no file, its process is gone, or its API does not answer). */
export async function runningMesh(stateDir: string): Promise<MeshState | undefined> {
  const s = readMeshState(stateDir);
  return s !== undefined && (await meshAnswers(s)) ? s : undefined;
}

/** Writes `mesh.json` atomically. */
export function writeMeshState(stateDir: string, state: MeshState): void {
  const path = meshStatePath(stateDir);
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, path);
}

/** Removes `mesh.json` if it is this process's. */
export function removeMeshState(stateDir: string, pid: number = process.pid): void {
  const s = readMeshState(stateDir);
  if (s !== undefined && s.pid !== pid) return;
  rmSync(meshStatePath(stateDir), { force: true });
}

/** The process group ids of a pid from `/proc/PID/stat` (Linux), or undefined. */
function pgidOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // pid (comm) state ppid pgrp …: comm may hold spaces and parentheses, so count from the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const pgrp = Number(fields[2]);
    return Number.isInteger(pgrp) ? pgrp : undefined;
  } catch {
    return undefined;
  }
}

/** True when process `pid`'s environment marks it as a process of the mesh of `stateDir`. */
function isMeshProcess(pid: number, stateDir: string): boolean {
  try {
    const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    return environ.includes(`${MESH_MARKER_ENV}=${stateDir}`);
  } catch {
    return false;
  }
}

/**
 * Ends what a `ward up` on `stateDir` that could not clean up (killed with SIGKILL) left running:
 * the process groups its pods recorded (`pods/NS/POD/pgids`). A group is killed (SIGKILL) only
 * when one of its processes is marked as this state directory's ({@link MESH_MARKER_ENV}): a
 * recorded id reused by an unrelated process is left alone. Linux only (`/proc`); elsewhere
 * nothing is killed. Call it only when no mesh runs from `stateDir`. Returns the groups killed.
 */
export function killSurvivors(stateDir: string, self: number = process.pid): number[] {
  const files: string[] = [];
  try {
    const podsDir = join(stateDir, 'pods');
    for (const ns of readdirSync(podsDir, { withFileTypes: true })) {
      if (!ns.isDirectory()) continue;
      for (const pod of readdirSync(join(podsDir, ns.name), { withFileTypes: true }))
        if (pod.isDirectory()) files.push(join(podsDir, ns.name, pod.name, PGIDS_FILE));
    }
  } catch {
    return [];
  }
  const recorded = new Set<number>();
  for (const f of files) {
    let text: string;
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const l of text.split('\n')) if (/^\d+$/.test(l.trim())) recorded.add(Number(l.trim()));
    rmSync(f, { force: true });
  }
  recorded.delete(self);
  const own = pgidOf(self);
  if (recorded.size === 0) return [];
  // Every process's group, once: a group is ours when any of its processes carries the marker.
  const marked = new Set<number>();
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return [];
  }
  for (const p of pids) {
    const pid = Number(p);
    if (pid === self) continue;
    const g = pgidOf(pid);
    if (g === undefined || !recorded.has(g) || g === own || marked.has(g)) continue;
    if (isMeshProcess(pid, stateDir)) marked.add(g);
  }
  const killed: number[] = [];
  for (const g of marked) {
    try {
      process.kill(-g, 'SIGKILL');
      killed.push(g);
    } catch {
      // gone already, or not ours
    }
  }
  return killed.sort((a, b) => a - b);
}
