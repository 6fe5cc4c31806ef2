/**
 * `ward test`: policy unit tests from YAML suites, run on the same engine as the proxy.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { type Document, isMap, isScalar, isSeq, LineCounter, parseDocument } from 'yaml';
import { type Diagnostic, diagnostic, type SourcePos } from '../../core/index.js';
import { type ExplainResult, evaluate, type ProbeClient, type ProbeTraffic, parseResourceArg, podsOf, QueryError } from '../../index/index.js';
import type { ManifestDocument } from '../../manifest/index.js';
import { clusterConfig } from '../cluster-config.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { formatDiagnostics, json, palette } from '../output.js';
import { buildWorkspace } from '../workspace.js';
import { statusOf } from './check.js';
import { formatExplain } from './explain.js';

type Path = (string | number)[];
type Obj = Record<string, unknown>;

/** The expectation keys of a test. */
export const EXPECT_KEYS = ['decision', 'denyKind', 'level', 'server', 'route', 'authz'] as const;

/** One test's outcome. */
export interface TestResult {
  readonly suite: string;
  readonly name: string;
  readonly passed: boolean;
  readonly expected: Readonly<Record<string, string | null>>;
  readonly actual: ExplainResult | null;
  readonly error?: string | undefined;
}

class SuiteReader {
  readonly diagnostics: Diagnostic[] = [];
  constructor(
    readonly file: string,
    readonly doc: Document,
    readonly lines: LineCounter,
  ) {}

  pos(path: Path): SourcePos {
    for (let p = path; ; p = p.slice(0, -1)) {
      const node = p.length === 0 ? this.doc.contents : this.doc.getIn(p, true);
      const range = (node as { range?: [number, number, number] } | null | undefined)?.range;
      if (range !== undefined) {
        const { line, col } = this.lines.linePos(range[0]);
        return { file: this.file, line, col };
      }
      if (p.length === 0) return { file: this.file, line: 1, col: 1 };
    }
  }

  /** Position of the key of the mapping entry at `path` (for unknown keys), else of its value. */
  keyPos(path: Path): SourcePos {
    const parent = path.length === 1 ? this.doc.contents : this.doc.getIn(path.slice(0, -1), true);
    if (isMap(parent)) {
      const key = parent.items.find((item) => isScalar(item.key) && item.key.value === path[path.length - 1])?.key;
      const range = isScalar(key) ? key.range : undefined;
      if (range !== undefined && range !== null) return { file: this.file, ...this.lines.linePos(range[0]) };
    }
    return this.pos(path);
  }

  fail(path: Path, detail: string, at: 'value' | 'key' = 'value'): void {
    const source = at === 'key' ? this.keyPos(path) : this.pos(path);
    this.diagnostics.push(diagnostic('POL201', { detail: `${path.join('.') || '(suite)'}: ${detail}` }, { source }));
  }

  str(obj: Obj, key: string, path: Path, required = false): string | undefined {
    const v = obj[key];
    if (v === undefined || v === null) {
      if (required) this.fail([...path, key], 'is required');
      return undefined;
    }
    if (typeof v !== 'string') {
      this.fail([...path, key], `must be a string, not ${JSON.stringify(v)}`);
      return undefined;
    }
    return v;
  }

  obj(v: unknown, path: Path): Obj | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'object' || Array.isArray(v)) {
      this.fail(path, 'must be a mapping');
      return undefined;
    }
    return v as Obj;
  }

  list(v: unknown, path: Path): unknown[] {
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) {
      this.fail(path, 'must be a list');
      return [];
    }
    return v;
  }
}

interface SuiteTest {
  readonly name: string;
  readonly to: { pod?: string; workload?: string; namespace?: string; port: number };
  readonly client: ProbeClient;
  readonly traffic: ProbeTraffic;
  readonly expect: Record<string, string | null>;
  readonly path: Path;
}

