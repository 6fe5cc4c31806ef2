/**
 * `explain` as a request (the CLI's flags, or the controller's JSON API body): parsed into a
 * probe and evaluated with the proxy's engine. One parser for both, so an online explain means
 * exactly what an offline one does.
 */
import { type ExplainResult, evaluate, identityOfServiceAccount, type ProbeClient, type ProbeTraffic } from './explain-probe.js';
import { type PolicyView, QueryError } from './query-error.js';
import { parseTarget } from './targets.js';

/** What to explain, as `ward explain` flags name it. */
export interface ExplainRequest {
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
}

const TLS_MODES = ['none', 'mesh', 'no-client-cert', 'passthrough'] as const;

/** The traffic the request describes; no --http/--grpc means an opaque TCP connection. */
export function trafficOf(o: ExplainRequest): ProbeTraffic {
  const given = [o.http !== undefined, o.grpc !== undefined, o.tcp === true].filter(Boolean).length;
  if (given > 1) throw new QueryError('give only one of --http, --grpc and --tcp');
  if (o.grpc !== undefined) {
    const slash = o.grpc.lastIndexOf('/');
    if (slash <= 0 || slash === o.grpc.length - 1) throw new QueryError(`--grpc wants SERVICE/METHOD, got "${o.grpc}"`);
    return { kind: 'grpc', service: o.grpc.slice(0, slash), method: o.grpc.slice(slash + 1) };
  }
  if (o.tcp === true || o.http === undefined) return { kind: 'tcp' };
  const m = /^\s*([A-Za-z]+)\s+(\S+)\s*$/.exec(o.http);
  if (m === null) throw new QueryError(`--http wants 'METHOD PATH', got "${o.http}"`);
  const headers: Record<string, string> = {};
  for (const h of o.header ?? []) {
    const colon = h.indexOf(':');
    if (colon <= 0) throw new QueryError(`--header wants 'Name: value', got "${h}"`);
    headers[h.slice(0, colon).trim().toLowerCase()] = h.slice(colon + 1).trim();
  }
  return { kind: 'http', method: m[1] as string, path: m[2] as string, headers, host: o.host };
}

/** Builds the client: an identity implies mesh TLS, none implies plaintext. */
export function clientOf(view: PolicyView, o: Pick<ExplainRequest, 'fromIp' | 'fromIdentity' | 'fromSa' | 'tls' | 'sni'>): ProbeClient {
  if (o.fromIdentity !== undefined && o.fromSa !== undefined) throw new QueryError('give only one of --from-identity and --from-sa');
  const identity = o.fromSa !== undefined ? identityOfServiceAccount(view, o.fromSa) : o.fromIdentity;
  if (o.tls !== undefined && !(TLS_MODES as readonly string[]).includes(o.tls)) throw new QueryError(`--tls must be one of ${TLS_MODES.join(', ')}`);
  if (o.tls === 'mesh' && identity === undefined)
    throw new QueryError('--tls mesh needs --from-identity or --from-sa (use --tls no-client-cert for TLS without a certificate)');
  if (o.tls !== undefined && o.tls !== 'mesh' && identity !== undefined) throw new QueryError(`--tls ${o.tls} cannot carry a client identity`);
  return { ip: o.fromIp, identity, tls: o.tls as ProbeClient['tls'], sni: o.sni };
}

/** Parses and evaluates an explain request. Throws `QueryError` for bad input or an unknown pod. */
export function explainRequest(view: PolicyView, o: ExplainRequest): ExplainResult {
  const target = parseTarget(view, o.to, o.namespace);
  return evaluate(view, { ...target, client: clientOf(view, o), traffic: trafficOf(o) });
}
