/**
 * `ward proxy-init`: flags and rule text in-process, and the rules for real (root, Linux) in two
 * network namespaces this test creates — a "pod" (10.244.78.2) and a "peer" (10.244.78.1) joined
 * by a veth pair — where TCP connections show what is redirected: servers answer with a tag
 * naming who accepted the connection. Without root or iptables the real part is skipped, except
 * under CI=true where that is a failure.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { bufferIo } from '../io.js';
import { main } from '../main.js';
import { existingJumps, parsePortList, proxyInitRules } from './proxy-init.js';

async function run(args: string[]) {
  const io = bufferIo();
  const status = await main(args, io);
  return { status, stdout: io.stdout, stderr: io.stderr };
}

describe('ward proxy-init rules', () => {
  it('writes upstream proxy-init’s chains: ignored ports in multiport groups of 15, the proxy’s uid and loopback exempt, TCP redirected', () => {
    const rules = proxyInitRules({
      inboundPort: 4143,
      outboundPort: 4140,
      proxyUid: 2102,
      inboundPortsToIgnore: ['4190', '4191', ...Array.from({ length: 7 }, (_, i) => `${10000 + i * 10}-${10005 + i * 10}`)],
      outboundPortsToIgnore: [],
      portsToRedirect: [],
      subnetsToIgnore: [],
    });
    const lines = rules.split('\n');
    assert.deepEqual(lines.slice(0, 3), ['*nat', ':PROXY_INIT_REDIRECT - [0:0]', ':PROXY_INIT_OUTPUT - [0:0]']);
    const dports = lines.filter((l) => l.includes('--dports')).map((l) => /--dports (\S+)/.exec(l)?.[1]);
    // 2 ports + 6 ranges (2 each) = 14; the 7th range starts a new group.
    assert.deepEqual(dports, ['4190,4191,10000:10005,10010:10015,10020:10025,10030:10035,10040:10045,10050:10055', '10060:10065']);
    assert.ok(lines.includes('-A PROXY_INIT_OUTPUT -m owner --uid-owner 2102 -j RETURN -m comment --comment "proxy-init/ignore-proxy-user-id"'));
    assert.ok(lines.includes('-A PROXY_INIT_OUTPUT -o lo -j RETURN -m comment --comment "proxy-init/ignore-loopback"'));
    assert.ok(lines.includes('-A PREROUTING -j PROXY_INIT_REDIRECT -m comment --comment "proxy-init/install-proxy-init-prerouting"'));
    assert.ok(lines.includes('-A OUTPUT -j PROXY_INIT_OUTPUT -m comment --comment "proxy-init/install-proxy-init-output"'));
    assert.equal(lines.at(-2), 'COMMIT');

    const rerun = proxyInitRules(
      {
        inboundPort: 4143,
        outboundPort: 4140,
        proxyUid: 2102,
        inboundPortsToIgnore: [],
        outboundPortsToIgnore: [],
        portsToRedirect: [8080],
        subnetsToIgnore: [],
      },
      { prerouting: true, output: true },
    );
    assert.doesNotMatch(rerun, /^-A (PREROUTING|OUTPUT) /m, 'jumps that exist are not added twice');
    assert.match(rerun, /^-A PROXY_INIT_REDIRECT -p tcp --dport 8080 -j REDIRECT --to-ports 4143 /m);
    assert.doesNotMatch(rerun, /redirect-all-incoming/);
  });

  it('finds the jumps in iptables-save output', () => {
    assert.deepEqual(existingJumps('-A PREROUTING -m comment --comment "x" -j PROXY_INIT_REDIRECT\n-A OUTPUT -j KUBE\n'), { prerouting: true, output: false });
  });

  it('parses port lists with ranges and refuses what is not a port', () => {
    assert.deepEqual(parsePortList(['4190,4191', ' 9000-9010 ', '25-25'], '--x'), ['4190', '4191', '9000-9010', '25']);
    for (const bad of ['0', '65536', '9-3', 'http', '1-2-3']) assert.throws(() => parsePortList([bad], '--x'), new RegExp(`--x: "${bad}" is not a port`));
  });

  it('--dry-run prints the iptables-restore input; bad flags exit 2 with the flag named', async () => {
    const dry = await run(['proxy-init', '--proxy-uid', '2102', '--inbound-ports-to-ignore', '4190,4191', '--outbound-ports-to-ignore', '443', '--dry-run']);
    assert.equal(dry.status, 0, dry.stderr);
    assert.match(dry.stdout, /^\*nat\n/);
    assert.match(dry.stdout, /-A PROXY_INIT_OUTPUT -p tcp -m multiport --dports 443 -j RETURN/);
    assert.match(dry.stdout, /-A PROXY_INIT_REDIRECT -p tcp -j REDIRECT --to-ports 4143 /);

    const cases: [string[], RegExp][] = [
      [['--proxy-uid', '2102', '--inbound-ports-to-ignore', '70000'], /--inbound-ports-to-ignore: "70000" is not a port/],
      [['--proxy-uid', 'proxy'], /--proxy-uid "proxy" is not a numeric id/],
      [[], /give --proxy-uid/],
      [['--proxy-uid', '2102', '--iptables-mode', 'ebpf'], /--iptables-mode "ebpf" must be nft, legacy or plain/],
      [['--proxy-uid', '2102', '--subnets-to-ignore', '10.0.0.0'], /--subnets-to-ignore: "10.0.0.0" is not an IPv4 CIDR/],
    ];
    for (const [args, message] of cases) {
      const r = await run(['proxy-init', ...args, '--dry-run']);
      assert.equal(r.status, 2, args.join(' '));
      assert.match(r.stderr, message);
    }
  });
});

// === for real, in network namespaces ===

const SUBNET = '10.244.78';
const PEER_IP = `${SUBNET}.1`;
const POD_IP = `${SUBNET}.2`;
const PROXY_UID = 2102;

function sh(cmd: string, args: readonly string[], input?: string): { ok: boolean; out: string; err: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 30_000, ...(input !== undefined ? { input } : {}) });
  return { ok: r.status === 0, out: r.stdout ?? '', err: r.stderr ?? r.error?.message ?? '' };
}

function must(cmd: string, args: readonly string[]): string {
  const r = sh(cmd, args);
  assert.ok(r.ok, `${cmd} ${args.join(' ')}: ${r.err}`);
  return r.out;
}

function prerequisites(): string | undefined {
  if (process.platform !== 'linux') return 'Linux';
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push('root');
  for (const [cmd, arg] of [
    ['ip', '-V'],
    ['iptables-save', '--version'],
    ['nsenter', '--version'],
    ['bash', '--version'],
  ] as const) {
    if (!sh(cmd, [arg]).ok) missing.push(cmd);
  }
  return missing.length === 0 ? undefined : missing.join(', ');
}

/** TCP servers in a namespace: each accepted connection gets its tag and is closed. */
const SERVE = `
const net = require('node:net');
const specs = process.argv.slice(1);
let pending = specs.length;
for (const spec of specs) {
  const [host, port, tag] = spec.split(',');
  net.createServer((s) => s.end(tag)).listen(Number(port), host, () => { if (--pending === 0) console.log('listening'); });
}
`;

