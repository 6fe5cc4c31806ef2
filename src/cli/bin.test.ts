/**
 * bin/ward.js on a checkout of its own (under a directory whose name has a space: a URL's path
 * would be percent-encoded): it builds the bundles on first use and again after an edit, so it
 * never runs stale code nor a TypeScript loader, except in a proxy started by a process that has
 * just checked them (`ward up`'s sidecars); `--version` answers from package.json; a
 * reader that goes away ends a command quietly.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'ward-bin-'));
const root = join(work, 'my projects', 'ward');
after(() => rmSync(work, { recursive: true, force: true }));

const env = { ...process.env };
delete env.WARD_FROM_SOURCE;
delete env.WARD_BUNDLES_CHECKED;
delete env.NODE_TEST_CONTEXT;

function ward(...args: string[]) {
  return wardWith(env, ...args);
}

function wardWith(environment: NodeJS.ProcessEnv, ...args: string[]) {
  return spawnSync(process.execPath, [join(root, 'bin', 'ward.js'), ...args], { encoding: 'utf8', env: environment, timeout: 60_000 });
}

function proxySaying(text: string): string {
  return `export async function proxyMain(): Promise<number> {
  console.log(${JSON.stringify(text)});
  return 0;
}
`;
}

/** Gives `file` an mtime clearly after the bundles', whatever the file system's resolution. */
function touchLater(file: string): void {
  const later = new Date(Date.now() + 5000);
  utimesSync(file, later, later);
}

function mainSaying(text: string): string {
  return `export async function main(argv: readonly string[]): Promise<number> {
  if (argv[0] === 'checked') {
    console.log(process.env.WARD_BUNDLES_CHECKED);
    return 0;
  }
  if (argv[0] === 'lines') {
    for (let i = 0; i < 200_000; i++) process.stdout.write(\`line \${i}\\n\`);
    return 0;
  }
  console.log(${JSON.stringify(text)});
  return 0;
}
`;
}

before(() => {
  for (const d of ['bin', 'scripts', 'src/cli', 'examples/emojivoto/services']) mkdirSync(join(root, d), { recursive: true });
  copyFileSync(join(REPO, 'bin', 'ward.js'), join(root, 'bin', 'ward.js'));
  copyFileSync(join(REPO, 'scripts', 'build.mjs'), join(root, 'scripts', 'build.mjs'));
  writeFileSync(join(root, 'package.json'), '{"name": "ward", "version": "9.8.7", "type": "module"}\n');
  writeFileSync(join(root, 'package-lock.json'), '{}\n');
  symlinkSync(join(REPO, 'node_modules'), join(root, 'node_modules'));
  writeFileSync(join(root, 'src', 'cli', 'main.ts'), mainSaying('from the first build'));
  writeFileSync(join(root, 'src', 'cli', 'proxy-entry.ts'), proxySaying('proxy from the first build'));
  for (const s of ['web', 'emoji', 'voting', 'vote-bot']) writeFileSync(join(root, 'examples', 'emojivoto', 'services', `${s}.ts`), 'export {};\n');
});

describe('bin/ward.js', () => {
  it('builds the bundles on first use, and again after an edit', () => {
    assert.deepEqual((({ status, stdout, stderr }) => [status, stdout, stderr])(ward('hello')), [0, 'from the first build\n', '']);
    assert.ok(existsSync(join(root, 'dist', 'bundle', 'ward.mjs')));
    assert.ok(existsSync(join(root, 'examples', 'emojivoto', 'services', 'dist', 'web.mjs')));
    writeFileSync(join(root, 'src', 'cli', 'main.ts'), mainSaying('after the edit'));
    touchLater(join(root, 'src', 'cli', 'main.ts'));
    const r = ward('hello');
    assert.deepEqual([r.status, r.stdout, r.stderr], [0, 'after the edit\n', '']);
  });

  it('tells the processes it starts that the bundles are checked (ward up its sidecars)', () => {
    const r = ward('checked');
    assert.deepEqual([r.status, r.stdout, r.stderr], [0, '1\n', '']);
  });

  it('a proxy told the bundles are checked runs its bundle as it is; otherwise it rebuilds it after an edit', () => {
    assert.deepEqual((({ status, stdout, stderr }) => [status, stdout, stderr])(ward('proxy')), [0, 'proxy from the first build\n', '']);
    const entry = join(root, 'src', 'cli', 'proxy-entry.ts');
    writeFileSync(entry, proxySaying('proxy after the edit'));
    touchLater(entry);
    const checked = wardWith({ ...env, WARD_BUNDLES_CHECKED: '1' }, 'proxy');
    assert.deepEqual([checked.status, checked.stdout, checked.stderr], [0, 'proxy from the first build\n', '']);
    const r = ward('proxy');
    assert.deepEqual([r.status, r.stdout, r.stderr], [0, 'proxy after the edit\n', '']);
  });

  it('answers --version from package.json', () => {
    for (const flag of ['--version', '-V']) {
      const r = ward(flag);
      assert.deepEqual([r.status, r.stdout, r.stderr], [0, 'ward 9.8.7\n', '']);
    }
  });

  it('ends quietly when its reader goes away (ward status | head)', () => {
    const r = spawnSync('bash', ['-c', `set -o pipefail; "${process.execPath}" "${join(root, 'bin', 'ward.js')}" lines | head -n 1`], {
      encoding: 'utf8',
      env,
      timeout: 60_000,
    });
    assert.equal(r.stdout, 'line 0\n');
    assert.equal(r.stderr, '');
    assert.equal(r.status, 0);
  });
});
