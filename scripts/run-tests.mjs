#!/usr/bin/env node
// Runs every *.test.ts under src/ and test/ with node:test through tsx.
// Node 20 cannot glob test files itself and silently runs zero tests when given a directory
// of .ts files, so this script lists them explicitly and fails when it finds none.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

const roots = ['src', 'test'];
const filter = process.argv.slice(2);
const files = [];
for (const root of roots) {
  for (const entry of readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.test.ts')) continue;
    const file = join(entry.parentPath, entry.name);
    if (filter.length > 0 && !filter.some((f) => file.includes(f))) continue;
    files.push(file);
  }
}
files.sort();
if (files.length === 0) {
  console.error('run-tests: no test files found under src/ or test/');
  process.exit(1);
}
const concurrency = process.env.WARD_TEST_CONCURRENCY ?? '2';
const result = spawnSync(process.execPath, ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`, '--test-reporter=spec', ...files], {
  stdio: 'inherit',
});
process.exit(result.status ?? 1);
