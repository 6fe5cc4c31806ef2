/**
 * ward's CustomResourceDefinitions for the kinds it reads. Group, names, scope, versions and
 * storage versions are Linkerd's (a Linkerd user's objects apply unchanged); each version's
 * `spec` schema is generated from the zod schema ward decodes it with, made structural by a
 * small post-pass; `status` is ward's (conditions, selected pods and ports, route parents) with
 * the status subresource on every kind and printer columns to show it.
 */
import { z } from 'zod';
import { GATEWAY_GROUP, POLICY_GROUP } from '../core/index.js';
import { authorizationPolicySpec, meshTLSAuthenticationSpec, networkAuthenticationSpec, serverAuthorizationSpec, serverSpecs } from './policy-schemas.js';
import { gatewayHttpRouteSpec, grpcRouteSpec, linkerdHttpRouteSpecs } from './route-schemas.js';

/** A JSON Schema node (OpenAPI v3 subset the API server accepts). */
export type JsonSchema = { [key: string]: unknown };

/** One served version of a kind: its spec schema, and whether it is stored or deprecated. */
export interface CrdVersion {
  readonly name: string;
  readonly spec: z.ZodType;
  readonly storage?: boolean;
  /** The version to use instead, when this one is deprecated. */
  readonly deprecatedFor?: string;
}

/** Columns shown by `kubectl get`: policy kinds show conditions and counts, routes their parents' conditions. */
type StatusKind = 'policy' | 'route';

/** What ward knows about one CRD kind. */
export interface CrdKind {
  readonly group: string;
  readonly kind: string;
  readonly plural: string;
  readonly singular: string;
  readonly shortNames?: readonly string[];
  readonly categories?: readonly string[];
  readonly versions: readonly CrdVersion[];
  /** Whether `spec` is required (it is for every kind but GRPCRoute, as upstream). */
  readonly specRequired: boolean;
  readonly status: StatusKind;
  /** Kind-specific printer columns before the status ones, per version (all versions when absent). */
  readonly columns?: readonly (PrinterColumn & { readonly versions?: readonly string[] })[];
}

/** `additionalPrinterColumns` entry. */
export interface PrinterColumn {
  readonly name: string;
  readonly type: 'string' | 'integer' | 'date' | 'boolean' | 'number';
  readonly jsonPath: string;
  readonly description?: string;
  readonly priority?: number;
}

/** Version of the Gateway API bundle whose served versions ward's route CRDs mirror. */
export const GATEWAY_API_BUNDLE_VERSION = 'v1.1.1';

const deprecated = (name: string, spec: z.ZodType, deprecatedFor: string): CrdVersion => ({ name, spec, deprecatedFor });
const hostnames: PrinterColumn = { name: 'Hostnames', type: 'string', jsonPath: '.spec.hostnames' };

