/**
 * The committed generated code is what `npm run gen:proto` produces: src/api/gen from proto/, and
 * the emojivoto example's examples/emojivoto/services/gen from examples/emojivoto/services/proto.
 * Regenerating into a temporary directory must give byte-identical files.
 */
import assert from 'node:assert/strict';
import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, describe, it } from 'node:test';

const ROOT = join(import.meta.dirname, '../..');
/** Each generated directory (relative to the root) and files it must contain. */
const GENERATED = [
  { dir: 'src/api/gen', sources: 'proto/', expected: ['inbound.ts', 'google/protobuf/duration.ts'] },
  { dir: 'examples/emojivoto/services/gen', sources: 'examples/emojivoto/services/proto/', expected: ['emoji.ts', 'voting.ts'] },
];

function files(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

describe('generated code', () => {
  const out = mkdtempSync(join(tmpdir(), 'ward-gen-'));
  after(() => rmSync(out, { recursive: true, force: true }));

  // The same script as `npm run gen:proto` (it installs buf when missing), run once for every case.
  let generated: SpawnSyncReturns<string> | undefined;
  const generate = () => {
    generated ??= spawnSync(process.execPath, [join(ROOT, 'scripts/gen-proto.mjs'), '--output', out], { cwd: ROOT, encoding: 'utf8', timeout: 180_000 });
    return generated;
  };

  for (const { dir, sources, expected } of GENERATED) {
    it(`${dir} is up to date with ${sources} (run \`npm run gen:proto\` after editing a .proto file)`, () => {
      const r = generate();
      assert.equal(r.status, 0, `buf generate failed: ${r.stderr}`);
      const committed = join(ROOT, dir);
      const fresh = join(out, dir);
      const names = files(fresh);
      assert.deepEqual(files(committed), names);
      assert.ok(
        expected.every((e) => names.includes(e)),
        names.join(', '),
      );
      for (const name of names) assert.equal(readFileSync(join(committed, name), 'utf8'), readFileSync(join(fresh, name), 'utf8'), `${name} differs`);
    });
  }
});
