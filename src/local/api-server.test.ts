import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type LocalApiServer, startLocalApi, tailFile } from './api-server.js';
import { LogFile } from './supervisor.js';

const dir = mkdtempSync(join(tmpdir(), 'ward-api-'));
let api: LocalApiServer;
let base: string;
const log = new LogFile(join(dir, 'app.log'), true);
const restarted: string[] = [];

before(async () => {
  api = await startLocalApi({
    status: () => ({ pods: [{ name: 'web-0' }], denials: [] }),
    logs: (ns, pod, container) => {
      if (ns !== 'demo' || pod !== 'web-0') return { notFound: `no pod ${ns}/${pod} in this mesh` };
      if (container === 'app') return { file: log };
      if (container === 'b') return { file: log, filter: (l) => (l.startsWith('[b] ') ? l.slice(4) : undefined) };
      return { notFound: `no container ${container}` };
    },
    restart: (ns, pod) => {
      if (pod !== 'web-0') return Promise.resolve({ notFound: `no pod ${ns}/${pod} in this mesh` });
      restarted.push(`${ns}/${pod}`);
      return Promise.resolve(true as const);
    },
  });
  base = `http://127.0.0.1:${api.port}/api/v1/local`;
  for (let i = 1; i <= 5; i++) log.write(i % 2 === 0 ? `[b] line ${i}` : `line ${i}`);
  await new Promise((r) => setTimeout(r, 50));
});

after(async () => {
  await api.close();
  await log.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the local API', () => {
  it('serves the status', async () => {
    const res = await fetch(`${base}/status`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { pods: [{ name: 'web-0' }], denials: [] });
  });

  it('serves logs, the last N lines, and one container of several', async () => {
    assert.equal(await (await fetch(`${base}/logs/demo/web-0`)).text(), 'line 1\n[b] line 2\nline 3\n[b] line 4\nline 5\n');
    assert.equal(await (await fetch(`${base}/logs/demo/web-0?tail=2`)).text(), '[b] line 4\nline 5\n');
    assert.equal(await (await fetch(`${base}/logs/demo/web-0?container=b`)).text(), 'line 2\nline 4\n');
  });

  it('follows a log until the client goes', async () => {
    const abort = new AbortController();
    const res = await fetch(`${base}/logs/demo/web-0?tail=1&follow=1`, { signal: abort.signal });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let text = '';
    const decoder = new TextDecoder();
    const readUntil = async (want: string) => {
      while (!text.includes(want)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`stream ended before ${want}: ${text}`);
        text += decoder.decode(value, { stream: true });
      }
    };
    await readUntil('line 5\n');
    log.write('line 6');
    await readUntil('line 6\n');
    assert.equal(text, 'line 5\nline 6\n');
    abort.abort();
  });

  it('restarts pods, and answers unknown pods, containers and routes with JSON errors', async () => {
    const ok = await fetch(`${base}/restart/demo/web-0`, { method: 'POST' });
    assert.deepEqual([ok.status, await ok.json()], [200, { restarted: 'demo/web-0' }]);
    assert.deepEqual(restarted, ['demo/web-0']);
    const missing = await fetch(`${base}/restart/demo/nope`, { method: 'POST' });
    assert.deepEqual([missing.status, await missing.json()], [404, { error: { code: 'NOT_FOUND', message: 'no pod demo/nope in this mesh' } }]);
    assert.equal((await fetch(`${base}/restart/demo/web-0`)).status, 405);
    assert.equal((await fetch(`${base}/logs/demo/web-0?container=zz`)).status, 404);
    assert.equal((await fetch(`${base}/logs/demo/web-0?tail=x`)).status, 400);
    assert.equal((await fetch(`http://127.0.0.1:${api.port}/nope`)).status, 404);
  });
});

describe('tailFile', () => {
  it('returns the last lines of a file, or nothing for a missing one', async () => {
    const path = join(dir, 'tail.log');
    writeFileSync(path, 'a\nb\nc\n');
    assert.deepEqual(await tailFile(path, 2), ['b', 'c']);
    assert.deepEqual(await tailFile(path, undefined), ['a', 'b', 'c']);
    assert.deepEqual(await tailFile(path, 0), []);
    assert.deepEqual(await tailFile(join(dir, 'missing.log'), 3), []);
  });
});
