#!/usr/bin/env node
// `npm run build:native`: builds the native addons (native/) with the node-gyp bundled with npm,
// into native/build/Release (not committed): so_original_dst.node (SO_ORIGINAL_DST, transparent
// mode) and gc_pauses.node (GC pause counts for /metrics). Explicit, because npm
// 11 runs no install hooks. Never downloads Node headers (there is no internet): the headers come
// from npm's `nodedir` config (which `npm run` passes on as npm_config_nodedir), else from the
// running node's own prefix; without either it fails and says so.
//
// node-gyp works in a private copy of native/ and each finished addon is renamed into place, so
// two builds at once (parallel tests on a fresh clone) never leave a half-written file.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

const ROOT = new URL('..', import.meta.url).pathname;
const NATIVE = join(ROOT, 'native');
const ADDONS = ['so_original_dst.node', 'gc_pauses.node'];
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

const work = mkdtempSync(join(tmpdir(), 'ward-native-'));
try {
  for (const f of ['binding.gyp', 'so_original_dst.c', 'gc_pauses.cc']) copyFileSync(join(NATIVE, f), join(work, f));
  const r = spawnSync(process.execPath, [gyp, 'rebuild', '--nodedir', nodedir, '--directory', work], { stdio: 'inherit', timeout: 300_000 });
  if (r.status !== 0) fail(`node-gyp failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`})`);
  const out = join(NATIVE, 'build', 'Release');
  mkdirSync(out, { recursive: true });
  for (const addon of ADDONS) {
    const tmp = join(out, `.${addon}.${process.pid}`);
    copyFileSync(join(work, 'build', 'Release', addon), tmp);
    renameSync(tmp, join(out, addon));
    console.log(`build:native: built ${join(out, addon)}`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
