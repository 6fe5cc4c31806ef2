#!/usr/bin/env node
// Entry point of the one `ward` executable. It runs the compiled JavaScript in dist/ when that is
// at least as new as every source file (after `tsc -b`, as CI and `npm run build` do); otherwise
// the TypeScript sources through tsx's loader, so a fresh clone needs only `npm ci` and an edit
// never runs stale code. `WARD_FROM_SOURCE=1` forces the sources.
//
// `ward proxy` has an entry point of its own: a sidecar runs once per pod, and loading only what
// it needs (and no TypeScript loader) keeps its memory down.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// A file path, not a URL's (percent-encoded) path: a checkout may sit under a directory with spaces.
const root = fileURLToPath(new URL('../', import.meta.url));
const args = process.argv.slice(2);
const proxyOnly = args[0] === 'proxy';

/**
 * True when, for every non-test source file src/M/X.ts, dist/M/X.js exists and dist/M/.tsbuildinfo
 * (written by each `tsc -b` of project M, even when it re-emits nothing) is not older than it.
 */
function distIsFresh() {
  if (process.env.WARD_FROM_SOURCE === '1') return false;
  const src = join(root, 'src');
  const built = new Map();
  try {
    for (const e of readdirSync(src, { recursive: true, withFileTypes: true })) {
      if (!e.isFile() || !e.name.endsWith('.ts') || e.name.endsWith('.test.ts') || e.name.endsWith('.d.ts')) continue;
      const file = join(e.parentPath, e.name);
      const rel = file.slice(src.length + 1);
      const project = rel.slice(0, rel.indexOf('/'));
      if (!built.has(project)) built.set(project, statSync(join(root, 'dist', project, '.tsbuildinfo')).mtimeMs);
      statSync(join(root, 'dist', rel.replace(/\.ts$/, '.js')));
      if (built.get(project) < statSync(file).mtimeMs) return false;
    }
    return true;
  } catch {
    return false;
  }
}

let entry;
if (distIsFresh()) {
  entry = await import(proxyOnly ? '../dist/cli/proxy-entry.js' : '../dist/cli/main.js');
} else {
  const { register } = await import('tsx/esm/api');
  register();
  entry = await import(proxyOnly ? '../src/cli/proxy-entry.ts' : '../src/cli/main.ts');
}
process.exitCode = proxyOnly ? await entry.proxyMain(args) : await entry.main(args);
