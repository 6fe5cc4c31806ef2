/**
 * The endpoints index behind the Destination API (POLICY-SEMANTICS §5.5): Services and Pods in,
 * the endpoints of `<svc>.<ns>.svc.<cluster-domain>:<port>` or `<ip>:<port>` out, with the
 * metadata a client proxy needs (TLS identity, protocol hint, opaque transport port).
 *
 * Pure and synchronous, single writer, like the policy index: changes arrive in `update`
 * transactions; after each one, every watch whose endpoint set changed gets exactly the
 * difference, and watches whose set did not change hear nothing.
 *
 * Readiness is the EndpointSlice controller's and Destination's (upstream's endpoints watcher
 * skips a slice endpoint whose `conditions.ready` is false): a Service's endpoints are its pods
 * that are ready (`podReadiness`), or all of its running pods with `publishNotReadyAddresses`.
 * An `<ip>:<port>` naming a pod answers that pod whether ready or not, as upstream's endpoint
 * profiles do for pods that must be reached before they are ready. In local mode the node (the
 * runtime of `ward up`, standing in for the kubelet) reports the pods it runs and their readiness
 * (`reportPod`), and those reports take the place of the status manifests carry.
 *
 * Not modelled: instance-qualified names (`<pod>.<svc>.<ns>.svc...`).
 */
import { deepEqual, formatIp, parseIp, serviceAccountIdentity } from '../core/index.js';
import { ANNOTATIONS, type Pod, parsePortSet, type Resource, type ResourceKey, type Service } from '../manifest/index.js';
import { type PodInfo, podInfo } from './pod.js';
import type { IndexTx } from './policy-index.js';

// === public types ===

/** Cluster facts the endpoints depend on. */
export interface EndpointsConfig {
  /** Default `cluster.local`. */
  readonly clusterDomain?: string | undefined;
  readonly controlPlaneNamespace: string;
  readonly trustDomain: string;
  /** The proxies' inbound port, announced for opaque transport (default 4143). */
  readonly proxyInboundPort?: number | undefined;
}

/** A TCP address. */
export interface EndpointAddr {
  readonly ip: string;
  readonly port: number;
}

/** One endpoint as the Destination API announces it (a `WeightedAddr`). */
export interface Endpoint extends EndpointAddr {
  readonly weight: number;
  /** Metric labels: `pod`, `namespace`, `serviceaccount`, the owner (`deployment: web`), `control_plane_ns`. */
  readonly labels: Readonly<Record<string, string>>;
  /** The pod's mesh identity, only when this control plane meshes the pod. */
  readonly identity?: string;
  /** The pod proxy's inbound port, when the target port is opaque on a meshed pod. */
  readonly opaqueTransportPort?: number;
  /** Meshed pods only: `opaque` on opaque ports, `h2` otherwise. */
  readonly protocolHint?: 'opaque' | 'h2';
}

/** A change to a watched endpoint set. */
export type EndpointEvent =
  | { readonly kind: 'add'; readonly endpoints: readonly Endpoint[] }
  | { readonly kind: 'remove'; readonly addrs: readonly EndpointAddr[] }
  | { readonly kind: 'noEndpoints'; readonly exists: boolean };

/** A path that cannot be resolved at all (gRPC `INVALID_ARGUMENT`). */
export interface EndpointsError {
  readonly ok: false;
  readonly code: 'INVALID_ARGUMENT';
  readonly message: string;
}

/**
 * The endpoints of a path. `exists` is false for an unknown Service or pod IP (the Destination
 * API's `NoEndpoints{exists: false}`).
 */
export type ResolveResult = { readonly ok: true; readonly exists: boolean; readonly endpoints: readonly Endpoint[] } | EndpointsError;

/** Receives the events of one transaction (never empty). */
export type EndpointsListener = (events: readonly EndpointEvent[]) => void;

/** A started watch: the events describing the current state, and how to stop. */
export type WatchResult = { readonly ok: true; readonly initial: readonly EndpointEvent[]; unsubscribe(): void } | EndpointsError;

/** What a path names. */
export type EndpointsTarget =
  | { readonly kind: 'service'; readonly namespace: string; readonly name: string; readonly port: number }
  | { readonly kind: 'ip'; readonly ip: string; readonly port: number };

