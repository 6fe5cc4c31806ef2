/**
 * `ward proxy` in-process: flag parsing (exit 2 with a precise message), and a proxy whose
 * controller is unreachable — it listens, says so in its ready line, stays not ready, and shuts
 * down cleanly (exit 0) when told to.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { initIdentity } from '../../identity/index.js';
import { bufferIo, UsageError } from '../io.js';
import { main } from '../main.js';
import { parseDialAddress, parseDurationFlag, parseInboundFlag, parseTuningFlags, TAP_IDENTITY_ENV, tapIdentityOf } from './proxy.js';

let dir: string;
let anchors: string;
let token: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ward-proxy-cli-'));
  const init = await initIdentity({ outDir: join(dir, 'id') });
  assert.ok(init.ok);
  anchors = join(dir, 'id', 'ca.crt');
  token = join(dir, 'token');
  writeFileSync(token, 'not-a-real-token\n');
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Flags that are valid on their own; the controller addresses refuse connections. */
function base(): string[] {
  return [
    'proxy',
    '--workload',
    'demo/server-0',
    '--trust-anchors',
    anchors,
    '--token-file',
    token,
    '--identity-addr',
    '127.0.0.1:1',
    '--policy-addr',
    '127.0.0.1:1',
    '--mesh-addr',
    '127.0.0.1:0',
    '--admin-addr',
    '127.0.0.1:0',
    '--log-level',
    'silent',
  ];
}

async function run(args: string[], signal?: AbortSignal) {
  const io = bufferIo();
  const status = await main(args, io, signal ?? AbortSignal.abort());
  return { status, stderr: io.stderr };
}

