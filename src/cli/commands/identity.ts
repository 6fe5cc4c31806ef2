/**
 * `ward identity`: create identity material (`init`), describe certificates (`inspect`) and mint
 * local ServiceAccount tokens (`token`).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Command, Option } from '@commander-js/extra-typings';
import {
  type CertificateReport,
  type CertificateSummary,
  DEFAULT_CA_TTL_MS,
  DEFAULT_TOKEN_TTL_MS,
  DEFAULT_TRUST_DOMAIN,
  IDENTITY_FILES,
  initIdentity,
  inspectCertificate,
  isDns1123Label,
  isDnsName,
  mintToken,
} from '../../identity/index.js';
import { parseGoDurationMs } from '../../manifest/index.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { formatDiagnostics, json, palette, table } from '../output.js';

/** Options of `ward identity init`. */
export interface IdentityInitFlags {
  readonly out: string;
  readonly trustDomain?: string | undefined;
  readonly anchorTtl?: string | undefined;
  readonly issuerTtl?: string | undefined;
  readonly force?: boolean | undefined;
}

/** Options of `ward identity inspect`. */
export interface IdentityInspectFlags {
  readonly anchor?: string | undefined;
  readonly output: string;
}

/** Options of `ward identity token`. */
export interface IdentityTokenFlags {
  readonly identityDir: string;
  readonly sa: string;
  readonly pod?: string | undefined;
  readonly ttl?: string | undefined;
}

/**
 * Adds `identity init|inspect|token` to `program`. Each action stores its exit status in
 * `result.status` (like the other commands of `main.ts`); usage problems throw `UsageError`.
 */
export function registerIdentityCommands(program: Command, io: CliIo, result: { status: number }): void {
  const identity = program.command('identity').description('workload identity: trust anchor and issuer, certificates, local tokens');

  identity
    .command('init')
    .description('create a trust anchor, an issuer and a token signing key (ECDSA P-256, PEM)')
    .requiredOption('--out <dir>', 'directory to write ca.crt, ca.key, issuer.crt, issuer.key, token.key into')
    .option('--trust-domain <domain>', `identity trust domain (default ${DEFAULT_TRUST_DOMAIN})`)
    .option('--anchor-ttl <duration>', 'trust anchor lifetime, Go duration (default 8760h)')
    .option('--issuer-ttl <duration>', 'issuer lifetime, Go duration (default 8760h)')
    .option('--force', 'replace existing files')
    .action(async (opts) => {
      result.status = await runIdentityInit(opts, io);
    });

  identity
    .command('inspect')
    .description('describe a PEM certificate or chain, optionally verifying it against trust anchors')
    .argument('<file>', 'PEM file (a certificate, possibly followed by its chain)')
    .option('--anchor <file>', 'trust anchors (PEM); exit 1 when the chain does not verify')
    .addOption(new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text'))
    .action((file, opts) => {
      result.status = runIdentityInspect(file, opts, io);
    });

  identity
    .command('token')
    .description('mint a ServiceAccount token the local CA accepts (signed with token.key)')
    .requiredOption('--identity-dir <dir>', 'directory written by `ward identity init`')
    .requiredOption('--sa <ns/name>', 'ServiceAccount as NAMESPACE/NAME')
    .option('--pod <ns/name>', 'bind the token to a pod (NAMESPACE/NAME or NAME, same namespace)')
    .option('--ttl <duration>', 'token lifetime, Go duration (default 1h)')
    .action((opts) => {
      result.status = runIdentityToken(opts, io);
    });
}

/** A positive Go duration flag in ms, or the default. */
function durationFlag(flag: string, text: string | undefined, dflt: number): number {
  if (text === undefined) return dflt;
  const ms = parseGoDurationMs(text);
  if (ms === undefined) throw new UsageError(`invalid ${flag} "${text}": want a Go duration such as 8760h, 30m or 1h30m`);
  if (!(ms > 0)) throw new UsageError(`invalid ${flag} "${text}": must be positive`);
  return ms;
}

/** Runs `ward identity init`. */
export async function runIdentityInit(flags: IdentityInitFlags, io: CliIo): Promise<number> {
  const trustDomain = flags.trustDomain ?? DEFAULT_TRUST_DOMAIN;
  if (!isDnsName(trustDomain)) throw new UsageError(`invalid --trust-domain "${trustDomain}": want a lower-case DNS name such as cluster.local`);
  const anchorTtlMs = durationFlag('--anchor-ttl', flags.anchorTtl, DEFAULT_CA_TTL_MS);
  const issuerTtlMs = durationFlag('--issuer-ttl', flags.issuerTtl, DEFAULT_CA_TTL_MS);
  if (anchorTtlMs < 60_000 || issuerTtlMs < 60_000) throw new UsageError('--anchor-ttl and --issuer-ttl must be at least 1m');
  let res: Awaited<ReturnType<typeof initIdentity>>;
  try {
    res = await initIdentity({ outDir: flags.out, trustDomain, anchorTtlMs, issuerTtlMs, force: flags.force === true });
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message : String(e));
  }
  const p = palette(io.color);
  if (!res.ok) {
    io.err(formatDiagnostics(res.diagnostics, p));
    return EXIT.usage;
  }
  const v = res.value;
  io.out(`wrote identity material for trust domain ${trustDomain} to ${flags.out}\n`);
  io.out(table(v.files.map((f) => [`  ${f.path}`, f.mode.toString(8).padStart(4, '0'), f.description])));
  io.out(
    table([
      ['trust anchor', v.anchorSubject, `expires ${new Date(v.anchorNotAfterMs).toISOString()}`],
      ['issuer', v.issuerSubject, `expires ${new Date(v.issuerNotAfterMs).toISOString()}`],
    ]),
  );
  return EXIT.ok;
}

