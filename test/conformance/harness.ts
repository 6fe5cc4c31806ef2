/**
 * Turns the conformance file's shorthand (pods, probes, env) into manifests and ward test suites,
 * and compares controller output in the file's readable notation with ward's proto3 JSON.
 */
import type { Json } from '../../src/api/index.js';

type Obj = Record<string, unknown>;

/** The conformance file's pod shorthand. */
export interface PodShorthand {
  namespace: string;
  name: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  serviceAccount?: string;
  meshed?: boolean;
  injectedProxyContainer?: boolean;
  containers: { name: string; ports?: { name?: string; containerPort: number }[]; readiness?: Probe; liveness?: Probe; startup?: Probe }[];
}
interface Probe {
  port: number | string;
  path: string;
}

/** A Pod manifest for a shorthand pod, after injection (the harness conventions). */
export function podManifest(p: PodShorthand): Obj {
  const labels: Record<string, string> = { ...(p.labels ?? {}) };
  if (p.meshed !== false) labels['linkerd.io/control-plane-ns'] = 'linkerd';
  const probe = (pr: Probe | undefined) => (pr === undefined ? undefined : { httpGet: { port: pr.port, path: pr.path } });
  const containers: Obj[] = p.containers.map((c) => ({
    name: c.name,
    ports: c.ports ?? [],
    ...(c.readiness ? { readinessProbe: probe(c.readiness) } : {}),
    ...(c.liveness ? { livenessProbe: probe(c.liveness) } : {}),
    ...(c.startup ? { startupProbe: probe(c.startup) } : {}),
  }));
  if (p.injectedProxyContainer) {
    containers.push({
      name: 'linkerd-proxy',
      ports: [
        { name: 'linkerd-proxy', containerPort: 4143 },
        { name: 'linkerd-admin', containerPort: 4191 },
      ],
      readinessProbe: { httpGet: { port: 4191, path: '/ready' } },
      livenessProbe: { httpGet: { port: 4191, path: '/live' } },
    });
  }
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { namespace: p.namespace, name: p.name, labels, annotations: p.annotations ?? {} },
    spec: { serviceAccountName: p.serviceAccount ?? 'default', containers },
  };
}

/** The `cluster:` block of a suite from a case's env. */
export function clusterBlock(env: Obj | undefined): Obj {
  const out: Obj = {};
  if (env?.clusterDefaultPolicy !== undefined) out.defaultPolicy = env.clusterDefaultPolicy;
  if (env?.clusterNetworks !== undefined) out.clusterNetworks = env.clusterNetworks;
  if (env?.probeNetworks !== undefined) out.probeNetworks = env.probeNetworks;
  return out;
}

/** A ward test entry for a conformance probe, with only the deterministic expectation keys. */
export function suiteTest(probe: Obj, name: string): Obj {
  const client = probe.client as Obj;
  const from: Obj = { ip: client.ip, identity: client.tlsIdentity ?? null };
  if (client.tls !== undefined) from.tls = client.tls;
  if (client.sni !== undefined) from.sni = client.sni;
  const t: Obj = { name, to: { pod: probe.pod, port: probe.port }, from };
  const http = probe.http as Obj | undefined;
  if (http?.grpc !== undefined) t.grpc = http.grpc;
  else if (http !== undefined)
    t.http = {
      method: http.method ?? 'GET',
      path: http.path ?? '/',
      ...(http.host ? { host: http.host } : {}),
      ...(http.headers ? { headers: http.headers } : {}),
    };
  else t.tcp = true;
  const e = probe.expect as Obj;
  const expect: Obj = {};
  for (const k of ['decision', 'denyKind', 'level', 'server', 'route', 'authz']) if (e[k] !== undefined) expect[k] = e[k];
  // Where upstream allows several decisions, ward commits to the recommended one (checked again by the caller).
  if (e.decisionOneOf !== undefined) expect.decision = e.recommended;
  t.expect = expect;
  return t;
}

