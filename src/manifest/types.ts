/**
 * Typed resources: what a manifest document becomes once it deserialises into the schema of
 * its kind and version (the equivalent of upstream's serde types). Fields are normalised across
 * versions and CRD defaults are applied, so the index never looks at `apiVersion` again.
 *
 * "Decodes" is weaker than "admitted": a resource the validating webhook would reject may still
 * decode (upstream runs the webhook with failurePolicy Ignore, so the index must tolerate it).
 */
import type { LabelSelector, Labels, Network, SourcePos } from '../core/index.js';

/** Metadata every namespaced resource carries. `namespace` defaults to `default`. */
export interface ObjectMeta {
  readonly namespace: string;
  readonly name: string;
  readonly labels: Labels;
  readonly annotations: Readonly<Record<string, string>>;
  /** RFC 3339 text as written, when present. */
  readonly creationTimestamp?: string | undefined;
  /** Set when the object is being deleted (a terminating pod). */
  readonly deletionTimestamp?: string | undefined;
  readonly uid?: string | undefined;
  readonly resourceVersion?: string | undefined;
}

/** Where a resource came from, for diagnostics. `positionOf` maps a field path to a position. */
export interface ResourceOrigin {
  /** Position of the document (its first line). */
  readonly source: SourcePos;
  /** Position of the value at `path`, or of its deepest existing ancestor. */
  positionOf(path: readonly (string | number)[]): SourcePos;
}

interface Typed<K extends string, S> {
  readonly kind: K;
  /** `group/version` (or `v1` for core kinds) as written. */
  readonly apiVersion: string;
  readonly metadata: ObjectMeta;
  readonly spec: S;
  /** Absent for resources built in code (tests, workload expansion keeps the workload's). */
  readonly origin?: ResourceOrigin | undefined;
}

/** `Server.spec.proxyProtocol` values (exact spelling). */
export type ServerProtocol = 'unknown' | 'HTTP/1' | 'HTTP/2' | 'gRPC' | 'opaque' | 'TLS';

/** `policy.linkerd.io` Server, any version. */
export type Server = Typed<
  'Server',
  {
    readonly podSelector?: LabelSelector | undefined;
    readonly externalWorkloadSelector?: LabelSelector | undefined;
    /** A number is a port number (1-65535); a string, even "8080", is a container port name. */
    readonly port: number | string;
    readonly proxyProtocol: ServerProtocol;
    /** As written (v1beta3 only); the index treats an invalid value as absent (= deny). */
    readonly accessPolicy?: string | undefined;
  }
>;

/** `policy.linkerd.io` ServerAuthorization, any version. */
export type ServerAuthorization = Typed<
  'ServerAuthorization',
  {
    readonly server: { readonly name?: string | undefined; readonly selector?: LabelSelector | undefined };
    readonly client: {
      /** Absent or empty means the cluster networks. */
      readonly networks?: readonly Network[] | undefined;
      readonly unauthenticated: boolean;
      readonly meshTLS?:
        | {
            readonly unauthenticatedTLS: boolean;
            readonly identities?: readonly string[] | undefined;
            readonly serviceAccounts?: readonly { readonly name: string; readonly namespace?: string | undefined }[] | undefined;
          }
        | undefined;
    };
  }
>;

/** A reference to an object in the same namespace. `group` absent/empty means core. */
export interface LocalTargetRef {
  readonly group?: string | undefined;
  readonly kind: string;
  readonly name: string;
}

/** A reference that may name another namespace. `name` may be absent in identityRefs (invalid for the controller). */
export interface NamespacedTargetRef {
  readonly group?: string | undefined;
  readonly kind: string;
  readonly name?: string | undefined;
  readonly namespace?: string | undefined;
}

/** `policy.linkerd.io/v1alpha1` AuthorizationPolicy. */
export type AuthorizationPolicy = Typed<
  'AuthorizationPolicy',
  {
    readonly targetRef: LocalTargetRef;
    /** Absent only when the manifest omitted it (admission rejects that; the index treats it as empty). */
    readonly requiredAuthenticationRefs?: readonly NamespacedTargetRef[] | undefined;
  }
