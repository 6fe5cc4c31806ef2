import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type DecodeResult, decodeResource, formatPath } from './decode.js';
import { documentFromObject, parseManifestText } from './load.js';
import type { Resource } from './types.js';

/** Decodes every document of an inline YAML file named `t.yaml`. */
function decodeAll(text: string): DecodeResult[] {
  const r = parseManifestText(text, 't.yaml');
  assert.deepEqual(r.diagnostics, []);
  return r.documents.map(decodeResource);
}

function decodeOne(text: string): DecodeResult {
  const [r, ...rest] = decodeAll(text);
  assert.ok(r);
  assert.equal(rest.length, 0);
  return r;
}

function ok(text: string): Resource {
  const r = decodeOne(text);
  assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
  return (r as Extract<DecodeResult, { status: 'ok' }>).resource;
}

/** `code@line:col` of every diagnostic, for compact exact assertions. */
function where(r: DecodeResult): string[] {
  return r.diagnostics.map((d) => `${d.code}@${d.source?.line}:${d.source?.col}`);
}

const server = (version: string, spec: string) => `apiVersion: policy.linkerd.io/${version}
kind: Server
metadata:
  namespace: app
  name: web
spec:
  podSelector: {matchLabels: {app: web}}
${spec}`;

describe('decodeResource: Server', () => {
  it('reports a bad proxyProtocol as POL021 at its exact position', () => {
    const r = decodeOne(server('v1beta3', '  port: 8080\n  proxyProtocol: HTTP/3\n'));
    assert.equal(r.status, 'invalid');
    assert.deepEqual(where(r), ['POL021@9:18']);
    assert.equal(r.diagnostics[0]?.message, 'spec.proxyProtocol "HTTP/3" is not a protocol');
    assert.deepEqual(r.diagnostics[0]?.resource, { kind: 'Server', namespace: 'app', name: 'web' });
    assert.deepEqual(r.diagnostics[0]?.path, ['spec', 'proxyProtocol']);
    if (r.status === 'invalid') {
      assert.deepEqual(r.ref, { kind: 'Server', apiVersion: 'policy.linkerd.io/v1beta3', group: 'policy.linkerd.io', namespace: 'app', name: 'web' });
    }
  });

  it('keeps a quoted port as the string and applies defaults', () => {
    const res = ok(server('v1beta3', '  port: "8080"\n'));
    assert.deepEqual(res.metadata, { namespace: 'app', name: 'web', labels: {}, annotations: {} });
    assert.deepEqual(res.spec, { podSelector: { matchLabels: { app: 'web' } }, port: '8080', proxyProtocol: 'unknown' });
    assert.equal(res.origin?.source.line, 1);
  });

  it('rejects port numbers outside 1-65535 with POL022', () => {
    for (const port of [0, 65536]) {
      const r = decodeOne(server('v1beta3', `  port: ${port}\n`));
      assert.equal(r.status, 'invalid');
      assert.deepEqual(where(r), ['POL022@8:9']);
      assert.equal(r.diagnostics[0]?.message, `spec.port ${port} is out of range`);
    }
    const r = decodeOne(server('v1beta3', '  port: 80.5\n'));
    assert.deepEqual(where(r), ['POL010@8:9']);
    assert.equal(r.diagnostics[0]?.message, 'spec.port: expected an integer or a string, got number 80.5');
  });

  it('warns about and drops fields a version does not have', () => {
    const r = decodeOne(server('v1beta1', '  port: 8080\n  accessPolicy: all-unauthenticated\n  externalWorkloadSelector: {}\n'));
    assert.equal(r.status, 'ok');
    assert.deepEqual(where(r), ['POL011@9:17', 'POL011@10:29']);
    assert.equal(r.diagnostics[0]?.severity, 'warning');
    assert.equal(r.diagnostics[0]?.message, 'spec.accessPolicy: unknown field; the API server would drop it');
    assert.equal(r.diagnostics[0]?.hint, 'check the spelling against the Server policy.linkerd.io/v1beta1 schema');
    if (r.status === 'ok') assert.equal('accessPolicy' in r.resource.spec, false);
    // v1beta3 has both fields and keeps accessPolicy as raw text (validated by admission).
    const v3 = ok(server('v1beta3', '  port: 8080\n  accessPolicy: bogus\n'));
    assert.equal(v3.kind === 'Server' && v3.spec.accessPolicy, 'bogus');
  });

  it('reports a missing required field as POL012 at the enclosing object', () => {
    const r = decodeOne(server('v1beta3', '  proxyProtocol: opaque\n'));
    assert.deepEqual(where(r), ['POL012@7:3']);
    assert.equal(r.diagnostics[0]?.message, 'spec.port: required field is missing');
  });

  it('reports every problem of a document, not just the first', () => {
    const r = decodeOne(server('v1beta3', '  port: 0\n  proxyProtocol: http\n  bogus: 1\n'));
    assert.deepEqual(where(r).sort(), ['POL011@10:10', 'POL021@9:18', 'POL022@8:9']);
  });
});

