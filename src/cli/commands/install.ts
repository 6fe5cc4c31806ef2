/**
 * `ward install` and `ward uninstall`: print the Kubernetes objects of ward's control plane (or
 * just their kinds and names, to delete them) for `kubectl apply -f -` / `kubectl delete -f -`,
 * as `linkerd install` does. Nothing here contacts a cluster.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Command, Option } from '@commander-js/extra-typings';
import { stringify } from 'yaml';
import type { Diagnostic } from '../../core/index.js';
import {
  CertificateAuthority,
  DEFAULT_CA_TTL_MS,
  DEFAULT_TRUST_DOMAIN,
  IDENTITY_FILES,
  initIdentity,
  isDns1123Label,
  isDnsName,
  loadIssuer,
  validateIssuer,
} from '../../identity/index.js';
import {
  CRD_KINDS,
  type CustomResourceDefinition,
  customResourceDefinitions,
  SMI_ACCESS_GROUP,
  SMI_SPECS_GROUP,
  WARD_PART_OF_LABEL,
} from '../../manifest/index.js';
import { errorMessage, packageVersionOf } from '../../shared/index.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { formatDiagnostics, palette } from '../output.js';

/** A Kubernetes object as printed. */
export type KubeObject = {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: { readonly name: string; readonly namespace?: string } & Record<string, unknown>;
} & Record<string, unknown>;

/** Names of the objects `ward install` creates (Linkerd's names where Linkerd has the object). */
export const INSTALL_NAMES = {
  controller: 'ward-controller',
  webhookService: 'ward-webhook',
  webhookSecret: 'ward-webhook-tls',
  issuerSecret: 'linkerd-identity-issuer',
  trustRoots: 'linkerd-identity-trust-roots',
  validatingWebhook: 'ward-policy-validator',
  mutatingWebhook: 'ward-proxy-injector',
} as const;

/** The controller's ports (Service `ward-controller`, and the webhook's container port). */
export const CONTROLLER_PORTS = { policy: 8090, identity: 8080, destination: 8086, admin: 9990, webhook: 9443 } as const;

/** Where the controller's container finds its files. */
export const CONTROLLER_PATHS = { identityDir: '/var/run/ward/identity', webhookDir: '/var/run/ward/webhook' } as const;

/** The uid the controller runs as: not root, and not the proxy's 2102, which proxy-init exempts from redirection. */
export const CONTROLLER_UID = 2103;

/** Identity material for the cluster: PEM texts. */
export interface IdentityPems {
  readonly anchorsPem: string;
  readonly issuerCertPem: string;
  readonly issuerKeyPem: string;
}

/** The webhook's CA and serving credentials, PEM. */
export interface WebhookPems {
  readonly caPem: string;
  /** The serving certificate followed by its intermediate. */
  readonly certPem: string;
  readonly keyPem: string;
}

/** What `ward install` prints, decided. */
export interface InstallOptions {
  readonly namespace: string;
  readonly image: string;
  readonly imagePullPolicy: 'Always' | 'IfNotPresent' | 'Never';
  readonly replicas: number;
  readonly trustDomain: string;
  /** Include the Gateway API route CRDs (default true). */
  readonly gatewayApiCrds: boolean;
  readonly identity: IdentityPems;
  readonly webhook: WebhookPems;
}

/** Options of `ward uninstall`. */
export interface UninstallOptions {
  readonly namespace: string;
  readonly gatewayApiCrds: boolean;
}

/** The image `ward install` uses by default: the one `npm run image` builds. */
export function defaultImage(version = packageVersionOf(import.meta.url)): string {
  return `localhost/ward:${version}`;
}

const b64 = (text: string) => Buffer.from(text).toString('base64');
const labelsOf = (namespace: string, extra: Record<string, string> = {}) => ({ ...WARD_PART_OF_LABEL, 'linkerd.io/control-plane-ns': namespace, ...extra });
const CONTROLLER_SELECTOR = { 'app.kubernetes.io/name': 'ward-controller' };

