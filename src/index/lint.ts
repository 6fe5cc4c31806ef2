/**
 * Cross-resource lint: the traps that only show when resources are seen together with the pods
 * they govern (CLI.md `ward check`). Every finding is a warning or info with a position and a
 * hint; none changes what the index computes.
 */
import {
  authorizeRequest,
  clientInfo,
  compileServer,
  type Diagnostic,
  type DiagnosticCode,
  diagnostic,
  firstHost,
  netContainsNet,
  type ResourceRef,
  selectorMatches,
} from '../core/index.js';
import { ANNOTATIONS, type Namespace, type Resource } from '../manifest/index.js';
import { sameName } from './convert.js';
import { lintIdentities } from './lint-identities.js';
import { lintSmi } from './lint-smi.js';
import type { ClusterConfig, PolicyIndex } from './policy-index.js';

function refOf(r: Resource): ResourceRef {
  return { kind: r.kind, namespace: r.metadata.namespace, name: r.metadata.name };
}

function at(r: Resource, path: readonly (string | number)[]) {
  return { resource: refOf(r), path, source: r.origin?.positionOf(path) };
}

/**
 * A plaintext address that stands for the kubelet. The kubelet probes from its node's address,
 * which `--probe-networks` describes: so an address inside the probe networks, preferably one
 * also inside the cluster networks (node addresses usually are), else the first probe network's.
 */
function kubeletAddress(config: ClusterConfig): string {
  for (const p of config.probeNetworks) {
    for (const c of config.clusterNetworks) {
      const inner = netContainsNet(p.net, c.net) ? c.net : netContainsNet(c.net, p.net) ? p.net : undefined;
      if (inner !== undefined) return firstHost(inner);
    }
  }
  const net = config.probeNetworks[0] ?? config.clusterNetworks[0];
  return net === undefined ? '10.0.0.1' : firstHost(net.net);
}

