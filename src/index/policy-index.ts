/**
 * The policy index: resources in, one `InboundServer` per (pod, port) out (POLICY-SEMANTICS §3).
 *
 * Holds all indexing state; owned by a single writer. Changes are applied in transactions
 * (`update`) that mark namespaces dirty; recomputation happens once per transaction and touches
 * only what a change can affect: a policy object change recomputes its namespace's Server
 * policies and republishes the ports bound to the Servers whose policy changed; a Server or Pod
 * change re-runs Server selection. Values that did not change keep their identity, so cells
 * publish only real changes.
 */
import {
  ALL_NETWORKS,
  type Authorization,
  DEFAULT_GRPC_ROUTE,
  DEFAULT_HTTP_ROUTE,
  DETECT_TIMEOUT_MS,
  type DefaultPolicyName,
  deepEqual,
  defaultMeta,
  defaultPolicyAuthz,
  type GrpcRoute,
  type HttpRoute,
  type IdentityDomain,
  type IdentityMatch,
  type InboundServer,
  isDefaultPolicyName,
  LOCALHOST_AUTHZ,
  type Network,
  POLICY_GROUP,
  type ProxyProtocol,
  parseCidr,
  probeRoute,
  requireIdentity,
  selectorMatches,
  serviceAccountIdentity,
} from '../core/index.js';
import type { Pod, Resource, ResourceKey, Server } from '../manifest/index.js';
import { PolicyCell } from './cell.js';
import {
  type ApSpec,
  type AuthnRef,
  type Converted,
  convertAuthorizationPolicy,
  convertGrpcRoute,
  convertHttpRoute,
  convertMeshTLSAuthentication,
  convertServerAuthorization,
  type RouteSpec,
  type SazSpec,
  sameName,
} from './convert.js';
import { isMeshed, type PodInfo, podInfo } from './pod.js';
import { SmiNamespace } from './smi.js';

/** Cluster-wide settings (install values upstream; flags or a suite's `cluster:` block here). */
export interface ClusterConfig {
  readonly defaultPolicy: DefaultPolicyName;
  readonly clusterNetworks: readonly Network[];
  readonly probeNetworks: readonly Network[];
  readonly trustDomain: string;
  readonly controlPlaneNamespace: string;
  /**
   * Local mode (`ward up`): every pod shares the host's loopback, so each proxy's
   * `default:localhost` admits only its pod's own address, and queries say so. Default false.
   */
  readonly localhostIsPodAddress?: boolean;
}

/** The proxy-added `default:localhost` authorization of a pod, as its proxy applies it. */
export function localhostAuthzOf(config: ClusterConfig, pod: PodInfo | undefined): Authorization {
  const ip = pod?.pod.status?.podIP;
  if (config.localhostIsPodAddress !== true || ip === undefined) return LOCALHOST_AUTHZ;
  const parsed = parseCidr(ip.includes(':') ? `${ip}/128` : `${ip}/32`);
  return parsed === undefined ? LOCALHOST_AUTHZ : { ...LOCALHOST_AUTHZ, networks: [{ net: parsed, except: [] }] };
}

/** A resource the index holds, with its conversion outcome. */
export interface IndexedResource<T> {
  readonly resource: Resource;
  readonly converted: Converted<T>;
  /** The latest update, when it failed conversion and `resource` (the last valid version) stays in force. */
  readonly rejected?: { readonly resource: Resource; readonly reason: string } | undefined;
}

/** A route's acceptance by one Server parent (the emulated status controller, §1.7). */
export interface RouteParentStatus {
  readonly server: string;
  readonly accepted: boolean;
  readonly reason: 'Accepted' | 'NoMatchingParent' | 'RouteReasonConflicted';
}

/** Which Server claimed a pod port, and which lost it (for lint and explain). */
export interface PortBinding {
  readonly port: number;
  readonly server: string;
  readonly losers: readonly string[];
}

interface ServerPolicy {
  readonly server: Server;
  readonly authorizations: readonly Authorization[];
  readonly httpRoutes: readonly HttpRoute[];
  readonly grpcRoutes: readonly GrpcRoute[];
}

interface PodState {
  info: PodInfo;
  readonly cells: Map<number, PolicyCell>;
  /** port -> Server name, from the last selection. */
  bound: Map<number, string>;
  bindings: PortBinding[];
}

interface NsState {
  readonly pods: Map<string, PodState>;
  readonly unmeshed: Map<string, Pod>;
  readonly servers: Map<string, Server>;
  readonly sazs: Map<string, IndexedResource<SazSpec>>;
  readonly aps: Map<string, IndexedResource<ApSpec>>;
  readonly meshtls: Map<string, IndexedResource<readonly IdentityMatch[]>>;
  readonly netauthn: Map<string, IndexedResource<readonly Network[]>>;
  /** Key `group/name`. */
  readonly httpRoutes: Map<string, IndexedResource<RouteSpec<HttpRoute>>>;
  readonly grpcRoutes: Map<string, IndexedResource<RouteSpec<GrpcRoute>>>;
  /** SMI TrafficTargets and their routes (consulted for ports no Server binds). */
  readonly smi: SmiNamespace;
  /** Server name -> policy, recomputed when the namespace's policy objects change. */
  policies: Map<string, ServerPolicy>;
  routeStatus: Map<string, RouteParentStatus[]>;
  /** Servers changed in this transaction, with their previous version (undefined when new). */
  readonly changedServers: Map<string, Server | undefined>;
  /** Servers in selection order (oldest first, then name); rebuilt after a Server change. */
  sortedServers: Server[] | undefined;
  dirtyPolicies: boolean;
  readonly dirtyPods: Set<string>;
}