/** The DNS names the webhook's serving certificate carries. */
export function webhookDnsNames(namespace: string): string[] {
  const svc = INSTALL_NAMES.webhookService;
  return [`${svc}.${namespace}.svc`, `${svc}.${namespace}.svc.cluster.local`, `${svc}.${namespace}`, svc];
}

/**
 * Every object of the control plane, in apply order: CRDs, namespace, RBAC, identity and webhook
 * Secrets, the controller, its Services, the webhook configurations.
 */
export function installObjects(opts: InstallOptions): KubeObject[] {
  const ns = opts.namespace;
  const meta = (name: string, extra: Record<string, unknown> = {}) => ({ name, namespace: ns, labels: labelsOf(ns), ...extra });
  const caBundle = b64(opts.webhook.caPem);
  return [
    ...crdObjects(opts.gatewayApiCrds),
    {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: ns, labels: labelsOf(ns, { 'linkerd.io/is-control-plane': 'true', 'config.linkerd.io/admission-webhooks': 'disabled' }) },
    },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta(INSTALL_NAMES.controller) },
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: clusterRoleName(ns), labels: labelsOf(ns) }, rules: clusterRules() },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: clusterRoleName(ns), labels: labelsOf(ns) },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterRoleName(ns) },
      subjects: [{ kind: 'ServiceAccount', name: INSTALL_NAMES.controller, namespace: ns }],
    },
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: meta(INSTALL_NAMES.controller), rules: namespaceRules() },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: meta(INSTALL_NAMES.controller),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: INSTALL_NAMES.controller },
      subjects: [{ kind: 'ServiceAccount', name: INSTALL_NAMES.controller, namespace: ns }],
    },
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: meta(INSTALL_NAMES.issuerSecret),
      type: 'Opaque',
      data: { 'crt.pem': b64(opts.identity.issuerCertPem), 'key.pem': b64(opts.identity.issuerKeyPem) },
    },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: meta(INSTALL_NAMES.trustRoots), data: { 'ca-bundle.crt': opts.identity.anchorsPem } },
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: meta(INSTALL_NAMES.webhookSecret),
      type: 'kubernetes.io/tls',
      data: { 'tls.crt': b64(opts.webhook.certPem), 'tls.key': b64(opts.webhook.keyPem) },
    },
    controllerDeployment(opts),
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta(INSTALL_NAMES.controller),
      spec: {
        type: 'ClusterIP',
        selector: CONTROLLER_SELECTOR,
        ports: (['policy', 'identity', 'destination', 'admin'] as const).map((name) => ({
          name,
          port: CONTROLLER_PORTS[name],
          targetPort: CONTROLLER_PORTS[name],
          protocol: 'TCP',
        })),
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta(INSTALL_NAMES.webhookService),
      spec: {
        type: 'ClusterIP',
        selector: CONTROLLER_SELECTOR,
        ports: [{ name: 'webhook', port: 443, targetPort: CONTROLLER_PORTS.webhook, protocol: 'TCP' }],
      },
    },
    validatingWebhook(ns, caBundle),
    mutatingWebhook(ns, caBundle),
  ];
}

function crdObjects(gatewayApi: boolean): CustomResourceDefinition[] {
  return customResourceDefinitions({ gatewayApi });
}

/** The CRDs alone (`ward install --crds`). */
export function installCrdObjects(gatewayApiCrds: boolean): KubeObject[] {
  return crdObjects(gatewayApiCrds);
}

const clusterRoleName = (ns: string) => `ward-controller-${ns}`;

/** Resources (plural, by group) the controller lists and watches, and whose status it writes. */
function policyResources(): Map<string, string[]> {
  const byGroup = new Map<string, string[]>();
  for (const k of CRD_KINDS) byGroup.set(k.group, [...(byGroup.get(k.group) ?? []), k.plural]);
  return byGroup;
}

