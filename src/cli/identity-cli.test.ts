import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { Command, CommanderError } from '@commander-js/extra-typings';
import { CertificateAuthority, createCsr, generateWorkloadKey, LocalTokenAuthenticator, loadIssuer } from '../identity/index.js';
import { registerIdentityCommands } from './commands/identity.js';
import { bufferIo, EXIT, UsageError } from './io.js';

const root = mkdtempSync(join(tmpdir(), 'ward-identity-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = () => join(root, `d${n++}`);

/** Runs `ward identity …` in-process with the same error handling as main.ts. */
async function ward(args: string[]) {
  const io = bufferIo();
  const result = { status: EXIT.ok as number };
  const prog = new Command('ward').exitOverride().configureOutput({ writeOut: (s) => io.out(s), writeErr: (s) => io.err(s) });
  registerIdentityCommands(prog, io, result);
  try {
    await prog.parseAsync(['identity', ...args], { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) result.status = EXIT.usage;
    else if (e instanceof UsageError) {
      io.err(`error: ${e.message}\n`);
      result.status = EXIT.usage;
    } else throw e;
  }
  return { status: result.status, stdout: io.stdout, stderr: io.stderr };
}

describe('ward identity init', () => {
  it('writes the files and says what it wrote', async () => {
    const out = fresh();
    const r = await ward(['init', '--out', out, '--trust-domain', 'example.org', '--anchor-ttl', '48h', '--issuer-ttl', '24h']);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^wrote identity material for trust domain example\.org to /);
    for (const f of ['ca.crt', 'ca.key', 'issuer.crt', 'issuer.key', 'token.key']) assert.match(r.stdout, new RegExp(`${f}\\s+0(600|644)`));
    assert.match(r.stdout, /trust anchor\s+CN=root\.linkerd\.example\.org\s+expires /);
    assert.match(r.stdout, /issuer\s+CN=identity\.linkerd\.example\.org\s+expires /);
    assert.equal(statSync(join(out, 'issuer.key')).mode & 0o777, 0o600);
    const verify = execFileSync('openssl', ['verify', '-CAfile', join(out, 'ca.crt'), join(out, 'issuer.crt')], { encoding: 'utf8' });
    assert.match(verify, /OK/);
    const issuer = await loadIssuer(out);
    assert.ok(issuer.ok);
    const hours = (issuer.value.notAfterMs - Date.now()) / 3_600_000;
    assert.ok(hours > 23.9 && hours <= 24, String(hours));
  });

  it('refuses to overwrite (exit 2) unless --force', async () => {
    const out = fresh();
    assert.equal((await ward(['init', '--out', out])).status, 0);
    const again = await ward(['init', '--out', out]);
    assert.equal(again.status, EXIT.usage);
    assert.match(again.stderr, /error ID009 .*ca\.crt already exists; refusing to overwrite it\n {2}hint: pass --force/);
    assert.equal((await ward(['init', '--out', out, '--force'])).status, 0);
  });

  it('rejects bad flags with exit 2 and a precise message', async () => {
    const cases: [string[], RegExp][] = [
      [['init', '--out', fresh(), '--anchor-ttl', '1y'], /invalid --anchor-ttl "1y": want a Go duration such as 8760h/],
      [['init', '--out', fresh(), '--issuer-ttl', '-5h'], /invalid --issuer-ttl "-5h": must be positive/],
      [['init', '--out', fresh(), '--issuer-ttl', '30s'], /must be at least 1m/],
      [['init', '--out', fresh(), '--trust-domain', 'Cluster_Local'], /invalid --trust-domain "Cluster_Local"/],
      [['init'], /required option '--out <dir>' not specified/],
    ];
    for (const [args, re] of cases) {
      const r = await ward(args);
      assert.equal(r.status, EXIT.usage, args.join(' '));
      assert.match(r.stderr, re, args.join(' '));
    }
  });
});

describe('ward identity token and inspect', () => {
  it('mints a token the CA accepts, and inspects the certificate it gets', async () => {
    const dir = fresh();
    assert.equal((await ward(['init', '--out', dir])).status, 0);
    const tok = await ward(['token', '--identity-dir', dir, '--sa', 'emojivoto/web', '--pod', 'emojivoto/web-abc12', '--ttl', '10m']);
    assert.equal(tok.status, 0, tok.stderr);
    assert.match(tok.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/);
    const claims = JSON.parse(Buffer.from(tok.stdout.split('.')[1] as string, 'base64url').toString()) as {
      sub: string;
      exp: number;
      iat: number;
      'kubernetes.io': unknown;
    };
    assert.equal(claims.sub, 'system:serviceaccount:emojivoto:web');
    assert.equal(claims.exp - claims.iat, 600);
    assert.deepEqual(claims['kubernetes.io'], { namespace: 'emojivoto', serviceaccount: { name: 'web' }, pod: { name: 'web-abc12' } });

    const issuer = await loadIssuer(dir);
    assert.ok(issuer.ok);
    const ca = new CertificateAuthority({
      issuer: issuer.value,
      authenticator: new LocalTokenAuthenticator({ keyPem: readFileSync(join(dir, 'token.key'), 'utf8') }),
      trustDomain: 'cluster.local',
      controlPlaneNamespace: 'linkerd',
    });
    const identity = 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local';
    const res = await ca.certify({ identity, token: new TextEncoder().encode(tok.stdout), csrDer: await createCsr(identity, await generateWorkloadKey()) });
    assert.ok(res.ok, JSON.stringify(res));
    const server = await ca.issueServerCertificate([identity]);
    const leaf = join(dir, 'leaf.pem');
    writeFileSync(leaf, server.certPem + server.chainPem);

    const text = await ward(['inspect', leaf, '--anchor', join(dir, 'ca.crt')]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, new RegExp(`^Subject: {7}CN=${identity.replaceAll('.', '\\.')}\n`));
    assert.match(text.stdout, /^SANs: {10}DNS:web\.emojivoto/m);
    assert.match(text.stdout, /^CA: {12}no$/m);
    assert.match(text.stdout, /^Key: {11}ECDSA P-256$/m);
    assert.match(text.stdout, /^Ext key usage: serverAuth, clientAuth$/m);
    assert.match(text.stdout, /^Chain: {9}2 certificates$/m);
    assert.match(text.stdout, /^Verified: {6}yes, against .*ca\.crt$/m);
    assert.match(text.stdout, /^ {2}\[1\] CN=identity\.linkerd\.cluster\.local {2}issued by CN=root\.linkerd\.cluster\.local {2}CA {2}expires /m);

    const js = await ward(['inspect', leaf, '-o', 'json']);
    assert.equal(js.status, 0);
    const report = JSON.parse(js.stdout) as { file: string; sans: string[]; chain: unknown[]; verified?: boolean };
    assert.equal(report.file, leaf);
    assert.deepEqual(report.sans, [`DNS:${identity}`]);
    assert.equal(report.chain.length, 2);
    assert.equal('verified' in report, false);

    // Against another anchor: exit 1, both formats.
    const other = fresh();
    await ward(['init', '--out', other]);
    const bad = await ward(['inspect', leaf, '--anchor', join(other, 'ca.crt')]);
    assert.equal(bad.status, EXIT.failed);
    assert.match(bad.stdout, /^Verified: {6}no: .*not signed by any trust anchor/m);
    const badJson = await ward(['inspect', leaf, '--anchor', join(other, 'ca.crt'), '-o', 'json']);
    assert.equal(badJson.status, EXIT.failed);
    assert.equal((JSON.parse(badJson.stdout) as { verified: boolean }).verified, false);
  });

  it('reports usage problems with exit 2', async () => {
    const dir = fresh();
    await ward(['init', '--out', dir]);
    const garbage = join(dir, 'garbage.pem');
    writeFileSync(garbage, 'hello');
    const cases: [string[], RegExp][] = [
      [['inspect', join(dir, 'missing.pem')], /cannot read certificate file .*missing\.pem: no such file/],
      [['inspect', garbage], /garbage\.pem: no PEM "CERTIFICATE" block found/],
      [['inspect', join(dir, 'ca.crt'), '--anchor', garbage], /garbage\.pem: no PEM "CERTIFICATE" block found/],
      [['inspect', join(dir, 'ca.crt'), '-o', 'yaml'], /argument 'yaml' is invalid/],
      [['token', '--identity-dir', dir, '--sa', 'web'], /invalid --sa "web": want NAMESPACE\/NAME/],
      [['token', '--identity-dir', dir, '--sa', 'default/Web'], /name "Web" is not a DNS-1123 label/],
      [['token', '--identity-dir', dir, '--sa', 'default/web', '--pod', 'other/web-1'], /--pod namespace "other" differs from the ServiceAccount's "default"/],
      [['token', '--identity-dir', dir, '--sa', 'default/web', '--ttl', 'soon'], /invalid --ttl "soon"/],
      [['token', '--identity-dir', join(dir, 'nope'), '--sa', 'default/web'], /cannot read token key .*nope\/token\.key: no such file/],
      [['token', '--sa', 'default/web'], /required option '--identity-dir <dir>' not specified/],
    ];
    for (const [args, re] of cases) {
      const r = await ward(args);
      assert.equal(r.status, EXIT.usage, args.join(' '));
      assert.match(r.stderr, re, args.join(' '));
    }
    const podOnly = await ward(['token', '--identity-dir', dir, '--sa', 'default/web', '--pod', 'web-1']);
    assert.equal(podOnly.status, 0, podOnly.stderr);
  });
});