const SNAKE = /_([a-z])/g;

function ipv4Text(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

function ipv6Text(first: string | undefined, last: string | undefined): string {
  const hi = BigInt(first ?? '0');
  const lo = BigInt(last ?? '0');
  const hex: string[] = [];
  for (const w of [hi, lo]) for (let s = 48n; s >= 0n; s -= 16n) hex.push(((w >> s) & 0xffffn).toString(16));
  // Compress the longest zero run like RFC 5952.
  const text = hex.join(':');
  const m = [...text.matchAll(/(?:^|:)(0(?::0)+)(?:$|:)/g)].sort((a, b) => (b[1] as string).length - (a[1] as string).length)[0];
  if (m === undefined) return text;
  const start = (m.index as number) + (m[0].startsWith(':') ? 1 : 0);
  const before = text.slice(0, start).replace(/:$/, '');
  const after = text.slice(start + (m[1] as string).length).replace(/^:/, '');
  return `${before}::${after}`;
}

/** Rewrites ward's proto3 JSON into the conformance notation (CIDR text, method names). */
export function readable(v: Json): unknown {
  if (Array.isArray(v)) return v.map(readable);
  if (v === null || typeof v !== 'object') return v;
  const o = v as Record<string, Json>;
  if ('ip' in o && typeof o.ip === 'object' && o.ip !== null && !Array.isArray(o.ip)) {
    const ip = o.ip as Record<string, Json>;
    const len = (o.prefixLen as number | undefined) ?? 0;
    if ('ipv4' in ip) return `${ipv4Text(ip.ipv4 as number)}/${len}`;
    if ('ipv6' in ip) {
      const v6 = ip.ipv6 as Record<string, string>;
      return `${ipv6Text(v6.first, v6.last)}/${len}`;
    }
  }
  if ('registered' in o && Object.keys(o).length === 1) return o.registered;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(o)) out[k] = readable(x);
  return out;
}

/**
 * Subset comparison: every key of `expected` must match in `actual` (snake_case keys map to
 * lowerCamelCase; `[]`/null equal absent; `<key>Count` compares an array's length). Returns the
 * path of the first difference, or undefined.
 */
export function diff(expected: unknown, actual: unknown, path = '$'): string | undefined {
  const empty = (x: unknown) => x === undefined || x === null || (Array.isArray(x) && x.length === 0);
  if (empty(expected))
    return empty(actual) || (typeof actual === 'object' && actual !== null && Object.keys(actual).length === 0)
      ? undefined
      : `${path}: expected empty, got ${JSON.stringify(actual)}`;
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) return `${path}: expected ${expected.length} items, got ${JSON.stringify(actual)}`;
    for (let i = 0; i < expected.length; i++) {
      const d = diff(expected[i], actual[i], `${path}[${i}]`);
      if (d !== undefined) return d;
    }
    return undefined;
  }
  if (typeof expected === 'object') {
    if (typeof actual !== 'object' || actual === null) return `${path}: expected an object, got ${JSON.stringify(actual)}`;
    const a = actual as Record<string, unknown>;
    for (const [k, v] of Object.entries(expected as Record<string, unknown>)) {
      const camel = k.replace(SNAKE, (_, c: string) => c.toUpperCase());
      if (camel.endsWith('Count') && typeof v === 'number') {
        const list = a[camel.slice(0, -'Count'.length)];
        const n = Array.isArray(list) ? list.length : 0;
        if (n !== v) return `${path}.${k}: expected ${v}, got ${n}`;
        continue;
      }
      const d = diff(v, a[camel], `${path}.${k}`);
      if (d !== undefined) return d;
    }
    return undefined;
  }
  if (typeof expected === 'string' && typeof actual === 'string') {
    // Durations: the file writes 10s, proto3 JSON writes "10s".
    return expected === actual ? undefined : `${path}: expected ${expected}, got ${actual}`;
  }
  return expected === actual ? undefined : `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`;
}
