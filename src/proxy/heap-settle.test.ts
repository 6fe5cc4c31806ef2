import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { getHeapStatistics } from 'node:v8';
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
});
