import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';
import { CRD_KINDS, type CustomResourceDefinition, customResourceDefinitions, type JsonSchema, specSchema, toStructural } from './crds.js';
import { KIND_TABLE } from './kind-table.js';

// Linkerd's rendered CRDs, shipped by the apiserver kit beside the repository.
const LINKERD_CRDS = join(process.env.WARD_KUBE_KIT ?? join(import.meta.dirname, '../../../shared/kube'), 'crds', 'linkerd-crds.yaml');
const EXAMPLES = join(import.meta.dirname, '../../examples');

interface CrdVersionOut {
  name: string;
  served: boolean;
  storage: boolean;
  deprecated?: boolean;
  schema: { openAPIV3Schema: JsonSchema };
  subresources?: unknown;
  additionalPrinterColumns?: { name: string; jsonPath: string; priority?: number; type: string }[];
}
const versionsOf = (crd: CustomResourceDefinition) => crd.spec.versions as CrdVersionOut[];
const identityOf = (crd: { spec: JsonSchema }) => {
  const s = crd.spec as { group: string; scope: string; names: Record<string, unknown>; versions: CrdVersionOut[] };
  const { listKind: _, ...names } = s.names;
  return {
    group: s.group,
    scope: s.scope,
    names,
    versions: s.versions
      .map((v) => ({ name: v.name, served: v.served, storage: v.storage, deprecated: v.deprecated === true }))
      .sort((a, b) => a.name.localeCompare(b.name)),
  };
};

/** The Kubernetes structural-schema rules that `toStructural` must meet; returns the violations. */
function structuralProblems(node: JsonSchema, path: string, out: string[] = []): string[] {
  const hasType = typeof node.type === 'string' && node.type !== '';
  const exempt = node['x-kubernetes-int-or-string'] === true || node['x-kubernetes-preserve-unknown-fields'] === true;
  if (!hasType && !exempt) out.push(`${path}: no type`);
  for (const k of ['anyOf', 'oneOf', 'allOf', 'not', '$ref', 'default', 'additionalItems', 'prefixItems', '$schema'])
    if (k in node) out.push(`${path}: has ${k}`);
  if (node.additionalProperties === false) out.push(`${path}: additionalProperties false`);
  if (node.properties !== undefined && node.additionalProperties !== undefined) out.push(`${path}: properties and additionalProperties`);
  if (node.type === 'object' && node.properties === undefined && node.additionalProperties === undefined && !exempt && path !== 'metadata')
    out.push(`${path}: object with no fields would prune everything`);
  for (const [k, v] of Object.entries((node.properties ?? {}) as Record<string, JsonSchema>)) structuralProblems(v, `${path}.${k}`.replace(/^\./, ''), out);
  if (node.items !== undefined) structuralProblems(node.items as JsonSchema, `${path}[]`, out);
  if (typeof node.additionalProperties === 'object') structuralProblems(node.additionalProperties as JsonSchema, `${path}{}`, out);
  return out;
}

/** What the API server would prune from `value` under `schema` (fields the schema does not know). */
function prunedFields(value: unknown, schema: JsonSchema, path: string, out: string[] = []): string[] {
  if (schema['x-kubernetes-preserve-unknown-fields'] === true && schema.properties === undefined) return out;
  if (Array.isArray(value) && schema.items !== undefined) {
    for (const [i, v] of value.entries()) prunedFields(v, schema.items as JsonSchema, `${path}[${i}]`, out);
  } else if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
    for (const [k, v] of Object.entries(value)) {
      // The API server validates metadata itself, whatever the CRD says.
      if (path === '' && k === 'metadata') continue;
      const sub = props[k] ?? (typeof schema.additionalProperties === 'object' ? (schema.additionalProperties as JsonSchema) : undefined);
      if (sub === undefined) {
        if (schema['x-kubernetes-preserve-unknown-fields'] !== true) out.push(`${path}.${k}`);
      } else prunedFields(v, sub, `${path}.${k}`, out);
    }
  }
  return out;
}

