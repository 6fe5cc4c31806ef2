import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildAddonIfMissing } from '../testing/native.js';
import { collectAllGarbage, TRIM_DELAY_MS } from './heap-settle.js';
import { loadMallocTrim, MALLOC_TRIM_ADDON_PATH } from './malloc-trim.js';

const glibc = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header?.glibcVersionRuntime !== undefined;

describe('malloc-trim', { skip: !glibc && 'not glibc: the proxy does without' }, () => {
  it('gives back C heap memory freed after a burst, which a V8 collection alone leaves resident', async () => {
    const built = buildAddonIfMissing(MALLOC_TRIM_ADDON_PATH);
    assert.equal(built, undefined, built);
    const trim = loadMallocTrim();
    assert.ok(trim !== undefined, 'the addon loads');
    const base = process.memoryUsage.rss();
    // 100 MB in 4 KiB buffers: under glibc's mmap threshold, so in its heap, as sockets' and TLS sessions' memory is.
    let burst: Buffer[] | null = Array.from({ length: 25_000 }, (_, i) => Buffer.alloc(4096, i & 0xff));
    // Every other one kept: the freed memory is not at the top of the heap, where glibc gives back by itself.
    const kept = burst.filter((_, i) => i % 256 === 0);
    const grown = process.memoryUsage.rss();
    burst = null;
    await collectAllGarbage();
    // V8 frees the collected buffers' memory on a background thread (runtime/heap-settle waits as long).
    await sleep(TRIM_DELAY_MS);
    const collected = process.memoryUsage.rss();
    assert.equal(trim(), true, 'memory was given back');
    const trimmed = process.memoryUsage.rss();
    const mb = (n: number) => Math.round(n / 1048576);
    assert.ok(grown - base > 80 * 1048576, `the burst grew RSS: ${mb(base)} -> ${mb(grown)} MB`);
    assert.ok(collected - trimmed > 50 * 1048576, `trim gave back: ${mb(collected)} -> ${mb(trimmed)} MB (before the burst ${mb(base)} MB)`);
    assert.equal(kept.length, 98);
  });
});
