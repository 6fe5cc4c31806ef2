/**
 * The state directory of local meshes (`--state-dir`, `WARD_STATE_DIR`, default
 * `${XDG_STATE_HOME:-~/.local/state}/ward`):
 *
 *   identity/                 trust anchor, issuer and token key (created on first use, reused)
 *   pods/NS/POD/token         the pod's ServiceAccount token
 *   pods/NS/POD/app.log       its containers' output
 *   pods/NS/POD/proxy.log     its proxy's output (pino JSON lines)
 *   controller.log            the embedded controller's log
 *   mesh.json                 the running mesh: pid, DIR, controller and local API URLs (removed on exit)
 */
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

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
    started: typeof o.started === 'string' ? o.started : '',
  };
}

/** The mesh running from this state directory, or undefined when none is (no file, or its process is gone). */
export function runningMesh(stateDir: string): MeshState | undefined {
  const s = readMeshState(stateDir);
  return s !== undefined && isProcessAlive(s.pid) ? s : undefined;
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