/** Every kind ward installs a CRD for, in install order. */
export const CRD_KINDS: readonly CrdKind[] = [
  {
    group: POLICY_GROUP,
    kind: 'Server',
    plural: 'servers',
    singular: 'server',
    shortNames: ['srv'],
    versions: [
      deprecated('v1alpha1', serverSpecs.v1alpha1, 'v1beta3'),
      deprecated('v1beta1', serverSpecs.v1beta1, 'v1beta3'),
      { name: 'v1beta2', spec: serverSpecs.v1beta2 },
      { name: 'v1beta3', spec: serverSpecs.v1beta3, storage: true },
    ],
    specRequired: true,
    status: 'policy',
    columns: [
      { name: 'Port', type: 'string', jsonPath: '.spec.port', description: 'The port the server listens on' },
      { name: 'Protocol', type: 'string', jsonPath: '.spec.proxyProtocol', description: 'The protocol of the server' },
      {
        name: 'Access Policy',
        type: 'string',
        jsonPath: '.spec.accessPolicy',
        description: 'The policy for traffic no authorization admits',
        versions: ['v1beta3'],
      },
    ],
  },
  {
    group: POLICY_GROUP,
    kind: 'ServerAuthorization',
    plural: 'serverauthorizations',
    singular: 'serverauthorization',
    shortNames: ['saz', 'serverauthz', 'srvauthz'],
    versions: [deprecated('v1alpha1', serverAuthorizationSpec, 'v1beta1'), { name: 'v1beta1', spec: serverAuthorizationSpec, storage: true }],
    specRequired: true,
    status: 'policy',
    columns: [{ name: 'Server', type: 'string', jsonPath: '.spec.server.name', description: 'The Server this authorization applies to' }],
  },
  {
    group: POLICY_GROUP,
    kind: 'AuthorizationPolicy',
    plural: 'authorizationpolicies',
    singular: 'authorizationpolicy',
    shortNames: ['authzpolicy'],
    versions: [{ name: 'v1alpha1', spec: authorizationPolicySpec, storage: true }],
    specRequired: true,
    status: 'policy',
    columns: [
      { name: 'Target Kind', type: 'string', jsonPath: '.spec.targetRef.kind' },
      { name: 'Target', type: 'string', jsonPath: '.spec.targetRef.name' },
    ],
  },
  {
    group: POLICY_GROUP,
    kind: 'MeshTLSAuthentication',
    plural: 'meshtlsauthentications',
    singular: 'meshtlsauthentication',
    shortNames: ['meshtlsauthn'],
    versions: [{ name: 'v1alpha1', spec: meshTLSAuthenticationSpec, storage: true }],
    specRequired: true,
    status: 'policy',
  },
  {
    group: POLICY_GROUP,
    kind: 'NetworkAuthentication',
    plural: 'networkauthentications',
    singular: 'networkauthentication',
    shortNames: ['netauthn', 'networkauthn'],
    versions: [{ name: 'v1alpha1', spec: networkAuthenticationSpec, storage: true }],
    specRequired: true,
    status: 'policy',
  },
  {
    group: POLICY_GROUP,
    kind: 'HTTPRoute',
    plural: 'httproutes',
    singular: 'httproute',
    versions: [
      { name: 'v1alpha1', spec: linkerdHttpRouteSpecs.v1alpha1 },
      { name: 'v1beta1', spec: linkerdHttpRouteSpecs.v1beta1 },
      { name: 'v1beta2', spec: linkerdHttpRouteSpecs.v1beta2 },
      { name: 'v1beta3', spec: linkerdHttpRouteSpecs.v1beta3, storage: true },
    ],
    specRequired: true,
    status: 'route',
    columns: [hostnames],
  },
  {
    group: GATEWAY_GROUP,
    kind: 'HTTPRoute',
    plural: 'httproutes',
    singular: 'httproute',
    categories: ['gateway-api'],
    versions: [
      { name: 'v1', spec: gatewayHttpRouteSpec, storage: true },
      { name: 'v1beta1', spec: gatewayHttpRouteSpec },
    ],
    specRequired: true,
    status: 'route',
    columns: [hostnames],
  },
  {
    group: GATEWAY_GROUP,
    kind: 'GRPCRoute',
    plural: 'grpcroutes',
    singular: 'grpcroute',
    categories: ['gateway-api'],
    versions: [{ name: 'v1', spec: grpcRouteSpec, storage: true }, deprecated('v1alpha2', grpcRouteSpec, 'v1')],
    specRequired: false,
    status: 'route',
    columns: [hostnames],
  },
];

/** A CustomResourceDefinition object (`apiextensions.k8s.io/v1`). */
export type CustomResourceDefinition = {
  readonly apiVersion: 'apiextensions.k8s.io/v1';
  readonly kind: 'CustomResourceDefinition';
  readonly metadata: { readonly name: string; readonly labels: Readonly<Record<string, string>>; readonly annotations?: Readonly<Record<string, string>> };
  readonly spec: JsonSchema;
};

/** Options of {@link customResourceDefinitions}. */
export interface CrdOptions {
  /** Include the Gateway API route CRDs (default true); leave them out where the Gateway API is installed already. */
  readonly gatewayApi?: boolean;
  /** Labels for every CRD (ward's `app.kubernetes.io/part-of: ward` is always added). */
  readonly labels?: Readonly<Record<string, string>>;
}

/** The label every object ward installs carries. */
export const WARD_PART_OF_LABEL = { 'app.kubernetes.io/part-of': 'ward' } as const;

/** ward's CRDs, in {@link CRD_KINDS} order. Deterministic: same options, same objects. */
export function customResourceDefinitions(opts: CrdOptions = {}): CustomResourceDefinition[] {
  const kinds = CRD_KINDS.filter((k) => opts.gatewayApi !== false || k.group !== GATEWAY_GROUP);
  return kinds.map((k) => crdOf(k, { ...opts.labels, ...WARD_PART_OF_LABEL }));
}

