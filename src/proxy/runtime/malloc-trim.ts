/**
 * The C heap's side of giving memory back (native/malloc_trim.c, built by `npm run build:native`):
 * after a burst of connections closes, the memory of their TLS sessions and sockets is free but
 * stays resident in glibc's arenas, where no V8 collection reaches. Optional: without the addon
 * (not built, or not glibc) the proxy does without.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { nativeAddonPath } from '../../shared/index.js';

/** Where `npm run build:native` puts the addon for this Node's ABI. */
export const MALLOC_TRIM_ADDON_PATH = nativeAddonPath('malloc_trim', import.meta.url);

/** `malloc_trim(0)`: true when memory was given back; undefined when the addon is not there or does not load. */
export function loadMallocTrim(path: string = MALLOC_TRIM_ADDON_PATH): (() => boolean) | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const addon = createRequire(import.meta.url)(path) as { trim?: unknown };
    return typeof addon.trim === 'function' ? (addon.trim as () => boolean) : undefined;
  } catch {
    return undefined;
  }
}
