#!/usr/bin/env node
// Runs Biome (format + lint) and the type-aware typescript-eslint rules.
// Biome is installed on demand and not recorded in package-lock.json: the registry this project
// builds from serves only the Linux build of Biome's per-platform binaries, and a lock file that
// names them all (as npm writes it) makes `npm ci` fail for the missing ones.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const BIOME = '@biomejs/biome@2.6.8';
const run = (cmd, args) => spawnSync(cmd, args, { stdio: 'inherit' }).status ?? 1;

if (!existsSync('node_modules/@biomejs/biome/package.json')) {
  console.error(`lint: installing ${BIOME} (not in the lock file, see scripts/lint.mjs)`);
  if (run('npm', ['install', '--no-save', '--no-audit', '--no-fund', BIOME]) !== 0) process.exit(1);
}
const biome = run('npx', ['biome', 'ci', '.']);
const eslint = run('npx', ['eslint', '.']);
process.exit(biome === 0 && eslint === 0 ? 0 : 1);
