/**
 * One tapped request or connection as a proxy reports it: the controller's TapEvent without the
 * pod's namespace, name and workload (the controller adds them; a proxy does not know its
 * workload). Only facts the proxy decided on are carried: method, authority, the path without its
 * query string, the client's address and verified identity, and the policy decision. Never a
 * request or response body, never another header's value.
 *
 * Why the query string is dropped: it is where tokens, API keys and signed-URL signatures travel
 * (`?access_token=`, `?sig=`), and a tap stream, though served only to the tap identity (the
 * controller's) over mesh TLS, reaches whoever may use the controller's tap API — a wider audience
 * than the application's own logs. Linkerd's tap shows the whole
 * `:path`; ward's shows the part routes match on, which is also what the path filter compares.
 */
import { type ClientInfo, type Deny, type DenyKind, formatIp, type Meta, type Permit } from '../../core/index.js';

/** What a proxy's `/tap` stream carries per line (besides its final `{"end":…}` line). */
export interface ProxyTapEvent {
  /** ISO 8601, UTC. Allowed requests: when the exchange ended; denials: when decided. */
  readonly time: string;
  /** The port whose policy applied (4191 never: the admin port is not tapped). */
  readonly port: number;
  /** Null for a connection (TCP) event. */
  readonly method: string | null;
  readonly authority: string | null;
  /** The normalized path without its query string; null for a connection event. */
  readonly path: string | null;
  /** The client's IP address. */
  readonly clientAddr: string;
  /** The client's verified mesh identity; null without one. */
  readonly clientId: string | null;
  /** Mesh TLS was terminated by this proxy. */
  readonly tls: boolean;
  /** `kind/name` of the Server, or `default/<policy>`. */
  readonly server: string;
  readonly route: string | null;
  /** The authorization that admitted the request; null for a denial. */
  readonly authz: string | null;
  readonly decision: 'allow' | 'deny' | 'audit';
  /** Why it was denied; null otherwise. */
  readonly reason: string | null;
  /** The denial's kind (`http403`, `grpc7`, `http404`, `tcp-refuse`, `tcp-terminate`…); null for allow and audit. */
  readonly kind: string | null;
  /** The HTTP status the client got; null for a connection event or an exchange without a response. */
  readonly status: number | null;
  readonly grpcStatus: number | null;
  /** From the request to its response headers; null without a response (denials are answered at once). */
  readonly latencyMs: number | null;
  /** Why the exchange failed (`client disconnected`, `app unreachable`, `h2(CANCEL)`…); null when it completed. */
  readonly error: string | null;
}

/** `kind/name` of a policy object. */
export function metaRef(m: Meta): string {
  return `${m.kind}/${m.name}`;
}

/** The path without its query string (see the module comment). */
export function pathOf(target: string): string {
  const q = target.indexOf('?');
  return q === -1 ? target : target.slice(0, q);
}

function clientIdOf(client: ClientInfo): string | null {
  return client.tls.kind === 'established' ? (client.tls.clientId ?? null) : null;
}

/** The fields of an event every publisher fills the same way. */
interface Common {
  readonly port: number;
  readonly client: ClientInfo;
  readonly method: string | null;
  readonly authority: string | null;
  readonly path: string | null;
}

/** A denied request or connection. `status`/`grpcStatus` are what the client got. */
export function denyEvent(c: Common, d: Deny, kind: DenyKind | 'tcp-terminate', status: number | null, grpcStatus: number | null): ProxyTapEvent {
  return {
    time: new Date().toISOString(),
    port: c.port,
    method: c.method,
    authority: c.authority,
    path: c.path,
    clientAddr: formatIp(c.client.ip),
    clientId: clientIdOf(c.client),
    tls: c.client.tls.kind === 'established',
    server: metaRef(d.server),
    route: d.route === undefined ? null : metaRef(d.route),
    authz: null,
    decision: 'deny',
    reason: d.reason,
    kind,
    status,
    grpcStatus,
    latencyMs: null,
    error: null,
  };
}

/** A permitted request once its exchange ended, or an audited connection (`status` null). */
export function permitEvent(
  c: Common,
  d: Permit,
  status: number | null,
  grpcStatus: number | null,
  latencyMs: number | null,
  error: string | null,
): ProxyTapEvent {
  return {
    time: new Date().toISOString(),
    port: c.port,
    method: c.method,
    authority: c.authority,
    path: c.path,
    clientAddr: formatIp(c.client.ip),
    clientId: clientIdOf(c.client),
    tls: c.client.tls.kind === 'established',
    server: metaRef(d.server),
    route: d.route === undefined ? null : metaRef(d.route),
    authz: metaRef(d.authz),
    decision: d.isAudit ? 'audit' : 'allow',
    reason: null,
    kind: null,
    status,
    grpcStatus,
    latencyMs,
    error,
  };
}