>;

/** `policy.linkerd.io/v1alpha1` MeshTLSAuthentication. */
export type MeshTLSAuthentication = Typed<
  'MeshTLSAuthentication',
  {
    readonly identities?: readonly string[] | undefined;
    readonly identityRefs?: readonly NamespacedTargetRef[] | undefined;
  }
>;

/** `policy.linkerd.io/v1alpha1` NetworkAuthentication. */
export type NetworkAuthentication = Typed<'NetworkAuthentication', { readonly networks: readonly Network[] }>;

/** A route parentRef with CRD defaults applied (`group` and `kind` always present). */
export interface ParentRef {
  readonly group: string;
  readonly kind: string;
  readonly name: string;
  readonly namespace?: string | undefined;
  readonly sectionName?: string | undefined;
  readonly port?: number | undefined;
}

/** Header or query-parameter match as written (type defaults to Exact). */
export interface ValueMatchSpec {
  readonly type: 'Exact' | 'RegularExpression';
  readonly name: string;
  readonly value: string;
}

/** HTTPRoute match as written; a given `path` has type (default PathPrefix) and value (default `/`). */
export interface HttpRouteMatchSpec {
  readonly path?: { readonly type: 'Exact' | 'PathPrefix' | 'RegularExpression'; readonly value: string } | undefined;
  readonly headers?: readonly ValueMatchSpec[] | undefined;
  readonly queryParams?: readonly ValueMatchSpec[] | undefined;
  readonly method?: string | undefined;
}

/** Header name/value as written in filters. */
export interface HeaderSpec {
  readonly name: string;
  readonly value: string;
}

/** A route filter as written. Only the fields of its `type` are meaningful. */
export interface RouteFilterSpec {
  readonly type: string;
  readonly requestHeaderModifier?:
    | { readonly add?: readonly HeaderSpec[] | undefined; readonly set?: readonly HeaderSpec[] | undefined; readonly remove?: readonly string[] | undefined }
    | undefined;
  readonly responseHeaderModifier?: unknown;
  readonly requestRedirect?:
    | {
        readonly scheme?: string | undefined;
        readonly hostname?: string | undefined;
        readonly path?: { readonly type: string; readonly replaceFullPath?: string | undefined; readonly replacePrefixMatch?: string | undefined } | undefined;
        readonly port?: number | undefined;
        readonly statusCode?: number | undefined;
      }
    | undefined;
}

/** A backendRef as written (outbound concern; kept for validation). */
export interface BackendRefSpec {
  readonly group?: string | undefined;
  readonly kind?: string | undefined;
  readonly name: string;
  readonly namespace?: string | undefined;
  readonly port?: number | undefined;
  readonly weight?: number | undefined;
}

/** `HTTPRoute` of either group (`policy.linkerd.io` v1alpha1-v1beta3, `gateway.networking.k8s.io`). */
export type HTTPRoute = Typed<
  'HTTPRoute',
  {
    /** `policy.linkerd.io` or `gateway.networking.k8s.io` (from apiVersion). */
    readonly group: string;
    readonly parentRefs: readonly ParentRef[];
    readonly hostnames: readonly string[];
    readonly rules: readonly {
      readonly matches?: readonly HttpRouteMatchSpec[] | undefined;
      readonly filters?: readonly RouteFilterSpec[] | undefined;
      readonly backendRefs?: readonly BackendRefSpec[] | undefined;
      readonly timeouts?: { readonly request?: string | undefined; readonly backendRequest?: string | undefined } | undefined;
    }[];
  }
>;

/** `gateway.networking.k8s.io` GRPCRoute. */
export type GRPCRoute = Typed<
  'GRPCRoute',
  {
    readonly group: string;
    readonly parentRefs: readonly ParentRef[];
    readonly hostnames: readonly string[];
    readonly rules: readonly {
      readonly matches?:
        | readonly {
            readonly method?:
              | { readonly type: 'Exact' | 'RegularExpression'; readonly service?: string | undefined; readonly method?: string | undefined }
              | undefined;
            readonly headers?: readonly ValueMatchSpec[] | undefined;
          }[]
        | undefined;
      readonly filters?: readonly RouteFilterSpec[] | undefined;
      readonly backendRefs?: readonly BackendRefSpec[] | undefined;
    }[];
  }
