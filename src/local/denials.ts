/**
 * Recent denials and audited requests, read from the proxies' logs: each proxy logs every denied
 * request and connection at info (pino JSON), and every HTTP request and opaque connection the
 * `audit` default policy lets through ("Request allowed", "inbound TCP connection allowed", with
 * authz default:audit) — the ones that would be denied under a deny default. The runtime keeps
 * the last ones of each for `ward status`, which groups them.
 */

/** One denial or audited request, as `ward status -o json` lists it. */
export interface Denial {
  /** ISO time the proxy logged it. */
  readonly time: string;
  readonly namespace: string;
  readonly pod: string;
  readonly port: number;
  /** `http403`, `grpc7`, `http404`, `grpc5`, `http500`, `tcp-refuse`, `tcp-terminate` (a policy change closed the connection), or `audit`. */
  readonly kind: string;
  /** `audit`: allowed by the audit default policy, which would otherwise have denied it. */
  readonly decision: 'deny' | 'audit';
  /** The client's address. */
  readonly client: string;
  /** The client's mesh identity; null for a plaintext (or unauthenticated TLS) client. */
  readonly clientId: string | null;
  /** `kind/name` of the server (a Server, or `default/<policy>`). */
  readonly server: string | null;
  /** `kind/name` of the route that matched (HTTP), else null. */
  readonly route: string | null;
  readonly authz?: string;
  readonly reason: string;
  readonly method?: string;
  readonly path?: string;
}

const MESSAGES: Readonly<Record<string, string | undefined>> = {
  'Request denied': 'http',
  'inbound TCP connection denied': 'tcp-refuse',
  'Connection terminated due to policy change': 'tcp-terminate',
  'admin request denied': 'http',
  'Request allowed': 'audit',
  'inbound TCP connection allowed': 'audit',
};

/** The reason given to an audited request (the proxy logs none: it was allowed). */
export const AUDIT_REASON = 'allowed only by the audit default policy';

/** Whether `ms` is a time `Date` can print (a log line may carry any number). */
function isValidTimeMs(ms: number): boolean {
  return Number.isFinite(ms) && Math.abs(ms) <= 8.64e15;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

/** `kind/name` of a logged resource reference: `{kind, name}` (HTTP) or `"kind:name"` (TCP, admin). */
function ref(v: unknown): string | null {
  if (typeof v === 'string') {
    const i = v.indexOf(':');
    return i === -1 ? v : `${v.slice(0, i)}/${v.slice(i + 1)}`;
  }
  if (typeof v === 'object' && v !== null) {
    const kind = str((v as { kind?: unknown }).kind);
    const name = str((v as { name?: unknown }).name);
    if (kind !== undefined && name !== undefined) return `${kind}/${name}`;
  }
  return null;
}

/**
 * The denial a proxy log line reports, or undefined for any other line. `namespace`/`pod` name
 * the proxy's pod (its log lines do not repeat them).
 */
export function parseDenial(line: string, namespace: string, pod: string): Denial | undefined {
  if (!line.startsWith('{') || (!line.includes('denied') && !line.includes('terminated') && !line.includes('"audit"'))) return undefined;
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (typeof o !== 'object' || o === null) return undefined;
  const msg = str(o.msg);
  const family = msg === undefined ? undefined : MESSAGES[msg];
  if (family === undefined || typeof o.port !== 'number' || !Number.isInteger(o.port) || o.port < 0 || o.port > 65535) return undefined;
  const authz = ref(o.authz);
  // Other permits are logged at debug; only an audit permit is a would-be denial.
  if (family === 'audit' && authz !== 'default/audit') return undefined;
  const reason = family === 'audit' ? AUDIT_REASON : (str(o.reason) ?? '');
  // Older proxies do not log the kind: a missing route is a 404, anything else a 403.
  const kind = family === 'http' ? (str(o.kind) ?? (reason === 'no route found for request' ? 'http404' : 'http403')) : family;
  const decision = family === 'audit' ? 'audit' : 'deny';
  const tls = str(o.tls);
  const clientId = tls?.startsWith('mtls ') === true && tls !== 'mtls -' ? tls.slice('mtls '.length) : null;
  const time =
    typeof o.time === 'string' ? o.time : typeof o.time === 'number' && isValidTimeMs(o.time) ? new Date(o.time).toISOString() : new Date().toISOString();
  const method = str(o.method);
  const path = str(o.path);
  return {
    time,
    namespace,
    pod,
    port: o.port,
    kind,
    decision,
    client: str(o.client) ?? '',
    clientId,
    server: ref(o.server),
    route: ref(o.route),
    ...(authz !== null ? { authz } : {}),
    reason,
    ...(method !== undefined ? { method } : {}),
    ...(path !== undefined ? { path } : {}),
  };
}

/**
 * The last `capacity` denials (default 100) and, apart, the last `capacity` audited requests, so
 * that a busy audit-mode namespace does not push the denials out.
 */
export class DenialLog {
  readonly #capacity: number;
  readonly #denials: Denial[] = [];
  readonly #audits: Denial[] = [];

  constructor(capacity = 100) {
    this.#capacity = capacity;
  }

  add(d: Denial): void {
    const items = d.decision === 'audit' ? this.#audits : this.#denials;
    items.push(d);
    if (items.length > this.#capacity) items.splice(0, items.length - this.#capacity);
  }

  /** Denials then audited requests, each oldest first. */
  list(): Denial[] {
    return [...this.#denials, ...this.#audits];
  }
}
