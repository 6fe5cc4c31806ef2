import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { isProcessAlive } from './state.js';
import { type ExitInfo, LogFile, Supervised, type SupervisedOptions } from './supervisor.js';

const dir = mkdtempSync(join(tmpdir(), 'ward-supervisor-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const NODE = process.execPath;
const env = { PATH: process.env.PATH ?? '' };

/** Waits until `check` holds (bounded). */
async function until(what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function supervise(name: string, script: string, extra: Partial<SupervisedOptions> = {}) {
  const log = new LogFile(join(dir, `${name}.log`), true);
  const exits: (ExitInfo & { at: number })[] = [];
  const starts: number[] = [];
  const lines: string[] = [];
  const proc = new Supervised({
    argv: [NODE, '-e', script],
    env,
    cwd: dir,
    log,
    backoff: { minMs: 100, maxMs: 400 },
    onStart: () => starts.push(Date.now()),
    onExit: (info) => exits.push({ ...info, at: Date.now() }),
    onLine: (l) => lines.push(l),
    ...extra,
  });
  return { proc, log, exits, starts, lines };
}

describe('Supervised', () => {
  it('restarts a crashing process at once, then with doubling back-off (Always), logging every line', async () => {
    const s = supervise('crash', "console.log('out line'); console.error('err line'); process.exit(3)");
    s.proc.start();
    await until('five runs', () => s.starts.length >= 5);
    await s.proc.stop(1000);
    // The kubelet's: the first restart immediate, then 10 s, 20 s, … (here 100, 200, 400 ms).
    assert.deepEqual(
      s.exits.slice(0, 4).map((e) => [e.code, e.restartInMs]),
      [
        [3, 0],
        [3, 100],
        [3, 200],
        [3, 400],
      ],
    );
    for (let i = 2; i < 5; i++) {
      const gap = (s.starts[i] as number) - (s.exits[i - 1] as { at: number }).at;
      assert.ok(gap >= 90, `restart ${i} waited ${gap} ms`);
    }
    assert.equal(s.proc.restarts, 4);
    assert.deepEqual(s.exits[0]?.lastLines.slice().sort(), ['err line', 'out line']);
    await s.log.close();
    const text = readFileSync(s.log.path, 'utf8');
    assert.ok(text.split('\n').filter((l) => l === 'out line').length >= 3, text);
    assert.equal(s.proc.state, 'stopped');
  });

  it('OnFailure leaves a successful run alone; Never restarts nothing', async () => {
    const ok = supervise('ok', 'process.exit(0)', { restartPolicy: 'OnFailure' });
    ok.proc.start();
    await until('exit', () => ok.exits.length === 1);
    assert.equal(ok.exits[0]?.restartInMs, undefined);
    assert.equal(ok.proc.state, 'stopped');
    const never = supervise('never', 'process.exit(1)', { restartPolicy: 'Never' });
    never.proc.start();
    await until('exit', () => never.exits.length === 1);
    assert.deepEqual([never.exits[0]?.code, never.exits[0]?.restartInMs], [1, undefined]);
  });

  it('stop: SIGTERM, then SIGKILL for a process that ignores it, and its whole process group', async () => {
    const script = [
      "const { spawn } = require('node:child_process');",
      "const g = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });",
      // The handler goes in before the line the test waits for: the test sends SIGTERM as soon as it reads it.
      "process.on('SIGTERM', () => console.log('ignoring SIGTERM'));",
      "console.log('grandchild ' + g.pid);",
      'setInterval(() => {}, 1000);',
    ].join('\n');
    const s = supervise('stubborn', script);
    s.proc.start();
    await until('the grandchild', () => s.lines.some((l) => l.startsWith('grandchild ')));
    const grandchild = Number((s.lines.find((l) => l.startsWith('grandchild ')) as string).split(' ')[1]);
    const pid = s.proc.pid as number;
    assert.ok(isProcessAlive(grandchild));
    const t0 = Date.now();
    await s.proc.stop(300);
    const took = Date.now() - t0;
    assert.ok(took >= 250 && took < 3000, `stop took ${took} ms`);
    await until('both gone', () => !isProcessAlive(pid) && !isProcessAlive(grandchild), 2000);
    assert.ok(s.lines.includes('ignoring SIGTERM'));
    assert.equal(s.exits.length, 0, 'a stop is not reported as an exit');
  });

  it('kill (a failed liveness probe) ends the run and the restart policy applies', async () => {
    const s = supervise('live', "console.log('up'); setInterval(() => {}, 1000)");
    s.proc.start();
    await until('running', () => s.lines.includes('up'));
    await s.proc.kill(1000);
    await until('restarted', () => s.starts.length === 2);
    assert.equal(s.exits[0]?.killed, true);
    assert.equal(s.exits[0]?.signal, 'SIGTERM');
    assert.equal(s.proc.restarts, 1);
    await s.proc.stop(1000);
  });

  it('a run the runtime killed (liveness) is restarted under OnFailure even when it exits 0, not under Never', async () => {
    const script = "process.on('SIGTERM', () => process.exit(0)); console.log('up'); setInterval(() => {}, 1000)";
    const onFailure = supervise('live-onfailure', script, { restartPolicy: 'OnFailure' });
    onFailure.proc.start();
    await until('running', () => onFailure.lines.includes('up'));
    await onFailure.proc.kill(1000);
    await until('restarted', () => onFailure.starts.length === 2);
    assert.deepEqual([onFailure.exits[0]?.code, onFailure.exits[0]?.killed, onFailure.exits[0]?.restartInMs], [0, true, 0]);
    await onFailure.proc.stop(1000);
    const never = supervise('live-never', script, { restartPolicy: 'Never' });
    never.proc.start();
    await until('running', () => never.lines.includes('up'));
    await never.proc.kill(1000);
    await until('exit', () => never.exits.length === 1);
    assert.equal(never.exits[0]?.restartInMs, undefined);
    assert.equal(never.proc.state, 'stopped');
  });

  it('a command that does not exist is reported and retried', async () => {
    const log = new LogFile(join(dir, 'missing.log'), true);
    const exits: ExitInfo[] = [];
    const proc = new Supervised({ argv: ['ward-no-such-command'], env, cwd: dir, log, backoff: { minMs: 50, maxMs: 50 }, onExit: (i) => exits.push(i) });
    proc.start();
    await until('two failures', () => exits.length >= 2);
    await proc.stop(100);
    assert.match(exits[0]?.error ?? '', /ENOENT/);
    assert.deepEqual([exits[0]?.restartInMs, exits[1]?.restartInMs], [0, 50]);
    assert.match(exits[0]?.lastLines.join('\n') ?? '', /cannot start ward-no-such-command/);
  });

  it('killNow ends the group at once', async () => {
    const s = supervise('now', "process.on('SIGTERM', () => {}); console.log('up'); setInterval(() => {}, 1000)");
    s.proc.start();
    await until('running', () => s.lines.includes('up'));
    const pid = s.proc.pid as number;
    s.proc.killNow();
    await until('gone', () => !isProcessAlive(pid), 2000);
  });
});
