import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createPrivateKey, verify, webcrypto, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect, createServer, type TLSSocket } from 'node:tls';
import { Backoff } from '../shared/index.js';
import type { CertificateAuthority, CertifyRequest, CertifyResult } from './certify.js';
import { OIDS, parseCsr } from './csr.js';
import { ECDSA_P256_SHA256 } from './keys.js';
import { encodePem } from './pem.js';
import { idOf, mkCa, mkCsr, mkIdentityDir, nextCall, openssl, put, TempDirs, tokenFor } from './test-helpers.js';
import {
  createCsr,
  generateWorkloadKey,
  type RenewalFailure,
  type Timers,
  type WorkloadCertificate,
  WorkloadIdentity,
  type WorkloadIdentityOptions,
} from './workload.js';
import { x509 as loadX509, type X509 } from './x509.js';

/** The library, for reference objects (tests may load it). */
const x509 = loadX509();
const dirs = new TempDirs();
const started: WorkloadIdentity[] = [];
after(() => {
  for (const w of started) w.stop();
  dirs.cleanup();
});

const HOUR = 3_600_000;
const WEB = idOf('default', 'web');

/** Timers that only fire when the test says so. */
class FakeTimers implements Timers {
  pending: { id: number; fn: () => void; ms: number }[] = [];
  #next = 1;
  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.#next++;
    this.pending.push({ id, fn, ms });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.pending = this.pending.filter((t) => t.id !== handle);
  }
  /** The single pending timer's delay. */
  delay(): number {
    assert.equal(this.pending.length, 1, `pending timers: ${this.pending.map((t) => t.ms).join(', ')}`);
    return (this.pending[0] as { ms: number }).ms;
  }
  fire(): void {
    const t = this.pending.shift();
    assert.ok(t, 'no pending timer');
    t.fn();
  }
}

let dir: string;
let ca: CertificateAuthority;
before(async () => {
  dir = await mkIdentityDir(dirs);
  ca = await mkCa(dir);
});

function setup(opts: Partial<WorkloadIdentityOptions> & { authority?: CertificateAuthority } = {}) {
  const clock = { now: Date.now() };
  const timers = new FakeTimers();
  const rotated = nextCall<WorkloadCertificate>();
  const failed = nextCall<RenewalFailure>();
  const control: { fail: CertifyResult | Error | { code: string } | undefined; requests: CertifyRequest[] } = { fail: undefined, requests: [] };
  const authority = opts.authority ?? ca;
  const w = new WorkloadIdentity({
    identity: WEB,
    tokenSource: () => tokenFor(dir, 'default', 'web', clock.now),
    certify: (req) => {
      control.requests.push(req);
      const f = control.fail;
      if (f instanceof Error || (f !== undefined && !('ok' in f))) return Promise.reject(f);
      if (f !== undefined) return Promise.resolve(f);
      return authority.certify(req, clock.now);
    },
    trustAnchorsPem: readAnchors(),
    now: () => clock.now,
    timers,
    backoff: new Backoff({ minMs: 100, maxMs: 1000, jitter: 0 }),
    onRotated: rotated.callback,
    onFailure: failed.callback,
    ...opts,
  });
  started.push(w);
  return { w, clock, timers, rotated, failed, control };
}

const readAnchors = () => readFileSync(join(dir, 'ca.crt'), 'utf8');

const serialOf = (c: WorkloadCertificate) => new X509Certificate(c.certPem).serialNumber;