/** Cluster-wide rules: read what the controller indexes, write status, review tokens. Never a wildcard. */
function clusterRules(): Record<string, unknown>[] {
  const rules: Record<string, unknown>[] = [
    { apiGroups: [''], resources: ['namespaces', 'pods', 'serviceaccounts', 'services'], verbs: ['list', 'watch'] },
    { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
  ];
  for (const [group, plurals] of policyResources()) {
    rules.push({ apiGroups: [group], resources: plurals, verbs: ['list', 'watch'] });
    rules.push({ apiGroups: [group], resources: plurals.map((p) => `${p}/status`), verbs: ['patch', 'update'] });
  }
  // SMI access policy is read only: its CRDs belong to the SMI project, ward installs none.
  rules.push({ apiGroups: [SMI_ACCESS_GROUP], resources: ['traffictargets'], verbs: ['list', 'watch'] });
  rules.push({ apiGroups: [SMI_SPECS_GROUP], resources: ['httproutegroups', 'tcproutes', 'udproutes'], verbs: ['list', 'watch'] });
  rules.push({ apiGroups: ['authentication.k8s.io'], resources: ['tokenreviews'], verbs: ['create'] });
  return rules;
}

/** Rules in the control-plane namespace: the leader Lease, and its own Service's ClusterIP. */
function namespaceRules(): Record<string, unknown>[] {
  return [
    { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] },
    { apiGroups: [''], resources: ['services'], resourceNames: [INSTALL_NAMES.controller], verbs: ['get'] },
  ];
}

/** The `ward controller` arguments of the Deployment. */
export function controllerArgs(opts: Pick<InstallOptions, 'namespace' | 'trustDomain' | 'image' | 'imagePullPolicy'>): string[] {
  const any = (port: number) => `0.0.0.0:${port}`;
  return [
    'controller',
    '--kubernetes',
    `--control-plane-namespace=${opts.namespace}`,
    `--trust-domain=${opts.trustDomain}`,
    `--identity-dir=${CONTROLLER_PATHS.identityDir}`,
    `--webhook-cert=${CONTROLLER_PATHS.webhookDir}/tls.crt`,
    `--webhook-key=${CONTROLLER_PATHS.webhookDir}/tls.key`,
    `--webhook-addr=${any(CONTROLLER_PORTS.webhook)}`,
    // Injected pods run the proxy from the controller's own image.
    `--proxy-image=${opts.image}`,
    `--proxy-image-pull-policy=${opts.imagePullPolicy}`,
    `--policy-addr=${any(CONTROLLER_PORTS.policy)}`,
    `--identity-addr=${any(CONTROLLER_PORTS.identity)}`,
    `--destination-addr=${any(CONTROLLER_PORTS.destination)}`,
    // On the Service for probes and Prometheus: the controller answers /live, /ready, /metrics to
    // any peer and its JSON API, tap and dashboard only through `kubectl port-forward` (loopback).
    `--admin-addr=${any(CONTROLLER_PORTS.admin)}`,
  ];
}

