#!/usr/bin/env node
// Runs the protocol fuzz tests (src/**/*.fuzz.test.ts) long: each property until its time is up
// (WARD_FUZZ_TIME_MS, default 15 s) instead of the few dozen to few hundred runs `npm test` gives
// it. 17 such properties, one file at a time: some 4-5 minutes in all. Pass path substrings to
// fuzz only some files (`npm run fuzz -- hpack`); WARD_FUZZ_SEED=<seed> replays a failure.
import { spawnSync } from 'node:child_process';

const filters = process.argv.slice(2);
const env = {
  ...process.env,
  WARD_FUZZ_RUNS: process.env.WARD_FUZZ_RUNS ?? '1000000000',
  WARD_FUZZ_TIME_MS: process.env.WARD_FUZZ_TIME_MS ?? '15000',
  WARD_TEST_CONCURRENCY: process.env.WARD_TEST_CONCURRENCY ?? '1',
};
const args = filters.length > 0 ? filters.map((f) => (f.includes('.fuzz.test') ? f : `${f}.fuzz.test`)) : ['.fuzz.test.ts'];
const result = spawnSync(process.execPath, ['scripts/run-tests.mjs', ...args], { stdio: 'inherit', env });
process.exit(result.status ?? 1);