function crdOf(k: CrdKind, labels: Readonly<Record<string, string>>): CustomResourceDefinition {
  const isGateway = k.group === GATEWAY_GROUP;
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name: `${k.plural}.${k.group}`,
      labels,
      // The API server refuses CRDs in *.k8s.io groups without an approval annotation; these
      // are the Gateway API's own kinds, approved there.
      ...(isGateway
        ? {
            annotations: {
              'api-approved.kubernetes.io': 'https://github.com/kubernetes-sigs/gateway-api/pull/2997',
              'gateway.networking.k8s.io/bundle-version': GATEWAY_API_BUNDLE_VERSION,
              'gateway.networking.k8s.io/channel': 'experimental',
            },
          }
        : {}),
    },
    spec: {
      group: k.group,
      names: {
        kind: k.kind,
        listKind: `${k.kind}List`,
        plural: k.plural,
        singular: k.singular,
        ...(k.shortNames !== undefined ? { shortNames: [...k.shortNames] } : {}),
        ...(k.categories !== undefined ? { categories: [...k.categories] } : {}),
      },
      scope: 'Namespaced',
      versions: k.versions.map((v) => ({
        name: v.name,
        served: true,
        storage: v.storage === true,
        ...(v.deprecatedFor !== undefined
          ? { deprecated: true, deprecationWarning: `${k.group}/${v.name} ${k.kind} is deprecated; use ${k.group}/${v.deprecatedFor} ${k.kind}` }
          : {}),
        schema: { openAPIV3Schema: objectSchema(k, v) },
        subresources: { status: {} },
        additionalPrinterColumns: columnsOf(k, v.name),
      })),
    },
  };
}

function objectSchema(k: CrdKind, v: CrdVersion): JsonSchema {
  return {
    type: 'object',
    description: `${k.kind} (${k.group}/${v.name}), as ward reads it.`,
    properties: {
      apiVersion: { type: 'string' },
      kind: { type: 'string' },
      metadata: { type: 'object' },
      spec: specSchema(v.spec),
      status: k.status === 'policy' ? POLICY_STATUS : ROUTE_STATUS,
    },
    ...(k.specRequired ? { required: ['spec'] } : {}),
  };
}

const CONDITION: JsonSchema = {
  type: 'object',
  properties: {
    type: { type: 'string' },
    status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
    reason: { type: 'string' },
    message: { type: 'string' },
    lastTransitionTime: { type: 'string', format: 'date-time' },
    observedGeneration: { type: 'integer', format: 'int64', minimum: 0 },
  },
  // metav1.Condition's required fields, as Gateway API route conditions have them too.
  required: ['type', 'status', 'reason', 'message', 'lastTransitionTime'],
};
const CONDITIONS: JsonSchema = {
  type: 'array',
  items: CONDITION,
  'x-kubernetes-list-type': 'map',
  'x-kubernetes-list-map-keys': ['type'],
};

// Status is the controller's own; unknown fields are kept so a newer controller can add some
// without a CRD change.
const POLICY_STATUS: JsonSchema = {
  type: 'object',
  'x-kubernetes-preserve-unknown-fields': true,
  properties: {
    conditions: CONDITIONS,
    selectedPods: { type: 'integer', format: 'int32', minimum: 0 },
    selectedPorts: { type: 'integer', format: 'int32', minimum: 0 },
  },
};
const ROUTE_STATUS: JsonSchema = {
  type: 'object',
  'x-kubernetes-preserve-unknown-fields': true,
  properties: {
    parents: {
      type: 'array',
      items: {
        type: 'object',
        'x-kubernetes-preserve-unknown-fields': true,
        properties: { parentRef: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true }, controllerName: { type: 'string' }, conditions: CONDITIONS },
      },
    },
  },
};

const STATUS_COLUMNS: Record<StatusKind, readonly PrinterColumn[]> = {
  policy: [
    { name: 'Accepted', type: 'string', jsonPath: '.status.conditions[?(@.type=="Accepted")].status', description: 'Whether ward accepted the resource' },
    { name: 'Pods', type: 'integer', jsonPath: '.status.selectedPods', description: 'How many pods the resource selects' },
    { name: 'Ports', type: 'integer', jsonPath: '.status.selectedPorts', description: 'How many pod ports the resource selects' },
    {
      name: 'Resolved',
      type: 'string',
      jsonPath: '.status.conditions[?(@.type=="ResolvedRefs")].status',
      description: 'Whether every reference resolved',
      priority: 1,
    },
  ],
  route: [
    {
      name: 'Accepted',
      type: 'string',
      jsonPath: '.status.parents[*].conditions[?(@.type=="Accepted")].status',
      description: 'Whether each parent accepted the route',
    },
    {
      name: 'Resolved',
      type: 'string',
      jsonPath: '.status.parents[*].conditions[?(@.type=="ResolvedRefs")].status',
      description: "Whether the route's references resolved, per parent",
      priority: 1,
    },
  ],
};
const AGE: PrinterColumn = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' };

