/**
 * Which kinds ward reads, in which groups and versions, and how a parsed document of each
 * becomes a typed `Resource` (CRD defaults applied, versions normalised).
 */
import { z } from 'zod';
import { GATEWAY_GROUP, POLICY_GROUP } from '../core/index.js';
import { cronJobSpec, podSpec, podStatus, replicatedSpec, serviceSpec, singlePodSpec } from './core-schemas.js';
import { authorizationPolicySpec, meshTLSAuthenticationSpec, networkAuthenticationSpec, serverAuthorizationSpec, serverSpecs } from './policy-schemas.js';
import { gatewayHttpRouteSpec, grpcRouteSpec, linkerdHttpRouteSpecs } from './route-schemas.js';
import { objectMeta } from './schema-parts.js';
import { httpRouteGroupFields, httpRouteGroupSpec, portRouteSpec, smiDoc, toSmiMatch, trafficTargetSpecs, trafficTargetV1alpha1Fields } from './smi-schemas.js';
import { SMI_ACCESS_GROUP, SMI_SPECS_GROUP } from './smi-types.js';
import type {
  AuthorizationPolicy,
  GRPCRoute,
  HTTPRoute,
  MeshTLSAuthentication,
  NetworkAuthentication,
  ObjectMeta,
  Resource,
  ResourceOrigin,
  Server,
  ServerAuthorization,
  Service,
  SmiResource,
  Workload,
  WorkloadKind,
} from './types.js';

/** What a decoder knows besides the document: its apiVersion, API group and origin. */
export interface DecodeBase {
  readonly apiVersion: string;
  readonly group: string;
  readonly origin: ResourceOrigin;
}

/** Parses one document of a known kind and version. */
export type Decoder = (
  value: unknown,
  base: DecodeBase,
) => { readonly ok: true; readonly resource: Resource } | { readonly ok: false; readonly issues: readonly z.core.$ZodIssue[] };

function decoder<S extends z.ZodType>(schema: S, build: (doc: z.output<S>, base: DecodeBase) => Resource): Decoder {
  return (value, base) => {
    const r = schema.safeParse(value);
    return r.success ? { ok: true, resource: build(r.data, base) } : { ok: false, issues: r.error.issues };
  };
}

type ParsedMeta = z.output<typeof objectMeta>;

function toMeta(m: ParsedMeta, namespace: string): ObjectMeta {
  return {
    namespace,
    name: m.name,
    labels: m.labels,
    annotations: m.annotations,
    ...(m.creationTimestamp !== undefined ? { creationTimestamp: m.creationTimestamp } : {}),
    ...(m.deletionTimestamp !== undefined ? { deletionTimestamp: m.deletionTimestamp } : {}),
    ...(m.uid !== undefined ? { uid: m.uid } : {}),
    ...(m.resourceVersion !== undefined ? { resourceVersion: m.resourceVersion } : {}),
  };
}

const common = (d: { metadata: ParsedMeta }, b: DecodeBase) => ({
  apiVersion: b.apiVersion,
  metadata: toMeta(d.metadata, d.metadata.namespace ?? 'default'),
  origin: b.origin,
});

// Policy CRDs are strict (unknown fields reported and pruned); `status` is the controller's.
const policyDoc = <S extends z.ZodType>(spec: S) =>
  z.strictObject({ apiVersion: z.string(), kind: z.string(), metadata: objectMeta, spec, status: z.unknown().optional() });
const coreDoc = <S extends z.ZodType>(spec: S) => z.object({ apiVersion: z.string(), kind: z.string(), metadata: objectMeta, spec });

const server = (spec: z.ZodType<Server['spec']>): Decoder => decoder(policyDoc(spec), (d, b) => ({ kind: 'Server', ...common(d, b), spec: d.spec }));
const serverAuthorization = decoder(policyDoc(serverAuthorizationSpec), (d, b) => ({
  kind: 'ServerAuthorization',
  ...common(d, b),
  spec: d.spec satisfies ServerAuthorization['spec'],
}));
const httpRoute = (spec: z.ZodType<Omit<HTTPRoute['spec'], 'group'>>): Decoder =>
  decoder(policyDoc(spec), (d, b) => ({ kind: 'HTTPRoute', ...common(d, b), spec: { group: b.group, ...d.spec } }));
