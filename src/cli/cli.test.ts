import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { parse } from 'yaml';
import { bufferIo } from './io.js';
import { main } from './main.js';

// === fixtures ===

const dir = mkdtempSync(join(tmpdir(), 'ward-cli-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Writes a file into the temp dir and returns its path. */
function write(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** Runs `ward` in-process. */
async function ward(args: string[], stdin = '') {
  const io = bufferIo(stdin);
  const status = await main(args, io);
  return { status, stdout: io.stdout, stderr: io.stderr };
}

/** The documents of the main fixture, by name; joined with `---`. */
const DOCS = {
  namespace: `apiVersion: v1
kind: Namespace
metadata:
  name: app
  annotations: {linkerd.io/inject: enabled}
`,
  web: `apiVersion: apps/v1
kind: Deployment
metadata: {namespace: app, name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      serviceAccountName: web
      containers:
      - name: app
        ports: [{name: http, containerPort: 8080}, {name: mysql, containerPort: 3306}, {name: metrics, containerPort: 9100}]
        readinessProbe: {httpGet: {port: 8080, path: /ready}}
`,
  grpc: `apiVersion: apps/v1
kind: Deployment
metadata: {namespace: app, name: grpc}
spec:
  selector: {matchLabels: {app: grpc}}
  template:
    metadata: {labels: {app: grpc}}
    spec:
      containers:
      - name: app
        ports: [{name: grpc, containerPort: 9090}]
`,
  webServer: `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {namespace: app, name: web}
spec:
  podSelector: {matchLabels: {app: web}}
  port: http
  proxyProtocol: HTTP/1
`,
  metricsServer: `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {namespace: app, name: metrics}
spec:
  podSelector: {matchLabels: {app: web}}
  port: metrics
  accessPolicy: audit
`,
  grpcServer: `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {namespace: app, name: grpc}
spec:
  podSelector: {matchLabels: {app: grpc}}
  port: grpc
  proxyProtocol: gRPC
`,
  apiRoute: `apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {namespace: app, name: web-api}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web}]
  rules: [{matches: [{path: {type: PathPrefix, value: /api}}]}]
`,
  probeRoute: `apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {namespace: app, name: web-probes}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: web}]
  rules: [{matches: [{path: {type: Exact, value: /ready}, method: GET}]}]
`,
  apiPolicy: `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {namespace: app, name: web-api-client}
spec:
  targetRef: {group: policy.linkerd.io, kind: HTTPRoute, name: web-api}
  requiredAuthenticationRefs: [{kind: ServiceAccount, name: client}]
`,
  probePolicy: `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {namespace: app, name: web-probes}
spec:
  targetRef: {group: policy.linkerd.io, kind: HTTPRoute, name: web-probes}
  requiredAuthenticationRefs: []
`,
};
type DocName = keyof typeof DOCS;
const ALL_DOCS = Object.keys(DOCS) as DocName[];

/** Joins documents and returns the text with each document's first line. */
function manifest(names: readonly DocName[]): { text: string; lines: Record<string, number> } {
  const lines: Record<string, number> = {};
  let line = 1;
  for (const n of names) {
    lines[n] = line;
    line += DOCS[n].split('\n').length; // the document's lines plus the `---` separator
  }
  return { text: names.map((n) => DOCS[n]).join('---\n'), lines };
}

const APP = manifest(ALL_DOCS);
const APP_FILE = write('app.yaml', APP.text);
/** Without the probe route and its policy: the readiness probe is denied (a warning). */
const WARN_FILE = write('warn.yaml', manifest(ALL_DOCS.filter((n) => n !== 'probeRoute' && n !== 'probePolicy')).text);
const BAD_FILE = write(
  'bad.yaml',
  `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {namespace: app, name: web}
spec:
  podSelector: {matchLabels: {app: web}}
  port: 8080
  proxyProtocol: HTTP1
`,
);

const ID = (sa: string) => `${sa}.app.serviceaccount.identity.linkerd.cluster.local`;

// === ward check ===

describe('ward check', () => {
  it('exit 0 and a one-line summary for a clean set', async () => {
    const r = await ward(['check', '-f', APP_FILE]);
    assert.deepStrictEqual(r, { status: 0, stdout: '✔ 10 resources checked: 0 errors, 0 warnings\n', stderr: '' });
  });

  it('exit 1 with a compiler-style error at the exact position', async () => {
    const r = await ward(['check', '-f', BAD_FILE]);
    assert.equal(r.status, 1);
    assert.equal(
      r.stdout,
      `${BAD_FILE}:7:18: error POL021 spec.proxyProtocol "HTTP1" is not a protocol [Server app/web]\n` +
        '  hint: use one of unknown, HTTP/1, HTTP/2, gRPC, opaque, TLS (exact spelling)\n' +
        '✖ 1 resources checked, 1 would be rejected by admission: 1 errors, 0 warnings\n',
    );
  });

  it('exit 2 for a file that does not exist', async () => {
    const missing = join(dir, 'missing.yaml');
    const r = await ward(['check', '-f', missing]);
    assert.equal(r.status, 2);
    // No line:col for a file that could not be read at all.
    assert.match(r.stdout, new RegExp(`^${missing.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: error POL003 cannot read `));
  });

  it('exit 2 without -f or with a bad cluster flag, with a message and no stack trace', async () => {
    assert.deepStrictEqual(await ward(['check']), {
      status: 2,
      stdout: '',
      stderr: 'error: no manifests: give -f PATH (a file, a directory, or - for stdin)\n',
    });
    const r = await ward(['check', '-f', APP_FILE, '--cluster-networks', '10.0.0.0/33']);
    assert.deepStrictEqual(r, { status: 2, stdout: '', stderr: 'error: --cluster-networks: "10.0.0.0/33" is not a CIDR\n' });
  });

  it('warnings do not fail', async () => {
    const r = await ward(['check', '-f', WARN_FILE]);
    assert.equal(r.status, 0);
    assert.match(r.stdout, /warning POL106 readiness probe GET \/ready on port 8080 of pod app\/web-0 would be denied \(no route matches on server\/web\)/);
    assert.match(r.stdout, /✔ 8 resources checked: 0 errors, 1 warnings\n$/);
  });

  it('-o json: every resource with its source and admission, and the diagnostics', async () => {
    const r = await ward(['check', '-f', APP_FILE, '-o', 'json']);
    assert.equal(r.status, 0);
    const kinds: Record<DocName, [string, string, string, string]> = {
      namespace: ['Namespace', 'v1', '', 'app'],
      web: ['Deployment', 'apps/v1', 'app', 'web'],
      grpc: ['Deployment', 'apps/v1', 'app', 'grpc'],
      webServer: ['Server', 'policy.linkerd.io/v1beta3', 'app', 'web'],
      metricsServer: ['Server', 'policy.linkerd.io/v1beta3', 'app', 'metrics'],
      grpcServer: ['Server', 'policy.linkerd.io/v1beta3', 'app', 'grpc'],
      apiRoute: ['HTTPRoute', 'policy.linkerd.io/v1beta3', 'app', 'web-api'],
      probeRoute: ['HTTPRoute', 'policy.linkerd.io/v1beta3', 'app', 'web-probes'],
      apiPolicy: ['AuthorizationPolicy', 'policy.linkerd.io/v1alpha1', 'app', 'web-api-client'],
      probePolicy: ['AuthorizationPolicy', 'policy.linkerd.io/v1alpha1', 'app', 'web-probes'],
    };
    assert.deepStrictEqual(JSON.parse(r.stdout), {
      resources: ALL_DOCS.map((n) => {
        const [kind, apiVersion, namespace, name] = kinds[n];
        return { kind, apiVersion, namespace, name, source: { file: APP_FILE, line: APP.lines[n], col: 1 }, admitted: true, diagnostics: [] };
      }),
      diagnostics: [],
    });
  });

  it('-o json: a rejected resource carries its error, also listed at the top level', async () => {
    const r = await ward(['check', '-f', BAD_FILE, '-o', 'json']);
    assert.equal(r.status, 1);
    const error = {
      code: 'POL021',
      severity: 'error',
      message: 'spec.proxyProtocol "HTTP1" is not a protocol',
      resource: { kind: 'Server', namespace: 'app', name: 'web' },
      path: ['spec', 'proxyProtocol'],
      source: { file: BAD_FILE, line: 7, col: 18 },
      hint: 'use one of unknown, HTTP/1, HTTP/2, gRPC, opaque, TLS (exact spelling)',
    };
    assert.deepStrictEqual(JSON.parse(r.stdout), {
      resources: [
        {
          kind: 'Server',
          apiVersion: 'policy.linkerd.io/v1beta3',
          namespace: 'app',
          name: 'web',
          source: { file: BAD_FILE, line: 1, col: 1 },
          admitted: false,
          diagnostics: [error],
        },
      ],
      diagnostics: [error],
    });
  });

  it('-o json: a lint warning has code, severity, message, resource, source and hint', async () => {
    const r = await ward(['check', '-f', WARN_FILE, '-o', 'json']);
    const { diagnostics } = JSON.parse(r.stdout) as { diagnostics: Record<string, unknown>[] };
    assert.deepStrictEqual(
      diagnostics.map(({ source: _source, ...d }) => d),
      [
        {
          code: 'POL106',
          severity: 'warning',
          message: 'readiness probe GET /ready on port 8080 of pod app/web-0 would be denied (no route matches on server/web)',
          resource: { kind: 'Pod', namespace: 'app', name: 'web-0' },
          path: ['spec', 'containers', 0, 'readinessProbe'],
          hint: 'add an HTTPRoute for /ready with an AuthorizationPolicy admitting the probe network, or authorize the Server',
        },
      ],
    );
    // Only the file: pods built from a workload do not map their paths into the template yet.
    assert.equal((diagnostics[0]?.source as { file?: string } | undefined)?.file, WARN_FILE);
  });

  it('-f - reads stdin', async () => {
    const r = await ward(['check', '-f', '-', '-o', 'json'], DOCS.webServer);
    assert.equal(r.status, 0);
    const out = JSON.parse(r.stdout) as { resources: { name: string; source: { file: string; line: number } }[] };
    assert.deepStrictEqual(
      out.resources.map((x) => [x.name, x.source.line]),
      [['web', 1]],
    );
    assert.deepStrictEqual((await ward(['check', '-f', '-'], 'apiVersion: v1\nkind: [\n')).status, 1);
  });
});

// === ward authz ===

describe('ward authz', () => {
  it('text: the policy view with defaults, probe and localhost authorizations listed', async () => {
    const r = await ward(['authz', '-f', APP_FILE, '-n', 'app', 'deploy/web']);
    assert.equal(r.status, 0);
    assert.equal(r.stderr, '');
    const rows = r.stdout
      .trimEnd()
      .split('\n')
      .map((l) => l.trim().split(/\s{3,}/));
    assert.deepStrictEqual(rows[0], ['POD', 'PORT', 'SERVER', 'PROTOCOL', 'ROUTE', 'AUTHORIZATION', 'ADMITS']);
    assert.deepStrictEqual(rows[1], [
      'app/web-0',
      '3306',
      'default/all-unauthenticated',
      'opaque',
      '*',
      'default/all-unauthenticated',
      'any client from 0.0.0.0/0, ::/0',
    ]);
    assert.deepStrictEqual(rows[2], ['*', 'default/localhost', 'any client from 127.0.0.1/32, ::1/128']);
    // The proxy's admin port keeps its automatic probe route.
    const admin = rows.findIndex((row) => row[0] === '4191');
    assert.deepStrictEqual(rows.slice(admin, admin + 4), [
      ['4191', 'default/all-unauthenticated', 'detect', '*', 'default/all-unauthenticated', 'any client from 0.0.0.0/0, ::/0'],
      ['*', 'default/localhost', 'any client from 127.0.0.1/32, ::1/128'],
      ['default/default', '(server authorizations)'],
      ['default/probe', 'default/probe', 'any client from 0.0.0.0/0, ::/0'],
    ]);
    assert.ok(rows.some((row) => row.join(' ') === '8080 server/web HTTP/1 * default/localhost any client from 127.0.0.1/32, ::1/128'));
  });

  it('-o json: every port of the pod, with routes and authorizations', async () => {
    const r = await ward(['authz', '-f', APP_FILE, '-n', 'app', 'deploy/web', '-o', 'json']);
    assert.equal(r.status, 0);
    type PortView = { port: number; server: unknown; protocol: string; authorizations: { name: string }[]; routes: unknown[] };
    const out = JSON.parse(r.stdout) as { pods: { namespace: string; name: string; serviceAccount: string; ports: PortView[] }[] };
    assert.deepStrictEqual(
      out.pods.map((p) => [p.namespace, p.name, p.serviceAccount, p.ports.map((x) => x.port)]),
      [['app', 'web-0', 'web', [3306, 4143, 4191, 8080, 9100]]],
    );
    const all = [
      { cidr: '0.0.0.0/0', except: [] },
      { cidr: '::/0', except: [] },
    ];
    const localhost = {
      group: '',
      kind: 'default',
      name: 'localhost',
      networks: [
        { cidr: '127.0.0.1/32', except: [] },
        { cidr: '::1/128', except: [] },
      ],
      authentication: { kind: 'unauthenticated' },
      admits: 'any client from 127.0.0.1/32, ::1/128',
    };
    assert.deepStrictEqual(
      out.pods[0]?.ports.find((p) => p.port === 8080),
      {
        port: 8080,
        server: { kind: 'server', name: 'web' },
        protocol: 'HTTP/1',
        authorizations: [localhost],
        routes: [
          {
            kind: 'HTTPRoute',
            name: 'web-api',
            authorizations: [
              {
                group: 'policy.linkerd.io',
                kind: 'authorizationpolicy',
                name: 'web-api-client',
                networks: all,
                authentication: { kind: 'tlsAuthenticated', identities: [ID('client')], suffixes: [] },
                admits: `mesh identities ${ID('client')} from 0.0.0.0/0, ::/0`,
              },
            ],
          },
          {
            kind: 'HTTPRoute',
            name: 'web-probes',
            authorizations: [
              {
                group: 'policy.linkerd.io',
                kind: 'authorizationpolicy',
                name: 'web-probes',
                networks: all,
                authentication: { kind: 'unauthenticated' },
                admits: 'any client from 0.0.0.0/0, ::/0',
              },
            ],
          },
        ],
      },
    );
  });

  it('-A covers every namespace; an unknown resource exits 2', async () => {
    const r = await ward(['authz', '-f', APP_FILE, '-A', 'pods', '-o', 'json']);
    assert.equal(r.status, 0);
    assert.deepStrictEqual(
      (JSON.parse(r.stdout) as { pods: { name: string }[] }).pods.map((p) => p.name),
      ['grpc-0', 'web-0'],
    );
    assert.deepStrictEqual(await ward(['authz', '-f', APP_FILE, 'deploy/web']), {
      status: 2,
      stdout: '',
      stderr: 'error: no meshed pods found for deploy/web in namespace default\n',
    });
    const bad = await ward(['authz', '-f', APP_FILE, 'svc/web']);
    assert.equal(bad.status, 2);
    assert.equal(
      bad.stderr,
      'error: unknown resource kind "svc" in "svc/web" (workloads: pod, deploy, sts, ds, rs, job, cj, ns; policy objects for `ward authz`: server (srv), authorizationpolicy, serverauthorization (saz), meshtlsauthentication, networkauthentication, httproute, grpcroute, traffictarget (tt), httproutegroup (htr), tcproute (tr), udproute (ur))\n',
    );
  });
});

// === ward explain ===

describe('ward explain', () => {
  const explain = async (...args: string[]) => {
    const r = await ward(['explain', '-f', APP_FILE, '-n', 'app', '-o', 'json', ...args]);
    assert.deepStrictEqual([r.status, r.stderr], [0, '']);
    return JSON.parse(r.stdout) as Record<string, unknown> & { chain: { step: string; detail: string }[] };
  };
  /** The verdict without the chain, for whole-object comparison. */
  const verdict = ({ chain: _chain, ...rest }: Record<string, unknown>) => rest;
  const server = (name: string) => ({ kind: 'server', name });

  it('allow: a route policy admits the ServiceAccount built by --from-sa', async () => {
    const r = await explain('--to', 'deploy/web:8080', '--http', 'GET /api/x', '--from-sa', 'app/client');
    assert.deepStrictEqual(verdict(r), {
      decision: 'allow',
      denyKind: null,
      level: 'http',
      server: server('web'),
      route: { kind: 'HTTPRoute', name: 'web-api' },
      authz: { group: 'policy.linkerd.io', kind: 'authorizationpolicy', name: 'web-api-client' },
    });
    assert.deepStrictEqual(
      r.chain.map((c) => c.step),
      ['target', 'client', 'server', 'protocol', 'request', 'route', 'route', 'authz', 'authz', 'verdict'],
    );
    assert.deepStrictEqual(r.chain[0], { step: 'target', detail: 'pod app/web-0 port 8080 (ServiceAccount web)' });
    assert.deepStrictEqual(r.chain[1], { step: 'client', detail: `10.0.0.1, mesh TLS as ${ID('client')}` });
    assert.deepStrictEqual(r.chain[9], {
      step: 'verdict',
      detail: 'allow: admitted by authorizationpolicy/web-api-client (the first authorization that matches)',
    });
  });

  it('--from-sa follows --trust-domain and --control-plane-namespace', async () => {
    const r = await explain('--to', 'deploy/web:8080', '--http', 'GET /api/x', '--from-sa', 'app/client', '--trust-domain', 'example.org');
    assert.deepStrictEqual(r.chain[1], { step: 'client', detail: '10.0.0.1, mesh TLS as client.app.serviceaccount.identity.linkerd.example.org' });
    assert.equal(r.decision, 'allow');
  });

  it('http403: the route matches but no authorization admits a plaintext client', async () => {
    const r = await explain('--to', 'pod/app/web-0:8080', '--http', 'GET /api/x', '--from-ip', '10.9.8.7');
    assert.deepStrictEqual(verdict(r), {
      decision: 'deny',
      denyKind: 'http403',
      level: 'http',
      server: server('web'),
      route: { kind: 'HTTPRoute', name: 'web-api' },
      authz: null,
    });
    assert.deepStrictEqual(r.chain[1], { step: 'client', detail: '10.9.8.7, plaintext' });
  });

  it('http404: no route matches', async () => {
    const r = await explain('--to', 'deploy/web:8080', '--http', 'GET /nope');
    assert.deepStrictEqual(verdict(r), { decision: 'deny', denyKind: 'http404', level: 'http', server: server('web'), route: null, authz: null });
  });

  it('grpc7: a gRPC Server without authorizations', async () => {
    const r = await explain('--to', 'deploy/grpc:9090', '--grpc', 'pkg.Svc/Call', '--from-sa', 'app/web');
    assert.deepStrictEqual(verdict(r), {
      decision: 'deny',
      denyKind: 'grpc7',
      level: 'http',
      server: server('grpc'),
      route: { kind: 'default', name: 'default' },
      authz: null,
    });
  });

  it('tcp-refuse: an opaque port under a deny default', async () => {
    const r = await explain('--default-policy', 'deny', '--to', 'deploy/web:3306', '--tcp');
    assert.deepStrictEqual(verdict(r), {
      decision: 'deny',
      denyKind: 'tcp-refuse',
      level: 'tcp',
      server: { kind: 'default', name: 'deny' },
      route: null,
      authz: null,
    });
    assert.deepStrictEqual(r.chain[1], { step: 'client', detail: '10.0.0.1, plaintext (TLS detection is skipped on opaque ports)' });
  });

  it('audit-allow: only the audit accessPolicy admits the request', async () => {
    const r = await explain('--to', 'deploy/web:9100', '--http', 'GET /metrics');
    assert.deepStrictEqual(verdict(r), {
      decision: 'audit-allow',
      denyKind: null,
      level: 'http',
      server: server('metrics'),
      route: { kind: 'default', name: 'default' },
      authz: { group: '', kind: 'default', name: 'audit' },
    });
  });

  it('text output leads with the verdict line', async () => {
    const r = await ward(['explain', '-f', APP_FILE, '--to', 'pod/app/web-0:8080', '--http', 'GET /nope']);
    assert.equal(r.status, 0);
    assert.equal(r.stdout.split('\n')[0], 'DENY (http404)  level http, server/web');
  });

  const usage: [string, string[], string][] = [
    ['a --to without port', ['--to', 'deploy/web'], 'error: --to "deploy/web" needs a port: pod/NS/NAME:PORT or deploy/NAME:PORT\n'],
    ['a port out of range', ['--to', 'pod/app/web-0:0'], 'error: --to "pod/app/web-0:0": port must be 1-65535\n'],
    ['an unknown pod', ['--to', 'pod/app/nope:80'], 'error: pod app/nope not found in the manifests\n'],
    ['an unknown workload', ['--to', 'deploy/nope:80', '-n', 'app'], 'error: Deployment app/nope not found in the manifests (or it has no meshed pods)\n'],
    ['a bad --tls', ['--to', 'pod/app/web-0:80', '--tls', 'bogus'], 'error: --tls must be one of none, mesh, no-client-cert, passthrough\n'],
    [
      '--tls mesh without identity',
      ['--to', 'pod/app/web-0:80', '--tls', 'mesh'],
      'error: --tls mesh needs --from-identity or --from-sa (use --tls no-client-cert for TLS without a certificate)\n',
    ],
    ['a bad --from-sa', ['--to', 'pod/app/web-0:80', '--from-sa', 'client'], 'error: --from-sa wants NAMESPACE/NAME, got "client"\n'],
    ['a bad --from-ip', ['--to', 'pod/app/web-0:80', '--from-ip', '10.0.0.300'], 'error: client IP "10.0.0.300" is not an IP address\n'],
    ['two traffic kinds', ['--to', 'pod/app/web-0:80', '--tcp', '--http', 'GET /'], 'error: give only one of --http, --grpc and --tcp\n'],
  ];
  for (const [what, args, stderr] of usage) {
    it(`exit 2 for ${what}, with a message and no stack trace`, async () => {
      assert.deepStrictEqual(await ward(['explain', '-f', APP_FILE, ...args]), { status: 2, stdout: '', stderr });
    });
  }
});

// === ward test ===

describe('ward test', () => {
  const suite = (name: string, tests: string) =>
    write(
      name,
      `cluster:
  defaultPolicy: deny
manifests: [./app.yaml]
tests:
${tests}`,
    );
  const PASSING = `  - name: client may call the API
    to: {workload: deploy/web, namespace: app, port: 8080}
    from: {identity: ${ID('client')}}
    http: {method: GET, path: /api/items}
    expect: {decision: allow, server: server/web, route: HTTPRoute/web-api, authz: authorizationpolicy/web-api-client}
  - name: mysql is closed <&>
    to: {pod: app/web-0, port: 3306}
    tcp: true
    expect: {decision: deny, denyKind: tcp-refuse, level: tcp, server: default/deny, route: null, authz: null}
`;
  const FAILING = `  - name: anonymous may call the API
    to: {pod: app/web-0, port: 8080}
    http: {method: GET, path: /api/items}
    expect: {decision: allow}
`;

  it('passing tests exit 0 with a summary', async () => {
    const r = await ward(['test', suite('pass.yaml', PASSING)]);
    assert.deepStrictEqual(r, { status: 0, stdout: '✔ client may call the API\n✔ mysql is closed <&>\n\n2 passed, 0 failed\n', stderr: '' });
  });

  it('a failing test exits 1 and shows the mismatch with the chain', async () => {
    const r = await ward(['test', suite('fail.yaml', FAILING)]);
    assert.equal(r.status, 1);
    const lines = r.stdout.split('\n');
    assert.deepStrictEqual(lines.slice(0, 3), [
      '✖ anonymous may call the API',
      '    decision: expected allow, got deny',
      '    DENY (http403)  level http, server/web, route HTTPRoute/web-api',
    ]);
    assert.match(r.stdout, /\n0 passed, 1 failed\n$/);
  });

  it('-o json: results with suite, name, passed, expected, actual; and the counts', async () => {
    const file = suite('mixed.yaml', PASSING + FAILING);
    const r = await ward(['test', file, '-o', 'json']);
    assert.equal(r.status, 1);
    const out = JSON.parse(r.stdout) as { results: Record<string, unknown>[]; passed: number; failed: number };
    assert.deepStrictEqual(Object.keys(out), ['results', 'passed', 'failed']);
    assert.deepStrictEqual([out.passed, out.failed], [2, 1]);
    assert.deepStrictEqual(
      out.results.map((x) => Object.keys(x)),
      [0, 1, 2].map(() => ['suite', 'name', 'passed', 'expected', 'actual']),
    );
    const { actual, ...rest } = out.results[2] as { actual: Record<string, unknown> };
    assert.deepStrictEqual(rest, { suite: file, name: 'anonymous may call the API', passed: false, expected: { decision: 'allow' } });
    const { chain, ...verdict } = actual;
    assert.deepStrictEqual(verdict, {
      decision: 'deny',
      denyKind: 'http403',
      level: 'http',
      server: { kind: 'server', name: 'web' },
      route: { kind: 'HTTPRoute', name: 'web-api' },
      authz: null,
    });
    assert.ok(Array.isArray(chain) && chain.length > 0);
    assert.deepStrictEqual(out.results[1]?.expected, {
      decision: 'deny',
      denyKind: 'tcp-refuse',
      level: 'tcp',
      server: 'default/deny',
      route: null,
      authz: null,
    });
  });

  it('-o junit: well-formed XML with a testcase per test and a failure element per failed test', async () => {
    const r = await ward(['test', suite('junit.yaml', PASSING + FAILING), '-o', 'junit']);
    assert.equal(r.status, 1);
    const xml = r.stdout;
    assert.ok(xml.startsWith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="3" failures="1">\n'));
    assertWellFormed(xml);
    const cases = [...xml.matchAll(/<testcase classname="[^"]*" name="([^"]*)">(<failure message="([^"]*)">)?/g)].map((m) => [m[1], m[3] ?? null]);
    assert.deepStrictEqual(cases, [
      ['client may call the API', null],
      ['mysql is closed &lt;&amp;&gt;', null],
      ['anonymous may call the API', 'decision: expected allow, got deny'],
    ]);
    assert.match(xml, /<testsuite name="[^"]*junit\.yaml" tests="3" failures="1">/);
  });

  const broken: [string, string, string][] = [
    [
      'an unknown expect key',
      `tests:
  - name: x
    to: {pod: app/web-0, port: 8080}
    expect:
      decision: allow
      verdict: allow
`,
      ':6:7: error POL201 test suite: tests.0.expect.verdict: unknown key (use decision, denyKind, level, server, route, authz)\n',
    ],
    ['no tests', 'manifests: [./app.yaml]\n', ':1:1: error POL201 test suite: tests: must list at least one test\n'],
    ['a YAML syntax error', 'tests:\n  - name: [unclosed\n', ':3:1: error POL001 YAML syntax error: BAD_INDENT: '],
    ['an alias bomb', aliasBomb(), ':1:1: error POL001 YAML syntax error: Excessive alias count indicates a resource exhaustion attack\n'],
    [
      'a bad cluster value',
      'cluster: {defaultPolicy: allow}\ntests: []\n',
      ':1:10: error POL201 test suite: cluster: --default-policy "allow" is not a default policy',
    ],
  ];
  for (const [what, text, expected] of broken) {
    it(`a broken suite (${what}) exits 2 with file:line:col`, async () => {
      const file = write(`broken-${what.replaceAll(' ', '-')}.yaml`, text);
      const r = await ward(['test', file]);
      assert.equal(r.status, 2);
      assert.equal(r.stdout, '');
      assert.ok(r.stderr.startsWith(`${file}${expected}`), r.stderr);
      assert.doesNotMatch(r.stderr, /\n\s+at /);
    });
  }

  it('a missing suite file exits 2', async () => {
    const r = await ward(['test', join(dir, 'nope.yaml')]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /error POL003 cannot read /);
  });

  it('a suite whose manifests have errors exits 2 with their positions', async () => {
    const file = write('bad-manifests.yaml', `manifests: [./bad.yaml]\n${'tests:\n'}${FAILING}`);
    const r = await ward(['test', file]);
    assert.equal(r.status, 2);
    assert.equal(r.stderr.split('\n')[0], `${BAD_FILE}:7:18: error POL021 spec.proxyProtocol "HTTP1" is not a protocol [Server app/web]`);
  });
});

// === ward diagnostics policy ===

describe('ward diagnostics policy', () => {
  const opaqueDefault = {
    protocol: { opaque: {} },
    authorizations: [
      {
        networks: [{ net: { ip: { ipv4: 0 } } }, { net: { ip: { ipv6: {} } } }],
        authentication: { unauthenticated: {} },
        labels: { group: '', kind: 'default', name: 'all-unauthenticated' },
        metadata: { default: 'all-unauthenticated' },
      },
    ],
    labels: { group: '', kind: 'default', name: 'all-unauthenticated' },
  };

  it('-o json prints the inbound.Server message in the proto3 JSON mapping', async () => {
    const r = await ward(['diagnostics', 'policy', '-f', APP_FILE, 'pod/app/web-0', '3306', '-o', 'json']);
    assert.equal(r.status, 0);
    assert.deepStrictEqual(JSON.parse(r.stdout), opaqueDefault);
  });

  it('yaml (the default) prints the same message', async () => {
    const r = await ward(['diagnostics', 'policy', '-f', APP_FILE, '-n', 'app', 'pod/web-0', '3306']);
    assert.equal(r.status, 0);
    assert.deepStrictEqual(parse(r.stdout), opaqueDefault);
  });

  it('a Server-bound port names the Server', async () => {
    const r = await ward(['diagnostics', 'policy', '-f', APP_FILE, 'pod/app/grpc-0', '9090', '-o', 'json']);
    const msg = JSON.parse(r.stdout) as { labels: unknown; authorizations?: unknown };
    assert.deepStrictEqual(msg.labels, { group: 'policy.linkerd.io', kind: 'server', name: 'grpc' });
    assert.equal(msg.authorizations, undefined, 'a Server without authorizations has none');
  });

  it('usage errors exit 2', async () => {
    assert.deepStrictEqual(await ward(['diagnostics', 'policy', '-f', APP_FILE, 'pod/app/nope', '80']), {
      status: 2,
      stdout: '',
      stderr: 'error: pod app/nope not found (unknown server)\n',
    });
    assert.deepStrictEqual(await ward(['diagnostics', 'policy', '-f', APP_FILE, 'pod/app/web-0', '70000']), {
      status: 2,
      stdout: '',
      stderr: 'error: invalid port "70000" (1-65535)\n',
    });
    assert.deepStrictEqual(await ward(['diagnostics', 'policy', '-f', APP_FILE, 'deploy/web', '80']), {
      status: 2,
      stdout: '',
      stderr: 'error: expected pod/NAME or pod/NAMESPACE/NAME, got "deploy/web"\n',
    });
  });
});

// === helpers ===

/** A YAML document whose aliases expand exponentially. */
function aliasBomb(): string {
  const lines = ['a0: &a0 [x, x, x, x, x, x, x, x, x, x]'];
  for (let i = 1; i < 12; i++)
    lines.push(
      `a${i}: &a${i} [${Array(10)
        .fill(`*a${i - 1}`)
        .join(', ')}]`,
    );
  return `${lines.join('\n')}\ntests: *a11\n`;
}

/** Minimal XML well-formedness check: balanced tags, quoted attributes, no raw `<` or `&` in text. */
function assertWellFormed(xml: string): void {
  const body = xml.replace(/^<\?xml[^>]*\?>\n/, '');
  const stack: string[] = [];
  const tag = /<(\/?)([A-Za-z]+)((?:\s+[A-Za-z]+="[^"<&]*(?:&(?:lt|gt|amp|quot|apos);[^"<&]*)*")*)\s*(\/?)>/y;
  let i = 0;
  while (i < body.length) {
    const lt = body.indexOf('<', i);
    const text = body.slice(i, lt === -1 ? body.length : lt);
    assert.doesNotMatch(text, /&(?!(lt|gt|amp|quot|apos);)/, `raw & in text: ${text}`);
    if (lt === -1) break;
    tag.lastIndex = lt;
    const m = tag.exec(body);
    assert.ok(m !== null, `malformed tag at ${body.slice(lt, lt + 60)}`);
    const [, close, name, , selfClose] = m;
    if (close === '/') assert.equal(stack.pop(), name);
    else if (selfClose !== '/') stack.push(name as string);
    i = tag.lastIndex;
  }
  assert.deepStrictEqual(stack, [], 'every element is closed');
}

describe('ward check: namespace annotations and pod creation', () => {
  const ns = `apiVersion: v1
kind: Namespace
metadata:
  name: late
  annotations: {linkerd.io/inject: enabled, config.linkerd.io/default-inbound-policy: deny}
---
`;
  const pod = (annotations: string, extraContainer: string, labels = '') => `apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: late
  labels: {${labels}}
  annotations: {${annotations}}
spec:
  containers:
  - {name: app, ports: [{containerPort: 8080}]}
${extraContainer}`;

  it('a pod created here that overrides the namespace default on purpose is not flagged', async () => {
    const f = write('override.yaml', ns + pod('config.linkerd.io/default-inbound-policy: all-unauthenticated', ''));
    const r = await ward(['check', '-f', f, '-o', 'json']);
    const codes = (JSON.parse(r.stdout) as { diagnostics: { code: string }[] }).diagnostics.map((d) => d.code);
    assert.deepEqual(codes, []);
  });

  it('a pod that was already injected with an older value is flagged POL108', async () => {
    const f = write('stale.yaml', ns + pod('linkerd.io/proxy-version: stable', '  - {name: linkerd-proxy}\n', 'linkerd.io/control-plane-ns: linkerd'));
    const r = await ward(['check', '-f', f, '-o', 'json']);
    const d = (JSON.parse(r.stdout) as { diagnostics: { code: string; message: string }[] }).diagnostics;
    assert.deepEqual(
      d.map((x) => x.code),
      ['POL108'],
    );
    assert.match(d[0]?.message ?? '', /pod late\/p was created with \(unset\)/);
  });
});
