#!/usr/bin/env node
// Entry point of the one `ward` executable. TypeScript runs through tsx's loader, so a fresh
// clone needs only `npm ci`.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
process.exitCode = await main(process.argv.slice(2));
