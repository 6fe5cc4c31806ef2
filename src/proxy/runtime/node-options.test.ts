import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { PROXY_NODE_OPTIONS } from './node-options.js';

const MB = 1024 * 1024;

/** V8's heap limit, in MB, of a node started with `options`: the old generation's plus three semi-spaces. */
function heapLimitMb(options: readonly string[]): number {
  const script = "process.stdout.write(String(require('node:v8').getHeapStatistics().heap_size_limit))";
  return Number(execFileSync(process.execPath, [...options, '-e', script], { encoding: 'utf8', timeout: 20_000 })) / MB;
}

test('node accepts the proxy options and sizes the heap by them', () => {
  // 512 MB of old generation and 3 × 2 MB of young; with the default 16 MB semi-spaces it would be 560.
  assert.equal(heapLimitMb(PROXY_NODE_OPTIONS), 518);
});

test('a later option overrides an earlier one, so a launcher can append its own', () => {
  assert.equal(heapLimitMb([...PROXY_NODE_OPTIONS, '--max-old-space-size=300']), 306);
});