describe('createCsr', () => {
  it('builds a DER CSR with CN = the single DNS SAN = identity, signed by the key', async () => {
    const der = await createCsr(WEB, await generateWorkloadKey());
    assert.equal(der[0], 0x30);
    const csr = new x509.Pkcs10CertificateRequest(der);
    assert.equal(csr.subject, `CN=${WEB}`);
    assert.equal(await csr.verify(), true);
    const san = new x509.SubjectAlternativeNameExtension((csr.getExtension('2.5.29.17') as X509.Extension).rawData);
    assert.deepEqual(san.names.toJSON(), [{ type: 'dns', value: WEB }]);
    const text = openssl(['req', '-inform', 'DER', '-in', put(dirs.make(), 'csr.der', der), '-noout', '-verify', '-text']);
    assert.equal(text.status, 0, text.output);
    assert.match(text.output, /ASN1 OID: prime256v1/);
  });

  it('is read by parseCsr and verified by openssl (PEM), with the SAN shown', async () => {
    const key = await generateWorkloadKey();
    const der = await createCsr(WEB, key);
    const csr = parseCsr(der);
    assert.deepEqual(csr.commonNames, [WEB]);
    assert.deepEqual(csr.subjectAltNames, [[{ type: 'dns', value: WEB }]]);
    assert.deepEqual(
      csr.extensions.map((e) => [e.oid, e.critical]),
      [[OIDS.subjectAltName, false]],
    );
    assert.equal(csr.signatureAlgorithm, OIDS.ecdsaWithSha256);
    assert.ok(verify('sha256', csr.infoDer, { key: key.publicKey, dsaEncoding: 'der' }, csr.signature));
    // openssl reports the verification on stderr (the helper keeps only stdout on success).
    const req = (pem: string) =>
      spawnSync('openssl', ['req', '-in', put(dirs.make(), 'csr.pem', pem), '-noout', '-verify', '-text'], { encoding: 'utf8', timeout: 10_000 });
    const shown = req(encodePem('CERTIFICATE REQUEST', der));
    assert.equal(shown.status, 0, shown.stderr);
    assert.match(shown.stderr, /self-signature verify OK/);
    const name = WEB.replaceAll('.', '\\.');
    assert.match(shown.stdout, new RegExp(`Subject: CN = ${name}\n`));
    assert.match(shown.stdout, new RegExp(`Requested Extensions:\\s+X509v3 Subject Alternative Name: \\s+DNS:${name}\n`));
    assert.match(shown.stdout, /Signature Algorithm: ecdsa-with-SHA256/);
    // The check bites: the same request with one byte of the signed part changed does not verify.
    const tampered = der.slice();
    const at = Buffer.from(tampered).indexOf(Buffer.from('web.default'));
    tampered[at] = 'W'.charCodeAt(0);
    // (openssl 3.0 exits 0 either way, hence the checks on its message.)
    const bad = req(encodePem('CERTIFICATE REQUEST', tampered));
    assert.match(bad.stderr, /self-signature verify failure/);
    assert.doesNotMatch(bad.stderr, /verify OK/);
  });

  it('encodes exactly the request info the @peculiar/x509 generator did', async () => {
    for (const identity of [WEB, 'under_score.example', `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.svc.cluster.local`]) {
      const key = await generateWorkloadKey();
      // The library signs with WebCrypto keys: the same key, imported.
      const keys = {
        privateKey: await webcrypto.subtle.importKey('pkcs8', key.privateKey.export({ type: 'pkcs8', format: 'der' }), ECDSA_P256_SHA256, false, ['sign']),
        publicKey: await webcrypto.subtle.importKey('spki', key.publicKey.export({ type: 'spki', format: 'der' }), ECDSA_P256_SHA256, true, ['verify']),
      };
      const reference = await x509.Pkcs10CertificateRequestGenerator.create({
        name: [{ CN: [identity] }],
        keys,
        signingAlgorithm: ECDSA_P256_SHA256,
        extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: identity }])],
      });
      const der = await createCsr(identity, key);
      const ours = parseCsr(der);
      const theirs = parseCsr(new Uint8Array(reference.rawData));
      assert.equal(Buffer.from(ours.infoDer).toString('hex'), Buffer.from(theirs.infoDer).toString('hex'), identity);
      assert.equal(ours.signatureAlgorithm, theirs.signatureAlgorithm);
      const parsed = new x509.Pkcs10CertificateRequest(der);
      assert.equal(await parsed.verify(), true);
      assert.equal(parsed.subject, `CN=${identity}`);
    }
  });

  it('refuses an identity that is not ASCII (a dNSName is an IA5String)', async () => {
    await assert.rejects(createCsr('wéb.example', await generateWorkloadKey()), RangeError);
  });
});

