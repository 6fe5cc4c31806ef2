/**
 * Recent denials, read from the proxies' logs: each proxy logs every denied request and
 * connection at info (pino JSON), and the runtime keeps the last ones for `ward status`.
 */

/** One denial, as `ward status -o json` lists it. */
export interface Denial {
  /** ISO time the proxy logged it. */
  readonly time: string;
  readonly namespace: string;
  readonly pod: string;
  readonly port: number;
  /** `http403`, `grpc7`, `http404`, `grpc5`, `http500`, `tcp-refuse`, or `tcp-terminate` (a policy change closed the connection). */
  readonly kind: string;
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
};

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
  if (!line.startsWith('{') || (!line.includes('denied') && !line.includes('terminated'))) return undefined;
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (typeof o !== 'object' || o === null) return undefined;
  const msg = str(o.msg);
  const family = msg === undefined ? undefined : MESSAGES[msg];
  if (family === undefined || typeof o.port !== 'number') return undefined;
  const reason = str(o.reason) ?? '';
  // Older proxies do not log the kind: a missing route is a 404, anything else a 403.
  const kind = family === 'http' ? (str(o.kind) ?? (reason === 'no route found for request' ? 'http404' : 'http403')) : family;
  const tls = str(o.tls);
  const clientId = tls?.startsWith('mtls ') === true && tls !== 'mtls -' ? tls.slice('mtls '.length) : null;
  const time = typeof o.time === 'string' ? o.time : typeof o.time === 'number' ? new Date(o.time).toISOString() : new Date().toISOString();
  const method = str(o.method);
  const path = str(o.path);
  const authz = ref(o.authz);
  return {
    time,
    namespace,
    pod,
    port: o.port,
    kind,
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

/** The last `capacity` denials (default 100), oldest first. */
export class DenialLog {
  readonly #capacity: number;
  readonly #items: Denial[] = [];

  constructor(capacity = 100) {
    this.#capacity = capacity;
  }

  add(d: Denial): void {
    this.#items.push(d);
    if (this.#items.length > this.#capacity) this.#items.splice(0, this.#items.length - this.#capacity);
  }

  list(): Denial[] {
    return [...this.#items];
  }
}
