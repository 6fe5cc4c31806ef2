/**
 * Status of policy objects and routes, computed from the policy index: what the controller's
 * leader writes into `status` (ARCHITECTURE "Beyond upstream"; POLICY-SEMANTICS §1.7, §1.11).
 *
 * Pure and clock-free: conditions carry type, status, reason and message; the writer adds
 * `observedGeneration` and `lastTransitionTime`. A view is a snapshot of one index state; build a
 * new one after the index changes.
 *
 * Routes get `status.parents` exactly as Linkerd's status controller computes them
 * (policy-controller/k8s/status): per parentRef that is a Server or a Service, in spec order;
 * Server parents carry only `Accepted`, Service parents `Accepted` and `ResolvedRefs` (backends).
 * Server, AuthorizationPolicy, ServerAuthorization, MeshTLSAuthentication and
 * NetworkAuthentication get `Accepted` and `ResolvedRefs` conditions and the number of pods and
 * pod ports they govern, from the same selection and reference rules the index applies.
 */
import { GATEWAY_GROUP, POLICY_GROUP, selectorMatches } from '../core/index.js';
import type { BackendRefSpec, ParentRef, Resource, Server } from '../manifest/index.js';
import { type ApSpec, type SazSpec, sameGroup, sameName } from './convert.js';
import type { PodInfo } from './pod.js';
import type { IndexedResource, PolicyIndex } from './policy-index.js';

/** The `controllerName` of route parent statuses (Linkerd's, so Linkerd tooling reads them). */
export const POLICY_CONTROLLER_NAME = 'linkerd.io/policy-controller';

/** A condition without its clock and generation fields. */
export interface StatusCondition {
  readonly type: 'Accepted' | 'ResolvedRefs';
  readonly status: 'True' | 'False' | 'Unknown';
  readonly reason: string;
  readonly message: string;
}

/** Kinds that get `status.conditions` and selection counts. */
export type PolicyStatusKind = 'Server' | 'ServerAuthorization' | 'AuthorizationPolicy' | 'MeshTLSAuthentication' | 'NetworkAuthentication';

/** The status of one policy object. */
export interface PolicyStatus {
  /** `[Accepted, ResolvedRefs]`. */
  readonly conditions: readonly [StatusCondition, StatusCondition];
  /** Meshed pods the object governs. */
  readonly selectedPods: number;
  /** Pod ports (pod, port pairs) the object governs. */
  readonly selectedPorts: number;
}

/** A route's `status.parents[].parentRef` as Linkerd writes it. */
export interface StatusParentRef {
  readonly group: string;
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
  readonly port?: number;
}

/** One entry of a route's `status.parents`. */
export interface RouteParentStatusEntry {
  readonly parentRef: StatusParentRef;
  readonly controllerName: string;
  readonly conditions: readonly StatusCondition[];
}

/** What a Service parent needs: Linkerd accepts Services with a ClusterIP that are not ExternalName. */
export interface ServiceFacts {
  readonly clusterIP?: string | undefined;
  readonly type?: string | undefined;
}

/** Looks up a Service (undefined when it does not exist). */
export type ServiceLookup = (namespace: string, name: string) => ServiceFacts | undefined;

/** Identifies an object the view computes status for. `group` matters for HTTPRoutes only. */
export interface StatusRef {
  readonly kind: string;
  readonly group?: string | undefined;
  readonly namespace: string;
  readonly name: string;
}

const cond = (type: StatusCondition['type'], status: StatusCondition['status'], reason: string, message = ''): StatusCondition => ({
  type,
  status,
  reason,
  message,
});
const ACCEPTED = cond('Accepted', 'True', 'Accepted');
const RESOLVED = cond('ResolvedRefs', 'True', 'ResolvedRefs');

/** A set of pod ports, counted as pods and ports. */
class Selection {
  readonly pods = new Set<string>();
  readonly ports = new Set<string>();

  add(namespace: string, pod: string, port: number): void {
    this.pods.add(`${namespace}/${pod}`);
    this.ports.add(`${namespace}/${pod}:${port}`);
  }

  addAll(other: Selection): void {
    for (const p of other.pods) this.pods.add(p);
    for (const p of other.ports) this.ports.add(p);
  }
}

/** The latest version of an indexed object, even when the index keeps an older one in force. */
function latest(e: { readonly resource: Resource; readonly rejected?: { readonly resource: Resource } | undefined }): Resource {
  return e.rejected?.resource ?? e.resource;
}

