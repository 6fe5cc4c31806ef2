/**
 * Denials and audited requests, grouped so a person can read them: one row per (namespace,
 * workload, port, client identity, server, route, reason, kind, decision) with a count, the
 * first and last time it was seen and one example request. `ward status`, the controller's
 * `/api/v1/denials` and the dashboard all group with this one function so they agree.
 * Pure: times are ISO strings carried by the events, never read from a clock.
 */

/** A workload reference (`{kind: 'Deployment', name: 'web'}`); `kind: 'Pod'` for a bare pod. */
export interface WorkloadRef {
  readonly kind: string;
  readonly name: string;
}

/**
 * The fields of a tap event (the controller's `/api/v1/tap` line) that grouping reads. A full
 * TapEvent is assignable to it; a `kind` field, when the source knows it (proxy log lines do),
 * wins over the kind inferred from the status codes.
 */
export interface DenialEvent {
  /** ISO 8601 time (UTC, `Z`), so string order is time order. */
  readonly time: string;
  readonly namespace: string;
  readonly pod: string;
  /** The pod's workload; null or absent when unknown (the pod then stands for itself). */
  readonly workload?: WorkloadRef | null | undefined;
  readonly port: number;
  readonly method?: string | null | undefined;
  readonly path?: string | null | undefined;
  readonly clientAddr: string;
  /** The client's mesh identity; null for a plaintext (or unauthenticated TLS) client. */
  readonly clientId: string | null;
  /** `kind/name` of the Server (or `default/<policy>`). */
  readonly server: string | null;
  readonly route?: string | null | undefined;
  readonly decision: 'allow' | 'deny' | 'audit';
  readonly reason?: string | null | undefined;
  readonly status?: number | null | undefined;
  readonly grpcStatus?: number | null | undefined;
  /** `http403`, `grpc7`, `http404`, `grpc5`, `http500`, `tcp-refuse`, `tcp-terminate`. */
  readonly kind?: string | null | undefined;
}

/** What the client of a group is called when it has no identity. */
export const PLAINTEXT_CLIENT = 'plaintext client';

/** One example request of a group: the most recent one. */
export interface DenialExample {
  readonly time: string;
  readonly pod: string;
  readonly method: string | null;
  readonly path: string | null;
  readonly clientAddr: string;
}

/** Requests or connections denied (or, for `audit`, that would have been) for one reason. */
export interface DenialGroup {
  readonly namespace: string;
  readonly workload: WorkloadRef;
  readonly port: number;
  /** The client's identity, or `plaintext client`. */
  readonly client: string;
  /** The client's identity; null for a plaintext client. */
  readonly clientId: string | null;
  readonly server: string | null;
  readonly route: string | null;
  readonly reason: string | null;
  /** `http403`, `grpc7`, `tcp-refuse`, … for denials; `audit` for audited requests. */
  readonly kind: string;
  readonly decision: 'deny' | 'audit';
  readonly count: number;
  readonly firstSeen: string;
  readonly lastSeen: string;
  /** The pods of the workload the events came from, sorted. */
  readonly pods: readonly string[];
  readonly example: DenialExample;
}

/** Narrows the events grouped; every given field must match. */
export interface DenialFilter {
  readonly namespace?: string | undefined;
  readonly pod?: string | undefined;
  /** A denial kind (`http403`, `grpc7`, `tcp-refuse`, …) or `audit`. */
  readonly kind?: string | undefined;
  readonly decision?: 'deny' | 'audit' | undefined;
}

/** The denial kinds `--kind` accepts (plus `audit`). */
export const DENIAL_KINDS: readonly string[] = ['http403', 'grpc7', 'http404', 'grpc5', 'http500', 'tcp-refuse', 'tcp-terminate', 'audit'];

/** The kind of a denial or audit event: its own `kind`, else what its status codes say. */
export function denialKind(e: DenialEvent): string {
  if (e.decision === 'audit') return 'audit';
  if (typeof e.kind === 'string' && e.kind !== '') return e.kind;
  if (e.grpcStatus === 7) return 'grpc7';
  if (e.grpcStatus === 5) return 'grpc5';
  if (e.status === 403) return 'http403';
  if (e.status === 404) return 'http404';
  if (e.status === 500) return 'http500';
  // No HTTP request: the connection itself was refused.
  if (e.method === null || e.method === undefined) return 'tcp-refuse';
  return 'http403';
}

interface Acc {
  group: Omit<DenialGroup, 'count' | 'firstSeen' | 'lastSeen' | 'pods' | 'example'>;
  count: number;
  firstSeen: string;
  lastSeen: string;
  pods: Set<string>;
  example: DenialExample;
}

/**
 * Groups the deny and audit events (allows are skipped) that pass `filter`. Groups come most
 * recently seen first; ties by count, then by key so the order is stable.
 */
export function groupDenials(events: Iterable<DenialEvent>, filter: DenialFilter = {}): DenialGroup[] {
  const groups = new Map<string, Acc>();
  for (const e of events) {
    if (e.decision !== 'deny' && e.decision !== 'audit') continue;
    if (filter.namespace !== undefined && e.namespace !== filter.namespace) continue;
    if (filter.pod !== undefined && e.pod !== filter.pod) continue;
    if (filter.decision !== undefined && e.decision !== filter.decision) continue;
    const kind = denialKind(e);
    if (filter.kind !== undefined && kind !== filter.kind) continue;
    const workload = e.workload ?? { kind: 'Pod', name: e.pod };
    const route = e.route ?? null;
    const reason = e.reason ?? null;
    const key = JSON.stringify([e.namespace, workload.kind, workload.name, e.port, e.clientId, e.server, route, reason, kind, e.decision]);
    const example: DenialExample = { time: e.time, pod: e.pod, method: e.method ?? null, path: e.path ?? null, clientAddr: e.clientAddr };
    const acc = groups.get(key);
    if (acc === undefined) {
      groups.set(key, {
        group: {
          namespace: e.namespace,
          workload: { kind: workload.kind, name: workload.name },
          port: e.port,
          client: e.clientId ?? PLAINTEXT_CLIENT,
          clientId: e.clientId,
          server: e.server,
          route,
          reason,
          kind,
          decision: e.decision,
        },
        count: 1,
        firstSeen: e.time,
        lastSeen: e.time,
        pods: new Set([e.pod]),
        example,
      });
      continue;
    }
    acc.count++;
    acc.pods.add(e.pod);
    if (e.time < acc.firstSeen) acc.firstSeen = e.time;
    if (e.time >= acc.lastSeen) {
      acc.lastSeen = e.time;
      acc.example = example;
    }
  }
  const out = [...groups.entries()].map(([key, a]) => ({
    key,
    group: { ...a.group, count: a.count, firstSeen: a.firstSeen, lastSeen: a.lastSeen, pods: [...a.pods].sort(), example: a.example },
  }));
  out.sort((x, y) => {
    if (x.group.lastSeen !== y.group.lastSeen) return x.group.lastSeen < y.group.lastSeen ? 1 : -1;
    if (x.group.count !== y.group.count) return y.group.count - x.group.count;
    return x.key < y.key ? -1 : x.key > y.key ? 1 : 0;
  });
  return out.map((o) => o.group);
}