function controllerDeployment(opts: InstallOptions): KubeObject {
  const ns = opts.namespace;
  // Not `linkerd.io/control-plane-ns`: on a pod that label means "meshed", and the controller runs
  // without a proxy, so meshed clients' proxies would dial it with mesh TLS and be reset.
  const podLabels = { ...CONTROLLER_SELECTOR, ...WARD_PART_OF_LABEL, 'linkerd.io/control-plane-component': 'controller' };
  const probe = (path: string, failureThreshold: number) => ({ httpGet: { path, port: CONTROLLER_PORTS.admin }, periodSeconds: 10, failureThreshold });
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: INSTALL_NAMES.controller, namespace: ns, labels: labelsOf(ns) },
    spec: {
      replicas: opts.replicas,
      selector: { matchLabels: CONTROLLER_SELECTOR },
      template: {
        metadata: { labels: podLabels },
        spec: {
          serviceAccountName: INSTALL_NAMES.controller,
          automountServiceAccountToken: true,
          securityContext: {
            runAsNonRoot: true,
            runAsUser: CONTROLLER_UID,
            runAsGroup: CONTROLLER_UID,
            fsGroup: CONTROLLER_UID,
            seccompProfile: { type: 'RuntimeDefault' },
          },
          // Spread replicas over nodes when there are several; a single node still runs them all.
          affinity: {
            podAntiAffinity: {
              preferredDuringSchedulingIgnoredDuringExecution: [
                { weight: 100, podAffinityTerm: { labelSelector: { matchLabels: CONTROLLER_SELECTOR }, topologyKey: 'kubernetes.io/hostname' } },
              ],
            },
          },
          containers: [
            {
              name: 'controller',
              image: opts.image,
              imagePullPolicy: opts.imagePullPolicy,
              args: controllerArgs(opts),
              env: [
                { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
                { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
              ],
              ports: (['policy', 'identity', 'destination', 'admin', 'webhook'] as const).map((name) => ({
                name,
                containerPort: CONTROLLER_PORTS[name],
                protocol: 'TCP',
              })),
              readinessProbe: probe('/ready', 3),
              livenessProbe: { ...probe('/live', 3), initialDelaySeconds: 10 },
              resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '512Mi' } },
              securityContext: {
                allowPrivilegeEscalation: false,
                readOnlyRootFilesystem: true,
                runAsNonRoot: true,
                capabilities: { drop: ['ALL'] },
              },
              volumeMounts: [
                { name: 'identity', mountPath: CONTROLLER_PATHS.identityDir, readOnly: true },
                { name: 'webhook-tls', mountPath: CONTROLLER_PATHS.webhookDir, readOnly: true },
                { name: 'tmp', mountPath: '/tmp' },
              ],
            },
          ],
          volumes: [
            {
              name: 'identity',
              projected: {
                defaultMode: 0o440,
                sources: [
                  {
                    secret: {
                      name: INSTALL_NAMES.issuerSecret,
                      items: [
                        { key: 'crt.pem', path: IDENTITY_FILES.issuerCert },
                        { key: 'key.pem', path: IDENTITY_FILES.issuerKey },
                      ],
                    },
                  },
                  { configMap: { name: INSTALL_NAMES.trustRoots, items: [{ key: 'ca-bundle.crt', path: IDENTITY_FILES.anchorCert }] } },
                ],
              },
            },
            { name: 'webhook-tls', secret: { secretName: INSTALL_NAMES.webhookSecret, defaultMode: 0o440 } },
            { name: 'tmp', emptyDir: { sizeLimit: '64Mi' } },
          ],
        },
      },
    },
  };
}

const webhookClient = (ns: string, path: string, caBundle: string) => ({
  service: { name: INSTALL_NAMES.webhookService, namespace: ns, path, port: 443 },
  caBundle,
});
const notControlPlane = (ns: string) => ({ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: [ns] });

function validatingWebhook(ns: string, caBundle: string): KubeObject {
  const rules = [...policyResources()].map(([group, plurals]) => ({
    apiGroups: [group],
    apiVersions: [...new Set(CRD_KINDS.filter((k) => k.group === group).flatMap((k) => k.versions.map((v) => v.name)))].sort(),
    operations: ['CREATE', 'UPDATE'],
    resources: plurals,
    scope: 'Namespaced',
  }));
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingWebhookConfiguration',
    metadata: { name: INSTALL_NAMES.validatingWebhook, labels: labelsOf(ns) },
    webhooks: [
      {
        name: 'policy-validator.ward.io',
        clientConfig: webhookClient(ns, '/validate', caBundle),
        rules,
        failurePolicy: 'Fail',
        matchPolicy: 'Equivalent',
        namespaceSelector: { matchExpressions: [notControlPlane(ns)] },
        sideEffects: 'None',
        admissionReviewVersions: ['v1'],
        timeoutSeconds: 10,
      },
    ],
  };
}