function parentKey(p: ParentRef, routeNamespace: string): string | undefined {
  const ns = p.namespace ?? routeNamespace;
  if (sameName(p.kind, 'Server') && sameGroup(p.group, POLICY_GROUP)) return `Server|${ns}|${p.name}`;
  if (sameName(p.kind, 'Service') && sameGroup(p.group, '')) return `Service|${ns}|${p.name}|${p.port ?? ''}`;
  return undefined;
}

/** One namespace's objects, looked up once per view. */
interface NsCache {
  readonly servers: ReadonlyMap<string, Server>;
  readonly pods: readonly PodInfo[];
  readonly objs: ReturnType<PolicyIndex['policyObjects']>;
  readonly aps: ReadonlyMap<string, IndexedResource<ApSpec>>;
  readonly sazs: ReadonlyMap<string, IndexedResource<SazSpec>>;
  readonly ignored: ReturnType<PolicyIndex['ignored']>;
}

/**
 * A snapshot of the status of every object the index holds. Build one per reconciliation;
 * lookups are cheap after construction.
 */
export class PolicyStatusView {
  readonly #index: PolicyIndex;
  readonly #services: ServiceLookup;
  /** namespace -> Server name -> the pod ports it won. */
  readonly #bound = new Map<string, Map<string, Selection>>();
  /** Parent keys that some GRPCRoute names (GEP-1426: GRPCRoutes win over HTTPRoutes). */
  readonly #grpcParents = new Set<string>();
  readonly #podsByNs = new Map<string, PodInfo[]>();
  readonly #nsCache = new Map<string, NsCache>();
  /** `kind|namespace|lower-case name` of an authentication -> pod ports of the policies requiring it. */
  #authnUsers: Map<string, Selection> | undefined;

  constructor(index: PolicyIndex, services: ServiceLookup = () => undefined) {
    this.#index = index;
    this.#services = services;
    for (const pod of index.pods()) {
      const list = this.#podsByNs.get(pod.namespace) ?? [];
      list.push(pod);
      this.#podsByNs.set(pod.namespace, list);
      for (const b of index.bindings(pod.namespace, pod.name)) this.#boundOf(pod.namespace, b.server).add(pod.namespace, pod.name, b.port);
    }
    for (const ns of index.namespaces()) {
      for (const e of index.policyObjects(ns).grpcRoutes) {
        const r = latest(e);
        if (r.kind !== 'GRPCRoute') continue;
        for (const p of r.spec.parentRefs) {
          const key = parentKey(p, ns);
          if (key !== undefined) this.#grpcParents.add(key);
        }
      }
    }
  }

  #ns(namespace: string): NsCache {
    let c = this.#nsCache.get(namespace);
    if (c === undefined) {
      const objs = this.#index.policyObjects(namespace);
      c = {
        servers: new Map(this.#index.servers(namespace).map((s) => [s.metadata.name, s])),
        pods: this.#podsByNs.get(namespace) ?? [],
        objs,
        aps: new Map(objs.authorizationPolicies.map((e) => [e.resource.metadata.name, e])),
        sazs: new Map(objs.serverAuthorizations.map((e) => [e.resource.metadata.name, e])),
        ignored: this.#index.ignored(namespace),
      };
      this.#nsCache.set(namespace, c);
    }
    return c;
  }