/**
 * How a pod counts for Service endpoints, as the EndpointSlice controller sets a slice endpoint's
 * `conditions.ready`: `terminal` (phase `Succeeded` or `Failed`: no endpoint at all), else
 * `not-ready` while it terminates (`metadata.deletionTimestamp`), else `ready` when its `Ready`
 * condition is `True`, else `not-ready`. A pod that carries no conditions at all (a manifest
 * written by hand: no kubelet reports on it) counts as ready.
 */
export function podReadiness(pod: Pod): 'ready' | 'not-ready' | 'terminal' {
  const status = pod.status;
  if (status?.phase === 'Succeeded' || status?.phase === 'Failed') return 'terminal';
  if (pod.metadata.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== '') return 'not-ready';
  const conditions = status?.conditions;
  if (conditions === undefined) return 'ready';
  return conditions.some((c) => c.type === 'Ready' && c.status === 'True') ? 'ready' : 'not-ready';
}

// === path parsing ===

const DEFAULT_CLUSTER_DOMAIN = 'cluster.local';
const DEFAULT_WEIGHT = 10_000;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function invalid(message: string): EndpointsError {
  return { ok: false, code: 'INVALID_ARGUMENT', message };
}

/**
 * Parses a Destination path: `<svc>.<ns>.svc.<cluster-domain>:<port>`, `<ipv4>:<port>` or
 * `[<ipv6>]:<port>`. The port is required and must be 1-65535.
 */
export function parseEndpointsPath(path: string, clusterDomain: string = DEFAULT_CLUSTER_DOMAIN): EndpointsTarget | EndpointsError {
  const s = path.trim();
  if (s === '') return invalid('empty destination path');
  let host: string;
  let portText: string;
  if (s.startsWith('[')) {
    const close = s.indexOf(']');
    if (close === -1) return invalid(`invalid destination ${JSON.stringify(path)}: unterminated [`);
    host = s.slice(1, close);
    const rest = s.slice(close + 1);
    if (!rest.startsWith(':')) return invalid(`invalid destination ${JSON.stringify(path)}: no port`);
    portText = rest.slice(1);
  } else {
    const colon = s.lastIndexOf(':');
    if (colon === -1) return invalid(`invalid destination ${JSON.stringify(path)}: no port`);
    host = s.slice(0, colon);
    portText = s.slice(colon + 1);
    if (host.includes(':')) return invalid(`invalid destination ${JSON.stringify(path)}: write IPv6 addresses as [addr]:port`);
  }
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : Number.NaN;
  if (!(port >= 1 && port <= 65535)) return invalid(`invalid port ${JSON.stringify(portText)} in ${JSON.stringify(path)}`);
  const ip = parseIp(host);
  if (ip !== undefined) return { kind: 'ip', ip: formatIp(ip), port };
  const name = host.toLowerCase().replace(/\.$/, '');
  const suffix = `.svc.${clusterDomain.toLowerCase()}`;
  if (!name.endsWith(suffix)) return invalid(`invalid destination ${JSON.stringify(path)}: not <svc>.<ns>.svc.${clusterDomain} or an IP address`);
  const labels = name.slice(0, -suffix.length).split('.');
  if (labels.length === 3) return invalid(`invalid destination ${JSON.stringify(path)}: instance-qualified names are not supported`);
  const [svc, ns] = labels;
  if (labels.length !== 2 || svc === undefined || ns === undefined || !DNS_LABEL.test(svc) || !DNS_LABEL.test(ns)) {
    return invalid(`invalid destination ${JSON.stringify(path)}: not <svc>.<ns>.svc.${clusterDomain}`);
  }
  return { kind: 'service', namespace: ns, name: svc, port };
}

// === the index ===

interface PodEntry {
  readonly info: PodInfo;
  /** Canonical pod IP, when the pod has a valid one. */
  readonly ip: string | undefined;
  readonly readiness: 'ready' | 'not-ready' | 'terminal';
}

function podEntry(pod: Pod, readiness: PodEntry['readiness'] = podReadiness(pod)): PodEntry {
  return { info: podInfo(pod), ip: canonicalIp(pod.status?.podIP), readiness };
}

interface TargetState {
  readonly target: EndpointsTarget;
  exists: boolean;
  endpoints: Map<string, Endpoint>;
  /** The namespace whose changes can affect this target (an IP target resolving to a Service). */
  namespace: string | undefined;
  readonly listeners: Set<EndpointsListener>;
}

interface Computed {
  readonly exists: boolean;
  readonly endpoints: Map<string, Endpoint>;
  readonly namespace: string | undefined;
}

