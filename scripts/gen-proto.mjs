#!/usr/bin/env node
// `npm run gen:proto [-- --output DIR]`: regenerates src/api/gen from proto/ with ts-proto, run by
// buf as a local plugin (buf.gen.yaml). buf is installed on demand (see ensure-tool.mjs).
import { spawnSync } from 'node:child_process';
import { ensureTool } from './ensure-tool.mjs';

if (!ensureTool('buf')) process.exit(1);
// Run through node: the shim's executable bit is not always set by an on-demand install.
const r = spawnSync(process.execPath, ['node_modules/@bufbuild/buf/bin/buf', 'generate', ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(r.status ?? 1);