/** Lints the whole indexed set. `resources` are the inputs the index was built from. */
export function lintIndex(index: PolicyIndex, resources: readonly Resource[]): Diagnostic[] {
  const out: Diagnostic[] = [];
  const push = (code: DiagnosticCode, params: Record<string, string | number>, r: Resource, path: (string | number)[]) =>
    out.push(diagnostic(code, params, at(r, path)));
  const servers = resources.filter((r) => r.kind === 'Server');
  const namespaces = new Map(resources.filter((r): r is Namespace => r.kind === 'Namespace').map((n) => [n.metadata.name, n]));

  // Servers: selection, named ports, overlaps.
  for (const s of servers) {
    const ns = s.metadata.namespace;
    const pods = index.pods().filter((p) => p.namespace === ns);
    if (s.spec.podSelector === undefined) continue;
    const selected = pods.filter(
      (p) => index.bindings(ns, p.name).some((b) => b.server === s.metadata.name || b.losers.includes(s.metadata.name)) || selects(s, p.labels),
    );
    if (pods.length > 0 && selected.length === 0) push('POL103', { name: s.metadata.name, namespace: ns }, s, ['spec', 'podSelector']);
    for (const p of selected) {
      const port = s.spec.port;
      if (typeof port === 'string' && !p.namedPorts.has(port)) push('POL104', { name: s.metadata.name, port, pod: `${ns}/${p.name}` }, s, ['spec', 'port']);
      if (typeof port === 'number' && !p.declaredPorts.has(port)) {
        out.push(diagnostic('POL113', { name: s.metadata.name, port, pod: `${ns}/${p.name}` }, at(s, ['spec', 'port'])));
      }
    }
  }
  for (const p of index.pods()) {
    for (const b of index.bindings(p.namespace, p.name)) {
      for (const loser of b.losers) {
        const srv = servers.find((s) => s.metadata.namespace === p.namespace && s.metadata.name === loser);
        if (srv === undefined) continue;
        const winner = servers.find((s) => s.metadata.namespace === p.namespace && s.metadata.name === b.server);
        const why = winner?.metadata.creationTimestamp !== srv.metadata.creationTimestamp ? 'it is older' : 'same age, its name sorts first';
        push('POL105', { winner: b.server, loser, pod: `${p.namespace}/${p.name}`, port: b.port, why }, srv, ['spec', 'port']);
      }
    }
  }

  // References.
  for (const ns of index.namespaces()) {
    const objs = index.policyObjects(ns);
    const serverNames = index.servers(ns).map((s) => s.metadata.name);
    for (const { resource: r, converted } of objs.authorizationPolicies) {
      if (r.kind !== 'AuthorizationPolicy' || !converted.ok) continue;
      const t = converted.value.target;
      if (t.kind === 'server' && !serverNames.some((n) => sameName(n, t.name))) {
        push('POL102', { what: 'targetRef', target: `Server ${t.name}`, namespace: ns, consequence: '; the policy authorizes nothing' }, r, [
          'spec',
          'targetRef',
        ]);
      }
      // A route policy attaches only to a route of its own API group (policy.linkerd.io vs gateway).
      if (
        t.kind === 'httproute' &&
        !objs.httpRoutes.some((h) => h.resource.kind === 'HTTPRoute' && h.resource.spec.group === t.group && sameName(h.resource.metadata.name, t.name))
      ) {
        push('POL102', { what: 'targetRef', target: `HTTPRoute ${t.name}`, namespace: ns, consequence: '; the policy authorizes nothing' }, r, [
          'spec',
          'targetRef',
        ]);
      }
      if (t.kind === 'grpcroute' && !objs.grpcRoutes.some((h) => h.resource.metadata.name.toLowerCase() === t.name.toLowerCase())) {
        push('POL102', { what: 'targetRef', target: `GRPCRoute ${t.name}`, namespace: ns, consequence: '; the policy authorizes nothing' }, r, [
          'spec',
          'targetRef',
        ]);
      }
      const refs = r.spec.requiredAuthenticationRefs ?? [];
      refs.forEach((ref, i) => {
        if (ref.name === undefined) return;
        for (const kind of ['MeshTLSAuthentication', 'NetworkAuthentication'] as const) {
          if (!sameName(ref.kind, kind)) continue;
          const refNs = ref.namespace ?? ns;
          if (!index.resolvesAuthn(kind, refNs, ref.name)) {
            push(
              'POL102',
              {
                what: 'requiredAuthenticationRefs',
                target: `${kind} ${refNs}/${ref.name}`,
                namespace: refNs,
                consequence: '; the whole policy is dropped (fail closed)',
              },
              r,
              ['spec', 'requiredAuthenticationRefs', i],
            );
          }
        }
      });
    }
    for (const { resource: r, converted } of objs.serverAuthorizations) {
      if (r.kind !== 'ServerAuthorization' || !converted.ok) continue;
      const ref = converted.value.server;
      const hit = 'name' in ref ? serverNames.includes(ref.name) : index.servers(ns).some((s) => selectorMatches(ref.selector, s.metadata.labels));
      if (!hit) {
        const target = 'name' in ref ? `Server ${ref.name}` : 'spec.server.selector';
        push('POL102', { what: 'spec.server', target, namespace: ns, consequence: '; it authorizes nothing' }, r, ['spec', 'server']);
      }
    }
    // Route acceptance and protocol fit.
    for (const [key, statuses] of index.routeStatus(ns)) {
      const isGrpc = key.startsWith('GRPCRoute/');
      const name = key.slice(key.lastIndexOf('/') + 1);
      const entry = (isGrpc ? objs.grpcRoutes : objs.httpRoutes).find(
        (e) => e.resource.metadata.name === name && (isGrpc || key === `HTTPRoute/${(e.resource as { spec: { group: string } }).spec.group}/${name}`),
      );
      if (entry === undefined) continue;
      const r = entry.resource;
      for (const st of statuses) {
        const routeKind = isGrpc ? 'GRPCRoute' : 'HTTPRoute';
        if (!st.accepted) {
          const reason =
            st.reason === 'NoMatchingParent' ? `no Server ${st.server} in namespace ${ns}` : `Server ${st.server} also has a GRPCRoute, and GRPCRoutes win`;
          const fix = st.reason === 'NoMatchingParent' ? `create Server ${st.server} or fix parentRefs` : 'attach only GRPCRoutes to a gRPC Server';
          push('POL110', { routeKind, route: name, server: st.server, reason, fix }, r, ['spec', 'parentRefs']);
          continue;
        }
        const srv = index.servers(ns).find((s) => s.metadata.name === st.server);
        const proto = srv?.spec.proxyProtocol ?? 'unknown';
        const fits = isGrpc ? proto === 'gRPC' : proto !== 'gRPC' && proto !== 'opaque' && proto !== 'TLS';
        if (!fits) {
          const fix = isGrpc
            ? 'set the Server proxyProtocol to gRPC'
            : proto === 'gRPC'
              ? 'use a GRPCRoute for a gRPC Server'
              : `${proto} ports carry no HTTP: remove the route or change proxyProtocol`;
          push('POL107', { routeKind, route: name, server: st.server, protocol: proto, fix }, r, ['spec', 'parentRefs']);
        }
      }
    }
    for (const { resource: r, reason } of index.ignored(ns)) {
      push('POL111', { kind: r.kind, name: r.metadata.name, detail: reason }, r, ['spec']);
    }
  }

  // Probes the effective policy would deny.
  const kubelet = kubeletAddress(index.config);
  for (const p of index.pods()) {
    for (const probe of p.httpProbes) {
      const cell = index.peek(p.namespace, p.name, probe.port);
      if (cell === undefined) continue;
      const client = clientInfo(kubelet, { kind: 'none', reason: 'no_tls_from_remote' });
      if (client === undefined) continue;
      const d = authorizeRequest(compileServer(cell.value), client, { method: 'GET', path: probe.path, headers: {} });
      if (d.allowed) continue;
      const srv = cell.value.meta;
      const why = d.kind === 'http404' ? `no route matches on ${srv.kind}/${srv.name}` : `${srv.kind}/${srv.name} has no authorization admitting the kubelet`;
      const fix =
        srv.kind === 'server'
          ? `add an HTTPRoute for ${probe.path} with an AuthorizationPolicy admitting the probe network, or authorize the Server`
          : 'authorize the kubelet, or use a default policy that admits probes';
      const container = p.pod.spec.containers.findIndex((c) => c.name === probe.container);
      const path = container === -1 ? ['spec'] : ['spec', 'containers', container, `${probe.type}Probe`];
      push('POL106', { probe: probe.type, method: 'GET', path: probe.path, port: probe.port, pod: `${p.namespace}/${p.name}`, why, fix }, p.pod, path);
    }
  }

  // Namespace annotations that changed after pods were created: pods given already injected
  // (as written in `resources`) whose value differs from their namespace's.
  for (const p of resources) {
    if (p.kind !== 'Pod' || index.pod(p.metadata.namespace, p.metadata.name) === undefined) continue;
    const ns = namespaces.get(p.metadata.namespace);
    if (ns === undefined) continue;
    const created = p.metadata.annotations[ANNOTATIONS.proxyVersion] !== undefined || p.spec.containers.some((c) => c.name === 'linkerd-proxy');
    if (!created) continue;
    for (const key of [ANNOTATIONS.defaultInboundPolicy, ANNOTATIONS.opaquePorts, ANNOTATIONS.requireIdentityPorts]) {
      const nsValue = ns.metadata.annotations[key];
      const podValue = p.metadata.annotations[key];
      const pod = `${p.metadata.namespace}/${p.metadata.name}`;
      if (nsValue !== undefined && nsValue !== podValue) {
        push('POL108', { namespace: p.metadata.namespace, annotation: key, nsValue, pod, podValue: podValue ?? '(unset)' }, ns, [
          'metadata',
          'annotations',
          key,
        ]);
      }
    }
  }

  for (const pod of index.unmeshedPods()) {
    out.push(diagnostic('POL112', { pod: `${pod.metadata.namespace}/${pod.metadata.name}` }, at(pod, ['metadata'])));
  }
  out.push(...lintSmi(index));
  out.push(...lintIdentities(index, resources));
  return out;
}

function selects(s: Resource, labels: Readonly<Record<string, string>>): boolean {
  return s.kind === 'Server' && s.spec.podSelector !== undefined && selectorMatches(s.spec.podSelector, labels);
}
