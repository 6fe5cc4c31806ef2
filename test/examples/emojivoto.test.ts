/**
 * The bundled example stays clean and its policy suites keep passing, in both policy forms.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

const EXAMPLES = new URL('../../examples/', import.meta.url).pathname;
const DIR = `${EXAMPLES}emojivoto/`;

describe('examples/emojivoto', () => {
  for (const form of ['emojivoto/policy', 'emojivoto-legacy-policy']) {
    it(`${form}: ward check finds no problem at all`, async () => {
      const io = bufferIo();
      const status = await main(['check', '-f', `${DIR}app`, '-f', `${EXAMPLES}${form}`, '-o', 'json'], io);
      const out = JSON.parse(io.stdout) as { resources: { admitted: boolean }[]; diagnostics: unknown[] };
      assert.equal(status, 0);
      assert.deepEqual(out.diagnostics, []);
      assert.ok(out.resources.length > 20 && out.resources.every((r) => r.admitted));
    });
  }
  for (const suite of ['emojivoto-lockdown.yaml', 'emojivoto-legacy-lockdown.yaml']) {
    it(`policy-tests/${suite} passes`, async () => {
      const io = bufferIo();
      const status = await main(['test', `${EXAMPLES}policy-tests/${suite}`, '-o', 'json'], io);
      const out = JSON.parse(io.stdout) as { passed: number; failed: number };
      assert.equal(status, 0, io.stdout);
      assert.equal(out.failed, 0);
      assert.ok(out.passed >= 13);
    });
  }
  it('the directory `ward up` loads holds manifests only in app/ and policy/, and checks clean as a whole', async () => {
    // `ward up examples/emojivoto` reads every YAML/JSON file below it as a manifest, so the
    // services' own files must not be YAML or JSON.
    const data = readdirSync(DIR, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile() && /\.(ya?ml|json)$/.test(e.name))
      .map((e) => relative(DIR, join(e.parentPath, e.name)));
    assert.ok(data.length >= 9, data.join(', '));
    assert.deepEqual(
      data.filter((f) => !/^(app|policy)\/[^/]+\.yaml$/.test(f)),
      [],
    );
    const io = bufferIo();
    const status = await main(['check', '-f', DIR, '-o', 'json'], io);
    const out = JSON.parse(io.stdout) as { resources: { admitted: boolean }[]; diagnostics: unknown[] };
    assert.equal(status, 0);
    assert.deepEqual(out.diagnostics, []);
    assert.ok(out.resources.length > 20 && out.resources.every((r) => r.admitted));
  });
  it('the lockdown really locks: without the policies, the bad vote-bot is denied only by the namespace default', async () => {
    const io = bufferIo();
    const status = await main(
      ['explain', '-f', `${DIR}app`, '--to', 'deploy/web:8080', '-n', 'emojivoto', '--from-sa', 'bad/vote-bot', '--http', 'GET /', '-o', 'json'],
      io,
    );
    assert.equal(status, 0);
    const r = JSON.parse(io.stdout) as { decision: string; server: { kind: string; name: string } };
    assert.equal(r.decision, 'deny');
    assert.deepEqual(r.server, { kind: 'default', name: 'deny' });
  });
});

describe('explain decides on the target the proxy normalizes', () => {
  const explain = async (http: string) => {
    const io = bufferIo();
    const status = await main(
      ['explain', '-f', DIR, '--to', 'deploy/web:8080', '-n', 'emojivoto', '--from-sa', 'emojivoto/vote-bot', '--http', http, '-o', 'json'],
      io,
    );
    assert.equal(status, 0, io.stderr);
    return JSON.parse(io.stdout) as { decision: string; denyKind: string | null; route: { name: string } | null; chain: { step: string; detail: string }[] };
  };
  it('matches routes on the normalized path and says what the application receives', async () => {
    const plain = await explain('GET /api/vote?choice=:joy:');
    const tricked = await explain('GET /x/..//api/%76ote?choice=:joy:');
    assert.equal(tricked.decision, plain.decision);
    assert.deepEqual(tricked.route, plain.route);
    assert.match(tricked.chain.find((c) => c.step === 'request')?.detail ?? '', /normalized to \/api\/vote\?choice=:joy:/);
  });
  it('refuses what the proxy refuses, with 400', async () => {
    for (const path of ['/api/vote%2F', '/api/vote#x', '/api/..\\vote']) {
      const r = await explain(`GET ${path}`);
      assert.equal(r.decision, 'deny', path);
      assert.equal(r.denyKind, 'http400', path);
    }
  });
});
