/**
 * `ward proxy-init`: the injected pod's init container. It writes upstream proxy-init's iptables
 * rules (nat table) in the current network namespace (or `--netns PATH`), so that the pod's
 * inbound TCP goes to the proxy's inbound port and the application's outbound TCP to its
 * outbound port, while the proxy's own sockets (its user, `--proxy-uid`) leave untouched:
 *
 *     PREROUTING → PROXY_INIT_REDIRECT: ignored ports and subnets RETURN, other TCP → REDIRECT 4143
 *     OUTPUT     → PROXY_INIT_OUTPUT:   the proxy's uid (gid) RETURN, -o lo RETURN,
 *                                       ignored ports RETURN, other TCP → REDIRECT 4140
 *
 * The rules go in through one `iptables-restore --noflush`: the two chains are declared (which
 * empties them when they exist) and refilled, and the jumps from PREROUTING and OUTPUT are added
 * only when `iptables-save` does not show them, so a rerun (a restarted init container) leaves
 * the same rules. It prints the nat table's proxy-init lines as `iptables-save` shows them after
 * writing; `--dry-run` prints the `iptables-restore` input without touching anything.
 */
import { spawnSync } from 'node:child_process';
import { isIP } from 'node:net';
import type { Command } from '@commander-js/extra-typings';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { palette } from '../output.js';

/** Chains of upstream's proxy-init. */
export const REDIRECT_CHAIN = 'PROXY_INIT_REDIRECT';
export const OUTPUT_CHAIN = 'PROXY_INIT_OUTPUT';
/** iptables' multiport match takes at most 15 ports (a range counts 2). */
const MULTIPORT_LIMIT = 15;

/** The iptables flavour: the nf_tables backend, the legacy one, or whatever `iptables` is. */
export type IptablesMode = 'nft' | 'legacy' | 'plain';

/** What `proxyInitRules` writes. */
export interface ProxyInitOptions {
  readonly inboundPort: number;
  readonly outboundPort: number;
  readonly proxyUid?: number | undefined;
  readonly proxyGid?: number | undefined;
  /** Ports or inclusive ranges `lo-hi`. */
  readonly inboundPortsToIgnore: readonly string[];
  readonly outboundPortsToIgnore: readonly string[];
  /** Redirect only these inbound ports (default: every port). */
  readonly portsToRedirect: readonly number[];
  /** Source networks whose inbound traffic is not redirected. */
  readonly subnetsToIgnore: readonly string[];
}

/** Whether the jumps into the chains exist already (from `iptables-save -t nat`). */
export interface ExistingJumps {
  readonly prerouting: boolean;
  readonly output: boolean;
}

const comment = (text: string) => `-m comment --comment "proxy-init/${text}"`;

/** Parses a port list flag (`4190,4191,9000-9010`); throws `UsageError`. */
export function parsePortList(values: readonly string[], flag: string): string[] {
  const out: string[] = [];
  for (const item of values.flatMap((v) => v.split(',')).map((s) => s.trim())) {
    if (item === '') continue;
    const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(item);
    const lo = Number(m?.[1]);
    const hi = m?.[2] === undefined ? lo : Number(m[2]);
    if (m === null || lo < 1 || hi > 65535 || lo > hi) throw new UsageError(`${flag}: "${item}" is not a port (1-65535) or a range LO-HI`);
    out.push(lo === hi ? String(lo) : `${lo}-${hi}`);
  }
  return out;
}

/** Groups ports and ranges into `--dports` arguments (`a,b,c:d`) of at most 15 ports each. */
function multiportGroups(items: readonly string[]): string[] {
  const groups: string[][] = [];
  let current: string[] = [];
  let count = 0;
  for (const item of items) {
    const weight = item.includes('-') ? 2 : 1;
    if (count + weight > MULTIPORT_LIMIT) {
      groups.push(current);
      current = [];
      count = 0;
    }
    current.push(item.replace('-', ':'));
    count += weight;
  }
  if (current.length > 0) groups.push(current);
  return groups.map((g) => g.join(','));
}