function columnsOf(k: CrdKind, version: string): PrinterColumn[] {
  const own = (k.columns ?? []).filter((c) => c.versions === undefined || c.versions.includes(version)).map(({ versions: _, ...c }) => c);
  return [...own, ...STATUS_COLUMNS[k.status], AGE];
}

/** The structural `spec` schema of a zod spec schema (its input side: what users write). */
export function specSchema(spec: z.ZodType): JsonSchema {
  const generated = z.toJSONSchema(spec, { target: 'openapi-3.0', io: 'input', unrepresentable: 'any' }) as JsonSchema;
  const { $schema: _, ...root } = generated;
  return toStructural(root);
}

const SAFE_INTEGER_BOUND = Number.MAX_SAFE_INTEGER;
/** Keywords kept as they are (value validation the API server performs). */
const KEPT = new Set(['type', 'description', 'enum', 'minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems', 'nullable', 'required']);
/** `format` values the API server knows; others are dropped rather than ignored with a warning. */
const FORMATS = new Set(['int32', 'int64', 'float', 'double', 'byte', 'date', 'date-time', 'uri', 'email', 'hostname', 'ipv4', 'ipv6', 'cidr', 'uuid']);

/**
 * Makes zod's JSON Schema structural (Kubernetes' rules for CRD schemas): int|string unions
 * become `x-kubernetes-int-or-string`, unconstrained nodes (zod `unknown`) preserve unknown
 * fields, `additionalProperties: false` goes (pruning does that job), and zod's `default`s go,
 * because ward's decoders apply them, exactly as when reading manifests from files, so a stored
 * object stays as the user wrote it. Throws `TypeError` on a construct it cannot translate, so a
 * new zod schema cannot silently produce a CRD the API server refuses.
 */
export function toStructural(node: JsonSchema): JsonSchema {
  const union = (node.anyOf ?? node.oneOf) as JsonSchema[] | undefined;
  if (union !== undefined) {
    const types = union.map((b) => b.type).sort();
    if (types.length === 2 && types[0] === 'integer' && types[1] === 'string') return { 'x-kubernetes-int-or-string': true };
    throw new TypeError(`cannot make a structural schema of a union of ${JSON.stringify(types)}`);
  }
  for (const key of ['allOf', 'not', '$ref', 'items' in node && Array.isArray(node.items) ? 'items' : '', 'prefixItems']) {
    if (key !== '' && key in node) throw new TypeError(`cannot make a structural schema with "${key}"`);
  }
  if (node.type === undefined) {
    if (node.enum !== undefined || node.const !== undefined) throw new TypeError(`untyped enum ${JSON.stringify(node.enum ?? node.const)}`);
    return { 'x-kubernetes-preserve-unknown-fields': true };
  }
  const out: JsonSchema = {};
  for (const [key, value] of Object.entries(node)) {
    if (KEPT.has(key)) {
      if ((key === 'minimum' || key === 'maximum') && Math.abs(value as number) >= SAFE_INTEGER_BOUND) continue;
      out[key] = value;
    } else if (key === 'const') out.enum = [value];
    else if (key === 'format') {
      if (FORMATS.has(value as string)) out.format = value;
    } else if (key === 'properties') {
      out.properties = Object.fromEntries(Object.entries(value as Record<string, JsonSchema>).map(([k, v]) => [k, toStructural(v)]));
    } else if (key === 'items') out.items = toStructural(value as JsonSchema);
    else if (key === 'additionalProperties') {
      if (typeof value === 'object' && value !== null) out.additionalProperties = toStructural(value as JsonSchema);
      else if (value === true) out['x-kubernetes-preserve-unknown-fields'] = true;
    } else if (key === 'default') {
      // See above: defaults are the decoders' business.
    } else throw new TypeError(`cannot make a structural schema with "${key}"`);
  }
  if (out.type === 'object' && out.properties === undefined && out.additionalProperties === undefined) out['x-kubernetes-preserve-unknown-fields'] = true;
  return out;
}