>;

/** A kubelet probe as far as policy (and the local runtime, which runs probes) cares. */
export interface ProbeSpec {
  readonly httpGet?:
    | {
        readonly port: number | string;
        readonly path?: string | undefined;
        readonly scheme?: string | undefined;
        readonly httpHeaders?: readonly { readonly name: string; readonly value: string }[] | undefined;
      }
    | undefined;
  readonly tcpSocket?: { readonly port: number | string } | undefined;
  readonly grpc?: { readonly port: number; readonly service?: string | undefined } | undefined;
  readonly initialDelaySeconds?: number | undefined;
  readonly periodSeconds?: number | undefined;
  readonly timeoutSeconds?: number | undefined;
  readonly successThreshold?: number | undefined;
  readonly failureThreshold?: number | undefined;
}

/** A container's environment variable (`valueFrom` only as far as the local runtime supports it). */
export interface EnvVarSpec {
  readonly name: string;
  readonly value?: string | undefined;
  readonly valueFrom?: { readonly fieldRef?: { readonly fieldPath: string } | undefined } | undefined;
}

/** A container as far as policy (and the local runtime) cares. */
export interface ContainerSpec {
  readonly name: string;
  readonly image?: string | undefined;
  readonly command?: readonly string[] | undefined;
  readonly args?: readonly string[] | undefined;
  readonly workingDir?: string | undefined;
  readonly env?: readonly EnvVarSpec[] | undefined;
  readonly ports?: readonly { readonly name?: string | undefined; readonly containerPort: number; readonly protocol?: string | undefined }[] | undefined;
  readonly livenessProbe?: ProbeSpec | undefined;
  readonly readinessProbe?: ProbeSpec | undefined;
  readonly startupProbe?: ProbeSpec | undefined;
}

/** A pod spec (also the template of workload kinds). */
export interface PodSpec {
  readonly serviceAccountName?: string | undefined;
  readonly containers: readonly ContainerSpec[];
  readonly initContainers?: readonly ContainerSpec[] | undefined;
  /** `Always` (default), `OnFailure` or `Never`, as written. */
  readonly restartPolicy?: string | undefined;
}

/** core/v1 Pod. Workload kinds are expanded into these (see `expandWorkloads`). */
export type Pod = Typed<'Pod', PodSpec> & {
  /** As the kubelet reports it; the endpoints index reads `phase` and the `Ready` condition. */
  readonly status?:
    | {
        readonly podIP?: string | undefined;
        readonly phase?: string | undefined;
        readonly conditions?: readonly { readonly type: string; readonly status: string }[] | undefined;
      }
    | undefined;
  /** For pods built from a workload: `kind/name` of the workload, e.g. `Deployment/web`. */
  readonly owner?: string | undefined;
};

/** core/v1 Namespace (cluster-scoped: `metadata.namespace` is ''). */
export type Namespace = Typed<'Namespace', Record<string, never>>;

/** core/v1 ServiceAccount. */
export type ServiceAccount = Typed<'ServiceAccount', Record<string, never>>;

/** core/v1 Service. */
export type Service = Typed<
  'Service',
  {
    readonly selector?: Readonly<Record<string, string>> | undefined;
    readonly clusterIP?: string | undefined;
    /** Endpoints include pods that are not ready (as the EndpointSlice controller does). */
    readonly publishNotReadyAddresses?: boolean | undefined;
    readonly ports: readonly {
      readonly name?: string | undefined;
      readonly port: number;
      readonly targetPort?: number | string | undefined;
      readonly protocol?: string | undefined;
      /** `http`, `kubernetes.io/h2c`, `linkerd.io/opaque`…: what clients should speak (outbound policy). */
      readonly appProtocol?: string | undefined;
    }[];
  }