const grpcRoute = decoder(policyDoc(grpcRouteSpec), (d, b) => ({
  kind: 'GRPCRoute',
  ...common(d, b),
  spec: { group: b.group, ...d.spec } satisfies GRPCRoute['spec'],
}));

type WorkloadSpec = Workload['spec'];
const workload = (kind: WorkloadKind, spec: z.ZodType<WorkloadSpec>): Decoder => decoder(coreDoc(spec), (d, b) => ({ kind, ...common(d, b), spec: d.spec }));
const onePod = singlePodSpec.transform((s): WorkloadSpec => ({ replicas: 1, template: s.template }));

const v1 = (d: Decoder) => ({ v1: d });

// SMI: v1alpha1/v1alpha2 documents keep their fields at the top level; the resource is normalised.
const smi = <S extends z.ZodType>(schema: S, spec: (d: z.output<S>) => SmiResource['spec'], kind: SmiResource['kind']): Decoder =>
  decoder(schema, (d, b) => ({ kind, ...common(d as { metadata: ParsedMeta }, b), spec: spec(d) }) as Resource);
const trafficTarget = (spec: (typeof trafficTargetSpecs)['v1alpha2'] | (typeof trafficTargetSpecs)['v1alpha3']) =>
  smi(smiDoc({ spec }), (d) => d.spec, 'TrafficTarget');
const httpRouteGroupTop = (fields: (typeof httpRouteGroupFields)['v1alpha1'] | (typeof httpRouteGroupFields)['v1alpha2']) =>
  smi(smiDoc(fields), (d) => ({ matches: d.matches.map(toSmiMatch) }), 'HTTPRouteGroup');
const httpRouteGroup = smi(smiDoc({ spec: httpRouteGroupSpec }), (d) => ({ matches: d.spec.matches.map(toSmiMatch) }), 'HTTPRouteGroup');
const emptyTcpRoute = smi(smiDoc({ spec: z.strictObject({}).optional() }), () => ({}), 'TCPRoute');
const portRoute = (kind: 'TCPRoute' | 'UDPRoute') =>
  smi(
    smiDoc({ spec: portRouteSpec.default({}) }),
    (d) => {
      const ports = d.spec.matches?.ports;
      return ports !== undefined && ports.length > 0 ? { ports } : {};
    },
    kind,
  );