const missing = prerequisites();
const mustRun = process.env.CI === 'true';
const ns = { pod: `ward-pinit-${process.pid}-pod`, peer: `ward-pinit-${process.pid}-peer`, spare: `ward-pinit-${process.pid}-spare` };
const servers: ChildProcess[] = [];

function serve(netns: string, specs: string[]): Promise<void> {
  const child = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', SERVE, ...specs], { stdio: ['ignore', 'pipe', 'pipe'] });
  servers.push(child);
  let err = '';
  child.stderr?.on('data', (c: Buffer) => {
    err += c.toString();
  });
  return new Promise((resolve, reject) => {
    child.stdout?.on('data', (c: Buffer) => {
      if (c.toString().includes('listening')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`servers in ${netns} exited with ${code}: ${err}`)));
  });
}

/** What a TCP connection from `netns` (as `uid`) to host:port receives. */
function connect(netns: string, host: string, port: number, uid = 0): string {
  const script = `exec 3<>/dev/tcp/${host}/${port} && cat <&3`;
  const r = sh('nsenter', [`--net=/run/netns/${netns}`, `--setuid=${uid}`, `--setgid=${uid}`, '--', 'timeout', '10', 'bash', '-c', script]);
  return r.ok ? r.out : `failed: ${r.err.trim()}`;
}

/** The nat table of a namespace, without iptables-save's dated comment lines. */
function natTable(netns: string, save = 'iptables-save'): string {
  return must('ip', ['netns', 'exec', netns, save, '-t', 'nat'])
    .split('\n')
    .filter((l) => !l.startsWith('#'))
    .join('\n');
}

