/**
 * What a browser (or anyone on the admin port) sends the dashboard's routes: the graph's query
 * string and the static files' paths. Under arbitrary and hostile input the query parser never
 * throws and accepts only a namespace name and a version number, and a path below /dashboard/
 * names a file of the build or nothing: never a file outside it.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import { fuzzParams } from '../../shared/testing/fuzz.js';
import { parseGraphQuery, StaticFiles, staticPathOf } from './dashboard-routes.js';

const work = mkdtempSync(join(tmpdir(), 'ward-dashboard-static-'));
const build = join(work, 'dashboard');
mkdirSync(join(build, 'assets'), { recursive: true });
writeFileSync(join(build, 'index.html'), '<!doctype html>');
writeFileSync(join(build, 'assets', 'index-abc.js'), '');
writeFileSync(join(work, 'secret.txt'), 'outside the build');
const files = new StaticFiles(build);
const INSIDE = new Set([join(build, 'index.html'), join(build, 'assets', 'index-abc.js')]);

after(() => rmSync(work, { recursive: true, force: true }));

const hostile = [
  '..',
  '%2e%2e',
  '%2E%2E%2F',
  '/',
  '\\',
  '%00',
  '%',
  '%zz',
  'secret.txt',
  'assets',
  'assets/',
  'index.html',
  'assets/index-abc.js',
  '../secret.txt',
  '.%2e/',
];
const pathPart = fc.oneof(fc.constantFrom(...hostile), fc.string({ maxLength: 12 }), fc.webSegment());

describe('dashboard routes under hostile input', () => {
  it('a static path names a file of the build or nothing', () => {
    fc.assert(
      fc.property(fc.array(pathPart, { maxLength: 6 }), (parts) => {
        const pathname = `/dashboard/${parts.join('/')}`;
        const rel = staticPathOf(pathname);
        const file = rel === undefined ? undefined : files.find(rel);
        assert.ok(file === undefined || INSIDE.has(file), `${pathname} -> ${file}`);
      }),
      fuzzParams(300),
    );
    assert.equal(files.find(''), join(build, 'index.html'));
    assert.equal(staticPathOf('/dashboard/%E0%A4%A'), undefined, 'bad percent-encoding');
    assert.equal(staticPathOf('/etc/passwd'), undefined);
  });

  it('the graph query accepts a namespace name and a version number, and refuses the rest with a reason', () => {
    const value = fc.oneof(fc.string({ maxLength: 80 }), fc.constantFrom('emojivoto', 'a', '-a', 'A', '1e3', '007', '9'.repeat(16), '', ' 1', '1 '));
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom('namespace', 'since', 'allNamespaces', 'x'), value), (params) => {
        const q = parseGraphQuery(new URLSearchParams(params));
        if (typeof q === 'string') {
          assert.ok(q.length > 0 && q.length < 200, q);
          return;
        }
        if (q.namespace !== undefined) assert.match(q.namespace, /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/);
        if (q.since !== undefined) assert.ok(Number.isSafeInteger(q.since) && q.since >= 0);
      }),
      fuzzParams(500),
    );
    assert.deepEqual(parseGraphQuery(new URLSearchParams('namespace=emojivoto&since=3')), { namespace: 'emojivoto', since: 3 });
    assert.deepEqual(parseGraphQuery(new URLSearchParams('namespace=emojivoto&allNamespaces=true')), { namespace: undefined, since: undefined });
    assert.match(String(parseGraphQuery(new URLSearchParams('namespace=../x'))), /not a Kubernetes namespace name/);
    assert.match(String(parseGraphQuery(new URLSearchParams('since=-1'))), /"since"/);
  });
});