function mutatingWebhook(ns: string, caBundle: string): KubeObject {
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: INSTALL_NAMES.mutatingWebhook, labels: labelsOf(ns) },
    webhooks: [
      {
        name: 'proxy-injector.ward.io',
        clientConfig: webhookClient(ns, '/inject', caBundle),
        rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'], scope: 'Namespaced' }],
        // A pod must still start when the injector is down (it runs unmeshed), as upstream.
        failurePolicy: 'Ignore',
        namespaceSelector: {
          matchExpressions: [notControlPlane(ns), { key: 'config.linkerd.io/admission-webhooks', operator: 'NotIn', values: ['disabled'] }],
        },
        sideEffects: 'None',
        admissionReviewVersions: ['v1'],
        reinvocationPolicy: 'Never',
        timeoutSeconds: 10,
      },
    ],
  };
}

/**
 * What `ward uninstall` prints: the kinds and names of every installed object, webhooks first
 * (so none blocks the deletions after it), CRDs last (deleting them deletes every policy object).
 */
export function uninstallObjects(opts: UninstallOptions): KubeObject[] {
  const placeholder: IdentityPems & WebhookPems = { anchorsPem: '', issuerCertPem: '', issuerKeyPem: '', caPem: '', certPem: '', keyPem: '' };
  const all = installObjects({
    namespace: opts.namespace,
    image: '',
    imagePullPolicy: 'IfNotPresent',
    replicas: 1,
    trustDomain: DEFAULT_TRUST_DOMAIN,
    gatewayApiCrds: opts.gatewayApiCrds,
    identity: placeholder,
    webhook: placeholder,
  });
  const rank = (o: KubeObject) =>
    o.kind.endsWith('WebhookConfiguration')
      ? 0
      : o.kind === 'Namespace'
        ? 3
        : o.kind === 'CustomResourceDefinition'
          ? 4
          : o.metadata.namespace === undefined
            ? 1
            : 2;
  return all
    .map((o, i) => ({ o, i }))
    .sort((a, b) => rank(a.o) - rank(b.o) || a.i - b.i)
    .map(({ o }) => ({
      apiVersion: o.apiVersion,
      kind: o.kind,
      metadata: { name: o.metadata.name, ...(o.metadata.namespace !== undefined ? { namespace: o.metadata.namespace } : {}) },
    }));
}

/** YAML documents (`---` separated) or a JSON `v1 List`. */
export function formatObjects(objects: readonly KubeObject[], format: 'yaml' | 'json'): string {
  if (format === 'json') return `${JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }, null, 2)}\n`;
  return objects.map((o) => `---\n${stringify(o, { lineWidth: 0 })}`).join('');
}

/** Trust anchor and issuer, generated with `ward identity init`'s code (the anchor key is discarded, as `linkerd install` does). */
export async function generateIdentity(trustDomain: string): Promise<IdentityPems> {
  return withTempDir(async (dir) => {
    const res = await initIdentity({ outDir: dir, trustDomain });
    if (!res.ok) throw new UsageError(res.diagnostics.map((d) => d.message).join('; '));
    const read = (f: string) => readFileSync(join(dir, f), 'utf8');
    return { anchorsPem: read(IDENTITY_FILES.anchorCert), issuerCertPem: read(IDENTITY_FILES.issuerCert), issuerKeyPem: read(IDENTITY_FILES.issuerKey) };
  });
}

