/**
 * The controller's tap events: a proxy's `/tap` line with the pod it came from added
 * (`namespace`, `pod`, `workload`). Lines from proxies are parsed field by field — a proxy is a
 * peer over mesh TLS, but its stream is still input — and anything that is not a well-formed event
 * or end line is counted and skipped, never passed on.
 */

/** A workload reference; `kind: 'Pod'` for a pod without an owner. */
export interface TapWorkload {
  readonly kind: string;
  readonly name: string;
}

/** One line of `/api/v1/tap` (the shape the dashboard and `ward tap -o json` read). */
export interface TapEvent {
  readonly time: string;
  readonly namespace: string;
  readonly pod: string;
  readonly workload: TapWorkload;
  readonly port: number;
  readonly method: string | null;
  readonly authority: string | null;
  /** Without its query string: proxies never report one. */
  readonly path: string | null;
  readonly clientAddr: string;
  readonly clientId: string | null;
  readonly tls: boolean;
  readonly server: string;
  readonly route: string | null;
  readonly authz: string | null;
  readonly decision: 'allow' | 'deny' | 'audit';
  readonly reason: string | null;
  readonly status: number | null;
  readonly grpcStatus: number | null;
  readonly latencyMs: number | null;
  /** The denial's kind (`http403`, `grpc7`, `tcp-refuse`, `tcp-terminate`…); null for allow and audit. */
  readonly kind: string | null;
  /** Why a permitted exchange failed without a complete response; null when it completed. */
  readonly error: string | null;
}

/** A proxy's event: a {@link TapEvent} without the pod. */
export type ProxyTapEvent = Omit<TapEvent, 'namespace' | 'pod' | 'workload'>;

/** A proxy stream's last line. */
export interface ProxyTapEnd {
  readonly reason: string;
  readonly events: number;
  readonly dropped: { readonly rate: number; readonly slow: number };
}

/** What one line of a proxy's stream is. */
export type ProxyTapLine =
  | { readonly kind: 'event'; readonly event: ProxyTapEvent }
  | { readonly kind: 'end'; readonly end: ProxyTapEnd }
  | { readonly kind: 'invalid' };

const INVALID: ProxyTapLine = Object.freeze({ kind: 'invalid' });
const DECISIONS = new Set(['allow', 'deny', 'audit']);
/** Longest string field kept (a path, an authority, a reason…). */
const MAX_STRING = 4096;

type Obj = Record<string, unknown>;

function str(o: Obj, k: string): string | undefined {
  const v = o[k];
  return typeof v === 'string' && v.length <= MAX_STRING ? v : undefined;
}

/** A string, null, or `bad` when neither. */
function strOrNull(o: Obj, k: string): string | null | typeof BAD {
  const v = o[k];
  if (v === null) return null;
  return typeof v === 'string' && v.length <= MAX_STRING ? v : BAD;
}

function numOrNull(o: Obj, k: string): number | null | typeof BAD {
  const v = o[k];
  if (v === null) return null;
  return typeof v === 'number' && Number.isFinite(v) ? v : BAD;
}

const BAD = Symbol('bad');

function count(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
}

/** Parses one line of a proxy's `/tap` stream. Never throws. */
export function parseProxyTapLine(line: string): ProxyTapLine {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch {
    return INVALID;
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return INVALID;
  const o = raw as Obj;
  if ('end' in o) {
    const e = o.end;
    if (typeof e !== 'object' || e === null) return INVALID;
    const end = e as Obj;
    const d = end.dropped;
    const dropped = typeof d === 'object' && d !== null ? (d as Obj) : {};
    const reason = str(end, 'reason');
    const events = count(end.events);
    const rate = count(dropped.rate);
    const slow = count(dropped.slow);
    if (reason === undefined || events === undefined || rate === undefined || slow === undefined) return INVALID;
    return { kind: 'end', end: { reason, events, dropped: { rate, slow } } };
  }
  const time = str(o, 'time');
  const port = o.port;
  const clientAddr = str(o, 'clientAddr');
  const server = str(o, 'server');
  const decision = o.decision;
  if (time === undefined || Number.isNaN(Date.parse(time)) || clientAddr === undefined || server === undefined) return INVALID;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) return INVALID;
  if (typeof decision !== 'string' || !DECISIONS.has(decision)) return INVALID;
  if (typeof o.tls !== 'boolean') return INVALID;
  const method = strOrNull(o, 'method');
  const authority = strOrNull(o, 'authority');
  const path = strOrNull(o, 'path');
  const clientId = strOrNull(o, 'clientId');
  const route = strOrNull(o, 'route');
  const authz = strOrNull(o, 'authz');
  const reason = strOrNull(o, 'reason');
  const kind = 'kind' in o ? strOrNull(o, 'kind') : null;
  const error = 'error' in o ? strOrNull(o, 'error') : null;
  const status = numOrNull(o, 'status');
  const grpcStatus = numOrNull(o, 'grpcStatus');
  const latencyMs = numOrNull(o, 'latencyMs');
  if (
    method === BAD ||
    authority === BAD ||
    path === BAD ||
    clientId === BAD ||
    route === BAD ||
    authz === BAD ||
    reason === BAD ||
    kind === BAD ||
    error === BAD ||
    status === BAD ||
    grpcStatus === BAD ||
    latencyMs === BAD
  ) {
    return INVALID;
  }
  // Proxies never send a query string; one here is not passed on either.
  if (path?.includes('?') === true) return INVALID;
  return {
    kind: 'event',
    event: {
      time,
      port,
      method,
      authority,
      path,
      clientAddr,
      clientId,
      tls: o.tls,
      server,
      route,
      authz,
      decision: decision as TapEvent['decision'],
      reason,
      status,
      grpcStatus,
      latencyMs,
      kind,
      error,
    },
  };
}

/** The workload of a pod from its owner (`Deployment/web`), or the pod itself. */
export function workloadOf(pod: string, owner: string | undefined): TapWorkload {
  const slash = owner?.indexOf('/') ?? -1;
  if (owner === undefined || slash <= 0 || slash === owner.length - 1) return { kind: 'Pod', name: pod };
  return { kind: owner.slice(0, slash), name: owner.slice(slash + 1) };
}

/** A proxy's event with its pod, in the documented field order. */
export function withPod(e: ProxyTapEvent, namespace: string, pod: string, workload: TapWorkload): TapEvent {
  return {
    time: e.time,
    namespace,
    pod,
    workload,
    port: e.port,
    method: e.method,
    authority: e.authority,
    path: e.path,
    clientAddr: e.clientAddr,
    clientId: e.clientId,
    tls: e.tls,
    server: e.server,
    route: e.route,
    authz: e.authz,
    decision: e.decision,
    reason: e.reason,
    status: e.status,
    grpcStatus: e.grpcStatus,
    latencyMs: e.latencyMs,
    kind: e.kind,
    error: e.error,
  };
}
