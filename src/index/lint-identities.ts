/**
 * Lint of the identities policy names: a namespace or ServiceAccount that does not exist
 * (`*.emojivto.serviceaccount…`), a string that is no mesh identity of this cluster (a Service's
 * DNS name `web.emojivoto.svc.cluster.local`, another trust domain), `identityRefs` and
 * ServiceAccount references to nothing, and ServerAuthorization `serviceAccounts` entries
 * without a namespace that resolve to a ServiceAccount that is not there.
 *
 * "Does not exist" is judged against the loaded set, which is often partial (`ward check -f
 * policy/` without the workloads, one app's manifests whose clients live elsewhere). So a name
 * that is merely absent is reported only when the set claims to be complete about it:
 * - a namespace no loaded object lives in or names is reported when a loaded namespace is close to
 *   it (a typo: "did you mean"), or when the set describes a whole cluster: it has pods, and every
 *   namespace its objects live in is declared by a Namespace object (a `ward up` directory);
 * - a ServiceAccount neither a ServiceAccount object nor a pod names is reported when one known in
 *   its namespace is close to it, or when that namespace declares its ServiceAccounts (has at
 *   least one ServiceAccount object); `default` always exists.
 */
import { type Diagnostic, type DiagnosticCode, diagnostic, type IdentityDomain, isUriIdentity, type ResourceRef } from '../core/index.js';
import type { MeshTLSAuthentication, NamespacedTargetRef, Resource, ServerAuthorization } from '../manifest/index.js';
import { sameGroup, sameName } from './convert.js';
import type { PolicyIndex } from './policy-index.js';

/** What the loaded set says exists. */
interface Loaded {
  readonly namespaces: ReadonlySet<string>;
  /** Namespace -> ServiceAccount names known there (objects and pods' serviceAccountName). */
  readonly accounts: ReadonlyMap<string, ReadonlySet<string>>;
  /** Namespaces with at least one ServiceAccount object. */
  readonly declaresAccounts: ReadonlySet<string>;
  readonly describesCluster: boolean;
}

function loadedNames(index: PolicyIndex, resources: readonly Resource[]): Loaded {
  const namespaces = new Set<string>();
  const accounts = new Map<string, Set<string>>();
  const addAccount = (ns: string, sa: string) => {
    const set = accounts.get(ns) ?? new Set<string>();
    set.add(sa);
    accounts.set(ns, set);
  };
  const declared = new Set<string>();
  const declaresAccounts = new Set<string>();
  for (const r of resources) {
    if (r.kind === 'Namespace') {
      namespaces.add(r.metadata.name);
      declared.add(r.metadata.name);
    } else if (r.metadata.namespace !== '') namespaces.add(r.metadata.namespace);
    if (r.kind === 'ServiceAccount') {
      addAccount(r.metadata.namespace, r.metadata.name);
      declaresAccounts.add(r.metadata.namespace);
    }
  }
  const pods = index.pods();
  for (const p of pods) {
    namespaces.add(p.namespace);
    addAccount(p.namespace, p.serviceAccount);
  }
  const unmeshed = index.unmeshedPods();
  for (const p of unmeshed) {
    namespaces.add(p.metadata.namespace);
    addAccount(p.metadata.namespace, p.spec.serviceAccountName ?? 'default');
  }
  const allDeclared = declared.size > 0 && [...namespaces].every((ns) => declared.has(ns));
  return { namespaces, accounts, declaresAccounts, describesCluster: allDeclared && pods.length + unmeshed.length > 0 };
}

/** Levenshtein distance, stopping early past `max`. */
function editDistance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      const v = Math.min((prev[j] as number) + 1, (cur[j - 1] as number) + 1, (prev[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
      cur.push(v);
      best = Math.min(best, v);
    }
    if (best > max) return max + 1;
    prev = cur;
  }
  return prev[b.length] as number;
}

/** The closest of `names` to `name` (not `name` itself): one edit away, or two for names of six letters or more. */
function nearest(name: string, names: Iterable<string>): string | undefined {
  const max = name.length >= 6 ? 2 : 1;
  let best: string | undefined;
  let bestD = max + 1;
  for (const n of names) {
    if (n === name) continue;
    const d = editDistance(name, n, max);
    if (d < bestD || (d === bestD && best !== undefined && n < best)) {
      best = n;
      bestD = d;
    }
  }
  return bestD <= max && name.length > 2 ? best : undefined;
}

/** Whether to report namespace `ns` as missing, and the loaded one it was probably meant to be. */
function missingNamespace(ns: string, loaded: Loaded): { readonly near: string | undefined } | undefined {
  if (loaded.namespaces.has(ns)) return undefined;
  const near = nearest(ns, loaded.namespaces);
  return near !== undefined || loaded.describesCluster ? { near } : undefined;
}