/** Operations inside one `update` transaction. */
export interface IndexTx {
  /** Adds or replaces a resource. */
  apply(resource: Resource): void;
  /** Removes a resource; unknown keys are ignored. */
  delete(key: ResourceKey): void;
}

/** Canonical key of a resource. */
export function resourceKey(r: Resource): ResourceKey {
  const group = r.kind === 'HTTPRoute' ? r.spec.group : '';
  return { kind: r.kind, group, namespace: r.metadata.namespace, name: r.metadata.name };
}

/** A creationTimestamp in ms; absent or unparseable is -Infinity (sorts first, §3.3). */
function timestampMs(text: string | undefined): number {
  const t = text === undefined ? Number.NaN : Date.parse(text);
  return Number.isNaN(t) ? Number.NEGATIVE_INFINITY : t;
}

function byName<T extends { readonly metadata: { readonly name: string } }>(a: T, b: T): number {
  return a.metadata.name < b.metadata.name ? -1 : a.metadata.name > b.metadata.name ? 1 : 0;
}

/** The policy index. See the module comment for the update model. */
export class PolicyIndex {
  readonly config: ClusterConfig;
  readonly #domain: IdentityDomain;
  readonly #namespaces = new Map<string, NsState>();
  readonly #defaultServers = new Map<string, InboundServer>();
  #inTx = false;

  constructor(config: ClusterConfig) {
    this.config = config;
    this.#domain = { controlPlaneNamespace: config.controlPlaneNamespace, trustDomain: config.trustDomain };
  }

  // === updates ===

  /** Applies several changes and recomputes once. */
  update(fn: (tx: IndexTx) => void): void {
    if (this.#inTx) throw new Error('PolicyIndex.update is not reentrant');
    this.#inTx = true;
    try {
      fn({ apply: (r) => this.#apply(r), delete: (k) => this.#delete(k) });
    } finally {
      this.#inTx = false;
    }
    this.#recompute();
  }

  /** Adds or replaces one resource. */
  apply(resource: Resource): void {
    this.update((tx) => tx.apply(resource));
  }

  /** Removes one resource. */
  delete(key: ResourceKey): void {
    this.update((tx) => tx.delete(key));
  }

  /**
   * Replaces the whole state with `resources` (a resync). Cells of pods that survive keep their
   * identity and subscribers; values are republished only where they changed.
   */
  reset(resources: readonly Resource[]): void {
    const keep = new Set(resources.map((r) => keyString(resourceKey(r))));
    this.update((tx) => {
      for (const k of this.#allKeys()) if (!keep.has(keyString(k))) tx.delete(k);
      for (const r of resources) tx.apply(r);
    });
  }

  #ns(name: string): NsState {
    let ns = this.#namespaces.get(name);
    if (ns === undefined) {
      ns = {
        pods: new Map(),
        unmeshed: new Map(),
        servers: new Map(),
        sazs: new Map(),
        aps: new Map(),
        meshtls: new Map(),
        netauthn: new Map(),
        httpRoutes: new Map(),
        grpcRoutes: new Map(),
        smi: new SmiNamespace(name),
        policies: new Map(),
        routeStatus: new Map(),
        changedServers: new Map(),
        sortedServers: undefined,
        dirtyPolicies: false,
        dirtyPods: new Set(),
      };
      this.#namespaces.set(name, ns);
    }
    return ns;
  }

  /**
   * Authentications changed in the current transaction, as `namespace/lowercase name`: the
   * namespaces whose AuthorizationPolicies reference one recompute their policies (references
   * cross namespaces; names compare case-insensitively, as #lookupAuthn resolves them).
   */
  readonly #changedAuthn = { meshTLS: new Set<string>(), network: new Set<string>() };

  #authnChanged(kind: 'meshTLS' | 'network', namespace: string, name: string): void {
    this.#changedAuthn[kind].add(`${namespace}/${name.toLowerCase()}`);
  }

  /** Marks the namespaces with a policy referencing a changed authentication (one pass per transaction). */
  #markAuthnReferences(): void {
    const { meshTLS, network } = this.#changedAuthn;
    if (meshTLS.size === 0 && network.size === 0) return;
    const hit = (set: ReadonlySet<string>, ref: AuthnRef | undefined) => ref !== undefined && set.has(`${ref.namespace}/${ref.name.toLowerCase()}`);
    for (const ns of this.#namespaces.values()) {
      if (ns.dirtyPolicies) continue;
      for (const entry of ns.aps.values()) {
        if (!entry.converted.ok) continue;
        if (hit(meshTLS, entry.converted.value.meshTLS) || hit(network, entry.converted.value.network)) {
          ns.dirtyPolicies = true;
          break;
        }
      }
    }
    meshTLS.clear();
    network.clear();
  }

  /** Stores a converted object, keeping the previous version when an update does not convert (§3.8). */
  #store<T>(map: Map<string, IndexedResource<T>>, key: string, resource: Resource, converted: Converted<T>): boolean {
    const prev = map.get(key);
    if (!converted.ok && prev !== undefined && prev.converted.ok) {
      // Stale retention: an invalid update leaves the last valid version in force; the rejected
      // update is remembered so it can still be reported.
      map.set(key, { resource: prev.resource, converted: prev.converted, rejected: { resource, reason: converted.reason } });
      return false;
    }
    map.set(key, { resource, converted });
    return true;
  }

