/**
 * The controller as users run it: a real `ward controller` process on loopback with identity
 * material from `ward identity init`. A workload gets a certificate with a token minted by
 * `ward identity token`, checked independently with `openssl verify`; a proxy-style client
 * watches a port, a policy file is edited (and broken, and fixed) and the updates arrive;
 * Destination resolves a Service to its meshed endpoint.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createServer as createTlsServer, type TLSSocket, connect as tlsConnect } from 'node:tls';
import { DestinationClient, type DestinationEvent, GrpcError, IdentityClient, InboundPolicyClient } from '../../src/api/index.js';
import type { InboundServer } from '../../src/core/index.js';
import { createCsr, generateWorkloadKey, type WorkloadCertificate, WorkloadIdentity } from '../../src/identity/index.js';
import { type ControllerPorts, controllerPorts, initWorkdir, spawnController, type WardProcess, waitFor, wardSync } from './helpers.js';

const EXAMPLE = new URL('../../examples/emojivoto/', import.meta.url).pathname;
const TD = 'cluster.local';
const IDENTITY_SERVER = `linkerd-identity.linkerd.serviceaccount.identity.linkerd.${TD}`;
const DESTINATION_SERVER = `linkerd-destination.linkerd.serviceaccount.identity.linkerd.${TD}`;
const WEB_ID = `web.emojivoto.serviceaccount.identity.linkerd.${TD}`;

function pem(der: Uint8Array): string {
  const b64 = Buffer.from(der).toString('base64');
  return `-----BEGIN CERTIFICATE-----\n${b64.replace(/(.{64})/g, '$1\n').replace(/\n$/, '')}\n-----END CERTIFICATE-----\n`;
}

function authzNames(s: InboundServer): string[] {
  return s.authorizations.map((a) => `${a.meta.kind}/${a.meta.name}`).sort();
}

describe('e2e: ward controller', { timeout: 120_000 }, () => {
  let dir: string;
  let idDir: string;
  let manifests: string;
  let ctl: WardProcess;
  let ports: ControllerPorts;
  let anchor: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-e2e-'));
    ({ idDir, manifests } = initWorkdir(dir));
    anchor = readFileSync(join(idDir, 'ca.crt'), 'utf8');
    cpSync(join(EXAMPLE, 'app'), join(manifests, 'app'), { recursive: true });
    cpSync(join(EXAMPLE, 'policy'), join(manifests, 'policy'), { recursive: true });
    ctl = spawnController(manifests, idDir, '127.0.0.1');
    ports = await controllerPorts(ctl);
  });

  after(async () => {
    await ctl?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('issues a certificate for a minted token that chains to the anchor (openssl verify)', async () => {
    const tok = wardSync(['identity', 'token', '--identity-dir', idDir, '--sa', 'emojivoto/web', '--pod', 'emojivoto/web-0']);
    assert.equal(tok.status, 0, tok.stderr);
    const token = new TextEncoder().encode(tok.stdout.trim());
    const key = await generateWorkloadKey();
    const csrDer = await createCsr(WEB_ID, key);
    const client = new IdentityClient({ address: `127.0.0.1:${ports.identity}`, tls: { caPem: anchor, serverName: IDENTITY_SERVER } });
    try {
      const res = await client.certify({ identity: WEB_ID, token, csrDer });
      const leafPath = join(dir, 'leaf.pem');
      const chainPath = join(dir, 'chain.pem');
      writeFileSync(leafPath, pem(res.leafDer));
      writeFileSync(chainPath, res.chainDer.map(pem).join(''));
      const verified = execFileSync('openssl', ['verify', '-CAfile', join(idDir, 'ca.crt'), '-untrusted', chainPath, leafPath], { encoding: 'utf8' });
      assert.match(verified, /leaf\.pem: OK/);
      const leaf = new X509Certificate(pem(res.leafDer));
      assert.equal(leaf.subjectAltName, `DNS:${WEB_ID}`);
      assert.equal(res.validUntilMs, Date.parse(leaf.validTo));
      const lifeH = (Date.parse(leaf.validTo) - Date.parse(leaf.validFrom)) / 3_600_000;
      assert.ok(lifeH > 24 && lifeH < 24.1, `leaf lifetime ${lifeH} h`);

      // The same token cannot get someone else's identity.
      const otherId = `voting.emojivoto.serviceaccount.identity.linkerd.${TD}`;
      await assert.rejects(
        client.certify({ identity: otherId, token, csrDer: await createCsr(otherId, key) }),
        (e: unknown) => e instanceof GrpcError && e.code === 'FAILED_PRECONDITION',
      );
      // A forged token (signature of another key) is refused.
      const parts = tok.stdout.trim().split('.');
      const forged = new TextEncoder().encode(`${parts[0]}.${parts[1]}.${Buffer.from('x'.repeat(64)).toString('base64url')}`);
      await assert.rejects(
        client.certify({ identity: WEB_ID, token: forged, csrDer }),
        (e: unknown) => e instanceof GrpcError && e.code === 'INVALID_ARGUMENT',
      );
    } finally {
      client.close();
    }
  });

  it('a workload identity gets, renews and rotates its certificate through the API without dropping connections', async () => {
    const client = new IdentityClient({ address: `127.0.0.1:${ports.identity}`, tls: { caPem: anchor, serverName: IDENTITY_SERVER } });
    const rotations: WorkloadCertificate[] = [];
    const wl = new WorkloadIdentity({
      identity: WEB_ID,
      tokenSource: () => {
        const t = wardSync(['identity', 'token', '--identity-dir', idDir, '--sa', 'emojivoto/web', '--ttl', '10m']);
        assert.equal(t.status, 0, t.stderr);
        return new TextEncoder().encode(t.stdout.trim());
      },
      certify: (req) => client.certify(req),
      trustAnchorsPem: anchor,
      minRefreshMs: 500,
      maxRefreshMs: 1500,
      onRotated: (c) => rotations.push(c),
    });
    const first = await wl.start();
    // A mutual-TLS echo server using the first certificate; a client connected with it.
    const server = createTlsServer(
      { cert: first.certPem + first.chainPem, key: first.keyPem, ca: anchor, requestCert: true, rejectUnauthorized: true },
      (sock) => sock.pipe(sock),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    const dial = () =>
      new Promise<TLSSocket>((resolve, reject) => {
        const cur = wl.current() as WorkloadCertificate;
        const s = tlsConnect({
          host: '127.0.0.1',
          port,
          servername: WEB_ID,
          ca: anchor,
          cert: cur.certPem + cur.chainPem,
          key: cur.keyPem,
          checkServerIdentity: () => undefined,
        });
        s.once('secureConnect', () => resolve(s));
        s.once('error', reject);
      });
    const echo = (s: TLSSocket, text: string) =>
      new Promise<string>((resolve) => {
        s.once('data', (d: Buffer) => resolve(d.toString()));
        s.write(text);
      });
    try {
      const old = await dial();
      assert.equal(await echo(old, 'before'), 'before');
      const oldSerial = old.getPeerX509Certificate()?.serialNumber;
      await waitFor('a renewal', () => (rotations.length >= 2 ? true : undefined), 15_000);
      const renewed = wl.current() as WorkloadCertificate;
      assert.notEqual(renewed.certPem, first.certPem);
      server.setSecureContext({ cert: renewed.certPem + renewed.chainPem, key: renewed.keyPem, ca: anchor });
      // The established connection keeps working on the old certificate; new ones get the new one.
      assert.equal(await echo(old, 'after'), 'after');
      const fresh = await dial();
      assert.notEqual(fresh.getPeerX509Certificate()?.serialNumber, oldSerial);
      assert.equal(new X509Certificate(renewed.certPem).subjectAltName, `DNS:${WEB_ID}`);
      old.destroy();
      fresh.destroy();
    } finally {
      wl.stop();
      client.close();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });

  it('refuses a client that does not trust the anchor, and one expecting another server name', async () => {
    const other = mkdtempSync(join(tmpdir(), 'ward-e2e-other-'));
    try {
      assert.equal(wardSync(['identity', 'init', '--out', other]).status, 0);
      const foreign = new InboundPolicyClient({
        address: `127.0.0.1:${ports.policy}`,
        tls: { caPem: readFileSync(join(other, 'ca.crt'), 'utf8'), serverName: DESTINATION_SERVER },
      });
      await assert.rejects(foreign.getPort('emojivoto:web-0', 8080, { deadlineMs: 5000 }), (e: unknown) => e instanceof GrpcError && e.code === 'UNAVAILABLE');
      foreign.close();
      const wrongName = new InboundPolicyClient({
        address: `127.0.0.1:${ports.policy}`,
        tls: { caPem: anchor, serverName: `evil.linkerd.serviceaccount.identity.linkerd.${TD}` },
      });
      await assert.rejects(
        wrongName.getPort('emojivoto:web-0', 8080, { deadlineMs: 5000 }),
        (e: unknown) => e instanceof GrpcError && e.code === 'UNAVAILABLE',
      );
      wrongName.close();
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it('streams a port policy, and every edit of the policy files (a broken edit keeps the last good policy)', async () => {
    const client = new InboundPolicyClient({ address: `127.0.0.1:${ports.policy}`, tls: { caPem: anchor, serverName: DESTINATION_SERVER } });
    const messages: InboundServer[] = [];
    let ended: unknown = 'open';
    const cancel = client.watchPort('{"ns":"emojivoto","pod":"web-0"}', 8080, {
      onMessage: (m) => {
        assert.ok(m.ok, m.ok ? '' : m.message);
        if (m.ok) messages.push(m.value);
      },
      onEnd: (e) => {
        ended = e;
      },
    });
    try {
      await waitFor('the first WatchPort message', () => messages[0]);
      const first = messages[0] as InboundServer;
      assert.equal(first.meta.kind, 'server');
      assert.equal(first.meta.name, 'web-http');
      assert.deepEqual(authzNames(first), ['authorizationpolicy/web-from-emojivoto', 'authorizationpolicy/web-from-host']);

      // Drop one authorization from the file: exactly one update arrives.
      const authzFile = join(manifests, 'policy', 'authorizations.yaml');
      const original = readFileSync(authzFile, 'utf8');
      const docs = original.split(/^---$/m);
      const withoutHost = docs.filter((d) => !/name: web-from-host\b/.test(d)).join('---');
      assert.notEqual(withoutHost, original);
      writeFileSync(authzFile, withoutHost);
      await waitFor('the update without web-from-host', () => (messages.length >= 2 ? true : undefined));
      assert.deepEqual(authzNames(messages[1] as InboundServer), ['authorizationpolicy/web-from-emojivoto']);

      // Break the file: nothing is sent, the last good policy stays, and the API says why.
      writeFileSync(authzFile, `${withoutHost}\n---\nkind: [unclosed\n`);
      const admin = `http://127.0.0.1:${ports.admin}`;
      const status = await waitFor('the broken file to be reported', async () => {
        const files = (await (await fetch(`${admin}/api/v1/files`)).json()) as {
          files: { file: string; ok: boolean; diagnostics: { source?: { line: number } }[] }[];
        };
        return files.files.find((f) => f.file === authzFile && !f.ok);
      });
      assert.ok(status.diagnostics.some((d) => d.source !== undefined && d.source.line > 1));
      const policy = (await (await fetch(`${admin}/api/v1/policy?workload=emojivoto:web-0&port=8080`)).json()) as { authorizations: unknown[] };
      assert.equal(policy.authorizations.length, 1);
      assert.equal(messages.length, 2);

      // Restore the original: the authorization comes back.
      writeFileSync(authzFile, original);
      await waitFor('the restored policy', () => (messages.length >= 3 ? true : undefined));
      assert.deepEqual(authzNames(messages[2] as InboundServer), ['authorizationpolicy/web-from-emojivoto', 'authorizationpolicy/web-from-host']);
      assert.equal(ended, 'open');

      // The controller counted the updates and their latency.
      const metrics = await (await fetch(`${admin}/metrics`)).text();
      assert.match(metrics, /^ward_policy_watch_streams 1$/m);
      assert.match(metrics, /^ward_policy_updates_sent_total 2$/m);
      assert.match(metrics, /^ward_policy_update_latency_seconds_count 2$/m);
      const latencySum = Number(/^ward_policy_update_latency_seconds_sum (\S+)$/m.exec(metrics)?.[1]);
      assert.ok(latencySum > 0 && latencySum < 5, `latency sum ${latencySum} s for two updates`);
      assert.match(metrics, /^identity_cert_issued_total [1-9]/m);
      assert.match(metrics, /^identity_cert_refused_total\{reason="[a-z-]+"\} [1-9]/m);
    } finally {
      cancel();
      client.close();
    }
  });

  it('resolves a Service to its meshed pods with their identity, and follows pod changes', async () => {
    const podFile = join(manifests, 'app', 'web-pod-with-ip.yaml');
    writeFileSync(
      podFile,
      [
        'apiVersion: v1',
        'kind: Pod',
        'metadata: {name: web-ip, namespace: emojivoto, labels: {app: web-svc}}',
        'spec:',
        '  serviceAccountName: web',
        '  containers:',
        '  - name: web-svc',
        '    image: x',
        '    ports: [{name: http, containerPort: 8080}]',
        'status: {podIP: 10.42.0.9}',
        '',
      ].join('\n'),
    );
    const client = new DestinationClient({ address: `127.0.0.1:${ports.destination}`, tls: { caPem: anchor, serverName: DESTINATION_SERVER } });
    const policy = new InboundPolicyClient({ address: `127.0.0.1:${ports.policy}`, tls: { caPem: anchor, serverName: DESTINATION_SERVER } });
    let policyEnd: unknown = 'open';
    let policyMessages = 0;
    const events: DestinationEvent[] = [];
    const cancel = client.get(`web-svc.emojivoto.svc.${TD}:80`, {
      onMessage: (m) => {
        if (m.ok) events.push(m.value);
      },
      onEnd: () => {},
    });
    try {
      const add = await waitFor('the endpoint of web-ip', () => events.find((e) => e.kind === 'add' && e.endpoints.some((x) => x.ip === '10.42.0.9')));
      assert.ok(add.kind === 'add');
      const ep = add.endpoints.find((x) => x.ip === '10.42.0.9');
      assert.equal(ep?.port, 8080);
      assert.equal(ep?.identity, WEB_ID);
      assert.equal(ep?.serverName, WEB_ID);
      // A proxy of that pod watches its port; deleting the pod ends the stream cleanly (OK), so
      // the proxy asks again instead of holding a policy that no longer follows changes.
      const cancelPolicy = policy.watchPort('emojivoto:web-ip', 8080, {
        onMessage: () => {
          policyMessages++;
        },
        onEnd: (e) => {
          policyEnd = e;
        },
      });
      await waitFor('the pod policy', () => (policyMessages > 0 ? true : undefined));
      rmSync(podFile);
      await waitFor('the endpoint to go away', () =>
        events.find((e) => (e.kind === 'remove' && e.addrs.some((a) => a.ip === '10.42.0.9')) || e.kind === 'noEndpoints'),
      );
      await waitFor('the policy stream of the deleted pod to end', () => (policyEnd !== 'open' ? true : undefined));
      assert.equal(policyEnd, undefined, 'ended with OK, not an error');
      cancelPolicy();
    } finally {
      cancel();
      client.close();
      policy.close();
    }
  });

  it('answers unknown pods and bad ports with the upstream status codes', async () => {
    const client = new InboundPolicyClient({ address: `127.0.0.1:${ports.policy}`, tls: { caPem: anchor, serverName: DESTINATION_SERVER } });
    try {
      await assert.rejects(client.getPort('emojivoto:ghost', 8080), (e: unknown) => e instanceof GrpcError && e.code === 'NOT_FOUND');
      await assert.rejects(client.getPort('emojivoto:web-0', 0), (e: unknown) => e instanceof GrpcError && e.code === 'INVALID_ARGUMENT');
      await assert.rejects(client.getPort('{"ns":"emojivoto","bogus":"x"}', 8080), (e: unknown) => e instanceof GrpcError && e.code === 'INVALID_ARGUMENT');
      const ok = await client.getPort('emojivoto:web-0', 4191);
      assert.equal(ok.meta.name, 'linkerd-admin');
    } finally {
      client.close();
    }
  });

  it('shuts down cleanly on SIGTERM', async () => {
    const code = await ctl.stop(10_000);
    assert.equal(code, 0, ctl.stderr().slice(-2000));
  });
});
