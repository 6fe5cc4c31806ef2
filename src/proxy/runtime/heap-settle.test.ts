import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { getHeapStatistics } from 'node:v8';
import { waitFor } from '../testing/identity.js';
import { collectAllGarbage, settleHeapWhenQuiet } from './heap-settle.js';

describe('heap settle', () => {
  it('collects once, after enough quiet ticks in a row, and not while the process is busy', async () => {
    let cpu = 0;
    let collected = 0;
    let done = 0;
    // Busy (50 % of each 20 ms tick) until told otherwise.
    let busy = true;
    const ticker = setInterval(() => {
      cpu += busy ? 10_000 : 50;
    }, 20);
    const settle = settleHeapWhenQuiet({
      tickMs: 20,
      quietTicks: 3,
      cpuMicros: () => cpu,
      collect: () => {
        collected++;
        return Promise.resolve();
      },
      done: () => done++,
    });
    await sleep(200);
    assert.equal(collected, 0, 'never while busy');
    busy = false;
    await sleep(300);
    clearInterval(ticker);
    settle.stop();
    assert.equal(collected, 1, 'once, when quiet');
    assert.equal(done, 1);
  });

  it('settles again, once quiet, when memory regrew past 20 % of the first footprint, trimming after each', async () => {
    let rss = 100;
    const events: string[] = [];
    const settle = settleHeapWhenQuiet({
      tickMs: 10,
      quietTicks: 2,
      cpuMicros: () => 0,
      rssBytes: () => rss,
      minRetryMs: 30,
      maxRetryMs: 30,
      trimDelayMs: 5,
      collect: () => {
        events.push(`collect at ${rss}`);
        return Promise.resolve();
      },
      trim: () => {
        events.push('trim');
        rss = 100;
      },
    });
    try {
      await waitFor(() => events.length === 2, 'the first settle', 5000);
      // Growth under 20 %: nothing.
      rss = 115;
      await sleep(150);
      assert.deepEqual(events, ['collect at 100', 'trim']);
      // A burst came and went: its memory is back only after the next settle.
      rss = 160;
      await waitFor(() => events.length === 4, 'the settle after the burst', 5000);
      assert.deepEqual(events, ['collect at 100', 'trim', 'collect at 160', 'trim']);
    } finally {
      settle.stop();
    }
  });

  it('spaces settles out while memory stays up, and never settles a busy process', async () => {
    let cpu = 0;
    let busy = false;
    let rss = 100;
    const at: number[] = [];
    const settle = settleHeapWhenQuiet({
      tickMs: 10,
      quietTicks: 1,
      cpuMicros: () => {
        if (busy) cpu += 1_000_000;
        return cpu;
      },
      rssBytes: () => rss,
      minRetryMs: 40,
      maxRetryMs: 160,
      collect: () => {
        at.push(Date.now());
        return Promise.resolve();
      },
      // The footprint is 100; then connections are held: every settle leaves 500.
      done: () => {
        rss = 500;
      },
    });
    try {
      await waitFor(() => at.length === 5, 'five settles', 10_000);
      const gaps = at.slice(2).map((t, i) => t - (at[i + 1] as number));
      // 80, 160, 160 ms at least (the first retry after the footprint was set is 40 ms).
      assert.ok((gaps[0] as number) >= 75 && (gaps[1] as number) >= 155 && (gaps[2] as number) >= 155, `gaps ${gaps.join(', ')}`);
      busy = true;
      const settled = at.length;
      await sleep(400);
      assert.equal(at.length, settled, 'a busy process is left alone');
    } finally {
      settle.stop();
    }
  });

  it('stop() before the quiet cancels it', async () => {
    let collected = 0;
    const settle = settleHeapWhenQuiet({
      tickMs: 20,
      quietTicks: 3,
      cpuMicros: () => 0,
      collect: () => {
        collected++;
        return Promise.resolve();
      },
    });
    settle.stop();
    await sleep(150);
    assert.equal(collected, 0);
  });

  it('reports a collection that throws at once, never out of its timer', async () => {
    let reported: unknown;
    settleHeapWhenQuiet({
      tickMs: 20,
      quietTicks: 1,
      cpuMicros: () => 0,
      collect: () => {
        throw new Error('no inspector');
      },
      done: (err) => {
        reported = err;
      },
    });
    await sleep(100);
    assert.match(String(reported), /no inspector/);
  });

  it('gives the garbage of a start back: the heap shrinks, and the process goes on', async () => {
    let garbage: object[] | null = [];
    for (let i = 0; i < 300_000; i++) garbage.push({ i, s: `x${i}`, a: [i] });
    const grown = getHeapStatistics().total_heap_size;
    garbage = null;
    await collectAllGarbage();
    const after = getHeapStatistics().total_heap_size;
    assert.ok(after < grown - 10 * 1024 * 1024, `heap ${grown} -> ${after}`);
    // Twice, and timers still run after it (the session is let go outside its callback).
    await collectAllGarbage();
    await sleep(10);
  });

  it('with --expose-gc, gives the garbage back by V8 gc and never loads the inspector', () => {
    const child = `
      import { getHeapStatistics } from 'node:v8';
      const { collectAllGarbage } = await import(${JSON.stringify(new URL('./heap-settle.ts', import.meta.url).href)});
      let garbage = [];
      for (let i = 0; i < 300_000; i++) garbage.push({ i, s: 'x' + i, a: [i] });
      const grown = getHeapStatistics().total_heap_size;
      garbage = null;
      await collectAllGarbage();
      const after = getHeapStatistics().total_heap_size;
      console.log(JSON.stringify({ grown, after, inspector: process.moduleLoadList.includes('NativeModule inspector') }));
    `;
    const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', '--input-type=module', '--eval', child], {
      encoding: 'utf8',
      env: { ...process.env, NODE_TEST_CONTEXT: undefined },
      timeout: 60_000,
    });
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '') as { grown: number; after: number; inspector: boolean };
    assert.ok(out.after < out.grown - 10 * 1024 * 1024, `heap ${out.grown} -> ${out.after}`);
    assert.equal(out.inspector, false);
  });
});