  #apply(r: Resource): void {
    const ns = this.#ns(r.metadata.namespace);
    const name = r.metadata.name;
    switch (r.kind) {
      case 'Pod': {
        if (!isMeshed(r)) {
          ns.unmeshed.set(name, r);
          if (ns.pods.has(name)) this.#deletePod(ns, name);
          return;
        }
        ns.unmeshed.delete(name);
        const existing = ns.pods.get(name);
        const info = podInfo(r);
        if (existing === undefined) ns.pods.set(name, { info, cells: new Map(), bound: new Map(), bindings: [] });
        else existing.info = info;
        ns.dirtyPods.add(name);
        return;
      }
      case 'Server':
        if (!ns.changedServers.has(name)) ns.changedServers.set(name, ns.servers.get(name));
        ns.servers.set(name, r);
        ns.sortedServers = undefined;
        ns.dirtyPolicies = true;
        return;
      case 'ServerAuthorization':
        this.#store(ns.sazs, name, r, convertServerAuthorization(r, this.#domain));
        ns.dirtyPolicies = true;
        return;
      case 'AuthorizationPolicy':
        this.#store(ns.aps, name, r, convertAuthorizationPolicy(r));
        ns.dirtyPolicies = true;
        return;
      case 'MeshTLSAuthentication':
        this.#store(ns.meshtls, name, r, convertMeshTLSAuthentication(r, this.#domain));
        this.#authnChanged('meshTLS', r.metadata.namespace, name);
        return;
      case 'NetworkAuthentication':
        this.#store(ns.netauthn, name, r, { ok: true, value: r.spec.networks });
        this.#authnChanged('network', r.metadata.namespace, name);
        return;
      case 'HTTPRoute':
        this.#store(ns.httpRoutes, `${r.spec.group}/${name}`, r, convertHttpRoute(r));
        ns.dirtyPolicies = true;
        return;
      case 'GRPCRoute':
        this.#store(ns.grpcRoutes, name, r, convertGrpcRoute(r));
        ns.dirtyPolicies = true;
        return;
      case 'TrafficTarget':
      case 'HTTPRouteGroup':
      case 'TCPRoute':
      case 'UDPRoute':
        this.#smiChanged(ns, ns.smi.apply(r));
        return;
      default:
        // Namespaces, ServiceAccounts, Services and workloads do not shape inbound policy here.
        return;
    }
  }

  /** An SMI change republishes the pods of the destination ServiceAccounts it can affect. */
  #smiChanged(ns: NsState, serviceAccounts: ReadonlySet<string>): void {
    if (serviceAccounts.size === 0) return;
    for (const [name, pod] of ns.pods) if (serviceAccounts.has(pod.info.serviceAccount)) ns.dirtyPods.add(name);
  }

  #deletePod(ns: NsState, name: string): void {
    // Watchers of a deleted pod must not keep a policy that no longer follows changes.
    for (const cell of ns.pods.get(name)?.cells.values() ?? []) cell.close();
    ns.pods.delete(name);
    ns.dirtyPods.delete(name);
  }

  #delete(k: ResourceKey): void {
    const ns = this.#namespaces.get(k.namespace);
    if (ns === undefined) return;
    switch (k.kind) {
      case 'Pod':
        ns.unmeshed.delete(k.name);
        this.#deletePod(ns, k.name);
        return;
      case 'Server': {
        const prev = ns.servers.get(k.name);
        if (prev !== undefined) {
          if (!ns.changedServers.has(k.name)) ns.changedServers.set(k.name, prev);
          ns.servers.delete(k.name);
          ns.sortedServers = undefined;
          ns.dirtyPolicies = true;
        }
        return;
      }
      case 'ServerAuthorization':
        if (ns.sazs.delete(k.name)) ns.dirtyPolicies = true;
        return;
      case 'AuthorizationPolicy':
        if (ns.aps.delete(k.name)) ns.dirtyPolicies = true;
        return;
      case 'MeshTLSAuthentication':
        if (ns.meshtls.delete(k.name)) this.#authnChanged('meshTLS', k.namespace, k.name);
        return;
      case 'NetworkAuthentication':
        if (ns.netauthn.delete(k.name)) this.#authnChanged('network', k.namespace, k.name);
        return;
      case 'HTTPRoute': {
        const groups = k.group === '' ? [POLICY_GROUP, 'gateway.networking.k8s.io'] : [k.group];
        for (const g of groups) if (ns.httpRoutes.delete(`${g}/${k.name}`)) ns.dirtyPolicies = true;
        return;
      }
      case 'GRPCRoute':
        if (ns.grpcRoutes.delete(k.name)) ns.dirtyPolicies = true;
        return;
      default:
        this.#smiChanged(ns, ns.smi.delete(k.kind, k.name));
        return;
    }
  }

  *#allKeys(): Iterable<ResourceKey> {
    for (const [namespace, ns] of this.#namespaces) {
      for (const name of [...ns.pods.keys(), ...ns.unmeshed.keys()]) yield { kind: 'Pod', group: '', namespace, name };
      for (const name of ns.servers.keys()) yield { kind: 'Server', group: '', namespace, name };
      for (const name of ns.sazs.keys()) yield { kind: 'ServerAuthorization', group: '', namespace, name };
      for (const name of ns.aps.keys()) yield { kind: 'AuthorizationPolicy', group: '', namespace, name };
      for (const name of ns.meshtls.keys()) yield { kind: 'MeshTLSAuthentication', group: '', namespace, name };
      for (const name of ns.netauthn.keys()) yield { kind: 'NetworkAuthentication', group: '', namespace, name };
      for (const key of ns.httpRoutes.keys()) {
        const slash = key.indexOf('/');
        yield { kind: 'HTTPRoute', group: key.slice(0, slash), namespace, name: key.slice(slash + 1) };
      }
      for (const name of ns.grpcRoutes.keys()) yield { kind: 'GRPCRoute', group: '', namespace, name };
      for (const { kind, name } of ns.smi.keys()) yield { kind, group: '', namespace, name };
    }
  }

  // === recomputation ===

  #recompute(): void {
    this.#markAuthnReferences();
    for (const ns of this.#namespaces.values()) {
      if (!ns.dirtyPolicies && ns.changedServers.size === 0 && ns.dirtyPods.size === 0) continue;
      const changedPolicies = ns.dirtyPolicies ? this.#recomputePolicies(ns) : new Set<string>();
      // Pods whose Server selection may change: the changed pods, and for each changed Server
      // the pods its old or new version selects (a Server can only win or lose ports there).
      const reselect = new Set<PodState>();
      for (const name of ns.dirtyPods) {
        const pod = ns.pods.get(name);
        if (pod !== undefined) reselect.add(pod);
      }
      if (ns.changedServers.size > 0) {
        const selectors = [...ns.changedServers].flatMap(([name, prev]) => [prev, ns.servers.get(name)]).filter((s): s is Server => s !== undefined);
        for (const pod of ns.pods.values()) {
          if (reselect.has(pod)) continue;
          for (const s of selectors) {
            if (isPodServer(s) && selectorMatches(s.spec.podSelector, pod.info.labels)) {
              reselect.add(pod);
              break;
            }
          }
        }
      }
      const servers = this.#sortedServers(ns);
      for (const pod of reselect) this.#selectAndPublish(ns, pod, servers);
      if (changedPolicies.size > 0) {
        for (const pod of ns.pods.values()) {
          if (reselect.has(pod)) continue;
          for (const [port, server] of pod.bound) {
            if (changedPolicies.has(server)) this.#publishPort(ns, pod, port);
          }
        }
      }
      ns.dirtyPolicies = false;
      ns.changedServers.clear();
      ns.dirtyPods.clear();
    }
  }

  readonly #timestamps = new WeakMap<Server, number>();

  /** Creation time in ms (absent or unparseable: -Infinity, so it sorts first). */
  #createdMs(s: Server): number {
    let t = this.#timestamps.get(s);
    if (t === undefined) {
      t = timestampMs(s.metadata.creationTimestamp);
      this.#timestamps.set(s, t);
    }
    return t;
  }

  #sortedServers(ns: NsState): Server[] {
    if (ns.sortedServers === undefined) {
      const withTime = [...ns.servers.values()].map((s) => ({ s, t: this.#createdMs(s) }));
      withTime.sort((a, b) => (a.t !== b.t ? (a.t < b.t ? -1 : 1) : byName(a.s, b.s)));
      ns.sortedServers = withTime.map((x) => x.s);
    }
    return ns.sortedServers;
  }

  /** Recomputes every Server policy of the namespace; returns the names whose policy changed. */
  #recomputePolicies(ns: NsState): Set<string> {
    const changed = new Set<string>();
    const { serverAuthzs, routeAuthzs, nsAuthzs } = this.#collectAuthorizations(ns);
    const { http, grpc, status } = this.#acceptRoutes(ns);
    ns.routeStatus = status;
    const next = new Map<string, ServerPolicy>();
    for (const [name, server] of ns.servers) {
      const authorizations: Authorization[] = [...(serverAuthzs.get(name) ?? []), ...nsAuthzs];
      const ap = server.spec.accessPolicy;
      if (ap !== undefined && isDefaultPolicyName(ap)) {
        const a = defaultPolicyAuthz(ap, this.config.clusterNetworks);
        if (a !== undefined) authorizations.push(a);
      }
      const withAuthz = <R extends HttpRoute | GrpcRoute>(r: R): R => {
        const key = `${r.meta.kind.toLowerCase()}/${r.meta.group.toLowerCase()}/${r.meta.name.toLowerCase()}`;
        const authzs = routeAuthzs.get(key);
        return authzs === undefined ? r : { ...r, authorizations: authzs };
      };
      const policy: ServerPolicy = {
        server,
        authorizations,
        httpRoutes: (http.get(name) ?? []).map(withAuthz),
        grpcRoutes: (grpc.get(name) ?? []).map(withAuthz),
      };
      const prev = ns.policies.get(name);
      if (prev !== undefined && prev.server === server && deepEqual(prev, policy)) next.set(name, prev);
      else {
        next.set(name, policy);
        changed.add(name);
      }
    }
    for (const name of ns.policies.keys()) if (!next.has(name)) changed.add(name);
    ns.policies = next;
    return changed;
  }

  #lookupAuthn<T>(kind: 'meshtls' | 'netauthn', ref: { namespace: string; name: string }): T | undefined {
    const ns = this.#namespaces.get(ref.namespace);
    if (ns === undefined) return undefined;
    const map = kind === 'meshtls' ? ns.meshtls : ns.netauthn;
    const exact = map.get(ref.name);
    if (exact !== undefined) return exact.converted.ok ? (exact.converted.value as T) : undefined;
    // References compare names ASCII case-insensitively (upstream's helpers).
    for (const [name, entry] of map) {
      if (sameName(name, ref.name) && entry.converted.ok) return entry.converted.value as T;
    }
    return undefined;
  }

  /** Translates an AuthorizationPolicy into one authorization, or undefined when a reference is unresolved (fail closed). */
  #policyAuthz(name: string, entry: IndexedResource<ApSpec>, ap: ApSpec): Authorization | undefined {
    let nets: readonly Network[] | undefined;
    if (ap.network !== undefined) {
      nets = this.#lookupAuthn<readonly Network[]>('netauthn', ap.network);
      if (nets === undefined) return undefined;
    }
    let mtls: readonly IdentityMatch[] | undefined;
    if (ap.meshTLS !== undefined) {
      mtls = this.#lookupAuthn<readonly IdentityMatch[]>('meshtls', ap.meshTLS);
      if (mtls === undefined) return undefined;
    }
    // Reuse the previous value while its inputs are the same objects, so that recomputations
    // compare by reference and unchanged Servers are recognised at once.
    const hit = this.#apAuthzs.get(entry);
    if (hit !== undefined && hit.nets === nets && hit.mtls === mtls) return hit.authz;
    let matches = mtls;
    if (matches === undefined && ap.serviceAccount !== undefined) {
      matches = [{ kind: 'exact', name: serviceAccountIdentity(this.#domain, ap.serviceAccount.namespace, ap.serviceAccount.name) }];
    }
    const authz: Authorization = {
      meta: { group: POLICY_GROUP, kind: 'authorizationpolicy', name },
      networks: nets ?? ALL_NETWORKS,
      authentication: matches === undefined ? { kind: 'unauthenticated' } : identityAuthn(matches),
    };
    this.#apAuthzs.set(entry, { authz, nets, mtls });
    return authz;
  }

  readonly #apAuthzs = new WeakMap<
    IndexedResource<ApSpec>,
    { authz: Authorization; nets: readonly Network[] | undefined; mtls: readonly IdentityMatch[] | undefined }
  >();
  readonly #sazAuthzs = new WeakMap<IndexedResource<SazSpec>, Authorization>();

  #sazAuthz(name: string, entry: IndexedResource<SazSpec>, saz: SazSpec): Authorization {
    let authz = this.#sazAuthzs.get(entry);
    if (authz === undefined) {
      authz = {
        meta: { group: POLICY_GROUP, kind: 'serverauthorization', name },
        networks: saz.networks.length === 0 ? this.config.clusterNetworks : saz.networks,
        authentication: saz.authn.kind === 'tlsAuthenticated' ? identityAuthn(saz.authn.matches) : { kind: saz.authn.kind },
      };
      this.#sazAuthzs.set(entry, authz);
    }
    return authz;
  }

  #collectAuthorizations(ns: NsState): {
    serverAuthzs: Map<string, Authorization[]>;
    routeAuthzs: Map<string, Authorization[]>;
    nsAuthzs: Authorization[];
  } {
    // Explicit server-level authorizations are credited by (name, kind); see POLICY-SEMANTICS preamble.
    const serverEntries = new Map<string, { name: string; kind: string; authz: Authorization }[]>();
    const routeAuthzs = new Map<string, Authorization[]>();
    const nsAuthzs: Authorization[] = [];
    const servers = [...ns.servers.values()];
    const byLowerName = new Map<string, Server[]>();
    for (const srv of servers) {
      const k = srv.metadata.name.toLowerCase();
      byLowerName.set(k, [...(byLowerName.get(k) ?? []), srv]);
    }
    const add = (server: string, name: string, kind: string, authz: Authorization) => {
      const list = serverEntries.get(server) ?? [];
      list.push({ name, kind, authz });
      serverEntries.set(server, list);
    };
    for (const [name, entry] of ns.sazs) {
      if (!entry.converted.ok) continue;
      const saz = entry.converted.value;
      const authz = this.#sazAuthz(name, entry, saz);
      if ('name' in saz.server) {
        if (ns.servers.has(saz.server.name)) add(saz.server.name, name, 'serverauthorization', authz);
      } else {
        for (const s of servers) if (selectorMatches(saz.server.selector, s.metadata.labels)) add(s.metadata.name, name, 'serverauthorization', authz);
      }
    }
    const apNames = [...ns.aps.keys()].sort();
    for (const name of apNames) {
      const entry = ns.aps.get(name) as IndexedResource<ApSpec>;
      if (!entry.converted.ok) continue;
      const ap = entry.converted.value;
      const authz = this.#policyAuthz(name, entry, ap);
      if (authz === undefined) continue;
      switch (ap.target.kind) {
        case 'server':
          for (const s of byLowerName.get(ap.target.name.toLowerCase()) ?? []) add(s.metadata.name, name, 'authorizationpolicy', authz);
          break;
        case 'namespace':
          nsAuthzs.push(authz);
          break;
        case 'httproute':
        case 'grpcroute': {
          const group = ap.target.kind === 'grpcroute' ? 'gateway.networking.k8s.io' : ap.target.group;
          const kind = ap.target.kind === 'grpcroute' ? 'grpcroute' : 'httproute';
          const key = `${kind}/${group}/${ap.target.name.toLowerCase()}`;
          const list = routeAuthzs.get(key) ?? [];
          list.push(authz);
          routeAuthzs.set(key, list);
          break;
        }
      }
    }
    const serverAuthzs = new Map<string, Authorization[]>();
    for (const [server, list] of serverEntries) {
      list.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : 0));
      serverAuthzs.set(
        server,
        list.map((e) => e.authz),
      );
    }
    return { serverAuthzs, routeAuthzs, nsAuthzs };
  }

  /** Emulates the status controller: which routes each Server accepts (§1.7, GEP-1426). */
  #acceptRoutes(ns: NsState): {
    http: Map<string, HttpRoute[]>;
    grpc: Map<string, GrpcRoute[]>;
    status: Map<string, RouteParentStatus[]>;
  } {
    const http = new Map<string, { spec: RouteSpec<HttpRoute>; res: Resource }[]>();
    const grpc = new Map<string, { spec: RouteSpec<GrpcRoute>; res: Resource }[]>();
    const status = new Map<string, RouteParentStatus[]>();
    const grpcParents = new Set<string>();
    for (const entry of ns.grpcRoutes.values()) {
      if (!entry.converted.ok) continue;
      for (const s of entry.converted.value.servers) if (ns.servers.has(s)) grpcParents.add(s);
    }
    const record = (key: string, st: RouteParentStatus) => {
      const list = status.get(key) ?? [];
      list.push(st);
      status.set(key, list);
    };
    for (const [key, entry] of ns.grpcRoutes) {
      if (!entry.converted.ok) continue;
      for (const s of entry.converted.value.servers) {
        const exists = ns.servers.has(s);
        record(`GRPCRoute/${key}`, { server: s, accepted: exists, reason: exists ? 'Accepted' : 'NoMatchingParent' });
        if (!exists) continue;
        const list = grpc.get(s) ?? [];
        list.push({ spec: entry.converted.value, res: entry.resource });
        grpc.set(s, list);
      }
    }
    for (const [key, entry] of ns.httpRoutes) {
      if (!entry.converted.ok) continue;
      for (const s of entry.converted.value.servers) {
        const exists = ns.servers.has(s);
        const conflicted = exists && grpcParents.has(s);
        record(`HTTPRoute/${key}`, {
          server: s,
          accepted: exists && !conflicted,
          reason: !exists ? 'NoMatchingParent' : conflicted ? 'RouteReasonConflicted' : 'Accepted',
        });
        if (!exists || conflicted) continue;
        const list = http.get(s) ?? [];
        list.push({ spec: entry.converted.value, res: entry.resource });
        http.set(s, list);
      }
    }
    const order = <R extends HttpRoute | GrpcRoute>(list: { spec: RouteSpec<R> }[]): R[] =>
      list.sort((a, b) => compareRoutes(a.spec, b.spec)).map((x) => x.spec.route);
    return {
      http: new Map([...http].map(([k, v]) => [k, order(v)])),
      grpc: new Map([...grpc].map(([k, v]) => [k, order(v)])),
      status,
    };
  }

  /** Runs Server selection for a pod (§3.3) and publishes each of its known ports. */
  #selectAndPublish(ns: NsState, pod: PodState, servers: readonly Server[]): void {
    const bound = new Map<number, string>();
    const bindings = new Map<number, { server: string; losers: string[] }>();
    for (const s of servers) {
      if (!isPodServer(s) || !selectorMatches(s.spec.podSelector, pod.info.labels)) continue;
      const port = s.spec.port;
      const ports = typeof port === 'number' ? [port] : (pod.info.namedPorts.get(port) ?? []);
      for (const p of ports) {
        const b = bindings.get(p);
        if (b !== undefined) {
          b.losers.push(s.metadata.name);
          continue;
        }
        bound.set(p, s.metadata.name);
        bindings.set(p, { server: s.metadata.name, losers: [] });
      }
    }
    pod.bound = bound;
    pod.bindings = [...bindings].map(([port, b]) => ({ port, server: b.server, losers: b.losers })).sort((a, b) => a.port - b.port);
    const ports = new Set<number>([...pod.cells.keys(), ...pod.info.declaredPorts, ...bound.keys()]);
    for (const p of ports) this.#publishPort(ns, pod, p);
  }

  #publishPort(ns: NsState, pod: PodState, port: number): PolicyCell {
    const value = this.#computePort(ns, pod, port);
    let cell = pod.cells.get(port);
    if (cell === undefined) {
      cell = new PolicyCell(value);
      pod.cells.set(port, cell);
    } else {
      cell.publish(value);
    }
    return cell;
  }

  #computePort(ns: NsState, pod: PodState, port: number): InboundServer {
    const probePaths = pod.info.probePaths.get(port) ?? [];
    const serverName = pod.bound.get(port);
    const policy = serverName === undefined ? undefined : ns.policies.get(serverName);
    if (policy !== undefined) return this.#serverValue(policy, probePaths);
    const smi = ns.smi.serverFor(pod.info, port, { domain: this.#domain, probeNetworks: this.config.probeNetworks });
    if (smi !== undefined) return smi;
    let name = pod.info.defaultPolicy ?? this.config.defaultPolicy;
    if (pod.info.requireIdentityPorts.has(port)) name = requireIdentity(name);
    return this.#defaultServer(name, pod.info.opaquePorts.has(port), probePaths);
  }

  readonly #serverValues = new WeakMap<ServerPolicy, Map<string, InboundServer>>();

  #serverValue(policy: ServerPolicy, probePaths: readonly string[]): InboundServer {
    // Probe paths only matter when no HTTP route is attached (§3.6).
    const usesProbes = policy.httpRoutes.length === 0 && ['unknown', 'HTTP/1', 'HTTP/2'].includes(policy.server.spec.proxyProtocol);
    const key = usesProbes ? probePaths.join('\n') : '';
    let memo = this.#serverValues.get(policy);
    if (memo === undefined) {
      memo = new Map();
      this.#serverValues.set(policy, memo);
    }
    const hit = memo.get(key);
    if (hit !== undefined) return hit;
    const httpRoutes = policy.httpRoutes.length > 0 ? policy.httpRoutes : this.#defaultRoutes(probePaths);
    let protocol: ProxyProtocol;
    switch (policy.server.spec.proxyProtocol) {
      case 'unknown':
        protocol = { kind: 'detect', timeoutMs: DETECT_TIMEOUT_MS, httpRoutes };
        break;
      case 'HTTP/1':
        protocol = { kind: 'http1', routes: httpRoutes };
        break;
      case 'HTTP/2':
        protocol = { kind: 'http2', routes: httpRoutes };
        break;
      case 'gRPC':
        protocol = { kind: 'grpc', routes: policy.grpcRoutes.length > 0 ? policy.grpcRoutes : [DEFAULT_GRPC_ROUTE] };
        break;
      case 'opaque':
        protocol = { kind: 'opaque' };
        break;
      case 'TLS':
        protocol = { kind: 'tls' };
        break;
    }
    const value: InboundServer = {
      meta: { group: POLICY_GROUP, kind: 'server', name: policy.server.metadata.name },
      protocol,
      authorizations: policy.authorizations,
    };
    memo.set(key, value);
    return value;
  }

  #defaultRoutes(probePaths: readonly string[]): HttpRoute[] {
    const routes: HttpRoute[] = [DEFAULT_HTTP_ROUTE];
    if (this.config.probeNetworks.length > 0 && probePaths.length > 0) routes.push(probeRoute(probePaths, this.config.probeNetworks));
    return routes;
  }

  #defaultServer(name: DefaultPolicyName, opaque: boolean, probePaths: readonly string[]): InboundServer {
    const key = `${name}|${opaque ? 'o' : 'd'}|${opaque ? '' : probePaths.join('\n')}`;
    const hit = this.#defaultServers.get(key);
    if (hit !== undefined) return hit;
    const authz = defaultPolicyAuthz(name, this.config.clusterNetworks);
    const value: InboundServer = {
      meta: defaultMeta(name),
      protocol: opaque ? { kind: 'opaque' } : { kind: 'detect', timeoutMs: DETECT_TIMEOUT_MS, httpRoutes: this.#defaultRoutes(probePaths) },
      authorizations: authz === undefined ? [] : [authz],
    };
    this.#defaultServers.set(key, value);
    return value;
  }

  // === queries ===

  /**
   * The current policy of a pod port without creating a cell for it: for one-off reads (GetPort,
   * explain, the JSON API), which must neither change what `ports()` lists nor grow the index.
   */
  peek(namespace: string, pod: string, port: number): { readonly value: InboundServer } | undefined {
    const ns = this.#namespaces.get(namespace);
    const state = ns?.pods.get(pod);
    if (ns === undefined || state === undefined) return undefined;
    const cell = state.cells.get(port);
    return cell ?? { value: this.#computePort(ns, state, port) };
  }

  /**
   * The live cell of (namespace, pod, port). Undefined when the pod is not indexed (NOT_FOUND).
   * A port no Server binds gets a default server on first lookup, kept for later watches.
   */
  lookup(namespace: string, pod: string, port: number): PolicyCell | undefined {
    const ns = this.#namespaces.get(namespace);
    const state = ns?.pods.get(pod);
    if (ns === undefined || state === undefined) return undefined;
    return state.cells.get(port) ?? this.#publishPort(ns, state, port);
  }

  /** Facts of one indexed pod, or undefined. */
  pod(namespace: string, name: string): PodInfo | undefined {
    return this.#namespaces.get(namespace)?.pods.get(name)?.info;
  }

  /** Every indexed (meshed) pod. */
  pods(): PodInfo[] {
    const out: PodInfo[] = [];
    for (const ns of this.#namespaces.values()) for (const p of ns.pods.values()) out.push(p.info);
    return out;
  }

  /** Pods that are known but not meshed (never indexed). */
  unmeshedPods(): Pod[] {
    const out: Pod[] = [];
    for (const ns of this.#namespaces.values()) out.push(...ns.unmeshed.values());
    return out;
  }

  /** Ports with a published value for a pod (declared, Server-bound, or looked up), sorted. */
  ports(namespace: string, pod: string): number[] {
    const state = this.#namespaces.get(namespace)?.pods.get(pod);
    return state === undefined ? [] : [...state.cells.keys()].sort((a, b) => a - b);
  }

  /** Which Server bound each port of a pod, and which overlapping Servers lost. */
  bindings(namespace: string, pod: string): readonly PortBinding[] {
    return this.#namespaces.get(namespace)?.pods.get(pod)?.bindings ?? [];
  }

  /** Servers of a namespace. */
  servers(namespace: string): Server[] {
    return [...(this.#namespaces.get(namespace)?.servers.values() ?? [])];
  }

  /** Namespaces the index has seen. */
  namespaces(): string[] {
    return [...this.#namespaces.keys()].sort();
  }

  /** Route acceptance by Server parent, keyed `HTTPRoute/<group>/<name>` or `GRPCRoute/<name>`. */
  routeStatus(namespace: string): ReadonlyMap<string, readonly RouteParentStatus[]> {
    return this.#namespaces.get(namespace)?.routeStatus ?? new Map();
  }

  /**
   * Resources of a namespace whose conversion failed (ignored by the index), with the reason. An
   * invalid update of a valid object is listed too: the update is ignored and the previous
   * version stays in force (§3.8).
   */
  ignored(namespace: string): { resource: Resource; reason: string }[] {
    const ns = this.#namespaces.get(namespace);
    if (ns === undefined) return [];
    const out: { resource: Resource; reason: string }[] = [];
    const maps: Map<string, IndexedResource<unknown>>[] = [ns.sazs, ns.aps, ns.meshtls, ns.netauthn, ns.httpRoutes, ns.grpcRoutes];
    for (const m of maps) {
      for (const e of m.values()) {
        if (!e.converted.ok) out.push({ resource: e.resource, reason: e.converted.reason });
        else if (e.rejected !== undefined) out.push({ resource: e.rejected.resource, reason: `${e.rejected.reason}; the previous version stays in force` });
      }
    }
    return out;
  }

  /** The SMI objects of a namespace (for lint, explain and `ward authz`). */
  smi(namespace: string): SmiNamespace | undefined {
    return this.#namespaces.get(namespace)?.smi;
  }

  /** The identity domain policies are written against. */
  get identityDomain(): IdentityDomain {
    return this.#domain;
  }

  /** Whether a MeshTLS/NetworkAuthentication reference resolves (for lint). */
  resolvesAuthn(kind: 'MeshTLSAuthentication' | 'NetworkAuthentication', namespace: string, name: string): boolean {
    return this.#lookupAuthn(kind === 'MeshTLSAuthentication' ? 'meshtls' : 'netauthn', { namespace, name }) !== undefined;
  }

  /** The index's policy objects of a namespace, as converted (for lint and `ward authz`). */
  policyObjects(namespace: string): {
    authorizationPolicies: IndexedResource<ApSpec>[];
    serverAuthorizations: IndexedResource<SazSpec>[];
    httpRoutes: IndexedResource<RouteSpec<HttpRoute>>[];
    grpcRoutes: IndexedResource<RouteSpec<GrpcRoute>>[];
    meshTLSAuthentications: IndexedResource<readonly IdentityMatch[]>[];
    networkAuthentications: IndexedResource<readonly Network[]>[];
  } {
    const ns = this.#namespaces.get(namespace);
    return {
      authorizationPolicies: [...(ns?.aps.values() ?? [])],
      serverAuthorizations: [...(ns?.sazs.values() ?? [])],
      httpRoutes: [...(ns?.httpRoutes.values() ?? [])],
      grpcRoutes: [...(ns?.grpcRoutes.values() ?? [])],
      meshTLSAuthentications: [...(ns?.meshtls.values() ?? [])],
      networkAuthentications: [...(ns?.netauthn.values() ?? [])],
    };
  }
}

/** A Server that selects pods (not external workloads). */
function isPodServer(s: Server): s is Server & { spec: { podSelector: NonNullable<Server['spec']['podSelector']> } } {
  return s.spec.podSelector !== undefined && s.spec.externalWorkloadSelector === undefined;
}

function keyString(k: ResourceKey): string {
  return `${k.kind}|${k.group}|${k.namespace}|${k.name}`;
}

function identityAuthn(matches: readonly IdentityMatch[]): Authorization['authentication'] {
  const identities: string[] = [];
  const suffixes: string[][] = [];
  for (const m of matches) {
    if (m.kind === 'exact') identities.push(m.name);
    else suffixes.push([...m.parts]);
  }
  return { kind: 'tlsAuthenticated', identities, suffixes };
}

/** Route order sent to proxies (§3.6): timestamped routes first by time, then by (name, group, kind). */
function compareRoutes<R extends HttpRoute | GrpcRoute>(a: RouteSpec<R>, b: RouteSpec<R>): number {
  const ta = a.creationTimestamp;
  const tb = b.creationTimestamp;
  if (ta !== undefined && tb === undefined) return -1;
  if (ta === undefined && tb !== undefined) return 1;
  if (ta !== undefined && tb !== undefined) {
    const ma = timestampMs(ta);
    const mb = timestampMs(tb);
    if (ma !== mb) return ma < mb ? -1 : 1;
  }
  const ka = [a.route.meta.name, a.route.meta.group, a.route.meta.kind];
  const kb = [b.route.meta.name, b.route.meta.group, b.route.meta.kind];
  for (let i = 0; i < 3; i++) {
    if ((ka[i] as string) < (kb[i] as string)) return -1;
    if ((ka[i] as string) > (kb[i] as string)) return 1;
  }
  return 0;
}