>;

/** Workload kinds whose pod template stands for pods. */
export type WorkloadKind = 'Deployment' | 'StatefulSet' | 'DaemonSet' | 'ReplicaSet' | 'Job' | 'CronJob';

/** A workload with its pod template (CronJob: `spec.jobTemplate.spec.template`). */
export type Workload = Typed<
  WorkloadKind,
  {
    /** Replicas (default 1; DaemonSet, Job and CronJob always 1). */
    readonly replicas: number;
    readonly template: {
      readonly metadata: { readonly labels: Labels; readonly annotations: Readonly<Record<string, string>> };
      readonly spec: PodSpec;
    };
  }
>;

// === SMI access policy (`access.smi-spec.io`, `specs.smi-spec.io`), normalised across versions ===

/** A TrafficTarget subject (destination or source) as written; `namespace` absent = the TrafficTarget's. */
export interface SmiSubject {
  readonly kind: string;
  readonly name: string;
  readonly namespace?: string | undefined;
}

/** A TrafficTarget rule: a route object of the TrafficTarget's namespace, and which of its matches (absent = all). */
export interface SmiRule {
  readonly kind: 'HTTPRouteGroup' | 'TCPRoute' | 'UDPRoute';
  readonly name: string;
  readonly matches?: readonly string[] | undefined;
}

/** `access.smi-spec.io` TrafficTarget, any version. */
export type TrafficTarget = Typed<
  'TrafficTarget',
  {
    /** `port` exists in v1alpha1 (number or text) and v1alpha2 (number) only. */
    readonly destination: SmiSubject & { readonly port?: number | string | undefined };
    readonly sources: readonly SmiSubject[];
    readonly rules: readonly SmiRule[];
  }
>;

/** One named HTTPRouteGroup match as written; header values are regexes. */
export interface SmiHttpMatch {
  readonly name: string;
  readonly pathRegex?: string | undefined;
  /** `*` stands for every method; absent or empty = every method. */
  readonly methods?: readonly string[] | undefined;
  /** Header name and value regex, every one required (v1alpha2 and later). */
  readonly headers?: readonly { readonly name: string; readonly value: string }[] | undefined;
}

/** `specs.smi-spec.io` HTTPRouteGroup, any version. */
export type HTTPRouteGroup = Typed<'HTTPRouteGroup', { readonly matches: readonly SmiHttpMatch[] }>;

/** `specs.smi-spec.io` TCPRoute: `ports` absent or empty = every port (v1alpha1-v1alpha3 name no ports). */
export type TCPRoute = Typed<'TCPRoute', { readonly ports?: readonly number[] | undefined }>;

/** `specs.smi-spec.io/v1alpha4` UDPRoute (read and validated; a TCP mesh cannot enforce it). */
export type UDPRoute = Typed<'UDPRoute', { readonly ports?: readonly number[] | undefined }>;

/** Every SMI kind ward reads. */
export type SmiResource = TrafficTarget | HTTPRouteGroup | TCPRoute | UDPRoute;

/** Every resource kind ward reads. */
export type Resource =
  | Server
  | ServerAuthorization
  | AuthorizationPolicy
  | MeshTLSAuthentication
  | NetworkAuthentication
  | HTTPRoute
  | GRPCRoute
  | Pod
  | Namespace
  | ServiceAccount
  | Service
  | Workload
  | SmiResource;

/** The `kind` of a resource ward reads. */
export type ResourceKind = Resource['kind'];

/** Kinds the policy index consumes directly. */
export type PolicyKind =
  | 'Server'
  | 'ServerAuthorization'
  | 'AuthorizationPolicy'
  | 'MeshTLSAuthentication'
  | 'NetworkAuthentication'
  | 'HTTPRoute'
  | 'GRPCRoute';

/** Identifies one resource: HTTPRoutes of the two groups are distinct objects. */
export interface ResourceKey {
  readonly kind: string;
  /** API group for kinds that exist in several (HTTPRoute); '' otherwise. */
  readonly group: string;
  readonly namespace: string;
  readonly name: string;
}