  #boundOf(namespace: string, server: string): Selection {
    let byServer = this.#bound.get(namespace);
    if (byServer === undefined) {
      byServer = new Map();
      this.#bound.set(namespace, byServer);
    }
    let sel = byServer.get(server);
    if (sel === undefined) {
      sel = new Selection();
      byServer.set(server, sel);
    }
    return sel;
  }

  /** The status of a policy object, or undefined when the index does not hold it. */
  policyStatus(ref: StatusRef): PolicyStatus | undefined {
    switch (ref.kind) {
      case 'Server':
        return this.#serverStatus(ref.namespace, ref.name);
      case 'AuthorizationPolicy':
        return this.#authorizationPolicyStatus(ref.namespace, ref.name);
      case 'ServerAuthorization':
        return this.#serverAuthorizationStatus(ref.namespace, ref.name);
      case 'MeshTLSAuthentication':
      case 'NetworkAuthentication':
        return this.#authenticationStatus(ref.kind, ref.namespace, ref.name);
      default:
        return undefined;
    }
  }

  /**
   * The parent statuses this controller owns for a route (`HTTPRoute` of either group, or
   * `GRPCRoute`), or undefined when the index does not hold the route.
   */
  routeParents(ref: StatusRef): RouteParentStatusEntry[] | undefined {
    const objs = this.#ns(ref.namespace).objs;
    const isGrpc = ref.kind === 'GRPCRoute';
    const group = isGrpc ? GATEWAY_GROUP : (ref.group ?? POLICY_GROUP);
    const entry = (isGrpc ? objs.grpcRoutes : objs.httpRoutes).find((e) => {
      const r = latest(e);
      return r.metadata.name === ref.name && (r.kind === 'GRPCRoute' || (r.kind === 'HTTPRoute' && r.spec.group === group));
    });
    if (entry === undefined) return undefined;
    const route = latest(entry);
    if (route.kind !== 'HTTPRoute' && route.kind !== 'GRPCRoute') return undefined;
    const backends = route.spec.rules.flatMap((rule) => rule.backendRefs ?? []);
    const out: RouteParentStatusEntry[] = [];
    for (const p of route.spec.parentRefs) {
      const ns = p.namespace ?? ref.namespace;
      const key = parentKey(p, ref.namespace);
      if (key === undefined) continue; // other kinds (Gateway, EgressNetwork) are not ours to report
      const conflicted = !isGrpc && this.#grpcParents.has(key);
      if (key.startsWith('Server|')) {
        const exists = this.#ns(ns).servers.has(p.name);
        const accepted = !exists ? cond('Accepted', 'False', 'NoMatchingParent') : conflicted ? cond('Accepted', 'False', 'RouteReasonConflicted') : ACCEPTED;
        out.push({
          parentRef: { group: POLICY_GROUP, kind: 'Server', namespace: ns, name: p.name },
          controllerName: POLICY_CONTROLLER_NAME,
          conditions: [accepted],
        });
        continue;
      }
      const svc = this.#services(ns, p.name);
      let accepted: StatusCondition;
      if (svc === undefined) accepted = cond('Accepted', 'False', 'NoMatchingParent');
      else if (!isValidParentService(svc)) accepted = cond('Accepted', 'False', 'NoMatchingParent', 'parent service must have a ClusterIP');
      else accepted = conflicted ? cond('Accepted', 'False', 'RouteReasonConflicted') : ACCEPTED;
      out.push({
        parentRef: { group: 'core', kind: 'Service', namespace: ns, name: p.name, ...(p.port !== undefined ? { port: p.port } : {}) },
        controllerName: POLICY_CONTROLLER_NAME,
        conditions: [accepted, this.#backendCondition(backends, ref.namespace)],
      });
    }
    return out;
  }

  #backendCondition(backends: readonly BackendRefSpec[], routeNamespace: string): StatusCondition {
    for (const b of backends) {
      const kind = b.kind ?? 'Service';
      if (sameName(kind, 'Service') && sameGroup(b.group, '')) {
        if (this.#services(b.namespace ?? routeNamespace, b.name) === undefined) return cond('ResolvedRefs', 'False', 'BackendNotFound');
      } else if (sameName(kind, 'EgressNetwork') && sameGroup(b.group, POLICY_GROUP)) {
        // ward knows no EgressNetworks; Linkerd reports an unknown one as not found.
        return cond('ResolvedRefs', 'False', 'BackendNotFound');
      } else {
        return cond('ResolvedRefs', 'False', 'InvalidKind');
      }
    }
    return RESOLVED;
  }

  // === policy objects ===

  #serverStatus(namespace: string, name: string): PolicyStatus | undefined {
    const server = this.#ns(namespace).servers.get(name);
    if (server === undefined) return undefined;
    const bound = this.#bound.get(namespace)?.get(name) ?? new Selection();
    const selector = server.spec.podSelector;
    if (selector === undefined || server.spec.externalWorkloadSelector !== undefined) {
      const msg = 'externalWorkloadSelector is not supported; the Server selects no pods';
      return {
        conditions: [cond('Accepted', 'False', 'Unsupported', msg), cond('ResolvedRefs', 'Unknown', 'Unsupported', msg)],
        selectedPods: 0,
        selectedPorts: 0,
      };
    }
    const pods = this.#ns(namespace).pods.filter((p) => selectorMatches(selector, p.labels));
    const port = server.spec.port;
    const matching = typeof port === 'number' ? pods : pods.filter((p) => p.namedPorts.has(port));
    let resolved = RESOLVED;
    if (pods.length === 0) resolved = cond('ResolvedRefs', 'False', 'NoMatchingPods', `podSelector selects no meshed pods in namespace ${namespace}`);
    else if (matching.length === 0) resolved = cond('ResolvedRefs', 'False', 'NoMatchingPort', `no selected pod has a container port named ${port}`);
    let accepted = ACCEPTED;
    if (matching.length > 0 && bound.ports.size === 0) {
      // Every port it matches went to an older Server (§3.3): it governs nothing.
      const winners = new Set<string>();
      for (const p of matching) {
        for (const b of this.#index.bindings(namespace, p.name)) if (b.losers.includes(name)) winners.add(b.server);
      }
      const names = [...winners].sort().join(', ');
      accepted = cond('Accepted', 'False', 'Conflicted', `every port it selects is served by an older Server (${names})`);
    }
    return { conditions: [accepted, resolved], selectedPods: pods.length, selectedPorts: bound.ports.size };
  }

  #serversSelection(namespace: string, names: Iterable<string>): Selection {
    const sel = new Selection();
    const byServer = this.#bound.get(namespace);
    for (const n of names) {
      const s = byServer?.get(n);
      if (s !== undefined) sel.addAll(s);
    }
    return sel;
  }

  /** Pod ports an AuthorizationPolicy's target covers (every Server of the namespace, a Server, or a route's accepted Servers). */
  #targetSelection(namespace: string, ap: ApSpec): Selection {
    const t = ap.target;
    const servers = this.#ns(namespace).servers.keys();
    switch (t.kind) {
      case 'namespace':
        return this.#serversSelection(namespace, servers);
      case 'server':
        return this.#serversSelection(
          namespace,
          [...servers].filter((s) => sameName(s, t.name)),
        );
      case 'httproute':
      case 'grpcroute': {
        const accepted: string[] = [];
        for (const [key, statuses] of this.#index.routeStatus(namespace)) {
          const slash = key.lastIndexOf('/');
          const matches = t.kind === 'grpcroute' ? key.startsWith('GRPCRoute/') : key.startsWith(`HTTPRoute/${t.group}/`);
          if (!matches || !sameName(key.slice(slash + 1), t.name)) continue;
          for (const st of statuses) if (st.accepted) accepted.push(st.server);
        }
        return this.#serversSelection(namespace, accepted);
      }
    }
  }

  #invalid(reason: string): PolicyStatus {
    return {
      conditions: [cond('Accepted', 'False', 'Invalid', reason), cond('ResolvedRefs', 'Unknown', 'Invalid', 'not evaluated: the object is invalid')],
      selectedPods: 0,
      selectedPorts: 0,
    };
  }

  #authorizationPolicyStatus(namespace: string, name: string): PolicyStatus | undefined {
    const { objs, servers, aps } = this.#ns(namespace);
    const entry = aps.get(name);
    if (entry === undefined) return undefined;
    if (!entry.converted.ok) return this.#invalid(entry.converted.reason);
    const ap = entry.converted.value;
    const problems: { reason: string; message: string }[] = [];
    const t = ap.target;
    const notFound = (what: string) => problems.push({ reason: 'TargetNotFound', message: `${what} not found in namespace ${namespace}` });
    if (t.kind === 'server' && !servers.has(t.name) && ![...servers.keys()].some((s) => sameName(s, t.name))) notFound(`Server ${t.name}`);
    if (
      t.kind === 'httproute' &&
      !objs.httpRoutes.some((e) => {
        const r = latest(e);
        return r.kind === 'HTTPRoute' && r.spec.group === t.group && sameName(r.metadata.name, t.name);
      })
    )
      notFound(`HTTPRoute ${t.name}`);
    if (t.kind === 'grpcroute' && !objs.grpcRoutes.some((e) => sameName(latest(e).metadata.name, t.name))) notFound(`GRPCRoute ${t.name}`);
    for (const [kind, ref] of [
      ['MeshTLSAuthentication', ap.meshTLS],
      ['NetworkAuthentication', ap.network],
    ] as const) {
      if (ref !== undefined && !this.#index.resolvesAuthn(kind, ref.namespace, ref.name)) {
        problems.push({
          reason: 'AuthenticationNotFound',
          message: `${kind} ${ref.namespace}/${ref.name} not found or invalid; the policy authorizes nothing (fail closed)`,
        });
      }
    }
    const sel = this.#targetSelection(namespace, ap);
    return { conditions: [acceptedOf(entry), resolvedOf(problems)], selectedPods: sel.pods.size, selectedPorts: sel.ports.size };
  }

  #serverAuthorizationStatus(namespace: string, name: string): PolicyStatus | undefined {
    const entry = this.#ns(namespace).sazs.get(name);
    if (entry === undefined) return undefined;
    if (!entry.converted.ok) return this.#invalid(entry.converted.reason);
    const ref = entry.converted.value.server;
    const servers = [...this.#ns(namespace).servers.values()];
    const targets = (
      'name' in ref ? servers.filter((s) => s.metadata.name === ref.name) : servers.filter((s) => selectorMatches(ref.selector, s.metadata.labels))
    ).map((s) => s.metadata.name);
    const problems =
      targets.length > 0
        ? []
        : [
            {
              reason: 'TargetNotFound',
              message:
                'name' in ref ? `Server ${ref.name} not found in namespace ${namespace}` : `spec.server.selector matches no Server in namespace ${namespace}`,
            },
          ];
    const sel = this.#serversSelection(namespace, targets);
    return { conditions: [acceptedOf(entry), resolvedOf(problems)], selectedPods: sel.pods.size, selectedPorts: sel.ports.size };
  }

  #authenticationStatus(kind: 'MeshTLSAuthentication' | 'NetworkAuthentication', namespace: string, name: string): PolicyStatus | undefined {
    const ignored = this.#ns(namespace).ignored.find((i) => i.resource.kind === kind && i.resource.metadata.name === name);
    const valid = this.#index.resolvesAuthn(kind, namespace, name);
    if (!valid) return ignored === undefined ? undefined : this.#invalid(ignored.reason);
    const sel = this.#authnSelection(kind, namespace, name);
    const accepted = ignored === undefined ? ACCEPTED : cond('Accepted', 'False', 'Invalid', ignored.reason);
    return { conditions: [accepted, RESOLVED], selectedPods: sel.pods.size, selectedPorts: sel.ports.size };
  }
  /** Pod ports of every valid AuthorizationPolicy, in any namespace, that requires the authentication. */
  #authnSelection(kind: 'MeshTLSAuthentication' | 'NetworkAuthentication', namespace: string, name: string): Selection {
    if (this.#authnUsers === undefined) {
      const users = new Map<string, Selection>();
      for (const ns of this.#index.namespaces()) {
        for (const e of this.#ns(ns).aps.values()) {
          if (!e.converted.ok) continue;
          const ap = e.converted.value;
          for (const [k, ref] of [
            ['MeshTLSAuthentication', ap.meshTLS],
            ['NetworkAuthentication', ap.network],
          ] as const) {
            if (ref === undefined) continue;
            const key = `${k}|${ref.namespace}|${ref.name.toLowerCase()}`;
            const sel = users.get(key) ?? new Selection();
            sel.addAll(this.#targetSelection(ns, ap));
            users.set(key, sel);
          }
        }
      }
      this.#authnUsers = users;
    }
    return this.#authnUsers.get(`${kind}|${namespace}|${name.toLowerCase()}`) ?? new Selection();
  }
}

/** Linkerd's `valid_parent_service`: a ClusterIP other than None, and not ExternalName. */
function isValidParentService(svc: ServiceFacts): boolean {
  const ip = svc.clusterIP;
  return ip !== undefined && ip !== '' && ip.toLowerCase() !== 'none' && svc.type !== 'ExternalName';
}

function acceptedOf<T>(entry: IndexedResource<T>): StatusCondition {
  if (entry.rejected === undefined) return ACCEPTED;
  return cond('Accepted', 'False', 'Invalid', `${entry.rejected.reason}; the previous version stays in force`);
}

function resolvedOf(problems: readonly { reason: string; message: string }[]): StatusCondition {
  const first = problems[0];
  if (first === undefined) return RESOLVED;
  return cond('ResolvedRefs', 'False', first.reason, problems.map((p) => p.message).join('; '));
}
