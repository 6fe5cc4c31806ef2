#!/usr/bin/env node
// `npm run build` (and `prepare`, so `npm ci` runs it): bundles what runs into single ES modules
// with esbuild, dependencies included, so no command loads a TypeScript loader or resolves a
// module graph of hundreds of files:
// - dist/bundle/ward.mjs, the CLI (every command);
// - dist/bundle/ward-proxy.mjs, `ward proxy` alone (a sidecar per pod: only what it needs);
// - examples/emojivoto/services/dist/*.mjs, the example's applications, self-contained, so a copy
//   of the example outside the checkout runs with nothing installed beside it;
// - dist/dashboard/, the dashboard (Vite), served by the controller's admin port.
// Each file is written whole under a temporary name and renamed into place: processes starting
// while a build runs (bin/ward.js rebuilds a stale bundle) never load half a file. Type checking
// is `tsc -b`'s job, not this one's.
import { mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const EXAMPLE_SERVICES = ['web', 'emoji', 'voting', 'vote-bot'];

/** What to build: entry (from the root) → output (from the root). */
export const OUTPUTS = [
  { entry: 'src/cli/main.ts', out: 'dist/bundle/ward.mjs' },
  { entry: 'src/cli/proxy-entry.ts', out: 'dist/bundle/ward-proxy.mjs' },
  ...EXAMPLE_SERVICES.map((s) => ({ entry: `examples/emojivoto/services/${s}.ts`, out: `examples/emojivoto/services/dist/${s}.mjs` })),
];

// CommonJS dependencies inside an ES module call `require` for node's built-ins.
const BANNER = "import { createRequire as __wardCreateRequire } from 'node:module'; const require = __wardCreateRequire(import.meta.url);";

/**
 * `text` with every non-ASCII character written as a `\uXXXX` escape. esbuild escapes them in
 * code already (its default ASCII charset) but not in the comments it keeps, and V8 holds a
 * module's whole source on its heap for lazy compilation: one character above U+00FF there makes
 * it a two-byte string, twice the size (2 MB instead of 1 MB for the proxy bundle). `\uXXXX`
 * (surrogate pairs above U+FFFF) means the same character in a string, a template and a regular
 * expression, with or without the `u` flag.
 */
export function asciiOnly(text) {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the complement of ASCII
  return text.replace(/[^\x00-\x7f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

const BUILTINS = new Set(builtinModules);
const isBuiltin = (name) => BUILTINS.has(name) || BUILTINS.has(`node:${name}`);

/**
 * Imports of node's built-ins become `require` calls. An ES module importing a built-in gets
 * node's ES module facade for it, which reads every export at once, lazy ones included: for
 * `node:http` that loads undici (its WebSocket, MessageEvent, ...), for `node:fs` fs/promises,
 * readline and the stream classes, for `node:buffer` File, none of which the proxy uses. Through
 * `require` (esbuild's CommonJS interop), an export is read when the code uses it.
 */
const builtinsThroughRequire = {
  name: 'builtins-through-require',
  setup(b) {
    b.onResolve({ filter: /^(node:)?[a-z_/0-9]+$/ }, (args) => {
      const name = args.path.replace(/^node:/, '');
      if (args.kind !== 'import-statement' || args.namespace === 'builtin' || !isBuiltin(name)) return undefined;
      return { path: name, namespace: 'builtin' };
    });
    b.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({ contents: `module.exports = require('node:${args.path}');`, loader: 'js' }));
  },
};

/** Builds every output; resolves with the time it took in ms. Throws on a build error. */
export async function build() {
  const started = performance.now();
  const esbuild = await import('esbuild');
  await Promise.all(
    OUTPUTS.map(async ({ entry, out }) => {
      const target = join(ROOT, out);
      mkdirSync(join(target, '..'), { recursive: true });
      const tmp = `${target}.${process.pid}.tmp`;
      try {
        const result = await esbuild.build({
          entryPoints: [join(ROOT, entry)],
          outfile: tmp,
          write: false,
          bundle: true,
          platform: 'node',
          format: 'esm',
          target: 'node22',
          banner: { js: BANNER },
          legalComments: 'none',
          logLevel: 'error',
          plugins: [builtinsThroughRequire],
        });
        writeFileSync(tmp, asciiOnly(result.outputFiles[0].text));
        renameSync(tmp, target);
      } finally {
        rmSync(tmp, { force: true });
      }
    }),
  );
  return performance.now() - started;
}

/** The newest modification time of the sources the outputs are built from (src/, the example's services, the lock file). */
export function newestSourceMs() {
  let newest = statSync(join(ROOT, 'package-lock.json'), { throwIfNoEntry: false })?.mtimeMs ?? 0;
  for (const dir of ['src', 'examples/emojivoto/services']) {
    const base = join(ROOT, dir);
    for (const e of readdirRecursive(base)) {
      if (!e.endsWith('.ts') || e.endsWith('.test.ts')) continue;
      const m = statSync(e).mtimeMs;
      if (m > newest) newest = m;
    }
  }
  return newest;
}

function* readdirRecursive(dir) {
  for (const e of readdirSyncSafe(dir)) {
    // Not path.join: bin/ward.js runs this in every sidecar, and a few hundred joins got
    // normalizeString compiled by TurboFan, whose code in the node binary (4-5 MB of pages) then
    // stayed resident in an idle proxy.
    const p = `${dir}/${e.name}`;
    if (e.isDirectory()) {
      if (e.name !== 'dist' && e.name !== 'node_modules') yield* readdirRecursive(p);
    } else yield p;
  }
}

function readdirSyncSafe(dir) {
  try {
    return readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
}

/** True when every output exists and is newer than every source. */
export function isFresh() {
  const newest = newestSourceMs();
  return OUTPUTS.every(({ out }) => (statSync(join(ROOT, out), { throwIfNoEntry: false })?.mtimeMs ?? -1) >= newest);
}

/** The dashboard (a Vite root, dashboard/) is built into dist/dashboard, which the controller serves. */
const DASHBOARD_OUT = 'dist/dashboard';

/** True when dist/dashboard is newer than every file under dashboard/. */
export function isDashboardFresh() {
  const built = statSync(join(ROOT, DASHBOARD_OUT, 'index.html'), { throwIfNoEntry: false })?.mtimeMs ?? -1;
  for (const f of readdirRecursive(join(ROOT, 'dashboard'))) if (statSync(f).mtimeMs > built) return false;
  return built >= (statSync(join(ROOT, 'package-lock.json'), { throwIfNoEntry: false })?.mtimeMs ?? 0);
}

/**
 * Builds the dashboard with Vite into a temporary folder renamed into place (a controller serving
 * it never reads half a build); resolves with the time it took in ms, or undefined when Vite is not
 * installed (an install without dev dependencies keeps the dashboard it has).
 */
export async function buildDashboard() {
  const started = performance.now();
  let vite;
  try {
    vite = await import('vite');
  } catch {
    return undefined;
  }
  const target = join(ROOT, DASHBOARD_OUT);
  const tmp = `${target}.${process.pid}.tmp`;
  try {
    await vite.build({ configFile: join(ROOT, 'dashboard', 'vite.config.ts'), logLevel: 'error', build: { outDir: tmp, emptyOutDir: true } });
    rmSync(target, { recursive: true, force: true });
    renameSync(tmp, target);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return performance.now() - started;
}

// `--if-stale`: build only when a source is newer than an output (tests call this before using the bundles).
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const ifStale = process.argv.includes('--if-stale');
  try {
    if (!ifStale || !isFresh()) {
      const ms = await build();
      console.error(`build: ${OUTPUTS.length} bundles in ${Math.round(ms)} ms`);
    }
    if (!ifStale || !isDashboardFresh()) {
      const ms = await buildDashboard();
      console.error(ms === undefined ? 'build: no vite installed, the dashboard is not rebuilt' : `build: dashboard in ${Math.round(ms)} ms`);
    }
  } catch (e) {
    console.error(`build: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}
