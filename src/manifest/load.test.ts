import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { documentAt, documentFromObject, loadManifests, parseManifestText } from './load.js';

const MULTI = `apiVersion: v1
kind: Namespace
metadata:
  name: app
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata:
  name: web
  namespace: app
spec:
  port: [8080
  podSelector: {}
---
# only a comment

---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
  namespace: app
`;

describe('parseManifestText', () => {
  it('keeps the good documents of a file with a broken one and reports the syntax error position', () => {
    const r = parseManifestText(MULTI, 'multi.yaml');
    assert.deepEqual(
      r.documents.map((d) => (d.value as { kind: string }).kind),
      ['Namespace', 'ServiceAccount'],
    );
    assert.equal(r.diagnostics.length, 1);
    const d = r.diagnostics[0];
    assert.equal(d?.code, 'POL001');
    assert.equal(d?.severity, 'error');
    assert.equal(d?.source?.file, 'multi.yaml');
    assert.equal(d?.source?.line, 13);
    assert.match(d?.message ?? '', /^YAML syntax error: /);
  });

  it('gives the position of a value, and of the deepest existing ancestor for a missing one', () => {
    const text = `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata:
  name: web
spec:
  podSelector:
    matchLabels: {app: web}
  port: 8080
  proxyProtocol: HTTP/3
  empty:
`;
    const [doc] = parseManifestText(text, 'srv.yaml').documents;
    assert.ok(doc);
    assert.deepEqual(doc.origin.source, { file: 'srv.yaml', line: 1, col: 1 });
    assert.deepEqual(doc.origin.positionOf(['spec', 'proxyProtocol']), { file: 'srv.yaml', line: 9, col: 18 });
    assert.deepEqual(doc.origin.positionOf(['spec', 'podSelector', 'matchLabels', 'app']), { file: 'srv.yaml', line: 7, col: 24 });
    // Missing field: its parent mapping (first key of spec).
    assert.deepEqual(doc.origin.positionOf(['spec', 'accessPolicy']), { file: 'srv.yaml', line: 6, col: 3 });
    // A key with no value: the key itself.
    assert.deepEqual(doc.origin.positionOf(['spec', 'empty', 'x']), { file: 'srv.yaml', line: 10, col: 3 });
  });

  it('reads JSON and sequences with positions', () => {
    const text = '{"apiVersion": "v1", "kind": "Pod",\n "spec": {"containers": [{"name": "a"}, {"name": 7}]}}';
    const [doc] = parseManifestText(text, 'pod.json').documents;
    assert.ok(doc);
    assert.deepEqual(doc.origin.positionOf(['spec', 'containers', 1, 'name']), { file: 'pod.json', line: 2, col: 50 });
  });

  it('skips empty and null documents silently', () => {
    const r = parseManifestText('---\n---\nnull\n---\n~\n', 'e.yaml');
    assert.deepEqual(r, { documents: [], diagnostics: [] });
  });

  it('expands a v1 List into its items, positions included', () => {
    const text = `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: a}
- apiVersion: v1
  kind: Namespace
  metadata: {name: b}
`;
    const r = parseManifestText(text, 'list.yaml');
    assert.equal(r.documents.length, 2);
    assert.deepEqual(r.documents[1]?.value, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'b' } });
    assert.deepEqual(r.documents[1]?.origin.source, { file: 'list.yaml', line: 7, col: 3 });
    assert.deepEqual(r.documents[1]?.origin.positionOf(['metadata', 'name']), { file: 'list.yaml', line: 9, col: 20 });
  });
});

describe('documentAt', () => {
  it('makes a document of a nested value that keeps its positions', () => {
    const text = `tests: []
resources:
- apiVersion: v1
  kind: Namespace
  metadata:
    name: app
`;
    const [suite] = parseManifestText(text, 'suite.yaml').documents;
    assert.ok(suite);
    const doc = documentAt(suite, ['resources', 0]);
    assert.deepEqual(doc?.value, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'app' } });
    assert.deepEqual(doc?.origin.source, { file: 'suite.yaml', line: 3, col: 3 });
    assert.deepEqual(doc?.origin.positionOf(['metadata', 'name']), { file: 'suite.yaml', line: 6, col: 11 });
    assert.equal(documentAt(suite, ['resources', 1]), undefined);
  });
});

describe('parseManifestText: alias bombs', () => {
  it('reports excessive aliases as POL001 instead of throwing', () => {
    const text = `a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
`;
    const r = parseManifestText(text, 'bomb.yaml');
    assert.deepEqual(r.documents, []);
    assert.deepEqual(
      r.diagnostics.map((d) => [d.code, d.source?.line]),
      [['POL001', 1]],
    );
  });
});

describe('documentFromObject', () => {
  it('has unknown positions (line 0)', () => {
    const doc = documentFromObject({ kind: 'Pod' }, 'api');
    assert.deepEqual(doc.origin.positionOf(['spec']), { file: 'api', line: 0, col: 0 });
    assert.deepEqual(doc.value, { kind: 'Pod' });
  });
});

describe('loadManifests', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ward-load-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'b', 'nested'), { recursive: true });
  const ns = (name: string) => `apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ${name}\n`;
  writeFileSync(join(dir, 'b', 'nested', 'z.yml'), ns('z'));
  writeFileSync(join(dir, 'b', 'a.yaml'), ns('ba'));
  writeFileSync(join(dir, 'a.json'), '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "json"}}');
  writeFileSync(join(dir, 'notes.txt'), ns('ignored'));

  const names = (docs: readonly { value: unknown }[]) => docs.map((d) => (d.value as { metadata: { name: string } }).metadata.name);

  it('reads every manifest file below a directory in sorted order', () => {
    const r = loadManifests([dir]);
    assert.deepEqual(r.diagnostics, []);
    assert.deepEqual(names(r.documents), ['json', 'ba', 'z']);
    assert.equal(r.documents[2]?.origin.source.file, join(dir, 'b', 'nested', 'z.yml'));
  });

  it('reads stdin for "-" and reports unreadable paths as POL003 without stopping', () => {
    const missing = join(dir, 'missing.yaml');
    const r = loadManifests([missing, '-', join(dir, 'b', 'a.yaml')], { stdin: () => ns('stdin') });
    assert.deepEqual(names(r.documents), ['stdin', 'ba']);
    assert.equal(r.documents[0]?.origin.source.file, '<stdin>');
    assert.equal(r.diagnostics.length, 1);
    assert.equal(r.diagnostics[0]?.code, 'POL003');
    assert.match(r.diagnostics[0]?.message ?? '', /^cannot read .*missing\.yaml: ENOENT/);
  });
});