describe('decodeResource: versions and kinds', () => {
  it('gives POL005 for a known kind in an unsupported version, naming the supported ones', () => {
    const r = decodeOne('apiVersion: policy.linkerd.io/v1beta9\nkind: Server\nmetadata: {name: a}\nspec: {port: 1}\n');
    assert.equal(r.status, 'invalid');
    assert.deepEqual(where(r), ['POL005@1:13']);
    assert.equal(
      r.diagnostics[0]?.hint,
      'supported versions: policy.linkerd.io/v1alpha1, policy.linkerd.io/v1beta1, policy.linkerd.io/v1beta2, policy.linkerd.io/v1beta3',
    );
    const cron = decodeOne('apiVersion: apps/v1\nkind: CronJob\nmetadata: {name: a}\n');
    assert.equal(cron.status, 'invalid');
    assert.equal(cron.diagnostics[0]?.hint, 'supported versions: batch/v1');
  });

  it('ignores kinds ward does not read with one POL004 info, including same-named kinds of other groups', () => {
    const [cm, knative] = decodeAll(
      'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: a}\n',
    );
    assert.equal(cm?.status, 'ignored');
    assert.deepEqual(cm && where(cm), ['POL004@1:1']);
    assert.equal(cm?.diagnostics[0]?.severity, 'info');
    assert.equal(knative?.status, 'ignored');
    assert.deepEqual(knative && where(knative), ['POL004@5:1']);
  });

  it('gives POL002 for documents that are not objects', () => {
    const r = decodeResource(documentFromObject(['a']));
    assert.equal(r.status, 'invalid');
    assert.deepEqual(
      r.diagnostics.map((d) => [d.code, d.message]),
      [['POL002', 'document is not a Kubernetes object: expected a mapping, got a list']],
    );
  });

  it('keeps every decodable document of a multi-document file', () => {
    const rs = decodeAll(
      `${server('v1beta3', '  port: 8080\n')}---\n${server('v1beta3', '  port: web\n  proxyProtocol: HTTP/9\n')}---\n${server('v1beta2', '  port: 9090\n')}`,
    );
    assert.deepEqual(
      rs.map((r) => r.status),
      ['ok', 'invalid', 'ok'],
    );
    assert.deepEqual(where(rs[1] as DecodeResult), ['POL021@18:18']);
  });
});

