import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/**
 * Builds the native addons with `npm run build:native` (bounded) when `addonPath` is missing, as
 * a `npm test` user on a fresh clone would. Undefined when the addon is there (now or already),
 * else what the build printed.
 */
export function buildAddonIfMissing(addonPath: string): string | undefined {
  if (existsSync(addonPath)) return undefined;
  const r = spawnSync('npm', ['run', 'build:native'], { encoding: 'utf8', timeout: 120_000 });
  if (existsSync(addonPath)) return undefined;
  return `npm run build:native did not build ${addonPath}: ${(r.stdout ?? '').slice(-300)}\n${(r.stderr || r.error?.message || '').slice(-300)}`;
}
