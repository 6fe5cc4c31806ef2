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
  http: ['shared'],
  api: ['core', 'http', 'shared'],
  identity: ['core', 'api', 'shared'],
  proxy: ['core', 'api', 'identity', 'http', 'shared'],
  controller: ['core', 'manifest', 'index', 'sources', 'api', 'identity', 'shared'],
  local: ['controller', 'proxy', 'shared', 'core'],
  cli: ['core', 'manifest', 'index', 'sources', 'api', 'identity', 'proxy', 'controller', 'local', 'shared'],
};

/**
 * Modules whose folders are layers: a folder may use the folders below it, never one that uses
 * it (the cli's commands share the cli's own helpers, and main.ts dispatches to them).
 */
const LAYERED_FOLDERS: readonly string[] = ['proxy', 'http'];

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

/** Helpers of tests (a `testing/` folder, `*-test-helpers.ts`, `*-fixtures.ts`): outside every module's API, shared by tests across modules. */
const isTestSupport = (file: string) => relative(SRC, file).split('/').includes('testing') || /(?:test-helpers|fixtures)\.[jt]s$/.test(file);

/** The files of `files` that `file` imports (relative specifiers, `.js` standing for `.ts`). */
function localImportsOf(file: string, files: ReadonlySet<string>): string[] {
  return importsOf(file)
    .filter((spec) => spec.startsWith('.'))
    .map((spec) => resolve(dirname(file), spec).replace(/\.js$/, '.ts'))
    .filter((target) => files.has(target));
}

/** The strongly connected components of more than one node, or one with a self-edge (Tarjan). */
function cycles(graph: ReadonlyMap<string, ReadonlySet<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v) as number);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop() as string;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || graph.get(v)?.has(v) === true) found.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

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
        else if (isTestSupport(target)) {
          if (!isTestSupport(file)) problems.push(`${relative(ROOT, file)}: only tests and their helpers may import ${spec}`);
        } else if (relative(join(SRC, to), target) !== 'index.js') problems.push(`${relative(ROOT, file)}: import ${to} through its index.ts, not ${spec}`);
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

  it('no two files import each other, directly or through others', () => {
    const set = new Set(files);
    const graph = new Map(files.map((f) => [f, new Set(localImportsOf(f, set))]));
    assert.deepEqual(
      cycles(graph).map((c) => c.map((f) => relative(ROOT, f))),
      [],
    );
  });

  it('no two folders of the proxy or http modules import each other, directly or through others', () => {
    const set = new Set(files);
    const graph = new Map<string, Set<string>>();
    for (const f of files) {
      // A module's index.ts is its surface, above all of its folders.
      if (!LAYERED_FOLDERS.includes(moduleOf(f)) || relative(SRC, f) === join(moduleOf(f), 'index.ts')) continue;
      const from = relative(SRC, dirname(f));
      const edges = graph.get(from) ?? new Set<string>();
      graph.set(from, edges);
      for (const target of localImportsOf(f, set)) {
        const to = relative(SRC, dirname(target));
        if (to !== from && moduleOf(target) === moduleOf(f)) edges.add(to);
      }
    }
    assert.deepEqual(cycles(graph), []);
  });

  it('a cycle is detected (the check can fail)', () => {
    const graph = new Map([
      ['a', new Set(['b'])],
      ['b', new Set(['c'])],
      ['c', new Set(['a'])],
      ['d', new Set(['d'])],
      ['e', new Set(['a'])],
    ]);
    assert.deepEqual(cycles(graph), [['a', 'b', 'c'], ['d']]);
  });

  it('a forbidden import is detected (the check can fail)', () => {
    assert.equal(isTestSupport(join(SRC, 'shared', 'testing', 'waits.js')), true);
    assert.equal(isTestSupport(join(SRC, 'proxy', 'inbound', 'proxy.ts')), false);
    assert.equal((ALLOWED.core ?? []).includes('manifest'), false);
    assert.equal((ALLOWED.index ?? []).includes('cli'), false);
  });
});
