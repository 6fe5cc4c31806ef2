/**
 * How `ward status`, `ward logs`, `ward restart` and the `--controller` default find the local
 * mesh of `ward up`: its `mesh.json` in the state directory names the local API (and holds its
 * bearer token) and the controller.
 */
import { type MeshState, runningMesh, stateDirOf } from '../local/index.js';
import { UsageError } from './io.js';

const TIMEOUT_MS = 15_000;

/** The running local mesh, or a usage error saying none runs. */
export async function requireLocalMesh(stateDirFlag: string | undefined): Promise<MeshState> {
  const mesh = await runningMesh(stateDirOf(stateDirFlag));
  if (mesh === undefined) throw new UsageError('no local mesh is running (start one with `ward up DIR`)');
  return mesh;
}

/** The controller URL of the running local mesh (the `--controller` default), if one runs. */
export async function localController(): Promise<string | undefined> {
  return (await runningMesh(stateDirOf(undefined)))?.controller;
}

/** Calls the local API; errors become usage errors (exit 2) with the API's message. */
export async function callLocalApi(mesh: MeshState, path: string, init: { method?: string; signal?: AbortSignal } = {}): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(new URL(path, mesh.api), {
      method: init.method ?? 'GET',
      headers: { authorization: `Bearer ${mesh.token}` },
      signal: init.signal ?? AbortSignal.timeout(TIMEOUT_MS),
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new UsageError(`cannot reach the local mesh (pid ${mesh.pid}) at ${mesh.api}: ${cause?.code ?? cause?.message ?? (e as Error).message}`);
  }
  if (!res.ok) {
    let message = `the local mesh answered ${res.status}`;
    try {
      const body = (await res.json()) as { error?: { message?: string } };
      if (body.error?.message !== undefined) message = body.error.message;
    } catch {
      // not JSON: keep the status
    }
    throw new UsageError(message);
  }
  return res;
}

/** Parses `NS/POD` (or `POD` with `namespace`, default `default`). */
export function parsePodRef(text: string, namespace: string | undefined): { namespace: string; name: string } {
  const parts = text.replace(/^(po|pod|pods)\//, '').split('/');
  if (parts.length === 1 && parts[0] !== '') return { namespace: namespace ?? 'default', name: parts[0] as string };
  if (parts.length === 2 && parts[0] !== '' && parts[1] !== '') {
    if (namespace !== undefined && namespace !== parts[0]) throw new UsageError(`pod "${text}" is in namespace ${parts[0]}, not ${namespace}`);
    return { namespace: parts[0] as string, name: parts[1] as string };
  }
  throw new UsageError(`"${text}" is not NAMESPACE/POD`);
}