/** Whether to report ServiceAccount ns/sa as missing, and the known one it was probably meant to be. */
function missingAccount(ns: string, sa: string, loaded: Loaded): { readonly near: string | undefined } | undefined {
  const known = loaded.accounts.get(ns) ?? new Set<string>();
  if (sa === 'default' || known.has(sa) || !loaded.namespaces.has(ns)) return undefined;
  const near = nearest(sa, known);
  return near !== undefined || loaded.declaresAccounts.has(ns) ? { near } : undefined;
}

/** Namespaces where a ServiceAccount named `sa` is known, sorted. */
function namespacesWithAccount(sa: string, loaded: Loaded): string[] {
  return [...loaded.accounts]
    .filter(([, set]) => set.has(sa))
    .map(([ns]) => ns)
    .sort();
}

type Push = (code: DiagnosticCode, params: Record<string, string | number>, r: Resource, path: (string | number)[]) => void;

/** Checks one identity string; `at` is its path in `r`. */
function checkIdentity(id: string, domain: IdentityDomain, loaded: Loaded, push: Push, r: Resource, at: (string | number)[]): void {
  if (id === '*' || isUriIdentity(id)) return;
  const labels = id.split('.');
  const expected = [domain.controlPlaneNamespace, ...domain.trustDomain.split('.')];
  const mesh = `${domain.controlPlaneNamespace}.${domain.trustDomain}`;
  const si = labels.indexOf('serviceaccount');
  if (si >= 1 && labels[si + 1] === 'identity') {
    const suffix = labels.slice(si + 2);
    if (suffix.join('.') !== expected.join('.')) {
      const fixed = [...labels.slice(0, si + 2), ...expected].join('.');
      push(
        'POL115',
        {
          identity: id,
          detail: `it ends in "identity.${suffix.join('.')}", but this mesh's identities end in "identity.${mesh}" (another control plane namespace or trust domain), so no client has it`,
          fix: `write "${fixed}" (or change --trust-domain if the mesh's trust domain is wrong)`,
        },
        r,
        at,
      );
      return;
    }
    const prefix = labels.slice(0, si);
    if (prefix.length !== 2) return; // `*.serviceaccount.identity…` (every namespace) or not ours to judge
    const [sa, ns] = prefix as [string, string];
    const params = { identity: id, controlPlane: domain.controlPlaneNamespace, trustDomain: domain.trustDomain };
    const nsMissing = missingNamespace(ns, loaded);
    if (nsMissing !== undefined) {
      const fixed = nsMissing.near !== undefined ? [sa, nsMissing.near, ...labels.slice(si)].join('.') : undefined;
      push(
        'POL114',
        {
          ...params,
          what: `namespace ${ns}`,
          suggestion: nsMissing.near !== undefined ? ` (did you mean namespace ${nsMissing.near}?)` : '',
          fix: fixed !== undefined ? `write "${fixed}"` : `create namespace ${ns}, or fix the spelling`,
        },
        r,
        at,
      );
      return;
    }
    if (sa === '*') return;
    const saMissing = missingAccount(ns, sa, loaded);
    if (saMissing !== undefined) {
      const elsewhere = namespacesWithAccount(sa, loaded);
      const suggestion =
        saMissing.near !== undefined
          ? ` (did you mean ServiceAccount ${ns}/${saMissing.near}?)`
          : elsewhere.length > 0
            ? ` (ServiceAccount ${sa} exists in namespace ${elsewhere.join(', ')})`
            : '';
      const fix =
        saMissing.near !== undefined
          ? `write "${[saMissing.near, ...labels.slice(1)].join('.')}"`
          : elsewhere.length > 0
            ? `write "${[sa, elsewhere[0], ...labels.slice(si)].join('.')}"`
            : `create ServiceAccount ${ns}/${sa}, or name the ServiceAccount the client runs as`;
      push('POL114', { ...params, what: `ServiceAccount ${ns}/${sa}`, suggestion, fix }, r, at);
    }
    return;
  }
  // `web.emojivoto.svc.cluster.local`: a Service's DNS name, which no client presents.
  const svc = labels.indexOf('svc');
  if (svc === 2) {
    const [name, ns] = labels as [string, string];
    const fixed = `${name === '*' ? '*' : name}.${ns}.serviceaccount.identity.${mesh}`;
    push(
      'POL115',
      {
        identity: id,
        detail: `it is the DNS name of ${name === '*' ? 'the Services' : `Service ${name}`} in namespace ${ns}, not an identity: clients are identified by the ServiceAccount they run as`,
        fix: `write "<serviceaccount>.${ns}.serviceaccount.identity.${mesh}", e.g. "${fixed}", or use identityRefs`,
      },
      r,
      at,
    );
  }
}

