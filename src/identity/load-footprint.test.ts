/**
 * The proxy imports this module's public surface in every pod, so the workload path (and the
 * CA's issuing path) must not load `@peculiar/x509` and its dependency tree (reflect-metadata,
 * tsyringe, the asn1 schema packages: ~230 CommonJS modules, ~20 MB RSS). Checked in a fresh
 * process, since this test process has loaded the library already.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { CertificateAuthority } from './certify.js';
import { certificatesToPem, encodePem } from './pem.js';
import { idOf, mkCa, mkIdentityDir, TempDirs, tokenFor } from './test-helpers.js';
import { createCsr, generateWorkloadKey } from './workload.js';

const dirs = new TempDirs();
after(() => dirs.cleanup());

const WEB = idOf('default', 'web');
/** CommonJS modules that belong to the X.509 library's dependency tree. */
const LIBRARY_MODULE = /@peculiar|reflect-metadata|tsyringe|asn1/;

/**
 * Imports `index.ts` (and `chain.ts`, which WorkloadIdentity uses), then does the workload
 * steps: a key and CSR, parsing and verifying the certificate passed in, inspecting it, and a
 * full CA + WorkloadIdentity round trip over the identity directory passed in. With `loadLibrary`,
 * also loads the library on purpose (the control that shows the check can fail). Prints the
 * outcome and `require.cache`'s keys as JSON.
 */
const CHILD = `
import { createRequire } from 'node:module';
const input = JSON.parse(process.env.WARD_FOOTPRINT_INPUT);
const id = await import(new URL('index.ts', input.moduleUrl));
const chain = await import(new URL('chain.ts', input.moduleUrl));
if (input.loadLibrary) {
  const lib = await import(new URL('x509.ts', input.moduleUrl));
  if (typeof lib.x509 === 'function') lib.x509();
}
const key = await id.generateWorkloadKey();
const csr = await id.createCsr(input.identity, key);
const certs = chain.parseCertificatesPem(input.chainPem);
const anchors = chain.parseCertificatesPem(input.anchorsPem);
const problem = certs.ok && anchors.ok ? chain.verifyChain(certs.certs, anchors.certs, Date.now()) : 'unparsable';
const report = id.inspectCertificate(input.chainPem, input.anchorsPem);
const issuer = await id.loadIssuer(input.dir);
if (!issuer.ok) throw new Error('issuer: ' + JSON.stringify(issuer.diagnostics));
const ca = new id.CertificateAuthority({
  issuer: issuer.value,
  authenticator: new id.LocalTokenAuthenticator({ keyPem: input.tokenKeyPem }),
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
});
const workload = new id.WorkloadIdentity({
  identity: input.identity,
  tokenSource: () => new TextEncoder().encode(input.token),
  certify: (req) => ca.certify(req),
  trustAnchorsPem: input.anchorsPem,
});
const issued = await workload.start();
workload.stop();
console.log(JSON.stringify({
  csrBytes: csr.length,
  problem: problem ?? null,
  subject: report.subject,
  verified: report.verified,
  issuedFor: issued.identity,
  modules: Object.keys(createRequire(import.meta.url).cache),
}));
`;

interface ChildOutput {
  csrBytes: number;
  problem: string | null;
  subject: string;
  verified: boolean;
  issuedFor: string;
  modules: string[];
}

let input: Record<string, unknown>;

before(async () => {
  const dir = await mkIdentityDir(dirs);
  const ca: CertificateAuthority = await mkCa(dir);
  const res = await ca.certify({ identity: WEB, token: tokenFor(dir, 'default', 'web'), csrDer: await createCsr(WEB, await generateWorkloadKey()) });
  assert.ok(res.ok);
  input = {
    moduleUrl: new URL('./', import.meta.url).href,
    identity: WEB,
    dir,
    chainPem: encodePem('CERTIFICATE', res.leafDer) + certificatesToPem(res.chainDer),
    anchorsPem: readFileSync(join(dir, 'ca.crt'), 'utf8'),
    tokenKeyPem: readFileSync(join(dir, 'token.key'), 'utf8'),
    token: new TextDecoder().decode(tokenFor(dir, 'default', 'web')),
  };
});

function runChild(loadLibrary: boolean): ChildOutput {
  const out = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', CHILD], {
    cwd: new URL('../../', import.meta.url).pathname,
    // Without NODE_TEST_CONTEXT, which would make the child report to this test runner.
    env: { ...process.env, NODE_TEST_CONTEXT: undefined, WARD_FOOTPRINT_INPUT: JSON.stringify({ ...input, loadLibrary }) },
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(out.status, 0, `child failed:\n${out.stderr}`);
  return JSON.parse(out.stdout.trim().split('\n').at(-1) ?? '') as ChildOutput;
}

describe('load footprint', () => {
  it('the public surface and the workload and issuing paths do not load @peculiar/x509', () => {
    const out = runChild(false);
    assert.equal(out.problem, null);
    assert.equal(out.subject, `CN=${WEB}`);
    assert.equal(out.verified, true);
    assert.equal(out.issuedFor, WEB);
    assert.ok(out.csrBytes > 100);
    assert.deepEqual(
      out.modules.filter((m) => LIBRARY_MODULE.test(m)),
      [],
    );
  });

  it('sees the library when it is loaded (the check above can fail)', () => {
    const out = runChild(true);
    const library = out.modules.filter((m) => LIBRARY_MODULE.test(m));
    for (const name of ['@peculiar/x509', 'reflect-metadata', 'tsyringe', '@peculiar/asn1-schema']) {
      assert.ok(
        library.some((m) => m.includes(`/node_modules/${name}/`)),
        `${name} not seen`,
      );
    }
  });
});