/** kind → API group ('' = core) → version → decoder. */
export const KIND_TABLE: Readonly<Record<string, Readonly<Record<string, Readonly<Record<string, Decoder>>>>>> = {
  Server: {
    [POLICY_GROUP]: {
      v1alpha1: server(serverSpecs.v1alpha1),
      v1beta1: server(serverSpecs.v1beta1),
      v1beta2: server(serverSpecs.v1beta2),
      v1beta3: server(serverSpecs.v1beta3),
    },
  },
  ServerAuthorization: { [POLICY_GROUP]: { v1alpha1: serverAuthorization, v1beta1: serverAuthorization } },
  AuthorizationPolicy: {
    [POLICY_GROUP]: {
      v1alpha1: decoder(policyDoc(authorizationPolicySpec), (d, b) => ({
        kind: 'AuthorizationPolicy',
        ...common(d, b),
        spec: d.spec satisfies AuthorizationPolicy['spec'],
      })),
    },
  },
  MeshTLSAuthentication: {
    [POLICY_GROUP]: {
      v1alpha1: decoder(policyDoc(meshTLSAuthenticationSpec), (d, b) => ({
        kind: 'MeshTLSAuthentication',
        ...common(d, b),
        spec: d.spec satisfies MeshTLSAuthentication['spec'],
      })),
    },
  },
  NetworkAuthentication: {
    [POLICY_GROUP]: {
      v1alpha1: decoder(policyDoc(networkAuthenticationSpec), (d, b) => ({
        kind: 'NetworkAuthentication',
        ...common(d, b),
        spec: d.spec satisfies NetworkAuthentication['spec'],
      })),
    },
  },
  HTTPRoute: {
    [POLICY_GROUP]: {
      v1alpha1: httpRoute(linkerdHttpRouteSpecs.v1alpha1),
      v1beta1: httpRoute(linkerdHttpRouteSpecs.v1beta1),
      v1beta2: httpRoute(linkerdHttpRouteSpecs.v1beta2),
      v1beta3: httpRoute(linkerdHttpRouteSpecs.v1beta3),
    },
    [GATEWAY_GROUP]: {
      v1alpha2: httpRoute(gatewayHttpRouteSpec),
      v1beta1: httpRoute(gatewayHttpRouteSpec),
      v1: httpRoute(gatewayHttpRouteSpec),
    },
  },
  GRPCRoute: { [GATEWAY_GROUP]: { v1alpha2: grpcRoute, v1: grpcRoute } },
  TrafficTarget: {
    [SMI_ACCESS_GROUP]: {
      v1alpha1: smi(smiDoc(trafficTargetV1alpha1Fields), (d) => ({ destination: d.destination, sources: d.sources, rules: d.specs }), 'TrafficTarget'),
      v1alpha2: trafficTarget(trafficTargetSpecs.v1alpha2),
      v1alpha3: trafficTarget(trafficTargetSpecs.v1alpha3),
    },
  },
  HTTPRouteGroup: {
    [SMI_SPECS_GROUP]: {
      v1alpha1: httpRouteGroupTop(httpRouteGroupFields.v1alpha1),
      v1alpha2: httpRouteGroupTop(httpRouteGroupFields.v1alpha2),
      v1alpha3: httpRouteGroup,
      v1alpha4: httpRouteGroup,
    },
  },
  TCPRoute: { [SMI_SPECS_GROUP]: { v1alpha1: emptyTcpRoute, v1alpha2: emptyTcpRoute, v1alpha3: emptyTcpRoute, v1alpha4: portRoute('TCPRoute') } },
  UDPRoute: { [SMI_SPECS_GROUP]: { v1alpha4: portRoute('UDPRoute') } },
  Pod: {
    '': v1(
      decoder(coreDoc(podSpec).extend({ status: podStatus.optional() }), (d, b) => ({
        kind: 'Pod',
        ...common(d, b),
        spec: d.spec,
        ...(d.status !== undefined ? { status: d.status } : {}),
      })),
    ),
  },
  Namespace: {
    '': v1(
      decoder(z.object({ apiVersion: z.string(), kind: z.string(), metadata: objectMeta }), (d, b) => ({
        kind: 'Namespace',
        apiVersion: b.apiVersion,
        metadata: toMeta(d.metadata, ''),
        spec: {},
        origin: b.origin,
      })),
    ),
  },
  ServiceAccount: {
    '': v1(
      decoder(z.object({ apiVersion: z.string(), kind: z.string(), metadata: objectMeta }), (d, b) => ({
        kind: 'ServiceAccount',
        ...common(d, b),
        spec: {},
      })),
    ),
  },
  Service: {
    '': v1(decoder(coreDoc(serviceSpec), (d, b) => ({ kind: 'Service', ...common(d, b), spec: d.spec satisfies Service['spec'] }))),
  },
  Deployment: { apps: v1(workload('Deployment', replicatedSpec)) },
  StatefulSet: { apps: v1(workload('StatefulSet', replicatedSpec)) },
  ReplicaSet: { apps: v1(workload('ReplicaSet', replicatedSpec)) },
  DaemonSet: { apps: v1(workload('DaemonSet', onePod)) },
  Job: { batch: v1(workload('Job', onePod)) },
  CronJob: {
    batch: v1(
      workload(
        'CronJob',
        cronJobSpec.transform((s): WorkloadSpec => ({ replicas: 1, template: s.jobTemplate.spec.template })),
      ),
    ),
  },
};
