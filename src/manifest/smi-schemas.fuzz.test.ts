/**
 * The SMI decoders and the RE2 check against hostile input: documents built from the real field
 * names with values of any type and shape, valid manifests mutated character by character, and
 * patterns drawn from regex syntax. Decoding never throws and every problem it reports is a
 * cataloged diagnostic with a position; a pattern the RE2 check accepts compiles in JavaScript
 * and holds none of the constructs the two engines read differently.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { CATALOG } from '../core/index.js';
import { decodeResource } from './decode.js';
import { documentFromObject, parseManifestText } from './load.js';
import { checkRe2Regex } from './re2.js';

const env = (name: string) => (process.env[name] === undefined ? undefined : Number(process.env[name]));
const params = (runs: number): fc.Parameters<unknown> => {
  const seed = env('WARD_FUZZ_SEED');
  return {
    numRuns: env('WARD_FUZZ_RUNS') ?? runs,
    interruptAfterTimeLimit: env('WARD_FUZZ_TIME_MS') ?? 10_000,
    markInterruptAsFailure: false,
    ...(seed === undefined ? {} : { seed }),
  };
};

const API_VERSIONS = [
  'access.smi-spec.io/v1alpha1',
  'access.smi-spec.io/v1alpha2',
  'access.smi-spec.io/v1alpha3',
  'access.smi-spec.io/v1alpha4',
  'specs.smi-spec.io/v1alpha1',
  'specs.smi-spec.io/v1alpha2',
  'specs.smi-spec.io/v1alpha3',
  'specs.smi-spec.io/v1alpha4',
  'gateway.networking.k8s.io/v1alpha2',
];
const KINDS = ['TrafficTarget', 'HTTPRouteGroup', 'TCPRoute', 'UDPRoute'];
const FIELDS = [
  'spec',
  'destination',
  'sources',
  'rules',
  'specs',
  'matches',
  'ports',
  'kind',
  'name',
  'namespace',
  'port',
  'pathRegex',
  'methods',
  'headers',
  'status',
  '__proto__',
  'constructor',
];

/** Any JSON value, with keys from the SMI vocabulary so the schemas reach deep. */
const value: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  v: fc.oneof(
    { depthSize: 'small' },
    fc.constantFrom<unknown>(null, true, false, 0, -1, 65536, 8080, 1.5, '', '*', 'ServiceAccount', 'GET', '/api/.*', '(?=x)', '\\1', '[[:alpha:]]'),
    fc.string(),
    fc.array(tie('v'), { maxLength: 4 }),
    fc.dictionary(fc.constantFrom(...FIELDS), tie('v'), { maxKeys: 5 }),
  ),
})).v;

const document = fc.record({
  apiVersion: fc.constantFrom(...API_VERSIONS),
  kind: fc.constantFrom(...KINDS),
  metadata: fc.oneof(fc.record({ name: fc.constantFrom('x', ''), namespace: fc.constantFrom('app', 'other') }), value),
  spec: value,
  destination: value,
  sources: value,
  rules: value,
  specs: value,
  matches: value,
});

const VALID = `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: t, namespace: app}
spec:
  destination: {kind: ServiceAccount, name: api, namespace: app}
  rules:
  - {kind: TCPRoute, name: port}
  - {kind: HTTPRouteGroup, name: routes, matches: [api]}
  sources: [{kind: ServiceAccount, name: web, namespace: app}]
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: routes, namespace: app}
spec:
  matches:
  - {name: api, pathRegex: "/api/.*", methods: [GET, "*"], headers: {cookie: "(.*;)?a=b"}}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: port, namespace: app}
spec: {matches: {ports: [8080]}}
`;

function assertWellFormed(diagnostics: readonly { code: string; source?: unknown }[]): void {
  for (const d of diagnostics) {
    assert.ok(Object.hasOwn(CATALOG, d.code), `uncataloged code ${d.code}`);
    assert.ok(d.source !== undefined, `${d.code} without a position`);
  }
}

describe('SMI decoding of hostile documents', () => {
  it('never throws; every diagnostic is cataloged and positioned', () => {
    fc.assert(
      fc.property(document, (doc) => {
        const r = decodeResource(documentFromObject(doc));
        assertWellFormed(r.diagnostics);
        if (r.status === 'ok') assert.ok(KINDS.includes(r.resource.kind));
      }),
      params(300),
    );
  });

  it('mutated manifests decode or fail with diagnostics, never a crash', () => {
    const edit = fc.record({
      at: fc.nat(VALID.length - 1),
      cut: fc.nat(6),
      insert: fc.constantFrom('', ' ', ':', '-', '[', '{', '"', '\\', '\n', '*', '.', '(?', '9999999'),
    });
    fc.assert(
      fc.property(fc.array(edit, { minLength: 1, maxLength: 4 }), (edits) => {
        let text = VALID;
        for (const e of edits) text = text.slice(0, e.at) + e.insert + text.slice(e.at + e.cut);
        const parsed = parseManifestText(text, 'fuzz.yaml');
        for (const d of parsed.documents) assertWellFormed(decodeResource(d).diagnostics);
      }),
      params(300),
    );
  });
});

describe('checkRe2Regex on hostile patterns', () => {
  const piece = fc.constantFrom(
    'a',
    '.',
    '*',
    '+',
    '?',
    '|',
    '(',
    ')',
    '[',
    ']',
    '^',
    '$',
    '{',
    '}',
    ',',
    '1',
    '1001',
    '\\',
    'd',
    'p',
    'k',
    'x',
    'Q',
    '?:',
    '?=',
    '?<',
    '?!',
    '?P',
    '<',
    '>',
    '=',
    ':',
    '-',
    '/',
  );
  it('never throws; what it accepts compiles and avoids the constructs the engines read differently', () => {
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 16 }), (pieces) => {
        const p = pieces.join('');
        const problem = checkRe2Regex(p);
        if (problem !== undefined) {
          assert.ok(problem.detail.length > 0 && problem.fix.length > 0);
          return;
        }
        assert.doesNotThrow(() => new RegExp(`^(?:${p})$`), p);
        // Outside classes, with harmless escapes blanked out, no lookaround, RE2-only or JS-only syntax is left.
        const bare = p.replace(/\\[^1-9kpPQEAzcu]/g, '_');
        if (!p.includes('[')) assert.doesNotMatch(bare, /\(\?<?[=!]|\(\?P|\\[1-9kpPQEAzcu]/, p);
      }),
      params(2000),
    );
  });
});