function readTest(r: SuiteReader, raw: unknown, i: number): SuiteTest | undefined {
  const path: Path = ['tests', i];
  const t = r.obj(raw, path);
  if (t === undefined) {
    r.fail(path, 'must be a mapping');
    return undefined;
  }
  const before = r.diagnostics.length;
  const name = r.str(t, 'name', path, true) ?? `test ${i + 1}`;
  const to = r.obj(t.to, [...path, 'to']);
  if (to === undefined) r.fail([...path, 'to'], 'is required ({pod: NS/NAME, port} or {workload: deploy/NAME, namespace, port})');
  const port = to?.port;
  if (to !== undefined && (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535))
    r.fail([...path, 'to', 'port'], 'must be a port number 1-65535');
  const pod = to ? r.str(to, 'pod', [...path, 'to']) : undefined;
  const workload = to ? r.str(to, 'workload', [...path, 'to']) : undefined;
  if (to !== undefined && (pod === undefined) === (workload === undefined)) r.fail([...path, 'to'], 'needs exactly one of pod and workload');
  const from = r.obj(t.from, [...path, 'from']) ?? {};
  const identity = from.identity === null ? null : r.str(from, 'identity', [...path, 'from']);
  const tls = r.str(from, 'tls', [...path, 'from']);
  if (tls !== undefined && !['none', 'mesh', 'no-client-cert', 'passthrough'].includes(tls))
    r.fail([...path, 'from', 'tls'], 'must be none, mesh, no-client-cert or passthrough');
  const client: ProbeClient = {
    ip: r.str(from, 'ip', [...path, 'from']),
    identity,
    tls: tls as ProbeClient['tls'],
    sni: r.str(from, 'sni', [...path, 'from']),
  };
  let traffic: ProbeTraffic = { kind: 'tcp' };
  const kinds = ['http', 'grpc', 'tcp'].filter((k) => t[k] !== undefined && t[k] !== false);
  if (kinds.length > 1) r.fail(path, 'give only one of http, grpc and tcp');
  if (t.http !== undefined) {
    const h = r.obj(t.http, [...path, 'http']) ?? {};
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(r.obj(h.headers, [...path, 'http', 'headers']) ?? {})) headers[k.toLowerCase()] = String(v);
    traffic = {
      kind: 'http',
      method: r.str(h, 'method', [...path, 'http']) ?? 'GET',
      path: r.str(h, 'path', [...path, 'http']) ?? '/',
      headers,
      host: r.str(h, 'host', [...path, 'http']),
    };
  } else if (t.grpc !== undefined) {
    const g = r.obj(t.grpc, [...path, 'grpc']) ?? {};
    traffic = { kind: 'grpc', service: r.str(g, 'service', [...path, 'grpc'], true) ?? '', method: r.str(g, 'method', [...path, 'grpc'], true) ?? '' };
  }
  const e = r.obj(t.expect, [...path, 'expect']);
  const expect: Record<string, string | null> = {};
  if (e === undefined) r.fail([...path, 'expect'], 'is required (at least decision)');
  else {
    for (const k of Object.keys(e))
      if (!(EXPECT_KEYS as readonly string[]).includes(k)) r.fail([...path, 'expect', k], `unknown key (use ${EXPECT_KEYS.join(', ')})`, 'key');
    for (const k of EXPECT_KEYS) {
      if (e[k] === null) expect[k] = null;
      else {
        const v = r.str(e, k, [...path, 'expect'], k === 'decision');
        if (v !== undefined) expect[k] = v;
      }
    }
    const d = expect.decision;
    if (d !== undefined && d !== null && !['allow', 'audit-allow', 'deny'].includes(d))
      r.fail([...path, 'expect', 'decision'], 'must be allow, audit-allow or deny');
  }
  if (r.diagnostics.length > before) return undefined;
  return {
    name,
    to: {
      ...(pod !== undefined ? { pod } : {}),
      ...(workload !== undefined ? { workload } : {}),
      ...(typeof to?.namespace === 'string' ? { namespace: to.namespace } : {}),
      port: port as number,
    },
    client,
    traffic,
    expect,
    path,
  };
}

/** The value of an expectation key in an explain result. */
export function actualValue(r: ExplainResult, key: string): string | null {
  switch (key) {
    case 'decision':
      return r.decision;
    case 'denyKind':
      return r.denyKind;
    case 'level':
      return r.level;
    case 'server':
      return `${r.server.kind}/${r.server.name}`;
    case 'route':
      return r.route === null ? null : `${r.route.kind}/${r.route.name}`;
    case 'authz':
      return r.authz === null ? null : `${r.authz.kind}/${r.authz.name}`;
    default:
      return null;
  }
}