/**
 * The `iptables-restore --noflush` input for the nat table. Chains are declared (created, or
 * emptied when they exist); the jumps are written only when `existing` lacks them.
 */
export function proxyInitRules(o: ProxyInitOptions, existing: ExistingJumps = { prerouting: false, output: false }): string {
  const lines = ['*nat', `:${REDIRECT_CHAIN} - [0:0]`, `:${OUTPUT_CHAIN} - [0:0]`];
  const ignored = (chain: string, items: readonly string[]) => {
    for (const ports of multiportGroups(items)) lines.push(`-A ${chain} -p tcp -m multiport --dports ${ports} -j RETURN ${comment(`ignore-port-${ports}`)}`);
  };
  ignored(REDIRECT_CHAIN, o.inboundPortsToIgnore);
  for (const net of o.subnetsToIgnore) lines.push(`-A ${REDIRECT_CHAIN} -s ${net} -j RETURN ${comment(`ignore-subnet-${net}`)}`);
  if (o.portsToRedirect.length === 0) {
    lines.push(`-A ${REDIRECT_CHAIN} -p tcp -j REDIRECT --to-ports ${o.inboundPort} ${comment('redirect-all-incoming-to-proxy-port')}`);
  } else {
    for (const port of o.portsToRedirect) {
      lines.push(`-A ${REDIRECT_CHAIN} -p tcp --dport ${port} -j REDIRECT --to-ports ${o.inboundPort} ${comment(`redirect-port-${port}-to-proxy-port`)}`);
    }
  }
  if (!existing.prerouting) lines.push(`-A PREROUTING -j ${REDIRECT_CHAIN} ${comment('install-proxy-init-prerouting')}`);

  if (o.proxyUid !== undefined) lines.push(`-A ${OUTPUT_CHAIN} -m owner --uid-owner ${o.proxyUid} -j RETURN ${comment('ignore-proxy-user-id')}`);
  if (o.proxyGid !== undefined) lines.push(`-A ${OUTPUT_CHAIN} -m owner --gid-owner ${o.proxyGid} -j RETURN ${comment('ignore-proxy-group-id')}`);
  lines.push(`-A ${OUTPUT_CHAIN} -o lo -j RETURN ${comment('ignore-loopback')}`);
  ignored(OUTPUT_CHAIN, o.outboundPortsToIgnore);
  lines.push(`-A ${OUTPUT_CHAIN} -p tcp -j REDIRECT --to-ports ${o.outboundPort} ${comment('redirect-all-outgoing-to-proxy-port')}`);
  if (!existing.output) lines.push(`-A OUTPUT -j ${OUTPUT_CHAIN} ${comment('install-proxy-init-output')}`);
  lines.push('COMMIT', '');
  return lines.join('\n');
}

/** The jumps `iptables-save -t nat` output shows. */
export function existingJumps(saved: string): ExistingJumps {
  return {
    prerouting: new RegExp(`^-A PREROUTING (.+ )?-j ${REDIRECT_CHAIN}\\b`, 'm').test(saved),
    output: new RegExp(`^-A OUTPUT (.+ )?-j ${OUTPUT_CHAIN}\\b`, 'm').test(saved),
  };
}

const BINARIES: Readonly<Record<IptablesMode, { restore: string; save: string }>> = {
  nft: { restore: 'iptables-nft-restore', save: 'iptables-nft-save' },
  legacy: { restore: 'iptables-legacy-restore', save: 'iptables-legacy-save' },
  plain: { restore: 'iptables-restore', save: 'iptables-save' },
};

interface Ran {
  readonly ok: boolean;
  readonly stdout: string;
  readonly detail: string;
}

