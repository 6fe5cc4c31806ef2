import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { nativeAddonPath, packageRootOf } from './package-root.js';

describe('package root', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ward-root-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  // A checkout under a directory with a space, inside another package.
  const root = join(dir, 'my projects', 'ward');
  mkdirSync(join(root, 'src', 'proxy', 'runtime'), { recursive: true });
  mkdirSync(join(root, 'dist', 'bundle'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'outer' }));
  writeFileSync(join(root, 'package.json'), JSON.stringify({ name: 'ward' }));

  it('is the nearest ancestor holding ward package.json, from modules at any depth', () => {
    assert.equal(packageRootOf(pathToFileURL(join(root, 'src', 'proxy', 'runtime', 'malloc-trim.ts')).href), root);
    assert.equal(packageRootOf(pathToFileURL(join(root, 'dist', 'bundle', 'ward-proxy.mjs')).href), root);
    assert.throws(() => packageRootOf(pathToFileURL(join(dir, 'elsewhere.js')).href), /no ward package.json above/);
  });

  it('puts native addons under native/build/node-v<ABI>, as a decoded file path', () => {
    assert.equal(
      nativeAddonPath('so_original_dst', pathToFileURL(join(root, 'src', 'proxy', 'original-dst.ts')).href, '137'),
      join(root, 'native', 'build', 'node-v137', 'so_original_dst.node'),
    );
    assert.equal(
      nativeAddonPath('gc_pauses', pathToFileURL(join(root, 'dist', 'bundle', 'ward-proxy.mjs')).href),
      join(root, 'native', 'build', `node-v${process.versions.modules}`, 'gc_pauses.node'),
    );
  });
});
