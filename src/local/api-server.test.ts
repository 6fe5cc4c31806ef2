import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get, type IncomingMessage, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type LocalApiServer, startLocalApi, tailFile } from './api-server.js';
import { LogFile } from './supervisor.js';

const dir = mkdtempSync(join(tmpdir(), 'ward-api-'));
let api: LocalApiServer;
let base: string;
let log = new LogFile(join(dir, 'app.log'), true);
const bigLog = new LogFile(join(dir, 'big.log'), true);
const restarted: string[] = [];
const TOKEN = 'test-token-0123456789';
const AUTH = { authorization: `Bearer ${TOKEN}` };
/** fetch with the API's token. */
const call = (url: string, init: RequestInit = {}) => fetch(url, { ...init, headers: { ...AUTH, ...(init.headers as Record<string, string>) } });

before(async () => {
  api = await startLocalApi(
    {
      status: () => ({ pods: [{ name: 'web-0' }], denials: [] }),
      logs: (ns, pod, container) => {
        if (ns !== 'demo' || pod !== 'web-0') return { notFound: `no pod ${ns}/${pod} in this mesh` };
        if (container === 'app') return { file: log };
        if (container === 'big') return { file: bigLog };
        if (container === 'b') return { file: log, filter: (l) => (l.startsWith('[b] ') ? l.slice(4) : undefined) };
        return { notFound: `no container ${container}` };
      },
      restart: (ns, pod) => {
        if (pod !== 'web-0') return Promise.resolve({ notFound: `no pod ${ns}/${pod} in this mesh` });
        restarted.push(`${ns}/${pod}`);
        return Promise.resolve(true as const);
      },
    },
    { token: TOKEN },
  );
  base = `http://127.0.0.1:${api.port}/api/v1/local`;
  for (let i = 1; i <= 5; i++) log.write(i % 2 === 0 ? `[b] line ${i}` : `line ${i}`);
  await new Promise((r) => setTimeout(r, 50));
});

after(async () => {
  await api.close();
  await log.close();
  await bigLog.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Reads a streamed response body as text: up to some text, or to its end. */
function bodyReader(res: Response): { readUntil(want: string): Promise<void>; readToEnd(): Promise<void>; text(): string } {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = '';
  return {
    async readUntil(want) {
      while (!text.includes(want)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`stream ended before ${want}: ${text}`);
        text += decoder.decode(value, { stream: true });
      }
    },
    async readToEnd() {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        text += decoder.decode(value, { stream: true });
      }
    },
    text: () => text,
  };
}

