/**
 * The one catalog of diagnostics: stable codes, severities, message templates and hints
 * (the fastify `createError` idea). Every edge renders a `Diagnostic` its own way: the CLI as
 * `file:line:col: error POL012 message`, the webhook as a denial, the controller as a log line.
 * Codes never change meaning; new problems get new codes.
 */

/** How bad a diagnostic is. Errors make `ward check` fail; warnings and infos do not. */
export type Severity = 'error' | 'warning' | 'info';

/** Position of a value in an input file (1-based line and column). */
export interface SourcePos {
  readonly file: string;
  readonly line: number;
  readonly col: number;
}

/** Identifies the resource a diagnostic is about. */
export interface ResourceRef {
  readonly kind: string;
  readonly namespace?: string | undefined;
  readonly name: string;
}

/** One problem found in input, as data. */
export interface Diagnostic {
  readonly code: string;
  readonly severity: Severity;
  readonly message: string;
  readonly resource?: ResourceRef | undefined;
  /** Path of the offending value inside the resource, e.g. `['spec', 'port']`. */
  readonly path?: readonly (string | number)[] | undefined;
  readonly source?: SourcePos | undefined;
  readonly hint?: string | undefined;
}

interface CatalogEntry {
  readonly severity: Severity;
  /** Template with `{name}` placeholders. */
  readonly message: string;
  readonly hint?: string;
}