describe('customResourceDefinitions', () => {
  const crds = customResourceDefinitions();

  it('installs the names, scope, versions and storage versions Linkerd does', { skip: !existsSync(LINKERD_CRDS) && `no ${LINKERD_CRDS}` }, () => {
    const upstream = parseAllDocuments(readFileSync(LINKERD_CRDS, 'utf8'))
      .map((d) => d.toJS() as { metadata: { name: string }; spec: JsonSchema } | null)
      .filter((d) => d !== null);
    const byName = new Map(upstream.map((d) => [d.metadata.name, d]));
    assert.deepEqual(
      crds.map((c) => c.metadata.name),
      [
        'servers.policy.linkerd.io',
        'serverauthorizations.policy.linkerd.io',
        'authorizationpolicies.policy.linkerd.io',
        'meshtlsauthentications.policy.linkerd.io',
        'networkauthentications.policy.linkerd.io',
        'httproutes.policy.linkerd.io',
        'httproutes.gateway.networking.k8s.io',
        'grpcroutes.gateway.networking.k8s.io',
      ],
    );
    for (const crd of crds) {
      const theirs = byName.get(crd.metadata.name);
      assert.ok(theirs, crd.metadata.name);
      assert.deepEqual(identityOf(crd), identityOf(theirs), crd.metadata.name);
    }
  });

  it('serves every policy.linkerd.io version ward decodes, and only those', () => {
    for (const crd of crds) {
      const { group, names } = crd.spec as { group: string; names: { kind: string } };
      const decoded = Object.keys(KIND_TABLE[names.kind]?.[group] ?? {}).sort();
      const served = versionsOf(crd)
        .map((v) => v.name)
        .sort();
      // Linkerd's chart ships Gateway API HTTPRoute without v1alpha2; ward still reads it from files.
      const expected = crd.metadata.name === 'httproutes.gateway.networking.k8s.io' ? decoded.filter((v) => v !== 'v1alpha2') : decoded;
      assert.deepEqual(served, expected, crd.metadata.name);
      assert.equal(versionsOf(crd).filter((v) => v.storage).length, 1, `${crd.metadata.name}: one storage version`);
    }
  });

  it('generates structural schemas for every version', () => {
    for (const crd of crds) {
      for (const v of versionsOf(crd)) {
        assert.deepEqual(structuralProblems(v.schema.openAPIV3Schema, ''), [], `${crd.metadata.name} ${v.name}`);
      }
    }
  });

  it('keeps what Linkerd users write: the repo examples lose no field to pruning', () => {
    const dirs = [join(EXAMPLES, 'emojivoto/policy'), join(EXAMPLES, 'emojivoto-legacy-policy')];
    let checked = 0;
    for (const dir of dirs) {
      for (const file of readdirSync(dir).filter((f) => f.endsWith('.yaml'))) {
        for (const doc of parseAllDocuments(readFileSync(join(dir, file), 'utf8'))) {
          const obj = doc.toJS() as { apiVersion: string; kind: string; metadata: { name: string } } | null;
          if (obj === null) continue;
          const [group, version] = obj.apiVersion.split('/') as [string, string];
          const crd = crds.find((c) => (c.spec as { group: string }).group === group && (c.spec as { names: { kind: string } }).names.kind === obj.kind);
          if (crd === undefined) continue;
          const schema = versionsOf(crd).find((v) => v.name === version)?.schema.openAPIV3Schema;
          assert.ok(schema, `${file}: ${obj.apiVersion} ${obj.kind} is not served`);
          assert.deepEqual(prunedFields(obj, schema, ''), [], `${file} ${obj.kind}/${obj.metadata.name}`);
          checked += 1;
        }
      }
    }
    assert.ok(checked >= 6, `only ${checked} objects checked`);
  });

  it('prunes a field the version does not define', () => {
    const server = versionsOf(crds[0] as CustomResourceDefinition).find((v) => v.name === 'v1beta1')?.schema.openAPIV3Schema as JsonSchema;
    const obj = {
      apiVersion: 'policy.linkerd.io/v1beta1',
      kind: 'Server',
      metadata: {},
      spec: { port: 8080, accessPolicy: 'deny', podSelector: { matchLabels: { a: 'b' } } },
    };
    assert.deepEqual(prunedFields(obj, server, ''), ['.spec.accessPolicy']);
  });

  it('enables the status subresource and shows Accepted, Pods, Ports and (wide) Resolved', () => {
    for (const crd of crds) {
      const isRoute = /httproutes|grpcroutes/.test(crd.metadata.name);
      for (const v of versionsOf(crd)) {
        assert.deepEqual(v.subresources, { status: {} }, crd.metadata.name);
        const cols = Object.fromEntries((v.additionalPrinterColumns ?? []).map((c) => [c.name, c]));
        if (isRoute) {
          assert.equal(cols.Accepted?.jsonPath, '.status.parents[*].conditions[?(@.type=="Accepted")].status');
        } else {
          assert.equal(cols.Accepted?.jsonPath, '.status.conditions[?(@.type=="Accepted")].status', crd.metadata.name);
          assert.deepEqual([cols.Pods?.jsonPath, cols.Pods?.type], ['.status.selectedPods', 'integer']);
          assert.deepEqual([cols.Ports?.jsonPath, cols.Ports?.type], ['.status.selectedPorts', 'integer']);
          const status = (v.schema.openAPIV3Schema.properties as Record<string, JsonSchema>).status as JsonSchema;
          assert.deepEqual(Object.keys(status.properties as object), ['conditions', 'selectedPods', 'selectedPorts']);
        }
        assert.equal(cols.Accepted?.priority, undefined);
        assert.equal(cols.Resolved?.priority, 1, `${crd.metadata.name}: Resolved only with -o wide`);
        assert.equal((v.additionalPrinterColumns ?? []).at(-1)?.name, 'Age');
      }
    }
  });

  it('leaves the Gateway API CRDs out on request, and is deterministic', () => {
    const without = customResourceDefinitions({ gatewayApi: false });
    assert.deepEqual(
      without.map((c) => c.metadata.name),
      crds.map((c) => c.metadata.name).filter((n) => !n.endsWith('.gateway.networking.k8s.io')),
    );
    assert.deepEqual(customResourceDefinitions(), crds);
    assert.equal(CRD_KINDS.length, crds.length);
  });

  it('marks the Gateway API CRDs approved, as the API server requires for *.k8s.io groups', () => {
    for (const crd of crds.filter((c) => c.metadata.name.endsWith('.k8s.io'))) {
      assert.match(crd.metadata.annotations?.['api-approved.kubernetes.io'] ?? '', /^https:\/\//);
    }
  });
});

describe('toStructural', () => {
  it('turns int|string into int-or-string, unknown into preserved fields, and drops defaults', () => {
    const s = specSchema(
      z.strictObject({ port: z.union([z.int(), z.string()]), extra: z.unknown().optional(), mode: z.string().default('x'), n: z.int().min(1).max(9) }),
    );
    assert.deepEqual(s, {
      type: 'object',
      properties: {
        port: { 'x-kubernetes-int-or-string': true },
        extra: { 'x-kubernetes-preserve-unknown-fields': true },
        mode: { type: 'string' },
        n: { type: 'integer', minimum: 1, maximum: 9 },
      },
      required: ['port', 'n'],
    });
  });

  it('refuses what a structural schema cannot say', () => {
    assert.throws(() => specSchema(z.object({ a: z.union([z.string(), z.boolean()]) })), /union of \["boolean","string"\]/);
    assert.throws(() => toStructural({ type: 'object', patternProperties: {} }), /"patternProperties"/);
  });
});
