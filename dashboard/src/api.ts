/**
 * The controller's JSON API as the dashboard reads it (same origin: the admin port serves both).
 * The shapes are the API's own (src/controller/admin-api.ts, the feature routes' doc comments);
 * fields the dashboard does not read are left out.
 */
import type { PolicyGraph } from '../../src/core/index.js';

export type { GraphBulk, GraphEdge, GraphNode } from '../../src/core/index.js';

/** A workload reference as the traffic routes write it. */
export interface WorkloadRef {
  readonly namespace: string;
  readonly kind: string;
  readonly name: string;
}

/** /api/v1/graph (src/controller/dashboard/dashboard-routes.ts): core's graph plus the route's fields. */
export interface Graph extends Omit<PolicyGraph, 'stats'> {
  readonly version: number;
  readonly namespace: string | null;
  readonly computeMs: number;
}

/** /api/v1/edges: observed traffic. */
export interface TrafficEdge {
  readonly src: WorkloadRef | null;
  readonly srcIdentity: string | null;
  readonly dst: WorkloadRef;
  readonly dstIdentity: string | null;
  readonly port: number | null;
  readonly secured: boolean;
  readonly reason: string | null;
  readonly connections: number;
  readonly rps: number;
  readonly deniedRps: number;
}

/** /api/v1/observe/targets: whether each meshed pod's proxy answers the controller's scrape. */
export interface ScrapeTarget {
  readonly namespace: string;
  readonly pod: string;
  readonly up: boolean;
  readonly error?: string;
}

/** /api/v1/pods. */
export interface PodEntry {
  readonly namespace: string;
  readonly name: string;
  readonly serviceAccount: string;
  readonly identity: string;
  readonly podIP: string | null;
}

/** /api/v1/authz of a workload. */
export interface AuthzEntry {
  readonly kind: string;
  readonly name: string;
  readonly admits: string;
}
export interface PortView {
  readonly port: number;
  readonly server: { readonly kind: string; readonly name: string };
  readonly protocol: string;
  readonly authorizations: readonly AuthzEntry[];
  readonly routes: readonly { readonly kind: string; readonly name: string; readonly authorizations: readonly AuthzEntry[] }[];
}
export interface PodView {
  readonly namespace: string;
  readonly name: string;
  readonly serviceAccount: string;
  readonly ports: readonly PortView[];
}

/** POST /api/v1/explain. */
export interface ExplainResult {
  readonly decision: 'allow' | 'audit-allow' | 'deny';
  readonly denyKind: string | null;
  readonly level: 'http' | 'tcp';
  readonly server: { readonly kind: string; readonly name: string };
  readonly route: { readonly kind: string; readonly name: string } | null;
  readonly authz: { readonly kind: string; readonly name: string } | null;
  readonly chain: readonly { readonly step: string; readonly detail: string }[];
}

/** One line of /api/v1/tap. */
export interface TapEvent {
  readonly time: string;
  readonly namespace: string;
  readonly pod: string;
  readonly workload: { readonly kind: string; readonly name: string };
  readonly port: number;
  readonly method: string;
  readonly authority: string;
  readonly path: string;
  readonly clientAddr: string;
  readonly clientId: string | null;
  readonly tls: boolean;
  readonly server: string;
  readonly route: string | null;
  readonly authz: string | null;
  readonly decision: 'allow' | 'deny' | 'audit';
  readonly reason: string | null;
  readonly status: number | null;
  readonly latencyMs: number | null;
}

/** An API failure with the API's code and message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

async function failure(res: Response): Promise<ApiError> {
  try {
    const body = (await res.json()) as { error?: { code?: string; message?: string } };
    return new ApiError(res.status, body.error?.code ?? 'UNKNOWN', body.error?.message ?? `HTTP ${res.status}`);
  } catch {
    return new ApiError(res.status, 'UNKNOWN', `HTTP ${res.status}`);
  }
}

/** GETs JSON from the API; throws ApiError with the API's message on failure. */
export async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await fetch(path, { headers: { accept: 'application/json' }, ...(signal !== undefined ? { signal } : {}) });
  if (!res.ok) throw await failure(res);
  return (await res.json()) as T;
}

/** POSTs JSON to the API. */
export async function postJson<T>(path: string, body: unknown): Promise<T> {
  const res = await fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!res.ok) throw await failure(res);
  return (await res.json()) as T;
}

/**
 * Reads an NDJSON stream line by line until it ends or `signal` aborts. Lines that do not parse
 * are reported through `onLine` as errors rather than ending the stream.
 */
export async function readNdjson(path: string, signal: AbortSignal, onLine: (value: unknown) => void): Promise<void> {
  const res = await fetch(path, { signal, headers: { accept: 'application/x-ndjson' } });
  if (!res.ok) throw await failure(res);
  if (res.body === null) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += value;
    let nl = buffered.indexOf('\n');
    while (nl !== -1) {
      const line = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      if (line !== '') {
        let value: unknown;
        try {
          value = JSON.parse(line);
        } catch {
          value = { error: { code: 'BAD_LINE', message: `not JSON: ${line.slice(0, 120)}` } };
        }
        onLine(value);
      }
      nl = buffered.indexOf('\n');
    }
  }
}

/** `kubectl`-style resource argument of a workload (`deploy/web`), as /api/v1/authz and explain take it. */
export function resourceArg(kind: string, name: string, namespace: string): string {
  const short: Record<string, string> = { Deployment: 'deploy', StatefulSet: 'sts', DaemonSet: 'ds', ReplicaSet: 'rs', Job: 'job', CronJob: 'cj' };
  const k = short[kind];
  return k === undefined ? `pod/${namespace}/${name}` : `${k}/${name}`;
}