/** A webhook CA and a serving certificate for `ward-webhook.<ns>.svc` (ECDSA P-256, one year). */
export async function generateWebhookCredentials(namespace: string): Promise<WebhookPems> {
  return withTempDir(async (dir) => {
    const res = await initIdentity({ outDir: dir, trustDomain: `${INSTALL_NAMES.webhookService}.${namespace}.svc` });
    if (!res.ok) throw new UsageError(res.diagnostics.map((d) => d.message).join('; '));
    const issuer = await loadIssuer(dir);
    if (!issuer.ok) throw new UsageError(issuer.diagnostics.map((d) => d.message).join('; '));
    const ca = new CertificateAuthority({
      issuer: issuer.value,
      // Only issueServerCertificate is used; no workload ever asks this CA for a certificate.
      authenticator: { authenticate: () => Promise.resolve({ ok: false, message: 'the webhook CA issues no workload certificates' }) },
      trustDomain: 'cluster.local',
      controlPlaneNamespace: namespace,
      issuanceLifetimeMs: DEFAULT_CA_TTL_MS,
    });
    const cred = await ca.issueServerCertificate(webhookDnsNames(namespace));
    return { caPem: issuer.value.anchorsPem, certPem: cred.certPem + cred.chainPem, keyPem: cred.keyPem };
  });
}