function runIn(netns: string | undefined, cmd: string, args: readonly string[], input?: string): Ran {
  const argv = netns === undefined ? [cmd, ...args] : ['nsenter', `--net=${netns}`, '--', cmd, ...args];
  const r = spawnSync(argv[0] as string, argv.slice(1), { encoding: 'utf8', timeout: 60_000, ...(input !== undefined ? { input } : {}) });
  const detail = r.error !== undefined ? r.error.message : r.status !== 0 ? `exit ${r.status ?? r.signal}: ${(r.stderr ?? '').trim()}` : '';
  return { ok: r.error === undefined && r.status === 0, stdout: r.stdout ?? '', detail };
}

/** Flags of `ward proxy-init`. */
interface ProxyInitFlags {
  incomingProxyPort: string;
  outgoingProxyPort: string;
  proxyUid?: string;
  proxyGid?: string;
  inboundPortsToIgnore: string[];
  outboundPortsToIgnore: string[];
  portsToRedirect: string[];
  subnetsToIgnore: string[];
  iptablesMode?: string;
  netns?: string;
  dryRun?: boolean;
}

const collect = (value: string, previous: string[]) => [...previous, value];

function portFlag(text: string, flag: string): number {
  const n = /^\d{1,5}$/.test(text) ? Number(text) : Number.NaN;
  if (!(n >= 1 && n <= 65535)) throw new UsageError(`${flag} "${text}" is not a port (1-65535)`);
  return n;
}

function idFlag(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const n = /^\d{1,10}$/.test(text) ? Number(text) : Number.NaN;
  if (!(n >= 0 && n < 2 ** 32)) throw new UsageError(`${flag} "${text}" is not a numeric id`);
  return n;
}

function subnetList(values: readonly string[]): string[] {
  const out: string[] = [];
  for (const item of values.flatMap((v) => v.split(',')).map((s) => s.trim())) {
    if (item === '') continue;
    const [addr, bits, extra] = item.split('/');
    const len = bits === undefined ? Number.NaN : /^\d{1,2}$/.test(bits) ? Number(bits) : Number.NaN;
    if (addr === undefined || isIP(addr) !== 4 || extra !== undefined || !(len >= 0 && len <= 32)) {
      throw new UsageError(`--subnets-to-ignore: "${item}" is not an IPv4 CIDR (e.g. 10.0.0.0/8)`);
    }
    out.push(item);
  }
  return out;
}

/** Parses the flags into rule options; throws `UsageError`. */
export function parseProxyInitFlags(flags: ProxyInitFlags): ProxyInitOptions {
  const inboundPort = portFlag(flags.incomingProxyPort, '--incoming-proxy-port');
  const outboundPort = portFlag(flags.outgoingProxyPort, '--outgoing-proxy-port');
  const proxyUid = idFlag(flags.proxyUid, '--proxy-uid');
  const proxyGid = idFlag(flags.proxyGid, '--proxy-gid');
  if (proxyUid === undefined && proxyGid === undefined) {
    throw new UsageError("give --proxy-uid (or --proxy-gid): the proxy's own connections must be exempt from the outbound redirect, or they loop");
  }
  return {
    inboundPort,
    outboundPort,
    proxyUid,
    proxyGid,
    inboundPortsToIgnore: parsePortList(flags.inboundPortsToIgnore, '--inbound-ports-to-ignore'),
    outboundPortsToIgnore: parsePortList(flags.outboundPortsToIgnore, '--outbound-ports-to-ignore'),
    portsToRedirect: parsePortList(flags.portsToRedirect, '--ports-to-redirect').map((p) => {
      if (p.includes('-')) throw new UsageError(`--ports-to-redirect: "${p}" must be a single port`);
      return Number(p);
    }),
    subnetsToIgnore: subnetList(flags.subnetsToIgnore),
  };
}

