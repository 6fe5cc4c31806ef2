/**
 * Manifest loading: files, directories and stdin into documents that remember where every value
 * came from, so schema and admission diagnostics can point at `file:line:col`.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { type Document, isMap, isPair, isScalar, isSeq, LineCounter, type Node, parseAllDocuments } from 'yaml';
import { type Diagnostic, diagnostic, type SourcePos } from '../core/index.js';
import type { ResourceOrigin } from './types.js';

/** One parsed YAML/JSON document: its plain value and where its parts came from. */
export interface ManifestDocument {
  readonly value: unknown;
  readonly origin: ResourceOrigin;
}

/** Documents read from some inputs, plus every problem met on the way. */
export interface LoadResult {
  readonly documents: ManifestDocument[];
  readonly diagnostics: Diagnostic[];
}

/** Options of `loadManifests`. */
export interface LoadOptions {
  /** Reads standard input for the path `-` (default: file descriptor 0). */
  readonly stdin?: () => string;
}

const MANIFEST_FILE = /\.(ya?ml|json)$/i;
const STDIN_NAME = '<stdin>';

/**
 * Loads every document of `paths`. A path is a file, a directory (every `*.yaml`, `*.yml` and
 * `*.json` below it, recursively, in sorted order) or `-` for stdin. Never throws for bad input:
 * unreadable paths give POL003, YAML syntax errors POL001 (the file's other documents are kept).
 */
export function loadManifests(paths: readonly string[], opts: LoadOptions = {}): LoadResult {
  const documents: ManifestDocument[] = [];
  const diagnostics: Diagnostic[] = [];
  const add = (text: string, file: string): void => {
    const r = parseManifestText(text, file);
    documents.push(...r.documents);
    diagnostics.push(...r.diagnostics);
  };
  for (const path of paths) {
    if (path === '-') {
      try {
        add(opts.stdin !== undefined ? opts.stdin() : readFileSync(0, 'utf8'), STDIN_NAME);
      } catch (err) {
        diagnostics.push(unreadable(STDIN_NAME, err));
      }
      continue;
    }
    let files: string[];
    try {
      files = statSync(path).isDirectory() ? listManifestFiles(path) : [path];
    } catch (err) {
      diagnostics.push(unreadable(path, err));
      continue;
    }
    for (const file of files) {
      let text: string;
      try {
        text = readFileSync(file, 'utf8');
      } catch (err) {
        diagnostics.push(unreadable(file, err));
        continue;
      }
      add(text, file);
    }
  }
  return { documents, diagnostics };
}

function listManifestFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && MANIFEST_FILE.test(e.name))
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

function unreadable(path: string, err: unknown): Diagnostic {
  const detail = err instanceof Error ? err.message : String(err);
  return diagnostic('POL003', { path, detail }, { source: { file: path, line: 0, col: 0 } });
}

/**
 * Parses YAML or JSON text holding any number of documents. Empty documents are skipped; a
 * document with a syntax error yields POL001 and is skipped; a `v1` `List` stands for its items.
 */
export function parseManifestText(text: string, file: string): LoadResult {
  const lineCounter = new LineCounter();
  const documents: ManifestDocument[] = [];
  const diagnostics: Diagnostic[] = [];
  const posAt = (offset: number): SourcePos => ({ file, ...lineCounter.linePos(offset) });
  for (const doc of parseAllDocuments(text, { lineCounter, prettyErrors: false, merge: true })) {
    if (doc.errors.length > 0) {
      for (const e of doc.errors) {
        diagnostics.push(diagnostic('POL001', { detail: `${e.code}: ${e.message}` }, { source: posAt(e.pos[0]) }));
      }
      continue;
    }
    if (doc.contents === null) continue;
    let value: unknown;
    try {
      value = doc.toJS();
    } catch (err) {
      // e.g. an alias bomb ("Excessive alias count")
      const detail = err instanceof Error ? err.message : String(err);
      diagnostics.push(diagnostic('POL001', { detail }, { source: posAt(doc.contents.range?.[0] ?? 0) }));
      continue;
    }
    if (value === null || value === undefined) continue;
    const origin = yamlOrigin(doc, posAt);
    documents.push(...expandList(value, origin));
  }
  return { documents, diagnostics };
}

/** Wraps an object built in code (position unknown: line 0). */
export function documentFromObject(obj: unknown, file = '<memory>'): ManifestDocument {
  const source: SourcePos = { file, line: 0, col: 0 };
  return { value: obj, origin: { source, positionOf: () => source } };
}

/**
 * The document formed by the value at `path` inside `doc`, positions included: e.g. the inline
 * `resources[i]` of a `ward test` suite. Undefined when there is no value there.
 */
export function documentAt(doc: ManifestDocument, path: readonly (string | number)[]): ManifestDocument | undefined {
  let value = doc.value;
  for (const seg of path) {
    if (Array.isArray(value) && typeof seg === 'number') value = value[seg];
    else if (isObject(value) && typeof seg === 'string' && Object.hasOwn(value, seg)) value = value[seg];
    else return undefined;
  }
  return value === undefined ? undefined : { value, origin: subOrigin(doc.origin, path) };
}

function expandList(value: unknown, origin: ResourceOrigin): ManifestDocument[] {
  if (!isObject(value) || value.kind !== 'List' || value.apiVersion !== 'v1' || !Array.isArray(value.items)) {
    return [{ value, origin }];
  }
  return value.items.map((item, i) => ({ value: item, origin: subOrigin(origin, ['items', i]) }));
}

function subOrigin(parent: ResourceOrigin, prefix: readonly (string | number)[]): ResourceOrigin {
  return { source: parent.positionOf(prefix), positionOf: (path) => parent.positionOf([...prefix, ...path]) };
}

function yamlOrigin(doc: Document, posAt: (offset: number) => SourcePos): ResourceOrigin {
  const positionOf = (path: readonly (string | number)[]): SourcePos => {
    let node = doc.contents as Node;
    let offset = node.range?.[0] ?? 0;
    for (const seg of path) {
      const child = childNode(node, seg);
      if (child === undefined) break;
      offset = child.offset;
      if (child.node === undefined) break;
      node = child.node;
    }
    return posAt(offset);
  };
  return { source: positionOf([]), positionOf };
}

/** The child at `seg`: its offset, and its node unless it is an empty value (`key:` alone). */
function childNode(node: Node, seg: string | number): { offset: number; node?: Node } | undefined {
  if (isMap(node)) {
    for (const pair of node.items) {
      if (!isPair(pair)) continue;
      const key = isScalar(pair.key) ? pair.key.value : pair.key;
      if (String(key) !== String(seg)) continue;
      const value = pair.value as Node | null;
      // `key:` with nothing after it holds an empty null scalar: point at the key instead.
      if (value?.range != null && value.range[1] > value.range[0]) return { offset: value.range[0], node: value };
      const keyNode = pair.key as Node | null;
      return { offset: keyNode?.range?.[0] ?? node.range?.[0] ?? 0 };
    }
    return undefined;
  }
  if (isSeq(node) && typeof seg === 'number') {
    const item = node.items[seg] as Node | undefined;
    if (item?.range === undefined || item.range === null) return undefined;
    return { offset: item.range[0], node: item };
  }
  return undefined;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