/** Every diagnostic ward emits. */
export const CATALOG = {
  // --- input and YAML (POL00x) ---
  POL001: { severity: 'error', message: 'YAML syntax error: {detail}' },
  POL002: {
    severity: 'error',
    message: 'document is not a Kubernetes object: {detail}',
    hint: 'every document needs apiVersion, kind and metadata.name',
  },
  POL003: { severity: 'error', message: 'cannot read {path}: {detail}' },
  POL004: {
    severity: 'info',
    message: '{kind} ({apiVersion}) is not a kind ward uses; ignored',
  },
  POL005: {
    severity: 'error',
    message: '{kind} does not exist in {apiVersion}',
    hint: 'supported versions: {versions}',
  },
  POL006: {
    severity: 'warning',
    message: '{kind} {namespace}/{name} is defined more than once; the last definition ({where}) is used',
  },
  POL007: { severity: 'error', message: 'no input: {detail}' },
  // --- schema (POL01x) ---
  POL010: { severity: 'error', message: '{field}: {detail}' },
  POL011: {
    severity: 'warning',
    message: '{field}: unknown field; the API server would drop it',
    hint: 'check the spelling against the {kind} {apiVersion} schema',
  },
  POL012: { severity: 'error', message: '{field}: required field is missing' },
  // --- Server admission (POL02x) ---
  POL020: {
    severity: 'error',
    message: 'spec.accessPolicy "{value}" is not a default policy',
    hint: 'use one of all-unauthenticated, all-authenticated, cluster-unauthenticated, cluster-authenticated, deny, audit',
  },
  POL021: {
    severity: 'error',
    message: 'spec.proxyProtocol "{value}" is not a protocol',
    hint: 'use one of unknown, HTTP/1, HTTP/2, gRPC, opaque, TLS (exact spelling)',
  },
  POL022: { severity: 'error', message: 'spec.port {value} is out of range', hint: 'a port number is 1-65535' },
  POL023: {
    severity: 'error',
    message: 'exactly one of spec.podSelector and spec.externalWorkloadSelector must be set',
  },
  POL024: {
    severity: 'error',
    message: 'spec.podSelector in {apiVersion} needs exactly one of matchLabels and matchExpressions',
  },
  POL025: {
    severity: 'error',
    message: 'port name "{value}" is not a valid port name',
    hint: 'a port name is 1-15 lower-case letters, digits and dashes, with at least one letter',
  },
  POL026: {
    severity: 'error',
    message: 'Server port {value} in namespace {namespace} is already defined by Server {other} selecting the same pods',
    hint: 'Linkerd 2.17 and older reject overlapping Servers; from 2.18 the oldest Server wins',
  },
  // --- ServerAuthorization admission (POL03x) ---
  POL030: {
    severity: 'error',
    message: 'spec.client.unauthenticated cannot be combined with spec.client.meshTLS',
    hint: 'remove meshTLS to admit everyone, or unauthenticated to require mesh TLS',
  },
  POL031: {
    severity: 'error',
    message: 'spec.client.meshTLS.unauthenticatedTLS cannot be combined with identities or serviceAccounts',
  },
  POL032: { severity: 'error', message: '"{value}" is not a CIDR or IP address' },
  POL033: {
    severity: 'error',
    message: 'except {except} is not strictly inside cidr {cidr}',
    hint: 'an except must lie inside its cidr and be smaller than it',
  },
  POL034: { severity: 'error', message: 'exactly one of spec.server.name and spec.server.selector must be set' },
  // --- AuthorizationPolicy admission (POL04x) ---
  POL040: {
    severity: 'error',
    message: 'targetRef {target} is not a supported target',
    hint: 'target a policy.linkerd.io Server, the Namespace, or an HTTPRoute/GRPCRoute',
  },
  POL041: {
    severity: 'error',
    message: 'a Namespace targetRef must name the policy\'s own namespace "{namespace}", not "{value}"',
  },
  POL042: {
    severity: 'error',
    message: 'requiredAuthenticationRefs: {target} is not a supported authentication',
    hint: 'use MeshTLSAuthentication, NetworkAuthentication (policy.linkerd.io) or ServiceAccount',
  },
  POL043: { severity: 'error', message: 'requiredAuthenticationRefs lists more than one {kind}' },
  POL044: {
    severity: 'error',
    message: 'requiredAuthenticationRefs cannot list both a MeshTLSAuthentication and a ServiceAccount',
    hint: "put the ServiceAccount into the MeshTLSAuthentication's identityRefs",
  },
  POL045: {
    severity: 'error',
    message: 'spec.requiredAuthenticationRefs is required (it may be an empty list)',
  },
  // --- MeshTLS / Network authentication admission (POL05x, POL06x) ---
  POL050: {
    severity: 'error',
    message: 'identity "{value}" is not a valid identity',
    hint: 'lower-case DNS-like names, `*` only as the whole first label, or spiffe://<trust-domain>/<path>',
  },
  POL051: { severity: 'error', message: 'identityRefs kind {value} is not supported', hint: 'use ServiceAccount or Namespace' },
  POL052: { severity: 'error', message: 'a Namespace identityRef cannot set namespace' },
  POL053: { severity: 'error', message: 'exactly one of spec.identities and spec.identityRefs must be set' },
  POL054: { severity: 'error', message: 'identityRefs entry has no name', hint: 'the controller requires name' },
  POL060: { severity: 'error', message: 'spec.networks must list at least one network' },
  // --- routes admission (POL07x) ---
  POL070: { severity: 'error', message: 'path "{value}" must be absolute (start with /)' },
  POL071: { severity: 'error', message: '{what} "{value}" is not valid' },
  POL072: { severity: 'error', message: 'regular expression "{value}" does not compile: {detail}' },
  POL073: { severity: 'error', message: 'timeouts: {detail}' },
  POL074: { severity: 'error', message: 'GRPCRoute method match type RegularExpression is not supported' },
  POL075: { severity: 'error', message: 'backendRef to Service {value} needs a port' },
  // --- lint: traps (POL1xx) ---
  POL100: {
    severity: 'warning',
    message: 'spec.port "{value}" is quoted, so it is a port name, not the number {value}',
    hint: 'write port: {value} without quotes to bind the port number',
  },
  POL101: {
    severity: 'warning',
    message: '{kind} {name} grants nothing: {detail}',
    hint: '{fix}',
  },
  POL102: {
    severity: 'warning',
    message: '{what} {target} does not resolve to anything{consequence}',
    hint: 'create {target} in namespace {namespace}, or fix the reference',
  },
  POL103: {
    severity: 'warning',
    message: 'Server {name} selects no pod',
    hint: 'check spec.podSelector against the labels of the pods in namespace {namespace}',
  },
  POL104: {
    severity: 'warning',
    message: 'Server {name} port "{port}" is not a container port name of pod {pod}, so it binds nothing there',
    hint: 'name a declared containerPort, or give the port number',
  },
  POL105: {
    severity: 'warning',
    message: 'Servers {winner} and {loser} both select pod {pod} port {port}; {winner} wins ({why})',
    hint: 'give each port one Server, or narrow the podSelectors',
  },
  POL106: {
    severity: 'warning',
    message: '{probe} probe {method} {path} on port {port} of pod {pod} would be denied ({why})',
    hint: '{fix}',
  },
  POL107: {
    severity: 'warning',
    message: '{routeKind} {route} is attached to Server {server} whose protocol {protocol} never uses it',
    hint: '{fix}',
  },
  POL108: {
    severity: 'warning',
    message: 'namespace {namespace} sets {annotation}={nsValue} but pod {pod} was created with {podValue}; the change reaches it only when it is recreated',
    hint: 'restart the workload (kubectl rollout restart) to pick up the namespace annotation',
  },
  POL109: {
    severity: 'warning',
    message: 'annotation {annotation}="{value}" is ignored: {detail}',
    hint: '{fix}',
  },
  POL110: {
    severity: 'warning',
    message: '{routeKind} {route} is not accepted by Server {server}: {reason}',
    hint: '{fix}',
  },
  POL111: {
    severity: 'warning',
    message: '{kind} {name} is ignored by inbound policy: {detail}',
  },
  POL112: {
    severity: 'info',
    message: 'pod {pod} is not meshed (no linkerd.io/control-plane-ns label); no inbound policy applies to it',
  },
  POL113: {
    severity: 'info',
    message: 'Server {name} port {port} is not declared by pod {pod}; the Server still binds it',
  },
  POL114: {
    severity: 'warning',
    message: 'identity "{identity}" names {what}, which is not among the loaded resources{suggestion}',
    hint: 'a mesh identity is <serviceaccount>.<namespace>.serviceaccount.identity.{controlPlane}.{trustDomain}; {fix}',
  },
  POL115: {
    severity: 'warning',
    message: 'identity "{identity}" is not a mesh identity of this cluster: {detail}',
    hint: '{fix}',
  },
  POL116: {
    severity: 'warning',
    message: 'serviceAccounts entry "{name}" has no namespace, so it means ServiceAccount {namespace}/{name}, which is not among the loaded resources{detail}',
    hint: '{fix}',
  },
  // --- SMI access policy (SMI0xx): TrafficTarget, HTTPRouteGroup, TCPRoute, UDPRoute ---
  SMI001: { severity: 'error', message: '{field} "{value}" is not usable: {detail}', hint: 'SMI regexes are RE2 and must read the same in JavaScript: {fix}' },
  SMI002: {
    severity: 'error',
    message: 'rule {rule} names {kind} {name}, which does not exist in namespace {namespace}; the rule admits nothing',
    hint: "create {kind} {name} in namespace {namespace} (rules name route objects of the TrafficTarget's own namespace)",
  },
  SMI003: {
    severity: 'error',
    message: 'rule {rule} names match "{match}", which HTTPRouteGroup {name} does not define; that match admits nothing',
    hint: 'name one of: {matches} (omit matches to use them all)',
  },
  SMI004: {
    severity: 'error',
    message: '{role} kind {value} is not ServiceAccount; ward identifies callers only by ServiceAccount, so this {role} is ignored',
    hint: 'write kind: ServiceAccount',
  },
  SMI005: {
    severity: 'error',
    message: "destination namespace {value} is not the TrafficTarget's namespace {namespace}; the TrafficTarget is ignored (as OSM ignores it)",
    hint: 'create the TrafficTarget in namespace {value}, or drop destination.namespace',
  },
  SMI006: {
    severity: 'warning',
    message: 'destination ServiceAccount {namespace}/{name} has no meshed pod; the TrafficTarget governs nothing yet',
    hint: 'check the name against spec.serviceAccountName of the pods in namespace {namespace}',
  },
  SMI007: {
    severity: 'warning',
    message: 'Server {server} and TrafficTarget {name} both govern pod {pod} port {port}; Server {server} wins, so the TrafficTarget has no effect there',
    hint: 'a Linkerd Server takes precedence over SMI on its port: remove the Server, or narrow the TrafficTarget to other ports',
  },
  SMI008: {
    severity: 'warning',
    message: 'TrafficTarget {name} has only HTTP rules for port {port} of pod {pod}, which is opaque; the proxy sees no requests there, so it admits nothing',
    hint: 'add a TCPRoute rule to admit the whole port, or take the port out of config.linkerd.io/opaque-ports',
  },
  SMI009: {
    severity: 'warning',
    message: 'rule {rule} names UDPRoute {name}, which ward cannot enforce: its proxy carries TCP only, so the rule admits nothing',
    hint: 'UDP traffic is not intercepted by the mesh; use a TCPRoute for TCP ports',
  },
  SMI010: {
    severity: 'warning',
    message: 'pathRegex "{value}" must match the whole path (as OSM matches it), so it admits {value} alone, not the paths below it',
    hint: 'write "{value}(/.*)?" or "{value}.*" for the paths below {value}',
  },
  SMI011: { severity: 'warning', message: 'TrafficTarget {name} admits nothing: {detail}', hint: '{fix}' },
  SMI012: { severity: 'error', message: 'match name "{value}" is used twice; TrafficTarget rules name matches by name', hint: 'give each match a unique name' },
  SMI013: {
    severity: 'warning',
    message:
      'on pod {pod} port {port}, {request} matches {first} and {second}; the proxy picks {first} alone, so sources only {second} admits are denied there',
    hint: 'make the matches of different TrafficTargets disjoint, or list the same sources in both',
  },
  SMI014: {
    severity: 'warning',
    message:
      '{field} "{value}" repeats a group that itself repeats; RE2 runs it in linear time, but ward\'s JavaScript engine backtracks, so a hostile request can make it slow',
    hint: 'rewrite it without nested repetition, e.g. (a+)+ as a+',
  },
  // --- CLI usage (POL2xx) ---
  POL200: { severity: 'error', message: '{detail}' },
  POL201: { severity: 'error', message: 'test suite: {detail}' },
  // --- local mode, `ward up` (LOC0xx) ---
  LOC001: {
    severity: 'error',
    message: 'container {container} of pod {pod} has no command',
    hint: "local mode runs a container's command/args; image is ignored",
  },
  LOC002: {
    severity: 'warning',
    message: 'env {name} of container {container} in pod {pod}: {detail}; local mode leaves it unset',
    hint: 'local mode supports value and valueFrom.fieldRef metadata.name, metadata.namespace, spec.serviceAccountName, status.podIP, status.hostIP',
  },
  LOC003: {
    severity: 'error',
    message: 'container {container} of pod {pod} declares port {port}, which its local proxy uses',
    hint: 'the proxy listens on 4140 (outbound), 4143 (mesh) and 4191 (admin) at the pod address; use another port',
  },
  LOC004: {
    severity: 'error',
    message: 'workingDir of container {container} in pod {pod} is not a directory: {dir}',
    hint: 'local mode resolves workingDir relative to the directory given to ward up',
  },
  LOC005: {
    severity: 'error',
    message: '{probe} probe of container {container} in pod {pod} names port {port}, which the container does not declare',
    hint: "give the port number, or the name of one of the container's ports (ports[].name)",
  },
  // --- identity material: trust anchors, issuer, keys (ID0xx) ---
  ID001: {
    severity: 'error',
    message: 'cannot read {file}: {detail}',
    hint: 'create the identity material with `ward identity init --out DIR`',
  },
  ID002: {
    severity: 'error',
    message: '{file}: {detail}',
    hint: 'the file must hold PEM "CERTIFICATE" blocks',
  },
  ID003: {
    severity: 'error',
    message: '{file}: {detail}',
    hint: 'the key must be a PEM private key (PKCS#8 "PRIVATE KEY"), ECDSA P-256',
  },
  ID004: {
    severity: 'error',
    message: '{file}: the issuer certificate {subject} is not a CA: {detail}',
    hint: 'the issuer must be an intermediate CA (basicConstraints CA:TRUE, keyUsage keyCertSign)',
  },
  ID005: {
    severity: 'error',
    message: '{keyFile} does not match the certificate in {file} ({subject})',
    hint: 'the issuer certificate and key are a pair: replace both together',
  },
  ID006: {
    severity: 'error',
    message: '{file}: the issuer certificate {subject} does not chain to the trust anchors in {anchorFile}: {detail}',
    hint: 'sign the issuer with a trust anchor key, or add its root to {anchorFile}',
  },
  ID007: {
    severity: 'error',
    message: '{file}: certificate {subject} expired at {notAfter}',
    hint: 'issue a new one (`ward identity init --force` for a fresh set)',
  },
  ID008: {
    severity: 'error',
    message: '{file}: certificate {subject} is not valid before {notBefore}',
    hint: 'check the clock of this machine',
  },
  ID009: {
    severity: 'error',
    message: '{file} already exists; refusing to overwrite it',
    hint: 'pass --force to replace the identity material',
  },
  ID010: {
    severity: 'error',
    message: '{keyFile}: the issuer key is {keyType}; ward signs certificates with ECDSA (P-256 or P-384)',
    hint: 'create the issuer with an ECDSA P-256 key',
  },
  ID011: {
    severity: 'error',
    message: '{file}: trust anchor {subject} is not a CA certificate',
    hint: 'trust anchors are self-signed root CAs (basicConstraints CA:TRUE)',
  },
  ID012: {
    severity: 'error',
    message: 'invalid identity option {option}: {detail}',
  },
} as const satisfies Record<string, CatalogEntry>;

