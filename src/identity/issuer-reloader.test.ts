import assert from 'node:assert/strict';
import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { Diagnostic } from '../core/index.js';
import type { Issuer } from './ca.js';
import { IssuerReloader, type IssuerReloaderOptions } from './issuer-reloader.js';
import { mkIdentityDir, nextCall, put, rotateIssuer, TempDirs } from './test-helpers.js';

const dirs = new TempDirs();
const reloaders: IssuerReloader[] = [];
after(() => {
  for (const r of reloaders) r.stop();
  dirs.cleanup();
});

function mkReloader(dir: string, opts: Partial<IssuerReloaderOptions> = {}) {
  const reloads = nextCall<Issuer>();
  const rejects = nextCall<readonly Diagnostic[]>();
  const r = new IssuerReloader({ dir, debounceMs: 20, pollIntervalMs: 0, onReload: reloads.callback, onReject: rejects.callback, ...opts });
  reloaders.push(r);
  return { r, reloads, rejects };
}

describe('IssuerReloader', () => {
  it('loads at start, picks up a rotated issuer, and keeps it across garbage', async () => {
    const dir = await mkIdentityDir(dirs);
    const { r, reloads, rejects } = mkReloader(dir);
    const first = await r.start();
    assert.ok(first.ok);
    const initial = await reloads.next();
    assert.equal(r.current(), initial);

    await rotateIssuer(dir, { commonName: 'issuer-2.linkerd.cluster.local' });
    const second = await reloads.next();
    assert.equal(second.subject, 'CN=issuer-2.linkerd.cluster.local');
    assert.notEqual(second.fingerprintSha256, initial.fingerprintSha256);
    assert.equal(r.current(), second);

    put(dir, 'issuer.crt', 'garbage\n');
    const problems = await rejects.next();
    assert.deepEqual(
      problems.map((d) => d.code),
      ['ID002'],
    );
    assert.equal(r.current(), second, 'the old issuer stays');

    // A key that does not match the certificate is rejected as well; the old issuer still stays.
    const third = await rotateIssuer(dir, { write: false, commonName: 'issuer-3.linkerd.cluster.local' });
    put(dir, 'issuer.crt', third.certPem);
    const mismatch = await rejects.next();
    assert.ok(mismatch.some((d) => d.code === 'ID005'));
    assert.equal(r.current(), second);
    put(dir, 'issuer.key', third.keyPem);
    assert.equal((await reloads.next()).subject, 'CN=issuer-3.linkerd.cluster.local');
  });

  it('rejects an issuer from another trust anchor, keeping the old one', async () => {
    const dir = await mkIdentityDir(dirs);
    const other = await mkIdentityDir(dirs);
    const { r, reloads, rejects } = mkReloader(dir);
    await r.start();
    const initial = await reloads.next();
    copyFileSync(join(other, 'issuer.crt'), join(dir, 'issuer.crt'));
    copyFileSync(join(other, 'issuer.key'), join(dir, 'issuer.key'));
    const problems = await rejects.next();
    assert.deepEqual(
      problems.map((d) => d.code),
      ['ID006'],
    );
    assert.equal(r.current(), initial);
    // Rotating the anchors along with it is accepted.
    copyFileSync(join(other, 'ca.crt'), join(dir, 'ca.crt'));
    const next = await reloads.next();
    assert.notEqual(next.fingerprintSha256, initial.fingerprintSha256);
  });

  it('comes up when the files appear after a failed start', async () => {
    const dir = dirs.make();
    const source = await mkIdentityDir(dirs);
    const { r, reloads, rejects } = mkReloader(dir);
    const first = await r.start();
    assert.equal(first.ok, false);
    assert.deepEqual(
      (await rejects.next()).map((d) => d.code),
      ['ID001', 'ID001', 'ID001'],
    );
    assert.equal(r.current(), undefined);
    for (const f of ['ca.crt', 'issuer.crt', 'issuer.key']) copyFileSync(join(source, f), join(dir, f));
    const loaded = await reloads.next();
    assert.equal(r.current(), loaded);
  });

  it('polls when not watching, reports a bad write once, and stops', async () => {
    const dir = await mkIdentityDir(dirs);
    const { r, reloads, rejects } = mkReloader(dir, { watch: false, pollIntervalMs: 20 });
    await r.start();
    const initial = await reloads.next();
    put(dir, 'issuer.key', 'not a key');
    assert.deepEqual(
      (await rejects.next()).map((d) => d.code),
      ['ID003'],
    );
    // Several more polls happen; the same bad content is not reported again.
    await assert.rejects(rejects.next(200), /no call within 200 ms/, 'reported twice');
    assert.equal(r.current(), initial);
    await rotateIssuer(dir);
    const rotated = await reloads.next();
    assert.equal(r.current(), rotated);
    r.stop();
    rmSync(join(dir, 'issuer.crt'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(r.current(), rotated, 'no reload after stop');
  });

  it('reload() is serialized and idempotent for unchanged files', async () => {
    const dir = await mkIdentityDir(dirs);
    const { r, reloads } = mkReloader(dir, { watch: false });
    await r.start();
    const initial = await reloads.next();
    await Promise.all([r.reload(), r.reload(), r.reload()]);
    assert.equal(r.current(), initial);
    await assert.rejects(reloads.next(100), /no call within 100 ms/);
  });
});
