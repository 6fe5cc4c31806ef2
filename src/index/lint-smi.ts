/**
 * `ward check` for SMI access policy: references that do not resolve (SMI002, SMI003), subjects
 * ward cannot identify (SMI004, SMI005), destinations without pods (SMI006), and the traps of
 * running SMI on ward's engine: a Linkerd Server on a governed port (it wins: SMI007), HTTP
 * rules on an opaque port (SMI008), UDPRoutes (SMI009), a literal pathRegex read as a prefix
 * (SMI010), a TrafficTarget that admits nothing (SMI011), and matches of TrafficTargets with
 * different sources that one request satisfies together, where the proxy decides on one (SMI013),
 * and regexes whose nested repetition JavaScript may run in exponential time (SMI014).
 */
import {
  compileHttpRoutes,
  type Diagnostic,
  type DiagnosticCode,
  diagnostic,
  type HttpRoute,
  httpRouteMismatch,
  httpRoutesOf,
  type RouteRequest,
  selectHttpRoute,
} from '../core/index.js';
import { hasNestedQuantifier, type SmiResource, smiFieldPath, smiPositionOf, type TrafficTarget } from '../manifest/index.js';
import type { PodInfo } from './pod.js';
import type { PolicyIndex } from './policy-index.js';
import { governsPort, type SmiCompiledTarget } from './smi.js';

type Report = (code: DiagnosticCode, params: Readonly<Record<string, string | number>>, r: SmiResource, path: readonly (string | number)[]) => void;

// A pathRegex without any regex syntax reads as a prefix in the SMI text but matches one path here.
const LITERAL_PATH = /^\/[A-Za-z0-9/_~%-]*[A-Za-z0-9_~%-]$/;

/** SMI findings over the whole index. */
export function lintSmi(index: PolicyIndex): Diagnostic[] {
  const out: Diagnostic[] = [];
  const report: Report = (code, params, r, path) =>
    out.push(
      diagnostic(code, params, {
        resource: { kind: r.kind, namespace: r.metadata.namespace, name: r.metadata.name },
        path: smiFieldPath(r, path),
        source: smiPositionOf(r, path),
      }),
    );
  const domain = index.identityDomain;
  for (const ns of index.namespaces()) {
    const smi = index.smi(ns);
    if (smi === undefined) continue;
    for (const g of smi.httpRouteGroups.values()) {
      g.spec.matches.forEach((m, i) => {
        const at = ['spec', 'matches', i];
        if (m.pathRegex !== undefined && LITERAL_PATH.test(m.pathRegex)) report('SMI010', { value: m.pathRegex }, g, [...at, 'pathRegex']);
        if (m.pathRegex !== undefined && hasNestedQuantifier(m.pathRegex))
          report('SMI014', { field: 'pathRegex', value: m.pathRegex }, g, [...at, 'pathRegex']);
        for (const h of m.headers ?? []) {
          if (hasNestedQuantifier(h.value)) report('SMI014', { field: `header ${h.name}`, value: h.value }, g, [...at, 'headers']);
        }
      });
    }
    const compiled = new Map(smi.compiled(domain).map((t) => [t.name, t]));
    const pods = index.pods().filter((p) => p.namespace === ns);
    for (const tt of smi.targets.values()) {
      const t = compiled.get(tt.metadata.name);
      if (t === undefined) continue;
      lintReferences(tt, smi, report);
      lintTarget(index, tt, t, pods, report);
    }
    lintOverlaps(index, ns, pods, smi.targets, report);
  }
  return out;
}

/** Request paths a path regex surely or likely matches: its text with wildcards filled in. */
function samplePaths(regex: string): string[] {
  const out = new Set<string>();
  for (const fill of ['', 'x', 'x/y']) {
    const text = regex
      .replace(/^\^|\$$/g, '')
      .replace(/\((?:\?:)?([^()|]*)\|[^()]*\)/g, '$1')
      .replace(/\.[*+]|\[[^\]]*\][*+]/g, (m) => (m.endsWith('+') && fill === '' ? 'x' : fill))
      .replace(/[()?]/g, '')
      .replace(/\\(.)/g, '$1');
    if (text.startsWith('/')) out.add(text);
  }
  return [...out];
}

/**
 * SMI013: on each governed port, two SMI routes whose authorizations differ and that one request
 * (a sample of either's path regex, a method both allow, no headers) satisfies together: the
 * proxy decides on the one it selects, so sources only the other admits are denied there.
 */
function lintOverlaps(index: PolicyIndex, ns: string, pods: readonly PodInfo[], targets: ReadonlyMap<string, TrafficTarget>, report: Report): void {
  const seen = new Set<string>();
  for (const p of pods) {
    for (const port of index.ports(ns, p.name)) {
      const value = index.peek(ns, p.name, port)?.value;
      if (value === undefined || value.meta.kind !== 'traffictarget') continue;
      const routes = (httpRoutesOf(value.protocol) ?? []).filter((r) => r.meta.kind === 'httproutegroup');
      if (routes.length < 2) continue;
      const table = compileHttpRoutes(routes, (r) => r);
      const authzNames = (r: HttpRoute) => r.authorizations.map((a) => a.meta.name).join(',');
      for (const a of table.routes) {
        for (const b of table.routes) {
          if (a.index >= b.index || authzNames(a.route) === authzNames(b.route)) continue;
          const key = `${p.serviceAccount}|${port}|${a.route.meta.name}|${b.route.meta.name}`;
          if (seen.has(key)) continue;
          const req = overlapRequest(a.route, b.route, (rr) => httpRouteMismatch(a, rr) === undefined && httpRouteMismatch(b, rr) === undefined);
          if (req === undefined) continue;
          seen.add(key);
          const winner = selectHttpRoute(table, req)?.route.route ?? a.route;
          const loser = winner === a.route ? b.route : a.route;
          const shut = loser.authorizations.find((x) => !winner.authorizations.some((w) => w.meta.name === x.meta.name));
          const tt = shut === undefined ? undefined : targets.get(shut.meta.name);
          if (tt === undefined) continue;
          const params = { pod: `${ns}/${p.name}`, port, request: `${req.method} ${req.path}`, first: winner.meta.name, second: loser.meta.name };
          report('SMI013', params, tt, ['spec', 'rules']);
        }
      }
    }
  }
}