describe('decodeResource: authorization kinds', () => {
  it('parses ServerAuthorization networks and defaults the booleans', () => {
    const res = ok(`apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {name: saz, namespace: app}
spec:
  server: {name: web}
  client:
    networks:
    - cidr: 10.0.0.0/8
      except: [10.1.2.3, "10.2.0.0/16"]
    - cidr: fd00::/8
    meshTLS:
      identities: ["*"]
`);
    assert.deepEqual(res.spec, {
      server: { name: 'web' },
      client: {
        networks: [
          {
            net: { ip: '10.0.0.0', prefixLen: 8 },
            except: [
              { ip: '10.1.2.3', prefixLen: 32 },
              { ip: '10.2.0.0', prefixLen: 16 },
            ],
          },
          { net: { ip: 'fd00::', prefixLen: 8 }, except: [] },
        ],
        unauthenticated: false,
        meshTLS: { unauthenticatedTLS: false, identities: ['*'] },
      },
    });
  });

  it('reports an invalid CIDR as POL032 at the exact list entry', () => {
    const r = decodeOne(`apiVersion: policy.linkerd.io/v1alpha1
kind: NetworkAuthentication
metadata: {name: n, namespace: app}
spec:
  networks:
  - cidr: 10.0.0.0/33
  - cidr: 10.0.0.0/8
    except:
    - 10.1.0.0/16
    - bogus
`);
    assert.equal(r.status, 'invalid');
    assert.deepEqual(where(r), ['POL032@6:11', 'POL032@10:7']);
    assert.equal(r.diagnostics[1]?.message, '"bogus" is not a CIDR or IP address');
    assert.deepEqual(r.diagnostics[1]?.path, ['spec', 'networks', 1, 'except', 1]);
  });

  it('keeps an absent requiredAuthenticationRefs distinguishable from an empty one', () => {
    const ap = (refs: string) => `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: p, namespace: app}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web}
${refs}`;
    const absent = ok(ap(''));
    const empty = ok(ap('  requiredAuthenticationRefs: []\n'));
    assert.equal(absent.kind === 'AuthorizationPolicy' && absent.spec.requiredAuthenticationRefs, undefined);
    assert.deepEqual(empty.kind === 'AuthorizationPolicy' && empty.spec.requiredAuthenticationRefs, []);
  });
});

describe('decodeResource: routes', () => {
  const route = (apiVersion: string, rules: string) => `apiVersion: ${apiVersion}
kind: HTTPRoute
metadata: {name: r, namespace: app}
spec:
  parentRefs:
  - name: web
    kind: Server
  - name: gw
  rules:
${rules}`;

  it('applies CRD defaults: parentRef group per API group, kind Gateway, path, header type', () => {
    const rules = '  - matches:\n    - path: {}\n      headers: [{name: x-a, value: b}]\n      method: GET\n';
    const linkerd = ok(route('policy.linkerd.io/v1beta3', rules));
    assert.deepEqual(linkerd.spec, {
      group: 'policy.linkerd.io',
      parentRefs: [
        { group: 'policy.linkerd.io', kind: 'Server', name: 'web' },
        { group: 'policy.linkerd.io', kind: 'Gateway', name: 'gw' },
      ],
      hostnames: [],
      rules: [{ matches: [{ path: { type: 'PathPrefix', value: '/' }, headers: [{ type: 'Exact', name: 'x-a', value: 'b' }], method: 'GET' }] }],
    });
    const gateway = ok(route('gateway.networking.k8s.io/v1', rules));
    assert.equal(gateway.kind === 'HTTPRoute' && gateway.spec.group, 'gateway.networking.k8s.io');
    assert.deepEqual(gateway.kind === 'HTTPRoute' && gateway.spec.parentRefs.map((p) => p.group), ['gateway.networking.k8s.io', 'gateway.networking.k8s.io']);
  });

  it('warns about rule fields older Linkerd versions lack', () => {
    const rules = '  - backendRefs: [{name: web, port: 80}]\n    timeouts: {request: 10s}\n';
    assert.deepEqual(where(decodeOne(route('policy.linkerd.io/v1beta1', rules))), ['POL011@10:18', 'POL011@11:15']);
    assert.deepEqual(where(decodeOne(route('policy.linkerd.io/v1beta2', rules))), ['POL011@11:15']);
    assert.deepEqual(where(decodeOne(route('policy.linkerd.io/v1beta3', rules))), []);
    assert.deepEqual(where(decodeOne(route('gateway.networking.k8s.io/v1beta1', rules))), []);
  });

  it('rejects an unknown method with POL010 listing the methods', () => {
    const r = decodeOne(route('policy.linkerd.io/v1beta3', '  - matches:\n    - method: FETCH\n'));
    assert.equal(r.status, 'invalid');
    assert.deepEqual(where(r), ['POL010@11:15']);
    assert.equal(
      r.diagnostics[0]?.message,
      'spec.rules[0].matches[0].method: invalid option "FETCH" (expected one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH)',
    );
  });

  it('decodes GRPCRoute with an Exact method match by default', () => {
    const res = ok(`apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g, namespace: app}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: grpc}]
  rules:
  - matches: [{method: {service: pkg.Svc}}]
`);
    assert.equal(res.kind, 'GRPCRoute');
    assert.deepEqual(res.kind === 'GRPCRoute' && res.spec.rules, [{ matches: [{ method: { type: 'Exact', service: 'pkg.Svc' } }] }]);
  });
});

