/**
 * examples/emojivoto-smi: the emojivoto lockdown written in SMI checks clean, passes its own
 * suite, and decides every case of both suites (the Linkerd form's and its own) exactly as the
 * Linkerd form decides it, except the one case the SMI form is deliberately stricter on.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { runSuite, type TestResult } from '../../src/cli/commands/test.js';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

const EXAMPLES = new URL('../../examples/', import.meta.url).pathname;
const APP = `${EXAMPLES}emojivoto/app`;
const LINKERD = `${EXAMPLES}emojivoto/policy`;
const SMI = `${EXAMPLES}emojivoto-smi/policy`;
const SUITES = [`${EXAMPLES}policy-tests/emojivoto-lockdown.yaml`, `${EXAMPLES}emojivoto-smi/lockdown-test.yaml`];

/**
 * Where the forms differ on purpose, by case name: what each decides. The SMI HTTPRouteGroup
 * names the EmojiService, while the Linkerd form admits web on emoji's whole gRPC port.
 */
const DIVERGENCES: Record<string, { linkerd: string; smi: string }> = {
  "web cannot call another gRPC service on emoji's port": { linkerd: 'allow', smi: 'deny grpc7' },
};

interface SuiteCase {
  name: string;
  expect: Record<string, string>;
  [key: string]: unknown;
}

const work = mkdtempSync(join(tmpdir(), 'ward-smi-equivalence-'));
after(() => rmSync(work, { recursive: true, force: true }));

/** Every case of both suites (by name, first wins), expectations reduced to the decision. */
function allCases(): SuiteCase[] {
  const seen = new Map<string, SuiteCase>();
  for (const file of SUITES) {
    const suite = parse(readFileSync(file, 'utf8')) as { tests: SuiteCase[] };
    for (const t of suite.tests) if (!seen.has(t.name)) seen.set(t.name, { ...t, expect: { decision: 'allow' } });
  }
  return [...seen.values()];
}

/** Runs the cases against `policy` and returns `decision[ denyKind]` per case name. */
function decide(cases: SuiteCase[], policy: string, label: string): Map<string, string> {
  const file = join(work, `${label}.yaml`);
  writeFileSync(file, stringify({ manifests: [APP, policy], tests: cases }));
  const { results, diagnostics } = runSuite(file);
  assert.deepEqual(diagnostics, []);
  assert.equal(results.length, cases.length);
  return new Map(
    results.map((r: TestResult) => {
      assert.ok(r.actual !== null, `${label}: ${r.name}: ${r.error}`);
      return [r.name, r.actual.decision === 'deny' ? `deny ${r.actual.denyKind}` : r.actual.decision];
    }),
  );
}

describe('examples/emojivoto-smi', () => {
  it('ward check finds no problem in the app with the SMI policy', async () => {
    const io = bufferIo();
    const status = await main(['check', '-f', APP, '-f', SMI, '-o', 'json'], io);
    const out = JSON.parse(io.stdout) as { resources: { kind: string }[]; diagnostics: unknown[] };
    assert.equal(status, 0, io.stdout);
    assert.deepEqual(out.diagnostics, []);
    assert.deepEqual(out.resources.filter((r) => ['TrafficTarget', 'HTTPRouteGroup', 'TCPRoute'].includes(r.kind)).length, 7);
  });

  it('its own ward test suite passes', async () => {
    const io = bufferIo();
    const status = await main(['test', SUITES[1] as string, '-o', 'json'], io);
    const out = JSON.parse(io.stdout) as { passed: number; failed: number };
    assert.equal(status, 0, io.stdout);
    assert.equal(out.failed, 0);
    assert.ok(out.passed >= 14);
  });

  it('decides every case of both suites as the Linkerd form does, but for the declared divergence', () => {
    const cases = allCases();
    assert.ok(cases.length >= 17, `${cases.length} cases`);
    const linkerd = decide(cases, LINKERD, 'linkerd');
    const smi = decide(cases, SMI, 'smi');
    const differences: Record<string, { linkerd: string; smi: string }> = {};
    for (const c of cases) {
      const l = linkerd.get(c.name) as string;
      const s = smi.get(c.name) as string;
      if (l !== s) differences[c.name] = { linkerd: l, smi: s };
    }
    assert.deepEqual(differences, DIVERGENCES);
    // Both forms allow and deny: the comparison is not between two constant answers.
    const decisions = new Set(linkerd.values());
    assert.ok(decisions.has('allow') && decisions.has('deny http403') && decisions.has('deny grpc7'), [...decisions].join(', '));
  });

  it("without the TrafficTargets the deny default refuses emojivoto's vote-bot too: the TrafficTarget is what admits it", () => {
    const cases = allCases().filter((c) => c.name === 'bad namespace cannot vote' || c.name === "emojivoto's vote-bot may vote through web");
    const none = decide(cases, `${EXAMPLES}emojivoto-smi/policy/admin.yaml`, 'admin-only');
    // The deny default denies everyone there, emojivoto's own vote-bot included: the TrafficTarget is what admits it.
    assert.deepEqual([...none.values()], ['deny http403', 'deny http403']);
  });

  it('ward explain names the TrafficTarget and the match that admit a caller, or would have', async () => {
    const explain = async (from: string) => {
      const io = bufferIo();
      const status = await main(
        ['explain', '-f', APP, '-f', SMI, '--to', 'deploy/web:8080', '-n', 'emojivoto', '--from-sa', from, '--http', 'GET /api/vote', '-o', 'json'],
        io,
      );
      assert.equal(status, 0, io.stderr);
      return JSON.parse(io.stdout) as { decision: string; server: unknown; route: unknown; authz: unknown; chain: { step: string; detail: string }[] };
    };
    const ok = await explain('emojivoto/vote-bot');
    assert.deepEqual(
      [ok.decision, ok.server, ok.route, ok.authz],
      [
        'allow',
        { kind: 'traffictarget', name: 'web-from-emojivoto' },
        { kind: 'httproutegroup', name: 'web-app:everything' },
        { group: 'access.smi-spec.io', kind: 'traffictarget', name: 'web-from-emojivoto' },
      ],
    );
    const bad = await explain('bad/vote-bot');
    assert.deepEqual([bad.decision, bad.route, bad.authz], ['deny', { kind: 'httproutegroup', name: 'web-app:everything' }, null]);
    assert.match(bad.chain.find((c) => c.step === 'verdict')?.detail ?? '', /closest miss: traffictarget\/web-from-emojivoto/);
    assert.match(bad.chain.find((c) => c.step === 'server')?.detail ?? '', /destination of TrafficTarget web-from-emojivoto/);
  });
});
