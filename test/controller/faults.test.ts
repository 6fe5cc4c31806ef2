/**
 * The controller under bad input and abuse: identity directories it must refuse (with a clear
 * message, before serving anything), thousands of watch streams opened and dropped, garbage on
 * its ports, unreadable manifests. Each is absorbed or refused precisely, and everyone else is
 * still served. In-process controller on loopback, except where the CLI's exit status matters.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GrpcError, InboundPolicyClient } from '../../src/api/index.js';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { type RunningController, startController } from '../../src/controller/index.js';
import { initIdentity } from '../../src/identity/index.js';
import { wardSync } from '../e2e/helpers.js';

const FLOOD = new URL('./watch-flood.ts', import.meta.url).pathname;
const EXAMPLE = new URL('../../examples/emojivoto/', import.meta.url).pathname;
const LOOPBACK = { host: '127.0.0.1', port: 0 };
const LISTEN = { policy: LOOPBACK, identity: LOOPBACK, destination: LOOPBACK, admin: LOOPBACK };

async function waitFor<T>(what: string, check: () => T | undefined | Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('controller faults', { timeout: 120_000 }, () => {
  let dir: string;
  let manifests: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'ward-faults-'));
    manifests = join(dir, 'manifests');
    cpSync(join(EXAMPLE, 'app'), join(manifests, 'app'), { recursive: true });
    cpSync(join(EXAMPLE, 'policy'), join(manifests, 'policy'), { recursive: true });
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  describe('refuses to start on a bad identity directory', () => {
    const start = (identityDir: string) => startController({ manifestsDir: manifests, identityDir, cluster: clusterConfig({}), listen: LISTEN });

    it('an issuer that the trust anchor did not sign', async () => {
      const a = join(dir, 'id-a');
      const b = join(dir, 'id-b');
      assert.ok((await initIdentity({ outDir: a })).ok);
      assert.ok((await initIdentity({ outDir: b })).ok);
      copyFileSync(join(b, 'issuer.crt'), join(a, 'issuer.crt'));
      copyFileSync(join(b, 'issuer.key'), join(a, 'issuer.key'));
      await assert.rejects(start(a), (e: unknown) => {
        const err = e as { code?: string; message: string };
        assert.equal(err.code, 'ERR_IDENTITY');
        assert.match(err.message, /issuer\.crt/);
        assert.match(err.message, /ID\d{3}/);
        return true;
      });
      // The CLI says the same and exits 2 without serving.
      const cli = wardSync([
        'controller',
        '--manifests',
        manifests,
        '--identity-dir',
        a,
        '--policy-addr',
        ':0',
        '--identity-addr',
        ':0',
        '--destination-addr',
        ':0',
        '--admin-addr',
        ':0',
      ]);
      assert.equal(cli.status, 2, cli.stderr);
      assert.match(cli.stderr, /error: cannot load the identity issuer from .*id-a/);
      assert.doesNotMatch(cli.stderr, /controller ready/);
    });

    it('an expired issuer', async () => {
      const c = join(dir, 'id-expired');
      const init = await initIdentity({ outDir: c, now: Date.now() - 3 * 3_600_000, issuerTtlMs: 3_600_000 });
      assert.ok(init.ok);
      await assert.rejects(start(c), (e: unknown) => (e as { code?: string }).code === 'ERR_IDENTITY' && /expired/i.test((e as Error).message));
    });

    it('a missing directory, and a missing token key', async () => {
      await assert.rejects(start(join(dir, 'nowhere')), (e: unknown) => (e as { code?: string }).code === 'ERR_IDENTITY');
      const d = join(dir, 'id-notoken');
      assert.ok((await initIdentity({ outDir: d })).ok);
      rmSync(join(d, 'token.key'));
      await assert.rejects(start(d), (e: unknown) => (e as { code?: string }).code === 'ERR_IDENTITY' && /token\.key/.test((e as Error).message));
    });
  });

  describe('while running', () => {
    let ctl: RunningController;
    let idDir: string;
    const tls = () => ({ caPem: ctl.trustAnchorsPem, serverName: ctl.destinationServerName });
    before(async () => {
      idDir = join(dir, 'id-ok');
      assert.ok((await initIdentity({ outDir: idDir })).ok);
      ctl = await startController({ manifestsDir: manifests, identityDir: idDir, cluster: clusterConfig({}), listen: LISTEN, rescanIntervalMs: 200 });
    });
    after(() => ctl.close());

    const openStreams = async () => Number(/^ward_policy_watch_streams (\d+)$/m.exec(await ctl.registry.metrics())?.[1]);

    it('absorbs 2,000 watch streams opened and dropped abruptly, and keeps serving', async () => {
      // 1,000 streams cancelled by a live client.
      const clients = Array.from(
        { length: 5 },
        () => new InboundPolicyClient({ address: `127.0.0.1:${ctl.ports.policy}`, tls: tls(), dedicatedConnection: true }),
      );
      const cancels: (() => void)[] = [];
      let firsts = 0;
      for (let i = 0; i < 1000; i++) {
        const c = clients[i % clients.length] as InboundPolicyClient;
        cancels.push(c.watchPort(`emojivoto:${['web-0', 'emoji-0', 'voting-0'][i % 3]}`, 4191, { onMessage: () => firsts++, onEnd: () => {} }));
      }
      // 1,000 more from a process that is then killed without a word (a proxy's death).
      const caFile = join(dir, 'anchor.pem');
      writeFileSync(caFile, ctl.trustAnchorsPem);
      const flood = spawn(process.execPath, ['--import', 'tsx', FLOOD, String(ctl.ports.policy), caFile, ctl.destinationServerName, '1000'], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let floodOut = '';
      flood.stdout.on('data', (d: Buffer) => {
        floodOut += d.toString();
      });
      try {
        await waitFor('1,000 first messages here', () => (firsts >= 1000 ? true : undefined), 60_000);
        await waitFor('1,000 first messages in the child', () => (floodOut.includes('ready 1000') ? true : undefined), 60_000);
        assert.equal(await openStreams(), 2000);
        for (const cancel of cancels) cancel();
        flood.kill('SIGKILL');
        await waitFor('every stream to be gone', async () => ((await openStreams()) === 0 ? true : undefined), 30_000);
      } finally {
        flood.kill('SIGKILL');
        for (const c of clients) c.close();
      }
      for (const pod of ['web-0', 'emoji-0', 'voting-0']) assert.equal(ctl.index.lookup('emojivoto', pod, 4191)?.subscriberCount, 0);
      const again = new InboundPolicyClient({ address: `127.0.0.1:${ctl.ports.policy}`, tls: tls() });
      assert.equal((await again.getPort('emojivoto:web-0', 4191)).meta.name, 'linkerd-admin');
      again.close();
    });

    it('survives garbage bytes and half-open connections on every gRPC port', async () => {
      const junk = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 256));
      for (const port of [ctl.ports.policy, ctl.ports.identity, ctl.ports.destination]) {
        for (const payload of [junk, Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')]) {
          await new Promise<void>((resolve) => {
            const s = connect(port, '127.0.0.1', () => s.end(payload));
            s.on('error', () => resolve());
            s.on('close', () => resolve());
            s.resume();
          });
        }
      }
      const c = new InboundPolicyClient({ address: `127.0.0.1:${ctl.ports.policy}`, tls: tls() });
      assert.equal((await c.getPort('emojivoto:web-0', 8080)).meta.name, 'web-http');
      await assert.rejects(c.getPort('emojivoto:web-0', 99999), (e: unknown) => e instanceof GrpcError && e.code === 'INVALID_ARGUMENT');
      c.close();
    });

    it('keeps the last good policy when a manifest turns into binary garbage, and reports it', async () => {
      const file = join(manifests, 'policy', 'servers.yaml');
      const before = ctl.index.lookup('emojivoto', 'web-0', 8080)?.value;
      writeFileSync(file, Buffer.from([0xff, 0xfe, 0x00, 0x01, 0x9c, 0x00, 0x00, 0x7f]));
      const res = await waitFor('the broken file in /api/v1/files', async () => {
        const r = (await (await fetch(`http://127.0.0.1:${ctl.ports.admin}/api/v1/files`)).json()) as { files: { file: string; ok: boolean }[] };
        return r.files.find((f) => f.file === file && !f.ok);
      });
      assert.equal(res.ok, false);
      assert.equal(ctl.index.lookup('emojivoto', 'web-0', 8080)?.value, before);
      const ready = await fetch(`http://127.0.0.1:${ctl.ports.admin}/ready`);
      assert.equal(ready.status, 200);
      const resources = (await (await fetch(`http://127.0.0.1:${ctl.ports.admin}/api/v1/resources?kind=Server`)).json()) as {
        resources: { name: string; stale: boolean }[];
      };
      assert.ok(resources.resources.length === 4 && resources.resources.every((r) => r.stale));
    });
  });
});