/** A code from the catalog. */
export type DiagnosticCode = keyof typeof CATALOG;

function fill(template: string, params: Readonly<Record<string, string | number>>): string {
  return template.replace(/\{(\w+)\}/g, (whole, key: string) => {
    const v = params[key];
    return v === undefined ? whole : String(v);
  });
}

/** Extra facts attached to a diagnostic. */
export interface DiagnosticContext {
  readonly resource?: ResourceRef | undefined;
  readonly path?: readonly (string | number)[] | undefined;
  readonly source?: SourcePos | undefined;
  readonly severity?: Severity | undefined;
}

/** Builds a diagnostic from the catalog, filling the message and hint templates. */
export function diagnostic(code: DiagnosticCode, params: Readonly<Record<string, string | number>> = {}, ctx: DiagnosticContext = {}): Diagnostic {
  const entry: CatalogEntry = CATALOG[code];
  const d: Diagnostic = {
    code,
    severity: ctx.severity ?? entry.severity,
    message: fill(entry.message, params),
    ...(ctx.resource !== undefined ? { resource: ctx.resource } : {}),
    ...(ctx.path !== undefined ? { path: ctx.path } : {}),
    ...(ctx.source !== undefined ? { source: ctx.source } : {}),
    ...(entry.hint !== undefined ? { hint: fill(entry.hint, params) } : {}),
  };
  return d;
}

/** Stable order for output: file, line, column, code. */
export function compareDiagnostics(a: Diagnostic, b: Diagnostic): number {
  const fa = a.source?.file ?? '';
  const fb = b.source?.file ?? '';
  if (fa !== fb) return fa < fb ? -1 : 1;
  const la = a.source?.line ?? 0;
  const lb = b.source?.line ?? 0;
  if (la !== lb) return la - lb;
  const ca = a.source?.col ?? 0;
  const cb = b.source?.col ?? 0;
  if (ca !== cb) return ca - cb;
  return a.code < b.code ? -1 : a.code > b.code ? 1 : 0;
}

/** Result of a parser or validator: a value, or every problem found. */
export type Result<T> =
  | { readonly ok: true; readonly value: T; readonly diagnostics: readonly Diagnostic[] }
  | { readonly ok: false; readonly diagnostics: readonly Diagnostic[] };
