/**
 * bin/ward.js finds its checkout by file path: under a directory whose name has a space (a URL's
 * path would be percent-encoded) it still sees that dist/ is fresh and runs it.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'ward-bin-'));
after(() => rmSync(work, { recursive: true, force: true }));

describe('bin/ward.js', () => {
  it('runs a fresh dist/ from a checkout under a directory with a space in its name', () => {
    const root = join(work, 'my projects', 'ward');
    mkdirSync(join(root, 'bin'), { recursive: true });
    mkdirSync(join(root, 'src', 'cli'), { recursive: true });
    mkdirSync(join(root, 'dist', 'cli'), { recursive: true });
    copyFileSync(join(REPO, 'bin', 'ward.js'), join(root, 'bin', 'ward.js'));
    writeFileSync(join(root, 'package.json'), '{"type": "module"}\n');
    symlinkSync(join(REPO, 'node_modules'), join(root, 'node_modules'));
    writeFileSync(join(root, 'src', 'cli', 'main.ts'), "export async function main(): Promise<number> {\n  console.log('from src');\n  return 0;\n}\n");
    writeFileSync(join(root, 'dist', 'cli', 'main.js'), "export async function main() {\n  console.log('from dist');\n  return 0;\n}\n");
    writeFileSync(join(root, 'dist', 'cli', '.tsbuildinfo'), '{}\n');
    const past = new Date(Date.now() - 60_000);
    utimesSync(join(root, 'src', 'cli', 'main.ts'), past, past);
    const env = { ...process.env };
    delete env.WARD_FROM_SOURCE;
    delete env.NODE_TEST_CONTEXT;
    const r = spawnSync(process.execPath, [join(root, 'bin', 'ward.js'), 'version'], { encoding: 'utf8', env, timeout: 30_000 });
    assert.deepEqual([r.status, r.stdout, r.stderr], [0, 'from dist\n', '']);
  });
});
