import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { processMetricsRegistry } from './process.js';

describe('process metrics', () => {
  it('exports the process families', async () => {
    const text = await processMetricsRegistry().metrics();
    assert.match(text, /^# TYPE process_cpu_seconds_total counter$/m);
    const rss = Number(/^process_resident_memory_bytes (\d+)$/m.exec(text)?.[1]);
    assert.ok(rss > 10e6 && rss < 4e9, String(rss));
    const start = Number(/^process_start_time_seconds (\d+)$/m.exec(text)?.[1]);
    assert.ok(Math.abs(start - (Date.now() / 1000 - process.uptime())) < 2, String(start));
    if (process.platform === 'linux') {
      assert.match(text, /^process_open_fds \d+$/m);
      assert.match(text, /^process_max_fds \d+$/m);
      assert.match(text, /^process_threads \d+$/m);
      assert.match(text, /^process_virtual_memory_bytes \d+$/m);
    }
  });
});