function readInput(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    const detail = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'is a directory' : String(e);
    throw new UsageError(`cannot read ${what} ${path}: ${detail}`);
  }
}

/** Runs `ward identity inspect`; exit 1 when `--anchor` is given and the chain does not verify. */
export function runIdentityInspect(file: string, flags: IdentityInspectFlags, io: CliIo): number {
  const pem = readInput(file, 'certificate file');
  const anchors = flags.anchor === undefined ? undefined : readInput(flags.anchor, 'trust anchor file');
  let report: CertificateReport;
  try {
    report = inspectCertificate(pem, anchors);
  } catch (e) {
    const which = e instanceof Error && e.message.startsWith('trust anchors: ') ? (flags.anchor as string) : file;
    throw new UsageError(`${which}: ${e instanceof Error ? e.message.replace(/^trust anchors: /, '') : String(e)}`);
  }
  const failed = report.verified === false;
  if (flags.output === 'json') io.out(json({ file, ...(flags.anchor !== undefined ? { anchor: flags.anchor } : {}), ...report }));
  else io.out(formatReport(report, flags.anchor, io));
  return failed ? EXIT.failed : EXIT.ok;
}

/** `Label:   value` lines with the values aligned. */
function fields(rows: readonly [string, string][]): string {
  const width = Math.max(...rows.map(([k]) => k.length)) + 2;
  return rows.map(([k, v]) => `${`${k}:`.padEnd(width)}${v}\n`).join('');
}

function until(iso: string, now: number): string {
  const ms = Date.parse(iso) - now;
  const abs = Math.abs(ms);
  const text = abs >= 86_400_000 ? `${Math.floor(abs / 86_400_000)}d` : abs >= 3_600_000 ? `${Math.floor(abs / 3_600_000)}h` : `${Math.floor(abs / 60_000)}m`;
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}

function formatReport(r: CertificateReport, anchorFile: string | undefined, io: CliIo): string {
  const p = palette(io.color);
  const now = Date.now();
  const expired = Date.parse(r.notAfter) < now;
  const rows: [string, string][] = [
    ['Subject', r.subject],
    ['Issuer', r.issuer],
    ['SANs', r.sans.length > 0 ? r.sans.join(', ') : '(none)'],
    ['Not before', r.notBefore],
    ['Not after', `${r.notAfter} (${expired ? p.red(`expired ${until(r.notAfter, now)}`) : `expires ${until(r.notAfter, now)}`})`],
    ['Serial', r.serial],
    ['CA', r.isCa ? 'yes' : 'no'],
    ['Key', r.keyType],
    ['Key usage', r.keyUsage.join(', ') || '(none)'],
    ['Ext key usage', r.extKeyUsage.join(', ') || '(none)'],
    ['SHA-256', r.fingerprintSha256],
  ];
  if (r.chain.length > 1) rows.push(['Chain', `${r.chain.length} certificates`]);
  if (r.verified !== undefined) {
    rows.push(['Verified', r.verified ? p.green(`yes, against ${anchorFile}`) : p.red(`no: ${r.verifyError ?? 'unknown reason'}`)]);
  }
  const chain = r.chain
    .slice(1)
    .map((c: CertificateSummary, i) => `  [${i + 1}] ${c.subject}  issued by ${c.issuer}  ${c.isCa ? 'CA  ' : ''}expires ${c.notAfter}\n`);
  return fields(rows) + chain.join('');
}

function parseRef(flag: string, text: string): { namespace: string; name: string } {
  const parts = text.split('/');
  if (parts.length !== 2) throw new UsageError(`invalid ${flag} "${text}": want NAMESPACE/NAME`);
  const [namespace, name] = parts as [string, string];
  if (!isDns1123Label(namespace)) throw new UsageError(`invalid ${flag} "${text}": namespace "${namespace}" is not a DNS-1123 label`);
  return { namespace, name };
}

/** Runs `ward identity token`: prints a JWT for the ServiceAccount. */
export function runIdentityToken(flags: IdentityTokenFlags, io: CliIo): number {
  const sa = parseRef('--sa', flags.sa);
  if (!isDns1123Label(sa.name)) throw new UsageError(`invalid --sa "${flags.sa}": name "${sa.name}" is not a DNS-1123 label (identities need one)`);
  let pod: string | undefined;
  if (flags.pod !== undefined) {
    const ref = flags.pod.includes('/') ? parseRef('--pod', flags.pod) : { namespace: sa.namespace, name: flags.pod };
    if (ref.namespace !== sa.namespace) throw new UsageError(`--pod namespace "${ref.namespace}" differs from the ServiceAccount's "${sa.namespace}"`);
    if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(ref.name)) throw new UsageError(`invalid --pod "${flags.pod}": "${ref.name}" is not a DNS-1123 name`);
    pod = ref.name;
  }
  const ttlMs = durationFlag('--ttl', flags.ttl, DEFAULT_TOKEN_TTL_MS);
  if (ttlMs < 1000) throw new UsageError(`invalid --ttl "${flags.ttl}": must be at least 1s`);
  const keyPem = readInput(join(flags.identityDir, IDENTITY_FILES.tokenKey), 'token key');
  let token: string;
  try {
    token = mintToken({ signerKeyPem: keyPem, namespace: sa.namespace, serviceAccount: sa.name, ttlMs, ...(pod !== undefined ? { pod } : {}) });
  } catch (e) {
    throw new UsageError(`${join(flags.identityDir, IDENTITY_FILES.tokenKey)}: ${e instanceof Error ? e.message : String(e)}`);
  }
  io.out(`${token}\n`);
  return EXIT.ok;
}
