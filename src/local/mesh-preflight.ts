/**
 * What `ward up` settles before anything of the mesh runs: the state directory is ours (no other
 * mesh runs from it, pods an earlier run left behind are killed), the loopback addresses work, and
 * the identity directory exists.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { connect as netConnect, createServer as netCreateServer } from 'node:net';
import { join } from 'node:path';
import { IDENTITY_FILES, initIdentity } from '../controller/index.js';
import { errorMessage, MeshError } from '../shared/index.js';
import { NODE_ADDRESS } from './addresses.js';
import type { LocalEvent } from './mesh-types.js';
import { killSurvivors, meshAnswers, readMeshState } from './state.js';

/** The identity directory of a mesh, ready for the controller and the pods. */
export interface MeshIdentity {
  readonly dir: string;
  /** The ServiceAccount token signing key (pods' tokens are minted with it). */
  readonly tokenKeyPem: string;
}

/**
 * Makes `stateDir` this mesh's (private, with no survivors of an earlier run), then checks the
 * loopback addresses from `firstPodAddress`. Throws `MeshError` `ERR_LOCAL_RUNNING`, `ERR_LOCAL_ADDRESS`.
 */
export async function claimStateDir(stateDir: string, firstPodAddress: string, emit: (e: LocalEvent) => void): Promise<void> {
  const running = readMeshState(stateDir);
  if (running !== undefined && running.pid !== process.pid && (await meshAnswers(running))) {
    throw new MeshError(
      'ERR_LOCAL_RUNNING',
      `a local mesh is already running from ${stateDir} (pid ${running.pid}, ${running.dir})\n  hint: stop it first (Ctrl-C in its terminal), or give another --state-dir`,
    );
  }
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  try {
    // It holds the identity keys and, in mesh.json, the local API's token.
    chmodSync(stateDir, 0o700);
  } catch {
    // not ours to change: mesh.json and the keys are private files all the same
  }
  // A ward up that could not clean up (SIGKILL) may have left pods running.
  const survivors = killSurvivors(stateDir);
  if (survivors.length > 0)
    emit({
      kind: 'report',
      text: `killed ${survivors.length} process groups left running by an earlier ward up from ${stateDir} (${survivors.join(', ')})`,
    });
  await checkLoopback(firstPodAddress);
}

/** Creates the identity directory of the state dir on first use (reused after) and reads its token key. Throws `MeshError` `ERR_IDENTITY`. */
export async function prepareIdentity(stateDir: string, trustDomain: string, emit: (e: LocalEvent) => void): Promise<MeshIdentity> {
  const dir = join(stateDir, 'identity');
  const created = await ensureIdentity(dir, trustDomain);
  emit({ kind: 'identity', dir, created });
  return { dir, tokenKeyPem: readFileSync(join(dir, IDENTITY_FILES.tokenKey), 'utf8') };
}

/** Checks that loopback addresses beyond 127.0.0.1 work (they need aliases on macOS). */
async function checkLoopback(podIp: string): Promise<void> {
  const server = netCreateServer((s) => s.destroy());
  try {
    await new Promise<void>((ok, fail) => {
      server.once('error', fail);
      server.listen(0, podIp, () => ok());
    });
    const port = (server.address() as { port: number }).port;
    await new Promise<void>((ok, fail) => {
      const s = netConnect({ host: podIp, port, localAddress: NODE_ADDRESS });
      s.once('connect', () => {
        s.destroy();
        ok();
      });
      s.once('error', fail);
    });
  } catch (e) {
    throw new MeshError(
      'ERR_LOCAL_ADDRESS',
      `cannot use the loopback addresses ${podIp} and ${NODE_ADDRESS}: ${errorMessage(e)}\n  hint: local mode gives every pod its own 127.x address; on macOS add them first, e.g. \`sudo ifconfig lo0 alias ${podIp} up\` and \`sudo ifconfig lo0 alias ${NODE_ADDRESS} up\``,
      { cause: e },
    );
  } finally {
    server.close();
  }
}

/** The identity directory of the state dir: created with a fresh trust anchor on first use, reused after. */
async function ensureIdentity(dir: string, trustDomain: string): Promise<boolean> {
  const files = [IDENTITY_FILES.anchorCert, IDENTITY_FILES.issuerCert, IDENTITY_FILES.issuerKey, IDENTITY_FILES.tokenKey];
  if (files.every((f) => existsSync(join(dir, f)))) return false;
  const r = await initIdentity({ outDir: dir, trustDomain });
  if (!r.ok) {
    throw new MeshError(
      'ERR_IDENTITY',
      `cannot create the identity directory ${dir}:\n${r.diagnostics.map((d) => `  ${d.code} ${d.message}`).join('\n')}\n  hint: remove ${dir} to start over with a new trust anchor`,
    );
  }
  return true;
}
