/**
 * `ward explain`: one connection or request, with the verdict and the whole decision chain.
 */

import { type ExplainResult, evaluate, identityOfServiceAccount, type ProbeClient, type ProbeTraffic } from '../evaluate.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { json, palette } from '../output.js';
import { parseTarget } from '../target.js';
import type { Workspace } from '../workspace.js';

/** Options of `ward explain`. */
export interface ExplainOptions {
  readonly to: string;
  readonly namespace?: string | undefined;
  readonly fromIp?: string | undefined;
  readonly fromIdentity?: string | undefined;
  readonly fromSa?: string | undefined;
  readonly tls?: string | undefined;
  readonly sni?: string | undefined;
  readonly http?: string | undefined;
  readonly header?: readonly string[] | undefined;
  readonly host?: string | undefined;
  readonly grpc?: string | undefined;
  readonly tcp?: boolean | undefined;
  readonly output: string;
}

const TLS_MODES = ['none', 'mesh', 'no-client-cert', 'passthrough'] as const;

function traffic(o: ExplainOptions): ProbeTraffic {
  const given = [o.http !== undefined, o.grpc !== undefined, o.tcp === true].filter(Boolean).length;
  if (given > 1) throw new UsageError('give only one of --http, --grpc and --tcp');
  if (o.grpc !== undefined) {
    const slash = o.grpc.lastIndexOf('/');
    if (slash <= 0 || slash === o.grpc.length - 1) throw new UsageError(`--grpc wants SERVICE/METHOD, got "${o.grpc}"`);
    return { kind: 'grpc', service: o.grpc.slice(0, slash), method: o.grpc.slice(slash + 1) };
  }
  if (o.tcp === true || o.http === undefined) return { kind: 'tcp' };
  const m = /^\s*([A-Za-z]+)\s+(\S+)\s*$/.exec(o.http);
  if (m === null) throw new UsageError(`--http wants 'METHOD PATH', got "${o.http}"`);
  const headers: Record<string, string> = {};
  for (const h of o.header ?? []) {
    const colon = h.indexOf(':');
    if (colon <= 0) throw new UsageError(`--header wants 'Name: value', got "${h}"`);
    headers[h.slice(0, colon).trim().toLowerCase()] = h.slice(colon + 1).trim();
  }
  return { kind: 'http', method: m[1] as string, path: m[2] as string, headers, host: o.host };
}

/** Builds the client from the flags: an identity implies mesh TLS, none implies plaintext. */
export function clientOf(ws: Workspace, o: Pick<ExplainOptions, 'fromIp' | 'fromIdentity' | 'fromSa' | 'tls' | 'sni'>): ProbeClient {
  if (o.fromIdentity !== undefined && o.fromSa !== undefined) throw new UsageError('give only one of --from-identity and --from-sa');
  const identity = o.fromSa !== undefined ? identityOfServiceAccount(ws, o.fromSa) : o.fromIdentity;
  if (o.tls !== undefined && !(TLS_MODES as readonly string[]).includes(o.tls)) throw new UsageError(`--tls must be one of ${TLS_MODES.join(', ')}`);
  if (o.tls === 'mesh' && identity === undefined)
    throw new UsageError('--tls mesh needs --from-identity or --from-sa (use --tls no-client-cert for TLS without a certificate)');
  if (o.tls !== undefined && o.tls !== 'mesh' && identity !== undefined) throw new UsageError(`--tls ${o.tls} cannot carry a client identity`);
  return { ip: o.fromIp, identity, tls: o.tls as ProbeClient['tls'], sni: o.sni };
}

/** Renders an explain result for people. */
export function formatExplain(r: ExplainResult, color: boolean): string {
  const c = palette(color);
  const verdict = r.decision === 'allow' ? c.green('ALLOW') : r.decision === 'audit-allow' ? c.yellow('AUDIT-ALLOW') : c.red(`DENY (${r.denyKind})`);
  const width = Math.max(...r.chain.map((s) => s.step.length));
  const lines = r.chain.map((s) => `  ${c.dim(s.step.padEnd(width))}  ${s.detail}`);
  return `${verdict}  level ${r.level}, ${r.server.kind}/${r.server.name}${r.route ? `, route ${r.route.kind}/${r.route.name}` : ''}${r.authz ? `, authz ${r.authz.kind}/${r.authz.name}` : ''}\n${lines.join('\n')}\n`;
}

/** Runs `ward explain`. */
export function runExplain(ws: Workspace, o: ExplainOptions, io: CliIo): number {
  const target = parseTarget(ws, o.to, o.namespace);
  const result = evaluate(ws, { ...target, client: clientOf(ws, o), traffic: traffic(o) });
  io.out(o.output === 'json' ? json(result) : formatExplain(result, io.color));
  return EXIT.ok;
}
