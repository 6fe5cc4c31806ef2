/**
 * The dependency rules of HOUSE-STYLE.md, checked on every import (tsc -b project references
 * enforce the same table at build time; this test gives faster, clearer failures).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), '../..');
const SRC = join(ROOT, 'src');

/** module -> modules it may import. */
const ALLOWED: Record<string, readonly string[]> = {
  core: [],
  shared: [],
  manifest: ['core'],
  index: ['core', 'manifest'],
  sources: ['index', 'manifest', 'core', 'shared'],
  api: ['core', 'shared'],
  identity: ['core', 'api', 'shared'],
  proxy: ['core', 'api', 'identity', 'shared'],
  controller: ['core', 'manifest', 'index', 'sources', 'api', 'identity', 'shared'],
  local: ['controller', 'proxy', 'shared', 'core'],
  cli: ['core', 'manifest', 'index', 'sources', 'api', 'identity', 'proxy', 'controller', 'local', 'shared'],
};

/** Third-party packages that may appear in exactly one module. */
const SDK_HOME: Record<string, string> = {
  '@kubernetes/client-node': 'sources',
  '@grpc/grpc-js': 'api',
  '@peculiar/x509': 'identity',
};

function sourceFiles(): string[] {
  return readdirSync(SRC, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') && !e.parentPath.includes(`${join('api', 'gen')}`))
    .map((e) => join(e.parentPath, e.name));
}

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]/gm)) out.push(m[1] as string);
  for (const m of text.matchAll(/import\(\s*['"]([^'"]+)['"]\s*\)/g)) out.push(m[1] as string);
  return out;
}

const moduleOf = (file: string) => relative(SRC, file).split('/')[0] as string;

describe('import graph', () => {
  const files = sourceFiles();
  it('finds the source tree', () => assert.ok(files.length > 20, `only ${files.length} files found`));

  it('modules import only the modules they may, and only through index.ts', () => {
    const problems: string[] = [];
    for (const file of files) {
      const from = moduleOf(file);
      for (const spec of importsOf(file)) {
        if (!spec.startsWith('.')) continue;
        const target = resolve(dirname(file), spec);
        const to = moduleOf(target);
        if (to === from) continue;
        if (!(ALLOWED[from] ?? []).includes(to)) problems.push(`${relative(ROOT, file)}: ${from} may not import ${to} (${spec})`);
        else if (relative(join(SRC, to), target) !== 'index.js') problems.push(`${relative(ROOT, file)}: import ${to} through its index.ts, not ${spec}`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it('core is pure: no node:* or third-party imports', () => {
    const problems = files
      .filter((f) => moduleOf(f) === 'core')
      .flatMap((f) =>
        importsOf(f)
          .filter((s) => !s.startsWith('.'))
          .map((s) => `${relative(ROOT, f)} imports ${s}`),
      );
    assert.deepEqual(problems, []);
  });

  it('each SDK lives in exactly one module', () => {
    const problems: string[] = [];
    for (const file of files) {
      for (const spec of importsOf(file)) {
        const home = Object.entries(SDK_HOME).find(([pkg]) => spec === pkg || spec.startsWith(`${pkg}/`))?.[1];
        if (home !== undefined && moduleOf(file) !== home) problems.push(`${relative(ROOT, file)} imports ${spec} (belongs in ${home})`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it('no default exports', () => {
    const problems = files.filter((f) => /^export default /m.test(readFileSync(f, 'utf8'))).map((f) => relative(ROOT, f));
    assert.deepEqual(problems, []);
  });

  it('a forbidden import is detected (the check can fail)', () => {
    assert.equal((ALLOWED.core ?? []).includes('manifest'), false);
    assert.equal((ALLOWED.index ?? []).includes('cli'), false);
  });
});
