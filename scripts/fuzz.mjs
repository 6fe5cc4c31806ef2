#!/usr/bin/env node
// Runs the protocol fuzz tests (src/**/*.fuzz.test.ts) long: each property until its time is up
// (WARD_FUZZ_TIME_MS, default 15 s) instead of the few dozen to few hundred runs `npm test` gives
// it. 22 such properties, one file at a time: some 6 minutes in all. Pass path substrings to fuzz
// only some files (`npm run fuzz -- hpack`); WARD_FUZZ_SEED=<seed> replays a failure.
//
// A parser caught in an endless loop never yields to fast-check's time limit, so each file runs
// in a process of its own that is killed, and reported as hung, well past its time.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

const filters = process.argv.slice(2);
const timeMs = Number(process.env.WARD_FUZZ_TIME_MS ?? '15000');
const env = {
  ...process.env,
  WARD_FUZZ_RUNS: process.env.WARD_FUZZ_RUNS ?? '1000000000',
  WARD_FUZZ_TIME_MS: String(timeMs),
  WARD_TEST_CONCURRENCY: '1',
};
const files = readdirSync('src', { recursive: true, withFileTypes: true })
  .filter((e) => e.isFile() && e.name.endsWith('.fuzz.test.ts'))
  .map((e) => join(e.parentPath, e.name))
  .filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)))
  .sort();
if (files.length === 0) {
  console.error('fuzz: no *.fuzz.test.ts file matches');
  process.exit(1);
}
const failed = [];
for (const file of files) {
  // At most 8 time-bound properties in a file, plus start-up and its fixed examples.
  const r = spawnSync(process.execPath, ['scripts/run-tests.mjs', file], { stdio: 'inherit', env, timeout: 8 * timeMs + 120_000 });
  if (r.signal !== null) console.error(`fuzz: ${file} hung (killed after ${Math.round((8 * timeMs + 120_000) / 1000)} s)`);
  if (r.status !== 0) failed.push(file);
}
if (failed.length > 0) console.error(`fuzz: failures in ${failed.join(', ')}`);
process.exit(failed.length > 0 ? 1 : 0);