describe('WorkloadIdentity', () => {
  it('obtains a certificate that chains to the anchors and renews at 70 % of its validity', async () => {
    const { w, clock, timers, rotated } = setup();
    assert.equal(w.current(), undefined);
    const first = await w.start();
    assert.equal(await rotated.next(), first);
    assert.equal(w.current(), first);
    assert.equal(first.identity, WEB);
    const out = dirs.make();
    const v = openssl(['verify', '-CAfile', join(dir, 'ca.crt'), '-untrusted', put(out, 'chain.pem', first.chainPem), put(out, 'leaf.pem', first.certPem)]);
    assert.equal(v.status, 0, v.output);
    assert.ok(new X509Certificate(first.certPem).checkPrivateKey(createPrivateKey(first.keyPem)));
    const remaining = first.notAfterMs - clock.now;
    assert.ok(Math.abs(timers.delay() - 0.7 * remaining) < 1, `${timers.delay()} vs ${0.7 * remaining}`);

    clock.now += timers.delay();
    timers.fire();
    const second = await rotated.next();
    assert.equal(w.current(), second);
    assert.notEqual(serialOf(second), serialOf(first));
    assert.equal(second.keyPem, first.keyPem, 'the key is generated once');
    assert.ok(second.notAfterMs > first.notAfterMs);
    assert.ok(Math.abs(timers.delay() - 0.7 * (second.notAfterMs - clock.now)) < 1);
  });

  it('bounds the renewal delay to [minRefresh, maxRefresh]', async () => {
    const short = await mkCa(dir, { issuanceLifetimeMs: 5000, clockSkewMs: 0 });
    const a = setup({ authority: short });
    await a.w.start();
    assert.equal(a.timers.delay(), 10_000);
    const b = setup({ maxRefreshMs: HOUR });
    await b.w.start();
    assert.equal(b.timers.delay(), HOUR);
    const c = setup({ authority: short, minRefreshMs: 1000 });
    await c.w.start();
    assert.ok(Math.abs(c.timers.delay() - 0.7 * ((c.w.current() as WorkloadCertificate).notAfterMs - c.clock.now)) < 1);
  });

  it('keeps the old certificate and backs off exponentially while renewals fail', async () => {
    const { w, clock, timers, rotated, failed, control } = setup();
    const first = await w.start();
    await rotated.next();
    control.fail = { ok: false, code: 'UNAVAILABLE', reason: 'no-issuer', message: 'Certify: issuer not initialized' };
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      clock.now += timers.delay();
      timers.fire();
      const f = await failed.next();
      assert.equal(f.code, 'UNAVAILABLE');
      assert.equal(f.message, 'Certify: issuer not initialized');
      delays.push(f.retryInMs);
      assert.equal(timers.delay(), f.retryInMs);
      assert.equal(w.current(), first);
    }
    assert.deepEqual(delays, [100, 200, 400, 800, 1000]);
    // A transport error (thrown, with a gRPC-style code) counts the same.
    control.fail = Object.assign(new Error('connect ECONNREFUSED'), { code: 'UNAVAILABLE' });
    timers.fire();
    assert.deepEqual(await failed.next(), { code: 'UNAVAILABLE', message: 'connect ECONNREFUSED', retryInMs: 1000 });
    control.fail = new Error('boom');
    timers.fire();
    assert.equal((await failed.next()).code, 'UNKNOWN');
    // Recovery resets the backoff.
    control.fail = undefined;
    timers.fire();
    const renewed = await rotated.next();
    assert.notEqual(serialOf(renewed), serialOf(first));
    control.fail = { ok: false, code: 'INTERNAL', reason: 'internal', message: 'x' };
    clock.now += timers.delay();
    timers.fire();
    assert.equal((await failed.next()).retryInMs, 100);
    assert.equal(w.current(), renewed);
  });

  it('retries the first certificate until it arrives', async () => {
    const { w, timers, failed, control } = setup();
    control.fail = { ok: false, code: 'UNAVAILABLE', reason: 'no-issuer', message: 'not yet' };
    const start = w.start();
    await failed.next();
    assert.equal(w.current(), undefined);
    control.fail = undefined;
    timers.fire();
    const cert = await start;
    assert.equal(w.current(), cert);
  });

  it('stop() cancels renewals and rejects a pending start', async () => {
    const { w, timers, failed, control } = setup();
    control.fail = { ok: false, code: 'UNAVAILABLE', reason: 'no-issuer', message: 'not yet' };
    const start = w.start();
    await failed.next();
    w.stop();
    await assert.rejects(start, { code: 'ERR_IDENTITY_STOPPED' });
    assert.equal(timers.pending.length, 0);
  });

  it('refuses certificates that do not chain to its anchors, name another identity or certify another key', async () => {
    const foreignDir = await mkIdentityDir(dirs);
    const foreign = await mkCa(foreignDir);
    const a = setup({ authority: foreign, tokenSource: () => tokenFor(foreignDir, 'default', 'web') });
    void a.w.start();
    const f1 = await a.failed.next();
    assert.equal(f1.code, 'BAD_CERTIFICATE');
    assert.match(f1.message, /not signed by any trust anchor/);
    assert.equal(a.w.current(), undefined);

    // A CA answering with a certificate for someone else.
    const b = setup();
    const api = idOf('default', 'api');
    const apiCsr = await createCsr(api, await generateWorkloadKey());
    const apiToken = tokenFor(dir, 'default', 'api');
    const wrongIdentity = new WorkloadIdentity({
      identity: WEB,
      tokenSource: () => tokenFor(dir, 'default', 'web'),
      certify: () => ca.certify({ identity: api, token: apiToken, csrDer: apiCsr }),
      trustAnchorsPem: readAnchors(),
      timers: b.timers,
      onFailure: b.failed.callback,
    });
    started.push(wrongIdentity);
    void wrongIdentity.start();
    assert.match((await b.failed.next()).message, new RegExp(`the leaf does not carry the identity ${WEB} \\(SANs: ${api}\\)`));

    // The right identity, but a certificate for a different key.
    const c = setup();
    const otherCsr = await mkCsr({ cn: WEB, sans: [{ type: 'dns', value: WEB }] });
    const otherKey = new WorkloadIdentity({
      identity: WEB,
      tokenSource: () => tokenFor(dir, 'default', 'web'),
      certify: (req) => ca.certify({ ...req, csrDer: otherCsr }),
      trustAnchorsPem: readAnchors(),
      timers: c.timers,
      onFailure: c.failed.callback,
    });
    started.push(otherKey);
    void otherKey.start();
    assert.equal((await c.failed.next()).message, 'the CA returned an unusable certificate: the leaf certifies a different key');
  });

  it('accepts a gRPC-client-shaped certify (certificate, or a rejection with a code)', async () => {
    const timers = new FakeTimers();
    const failed = nextCall<RenewalFailure>();
    let refuse = true;
    const w = new WorkloadIdentity({
      identity: WEB,
      tokenSource: () => tokenFor(dir, 'default', 'web'),
      certify: async (req) => {
        const r = await ca.certify(refuse ? { ...req, token: new Uint8Array([1]) } : req);
        if (!r.ok) throw Object.assign(new Error(`${r.code}: ${r.message}`), { code: r.code });
        return { leafDer: r.leafDer, chainDer: r.chainDer, validUntilMs: r.validUntilMs };
      },
      trustAnchorsPem: readAnchors(),
      timers,
      onFailure: failed.callback,
    });
    started.push(w);
    const start = w.start();
    assert.equal((await failed.next()).code, 'INVALID_ARGUMENT');
    refuse = false;
    timers.fire();
    assert.equal((await start).identity, WEB);
  });

  it('re-reads the token for every request and reuses one CSR', async () => {
    let reads = 0;
    const clockRef = { now: 0 };
    const { w, clock, timers, rotated, control } = setup({
      // An async source, like reading a projected token file.
      tokenSource: () => {
        reads++;
        return Promise.resolve(tokenFor(dir, 'default', 'web', clockRef.now));
      },
    });
    clockRef.now = clock.now;
    await w.start();
    await rotated.next();
    clock.now += timers.delay();
    clockRef.now = clock.now;
    timers.fire();
    await rotated.next();
    assert.equal(reads, 2);
    assert.equal(control.requests.length, 2);
    assert.deepEqual(control.requests[0]?.csrDer, control.requests[1]?.csrDer);
  });

  it('serves mutual TLS between two workloads with node:tls', async () => {
    const api = idOf('default', 'api');
    const anchors = readAnchors();
    const mk = async (identity: string, sa: string) => {
      const wi = new WorkloadIdentity({
        identity,
        tokenSource: () => tokenFor(dir, 'default', sa),
        certify: (req) => ca.certify(req),
        trustAnchorsPem: anchors,
      });
      started.push(wi);
      return wi.start();
    };
    const server = await mk(api, 'api');
    const client = await mk(WEB, 'web');
    const srv = createServer(
      { cert: server.certPem + server.chainPem, key: server.keyPem, ca: anchors, requestCert: true, rejectUnauthorized: true, minVersion: 'TLSv1.3' },
      (s) => {
        const peer = s.getPeerCertificate();
        s.end(`hello ${peer.subjectaltname}`);
      },
    );
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    try {
      const port = (srv.address() as { port: number }).port;
      const reply = await new Promise<string>((resolve, reject) => {
        const sock: TLSSocket = connect(
          { host: '127.0.0.1', port, servername: api, cert: client.certPem + client.chainPem, key: client.keyPem, ca: anchors },
          () => {
            assert.equal(sock.authorized, true, String(sock.authorizationError));
          },
        );
        let data = '';
        sock.setEncoding('utf8');
        sock.on('data', (d: string) => {
          data += d;
        });
        sock.on('end', () => resolve(data));
        sock.on('error', reject);
        sock.setTimeout(5000, () => sock.destroy(new Error('timeout')));
      });
      assert.equal(reply, `hello DNS:${WEB}`);
    } finally {
      srv.close();
    }
  });
});
