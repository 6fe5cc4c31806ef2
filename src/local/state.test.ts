import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { startLocalApi } from './api-server.js';
import { isProcessAlive, killSurvivors, MESH_MARKER_ENV, type MeshState, meshAnswers, readMeshState, runningMesh, writeMeshState } from './state.js';

const dir = mkdtempSync(join(tmpdir(), 'ward-state-'));
const children: ChildProcess[] = [];
after(() => {
  for (const c of children) if (c.pid !== undefined && isProcessAlive(c.pid)) process.kill(-c.pid, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

async function until(what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A detached process (its own group) sleeping; with `env` added to its environment. */
function sleeper(env: Record<string, string>): number {
  const c = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { detached: true, stdio: 'ignore', env: { PATH: process.env.PATH ?? '', ...env } });
  children.push(c);
  return c.pid as number;
}

describe('killSurvivors', { skip: process.platform !== 'linux' && 'needs /proc' }, () => {
  it('kills the recorded process groups marked as this state directory, and nothing else', async () => {
    const state = join(dir, 'survivors');
    const other = join(dir, 'other');
    const ours = sleeper({ [MESH_MARKER_ENV]: state });
    const unmarked = sleeper({});
    const otherMesh = sleeper({ [MESH_MARKER_ENV]: other });
    mkdirSync(join(state, 'pods', 'demo', 'web-0'), { recursive: true });
    mkdirSync(join(state, 'pods', 'demo', 'db-0'), { recursive: true });
    writeFileSync(join(state, 'pods', 'demo', 'web-0', 'pgids'), `${ours}\n${unmarked}\n`);
    writeFileSync(join(state, 'pods', 'demo', 'db-0', 'pgids'), `${otherMesh}\n${process.pid}\n999999999\n`);
    await until('the sleepers run', () => [ours, unmarked, otherMesh].every((p) => readFileSync(`/proc/${p}/environ`, 'utf8').includes('PATH=')));
    assert.deepEqual(killSurvivors(state), [ours]);
    await until('the survivor gone', () => !isProcessAlive(ours) || readFileSync(`/proc/${ours}/stat`, 'utf8').includes(') Z'));
    assert.ok(isProcessAlive(unmarked), 'a process without the mark is left alone');
    assert.ok(isProcessAlive(otherMesh), "another state directory's process is left alone");
    assert.ok(isProcessAlive(process.pid));
    assert.throws(() => statSync(join(state, 'pods', 'demo', 'web-0', 'pgids')), /ENOENT/, 'the records are used once');
    assert.deepEqual(killSurvivors(state), []);
    assert.deepEqual(killSurvivors(join(dir, 'no-such-dir')), []);
  });
});

describe('meshAnswers and runningMesh', () => {
  it('count a mesh as running only when its pid lives and its API answers with the token', async () => {
    const token = 'a'.repeat(43);
    const api = await startLocalApi(
      { status: () => ({ pods: [] }), logs: () => ({ notFound: 'none' }), restart: () => Promise.resolve({ notFound: 'none' }) },
      { token },
    );
    const state = join(dir, 'mesh');
    mkdirSync(state);
    const mesh: MeshState = {
      pid: process.pid,
      dir: '/m',
      stateDir: state,
      controller: 'http://127.0.0.1:1',
      api: `http://127.0.0.1:${api.port}`,
      token,
      started: '',
    };
    try {
      writeMeshState(state, mesh);
      assert.equal(statSync(join(state, 'mesh.json')).mode & 0o777, 0o600);
      assert.deepEqual(readMeshState(state), mesh);
      assert.equal(await meshAnswers(mesh), true);
      assert.deepEqual(await runningMesh(state), mesh);
      assert.equal(await meshAnswers({ ...mesh, token: 'b'.repeat(43) }), false, 'another token');
      assert.equal(await meshAnswers({ ...mesh, token: '' }), false, 'an old mesh.json without a token');
    } finally {
      await api.close();
    }
    // The pid lives (a reused one, as far as mesh.json can tell), but no API answers: not running.
    assert.equal(await meshAnswers(mesh), false, 'the API is gone although the pid lives');
    assert.equal(await runningMesh(state), undefined);
  });
});
