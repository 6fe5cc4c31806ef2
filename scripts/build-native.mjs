#!/usr/bin/env node
// `npm run build:native`: builds the native addons (native/) with the node-gyp bundled with npm,
// into native/build/Release (not committed): so_original_dst.node (SO_ORIGINAL_DST, transparent
// mode) and gc_pauses.node (GC pause counts for /metrics). Explicit, because npm
// 11 runs no install hooks. Never downloads Node headers (there is no internet): the headers come
// from npm's `nodedir` config (which `npm run` passes on as npm_config_nodedir), else from the
// running node's own prefix; without either it fails and says so.
//
// Each target of native/binding.gyp is built on its own, by node-gyp in a private directory, and
// the finished addon is renamed into place, so two builds at once (parallel tests on a fresh
// clone) never leave a half-written file. so_original_dst (N-API, which transparent mode cannot
// do without) must build; gc_pauses uses V8's C++ API, which a newer Node may change, and the
// metric has a fallback, so its failure is a warning.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

const ROOT = new URL('..', import.meta.url).pathname;
const NATIVE = join(ROOT, 'native');
/** Targets whose failure is only a warning. */
const OPTIONAL = new Set(['gc_pauses']);
const fail = (msg) => {
  console.error(`build:native: ${msg}`);
  process.exit(1);
};

const hasHeaders = (dir) => dir !== undefined && dir !== '' && existsSync(join(dir, 'include', 'node', 'node_api.h'));
const configured = process.env.npm_config_nodedir;
const nodedir = hasHeaders(configured) ? configured : dirname(dirname(process.execPath));
if (!hasHeaders(nodedir)) {
  fail(
    `no Node headers: neither npm's nodedir (${configured ?? 'unset'}) nor ${nodedir} has include/node/node_api.h; ` +
      'set it with `npm config set nodedir <prefix of the node installation>`',
  );
}
const gyp =
  process.env.npm_config_node_gyp ?? join(dirname(dirname(process.execPath)), 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
if (!existsSync(gyp)) fail(`npm's bundled node-gyp is not at ${gyp}; run this through \`npm run build:native\``);

const { targets } = JSON.parse(readFileSync(join(NATIVE, 'binding.gyp'), 'utf8'));
const out = join(NATIVE, 'build', 'Release');
for (const target of targets) {
  const name = target.target_name;
  const addon = `${name}.node`;
  const work = mkdtempSync(join(tmpdir(), `ward-native-${name}-`));
  try {
    writeFileSync(join(work, 'binding.gyp'), JSON.stringify({ targets: [target] }));
    for (const f of target.sources) copyFileSync(join(NATIVE, f), join(work, f));
    const r = spawnSync(process.execPath, [gyp, 'rebuild', '--nodedir', nodedir, '--directory', work], { stdio: 'inherit', timeout: 300_000 });
    if (r.status !== 0) {
      const why = `node-gyp failed for ${name} (${r.error?.message ?? `exit ${r.status ?? r.signal}`})`;
      if (!OPTIONAL.has(name)) fail(why);
      console.error(`build:native: warning: ${why}; /metrics counts GC pauses from node's performance entries instead`);
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