describe('the local API', () => {
  it('serves the status', async () => {
    const res = await call(`${base}/status`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { pods: [{ name: 'web-0' }], denials: [] });
  });

  it('serves logs, the last N lines, and one container of several', async () => {
    assert.equal(await (await call(`${base}/logs/demo/web-0`)).text(), 'line 1\n[b] line 2\nline 3\n[b] line 4\nline 5\n');
    assert.equal(await (await call(`${base}/logs/demo/web-0?tail=2`)).text(), '[b] line 4\nline 5\n');
    assert.equal(await (await call(`${base}/logs/demo/web-0?container=b`)).text(), 'line 2\nline 4\n');
  });

  it('follows a log until the client goes', async () => {
    const abort = new AbortController();
    const res = await call(`${base}/logs/demo/web-0?tail=1&follow=1`, { signal: abort.signal });
    const body = bodyReader(res);
    await body.readUntil('line 5\n');
    log.write('line 6');
    await body.readUntil('line 6\n');
    assert.equal(body.text(), 'line 5\nline 6\n');
    abort.abort();
  });

  it('a follower goes on with the log of the recreated pod, and ends when the pod is gone', async () => {
    const res = await call(`${base}/logs/demo/web-0?tail=0&follow=1`);
    const body = bodyReader(res);
    await new Promise((r) => setTimeout(r, 50));
    log.write('old pod');
    await body.readUntil('old pod\n');
    // As the runtime recreates a pod: the old file closes, the new one (same path, appended) takes the followers.
    const old = log;
    await old.close();
    log = new LogFile(old.path, false);
    old.handOver(log, 'pod recreated');
    log.write('new pod');
    await body.readUntil('new pod\n');
    log.endSubscribers('pod removed from the manifests');
    await body.readToEnd();
    assert.equal(body.text(), 'old pod\n--- pod recreated ---\nnew pod\n--- pod removed from the manifests ---\n');
  });

  it('a follower that does not keep up loses lines, and is told how many', async () => {
    const total = 2000;
    const line = (i: number) => `${i} ${'x'.repeat(16_000)}`;
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      get(`${base}/logs/demo/web-0?container=big&tail=0&follow=1`, { headers: AUTH }, resolve).once('error', reject);
    });
    res.pause();
    await new Promise((r) => setTimeout(r, 50));
    // 32 MB the client does not read: more than the socket buffers hold.
    for (let i = 0; i < total; i++) bigLog.write(line(i));
    let text = '';
    res.setEncoding('utf8');
    res.on('data', (c: string) => {
      text += c;
    });
    res.resume();
    const deadline = Date.now() + 10_000;
    while (!/--- \d+ lines dropped ---\n/.test(text)) {
      if (Date.now() > deadline) throw new Error(`no drop marker in ${text.length} chars`);
      await new Promise((r) => setTimeout(r, 20));
    }
    bigLog.write('after');
    while (!text.endsWith('after\n')) {
      if (Date.now() > deadline) throw new Error('the line after the drop did not arrive');
      await new Promise((r) => setTimeout(r, 20));
    }
    res.destroy();
    const lines = text.split('\n').filter((l) => l !== '');
    const dropped = Number(/--- (\d+) lines dropped ---/.exec(text)?.[1]);
    const received = lines.filter((l) => /^\d+ x/.test(l));
    assert.ok(dropped > 0, 'some lines were dropped');
    assert.equal(received.length + dropped, total, 'every line is either received or counted as dropped');
    assert.ok(
      received.every((l) => l === line(Number(l.split(' ')[0]))),
      'received lines are whole',
    );
  });

  it('refuses requests without the token (401), from web pages or for another Host (403)', async () => {
    const raw = (path: string, headers: Record<string, string>, method = 'GET') =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: api.port, path: `/api/v1/local${path}`, method, headers }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            body += c;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.once('error', reject);
        req.end();
      });
    const none = await fetch(`${base}/status`);
    assert.deepEqual([none.status, ((await none.json()) as { error: { code: string } }).error.code], [401, 'UNAUTHENTICATED']);
    assert.equal((await fetch(`${base}/status`, { headers: { authorization: 'Bearer wrong' } })).status, 401);
    assert.equal((await fetch(`${base}/status`, { headers: { authorization: `Basic ${TOKEN}` } })).status, 401);
    assert.equal((await raw('/status', AUTH)).status, 200, 'the token and the right Host');
    // A page of a browser: a cross-site POST (CSRF), or a rebound DNS name.
    const before = restarted.length;
    const csrf = await raw('/restart/demo/web-0', { ...AUTH, origin: 'http://evil.example' }, 'POST');
    assert.equal(csrf.status, 403);
    assert.equal(restarted.length, before, 'nothing restarted');
    assert.equal((await raw('/status', { ...AUTH, origin: 'null' })).status, 403);
    assert.equal((await raw('/status', { ...AUTH, host: `evil.example:${api.port}` })).status, 403);
    assert.equal((await raw('/status', { ...AUTH, host: `localhost:${api.port}` })).status, 403);
    assert.equal((await raw('/logs/demo/web-0', { host: `evil.example:${api.port}` })).status, 403);
  });

  it('restarts pods, and answers unknown pods, containers and routes with JSON errors', async () => {
    const ok = await call(`${base}/restart/demo/web-0`, { method: 'POST' });
    assert.deepEqual([ok.status, await ok.json()], [200, { restarted: 'demo/web-0' }]);
    assert.deepEqual(restarted, ['demo/web-0']);
    const missing = await call(`${base}/restart/demo/nope`, { method: 'POST' });
    assert.deepEqual([missing.status, await missing.json()], [404, { error: { code: 'NOT_FOUND', message: 'no pod demo/nope in this mesh' } }]);
    assert.equal((await call(`${base}/restart/demo/web-0`)).status, 405);
    assert.equal((await call(`${base}/logs/demo/web-0?container=zz`)).status, 404);
    assert.equal((await call(`${base}/logs/demo/web-0?tail=x`)).status, 400);
    assert.equal((await call(`http://127.0.0.1:${api.port}/nope`)).status, 404);
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
