#!/usr/bin/env node
// Runs Biome (format + lint) and the type-aware typescript-eslint rules. Biome is installed on
// demand (see ensure-tool.mjs for why it is not in the lock file).
import { spawnSync } from 'node:child_process';
import { ensureTool } from './ensure-tool.mjs';

const run = (cmd, args) => spawnSync(cmd, args, { stdio: 'inherit' }).status ?? 1;

if (!ensureTool('biome')) process.exit(1);
const biome = run('npx', ['biome', 'ci', '.']);
const eslint = run('npx', ['eslint', '.']);
process.exit(biome === 0 && eslint === 0 ? 0 : 1);
