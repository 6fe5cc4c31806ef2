/**
 * The bundled example stays clean and its policy suites keep passing, in both policy forms.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

const DIR = new URL('../../examples/emojivoto/', import.meta.url).pathname;

describe('examples/emojivoto', () => {
  for (const form of ['policy', 'legacy-policy']) {
    it(`${form}: ward check finds no problem at all`, async () => {
      const io = bufferIo();
      const status = await main(['check', '-f', `${DIR}app`, '-f', `${DIR}${form}`, '-o', 'json'], io);
      const out = JSON.parse(io.stdout) as { resources: { admitted: boolean }[]; diagnostics: unknown[] };
      assert.equal(status, 0);
      assert.deepEqual(out.diagnostics, []);
      assert.ok(out.resources.length > 20 && out.resources.every((r) => r.admitted));
    });
  }
  for (const suite of ['lockdown.yaml', 'legacy-lockdown.yaml']) {
    it(`tests/${suite} passes`, async () => {
      const io = bufferIo();
      const status = await main(['test', `${DIR}tests/${suite}`, '-o', 'json'], io);
      const out = JSON.parse(io.stdout) as { passed: number; failed: number };
      assert.equal(status, 0, io.stdout);
      assert.equal(out.failed, 0);
      assert.ok(out.passed >= 13);
    });
  }
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
