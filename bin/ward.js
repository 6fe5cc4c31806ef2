#!/usr/bin/env node
// Entry point of the one `ward` executable. It runs the bundles scripts/build.mjs makes
// (dist/bundle/, built by `npm ci` through `prepare`): one ES module with its dependencies, no
// TypeScript loader. A bundle older than a source file is rebuilt first (esbuild, under a second),
// so an edit never runs stale code; without esbuild (an install without dev dependencies) the
// bundles are used as they are. `WARD_FROM_SOURCE=1` runs the TypeScript sources through tsx.
//
// `ward proxy` has a bundle of its own: a sidecar runs once per pod, and loading only what it
// needs keeps its memory down. `ward --version` answers from package.json and loads nothing else.
//
// After a check, this process's environment carries WARD_BUNDLES_CHECKED=1, and a `ward proxy`
// started with it skips the check: `ward up`'s sidecars run the bundles `ward up` itself just
// checked (or built), without walking the sources or loading esbuild in every pod. A sidecar
// restarted later runs the bundle on disk then; a `ward` run by a person checks, as ever.
import { readFileSync, statSync } from 'node:fs';

const args = process.argv.slice(2);
if (args.length === 1 && (args[0] === '--version' || args[0] === '-V')) {
  const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  process.stdout.write(`ward ${version}\n`);
  process.exit(0);
}

// A reader that went away (`ward status | head`) ends the command quietly, not with a stack trace.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err) => {
    if (err.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw err;
  });
}

const proxyOnly = args[0] === 'proxy';
const bundleUrl = new URL(proxyOnly ? '../dist/bundle/ward-proxy.mjs' : '../dist/bundle/ward.mjs', import.meta.url);

/** Rebuilds the bundles when a source is newer than this one (or it is missing); false when it cannot. */
async function freshBundle() {
  const builtMs = statSync(bundleUrl, { throwIfNoEntry: false })?.mtimeMs;
  let tools;
  try {
    tools = await import('../scripts/build.mjs');
  } catch {
    return builtMs !== undefined;
  }
  if (builtMs !== undefined && tools.isFresh()) return true;
  try {
    await tools.build();
    return true;
  } catch (e) {
    process.stderr.write(`ward: cannot build the bundles: ${e instanceof Error ? e.message : String(e)}\n`);
    return builtMs !== undefined;
  }
}

const CHECKED = 'WARD_BUNDLES_CHECKED';
const checked = proxyOnly && process.env[CHECKED] === '1' && statSync(bundleUrl, { throwIfNoEntry: false }) !== undefined;

let entry;
if (process.env.WARD_FROM_SOURCE !== '1' && (checked || (await freshBundle()))) {
  process.env[CHECKED] = '1';
  entry = await import(bundleUrl.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  entry = await import(proxyOnly ? '../src/cli/proxy-entry.ts' : '../src/cli/main.ts');
}
process.exitCode = proxyOnly ? await entry.proxyMain(args) : await entry.main(args);