describe('ward proxy-init in a network namespace', { skip: missing !== undefined && !mustRun ? `needs ${missing}` : false, timeout: 120_000 }, () => {
  before(async () => {
    if (missing !== undefined) throw new Error(`ward proxy-init's namespace test needs ${missing} (CI=true: not skipped)`);
    for (const name of Object.values(ns)) {
      sh('ip', ['netns', 'del', name]);
      must('ip', ['netns', 'add', name]);
      must('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
    }
    must('ip', ['-n', ns.peer, 'link', 'add', 'veth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.pod]);
    must('ip', ['-n', ns.peer, 'addr', 'add', `${PEER_IP}/24`, 'dev', 'veth0']);
    must('ip', ['-n', ns.peer, 'link', 'set', 'veth0', 'up']);
    must('ip', ['-n', ns.pod, 'addr', 'add', `${POD_IP}/24`, 'dev', 'eth0']);
    must('ip', ['-n', ns.pod, 'link', 'set', 'eth0', 'up']);
    await serve(ns.pod, ['0.0.0.0,4143,inbound-proxy', '0.0.0.0,4140,outbound-proxy', '0.0.0.0,4191,admin', '0.0.0.0,8080,app-8080', '0.0.0.0,9000,app-9000']);
    await serve(ns.peer, [`${PEER_IP},7000,peer-7000`, `${PEER_IP},5432,peer-5432`]);
  });

  after(() => {
    for (const s of servers) s.kill('SIGKILL');
    for (const name of Object.values(ns)) sh('ip', ['netns', 'del', name]);
  });

  it('before: every connection reaches the server it was addressed to', () => {
    assert.equal(connect(ns.peer, POD_IP, 8080), 'app-8080');
    assert.equal(connect(ns.pod, PEER_IP, 7000), 'peer-7000');
  });

  it('writes the rules and prints them as iptables-save shows them', async () => {
    const r = await run([
      'proxy-init',
      '--netns',
      `/run/netns/${ns.pod}`,
      '--proxy-uid',
      String(PROXY_UID),
      '--inbound-ports-to-ignore',
      '4190,4191,9000',
      '--outbound-ports-to-ignore',
      '5432',
    ]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /nat rules written with iptables-(nft|legacy)?-?restore/);
    assert.match(r.stdout, /^-A PREROUTING -m comment --comment "proxy-init\/install-proxy-init-prerouting" -j PROXY_INIT_REDIRECT$/m);
    assert.match(r.stdout, /^-A PROXY_INIT_OUTPUT -m owner --uid-owner 2102 .*-j RETURN$/m);
    // Nothing outside the pod's namespace changed.
    assert.doesNotMatch(natTable(ns.peer), /PROXY_INIT/);
  });

  it('inbound: TCP to a pod port reaches the proxy’s inbound port; ignored ports (admin, 9000) reach their servers', () => {
    assert.equal(connect(ns.peer, POD_IP, 8080), 'inbound-proxy');
    assert.equal(connect(ns.peer, POD_IP, 12345), 'inbound-proxy');
    assert.equal(connect(ns.peer, POD_IP, 4191), 'admin');
    assert.equal(connect(ns.peer, POD_IP, 9000), 'app-9000');
  });

  it('outbound: the application’s TCP reaches the proxy’s outbound port; the proxy’s user, loopback and ignored ports go where addressed', () => {
    assert.equal(connect(ns.pod, PEER_IP, 7000), 'outbound-proxy');
    assert.equal(connect(ns.pod, PEER_IP, 7000, PROXY_UID), 'peer-7000');
    assert.equal(connect(ns.pod, PEER_IP, 5432), 'peer-5432');
    assert.equal(connect(ns.pod, '127.0.0.1', 8080), 'app-8080');
  });

  it('a rerun leaves the same rules (chains refilled, jumps not doubled)', async () => {
    const before = natTable(ns.pod, 'iptables-nft-save') + natTable(ns.pod, 'iptables-legacy-save');
    const r = await run([
      'proxy-init',
      '--netns',
      `/run/netns/${ns.pod}`,
      '--proxy-uid',
      String(PROXY_UID),
      '--inbound-ports-to-ignore',
      '4190,4191,9000',
      '--outbound-ports-to-ignore',
      '5432',
    ]);
    assert.equal(r.status, 0, r.stderr);
    const afterText = natTable(ns.pod, 'iptables-nft-save') + natTable(ns.pod, 'iptables-legacy-save');
    assert.equal(afterText, before);
    assert.equal((afterText.match(/-j PROXY_INIT_REDIRECT/g) ?? []).length, 1);
    assert.equal(connect(ns.peer, POD_IP, 8080), 'inbound-proxy');
  });

  it('--dry-run writes nothing; --iptables-mode legacy writes with iptables-legacy', async () => {
    const dry = await run(['proxy-init', '--netns', `/run/netns/${ns.spare}`, '--proxy-uid', '2102', '--dry-run']);
    assert.equal(dry.status, 0, dry.stderr);
    assert.doesNotMatch(natTable(ns.spare, 'iptables-nft-save') + natTable(ns.spare, 'iptables-legacy-save'), /PROXY_INIT/);

    const legacy = await run(['proxy-init', '--netns', `/run/netns/${ns.spare}`, '--proxy-uid', '2102', '--iptables-mode', 'legacy']);
    assert.equal(legacy.status, 0, legacy.stderr);
    assert.match(legacy.stderr, /iptables-legacy-restore/);
    assert.match(natTable(ns.spare, 'iptables-legacy-save'), /-A PROXY_INIT_REDIRECT -p tcp .*-j REDIRECT --to-ports 4143/);
    assert.doesNotMatch(natTable(ns.spare, 'iptables-nft-save'), /PROXY_INIT/);
  });
});
