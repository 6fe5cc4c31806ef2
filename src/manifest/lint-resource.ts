/**
 * Lint of one resource on its own: traps that admission lets through but that rarely do what
 * the author meant (quoted port numbers, authorizations that grant nothing, annotations the
 * controller ignores). Checks that need other resources live with the index.
 */
import { DEFAULT_POLICY_NAMES, type Diagnostic, type DiagnosticCode, diagnostic } from '../core/index.js';
import { ANNOTATIONS, checkPortSet, parseDefaultPolicy } from './annotations.js';
import type { MeshTLSAuthentication, Resource, ServerAuthorization } from './types.js';

type Report = (code: DiagnosticCode, params: Readonly<Record<string, string | number>>, path: readonly (string | number)[]) => void;

/** Warnings about `resource` that need no other resource. */
export function lintResource(resource: Resource): Diagnostic[] {
  const out: Diagnostic[] = [];
  const { kind, metadata, origin } = resource;
  const ref = { kind, name: metadata.name, ...(metadata.namespace !== '' ? { namespace: metadata.namespace } : {}) };
  const report: Report = (code, params, path) =>
    out.push(diagnostic(code, params, { resource: ref, path, ...(origin !== undefined ? { source: origin.positionOf(path) } : {}) }));
  switch (resource.kind) {
    case 'Server':
      if (typeof resource.spec.port === 'string' && /^\d+$/.test(resource.spec.port)) {
        report('POL100', { value: resource.spec.port }, ['spec', 'port']);
      }
      break;
    case 'ServerAuthorization':
      lintServerAuthorization(resource, report);
      break;
    case 'MeshTLSAuthentication':
      lintMeshTLSAuthentication(resource, report);
      break;
    case 'Pod':
    case 'Namespace':
      lintAnnotations(metadata.annotations, ['metadata', 'annotations'], report);
      break;
    case 'Deployment':
    case 'StatefulSet':
    case 'DaemonSet':
    case 'ReplicaSet':
    case 'Job':
    case 'CronJob': {
      const template = resource.kind === 'CronJob' ? ['spec', 'jobTemplate', 'spec', 'template'] : ['spec', 'template'];
      lintAnnotations(resource.spec.template.metadata.annotations, [...template, 'metadata', 'annotations'], report);
      break;
    }
    default:
      break;
  }
  return out;
}

function lintServerAuthorization(saz: ServerAuthorization, report: Report): void {
  const { client } = saz.spec;
  if (client.unauthenticated) return;
  const params = { kind: 'ServerAuthorization', name: saz.metadata.name };
  const mtls = client.meshTLS;
  if (mtls === undefined) {
    report(
      'POL101',
      {
        ...params,
        detail: 'neither spec.client.unauthenticated nor spec.client.meshTLS is set, so the index ignores it',
        fix: 'set spec.client.unauthenticated: true, or list identities or serviceAccounts under spec.client.meshTLS',
      },
      ['spec', 'client'],
    );
  } else if (!mtls.unauthenticatedTLS && (mtls.identities ?? []).length === 0 && (mtls.serviceAccounts ?? []).length === 0) {
    report(
      'POL101',
      {
        ...params,
        detail: 'spec.client.meshTLS lists no identities or serviceAccounts, so the index ignores it',
        fix: 'list identities or serviceAccounts, or set unauthenticatedTLS: true to accept any mesh TLS client',
      },
      ['spec', 'client', 'meshTLS'],
    );
  }
}

function lintMeshTLSAuthentication(m: MeshTLSAuthentication, report: Report): void {
  if ((m.spec.identities ?? []).length + (m.spec.identityRefs ?? []).length > 0) return;
  report(
    'POL101',
    {
      kind: 'MeshTLSAuthentication',
      name: m.metadata.name,
      detail: 'it lists no identities or identityRefs, so the index ignores it and policies that require it deny',
      fix: 'list identities (e.g. "*.app.serviceaccount.identity.linkerd.cluster.local") or identityRefs',
    },
    ['spec'],
  );
}

const PORT_SET_FIX = 'list port numbers or inclusive ranges, e.g. 3306,8080-8090';

function lintAnnotations(annotations: Readonly<Record<string, string>>, path: readonly (string | number)[], report: Report): void {
  const policy = annotations[ANNOTATIONS.defaultInboundPolicy];
  if (policy !== undefined && parseDefaultPolicy(policy) === undefined) {
    report(
      'POL109',
      {
        annotation: ANNOTATIONS.defaultInboundPolicy,
        value: policy,
        detail: 'it is not a default policy, so the cluster default applies',
        fix: `use one of ${DEFAULT_POLICY_NAMES.join(', ')}`,
      },
      [...path, ANNOTATIONS.defaultInboundPolicy],
    );
  }
  for (const key of [ANNOTATIONS.opaquePorts, ANNOTATIONS.requireIdentityPorts]) {
    const value = annotations[key];
    if (value === undefined) continue;
    const r = checkPortSet(value);
    if ('ports' in r) continue;
    const detail =
      r.error.kind === 'name'
        ? `"${r.error.item}" is a port name, which the policy controller does not resolve, so it ignores the whole annotation`
        : `"${r.error.item}" is not a port 1-65535 or an increasing range, so the policy controller ignores the whole annotation`;
    report('POL109', { annotation: key, value, detail, fix: PORT_SET_FIX }, [...path, key]);
  }
}