function addrKey(ip: string, port: number): string {
  return `${ip}|${port}`;
}

function targetKey(t: EndpointsTarget): string {
  return t.kind === 'service' ? `svc|${t.namespace}|${t.name}|${t.port}` : `ip|${t.ip}|${t.port}`;
}

function canonicalIp(text: string | undefined): string | undefined {
  if (text === undefined || text === '' || text === 'None') return undefined;
  const ip = parseIp(text);
  return ip === undefined ? undefined : formatIp(ip);
}

function isTcp(protocol: string | undefined): boolean {
  return protocol === undefined || protocol.toUpperCase() === 'TCP';
}

function byAddr(a: EndpointAddr, b: EndpointAddr): number {
  return a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : a.port - b.port;
}

/** Services and pod endpoints, resolved and watched by Destination path. See the module comment. */
export class EndpointsIndex {
  readonly config: EndpointsConfig;
  readonly #clusterDomain: string;
  readonly #pods = new Map<string, Map<string, PodEntry>>();
  readonly #services = new Map<string, Map<string, Service>>();
  readonly #podsByIp = new Map<string, Set<PodEntry>>();
  readonly #servicesByIp = new Map<string, Set<Service>>();
  /** Local mode: the pods the node runs, with the readiness it reported (see `reportPod`). */
  #nodePods: Map<string, Map<string, PodEntry>> | undefined;
  readonly #nodePodsByIp = new Map<string, Set<PodEntry>>();
  readonly #targets = new Map<string, TargetState>();
  readonly #dirtyNamespaces = new Set<string>();
  readonly #dirtyIps = new Set<string>();
  readonly #changeListeners = new Set<() => void>();
  #inTx = false;

  constructor(config: EndpointsConfig) {
    this.config = config;
    this.#clusterDomain = config.clusterDomain ?? DEFAULT_CLUSTER_DOMAIN;
  }

  // === updates ===