/** Picks the iptables flavour: the one asked for, or the first whose `-save` runs here. */
function chooseMode(asked: string | undefined, netns: string | undefined): { mode: IptablesMode; saved: string } | { error: string } {
  const modes: IptablesMode[] = asked === undefined ? ['nft', 'legacy', 'plain'] : [asked as IptablesMode];
  const failures: string[] = [];
  for (const mode of modes) {
    const r = runIn(netns, BINARIES[mode].save, ['-t', 'nat']);
    if (r.ok) return { mode, saved: r.stdout };
    failures.push(`${BINARIES[mode].save}: ${r.detail}`);
  }
  return { error: failures.join('; ') };
}

/** Registers `ward proxy-init`. */
export function registerProxyInitCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('proxy-init')
    .description("write the iptables rules that send a pod's TCP traffic through its proxy (the injected init container)")
    .option('--incoming-proxy-port <port>', "the proxy's inbound port, where inbound TCP is redirected", '4143')
    .option('--outgoing-proxy-port <port>', "the proxy's outbound port, where the application's outbound TCP is redirected", '4140')
    .option('--proxy-uid <uid>', "the proxy's user: its connections are not redirected")
    .option('--proxy-gid <gid>', "the proxy's group: its connections are not redirected")
    .option('--inbound-ports-to-ignore <ports>', 'inbound ports or ranges LO-HI not redirected (comma-separated, repeatable)', collect, [] as string[])
    .option('--outbound-ports-to-ignore <ports>', 'outbound ports or ranges LO-HI not redirected (comma-separated, repeatable)', collect, [] as string[])
    .option('--ports-to-redirect <ports>', 'redirect only these inbound ports (default: all)', collect, [] as string[])
    .option('--subnets-to-ignore <cidrs>', 'source networks whose inbound traffic is not redirected (comma-separated, repeatable)', collect, [] as string[])
    .option('--iptables-mode <mode>', 'nft, legacy or plain (iptables as installed); default: the first that works here')
    .option('--netns <path>', 'write the rules in this network namespace (e.g. /run/netns/NAME) instead of the current one')
    .option('--dry-run', 'print the rules (iptables-restore input) without writing them')
    .action((opts) => {
      result.status = runProxyInit(opts as unknown as ProxyInitFlags, io);
    });
}

/** Runs `ward proxy-init`; throws `UsageError` for bad flags. */
export function runProxyInit(flags: ProxyInitFlags, io: CliIo): number {
  const options = parseProxyInitFlags(flags);
  const mode = flags.iptablesMode;
  if (mode !== undefined && !Object.hasOwn(BINARIES, mode)) throw new UsageError(`--iptables-mode "${mode}" must be nft, legacy or plain`);
  if (flags.dryRun === true) {
    io.out(proxyInitRules(options));
    return EXIT.ok;
  }
  const red = palette(io.color).red('error');
  const chosen = chooseMode(mode, flags.netns);
  if ('error' in chosen) {
    io.err(`${red}: proxy-init: no iptables to use: ${chosen.error}\n`);
    return EXIT.failed;
  }
  const rules = proxyInitRules(options, existingJumps(chosen.saved));
  const bin = BINARIES[chosen.mode];
  // -w: wait for the xtables lock rather than fail beside another writer.
  const wrote = runIn(flags.netns, bin.restore, ['-w', '--noflush'], rules);
  if (!wrote.ok) {
    io.err(`${red}: proxy-init: ${bin.restore} failed: ${wrote.detail}\n`);
    return EXIT.failed;
  }
  // What the table holds now (the same after a rerun): the chains and the jumps into them.
  const after = runIn(flags.netns, bin.save, ['-t', 'nat']);
  const shown = after.ok ? after.stdout.split('\n').filter((l) => l.includes('PROXY_INIT_')) : [];
  io.err(`proxy-init: nat rules written with ${bin.restore}\n`);
  io.out(shown.length > 0 ? `${shown.join('\n')}\n` : rules);
  return EXIT.ok;
}
