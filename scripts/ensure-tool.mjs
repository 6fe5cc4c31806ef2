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

/**
 * Makes sure `tool` is installed; returns false (after printing why) when it cannot be. Every
 * pinned tool is installed in the same command: `npm install --no-save` prunes packages that are
 * not in the lock file, so installing one alone would remove the other.
 */
export function ensureTool(name) {
  if (existsSync(TOOLS[name].marker)) return true;
  const specs = Object.values(TOOLS).map((t) => t.spec);
  console.error(`installing ${specs.join(', ')} (kept out of the lock file, see scripts/ensure-tool.mjs)`);
  const r = spawnSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', ...specs], { stdio: ['ignore', 'inherit', 'inherit'] });
  return r.status === 0 && existsSync(TOOLS[name].marker);
}
