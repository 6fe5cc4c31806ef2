/**
 * The committed generated code (src/api/gen) is what `npm run gen:proto` produces from proto/:
 * regenerating into a temporary directory must give byte-identical files.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, describe, it } from 'node:test';

const ROOT = join(import.meta.dirname, '../..');
const GEN = join(ROOT, 'src/api/gen');

function files(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

describe('generated code', () => {
  const out = mkdtempSync(join(tmpdir(), 'ward-gen-'));
  after(() => rmSync(out, { recursive: true, force: true }));

  it('is up to date with proto/ (run `npm run gen:proto` after editing a .proto file)', () => {
    // The same script as `npm run gen:proto` (it installs buf when missing).
    const r = spawnSync(process.execPath, [join(ROOT, 'scripts/gen-proto.mjs'), '--output', out], { cwd: ROOT, encoding: 'utf8', timeout: 180_000 });
    assert.equal(r.status, 0, `buf generate failed: ${r.stderr}`);
    const fresh = join(out, 'src/api/gen');
    const names = files(fresh);
    assert.deepEqual(files(GEN), names);
    assert.ok(names.includes('inbound.ts') && names.includes('google/protobuf/duration.ts'), names.join(', '));
    for (const name of names) assert.equal(readFileSync(join(GEN, name), 'utf8'), readFileSync(join(fresh, name), 'utf8'), `${name} differs`);
  });
});