async function withTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'ward-install-'));
  try {
    return await fn(join(dir, 'out'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Reads `--identity-*` files and validates them as an issuer; problems are diagnostics. */
export async function identityFromFiles(files: {
  anchors: string;
  cert: string;
  key: string;
}): Promise<{ ok: true; value: IdentityPems } | { ok: false; diagnostics: readonly Diagnostic[] }> {
  const read = (path: string, flag: string) => {
    try {
      return readFileSync(path, 'utf8');
    } catch (e) {
      throw new UsageError(`cannot read ${flag} ${path}: ${errorMessage(e)}`);
    }
  };
  const material = {
    anchorsPem: read(files.anchors, '--identity-trust-anchors-file'),
    certPem: read(files.cert, '--identity-issuer-certificate-file'),
    keyPem: read(files.key, '--identity-issuer-key-file'),
    files,
  };
  const res = await validateIssuer(material);
  if (!res.ok) return { ok: false, diagnostics: res.diagnostics };
  return { ok: true, value: { anchorsPem: material.anchorsPem, issuerCertPem: material.certPem, issuerKeyPem: material.keyPem } };
}

/** Flags of `ward install`. */
export interface InstallFlags {
  readonly controlPlaneNamespace: string;
  readonly image?: string | undefined;
  readonly imagePullPolicy: string;
  readonly replicas: string;
  readonly trustDomain?: string | undefined;
  readonly crds?: boolean | undefined;
  readonly skipGatewayApiCrds?: boolean | undefined;
  readonly identityTrustAnchorsFile?: string | undefined;
  readonly identityIssuerCertificateFile?: string | undefined;
  readonly identityIssuerKeyFile?: string | undefined;
  readonly output: string;
}

function checkNamespace(ns: string): void {
  if (!isDns1123Label(ns)) throw new UsageError(`invalid --control-plane-namespace "${ns}": want a DNS-1123 label such as linkerd`);
}

/** Runs `ward install`. */
export async function runInstall(flags: InstallFlags, io: CliIo): Promise<number> {
  const format = flags.output as 'yaml' | 'json';
  if (flags.crds === true) {
    io.out(formatObjects(installCrdObjects(flags.skipGatewayApiCrds !== true), format));
    return EXIT.ok;
  }
  const namespace = flags.controlPlaneNamespace;
  checkNamespace(namespace);
  const replicas = Number(flags.replicas);
  if (!/^\d+$/.test(flags.replicas) || !Number.isSafeInteger(replicas) || replicas < 1)
    throw new UsageError(`invalid --replicas "${flags.replicas}": want a positive integer`);
  const trustDomain = flags.trustDomain ?? DEFAULT_TRUST_DOMAIN;
  if (!isDnsName(trustDomain)) throw new UsageError(`invalid --trust-domain "${trustDomain}": want a lower-case DNS name such as cluster.local`);
  const image = flags.image ?? defaultImage();
  if (image === '' || /\s/.test(image)) throw new UsageError(`invalid --image "${image}"`);

  const files = [flags.identityTrustAnchorsFile, flags.identityIssuerCertificateFile, flags.identityIssuerKeyFile];
  let identity: IdentityPems;
  if (files.every((f) => f === undefined)) identity = await generateIdentity(trustDomain);
  else if (files.some((f) => f === undefined)) {
    throw new UsageError('give all of --identity-trust-anchors-file, --identity-issuer-certificate-file and --identity-issuer-key-file, or none');
  } else {
    const res = await identityFromFiles({ anchors: files[0] as string, cert: files[1] as string, key: files[2] as string });
    if (!res.ok) {
      io.err(formatDiagnostics(res.diagnostics, palette(io.color)));
      return EXIT.usage;
    }
    identity = res.value;
  }
  const objects = installObjects({
    namespace,
    image,
    imagePullPolicy: flags.imagePullPolicy as InstallOptions['imagePullPolicy'],
    replicas,
    trustDomain,
    gatewayApiCrds: flags.skipGatewayApiCrds !== true,
    identity,
    webhook: await generateWebhookCredentials(namespace),
  });
  io.out(formatObjects(objects, format));
  return EXIT.ok;
}

/** Runs `ward uninstall`. */
export function runUninstall(flags: { controlPlaneNamespace: string; skipGatewayApiCrds?: boolean | undefined; output: string }, io: CliIo): number {
  checkNamespace(flags.controlPlaneNamespace);
  io.out(
    formatObjects(
      uninstallObjects({ namespace: flags.controlPlaneNamespace, gatewayApiCrds: flags.skipGatewayApiCrds !== true }),
      flags.output as 'yaml' | 'json',
    ),
  );
  return EXIT.ok;
}

const outputOption = () => new Option('-o, --output <format>', 'output format').choices(['yaml', 'json']).default('yaml');
const skipGatewayOption = () =>
  new Option('--skip-gateway-api-crds', 'leave out the Gateway API HTTPRoute and GRPCRoute CRDs (when the Gateway API is installed separately)');

/** Registers `ward install` and `ward uninstall`. */
export function registerInstallCommands(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('install')
    .description('print the Kubernetes objects of ward\'s control plane, for "ward install | kubectl apply -f -"')
    .option('--control-plane-namespace <ns>', 'namespace of the control plane', 'linkerd')
    .option('--image <ref>', 'image of the controller (default localhost/ward:<version>, what npm run image builds)')
    .addOption(new Option('--image-pull-policy <policy>', 'image pull policy').choices(['Always', 'IfNotPresent', 'Never']).default('IfNotPresent'))
    .option('--replicas <n>', 'controller replicas', '2')
    .option('--trust-domain <domain>', `identity trust domain (default ${DEFAULT_TRUST_DOMAIN})`)
    .option('--crds', 'print only the CustomResourceDefinitions')
    .addOption(skipGatewayOption())
    .option('--identity-trust-anchors-file <path>', 'trust anchors (PEM) instead of generated ones; needs the issuer flags too')
    .option('--identity-issuer-certificate-file <path>', 'issuer certificate (PEM), signed by the trust anchors')
    .option('--identity-issuer-key-file <path>', 'issuer private key (PEM)')
    .addOption(outputOption())
    .action(async (opts) => {
      result.status = await runInstall(opts, io);
    });

  program
    .command('uninstall')
    .description('print the kinds and names of what ward install creates, for "ward uninstall | kubectl delete -f -"')
    .option('--control-plane-namespace <ns>', 'namespace of the control plane', 'linkerd')
    .addOption(skipGatewayOption())
    .addOption(outputOption())
    .action((opts) => {
      result.status = runUninstall(opts, io);
    });
}