function manifestDoc(r: SuiteReader, value: unknown, path: Path): ManifestDocument {
  return {
    value,
    origin: {
      source: r.pos(path),
      positionOf: (p) => r.pos([...path, ...p]),
    },
  };
}

/** Runs one suite file; returns results, or diagnostics when the suite or its manifests are broken. */
export function runSuite(file: string): { results: TestResult[]; diagnostics: Diagnostic[] } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    return { results: [], diagnostics: [diagnostic('POL003', { path: file, detail: (e as Error).message }, { source: { file, line: 0, col: 0 } })] };
  }
  const lines = new LineCounter();
  // Plain messages (as for manifests): the position is reported separately.
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const r = new SuiteReader(file, doc, lines);
  const posAt = (offset: number): SourcePos => ({ file, ...lines.linePos(offset) });
  for (const err of doc.errors) r.diagnostics.push(diagnostic('POL001', { detail: `${err.code}: ${err.message}` }, { source: posAt(err.pos[0]) }));
  if (r.diagnostics.length > 0) return { results: [], diagnostics: r.diagnostics };
  let value: unknown;
  try {
    value = doc.toJS();
  } catch (e) {
    // e.g. an alias bomb ("Excessive alias count"): bad input, not a crash.
    r.diagnostics.push(diagnostic('POL001', { detail: e instanceof Error ? e.message : String(e) }, { source: posAt(doc.contents?.range?.[0] ?? 0) }));
    return { results: [], diagnostics: r.diagnostics };
  }
  const root = r.obj(value, []);
  if (root === undefined || !isMap(doc.contents)) {
    r.fail([], 'a suite is a mapping with tests (and optional cluster, manifests, resources)');
    return { results: [], diagnostics: r.diagnostics };
  }
  for (const k of Object.keys(root))
    if (!['cluster', 'manifests', 'resources', 'tests'].includes(k)) r.fail([k], 'unknown key (use cluster, manifests, resources, tests)', 'key');
  const cluster = r.obj(root.cluster, ['cluster']) ?? {};
  const listOrUndef = (k: string) => (cluster[k] === undefined ? undefined : r.list(cluster[k], ['cluster', k]).map(String));
  let config: ReturnType<typeof clusterConfig>;
  try {
    config = clusterConfig({
      defaultPolicy: r.str(cluster, 'defaultPolicy', ['cluster']),
      clusterNetworks: listOrUndef('clusterNetworks'),
      probeNetworks: listOrUndef('probeNetworks'),
      trustDomain: r.str(cluster, 'trustDomain', ['cluster']),
      controlPlaneNamespace: r.str(cluster, 'controlPlaneNamespace', ['cluster']),
    });
  } catch (e) {
    r.fail(['cluster'], (e as Error).message);
    return { results: [], diagnostics: r.diagnostics };
  }
  const base = dirname(file);
  const paths = r.list(root.manifests, ['manifests']).map((m, i) => {
    if (typeof m !== 'string') r.fail(['manifests', i], 'must be a path');
    return resolve(base, String(m));
  });
  const documents = r.list(root.resources, ['resources']).map((v, i) => manifestDoc(r, v, ['resources', i]));
  if (!isSeq(doc.get('tests', true)) || r.list(root.tests, ['tests']).length === 0) r.fail(['tests'], 'must list at least one test');
  const tests = r.list(root.tests, ['tests']).map((t, i) => readTest(r, t, i));
  if (r.diagnostics.length > 0) return { results: [], diagnostics: r.diagnostics };

  const ws = buildWorkspace({ paths, documents }, config);
  const errors = ws.diagnostics.filter((d) => d.severity === 'error');
  if (errors.length > 0 || statusOf(ws.diagnostics) === EXIT.usage) return { results: [], diagnostics: errors.length > 0 ? errors : [...ws.diagnostics] };

  const results: TestResult[] = [];
  for (const t of tests as SuiteTest[]) {
    let actual: ExplainResult | null = null;
    let error: string | undefined;
    try {
      let ns: string;
      let pod: string;
      if (t.to.pod !== undefined) {
        const slash = t.to.pod.indexOf('/');
        if (slash <= 0) throw new UsageError(`to.pod "${t.to.pod}" must be NAMESPACE/NAME`);
        ns = t.to.pod.slice(0, slash);
        pod = t.to.pod.slice(slash + 1);
      } else {
        ns = t.to.namespace ?? 'default';
        const first = podsOf(ws, parseResourceArg(t.to.workload as string), ns)[0];
        if (first === undefined) throw new UsageError(`workload ${t.to.workload} has no meshed pods in namespace ${ns}`);
        pod = first.name;
      }
      actual = evaluate(ws, { namespace: ns, pod, port: t.to.port, client: t.client, traffic: t.traffic });
    } catch (e) {
      if (!(e instanceof QueryError || e instanceof UsageError)) throw e;
      error = `${r.pos(t.path).file}:${r.pos(t.path).line}:${r.pos(t.path).col}: ${e.message}`;
    }
    const passed = actual !== null && Object.entries(t.expect).every(([k, v]) => actualValue(actual as ExplainResult, k) === v);
    results.push({ suite: file, name: t.name, passed, expected: t.expect, actual, ...(error !== undefined ? { error } : {}) });
  }
  return { results, diagnostics: [] };
}