  /** Applies several changes, then notifies the watches whose endpoint sets changed. */
  update(fn: (tx: IndexTx) => void): void {
    if (this.#inTx) throw new Error('EndpointsIndex.update is not reentrant');
    this.#inTx = true;
    try {
      fn({ apply: (r) => this.#apply(r), delete: (k) => this.#delete(k) });
    } finally {
      this.#inTx = false;
    }
    this.#publish();
  }

  /**
   * Local mode: the node runs `pod` (its `status.podIP` set) and finds it `ready` or not. From the
   * first report on, a Service's endpoints are the ready pods the node reports, whatever status
   * the manifests' pods carry (nothing reports on them here); a pod the manifests no longer
   * define (an old pod of a rollout, until it stops) stays an endpoint while the node runs it ready.
   */
  reportPod(pod: Pod, ready: boolean): void {
    this.#nodeChange(() => this.#setNodePod(pod.metadata.namespace, pod.metadata.name, podEntry(pod, ready ? 'ready' : 'not-ready')));
  }

  /** Local mode: the node no longer runs pod `namespace/name` (it is stopping or gone): no endpoint. */
  forgetPod(namespace: string, name: string): void {
    this.#nodeChange(() => this.#setNodePod(namespace, name, undefined));
  }

  #nodeChange(fn: () => void): void {
    if (this.#inTx) throw new Error('EndpointsIndex node reports cannot be made inside update');
    this.#nodePods ??= new Map();
    fn();
    this.#publish();
  }

  #setNodePod(namespace: string, name: string, entry: PodEntry | undefined): void {
    const all = this.#nodePods as Map<string, Map<string, PodEntry>>;
    let pods = all.get(namespace);
    const prev = pods?.get(name);
    if (prev?.ip !== undefined) {
      removeFromIndex(this.#nodePodsByIp, prev.ip, prev);
      this.#dirtyIps.add(prev.ip);
    }
    if (entry === undefined) {
      pods?.delete(name);
      if (pods?.size === 0) all.delete(namespace);
    } else {
      if (pods === undefined) {
        pods = new Map();
        all.set(namespace, pods);
      }
      pods.set(name, entry);
      if (entry.ip !== undefined) {
        addToIndex(this.#nodePodsByIp, entry.ip, entry);
        this.#dirtyIps.add(entry.ip);
      }
    }
    this.#dirtyNamespaces.add(namespace);
  }

  /** Adds or replaces one resource (only Services and Pods matter). */
  apply(resource: Resource): void {
    this.update((tx) => tx.apply(resource));
  }

  /** Removes one resource. */
  delete(key: ResourceKey): void {
    this.update((tx) => tx.delete(key));
  }

  #apply(r: Resource): void {
    if (r.kind === 'Pod') this.#setPod(r.metadata.namespace, r.metadata.name, r);
    else if (r.kind === 'Service') this.#setService(r.metadata.namespace, r.metadata.name, r);
  }

  #delete(k: ResourceKey): void {
    if (k.kind === 'Pod') this.#setPod(k.namespace, k.name, undefined);
    else if (k.kind === 'Service') this.#setService(k.namespace, k.name, undefined);
  }

  #setPod(namespace: string, name: string, pod: Pod | undefined): void {
    let pods = this.#pods.get(namespace);
    const prev = pods?.get(name);
    if (prev === undefined && pod === undefined) return;
    if (prev !== undefined) {
      if (prev.ip !== undefined) {
        removeFromIndex(this.#podsByIp, prev.ip, prev);
        this.#dirtyIps.add(prev.ip);
      }
      pods?.delete(name);
    }
    if (pod !== undefined) {
      const entry = podEntry(pod);
      if (pods === undefined) {
        pods = new Map();
        this.#pods.set(namespace, pods);
      }
      pods.set(name, entry);
      if (entry.ip !== undefined) {
        addToIndex(this.#podsByIp, entry.ip, entry);
        this.#dirtyIps.add(entry.ip);
      }
    }
    this.#dirtyNamespaces.add(namespace);
  }

  #setService(namespace: string, name: string, svc: Service | undefined): void {
    let services = this.#services.get(namespace);
    const prev = services?.get(name);
    if (prev === undefined && svc === undefined) return;
    if (prev !== undefined) {
      const ip = canonicalIp(prev.spec.clusterIP);
      if (ip !== undefined) {
        removeFromIndex(this.#servicesByIp, ip, prev);
        this.#dirtyIps.add(ip);
      }
      services?.delete(name);
    }
    if (svc !== undefined) {
      if (services === undefined) {
        services = new Map();
        this.#services.set(namespace, services);
      }
      services.set(name, svc);
      const ip = canonicalIp(svc.spec.clusterIP);
      if (ip !== undefined) {
        addToIndex(this.#servicesByIp, ip, svc);
        this.#dirtyIps.add(ip);
      }
    }
    this.#dirtyNamespaces.add(namespace);
  }

  // === queries ===

  /** The current endpoints of `path` (sorted by address), or why the path is invalid. */
  resolve(path: string): ResolveResult {
    const target = parseEndpointsPath(path, this.#clusterDomain);
    if ('ok' in target) return target;
    const c = this.#compute(target);
    return { ok: true, exists: c.exists, endpoints: sortedEndpoints(c.endpoints) };
  }

  /**
   * Watches `path`: `initial` describes the current state (one `add`, or `noEndpoints`), and
   * after every transaction that changes the set, `listener` gets the difference: `remove` for
   * addresses gone, `add` for new or changed endpoints, or `noEndpoints` when the set becomes
   * empty (or the Service appears or disappears while it is empty).
   */
  watch(path: string, listener: EndpointsListener): WatchResult {
    const target = parseEndpointsPath(path, this.#clusterDomain);
    if ('ok' in target) return target;
    const key = targetKey(target);
    let state = this.#targets.get(key);
    if (state === undefined) {
      const c = this.#compute(target);
      state = { target, exists: c.exists, endpoints: c.endpoints, namespace: c.namespace, listeners: new Set() };
      this.#targets.set(key, state);
    }
    const initial: EndpointEvent[] =
      state.endpoints.size > 0 ? [{ kind: 'add', endpoints: sortedEndpoints(state.endpoints) }] : [{ kind: 'noEndpoints', exists: state.exists }];
    // A wrapper, so that one listener can watch twice and unsubscribe each watch on its own.
    const entry: EndpointsListener = (events) => listener(events);
    state.listeners.add(entry);
    const owner = state;
    return {
      ok: true,
      initial,
      unsubscribe: () => {
        owner.listeners.delete(entry);
        if (owner.listeners.size === 0 && this.#targets.get(key) === owner) this.#targets.delete(key);
      },
    };
  }

  /** The Service `namespace/name`, if known. */
  service(namespace: string, name: string): Service | undefined {
    return this.#services.get(namespace)?.get(name);
  }

  /** The Service whose cluster IP is `ip` (canonical text), if any. */
  serviceAt(ip: string): Service | undefined {
    const services = this.#servicesByIp.get(ip);
    return services === undefined ? undefined : first(services);
  }

  /** The pod at `ip` (canonical text) that is not terminal, as `<ip>:<port>` resolves it, if any. */
  podAt(ip: string): Pod | undefined {
    return this.#podAt(ip)?.info.pod;
  }

  /** The endpoint of the pod at `ip` on `port` (as `<ip>:<port>` resolves it when no Service has that IP). */
  podEndpoint(ip: string, port: number): Endpoint | undefined {
    const pod = this.#podAt(ip);
    return pod === undefined ? undefined : this.#endpoint(pod, ip, port);
  }

  /**
   * Calls `listener` after every transaction or node report that changed a Service or a pod
   * (whether or not any endpoint set changed); returns the unsubscribe function.
   */
  onChange(listener: () => void): () => void {
    const entry = () => listener();
    this.#changeListeners.add(entry);
    return () => this.#changeListeners.delete(entry);
  }

  /** Number of distinct watched targets (for metrics and tests). */
  get watchedTargets(): number {
    return this.#targets.size;
  }

  // === recomputation ===

  #publish(): void {
    if (this.#dirtyNamespaces.size === 0 && this.#dirtyIps.size === 0) return;
    const namespaces = new Set(this.#dirtyNamespaces);
    const ips = new Set(this.#dirtyIps);
    this.#dirtyNamespaces.clear();
    this.#dirtyIps.clear();
    const notify: [TargetState, EndpointEvent[]][] = [];
    for (const state of this.#targets.values()) {
      const t = state.target;
      const affected = t.kind === 'service' ? namespaces.has(t.namespace) : ips.has(t.ip) || (state.namespace !== undefined && namespaces.has(state.namespace));
      if (!affected) continue;
      const next = this.#compute(t);
      const events = diffEvents(state, next);
      state.exists = next.exists;
      state.endpoints = next.endpoints;
      state.namespace = next.namespace;
      if (events.length > 0) notify.push([state, events]);
    }
    // Listeners run after all state is updated; one that throws does not starve the others.
    let failure: { error: unknown } | undefined;
    for (const [state, events] of notify) {
      for (const l of [...state.listeners]) {
        try {
          l(events);
        } catch (error) {
          failure ??= { error };
        }
      }
    }
    for (const l of [...this.#changeListeners]) {
      try {
        l();
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure !== undefined) throw failure.error;
  }

  #compute(t: EndpointsTarget): Computed {
    if (t.kind === 'service') return this.#computeService(t.namespace, t.name, t.port);
    const services = this.#servicesByIp.get(t.ip);
    const svc = services === undefined ? undefined : first(services);
    if (svc !== undefined) return this.#computeService(svc.metadata.namespace, svc.metadata.name, t.port);
    const endpoints = new Map<string, Endpoint>();
    const pod = this.#podAt(t.ip);
    if (pod === undefined) return { exists: false, endpoints, namespace: undefined };
    endpoints.set(addrKey(t.ip, t.port), this.#endpoint(pod, t.ip, t.port));
    return { exists: true, endpoints, namespace: undefined };
  }

  #podAt(ip: string): PodEntry | undefined {
    // A pod the manifests dropped answers at its address while the node still runs it.
    const pods = [...(this.#podsByIp.get(ip) ?? this.#nodePodsByIp.get(ip) ?? [])].filter((p) => p.readiness !== 'terminal');
    // Two pods with one IP is a transient state (one is going away): take the first by name.
    return pods.sort((a, b) => (podName(a) < podName(b) ? -1 : podName(a) > podName(b) ? 1 : 0))[0];
  }

  #computeService(namespace: string, name: string, port: number): Computed {
    const endpoints = new Map<string, Endpoint>();
    const svc = this.#services.get(namespace)?.get(name);
    if (svc === undefined) return { exists: false, endpoints, namespace };
    // A port the Service does not list is its own target port (upstream's getTargetPort).
    const spec = svc.spec.ports.find((p) => p.port === port && isTcp(p.protocol));
    const targetPort = spec?.targetPort === undefined || spec.targetPort === 0 || spec.targetPort === '' ? port : spec.targetPort;
    const selector = svc.spec.selector;
    // A Service without a selector has no managed endpoints (an empty selector counts as none).
    if (selector === undefined || Object.keys(selector).length === 0) return { exists: true, endpoints, namespace };
    const notReadyToo = svc.spec.publishNotReadyAddresses === true;
    const pods = this.#nodePods === undefined ? this.#pods : this.#nodePods;
    for (const pod of pods.get(namespace)?.values() ?? []) {
      if (pod.ip === undefined || !labelsMatch(selector, pod.info.labels)) continue;
      if (pod.readiness === 'terminal' || (pod.readiness === 'not-ready' && !notReadyToo)) continue;
      // A named target port resolves per pod; pods that do not declare the name are skipped.
      const resolved = typeof targetPort === 'number' ? targetPort : pod.info.namedPorts.get(targetPort)?.[0];
      if (resolved === undefined) continue;
      endpoints.set(addrKey(pod.ip, resolved), this.#endpoint(pod, pod.ip, resolved));
    }
    return { exists: true, endpoints, namespace };
  }

  #endpoint(pod: PodEntry, ip: string, port: number): Endpoint {
    const { info } = pod;
    const labels: Record<string, string> = { namespace: info.namespace, pod: info.name, serviceaccount: info.serviceAccount };
    const owner = info.pod.owner;
    if (owner !== undefined) {
      const slash = owner.indexOf('/');
      if (slash > 0) labels[owner.slice(0, slash).toLowerCase()] = owner.slice(slash + 1);
    }
    const controlPlane = info.labels[ANNOTATIONS.controlPlaneNs];
    if (controlPlane === undefined) return { ip, port, weight: DEFAULT_WEIGHT, labels };
    labels.control_plane_ns = controlPlane;
    // Traffic to a skipped inbound port bypasses the proxy: no mesh TLS, no hints (§5.5).
    const skip = info.pod.metadata.annotations[ANNOTATIONS.skipInboundPorts];
    if (skip !== undefined && parsePortSet(skip)?.has(port) === true) return { ip, port, weight: DEFAULT_WEIGHT, labels };
    const opaque = info.opaquePorts.has(port);
    const identity =
      controlPlane === this.config.controlPlaneNamespace ? { identity: serviceAccountIdentity(this.config, info.namespace, info.serviceAccount) } : {};
    const transport = opaque ? { opaqueTransportPort: this.config.proxyInboundPort ?? 4143 } : {};
    return { ip, port, weight: DEFAULT_WEIGHT, labels, ...identity, ...transport, protocolHint: opaque ? 'opaque' : 'h2' };
  }
}

// === helpers ===

function diffEvents(prev: { readonly exists: boolean; readonly endpoints: ReadonlyMap<string, Endpoint> }, next: Computed): EndpointEvent[] {
  if (next.endpoints.size === 0) {
    return prev.endpoints.size > 0 || prev.exists !== next.exists ? [{ kind: 'noEndpoints', exists: next.exists }] : [];
  }
  const events: EndpointEvent[] = [];
  const removed: EndpointAddr[] = [];
  for (const [key, e] of prev.endpoints) if (!next.endpoints.has(key)) removed.push({ ip: e.ip, port: e.port });
  if (removed.length > 0) events.push({ kind: 'remove', addrs: removed.sort(byAddr) });
  const added: Endpoint[] = [];
  for (const [key, e] of next.endpoints) if (!deepEqual(prev.endpoints.get(key), e)) added.push(e);
  if (added.length > 0) events.push({ kind: 'add', endpoints: added.sort(byAddr) });
  return events;
}

function sortedEndpoints(endpoints: ReadonlyMap<string, Endpoint>): Endpoint[] {
  return [...endpoints.values()].sort(byAddr);
}

function labelsMatch(selector: Readonly<Record<string, string>>, labels: Readonly<Record<string, string>>): boolean {
  for (const [k, v] of Object.entries(selector)) if (!Object.hasOwn(labels, k) || labels[k] !== v) return false;
  return true;
}

function podName(p: PodEntry): string {
  return `${p.info.namespace}/${p.info.name}`;
}

function first<T>(set: ReadonlySet<T>): T | undefined {
  for (const x of set) return x;
  return undefined;
}

function addToIndex<T>(map: Map<string, Set<T>>, key: string, value: T): void {
  let set = map.get(key);
  if (set === undefined) {
    set = new Set();
    map.set(key, set);
  }
  set.add(value);
}

function removeFromIndex<T>(map: Map<string, Set<T>>, key: string, value: T): void {
  const set = map.get(key);
  if (set === undefined) return;
  set.delete(value);
  if (set.size === 0) map.delete(key);
}