describe('decodeResource: core kinds', () => {
  it('decodes a Pod leniently, with serviceAccount as a fallback and status.podIP', () => {
    const r = decodeOne(`apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels: {app: web}
  creationTimestamp: 2024-05-01T10:00:00Z
  ownerReferences: [{kind: ReplicaSet, name: x}]
spec:
  serviceAccount: web
  nodeSelector: {a: b}
  containers:
  - name: app
    image: web:1
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {httpGet: {port: http, path: /ready}, periodSeconds: 5}
status:
  podIP: 10.0.0.5
  phase: Running
`);
    assert.equal(r.status, 'ok');
    assert.deepEqual(r.diagnostics, []);
    if (r.status !== 'ok') return;
    const { origin, ...rest } = r.resource;
    assert.ok(origin);
    assert.deepEqual(rest, {
      kind: 'Pod',
      apiVersion: 'v1',
      metadata: { namespace: 'default', name: 'web-0', labels: { app: 'web' }, annotations: {}, creationTimestamp: '2024-05-01T10:00:00Z' },
      spec: {
        serviceAccountName: 'web',
        containers: [
          {
            name: 'app',
            image: 'web:1',
            ports: [{ name: 'http', containerPort: 8080 }],
            // Probe timing is kept: local mode (`ward up`) runs the probes.
            readinessProbe: { httpGet: { port: 'http', path: '/ready' }, periodSeconds: 5 },
          },
        ],
      },
      status: { podIP: '10.0.0.5', phase: 'Running' },
    });
  });

  it('gives a Namespace the empty namespace and treats null fields as absent', () => {
    const res = ok('apiVersion: v1\nkind: Namespace\nmetadata:\n  name: app\n  namespace: x\n  labels:\n');
    assert.deepEqual(res.metadata, { namespace: '', name: 'app', labels: {}, annotations: {} });
  });

  it('decodes workloads with their replicas and template', () => {
    const tmpl = 'template:\n      metadata: {labels: {app: w}}\n      spec: {containers: [{name: c}]}';
    const [dep, ds, cron] = decodeAll(`apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  replicas: 3
  selector: {matchLabels: {app: w}}
  ${tmpl.replace(/\n {6}/g, '\n    ')}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds}
spec:
  ${tmpl.replace(/\n {6}/g, '\n    ')}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cj}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      ${tmpl.replace(/\n {6}/g, '\n        ')}
`);
    const expectedTemplate = { metadata: { labels: { app: 'w' }, annotations: {} }, spec: { containers: [{ name: 'c' }] } };
    for (const [r, kind, replicas] of [
      [dep, 'Deployment', 3],
      [ds, 'DaemonSet', 1],
      [cron, 'CronJob', 1],
    ] as const) {
      assert.equal(r?.status, 'ok', JSON.stringify(r?.diagnostics));
      if (r?.status !== 'ok') continue;
      assert.equal(r.resource.kind, kind);
      assert.deepEqual(r.resource.spec, { replicas, template: expectedTemplate });
    }
  });

  it('positions errors inside a CronJob template at the written path', () => {
    const r = decodeOne(`apiVersion: batch/v1
kind: CronJob
metadata: {name: cj}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: c
            ports: [{containerPort: 0}]
`);
    assert.equal(r.status, 'invalid');
    assert.deepEqual(where(r), ['POL010@11:37']);
    assert.equal(r.diagnostics[0]?.message, 'spec.jobTemplate.spec.template.spec.containers[0].ports[0].containerPort: must be at least 1');
  });
});

describe('formatPath', () => {
  it('renders fields and indexes', () => {
    assert.equal(formatPath(['spec', 'rules', 0, 'matches', 12, 'path']), 'spec.rules[0].matches[12].path');
    assert.equal(formatPath([]), '(document)');
  });
});