function escapeXml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' })[c] as string);
}

function junit(results: readonly TestResult[]): string {
  const bySuite = new Map<string, TestResult[]>();
  for (const r of results) bySuite.set(r.suite, [...(bySuite.get(r.suite) ?? []), r]);
  const suites = [...bySuite].map(([suite, rs]) => {
    const cases = rs.map((r) => {
      const body = r.passed
        ? ''
        : `<failure message="${escapeXml(r.error ?? mismatchText(r))}">${escapeXml(r.actual ? r.actual.chain.map((c) => `${c.step}: ${c.detail}`).join('\n') : '')}</failure>`;
      return `    <testcase classname="${escapeXml(suite)}" name="${escapeXml(r.name)}">${body}</testcase>`;
    });
    return `  <testsuite name="${escapeXml(suite)}" tests="${rs.length}" failures="${rs.filter((r) => !r.passed).length}">\n${cases.join('\n')}\n  </testsuite>`;
  });
  return `<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="${results.length}" failures="${results.filter((r) => !r.passed).length}">\n${suites.join('\n')}\n</testsuites>\n`;
}

function mismatchText(r: TestResult): string {
  if (r.actual === null) return r.error ?? 'not evaluated';
  return Object.entries(r.expected)
    .filter(([k, v]) => actualValue(r.actual as ExplainResult, k) !== v)
    .map(([k, v]) => `${k}: expected ${v ?? 'null'}, got ${actualValue(r.actual as ExplainResult, k) ?? 'null'}`)
    .join('; ');
}

/** Runs `ward test`. */
export function runTest(files: readonly string[], output: string, io: CliIo): number {
  if (files.length === 0) throw new UsageError('name at least one suite file');
  const results: TestResult[] = [];
  const diagnostics: Diagnostic[] = [];
  for (const f of files) {
    const r = runSuite(f);
    results.push(...r.results);
    diagnostics.push(...r.diagnostics);
  }
  const c = palette(io.color);
  if (diagnostics.length > 0) {
    io.err(formatDiagnostics(diagnostics, c));
    return EXIT.usage;
  }
  const passed = results.filter((r) => r.passed).length;
  const failed = results.length - passed;
  if (output === 'json') io.out(json({ results, passed, failed }));
  else if (output === 'junit') io.out(junit(results));
  else {
    for (const r of results) {
      io.out(`${r.passed ? c.green('✔') : c.red('✖')} ${r.name}\n`);
      if (!r.passed) {
        io.out(`    ${c.red(mismatchText(r))}\n`);
        if (r.actual !== null) io.out(formatExplain(r.actual, io.color).replace(/^/gm, '    '));
      }
    }
    io.out(`\n${passed} passed, ${failed} failed\n`);
  }
  return failed > 0 ? EXIT.failed : EXIT.ok;
}