function overlapRequest(a: HttpRoute, b: HttpRoute, both: (rr: RouteRequest) => boolean): RouteRequest | undefined {
  const matches = [...a.rules, ...b.rules].flatMap((r) => r.matches);
  const paths = new Set(matches.flatMap((m) => (m.path?.kind === 'regex' ? samplePaths(m.path.value) : m.path !== undefined ? [m.path.value] : ['/'])));
  const methods = new Set(['GET', ...matches.flatMap((m) => (m.method !== undefined ? [m.method] : []))]);
  for (const path of paths) {
    for (const method of methods) {
      const rr: RouteRequest = { method, path, query: '', host: '', headers: {} };
      if (both(rr)) return rr;
    }
  }
  return undefined;
}

function lintReferences(tt: TrafficTarget, smi: NonNullable<ReturnType<PolicyIndex['smi']>>, report: Report): void {
  const ns = tt.metadata.namespace;
  const { destination, sources, rules } = tt.spec;
  if (destination.kind !== 'ServiceAccount') report('SMI004', { role: 'destination', value: destination.kind }, tt, ['spec', 'destination', 'kind']);
  if (destination.namespace !== undefined && destination.namespace !== ns) {
    report('SMI005', { value: destination.namespace, namespace: ns }, tt, ['spec', 'destination', 'namespace']);
  }
  sources.forEach((s, i) => {
    if (s.kind !== 'ServiceAccount') report('SMI004', { role: 'source', value: s.kind }, tt, ['spec', 'sources', i, 'kind']);
  });
  rules.forEach((rule, i) => {
    const at = ['spec', 'rules', i];
    if (rule.kind === 'UDPRoute') {
      report('SMI009', { rule: i, name: rule.name }, tt, at);
      return;
    }
    const target = rule.kind === 'HTTPRouteGroup' ? smi.httpRouteGroups.get(rule.name) : smi.tcpRoutes.get(rule.name);
    if (target === undefined) {
      report('SMI002', { rule: i, kind: rule.kind, name: rule.name, namespace: ns }, tt, [...at, 'name']);
      return;
    }
    if (target.kind !== 'HTTPRouteGroup') return;
    const defined = target.spec.matches.map((m) => m.name);
    (rule.matches ?? []).forEach((match, j) => {
      if (!defined.includes(match)) {
        report('SMI003', { rule: i, match, name: rule.name, matches: defined.length > 0 ? defined.join(', ') : '(none)' }, tt, [...at, 'matches', j]);
      }
    });
  });
}

function lintTarget(index: PolicyIndex, tt: TrafficTarget, t: SmiCompiledTarget, pods: readonly PodInfo[], report: Report): void {
  const ns = tt.metadata.namespace;
  const name = tt.metadata.name;
  if (t.authz.authentication.kind === 'tlsAuthenticated' && t.authz.authentication.identities.length === 0) {
    report('SMI011', { name, detail: 'it names no ServiceAccount source', fix: 'list the callers under sources, each with kind: ServiceAccount' }, tt, [
      'spec',
      'sources',
    ]);
  } else if (tt.spec.rules.length === 0) {
    report('SMI011', { name, detail: 'it has no rules', fix: 'name an HTTPRouteGroup or a TCPRoute under rules' }, tt, ['spec', 'rules']);
  }
  if (t.serviceAccount === undefined) return;
  const selected = pods.filter((p) => p.serviceAccount === t.serviceAccount);
  if (selected.length === 0) {
    // A namespace without any pod is a partial set (policy checked alone), not a wrong name.
    if (pods.length > 0) report('SMI006', { namespace: ns, name: t.serviceAccount }, tt, ['spec', 'destination', 'name']);
    return;
  }
  for (const p of selected) {
    const bound = new Map(index.bindings(ns, p.name).map((b) => [b.port, b.server]));
    const ports = new Set<number>([...p.declaredPorts, ...bound.keys(), ...(typeof t.port === 'number' ? [t.port] : [])]);
    for (const port of [...ports].sort((a, b) => a - b)) {
      if (!governsPort(t, p, port)) continue;
      const server = bound.get(port);
      if (server !== undefined) report('SMI007', { server, name, pod: `${ns}/${p.name}`, port }, tt, ['spec', 'destination']);
      else if (p.opaquePorts.has(port) && t.hasHttpRules && t.tcpPorts === undefined) {
        report('SMI008', { name, pod: `${ns}/${p.name}`, port }, tt, ['spec', 'rules']);
      }
    }
  }
}
