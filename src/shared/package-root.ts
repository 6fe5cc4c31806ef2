/**
 * Where ward's own files are, from any module of it: the sources (src/M/x.ts), the type-checked
 * output (dist/M/x.js) and the bundles (dist/bundle/ward.mjs) sit at different depths, so paths
 * are taken from the package root rather than counted in `../` from a module.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const roots = new Map<string, string>();

/** The nearest ancestor directory of the module at `moduleUrl` holding ward's package.json. Throws when there is none. */
export function packageRootOf(moduleUrl: string): string {
  const start = dirname(fileURLToPath(moduleUrl));
  const known = roots.get(start);
  if (known !== undefined) return known;
  for (let dir = start; ; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: unknown }).name === 'ward') {
      roots.set(start, dir);
      return dir;
    }
    if (dirname(dir) === dir) throw new Error(`no ward package.json above ${start}`);
  }
}

/** Where `npm run build:native` puts the addon `name` for a Node ABI (default: the running Node's), from any module of ward. */
export function nativeAddonPath(name: string, moduleUrl: string, abi: string = process.versions.modules): string {
  return join(packageRootOf(moduleUrl), 'native', 'build', `node-v${abi}`, `${name}.node`);
}

/** The version in ward's package.json, found from the module at `moduleUrl` ('unknown' when it has none). */
export function packageVersionOf(moduleUrl: string): string {
  const manifest = JSON.parse(readFileSync(join(packageRootOf(moduleUrl), 'package.json'), 'utf8')) as { version?: unknown };
  return typeof manifest.version === 'string' ? manifest.version : 'unknown';
}