/** Checks a reference to a ServiceAccount or Namespace (identityRefs, requiredAuthenticationRefs, serviceAccounts). */
function checkRef(
  what: string,
  kind: 'ServiceAccount' | 'Namespace',
  ns: string,
  name: string,
  loaded: Loaded,
  push: Push,
  r: Resource,
  at: (string | number)[],
): void {
  if (kind === 'Namespace') {
    const m = missingNamespace(name, loaded);
    if (m === undefined) return;
    const near = m.near !== undefined ? ` (did you mean ${m.near}?)` : '';
    push('POL102', { what, target: `Namespace ${name}`, namespace: name, consequence: `${near}; no workload runs there, so it admits nobody` }, r, at);
    return;
  }
  const nsMissing = missingNamespace(ns, loaded);
  const saMissing = nsMissing === undefined ? missingAccount(ns, name, loaded) : undefined;
  if (nsMissing === undefined && saMissing === undefined) return;
  const near =
    nsMissing?.near !== undefined ? ` (did you mean namespace ${nsMissing.near}?)` : saMissing?.near !== undefined ? ` (did you mean ${saMissing.near}?)` : '';
  push('POL102', { what, target: `ServiceAccount ${ns}/${name}`, namespace: ns, consequence: `${near}; no workload runs as it, so it admits nobody` }, r, at);
}

function lintMeshTLS(m: MeshTLSAuthentication, domain: IdentityDomain, loaded: Loaded, push: Push): void {
  (m.spec.identities ?? []).forEach((id, i) => {
    checkIdentity(id, domain, loaded, push, m, ['spec', 'identities', i]);
  });
  (m.spec.identityRefs ?? []).forEach((ref: NamespacedTargetRef, i) => {
    if (ref.name === undefined || ref.name === '*' || !sameGroup(ref.group, '')) return;
    const kind = sameName(ref.kind, 'ServiceAccount') ? 'ServiceAccount' : sameName(ref.kind, 'Namespace') ? 'Namespace' : undefined;
    if (kind === undefined) return;
    checkRef('identityRefs', kind, ref.namespace ?? m.metadata.namespace, ref.name, loaded, push, m, ['spec', 'identityRefs', i]);
  });
}

function lintServerAuthorization(saz: ServerAuthorization, domain: IdentityDomain, loaded: Loaded, push: Push): void {
  const mtls = saz.spec.client.meshTLS;
  if (mtls === undefined) return;
  (mtls.identities ?? []).forEach((id, i) => {
    checkIdentity(id, domain, loaded, push, saz, ['spec', 'client', 'meshTLS', 'identities', i]);
  });
  (mtls.serviceAccounts ?? []).forEach((sa, i) => {
    const at = ['spec', 'client', 'meshTLS', 'serviceAccounts', i];
    if (sa.namespace !== undefined) {
      checkRef('serviceAccounts entry', 'ServiceAccount', sa.namespace, sa.name, loaded, push, saz, at);
      return;
    }
    // No namespace: the ServerAuthorization's own. Say so when nothing runs as that there.
    const ns = saz.metadata.namespace;
    const elsewhere = namespacesWithAccount(sa.name, loaded).filter((n) => n !== ns);
    const missingHere = missingAccount(ns, sa.name, loaded) !== undefined || (!loaded.accounts.get(ns)?.has(sa.name) && elsewhere.length > 0);
    if (!missingHere || sa.name === 'default') return;
    push(
      'POL116',
      {
        name: sa.name,
        namespace: ns,
        detail: elsewhere.length > 0 ? `; a ServiceAccount ${sa.name} exists in namespace ${elsewhere.join(', ')}` : '',
        fix:
          elsewhere.length > 0
            ? `add namespace: ${elsewhere[0]} to the entry`
            : `add the namespace of the client's ServiceAccount to the entry, or create ServiceAccount ${ns}/${sa.name}`,
      },
      saz,
      at,
    );
  });
}

/** The identity lint of the whole loaded set. */
export function lintIdentities(index: PolicyIndex, resources: readonly Resource[]): Diagnostic[] {
  const out: Diagnostic[] = [];
  const loaded = loadedNames(index, resources);
  const domain = index.config;
  const refOf = (r: Resource): ResourceRef => ({ kind: r.kind, namespace: r.metadata.namespace, name: r.metadata.name });
  const push: Push = (code, params, r, path) => out.push(diagnostic(code, params, { resource: refOf(r), path, source: r.origin?.positionOf(path) }));
  for (const r of resources) {
    if (r.kind === 'MeshTLSAuthentication') lintMeshTLS(r, domain, loaded, push);
    else if (r.kind === 'ServerAuthorization') lintServerAuthorization(r, domain, loaded, push);
    else if (r.kind === 'AuthorizationPolicy') {
      (r.spec.requiredAuthenticationRefs ?? []).forEach((ref, i) => {
        if (ref.name === undefined || !sameName(ref.kind, 'ServiceAccount') || !sameGroup(ref.group, '')) return;
        checkRef('requiredAuthenticationRefs', 'ServiceAccount', ref.namespace ?? r.metadata.namespace, ref.name, loaded, push, r, [
          'spec',
          'requiredAuthenticationRefs',
          i,
        ]);
      });
    }
  }
  return out;
}