describe('ward proxy flags', () => {
  it('parses --inbound POD_PORT[@LISTEN_PORT]=APPHOST:APPPORT', () => {
    assert.deepEqual(parseInboundFlag('8080=127.0.0.1:18080'), { podPort: 8080, listenPort: 8080, appHost: '127.0.0.1', appPort: 18080 });
    assert.deepEqual(parseInboundFlag('8080@0=127.0.0.1:18080'), { podPort: 8080, listenPort: 0, appHost: '127.0.0.1', appPort: 18080 });
    assert.deepEqual(parseInboundFlag('9000@19000=[::1]:29000'), { podPort: 9000, listenPort: 19000, appHost: '::1', appPort: 29000 });
    assert.throws(() => parseInboundFlag('8080'), /is not POD_PORT\[@LISTEN_PORT\]=APPHOST:APPPORT/);
    assert.throws(() => parseInboundFlag('0=127.0.0.1:1'), /pod port 0 is not in 1-65535/);
    assert.throws(() => parseInboundFlag('4191=127.0.0.1:1'), /admin port/);
    assert.throws(() => parseInboundFlag('80@70000=127.0.0.1:1'), /listen port 70000/);
    assert.throws(() => parseInboundFlag('80=127.0.0.1:0'), /application port 0/);
    assert.equal(parseDialAddress('[::1]:8090', '--policy-addr'), '[::1]:8090');
    assert.throws(() => parseDialAddress('127.0.0.1:0', '--policy-addr'), /--policy-addr "127.0.0.1:0" is not HOST:PORT/);
    assert.throws(() => parseDialAddress(':8090', '--policy-addr'), /is not HOST:PORT/);
  });

  it('parses the tuning flags: kubectl-style durations, the discovery cap, only what is given', () => {
    assert.equal(parseDurationFlag('500ms', '--x'), 500);
    assert.equal(parseDurationFlag('1h30m', '--x'), 5_400_000);
    assert.equal(parseDurationFlag('1m5s', '--x'), 65_000);
    assert.equal(parseDurationFlag('24h', '--x'), 86_400_000);
    for (const bad of ['', '5', 's', '1.5s', '-1s', '0ms', '1d', '25d', '5 s', '5S']) assert.throws(() => parseDurationFlag(bad, '--x'), UsageError, bad);
    assert.deepEqual(parseTuningFlags({}), { policyDiscovery: {} });
    assert.deepEqual(
      parseTuningFlags({ inboundDiscoveryTimeout: '2s', inboundDiscoveryIdleTimeout: '1m', inboundDiscoveryMaxPorts: '0', metricsRetainIdle: '1h' }),
      { policyDiscovery: { discoveryTimeoutMs: 2_000, discoveryIdleMs: 60_000, maxDiscoveredPorts: 0 }, metricsIdleTimeoutMs: 3_600_000 },
    );
    assert.throws(() => parseTuningFlags({ inboundDiscoveryMaxPorts: '65536' }), UsageError);
  });

  it('takes the tap identity from --tap-identity, else LINKERD2_PROXY_TAP_SVC_NAME, else none (tap disabled); refuses a non-DNS name', () => {
    const id = 'ward-controller.linkerd.serviceaccount.identity.linkerd.cluster.local';
    assert.equal(tapIdentityOf(undefined, {}), undefined);
    assert.equal(tapIdentityOf(undefined, { [TAP_IDENTITY_ENV]: '' }), undefined);
    assert.equal(tapIdentityOf(undefined, { [TAP_IDENTITY_ENV]: id }), id);
    assert.equal(
      tapIdentityOf('tap.linkerd-viz.serviceaccount.identity.linkerd.cluster.local', { [TAP_IDENTITY_ENV]: id }),
      'tap.linkerd-viz.serviceaccount.identity.linkerd.cluster.local',
    );
    assert.throws(
      () => tapIdentityOf('', {}),
      (e: unknown) => e instanceof UsageError && /--tap-identity "" is not a DNS name/.test(e.message),
    );
    assert.throws(
      () => tapIdentityOf(undefined, { [TAP_IDENTITY_ENV]: 'Bad Name' }),
      (e: unknown) => e instanceof UsageError && /LINKERD2_PROXY_TAP_SVC_NAME/.test(e.message),
    );
  });

  it('exits 2 with a precise message for bad flags and unreadable files', async () => {
    const cases: [string[], RegExp][] = [
      [['--workload', 'demo'], /--workload "demo" is not NAMESPACE\/POD/],
      [['--workload', 'Demo/x'], /namespace "Demo" is not a DNS-1123 label/],
      [['--service-account', 'a_b'], /--service-account "a_b" is not a DNS-1123 label/],
      [['--inbound', '8080=a:1', '--inbound', '8080=a:2'], /pod port 8080 is given twice/],
      [['--inbound', '8080=127.0.0.1:1', '--inbound', '9000=127.0.0.2:1'], /every application must be on one host/],
      [['--listen-host', 'localhost'], /--listen-host "localhost" is not an IP address/],
      [['--mesh-addr', 'nope'], /--mesh-addr "nope" is not HOST:PORT/],
      [['--transparent', '--inbound', '8080@0=127.0.0.1:8080'], /--inbound "8080@0=127.0.0.1:8080": no @LISTEN_PORT with --transparent/],
      [['--log-level', 'loud'], /--log-level must be one of/],
      [['--token-file', join(dir, 'missing')], /--token-file .*missing: cannot read/],
      [['--trust-anchors', token], /--trust-anchors .*token: trust anchors:/],
      [['--inbound-discovery-timeout', '5'], /--inbound-discovery-timeout "5" is not a duration between 1ms and 24d/],
      [['--inbound-discovery-idle-timeout', '30d'], /--inbound-discovery-idle-timeout "30d" is not a duration/],
      [['--inbound-discovery-max-ports', '-1'], /--inbound-discovery-max-ports "-1" is not a number of ports from 0 to 65535/],
      [['--metrics-retain-idle', '0s'], /--metrics-retain-idle "0s" is not a duration/],
    ];
    for (const [extra, message] of cases) {
      const r = await run([...base(), ...extra]);
      assert.equal(r.status, 2, `${extra.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message);
    }
    const missing = await run(['proxy', '--workload', 'demo/x']);
    assert.equal(missing.status, 2);
    assert.match(missing.stderr, /required option '--token-file <file>' not specified/);
    const noAnchors = await run(base().filter((a, i, all) => a !== '--trust-anchors' && all[i - 1] !== '--trust-anchors'));
    assert.equal(noAnchors.status, 2);
    assert.match(noAnchors.stderr, /no trust anchors: give --trust-anchors FILE or set LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS to the PEM/);
  });

  it('reads the trust anchors from LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS without --trust-anchors (as injected pods get them)', async () => {
    const withoutFlag = base().filter((a, i, all) => a !== '--trust-anchors' && all[i - 1] !== '--trust-anchors');
    const saved = process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS;
    try {
      process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS = 'not a certificate';
      const bad = await run(withoutFlag);
      assert.equal(bad.status, 2);
      assert.match(bad.stderr, /\$LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS: trust anchors:/);

      process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS = readFileSync(anchors, 'utf8');
      const stop = new AbortController();
      const io = bufferIo();
      const running = main(withoutFlag, io, stop.signal);
      const deadline = Date.now() + 10_000;
      while (!/^ward proxy ready: /m.test(io.stderr) && Date.now() < deadline && !/error/.test(io.stderr)) await new Promise((r) => setTimeout(r, 10));
      assert.match(io.stderr, /^ward proxy ready: identity default\.demo\.serviceaccount/m);
      stop.abort();
      assert.equal(await running, 0);
    } finally {
      if (saved === undefined) delete process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS;
      else process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS = saved;
    }
  });

  it('keeps retrying an unreachable controller: listens, prints its ready line, /ready 503, exits 0 on stop', async () => {
    const stop = new AbortController();
    const io = bufferIo();
    const running = main([...base(), '--inbound', '8080@0=127.0.0.1:18080', '--listen-host', '127.0.0.1'], io, stop.signal);
    const line = await new Promise<RegExpExecArray>((resolve, reject) => {
      const deadline = Date.now() + 10_000;
      const poll = () => {
        const m =
          /^ward proxy ready: identity default\.demo\.serviceaccount\.identity\.linkerd\.cluster\.local, mesh :(\d+), admin :(\d+), inbound 8080@(\d+)->127\.0\.0\.1:18080$/m.exec(
            io.stderr,
          );
        if (m !== null) resolve(m);
        else if (Date.now() > deadline) reject(new Error(`no ready line: ${io.stderr}`));
        else setTimeout(poll, 10);
      };
      poll();
    });
    const admin = Number(line[2]);
    assert.ok(Number(line[3]) > 0);
    const ready = await fetch(`http://127.0.0.1:${admin}/ready`);
    assert.equal(ready.status, 503);
    assert.equal((await fetch(`http://127.0.0.1:${admin}/live`)).status, 200);
    stop.abort();
    assert.equal(await running, 0);
  });
});
