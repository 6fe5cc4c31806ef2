// Installs a dev tool on demand, without recording it in package-lock.json. Used for tools whose
// npm package pulls a per-platform binary through optionalDependencies (Biome, buf): the registry
// this project builds from serves only the Linux builds, and a lock file that names them all (as
// npm writes it) makes `npm ci` fail for the missing ones.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Pinned tools: package spec and the file whose presence means "installed". */
export const TOOLS = {
  biome: { spec: '@biomejs/biome@2.6.8', marker: 'node_modules/@biomejs/biome/package.json' },
  buf: { spec: '@bufbuild/buf@1.75.0', marker: 'node_modules/@bufbuild/buf/package.json' },
};

/** Makes sure `tool` is installed; returns false (after printing why) when it cannot be. */
export function ensureTool(name) {
  const tool = TOOLS[name];
  if (existsSync(tool.marker)) return true;
  console.error(`installing ${tool.spec} (kept out of the lock file, see scripts/ensure-tool.mjs)`);
  const r = spawnSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', tool.spec], { stdio: ['ignore', 'inherit', 'inherit'] });
  return r.status === 0;
}
